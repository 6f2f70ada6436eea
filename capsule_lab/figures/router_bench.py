"""Pictures of chapter 08's bench: every router's accuracy against its cost, and one panel per measure.

Both read the summary of :func:`capsule_lab.studies.bench.runner.summarize_records` — ``{router: {"seeds": n, measure:
(mean, sd, se) or None}}`` — so they draw whatever the bench measured, cached or fresh. Error bars are standard errors
of the mean over seeds (none with one seed). Each router of the bench has its own colour and its own marker, the same
in every figure (:func:`router_styles`), and each figure carries its alt text and caption, written from the summary it
draws (:func:`capsule_lab.figures.descriptions.attach_description`), so a chapter's cell ends with ``show(fig)``.

How each figure keeps differences readable: the accuracy-against-time figure adds a zoomed row on the routers within
half a point of the best clean accuracy, which the far less accurate ones would otherwise squeeze into one cluster;
the measures figure draws accuracies as points on an axis fitted to them (bars are honest only from 0, where they hide
differences of a few points), writes "0" beside a bar of exactly 0 (and "n/a" where a router has no value), and draws
no panel for a measure that is 0 for every router: a note in the grid and the alt text name it. Chapter 08.
"""

from __future__ import annotations

import textwrap
from typing import Iterable, Sequence

import matplotlib.pyplot as plt
import numpy as np

from .descriptions import attach_description, join_words
from .style import MARKERS as _STYLE_MARKERS
from .style import MAX_FIGURE_WIDTH, PALETTE, REFERENCE_COLOR

__all__ = ["MEASURE_LABELS", "POINT_MEASURES", "BENCH_ROUTERS", "MARKERS", "COLORS", "router_styles",
           "plot_accuracy_time", "accuracy_time_figure", "accuracy_time_description", "plot_measure",
           "plot_measure_points", "measures_figure", "measures_description"]

#: How each measure is labelled on an axis, and the factor it is drawn with.
MEASURE_LABELS = {
    "accuracy": ("clean test accuracy (%)", 100),
    "affine_accuracy": ("affine test accuracy (%)", 100),
    "train_step_ms": ("training step, mean over training (ms)", 1),
    "step_ms": ("training step, median of a few (ms)", 1),
    "inference_ms": ("inference batch (ms)", 1),
    "peak_memory_mb": ("peak memory of a step (MB)", 1),
    "entropy": ("parse-tree entropy (bits)", 1),
    "keys": ("parse trees per class", 1),
    "dyr": ("routing dynamics dyr", 1),
    "dead_primary": ("dead primary capsules (%)", 100),
    "dead_class": ("dead class capsules (%)", 100),
    "parameters": ("parameters", 1),
    "router_parameters": ("router parameters", 1),
}

#: The measures :func:`measures_figure` draws as points on an axis fitted to them (:func:`plot_measure_points`),
#: not as bars from 0: accuracies, whose routers differ by a few points near the top of the scale.
POINT_MEASURES = ("accuracy", "affine_accuracy")

#: The bench's routers, in the order of :data:`capsule_lab.studies.bench.settings.ROUTERS_08` (written out here: the
#: figures import no study). Router k of this tuple is drawn in ``COLORS[k]`` with ``MARKERS[k]``.
BENCH_ROUTERS = ("dynamic r=1", "dynamic r=3", "dynamic r=5", "detached", "uniform", "rem-pruned", "ladder",
                 "similarity", "connectionist", "self-attention", "dynamic r=3 normed", "ladder matched")

#: A marker per router of :data:`BENCH_ROUTERS`, so that a router is told apart by shape as well as by colour: the
#: course's eight (:data:`capsule_lab.figures.style.MARKERS`), then four more.
MARKERS = _STYLE_MARKERS + ("<", ">", "h", "p")

#: A colour per router of :data:`BENCH_ROUTERS`, twelve distinct ones. The course's palette without its yellow
#: (Okabe and Ito's blue, vermillion, bluish green, reddish purple, black and orange) goes to the routers on Sabour's
#: layer, which lie close together; then Paul Tol's indigo (his muted scheme), dark yellow and dark red (his dark
#: scheme), Okabe and Ito's sky blue, a mid grey and Tol's dark cyan. Chosen from the Okabe–Ito and Tol schemes so
#: that the smallest CIEDE2000 difference between two of them is 19.7 to normal vision and at least 9.6 under
#: simulated protanopia, deuteranopia and tritanopia (Machado et al., 2009). All but orange and sky blue (2.3:1)
#: have a contrast of at least 3:1 on white; each router keeps its own marker as well.
COLORS = (PALETTE[0], PALETTE[1], PALETTE[2], PALETTE[3], PALETTE[4], PALETTE[5],
          "#332288", "#666633", "#663333", PALETTE[6], "#777777", "#225555")


