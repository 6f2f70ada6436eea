"""Keep the chapters' numbered equations and reference lists in order: one text for the book and for Jupyter.

A chapter is read in two places: the book (Sphinx and MyST) and Jupyter or Colab, which render plain Markdown
and know nothing of MyST's roles and directives. So the chapters use only what both render:

- a citation is ``[<a href="#ref-KEY">Sabour et al., 2017</a>]``, KEY a key of ``book/references.bib``;
- the chapter's last Markdown cell, ``## References``, lists the works it cites, each entry starting with
  ``<a id="ref-KEY"></a>``, formatted from ``book/references.bib`` in the book's style (the one
  ``book/_ext/bibliography_style.py`` registers for ``book/bibliography.md``), so the links land in the notebook;
- a numbered equation is an anchor line, a blank line and a display equation tagged with its chapter's number::

      <a id="eq-routing-softmax"></a>

      $$
      c_{ij} = ... \\tag{2.1}
      $$

  and a reference to it is ``<a href="#eq-routing-softmax">(2.1)</a>``;
- a note or a warning is a block quote that starts with its title in bold.

Raw HTML (the anchors and links) passes through MyST untouched and Jupyter renders it, so the links work in both
without MyST resolving them. What Sphinx did by itself, this script does: it numbers each chapter's equations in
order (2.1, 2.2, ...; chapter N's file starts with N), rewrites every reference's number to match, and rewrites
each chapter's reference list from the keys the chapter cites.

Usage (from the repository root):

    python scripts/chapter_text.py            # renumber and rewrite the reference lists in chapters/
    python scripts/chapter_text.py --check    # exit 1 and list what is out of date (tests/test_chapter_text.py)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
BIB = ROOT / "book" / "references.bib"
CHAPTERS = ROOT / "chapters"
REFERENCES_HEADING = "## References"
GENERATED = "<!-- Written from book/references.bib by the chapter-text script (CONTRIBUTING.md): not by hand. -->"

CITATION = re.compile(r'\[<a href="#ref-(?P<key>[A-Za-z0-9_:-]+)">(?P<label>[^<]*)</a>\]')
EQUATION_ANCHOR = re.compile(r'<a id="(?P<id>eq-[A-Za-z0-9_-]+)"></a>\s*\n\s*\n\s*\$\$(?P<body>.*?)\$\$', re.S)
TAG = re.compile(r"\\tag\{(?P<tag>[^}]*)\}")
EQUATION_REFERENCE = re.compile(r'<a href="#(?P<id>eq-[A-Za-z0-9_-]+)">\((?P<tag>[^)<]*)\)</a>')


def chapter_number(path: Path) -> int:
    """The chapter's number from its file name (``02_dynamic_routing.ipynb`` -> 2)."""
    match = re.match(r"(\d+)_", path.name)
    if match is None:
        raise ValueError(f"chapter file name must start with its number and '_', got {path.name!r}")
    return int(match.group(1))


def _bibliography():
    """The parsed bibliography and the book's formatting style (imported from book/_ext)."""
    from pybtex.database import parse_file

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        import bibliography_style
    finally:
        sys.path.pop(0)
    return parse_file(str(BIB)), bibliography_style.CapsuleLabStyle()


def citation_labels() -> dict[str, str]:
    """Every bibliography key's author-year label ('Sabour et al., 2017'), as the book prints it."""
    database, style = _bibliography()
    entries = list(style.sort(database.entries.values()))
    labels = style.label_style.format_labels(entries)
    return {entry.key: label for entry, label in zip(entries, labels)}


def reference_list(keys) -> str:
    """The ``## References`` cell for the cited ``keys``: one Markdown bullet per work, each with its anchor."""
    from pybtex.plugin import find_plugin

    database, style = _bibliography()
    unknown = sorted(set(keys) - set(database.entries))
    if unknown:
        raise ValueError(f"citation keys not in {BIB.relative_to(ROOT)}: {unknown}")
    backend = find_plugin("pybtex.backends", "markdown")()
    formatted = style.format_entries(database.entries[key] for key in keys)
    lines = [REFERENCES_HEADING, "", GENERATED, ""]
    for entry in sorted(formatted, key=lambda e: (e.label, e.key)):
        text = " ".join(entry.text.render(backend).split())
        lines.append(f'- <a id="ref-{entry.key}"></a>**{entry.label}.** {text}')
    return "\n".join(lines)


def _markdown(nb) -> list:
    return [cell for cell in nb.cells if cell.cell_type == "markdown"]


def renumber(nb, chapter: int) -> list[str]:
    """Number the notebook's tagged equations ``chapter.1, chapter.2, ...`` in order of appearance, make every
    equation reference carry its equation's number and the citations their labels, and rewrite the reference
    list. Returns what changed (empty: the notebook was up to date); raises on a reference to no equation, a
    citation of no bibliography entry, or a missing reference-list cell.
    """
    changes: list[str] = []
    numbers: dict[str, str] = {}
    for cell in _markdown(nb):
        for match in EQUATION_ANCHOR.finditer(cell.source):
            if match.group("id") in numbers:
                raise ValueError(f"equation anchor {match.group('id')!r} appears twice")
            numbers[match.group("id")] = f"{chapter}.{len(numbers) + 1}"

    labels = citation_labels()
    cited: list[str] = []

    def tag_equation(match):
        body = match.group("body")
        tag = f"\\tag{{{numbers[match.group('id')]}}}"
        new = TAG.sub(lambda _: tag, body) if TAG.search(body) else body.rstrip() + f" {tag}\n"
        return match.group(0).replace(body, new) if new != body else match.group(0)

    def number_reference(match):
        if match.group("id") not in numbers:
            raise ValueError(f"reference to equation {match.group('id')!r}, which the notebook does not have")
        return f'<a href="#{match.group("id")}">({numbers[match.group("id")]})</a>'

    def label_citation(match):
        key = match.group("key")
        if key not in labels:
            raise ValueError(f"citation of {key!r}, which is not in {BIB.relative_to(ROOT)}")
        if key not in cited:
            cited.append(key)
        return f'[<a href="#ref-{key}">{labels[key]}</a>]'

    reference_cells = [cell for cell in _markdown(nb) if cell.source.startswith(REFERENCES_HEADING)]
    for cell in _markdown(nb):
        if cell in reference_cells:
            continue
        new = EQUATION_ANCHOR.sub(tag_equation, cell.source)
        new = EQUATION_REFERENCE.sub(number_reference, new)
        new = CITATION.sub(label_citation, new)
        if new != cell.source:
            changes.append(f"cell {cell.get('id', '?')}: equation numbers or citation labels")
            cell.source = new
    if cited:
        if len(reference_cells) != 1:
            raise ValueError(f"a chapter that cites needs one Markdown cell starting {REFERENCES_HEADING!r}, "
                             f"found {len(reference_cells)}")
        expected = reference_list(cited)
        if reference_cells[0].source != expected:
            changes.append("the reference list")
            reference_cells[0].source = expected
    return changes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a chapter is out of date")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in chapters/")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(CHAPTERS.glob("*.ipynb"))
    stale = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        changes = renumber(nb, chapter_number(path))
        if changes:
            stale += 1
            print(f"{path}: {'; '.join(changes)}")
            if not args.check:
                nbformat.write(nb, path)
    if args.check and stale:
        print(f"{stale} chapter(s) out of date: run python scripts/chapter_text.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
