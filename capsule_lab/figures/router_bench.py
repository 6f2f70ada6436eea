"""Pictures of chapter 08's bench: every router's accuracy against its cost, and one bar chart per measure.

Both read the summary of :func:`capsule_lab.studies.bench.runner.summarize_records` — ``{router: {"seeds": n, measure:
(mean, sd, se) or None}}`` — so they draw whatever the bench measured, cached or fresh. Error bars are standard errors
of the mean over seeds (none with one seed). Each router has its own marker as well as a colour, and each figure carries
its alt text and caption, written from the summary it draws
(:func:`capsule_lab.figures.descriptions.attach_description`), so a chapter's cell ends with ``show(fig)``. Chapter 08.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np

from .descriptions import attach_description, join_words
from .style import MARKERS as _STYLE_MARKERS
from .style import MAX_FIGURE_WIDTH, PALETTE

__all__ = ["MEASURE_LABELS", "MARKERS", "COLORS", "plot_accuracy_time", "accuracy_time_figure",
           "accuracy_time_description", "plot_measure", "measures_figure", "measures_description"]

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


#: A marker per router, beside its colour, so that a router is told apart by shape as well as by colour. These are
#: the course's eight (:data:`capsule_lab.figures.style.MARKERS`), then four more, so that twelve routers never share
#: one.
MARKERS = _STYLE_MARKERS + ("<", ">", "h", "p")


#: A colour per router, from the course palette's first five (each with a WCAG contrast ratio of at least three on
#: white), repeated. A colour comes back after five routers, always with another marker.
COLORS = tuple(PALETTE[k % 5] for k in range(len(MARKERS)))


def _style(k: int) -> dict:
    return {"color": COLORS[k % len(COLORS)], "marker": MARKERS[k % len(MARKERS)]}


def _plain_log_ticks(ax, values) -> None:
    """Major ticks of a log x axis at 1, 2, 5 × 10^k within the data, written as plain numbers; no minor labels."""
    from matplotlib.ticker import FixedLocator, NullFormatter, StrMethodFormatter
    finite = [v for v in values if np.isfinite(v) and v > 0]
    if not finite:
        return
    low, high = min(finite) / 1.5, max(finite) * 1.5
    ticks = [m * 10 ** e for e in range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
             for m in (1, 2, 5) if low <= m * 10 ** e <= high]
    ax.set_xlim(low, high)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_accuracy_time(ax, summary: dict, measure: str = "accuracy", time: str = "train_step_ms") -> None:
    """On ``ax``: each router's mean ``measure`` (an accuracy) against its mean ``time`` (log axis, ticks as plain
    numbers), with the standard errors over seeds as error bars; each router has its own colour and marker, and its
    name as the series label (for a legend). Chapter 08."""
    summary = _check_summary(summary)
    label, scale = _check_measure(measure)
    time_label, _ = _check_measure(time)
    xs = []
    for k, (name, row) in enumerate(summary.items()):
        x, dx = _value(row, time, 1)
        y, dy = _value(row, measure, scale)
        ax.errorbar(x, y, xerr=dx, yerr=dy, fmt=_style(k)["marker"], color=_style(k)["color"], ms=6, capsize=2,
                    label=name)
        xs.append(x)
    ax.set_xscale("log")
    _plain_log_ticks(ax, xs)
    ax.set_xlabel(time_label)
    ax.set_ylabel(label)
    ax.grid(alpha=0.3, which="major")


def accuracy_time_figure(summary: dict, time: str = "train_step_ms"):
    """Two panels, clean and affine test accuracy against the time of a training step, and one legend of the
    routers below them. Chapter 08."""
    fig, axes = plt.subplots(1, 2, figsize=(MAX_FIGURE_WIDTH, 4.2), constrained_layout=True)
    for ax, measure in zip(axes, ("accuracy", "affine_accuracy")):
        plot_accuracy_time(ax, summary, measure, time)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("accuracy against cost (mean over seeds ± standard error)", fontsize=9)
    return attach_description(fig, *accuracy_time_description(summary, time))


def _extremes(values: dict, highest: bool = True) -> list:
    """The routers with the highest (or lowest) finite value, ties included, in the summary's order."""
    finite = {n: v for n, v in values.items() if np.isfinite(v)}
    if not finite:
        return []
    best = max(finite.values()) if highest else min(finite.values())
    return [n for n, v in finite.items() if abs(v - best) <= 1e-9 * max(1.0, abs(best))]