def router_styles(names: Iterable[str]) -> dict[str, dict]:
    """``{name: {"color": ..., "marker": ...}}`` for the routers ``names``: a router of :data:`BENCH_ROUTERS` keeps
    its own colour and marker whichever routers are drawn beside it; any other router (one written in an exercise)
    takes the first style that no bench router among ``names`` uses, so that up to twelve routers never share a
    colour or a marker (a thirteenth repeats one). Chapter 08.

    >>> router_styles(["uniform", "mine"])["uniform"] == router_styles(["uniform"])["uniform"]
    True
    """
    names = list(names)
    if not all(isinstance(n, str) for n in names):
        raise ValueError(f"names must be router names (str), got {names!r}")
    taken = {BENCH_ROUTERS.index(n) for n in names if n in BENCH_ROUTERS}
    order = [k for k in range(len(COLORS)) if k not in taken] + sorted(taken)
    styles, others = {}, 0
    for name in names:
        if name in BENCH_ROUTERS:
            k = BENCH_ROUTERS.index(name)
        else:
            k = order[others % len(order)]
            others += 1
        styles[name] = {"color": COLORS[k], "marker": MARKERS[k]}
    return styles


def _check_summary(summary) -> dict:
    if not isinstance(summary, dict) or not summary or not all(isinstance(v, dict) for v in summary.values()):
        raise ValueError("summary must be {router: {measure: (mean, sd, se)}}, as "
                         "router_bench.summarize_records returns")
    return summary


def _check_measure(measure: str) -> tuple[str, float]:
    if measure not in MEASURE_LABELS:
        raise ValueError(f"measure must be one of {list(MEASURE_LABELS)}, got {measure!r}")
    return MEASURE_LABELS[measure]


def _value(row: dict, measure: str, scale: float) -> tuple[float, float]:
    """(mean, standard error) × scale, nan where the router has no value, 0 error with one seed."""
    entry = row.get(measure)
    if entry is None:
        return float("nan"), 0.0
    mean, _, se = entry
    return mean * scale, (se or 0.0) * scale


def _plain_log_ticks(ax, values, margin: float = 1.5) -> None:
    """Span ``values`` on a log x axis, ``margin`` times beyond them, with major ticks at 1, 2, 5 × 10^k (every
    integer × 10^k when that gives fewer than three), written as plain numbers; no minor labels."""
    from matplotlib.ticker import FixedLocator, NullFormatter, StrMethodFormatter
    finite = [v for v in values if np.isfinite(v) and v > 0]
    if not finite:
        return
    low, high = min(finite) / margin, max(finite) * margin
    decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
    for mantissas in ((1, 2, 5), range(1, 10)):
        ticks = [m * 10 ** e for e in decades for m in mantissas if low <= m * 10 ** e <= high]
        if len(ticks) >= 3:
            break
    ax.set_xlim(low, high)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_accuracy_time(ax, summary: dict, measure: str = "accuracy", time: str = "train_step_ms",
                       routers: Sequence[str] | None = None, margin: float = 1.5) -> None:
    """On ``ax``: each router's mean ``measure`` (an accuracy) against its mean ``time`` (log axis, ticks as plain
    numbers, ``margin`` times beyond the points), with the standard errors over seeds as error bars. ``routers``
    (default: every router of the summary) are the ones drawn, each in the colour and open marker it has in the whole
    summary (:func:`router_styles`; open, so that two routers on one spot both show), with its name as the series
    label (for a legend); the accuracy axis fits the drawn points. Chapter 08."""
    summary = _check_summary(summary)
    label, scale = _check_measure(measure)
    time_label, _ = _check_measure(time)
    routers = list(summary) if routers is None else list(routers)
    unknown = [n for n in routers if n not in summary]
    if unknown:
        raise ValueError(f"routers must be routers of the summary, got {unknown}")
    styles = router_styles(summary)
    xs = []
    for name in routers:
        x, dx = _value(summary[name], time, 1)
        y, dy = _value(summary[name], measure, scale)
        style = styles[name]
        _, caps, bars = ax.errorbar(x, y, xerr=dx, yerr=dy, fmt=style["marker"], color=style["color"], mfc="none",
                                    mew=1.4, ms=7, elinewidth=0.9, capsize=2, label=name)
        for line in (*caps, *bars):
            line.set_alpha(0.6)                     # lighter than the markers, which they cross
        xs.append(x)
    ax.set_xscale("log")
    _plain_log_ticks(ax, xs, margin)
    ax.set_xlabel(time_label, fontsize=8)
    ax.set_ylabel(label, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3, which="major")


