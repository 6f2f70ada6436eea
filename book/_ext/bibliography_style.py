"""One citation style: the bibliography's labels are author–year, like the citations in the text.

The text cites author–year (``bibtex_reference_style: author_year``); pybtex's default labels are
``alpha`` ([SFH17]), so the list at the end did not look like what the text points to. This registers the
pybtex style ``capsule_lab`` (unsrt formatting, sorted by author, year, title) whose labels are
"Sabour et al., 2017", "Gu and Tresp, 2020", "Faria, 2019"; _config.yml selects it with
``bibtex_default_style``.
"""

from __future__ import annotations

import re

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting.author_year_title import SortingStyle


def _surname(person) -> str:
    """A person's last name(s) without BibTeX braces and accents commands ({\\"o} -> o)."""
    text = " ".join(person.prelast_names + person.last_names)
    text = re.sub(r"\\[^a-zA-Z]|\\[a-zA-Z]+\s*", "", text)
    return text.replace("{", "").replace("}", "").strip()


def author_year_label(entry) -> str:
    """'Sabour et al., 2017', 'Gu and Tresp, 2020' or 'Faria, 2019' for a pybtex entry with authors and year."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    year = entry.fields.get("year", "")
    if not persons or not year:
        raise ValueError(f"bibliography entry {entry.key!r} needs an author (or editor) and a year")
    names = [_surname(p) for p in persons]
    if len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {year}"


class AuthorYearLabelStyle(BaseLabelStyle):
    """Author–year labels, with a, b, ... appended when two entries would share one."""

    def format_labels(self, sorted_entries):
        labels = [author_year_label(entry) for entry in sorted_entries]
        counts = {label: labels.count(label) for label in labels}
        seen: dict[str, int] = {}
        for label in labels:
            if counts[label] > 1:
                seen[label] = seen.get(label, 0) + 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]
            else:
                yield label


class CapsuleLabStyle(UnsrtStyle):
    """unsrt entries, author–year labels, sorted by author, year and title."""

    default_label_style = AuthorYearLabelStyle
    default_sorting_style = SortingStyle


def setup(app):
    register_plugin("pybtex.style.formatting", "capsule_lab", CapsuleLabStyle)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