def accuracy_time_description(summary: dict, time: str = "train_step_ms") -> tuple[str, str]:
    """``(alt, caption)`` of :func:`accuracy_time_figure` for the same ``summary``, written from the points it draws:
    per panel the most and the least accurate routers (ties named together) and how many lie within half a point of
    the best, then the fastest and the slowest router with their clean accuracy. Chapter 08."""
    summary = _check_summary(summary)
    _check_measure(time)
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
    alt = (f"Two panels of test accuracy against the training step's time on a logarithmic axis, one marker and "
           f"colour per router, {len(summary)} routers. " + ". ".join(p[0].upper() + p[1:] for p in panels) + ".")
    fastest, slowest = _extremes(times, highest=False), _extremes(times)
    if fastest:
        alt += (f" The fastest step is {join_words(fastest)}'s ({_ms(times[fastest[0]])}, {clean[fastest[0]]:.2f} % "
                f"clean), the slowest {join_words(slowest)}'s ({_ms(times[slowest[0]])}, {clean[slowest[0]]:.2f} % clean).")
    caption = "Clean and affine test accuracy against the time of a training step, per router"
    return alt, caption


def _ms(value: float) -> str:
    return f"{value:.0f} ms" if np.isfinite(value) else "no time"


def plot_measure(ax, summary: dict, measure: str) -> None:
    """On ``ax``: one horizontal bar per router, the mean of ``measure`` over seeds, its standard error as an error
    bar; a router without the measure gets "n/a". Chapter 08."""
    summary = _check_summary(summary)
    label, scale = _check_measure(measure)
    names = list(summary)
    values = [_value(summary[n], measure, scale) for n in names]
    y = np.arange(len(names))
    means = [0 if np.isnan(m) else m for m, _ in values]
    ax.barh(y, means, xerr=[e for _, e in values], color=[_style(k)["color"] for k in range(len(names))], capsize=2)
    for k, (m, _) in enumerate(values):
        if np.isnan(m):
            ax.text(0, k, " n/a", va="center", fontsize=7)
    top = max([m + e for m, e in values if not np.isnan(m)] + [0.0])
    ax.set_xlim(0, top * 1.08 if top > 0 else 1.0)        # all zero (no dead capsule): an axis from 0, not ±0.04
    ax.set_yticks(y, names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(label, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(alpha=0.3, axis="x")


def measures_figure(summary: dict, measures: Sequence[str] = ("affine_accuracy", "inference_ms", "peak_memory_mb",
                                                             "entropy", "dyr", "dead_primary"), columns: int = 3):
    """A grid of :func:`plot_measure` panels, one per measure. Chapter 08."""
    summary = _check_summary(summary)
    if not measures:
        raise ValueError("measures must name at least one measure")
    for measure in measures:
        _check_measure(measure)
    rows = -(-len(measures) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(MAX_FIGURE_WIDTH, 2.4 * rows), constrained_layout=True,
                             squeeze=False)
    for ax, measure in zip(axes.flat, measures):
        plot_measure(ax, summary, measure)
    for ax in list(axes.flat)[len(measures):]:
        ax.set_visible(False)
    for ax in axes[:, 1:].flat:
        ax.set_yticklabels([])
    return attach_description(fig, *measures_description(summary, measures))


def measures_description(summary: dict, measures: Sequence[str] = ("affine_accuracy", "inference_ms",
                                                                  "peak_memory_mb", "entropy", "dyr",
                                                                  "dead_primary")) -> tuple[str, str]:
    """``(alt, caption)`` of :func:`measures_figure` for the same arguments, written from the bars it draws: per
    measure the routers with the highest and the lowest mean (ties named together), those without the measure, or
    that every router has the same value. Chapter 08."""
    summary = _check_summary(summary)
    if not measures:
        raise ValueError("measures must name at least one measure")
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
        parts.append(f"{label}: {text}")
    alt = (f"Bar charts of {len(measures)} measures, one panel each, the same {len(summary)} routers from top to bottom "
           f"in each (mean over seeds with its standard error). " + ". ".join(p[0].upper() + p[1:] for p in parts) + ".")
    caption = "The bench's measures per router, one panel each"
    return alt, caption
