"""The figure style (colour-blind-safe palette, marker and line style per series) and figure descriptions (alt
text and caption from the output's metadata into MyST-NB's cell metadata), and the book's markup fixes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import pytest  # noqa: E402

from capsule_lab.figures import descriptions as fd
from capsule_lab.figures import style

ROOT = Path(__file__).resolve().parents[1]
ALT = "Two lines: accuracy rises from 0.5 to 0.9 over 3 epochs while the loss falls from 1.2 to 0.3."


def _relative_luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _deuteranope(hex_colour: str) -> tuple:
    """Viénot, Brettel and Mollon's (1999) simulation of deuteranopia, in linear RGB (an independent check that
    the palette's colours stay apart for the commonest colour-vision deficiency)."""
    rgb = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    r, g, b = lin
    r2 = 0.29275 * r + 0.70725 * g
    return (r2, r2, b)


def test_palette_is_okabe_ito_and_series_differ_in_marker_and_line_style():
    assert set(style.PALETTE) == {"#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000",
                                  "#F0E442"}
    assert len(set(style.MARKERS)) == len(set(map(str, style.LINESTYLES))) == len(style.PALETTE)
    assert style.series(9) == style.series(1)
    for bad in (-1, 1.0, True, "1"):
        with pytest.raises(ValueError, match="non-negative integer"):
            style.series(bad)


def test_first_five_colours_stay_distinct_for_a_deuteranope():
    simulated = [_deuteranope(c) for c in style.PALETTE[:5]]
    for i in range(5):
        for j in range(i + 1, 5):
            distance = sum((a - b) ** 2 for a, b in zip(simulated[i], simulated[j])) ** 0.5
            assert distance > 0.08, (style.PALETTE[i], style.PALETTE[j], distance)


def test_first_five_colours_have_wcag_graphics_contrast_on_white():
    """WCAG 2.1's 3:1 for graphics (1.4.11) holds for the palette's first five colours, those most plots use."""
    for colour in style.PALETTE[:5]:
        contrast = 1.05 / (_relative_luminance(colour) + 0.05)
        assert contrast >= 3.0, (colour, contrast)


def test_use_makes_every_plot_line_differ_by_marker_and_style():
    with matplotlib.rc_context():
        style.use()
        fig, ax = plt.subplots()
        lines = [ax.plot([0, 1], [k, k + 1])[0] for k in range(4)]
        assert [line.get_color() for line in lines] == list(style.PALETTE[:4])
        assert [line.get_marker() for line in lines] == list(style.MARKERS[:4])
        assert len({line.get_linestyle() for line in lines}) == 4
        plt.close(fig)


def test_importing_the_figures_sets_the_style():
    import subprocess

    code = ("import matplotlib; matplotlib.use('Agg'); import capsule_lab.figures; "
            "print(matplotlib.rcParams['axes.prop_cycle'].by_key()['marker'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(list(style.MARKERS))


@pytest.mark.parametrize("alt, message", [
    ("", "non-empty"), ("   ", "non-empty"), (None, "non-empty"),
    ("../_images/c6dc1d7e0d42f4946205b5c5ce467cbfc94efe2831f37da02fd0dad2e2adf42d.png", "not name a file"),
    ("figure_3.png", "not name a file"), ("c6dc1d7e0d42f4946205b5c5ce467cbf", "not name a file"),
    ("A plot", "not what kind of picture"), ("Figure.", "not what kind of picture"),
    ("Accuracy rises over the epochs.", "at least 8 words"),
    ("Accuracy rises from 0.5 to 0.9 over\nthree epochs of training on MNIST", "one paragraph"),
])
def test_alt_text_that_cannot_describe_a_figure_is_refused(alt, message):
    with pytest.raises(ValueError, match=message):
        fd.check_alt_text(alt)


def test_attach_description_attaches_and_show_displays_with_metadata(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, metadata=None: shown.append((obj, metadata)))
    fig, _ = plt.subplots()
    assert fd.attach_description(fig, ALT, "Accuracy and loss per epoch") is fig
    assert fd.description_of(fig) == fd.Description(ALT, "Accuracy and loss per epoch")
    assert fd.show(fig, name="fig-training") is None, "a returned value would print under nbval after the figure"
    assert shown == [(fig, {"capsule_lab": {"alt": ALT, "caption": "Accuracy and loss per epoch",
                                            "name": "fig-training"}})]
    assert not plt.fignum_exists(fig.number), "show closes the figure (the inline backend does not draw it twice)"
    fig2, _ = plt.subplots()
    fd.show(fig2, alt=ALT + " Seed 1.", caption="Another")
    assert shown[-1][1] == {"capsule_lab": {"alt": ALT + " Seed 1.", "caption": "Another"}}


def test_show_refuses_figures_without_words_and_bad_input():
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="no description: pass alt= and caption="):
        fd.show(fig)
    with pytest.raises(ValueError, match="caption must be a non-empty str"):
        fd.show(fig, alt=ALT)
    with pytest.raises(ValueError, match="caption and alt text are the same"):
        fd.attach_description(fig, ALT, ALT)
    with pytest.raises(ValueError, match="name must be lower-case"):
        fd.show(fig, alt=ALT, caption="c", name="Fig 1")
    with pytest.raises(ValueError, match="must be a matplotlib Figure"):
        fd.attach_description("fig", ALT, "c")
    plt.close(fig)


def _notebook(tmp_path: Path, outputs_per_cell: list[list[dict]]) -> Path:
    nb = nbformat.v4.new_notebook()
    for outputs in outputs_per_cell:
        cell = nbformat.v4.new_code_cell("x = 1")
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        nb.cells.append(cell)
    path = tmp_path / "07_demo.ipynb"
    nbformat.write(nb, path)
    return path


