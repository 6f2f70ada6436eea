"""Pictures of chapter 08's bench: every router's accuracy against its cost, and one bar chart per measure.

Both read the summary of :func:`capsule_lab.router_bench.summarize_records` — ``{router: {"seeds": n, measure:
(mean, sd, se) or None}}`` — so they draw whatever the bench measured, cached or fresh. Error bars are standard errors of the
mean over seeds (none with one seed). Chapter 08.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np

from .style import MAX_FIGURE_WIDTH

__all__ = ["MEASURE_LABELS", "MARKERS", "COLORS", "plot_accuracy_time", "accuracy_time_figure", "plot_measure",
           "measures_figure"]

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


#: One marker per router (with its colour), so that a router is told apart by shape as well as by colour.
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<", ">", "h", "*", "p")


#: The routers' colours, matplotlib's ten and then black and dark gold, so that twelve routers never share one.
COLORS = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "#000000", "#8c6d31")


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
        ax.errorbar(x, y, xerr=dx, yerr=dy, fmt=_style(k)["marker"], color=_style(k)["color"], ms=5, capsize=2,
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
    return fig


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
    return fig
