"""The book's pages, fixed where the theme breaks WCAG 2.1 A/AA rules (loaded from _config.yml).

axe-core 4.14 on the built book (tests/test_book.py runs it on every page at both widths) found, in markup the
theme and docutils write and our pages cannot change:

- ``label-content-name-mismatch``: the search button's ``aria-label="Search"`` hides its visible text
  ("Search Ctrl+K"); without the label its name is that text;
- ``summary-name``: the navigation's ``<summary>`` (the arrow that opens a part's pages) has no text; it gets
  visually hidden text naming the part;
- ``aria-deprecated-role`` and ``aria-required-children``: docutils marks each bibliography entry
  ``role="doc-biblioentry"`` (deprecated in DPUB-ARIA 1.1) inside a ``role="list"``; they become list items;
- ``scrollable-region-focusable``: a table wider than a phone scrolls in the theme's
  ``pst-scrollable-table-container``, which a keyboard cannot reach; it becomes a focusable region.

The colour contrast of links (``color-contrast``) is fixed in book.css. Each fix is a rewrite of the written HTML
after the build (``build-finished``): it is idempotent, and a fix whose markup is no longer found anywhere is
reported as a warning (``-W`` makes it an error), so a theme upgrade that changes the markup is noticed.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

_SEARCH_BUTTON = re.compile(r'(<button class="btn search-button-field[^"]*"[^>]*?) aria-label="Search"')
_SUMMARY = re.compile(r'(<a class="[^"]*reference internal" href="[^"]*">)(?P<name>[^<]*)</a>(?P<details><details[^>]*>)'
                      r'<summary>(?!<span class="visually-hidden">)')
_BIBLIOENTRY = re.compile(r'(<div class="citation" id="[^"]*") role="doc-biblioentry"')
_TABLE_CONTAINER = re.compile(r'<div class="pst-scrollable-table-container">')


def _summary(match: re.Match) -> str:
    name = match.group("name")
    return (f'{match.group(1)}{name}</a>{match.group("details")}<summary><span class="visually-hidden">'
            f'Show the pages of {name}</span>')


FIXES = {
    "search button's name": (_SEARCH_BUTTON, r"\1"),
    "navigation summary text": (_SUMMARY, _summary),
    "bibliography list items": (_BIBLIOENTRY, r'\1 role="listitem"'),
    "focusable table scroll boxes": (_TABLE_CONTAINER,
                                     '<div class="pst-scrollable-table-container" tabindex="0">'),
}
# Markup every build has (the search button and the navigation's parts on every page, the bibliography page).
EXPECTED = ("search button's name", "navigation summary text", "bibliography list items")


def fix_page(text: str) -> tuple[str, dict]:
    """``text`` with every fix applied, and how many places each fix changed."""
    counts = {}
    for name, (pattern, replacement) in FIXES.items():
        text, counts[name] = pattern.subn(replacement, text)
    return text, counts


def _already_fixed(text: str) -> dict:
    return {"search button's name": 'search-button-field' in text and not _SEARCH_BUTTON.search(text),
            "navigation summary text": '<summary><span class="visually-hidden">' in text,
            "bibliography list items": 'role="listitem"' in text and "citation" in text}


def _fix_build(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    found = dict.fromkeys(FIXES, 0)
    for path in Path(app.outdir).rglob("*.html"):
        text = path.read_text(encoding="utf8")
        fixed, counts = fix_page(text)
        for name, n in counts.items():
            found[name] += n
        for name, done in _already_fixed(text).items():
            found[name] += int(done)
        if fixed != text:
            path.write_text(fixed, encoding="utf8")
    for name in EXPECTED:
        if not found[name]:
            logger.warning(f"accessibility: no page had the markup of the fix {name!r}; has the theme changed? "
                           "(book/_ext/accessibility.py)")


def setup(app):
    app.connect("build-finished", _fix_build)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}