def _image(meta: dict | None = None) -> dict:
    return {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"},
            "metadata": {"capsule_lab": meta} if meta else {}}


def test_caption_cells_copies_descriptions_into_mystnb_metadata(tmp_path):
    stream = {"output_type": "stream", "name": "stdout", "text": "hello\n"}
    path = _notebook(tmp_path, [[stream, _image({"alt": ALT, "caption": "First"})], [stream],
                                [_image({"alt": ALT + " Again.", "caption": "Second", "name": "fig-mine"})],
                                [_image()]])
    assert fd.caption_cells(path) == 2
    cells = nbformat.read(path, as_version=4).cells
    assert cells[0].metadata["mystnb"] == {"figure": {"caption": "First", "name": "fig-07-demo-1"},
                                           "image": {"alt": ALT}}
    assert "mystnb" not in cells[1].metadata
    assert cells[2].metadata["mystnb"]["figure"] == {"caption": "Second", "name": "fig-mine"}
    assert "mystnb" not in cells[3].metadata
    before = path.read_text()
    assert fd.caption_cells(path) == 2 and path.read_text() == before, "idempotent"


def test_caption_cells_drops_a_stale_caption_and_keeps_other_options(tmp_path):
    path = _notebook(tmp_path, [[_image()]])
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].metadata["mystnb"] = {"figure": {"caption": "old"}, "image": {"alt": "old words"},
                                      "markdown_format": "myst"}
    nbformat.write(nb, path)
    assert fd.caption_cells(path) == 0
    assert nbformat.read(path, as_version=4).cells[0].metadata["mystnb"] == {"markdown_format": "myst"}


def test_caption_cells_refuses_two_figures_in_a_cell_and_bad_paths(tmp_path):
    path = _notebook(tmp_path, [[_image({"alt": ALT, "caption": "a"}), _image({"alt": ALT, "caption": "b"})]])
    with pytest.raises(ValueError, match="a figure and 1 other displayed output"):
        fd.caption_cells(path)
    table = {"output_type": "display_data", "data": {"text/html": "<table></table>", "text/plain": "t"}, "metadata": {}}
    path = _notebook(tmp_path, [[table, _image({"alt": ALT, "caption": "a"})]])
    with pytest.raises(ValueError, match="show a figure in a cell of its own"):
        fd.caption_cells(path)
    with pytest.raises(ValueError, match="existing .ipynb file"):
        fd.caption_cells(tmp_path / "missing.ipynb")


def test_caption_cells_leaves_a_committed_notebook_byte_identical():
    """nbformat's own writer: a chapter whose captions are current is not rewritten (no noise in diffs)."""
    chapter = ROOT / "chapters" / "01_capsules.ipynb"
    copy = Path(pytest.importorskip("tempfile").mkdtemp()) / chapter.name
    copy.write_bytes(chapter.read_bytes())
    fd.caption_cells(copy)
    assert copy.read_bytes() == chapter.read_bytes()


def _accessibility_extension():
    spec = importlib.util.spec_from_file_location("accessibility", ROOT / "book" / "_ext" / "accessibility.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("accessibility", module)
    spec.loader.exec_module(module)
    return module


PAGE = """<button class="btn search-button-field search-button__button" title="Search" aria-label="Search" \
data-bs-placement="bottom" data-bs-toggle="tooltip">
<li class="toctree-l1 has-children"><a class="reference internal" href="../book/api/index.html">API reference</a>\
<details><summary><span class="toctree-toggle" role="presentation"><i class="fa-solid fa-chevron-down"></i></span>\
</summary>
<div role="list" class="citation-list">
<div class="citation" id="id8" role="doc-biblioentry">
<div class="pst-scrollable-table-container"><table class="table">"""


def test_book_markup_fixes_give_names_roles_and_focus_and_are_idempotent():
    ext = _accessibility_extension()
    opened = PAGE.replace("<details>", '<details open="open">')        # the part the page is in
    assert '<details open="open"><summary><span class="visually-hidden">' in ext.fix_page(opened)[0]
    fixed, counts = ext.fix_page(PAGE)
    assert counts == dict.fromkeys(ext.FIXES, 1)
    assert 'aria-label="Search"' not in fixed and 'title="Search"' in fixed
    assert ('API reference</a><details><summary><span class="visually-hidden">Show the pages of API reference'
            '</span><span class="toctree-toggle"') in fixed
    assert 'role="doc-biblioentry"' not in fixed and '<div class="citation" id="id8" role="listitem">' in fixed
    assert '<div class="pst-scrollable-table-container" tabindex="0">' in fixed
    again, counts = ext.fix_page(fixed)
    assert again == fixed and not any(counts.values())


def test_figure_metadata_survives_json_of_real_notebooks():
    """Every chapter's cell metadata is plain JSON MyST-NB validates (strings only under mystnb)."""
    for chapter in sorted((ROOT / "chapters").glob("*.ipynb")):
        for cell in json.loads(chapter.read_text())["cells"]:
            for key in ("figure", "image"):
                for value in cell.get("metadata", {}).get("mystnb", {}).get(key, {}).values():
                    assert isinstance(value, str), (chapter.name, key, value)


def test_the_captions_command_captions_notebooks_and_refuses_bad_paths(tmp_path, capsys):
    from capsule_lab import cli

    path = _notebook(tmp_path, [[_image({"alt": ALT, "caption": "First"})]])
    assert cli.main(["captions", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: 1 figure(s) captioned\n"
    assert nbformat.read(path, as_version=4).cells[0].metadata["mystnb"]["image"] == {"alt": ALT}
    assert cli.main(["captions", str(tmp_path / "none.ipynb")]) == 2
    assert "existing .ipynb file" in capsys.readouterr().err