def _leading_routers(summary: dict, time: str, within: float) -> list:
    """The routers, in the summary's order, whose clean accuracy lies within ``within`` points of the best and that
    have a time: those the zoomed row of :func:`accuracy_time_figure` draws."""
    drawn = {n: _value(row, "accuracy", 100)[0] for n, row in summary.items()
             if np.isfinite(_value(row, time, 1)[0])}
    finite = {n: v for n, v in drawn.items() if np.isfinite(v)}
    if not finite:
        return []
    best = max(finite.values())
    return [n for n, v in finite.items() if best - v <= within + 1e-9]


def _zooms(summary: dict, time: str, within: float) -> list:
    """The routers of the zoomed row, or [] where a zoom would show nothing new: fewer than two routers lead, or
    every drawn router does."""
    leading = _leading_routers(summary, time, within)
    drawn = [n for n, row in summary.items()
             if np.isfinite(_value(row, time, 1)[0]) and np.isfinite(_value(row, "accuracy", 100)[0])]
    return leading if 2 <= len(leading) < len(drawn) else []


def _mark_zoom(ax, zoom_ax) -> None:
    """A grey dashed rectangle on ``ax`` around the range that ``zoom_ax`` shows, leaving ``ax``'s limits as they
    were."""
    from matplotlib.patches import Rectangle
    limits = ax.get_xlim(), ax.get_ylim()
    (x0, x1), (y0, y1) = zoom_ax.get_xlim(), zoom_ax.get_ylim()
    ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor=REFERENCE_COLOR, linestyle="--",
                           linewidth=1.0, zorder=0))
    ax.set_xlim(*limits[0])
    ax.set_ylim(*limits[1])


def accuracy_time_figure(summary: dict, time: str = "train_step_ms", zoom_within: float = 0.5):
    """Clean (left) and affine (right) test accuracy against the time of a training step, every router in the top
    row; below them the same two panels zoomed on the routers within ``zoom_within`` points of the best clean
    accuracy (a dashed rectangle marks their range in the top row), which the far less accurate routers would
    otherwise squeeze into one overplotted cluster. No zoomed row where fewer than two routers lead or every router
    does. One legend of the routers at the bottom. Chapter 08."""
    summary = _check_summary(summary)
    _check_measure(time)
    zoomed = _zooms(summary, time, zoom_within)
    rows = 2 if zoomed else 1
    fig, axes = plt.subplots(rows, 2, figsize=(MAX_FIGURE_WIDTH, 7.6 if zoomed else 4.4), constrained_layout=True,
                             squeeze=False)
    for column, measure in enumerate(("accuracy", "affine_accuracy")):
        plot_accuracy_time(axes[0, column], summary, measure, time)
        if zoomed:
            axes[0, column].set_title(f"all {len(summary)} routers", fontsize=8)
            plot_accuracy_time(axes[1, column], summary, measure, time, routers=zoomed, margin=1.15)
            axes[1, column].set_title(f"zoom: the {len(zoomed)} routers within {_points(zoom_within)}\nof the best "
                                      f"clean accuracy", fontsize=8)
            _mark_zoom(axes[0, column], axes[1, column])
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("accuracy against cost (mean over seeds ± standard error)", fontsize=9)
    return attach_description(fig, *accuracy_time_description(summary, time, zoom_within))


def _extremes(values: dict, highest: bool = True) -> list:
    """The routers with the highest (or lowest) finite value, ties included, in the summary's order."""
    finite = {n: v for n, v in values.items() if np.isfinite(v)}
    if not finite:
        return []
    best = max(finite.values()) if highest else min(finite.values())
    return [n for n, v in finite.items() if abs(v - best) <= 1e-9 * max(1.0, abs(best))]


