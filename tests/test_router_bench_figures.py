"""What chapter 08's two bench figures (capsule_lab.figures.router_bench) draw, read back from the matplotlib Figure
on a summary shaped like the quick bench's: eight routers within 0.4 points of each other and two far less accurate
ladders.

- the accuracy-against-time figure adds a zoomed row on the leading routers, whose limits exclude the ladders, and
  marks that range on the overview;
- every router of the bench has a colour of its own, distinct from the others' to the eye, in both figures;
- a measure that is 0 for every router has no (empty) panel but a note that names it;
- a bar of exactly 0 is labelled "0", a missing one "n/a";
- accuracies are points on an axis fitted to them, not bars from 0.
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex, to_rgb  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from capsule_lab.figures.descriptions import description_of  # noqa: E402
from capsule_lab.figures.router_bench import (COLORS, accuracy_time_figure, measures_figure, plot_measure,  # noqa: E402
                                              plot_measure_points, router_styles)
from capsule_lab.studies.bench.settings import ROUTERS_08  # noqa: E402

#: router: clean %, affine %, step ms, entropy bits, dyr (None: the ladders have none) — the quick bench, rounded.
ROWS = {
    "dynamic r=1": (97.65, 84.23, 27.3, 0.0, 0.0),
    "dynamic r=3": (97.95, 84.20, 49.6, 7.50, 0.031),
    "dynamic r=5": (97.95, 83.47, 49.8, 7.63, 0.057),
    "detached": (97.68, 83.90, 41.0, 7.45, 0.030),
    "uniform": (97.65, 84.25, 27.4, 0.0, 0.0),
    "rem-pruned": (97.73, 83.38, 41.9, 7.43, 0.029),
    "ladder": (82.52, 65.67, 47.8, 7.34, None),
    "similarity": (95.00, 77.38, 69.8, 7.61, 0.121),
    "connectionist": (97.03, 82.23, 384.6, 7.63, 0.410),
    "self-attention": (97.57, 83.57, 47.3, 7.64, 0.294),
    "dynamic r=3 normed": (97.85, 84.00, 64.9, 7.53, 0.033),
    "ladder matched": (78.47, 60.20, 58.8, 7.09, None),
}
LEADING = ["dynamic r=1", "dynamic r=3", "dynamic r=5", "detached", "uniform", "rem-pruned", "self-attention",
           "dynamic r=3 normed"]


def _entry(value, se):
    return None if value is None else (value, se * 2, se)


BENCH = {name: {"seeds": 3, "accuracy": _entry(clean / 100, 0.001), "affine_accuracy": _entry(affine / 100, 0.003),
                "train_step_ms": _entry(ms, 1.0), "entropy": _entry(entropy, 0.01), "dyr": _entry(dyr, 0.001),
                "dead_primary": (0.0, 0.0, 0.0)}
         for name, (clean, affine, ms, entropy, dyr) in ROWS.items()}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _series(ax) -> dict:
    """{router: (x, y, colour)} of the error-bar series on ``ax``."""
    return {c.get_label(): (*c.lines[0].get_xydata()[0], to_hex(c.lines[0].get_color())) for c in ax.containers}


# ---------------------------------------------------------------- 1. the accuracy-against-time figure zooms


def test_accuracy_time_figure_zooms_on_the_routers_the_ladders_would_squeeze_together():
    fig = accuracy_time_figure(BENCH)
    assert len(fig.axes) == 4                                     # overview row and zoomed row, clean and affine
    clean_all, affine_all, clean_zoom, affine_zoom = fig.axes
    assert list(_series(clean_all)) == list(ROUTERS_08)           # every router on the overview
    assert list(_series(clean_zoom)) == list(_series(affine_zoom)) == LEADING
    # the overview spans the ladders; the zoom only the leading eight, so their 0.4 points fill the panel
    assert clean_all.get_ylim()[0] < 78.5 and affine_all.get_ylim()[0] < 60.2
    low, high = clean_zoom.get_ylim()
    assert 97.4 < low < 97.56 and 97.96 < high < 98.2 and high - low < 1
    low, high = affine_zoom.get_ylim()
    assert 82.5 < low < 83.3 and 84.3 < high < 85.0
    for ax in (clean_zoom, affine_zoom):                          # 27–65 ms, connectionist's 385 ms outside
        assert ax.get_xscale() == "log" and 20 < ax.get_xlim()[0] < 27.3 and 64.9 < ax.get_xlim()[1] < 100
        fig.canvas.draw()
        ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert len(ticks) >= 3, ticks                             # a zoom within a decade still gets labelled ticks
    for overview, zoom in ((clean_all, clean_zoom), (affine_all, affine_zoom)):
        (marked,) = [p for p in overview.patches if isinstance(p, Rectangle) and p.get_linestyle() == "--"]
        x, y = marked.get_xy()
        assert np.allclose([x, x + marked.get_width()], zoom.get_xlim())
        assert np.allclose([y, y + marked.get_height()], zoom.get_ylim())
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(ROUTERS_08)
    alt = description_of(fig).alt
    assert ("The bottom row zooms on the 8 routers within 0.5 points of the best clean accuracy (dynamic r=1, "
            "dynamic r=3, dynamic r=5, detached, uniform, rem-pruned, self-attention and dynamic r=3 normed): "
            "97.57–97.95 % clean, 83.38–84.25 % affine, 27–65 ms") in alt
    assert "where ladder, similarity, connectionist and ladder matched are drawn too" in alt


def test_accuracy_time_figure_has_no_zoom_when_every_router_leads():
    leading = {name: BENCH[name] for name in LEADING}
    fig = accuracy_time_figure(leading)
    assert len(fig.axes) == 2
    assert not [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_linestyle() == "--"]


# ---------------------------------------------------------------- 2. a colour per router


def _lab(colour) -> np.ndarray:
    """CIELAB (D65) of a matplotlib colour."""
    rgb = np.array(to_rgb(colour))
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                    [0.0193339, 0.1191920, 0.9503041]]) @ linear / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_every_router_of_the_bench_has_its_own_colour_and_marker_in_both_figures():
    styles = router_styles(ROUTERS_08)
    assert len({s["color"] for s in styles.values()}) == len(ROUTERS_08) == 12
    assert len({s["marker"] for s in styles.values()}) == 12
    # distinct to the eye, not only as hex strings: CIE76 ΔE of at least 20 between any two colours
    closest = min(np.linalg.norm(_lab(a) - _lab(b)) for a, b in itertools.combinations(COLORS, 2))
    assert closest >= 20, closest
    drawn = _series(accuracy_time_figure(BENCH).axes[0])
    assert {n: c for n, (_, _, c) in drawn.items()} == {n: to_hex(s["color"]) for n, s in styles.items()}
    assert [m.get_marker() for c in accuracy_time_figure(BENCH).axes[0].containers for m in c.lines[:1]] == \
        [styles[n]["marker"] for n in ROUTERS_08]
    fig = measures_figure(BENCH, ("entropy",))
    bars = [to_hex(p.get_facecolor()) for p in fig.axes[0].patches]
    assert len(set(bars)) == 12 and bars == [to_hex(styles[n]["color"]) for n in ROUTERS_08]


def test_a_router_keeps_its_style_beside_others_and_a_new_one_takes_a_free_style():
    alone = router_styles(["uniform"])["uniform"]
    mixed = router_styles(["mine", "uniform", "dynamic r=1"])
    assert mixed["uniform"] == alone
    assert mixed["mine"] not in (mixed["uniform"], mixed["dynamic r=1"])
    with pytest.raises(ValueError, match="names must be router names"):
        router_styles([3])


# ---------------------------------------------------------------- 3. no empty all-zero panel


def test_a_measure_zero_for_every_router_has_no_panel_but_a_note():
    fig = measures_figure(BENCH)                     # affine, inference (absent: drawn as n/a), ..., dead primary
    visible = [ax for ax in fig.axes if ax.get_visible()]
    panels = [ax for ax in visible if ax.axison]
    assert "dead primary capsules (%)" not in [ax.get_xlabel() for ax in panels]
    assert len(panels) == 5
    (note,) = [ax for ax in visible if not ax.axison]
    assert "0 for every router, so not drawn" in note.texts[0].get_text()
    assert "dead primary capsules (%)" in note.texts[0].get_text()
    only_zero = measures_figure(BENCH, ("dead_primary",))
    assert not [ax for ax in only_zero.axes if ax.get_visible() and ax.axison]
    assert "0 for every router, so it has no panel" in description_of(only_zero).alt


# ---------------------------------------------------------------- 4. a zero bar says 0, a missing one n/a


def _row_labels(ax) -> dict:
    return {int(round(t.get_position()[1])): t.get_text().strip() for t in ax.texts}


def test_a_bar_of_zero_says_0_and_a_missing_one_says_n_a():
    fig, (entropy, dyr) = plt.subplots(1, 2)
    plot_measure(entropy, BENCH, "entropy")
    plot_measure(dyr, BENCH, "dyr")
    names = list(ROUTERS_08)
    assert _row_labels(entropy) == {names.index("dynamic r=1"): "0", names.index("uniform"): "0"}
    assert _row_labels(dyr) == {names.index("dynamic r=1"): "0", names.index("uniform"): "0",
                                names.index("ladder"): "n/a", names.index("ladder matched"): "n/a"}
    for text in dyr.texts:                           # at the axis's left, inside it
        assert text.get_visible() and 0 <= text.get_position()[0] < 0.1


# ---------------------------------------------------------------- 5. accuracies as points on a fitted axis


def test_accuracies_are_points_on_an_axis_fitted_to_them():
    fig = measures_figure(BENCH, ("accuracy", "affine_accuracy", "entropy"))
    clean, affine, entropy = fig.axes[:3]
    for ax, values in ((clean, [r[0] for r in ROWS.values()]), (affine, [r[1] for r in ROWS.values()])):
        assert not [p for p in ax.patches if isinstance(p, Rectangle)]           # no bars
        assert len(ax.containers) == 12
        low, high = ax.get_xlim()
        assert min(values) - 4 < low < min(values) and max(values) < high < max(values) + 4   # not from 0
        assert [round(c.lines[0].get_xydata()[0][0], 2) for c in ax.containers] == values
    assert entropy.get_xlim()[0] == 0 and len(entropy.patches) == 12            # other measures stay bars from 0
    fig, ax = plt.subplots()
    plot_measure_points(ax, {**BENCH, "new": {"seeds": 1, "accuracy": None}}, "accuracy")
    assert _row_labels(ax) == {12: "n/a"} and len(ax.containers) == 12
