"""Result tables that are tables. Chapters 02–08.

A chapter's result (a comparison of routers, a per-layer statistic, a verdict per claim) is a :class:`Table`: a
caption, column headers and rows of values. The same object shows

- in Jupyter, Colab and the book as an HTML table (``_repr_html_``): a ``<caption>``, headers with their scope,
  numbers right-aligned, in a box that scrolls sideways on a phone. A screen reader reads it as a table (row and
  column headers announced with each value) and a reader can copy it into a spreadsheet;
- in a terminal, a script or nbval's comparison of the text output as aligned text (``str(table)``);
- to a program as its values (``table.rows``, ``table.column(name)``) and as CSV (``table.to_csv()``).

The numbers are formatted once, by ``formats`` (a format spec per column: ``".2f"``, ``","``, ``".1%"``, or a
function), so the HTML and the text show the same digits.
"""

from __future__ import annotations

import csv
import html
import io
import math
import numbers
from typing import Callable, Mapping, Sequence

__all__ = ["Table", "MISSING"]

#: What a missing value (None, NaN) shows as.
MISSING = "–"


def _is_number(value) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


class Table:
    """A table of results: ``Table(columns, rows, caption=..., formats=...)``. Chapters 02–08.

    Args:
        columns: the column headers (unique, non-empty strings).
        rows: one sequence of values per row, as long as ``columns``: str, int, float, bool or None (shown as
            :data:`MISSING`), or anything with a ``__format__`` that ``formats`` handles.
        caption: what the table shows, in a sentence; a screen reader announces it before the table.
        formats: per column (by header), a format spec for ``format(value, spec)`` or a function value -> str.
            Columns without one show ints with thousands separators, floats with 4 significant digits, others
            with ``str``.
        row_headers: whether the first column names its row (``<th scope="row">``), as a router's or a layer's
            name does.
    """

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence], *, caption: str,
                 formats: Mapping[str, str | Callable] | None = None, row_headers: bool = True):
        if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
            raise ValueError(f"columns must be a non-empty sequence of headers, got {columns!r}")
        columns = tuple(columns)
        if not all(isinstance(c, str) and c.strip() for c in columns):
            raise ValueError(f"every column header must be a non-empty str, got {columns!r}")
        if len(set(columns)) != len(columns):
            raise ValueError(f"column headers must be unique, got {columns!r}")
        try:
            rows = tuple(tuple(row) for row in rows) if not isinstance(rows, (str, bytes, Mapping)) else None
        except TypeError:
            rows = None
        if rows is None:
            raise ValueError("rows must be a sequence of rows, each a sequence of values")
        for i, row in enumerate(rows):
            if len(row) != len(columns):
                raise ValueError(f"row {i} has {len(row)} values, the table {len(columns)} columns: {row!r}")
        if not isinstance(caption, str) or not caption.strip():
            raise ValueError(f"caption must be a non-empty str saying what the table shows, got {caption!r}")
        formats = dict(formats or {})
        unknown = sorted(set(formats) - set(columns))
        if unknown:
            raise ValueError(f"formats name columns the table does not have: {unknown}; columns are {list(columns)}")
        for name, spec in formats.items():
            if not (isinstance(spec, str) or callable(spec)):
                raise ValueError(f"the format of column {name!r} must be a format spec or a function, got {spec!r}")
        if not isinstance(row_headers, bool):
            raise ValueError(f"row_headers must be True or False, got {row_headers!r}")
        self.columns = columns
        self.rows = rows
        self.caption = caption.strip()
        self.formats = formats
        self.row_headers = row_headers

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, name: str) -> tuple:
        """The values of the column headed ``name``."""
        if name not in self.columns:
            raise ValueError(f"no column {name!r}; columns are {list(self.columns)}")
        k = self.columns.index(name)
        return tuple(row[k] for row in self.rows)

    def cell(self, value, column: str) -> str:
        """``value`` formatted as column ``column`` shows it."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return MISSING
        spec = self.formats.get(column)
        if callable(spec):
            text = spec(value)
            if not isinstance(text, str):
                raise ValueError(f"the format function of column {column!r} returned {type(text).__name__}, not str")
            return text
        if spec is not None:
            return format(value, spec)
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, numbers.Integral):
            return f"{value:,}"
        if isinstance(value, numbers.Real):
            return f"{value:.4g}"
        return str(value)

    def texts(self) -> list[list[str]]:
        """Every row's values as the table shows them."""
        return [[self.cell(v, c) for v, c in zip(row, self.columns)] for row in self.rows]

    def _numeric(self) -> list[bool]:
        """Columns right-aligned: those whose values are all numbers (missing ones aside)."""
        flags = []
        for k in range(len(self.columns)):
            values = [row[k] for row in self.rows if row[k] is not None]
            flags.append(bool(values) and all(_is_number(v) for v in values))
        return flags

    def __str__(self) -> str:
        texts = self.texts()
        numeric = self._numeric()
        widths = [max([len(c)] + [len(row[k]) for row in texts]) for k, c in enumerate(self.columns)]

        def line(cells):
            return " | ".join(cell.rjust(w) if right else cell.ljust(w)
                              for cell, w, right in zip(cells, widths, numeric)).rstrip()

        rule = "-+-".join("-" * w for w in widths)
        return "\n".join([self.caption, line(self.columns), rule] + [line(row) for row in texts])

    def __repr__(self) -> str:
        return f"Table({self.caption!r}, {len(self.rows)} rows × {len(self.columns)} columns)"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        numeric = self._numeric()

        def attrs(k):
            return ' class="number"' if numeric[k] else ""

        head = "".join(f'<th scope="col"{attrs(k)}>{html.escape(c)}</th>' for k, c in enumerate(self.columns))
        body = []
        for row in self.texts():
            cells = []
            for k, text in enumerate(row):
                if k == 0 and self.row_headers:
                    cells.append(f'<th scope="row"{attrs(k)}>{html.escape(text)}</th>')
                else:
                    cells.append(f"<td{attrs(k)}>{html.escape(text)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        caption = html.escape(self.caption)
        # The wrapper scrolls sideways when the table is wider than the screen; focusable and labelled, so that a
        # keyboard can scroll it too (WCAG 2.1.1).
        return (f'<div class="capsule-lab-table" role="region" tabindex="0" aria-label="{caption}">'
                f'<table><caption>{caption}</caption><thead><tr>{head}</tr></thead>'
                f'<tbody>{"".join(body)}</tbody></table></div>')

    def to_csv(self) -> str:
        """The table as CSV text: the headers, then the values as the table shows them."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(self.texts())
        return out.getvalue()