def _span(values: Iterable[float], unit: str, digits: int) -> str:
    """``'27–65 ms'`` (or ``'27 ms'`` when all are equal) over the finite ``values``."""
    finite = [v for v in values if np.isfinite(v)]
    if not finite:
        return f"no value in {unit}"
    low, high = f"{min(finite):.{digits}f}", f"{max(finite):.{digits}f}"
    return f"{low} {unit}" if low == high else f"{low}–{high} {unit}"


def _zoom_sentence(summary: dict, time: str, zoomed: list, within: float) -> str:
    """What the zoomed row of :func:`accuracy_time_figure` shows, in words."""
    rest = [n for n in summary if n not in zoomed]
    clean = [_value(summary[n], "accuracy", 100)[0] for n in zoomed]
    affine = [_value(summary[n], "affine_accuracy", 100)[0] for n in zoomed]
    times = [_value(summary[n], time, 1)[0] for n in zoomed]
    return (f" The bottom row zooms on the {len(zoomed)} routers within {_points(within)} of the best clean accuracy "
            f"({join_words(zoomed)}): {_span(clean, '%', 2)} clean, {_span(affine, '%', 2)} affine, "
            f"{_span(times, 'ms', 0)}; a dashed rectangle marks that range in the top row, where "
            f"{join_words(rest)} {'is' if len(rest) == 1 else 'are'} drawn too.")


def _points(within: float) -> str:
    return f"{within:g} point" + ("" if within == 1 else "s")


def accuracy_time_description(summary: dict, time: str = "train_step_ms", zoom_within: float = 0.5) -> tuple[str, str]:
    """``(alt, caption)`` of :func:`accuracy_time_figure` for the same arguments, written from the points it draws:
    per column the most and the least accurate routers (ties named together) and how many lie within half a point of
    the best, then the fastest and the slowest router with their clean accuracy, then which routers the zoomed row
    shows and the ranges it spans. Chapter 08."""
    summary = _check_summary(summary)
    _check_measure(time)
    zoomed = _zooms(summary, time, zoom_within)
    times = {n: _value(row, time, 1)[0] for n, row in summary.items()}
    panels = []
    clean = {}
    for measure, panel in (("accuracy", "clean"), ("affine_accuracy", "affine")):
        values = {n: _value(row, measure, 100)[0] for n, row in summary.items()}
        if measure == "accuracy":
            clean = values
        best, worst = _extremes(values), _extremes(values, highest=False)
        if not best:
            panels.append(f"{panel}: no router has this accuracy")
            continue
        top = values[best[0]]
        near = sum(1 for v in values.values() if np.isfinite(v) and top - v <= 0.5)
        side = "left" if panel == "clean" else "right"
        timed = join_words([f"{n} ({_ms(times[n])})" for n in best])
        panels.append(f"{panel} ({side}): the most accurate {'is' if len(best) == 1 else 'are'} {timed} at "
                      f"{top:.2f} %, the least accurate {join_words(worst)} at {values[worst[0]]:.2f} %; "
                      f"{near} of {len(values)} routers lie within half a point of the best")
    layout = ("Two rows of two panels, clean (left) and affine (right) test accuracy against the training step's "
              "time on a logarithmic axis, every router in the top row" if zoomed else
              "Two panels of test accuracy against the training step's time on a logarithmic axis")
    alt = (f"{layout}, one open marker and colour per router, {len(summary)} routers. "
           + ". ".join(p[0].upper() + p[1:] for p in panels) + ".")
    fastest, slowest = _extremes(times, highest=False), _extremes(times)
    if fastest:
        alt += (f" The fastest step is {join_words(fastest)}'s ({_ms(times[fastest[0]])}, {clean[fastest[0]]:.2f} % "
                f"clean), the slowest {join_words(slowest)}'s ({_ms(times[slowest[0]])}, {clean[slowest[0]]:.2f} % "
                f"clean).")
    caption = "Clean and affine test accuracy against the time of a training step, per router"
    if zoomed:
        alt += _zoom_sentence(summary, time, zoomed, zoom_within)
        caption += (f"; below, zoomed on the {len(zoomed)} routers within {_points(zoom_within)} of the best clean "
                    f"accuracy")
    return alt, caption


def _ms(value: float) -> str:
    return f"{value:.0f} ms" if np.isfinite(value) else "no time"


