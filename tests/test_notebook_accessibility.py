"""Every chapter figure is described and captioned from its data, and results are tables, not printed text.

- Each code cell of a chapter that shows an image shows nothing else but printed text (MyST-NB's figure options
  apply to every displayed output of a cell: a table beside the figure would be captioned too), with a description in
  the output's metadata (``capsule_lab.figures.show``) whose alt text passes ``check_alt_text``, copied into the cell's
  metadata where MyST-NB reads it (``mystnb.image.alt``, ``mystnb.figure.caption``, ``mystnb.figure.name``) — so a stale
  caption or one copied by hand fails.
- No figure of a notebook repeats another's alt text (a description is of *this* figure).
- No chapter prints a table as fixed-width text: three or more consecutive printed lines with three or more
  columns (split by `` | `` or by runs of two or more spaces) are a table, and must be a
  ``capsule_lab.evidence.tables.Table`` (an HTML table in the book).

The book test (tests/test_book.py) checks the built pages: every image's alt text, numbered captions, axe-core.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from capsule_lab.figures.descriptions import METADATA_KEY, check_alt_text

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
# A printed line with three or more columns: split by " | " or by runs of two or more spaces (after the indent).
_COLUMNS = re.compile(r" \| |(?<=\S) {2,}(?=\S)")
MIN_TABLE_LINES = 3


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _images(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") in ("display_data", "execute_result")
            and any(mime.startswith("image/") for mime in o.get("data", {}))]


def printed_tables(text: str) -> list[str]:
    """Runs of >= MIN_TABLE_LINES consecutive lines with >= 3 columns each (the first line of each run)."""
    runs, current = [], []
    for line in text.splitlines():
        if len(_COLUMNS.split(line.strip())) >= 3:
            current.append(line)
            continue
        if len(current) >= MIN_TABLE_LINES:
            runs.append(current[0])
        current = []
    if len(current) >= MIN_TABLE_LINES:
        runs.append(current[0])
    return runs


def test_printed_table_detector():
    table = "router   accuracy   params\ndynamic  0.97       355,488\nuniform  0.95       355,488\n"
    piped = "a | b | c\n1 | 2 | 3\n4 | 5 | 6"
    prose = "epoch 1: loss 0.2, accuracy 91.0 %\nepoch 2: loss 0.1, accuracy 95.0 %\nepoch 3: loss 0.1, accuracy 96 %"
    assert printed_tables(table) == ["router   accuracy   params"]
    assert printed_tables(piped) == ["a | b | c"]
    assert printed_tables(prose) == []
    assert printed_tables(table.replace("\nuniform  0.95       355,488", "")) == []


@pytest.mark.parametrize("path", CHAPTERS, ids=rel)
def test_every_figure_has_alt_text_and_a_caption_from_its_data(path):
    nb = nbformat.read(path, as_version=4)
    problems, alts, names = [], {}, {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        images = _images(cell)
        if not images:
            if "figure" in cell.metadata.get("mystnb", {}):
                problems.append(f"cell {index}: a caption in its metadata but no figure")
            continue
        rich = [o for o in cell.get("outputs", []) if o.get("output_type") in ("display_data", "execute_result")]
        if len(rich) > 1:
            problems.append(f"cell {index}: a figure and {len(rich) - 1} other displayed output(s) in one cell "
                            "(MyST-NB would caption each of them: show the figure in a cell of its own)")
            continue
        described = images[0].get("metadata", {}).get(METADATA_KEY)
        if not described:
            problems.append(f"cell {index}: its figure is shown without a description "
                            "(end the cell with capsule_lab.figures.show(fig, alt=..., caption=...))")
            continue
        try:
            check_alt_text(described["alt"])
        except ValueError as error:
            problems.append(f"cell {index}: {error}")
        mystnb = cell.metadata.get("mystnb", {})
        if mystnb.get("image", {}).get("alt") != described["alt"] or \
                mystnb.get("figure", {}).get("caption") != described["caption"]:
            problems.append(f"cell {index}: the cell's metadata does not hold the figure's description "
                            "(run `capsule-lab captions` on the notebook, as `make notebooks` does)")
        name = mystnb.get("figure", {}).get("name")
        if not name:
            problems.append(f"cell {index}: the figure has no name")
        elif name in names:
            problems.append(f"cell {index}: figure name {name!r} also used in cell {names[name]}")
        else:
            names[name] = index
        if described["alt"] in alts:
            problems.append(f"cell {index}: the same alt text as cell {alts[described['alt']]}")
        alts[described["alt"]] = index
    assert not problems, f"{rel(path)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("path", CHAPTERS, ids=rel)
def test_results_are_tables_not_printed_text(path):
    nb = nbformat.read(path, as_version=4)
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                problems += [f"cell {index}: {first.strip()[:90]!r}" for first in printed_tables(output["text"])]
    assert not problems, (f"{rel(path)} prints tables as text; show a capsule_lab.evidence.tables.Table instead:\n  "
                          + "\n  ".join(problems))
