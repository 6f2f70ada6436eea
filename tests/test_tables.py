"""capsule_lab.evidence.tables.Table: the HTML a screen reader reads as a table, the text, the CSV, the checks."""

from __future__ import annotations

import csv
import html.parser
import io

import pytest

from capsule_lab.evidence.tables import MISSING, Table


def routers() -> Table:
    return Table(["router", "accuracy", "parameters", "converged"],
                 [("dynamic r=3", 0.9771, 355488, True), ("uniform", 0.9745, None, False),
                  ("ladder <K=32>", float("nan"), 2721440, True)],
                 caption="Test accuracy of three routers & their size", formats={"accuracy": ".1%"})


class _Cells(html.parser.HTMLParser):
    """An independent reading of the HTML: caption, header cells with their scope, the rows' cells."""

    def __init__(self):
        super().__init__()
        self.caption, self.headers, self.rows, self.region = "", [], [], {}
        self._in = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div":
            self.region = attrs
        elif tag == "caption":
            self._in = "caption"
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("th", "td"):
            self._in = tag
            self.rows[-1].append({"tag": tag, "scope": attrs.get("scope"), "class": attrs.get("class"), "text": ""})

    def handle_endtag(self, tag):
        if tag in ("caption", "th", "td"):
            self._in = None

    def handle_data(self, data):
        if self._in == "caption":
            self.caption += data
        elif self._in in ("th", "td"):
            self.rows[-1][-1]["text"] += data


def test_html_is_a_table_with_caption_scoped_headers_and_the_formatted_values():
    parser = _Cells()
    parser.feed(routers()._repr_html_())
    assert parser.caption == "Test accuracy of three routers & their size"
    assert parser.region == {"class": "capsule-lab-table", "role": "region", "tabindex": "0",
                             "aria-label": "Test accuracy of three routers & their size"}
    header, *body = parser.rows
    assert [(c["tag"], c["scope"], c["text"]) for c in header] == [
        ("th", "col", "router"), ("th", "col", "accuracy"), ("th", "col", "parameters"), ("th", "col", "converged")]
    assert [[c["text"] for c in row] for row in body] == [
        ["dynamic r=3", "97.7%", "355,488", "yes"], ["uniform", "97.5%", MISSING, "no"],
        ["ladder <K=32>", MISSING, "2,721,440", "yes"]]
    assert all(row[0]["tag"] == "th" and row[0]["scope"] == "row" for row in body)
    # numbers right-aligned (all-number columns, missing values aside), text and yes/no not
    assert [c["class"] for c in body[0]] == [None, "number", "number", None]


def test_markup_in_values_and_caption_is_escaped():
    text = routers()._repr_html_()
    assert "ladder &lt;K=32&gt;" in text and "<K=32>" not in text
    assert "routers &amp; their size" in text


def test_text_has_the_same_digits_aligned_under_the_headers():
    lines = str(routers()).splitlines()
    assert lines[0] == "Test accuracy of three routers & their size"
    assert lines[1].split(" | ") == ["router       ", "accuracy", "parameters", "converged"]
    assert set(lines[2]) <= {"-", "+"}
    assert [part.strip() for part in lines[3].split(" | ")] == ["dynamic r=3", "97.7%", "355,488", "yes"]
    assert lines[3].index("97.7%") + len("97.7%") == lines[1].index("accuracy") + len("accuracy")  # right-aligned
    widths = {len(line.split(" | ")[0]) for line in lines[1:2] + lines[3:]}
    assert widths == {len("ladder <K=32>")}


def test_csv_round_trips_through_the_csv_reader():
    rows = list(csv.reader(io.StringIO(routers().to_csv())))
    assert rows[0] == ["router", "accuracy", "parameters", "converged"]
    assert rows[2] == ["uniform", "97.5%", MISSING, "no"]


def test_values_and_columns_are_kept():
    table = routers()
    assert table.column("parameters") == (355488, None, 2721440)
    assert len(table) == 3 and table.rows[0][1] == 0.9771


def test_default_formats_and_functions():
    table = Table(["a", "b", "c"], [(1234567, 0.000123456, "x"), (2, 3.0, "y")], caption="defaults",
                  formats={"c": str.upper})
    assert table.texts() == [["1,234,567", "0.0001235", "X"], ["2", "3", "Y"]]


def test_ipython_shows_the_text_as_plain_text():
    from IPython.core.formatters import format_display_data

    data, _ = format_display_data(routers())
    assert data["text/plain"] == str(routers())
    assert data["text/html"] == routers()._repr_html_()


@pytest.mark.parametrize("kwargs, message", [
    (dict(columns=[], rows=[], caption="c"), "columns must be a non-empty"),
    (dict(columns="ab", rows=[], caption="c"), "columns must be a non-empty"),
    (dict(columns=["a", "a"], rows=[], caption="c"), "unique"),
    (dict(columns=["a", ""], rows=[], caption="c"), "non-empty str"),
    (dict(columns=["a", "b"], rows=[(1,)], caption="c"), "row 0 has 1 values, the table 2 columns"),
    (dict(columns=["a"], rows=[(1,)], caption=" "), "caption must be a non-empty str"),
    (dict(columns=["a"], rows=5, caption="c"), "rows must be a sequence"),
    (dict(columns=["a"], rows=[(1,)], caption="c", formats={"b": ".2f"}), "formats name columns the table does not"),
    (dict(columns=["a"], rows=[(1,)], caption="c", formats={"a": 3}), "must be a format spec or a function"),
    (dict(columns=["a"], rows=[(1,)], caption="c", row_headers=1), "row_headers must be True or False"),
])
def test_bad_input_is_refused_with_a_clear_message(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Table(**kwargs)


def test_unknown_column_and_bad_format_function():
    with pytest.raises(ValueError, match="no column 'x'"):
        routers().column("x")
    with pytest.raises(ValueError, match="returned int, not str"):
        Table(["a"], [(1,)], caption="c", formats={"a": lambda v: v}).texts()