def _label_rows(ax, values: list, labels: dict) -> None:
    """Write ``labels["missing"]`` at the left of each row whose value is missing, ``labels["zero"]`` (if not None)
    at the left of each row whose value is exactly 0, so that a reader tells a zero from a missing value where
    neither draws a bar."""
    for k, mean in enumerate(values):
        text = labels["missing"] if np.isnan(mean) else labels.get("zero") if mean == 0 else None
        if text is not None:
            ax.text(0, k, text, va="center", fontsize=7, transform=ax.get_yaxis_transform())


def _router_axis(ax, names: list, label: str) -> None:
    """The routers from top to bottom on ``ax``'s y axis, ``label`` on its x axis."""
    ax.set_yticks(np.arange(len(names)), names, fontsize=7)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlabel(label, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(alpha=0.3, axis="x")


def plot_measure(ax, summary: dict, measure: str) -> None:
    """On ``ax``: one horizontal bar per router from 0, the mean of ``measure`` over seeds in the router's colour, its
    standard error as an error bar; a router whose mean is exactly 0 gets "0" beside its (empty) bar, one without the
    measure "n/a". Chapter 08."""
    summary = _check_summary(summary)
    label, scale = _check_measure(measure)
    names = list(summary)
    values = [_value(summary[n], measure, scale) for n in names]
    styles = router_styles(names)
    means = [0 if np.isnan(m) else m for m, _ in values]
    ax.barh(np.arange(len(names)), means, xerr=[e for _, e in values], color=[styles[n]["color"] for n in names],
            capsize=2)
    _label_rows(ax, [m for m, _ in values], {"missing": " n/a", "zero": " 0"})
    top = max([m + e for m, e in values if not np.isnan(m)] + [0.0])
    ax.set_xlim(0, top * 1.08 if top > 0 else 1.0)        # all zero (no dead capsule): an axis from 0, not ±0.04
    _router_axis(ax, names, label)


def plot_measure_points(ax, summary: dict, measure: str) -> None:
    """On ``ax``: one point per router, the mean of ``measure`` over seeds in the router's colour and marker, its
    standard error as an error bar, on an axis fitted to the points (a dot plot: unlike a bar, a point needs no axis
    from 0, so differences of a few points near 100 % stay visible); a router without the measure gets "n/a". What
    :func:`measures_figure` draws for :data:`POINT_MEASURES`. Chapter 08."""
    summary = _check_summary(summary)
    label, scale = _check_measure(measure)
    names = list(summary)
    values = [_value(summary[n], measure, scale) for n in names]
    styles = router_styles(names)
    for k, (name, (mean, error)) in enumerate(zip(names, values)):
        if np.isfinite(mean):
            ax.errorbar(mean, k, xerr=error, fmt=styles[name]["marker"], color=styles[name]["color"], ms=5,
                        capsize=2, elinewidth=0.9)
    finite = [(m - e, m + e) for m, e in values if np.isfinite(m)]
    if finite:
        low, high = min(lo for lo, _ in finite), max(hi for _, hi in finite)
        pad = max(0.08 * (high - low), 0.05 * max(abs(high), 1.0) if high == low else 0.0)
        ax.set_xlim(low - pad, high + pad)
    _label_rows(ax, [m for m, _ in values], {"missing": " n/a", "zero": None})
    _router_axis(ax, names, label)
    ax.grid(alpha=0.15, axis="y")


def _all_zero(summary: dict, measure: str) -> bool:
    """Whether every router that has ``measure`` has exactly 0 (and at least one has it)."""
    values = [_value(row, measure, 1)[0] for row in summary.values()]
    finite = [v for v in values if np.isfinite(v)]
    return bool(finite) and all(v == 0 for v in finite)


def _check_measures(summary: dict, measures: Sequence[str]) -> tuple[list, list]:
    """``(drawn, zero)``: the measures :func:`measures_figure` draws a panel for, and those it leaves out because
    they are 0 for every router."""
    summary = _check_summary(summary)
    if isinstance(measures, str) or not measures:
        raise ValueError(f"measures must name at least one measure, got {measures!r}")
    for measure in measures:
        _check_measure(measure)
    zero = [m for m in measures if _all_zero(summary, m)]
    return [m for m in measures if m not in zero], zero


def _zero_note(ax, summary: dict, zero: list) -> None:
    """In a cell of the grid, without axes: the measures that are 0 for every router, so have no panel."""
    ax.axis("off")
    lines = [textwrap.fill(MEASURE_LABELS[m][0] + _none_for(summary, m), 34, subsequent_indent="  ") for m in zero]
    ax.text(0.0, 1.0, "0 for every router, so not drawn:\n" + "\n".join("• " + line for line in lines),
            va="top", ha="left", fontsize=8, transform=ax.transAxes)


def _none_for(summary: dict, measure: str) -> str:
    missing = [n for n, row in summary.items() if row.get(measure) is None]
    return f" (none for {join_words(missing)})" if missing else ""


def measures_figure(summary: dict, measures: Sequence[str] = ("affine_accuracy", "inference_ms", "peak_memory_mb",
                                                             "entropy", "dyr", "dead_primary"), columns: int = 3):
    """A grid of panels, one per measure, the routers in the same order in each: accuracies
    (:data:`POINT_MEASURES`) as points on an axis fitted to them (:func:`plot_measure_points`), the others as bars
    from 0 (:func:`plot_measure`). A measure that is 0 for every router gets no panel: a note in the cell after the
    last panel names it. Chapter 08."""
    drawn, zero = _check_measures(summary, measures)
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise ValueError(f"columns must be a positive integer, got {columns!r}")
    cells = len(drawn) + (1 if zero else 0)
    rows = -(-cells // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(MAX_FIGURE_WIDTH, 2.4 * rows), constrained_layout=True,
                             squeeze=False)
    for ax, measure in zip(axes.flat, drawn):
        (plot_measure_points if measure in POINT_MEASURES else plot_measure)(ax, summary, measure)
    spare = list(axes.flat)[len(drawn):]
    if zero:
        _zero_note(spare.pop(0), summary, zero)
    for ax in spare:
        ax.set_visible(False)
    for ax in axes[:, 1:].flat:
        ax.set_yticklabels([])
    return attach_description(fig, *measures_description(summary, measures))


def measures_description(summary: dict, measures: Sequence[str] = ("affine_accuracy", "inference_ms",
                                                                  "peak_memory_mb", "entropy", "dyr",
                                                                  "dead_primary")) -> tuple[str, str]:
    """``(alt, caption)`` of :func:`measures_figure` for the same arguments, written from the panels it draws: per
    measure the routers with the highest and the lowest mean (ties named together), those without the measure, or
    that every router has the same value; a measure that is 0 for every router is named as drawn in no panel.
    Chapter 08."""
    drawn, zero = _check_measures(summary, measures)
    parts = []
    for measure in measures:
        label, scale = _check_measure(measure)
        values = {n: _value(row, measure, scale)[0] for n, row in summary.items()}
        missing = [n for n, v in values.items() if not np.isfinite(v)]
        high, low = _extremes(values), _extremes(values, highest=False)
        if not high:
            text = "no router has it"
        elif values[high[0]] == values[low[0]]:
            text = f"{values[high[0]]:.3g} for every router"
        else:
            text = (f"highest {join_words(high)} ({values[high[0]]:.3g}), lowest {join_words(low)} "
                    f"({values[low[0]]:.3g})")
        if missing and high:
            text += f"; none for {join_words(missing)}"
        if measure in zero:
            text += ", so it has no panel"
        parts.append(f"{label}: {text}")
    points = [m for m in drawn if m in POINT_MEASURES]
    kinds = []
    if points:
        kinds.append(f"{join_words(MEASURE_LABELS[m][0] for m in points)} as points on an axis fitted to them")
    if len(points) < len(drawn):
        kinds.append("the others as bars from 0, a 0 written beside a bar of 0 and n/a where a router has no value"
                     if points else "as bars from 0, a 0 written beside a bar of 0 and n/a where a router has no value")
    alt = (f"{len(drawn)} panels, one per measure, the same {len(summary)} routers from top to bottom in each (mean "
           f"over seeds with its standard error)" + (": " + "; ".join(kinds) if kinds else "") + ". "
           + ". ".join(p[0].upper() + p[1:] for p in parts) + ".")
    if zero:
        alt += (f" A note in the grid says that {join_words(MEASURE_LABELS[m][0] for m in zero)} "
                f"{'is' if len(zero) == 1 else 'are'} 0 for every router.")
    caption = "The bench's measures per router, one panel each"
    if zero:
        caption += f" ({join_words(MEASURE_LABELS[m][0] for m in zero)}: 0 for every router, no panel)"
    return alt, caption
