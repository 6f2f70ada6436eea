"""REM's pictures: entropy and accuracy while pruning, entropy against K, keys per class, a class's parse tree
backtracked from the prediction, and saliency maps side by side.

Taught in chapter 05 (``chapters/05_rem.ipynb``), after Renzulli, Tartaglione and Grangetto (the REM paper):

- :func:`pruning_curve_figure` — its Figure 8: entropy (vermillion, circles) and test accuracy (blue, squares) of
  the pruned run per epoch, the overall sparsity on the top axis, the dense run (Q) dashed beside it;
- :func:`entropy_accuracy_figure` — entropy against test accuracy, one point per epoch and one line per run:
  does a lower entropy only come with a less trained model?
- :func:`entropy_vs_levels_figure` — its Figure 7: entropy against the number of quantisation levels K;
- :func:`keys_per_class_figure` — its Figure 9: the number of distinct parse trees (keys) of every class;
- :func:`coupling_histogram_figure` — the couplings to the predicted class, in histograms, with the bin edges of
  the quantisation drawn over them: where the edges cut the band the couplings lie in;
- :func:`parse_tree_graph` / :func:`parse_tree_graph_figure` — its §3.2 parse tree of one class: the class
  capsule on top, an edge to every primary capsule whose mean quantised coupling to it is above a threshold,
  the primary capsules laid out on their grid, and the couplings taken back to the image;
- :func:`saliency_figure` — images with their saliency maps (eq. 16's and Grad-CAM's) overlaid;
- :func:`pruning_explorer_figure` — the picture of :func:`capsule_lab.widgets.pruning_explorer` at one step.

Accuracies are shares in [0, 1] (as :class:`~capsule_lab.rem_study.RoutingMeasure` keeps them) and drawn in %;
entropies are in bits. Pure matplotlib: every function returns the Figure (or draws on a given ``Axes``). Every
``*_figure`` function attaches alt text and a caption written from the data it draws
(:func:`capsule_lab.figures.descriptions.describe`), so that a chapter shows it with ``show(fig)``; series differ by
marker, line style or hatch as well as by colour (:mod:`capsule_lab.figures.style`).
"""

from __future__ import annotations

import math

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from .._checks import check_class_index, check_positive_int, image_array, to_numpy
from ..models import CapsNetConfig
from ..models.capsnet import BackboneConfig
from ..rem_study import RemRun, RoutingMeasure, Step
from .descriptions import describe, join_words
from .style import MAX_FIGURE_WIDTH, PALETTE, REFERENCE_COLOR, series

__all__ = ["plot_pruning_curve", "pruning_curve_figure", "plot_entropy_accuracy", "entropy_accuracy_figure",
           "plot_entropy_vs_levels", "entropy_vs_levels_figure", "plot_keys_per_class", "keys_per_class_figure",
           "coupling_histogram_figure",
           "class_couplings", "receptive_field_centres", "parse_tree_graph", "plot_backtracked_image",
           "parse_tree_graph_figure", "saliency_figure", "step_summary", "pruning_explorer_figure"]

ENTROPY_COLOR = PALETTE[1]      # the paper's Figure 8 draws entropy in red (here vermillion, with circles),
ACCURACY_COLOR = PALETTE[0]     # accuracy in blue (with squares)
#: Hatches of the bars of successive models in :func:`plot_keys_per_class` (the first model's bars are plain).
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo")


# ---------------------------------------------------------------- argument checks

def _check_levels(levels) -> int:
    return check_positive_int(levels, "levels", minimum=2)


def _check_steps(steps, name: str = "steps") -> list:
    if not isinstance(steps, (list, tuple)) or not steps or not all(isinstance(s, Step) for s in steps):
        raise ValueError(f"{name} must be a non-empty list of capsule_lab.rem_study.Step, as RemRun.pruned holds")
    return list(steps)


def _check_runs(runs) -> dict:
    if not isinstance(runs, dict) or not runs:
        raise ValueError("runs must be a non-empty dict {name: list of Step}, e.g. {'Q': run.dense, 'REM': run.pruned}")
    for name, steps in runs.items():
        _check_steps(steps, f"runs[{name!r}]")
    return runs


def _check_measure(measure, name: str = "measure") -> RoutingMeasure:
    if not isinstance(measure, RoutingMeasure):
        raise ValueError(f"{name} must be a capsule_lab.rem_study.RoutingMeasure, got {type(measure).__name__}")
    return measure


def _check_label(label, classes: int) -> int:
    return check_class_index(int(label) if isinstance(label, np.integer) else label, classes)


def _check_grid(grid, capsules: int) -> tuple[int, int, int]:
    if (not isinstance(grid, (tuple, list)) or len(grid) != 3
            or any(isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 1 for g in grid)
            or grid[0] * grid[1] * grid[2] != capsules):
        raise ValueError(f"grid must be (H, W, O), three positive integers with H·W·O = I = {capsules} "
                         f"(the primary capsules), got {grid!r}")
    return int(grid[0]), int(grid[1]), int(grid[2])


def _check_share(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a share in [0, 1], got {value!r}")
    return float(value)


def _series(values, name: str, n: int) -> np.ndarray:
    a = to_numpy(values, name)
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape (K,) = ({n},), one value per number of levels, got {a.shape}")
    return a


def _change(first: float, last: float, tolerance: float) -> str:
    """'rises', 'falls' or 'stays level' from ``first`` to ``last`` (level: within ``tolerance``)."""
    if last > first + tolerance:
        return "rises"
    if last < first - tolerance:
        return "falls"
    return "stays level"


# ---------------------------------------------------------------- entropy and accuracy while pruning (Figure 8)

def _curve(steps: list, levels: int) -> tuple[list, list, list]:
    return ([s.epoch for s in steps], [s.test.entropy(levels) for s in steps],
            [100 * s.test.accuracy for s in steps])


def plot_pruning_curve(ax, steps: list, paper: dict | None = None, dense: list | None = None,
                       levels: int = 11):
    """Draw the REM paper's Figure 8 on ``ax``: the entropy (bits, vermillion circles, left axis) and the test
    accuracy (%, blue squares, right axis, a twin of ``ax``) of ``steps`` per epoch, solid; the dense run's
    ``dense`` (Q) dashed, so that Q and REM compare at the same epoch; the overall sparsity of ``steps`` (%) on a
    top axis; the paper's numbers ``paper = {"entropy": bits, "accuracy": share}`` (either key) as grey dotted
    lines, each named in the legend.

    steps, dense: lists of :class:`~capsule_lab.rem_study.Step` (``RemRun.pruned``, ``RemRun.dense``); entropies
    at ``levels`` levels. Returns ``(ax, accuracy_axis)``. Chapter 05.
    """
    steps = _check_steps(steps)
    dense = None if dense is None else _check_steps(dense, "dense")
    _check_levels(levels)
    if paper is not None and (not isinstance(paper, dict) or not set(paper) <= {"entropy", "accuracy"}):
        raise ValueError("paper must be a dict with the keys 'entropy' (bits) and/or 'accuracy' (a share in [0, 1])")
    paper = dict(paper or {})
    if "entropy" in paper and (isinstance(paper["entropy"], bool) or not isinstance(paper["entropy"], (int, float))
                               or not paper["entropy"] >= 0):
        raise ValueError(f"paper['entropy'] must be a number >= 0 (bits), got {paper['entropy']!r}")
    if "accuracy" in paper:
        _check_share(paper["accuracy"], "paper['accuracy']")
    ax_acc = ax.twinx()
    for run, style, name in ((steps, "-", "REM (pruned)"), (dense, "--", "Q (dense)")):
        if run is None:
            continue
        epochs, entropy, accuracy = _curve(run, levels)
        every = max(1, math.ceil(len(run) / 25))               # markers stay readable on long runs
        ax.plot(epochs, entropy, style, marker="o", ms=3, markevery=every, color=ENTROPY_COLOR,
                label=f"entropy, {name}")
        ax_acc.plot(epochs, accuracy, style, marker="s", ms=3, markevery=every, color=ACCURACY_COLOR,
                    label=f"accuracy, {name}")
    if "entropy" in paper:                                     # reference lines: grey, dotted, labelled
        ax.axhline(float(paper["entropy"]), color=REFERENCE_COLOR, ls=":", lw=1,
                   label=f"paper's REM entropy: {float(paper['entropy']):.2f} bits")
    if "accuracy" in paper:
        share = float(paper["accuracy"])
        ax_acc.axhline(100 * share, color=REFERENCE_COLOR, ls=":", lw=1.6,
                       label=f"paper's REM accuracy: {100 * share:.2f} %")
    epochs = [s.epoch for s in steps]
    every = max(1, math.ceil(len(steps) / 8))                   # at most 8 sparsity labels on the top axis
    top = ax.secondary_xaxis("top")
    top.set_xticks(epochs[::every], [f"{100 * s.sparsity['overall']:.0f}" for s in steps[::every]], fontsize=8)
    top.set_xlabel("overall sparsity of the pruned run (%)", fontsize=9)
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"entropy (bits, K = {levels})", color=ENTROPY_COLOR)
    ax_acc.set_ylabel("test accuracy (%)", color=ACCURACY_COLOR)
    ax.tick_params(axis="y", colors=ENTROPY_COLOR)
    ax_acc.tick_params(axis="y", colors=ACCURACY_COLOR)
    ax.grid(alpha=0.3)
    handles = [h for a in (ax, ax_acc) for h in a.get_legend_handles_labels()[0]]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="upper center", ncol=3,
              bbox_to_anchor=(0.5, -0.16))                    # below the axes: the curves stay uncovered
    return ax, ax_acc


def _pruning_curve_alt(steps: list, dense: list | None, levels: int, paper: dict | None) -> str:
    """What :func:`pruning_curve_figure` draws, in words: each run's entropy and accuracy at its first and last
    epoch, the sparsity reached, the paper's lines."""
    said = []
    for run, name in ((steps, "REM (solid)"), (dense, "Q (dashed)")):
        if run is None:
            continue
        epochs, entropy, accuracy = _curve(run, levels)
        said.append(f"{name}: entropy {_change(entropy[0], entropy[-1], 0.05)} from {entropy[0]:.2f} to "
                    f"{entropy[-1]:.2f} bits, accuracy {_change(accuracy[0], accuracy[-1], 0.05)} from "
                    f"{accuracy[0]:.1f} % to {accuracy[-1]:.1f} %")
    first, last = 100 * steps[0].sparsity["overall"], 100 * steps[-1].sparsity["overall"]
    alt = (f"Per epoch from {steps[0].epoch} to {steps[-1].epoch}, entropy (bits, K = {levels}; circles, left axis) "
           f"and test accuracy (%; squares, right axis); the top axis gives the pruned run's sparsity, from "
           f"{first:.0f} % to {last:.1f} %. " + "; ".join(said) + ".")
    lines = []
    if paper and "entropy" in paper:
        lines.append(f"{float(paper['entropy']):.2f} bits")
    if paper and "accuracy" in paper:
        lines.append(f"{100 * float(paper['accuracy']):.2f} %")
    if lines:
        alt += f" Grey dotted lines mark the paper's REM at {' and '.join(lines)}."
    return alt


def pruning_curve_figure(steps: list, paper: dict | None = None, dense: list | None = None, levels: int = 11,
                         title: str | None = None) -> Figure:
    """The REM paper's Figure 8 for one run: entropy (vermillion, circles) and test accuracy (blue, squares) of the
    pruned run per epoch, the overall sparsity on the top axis, the dense run dashed beside it (see
    :func:`plot_pruning_curve`). The figure carries alt text written from the curves (each run's entropy and
    accuracy at its first and last epoch, the sparsity reached) and ``title`` as its caption. Chapter 05."""
    fig, ax = plt.subplots(figsize=(MAX_FIGURE_WIDTH, 4.3), constrained_layout=True)
    plot_pruning_curve(ax, steps, paper, dense, levels)
    ax.set_title(title or "entropy and accuracy while pruning", fontsize=10)
    return describe(fig, _pruning_curve_alt(steps, dense, levels, paper),
                    title or "Entropy and test accuracy per epoch while pruning")


# ---------------------------------------------------------------- entropy against accuracy

def plot_entropy_accuracy(ax, runs: dict, levels: int = 11) -> list:
    """Draw the entropy (bits) against the test accuracy (%) on ``ax``: one point per step, one line per run of
    ``runs = {name: list of Step}`` in the order of the epochs, its first and last epochs written beside them.
    A run whose entropy is low only while its accuracy is low shows that the low entropy comes with a less
    trained model. Run k is drawn with the course's series k (:func:`~capsule_lab.figures.style.series`: its own
    colour, marker and line style). Returns the lines. Chapter 05."""
    _check_runs(runs)
    _check_levels(levels)
    lines = []
    for k, (name, steps) in enumerate(runs.items()):
        epochs, entropy, accuracy = _curve(steps, levels)
        (line,) = ax.plot(accuracy, entropy, ms=4, markevery=max(1, math.ceil(len(steps) / 25)), label=name,
                          **series(k))
        lines.append(line)
        for k in {0, len(steps) - 1}:
            ax.annotate(f"epoch {epochs[k]}", (accuracy[k], entropy[k]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8, color=line.get_color())
    ax.set_xlabel("test accuracy (%)")
    ax.set_ylabel(f"entropy (bits, K = {levels})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return lines


def _entropy_accuracy_alt(runs: dict, levels: int) -> str:
    """What :func:`entropy_accuracy_figure` draws, in words: each run from its first to its last epoch, in how
    many runs the entropy rose, and which run ends lowest."""
    said, ends, rose = [], {}, 0
    for name, steps in runs.items():
        epochs, entropy, accuracy = _curve(steps, levels)
        said.append(f"{name} from {accuracy[0]:.1f} % and {entropy[0]:.2f} bits (epoch {epochs[0]}) to "
                    f"{accuracy[-1]:.1f} % and {entropy[-1]:.2f} bits (epoch {epochs[-1]})")
        ends[name] = entropy[-1]
        rose += entropy[-1] > entropy[0]
    lowest = min(ends, key=ends.get)
    return (f"Entropy (bits, K = {levels}) against test accuracy (%), one point per epoch and one line per run, each "
            f"run with its own marker and line style: " + "; ".join(said) + f". The entropy is higher at the last "
            f"epoch than at the first in {rose} of {len(runs)} runs; {lowest} ends with the lowest entropy.")


def entropy_accuracy_figure(runs: dict, levels: int = 11, title: str | None = None) -> Figure:
    """Entropy against test accuracy, one point per step and one line per run (:func:`plot_entropy_accuracy`),
    e.g. ``{"Q": run.dense, "REM": run.pruned}``. The figure carries alt text written from the runs (each run's
    first and last point, in how many runs the entropy rose, the run that ends lowest) and ``title`` as its
    caption. Chapter 05."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8), constrained_layout=True)
    plot_entropy_accuracy(ax, runs, levels)
    ax.set_title(title or "entropy against accuracy, one point per epoch", fontsize=10)
    return describe(fig, _entropy_accuracy_alt(runs, levels),
                    title or "Entropy against test accuracy, one point per epoch")


# ---------------------------------------------------------------- entropy against K (Figure 7)

def _check_levels_list(levels) -> list:
    if (not isinstance(levels, (list, tuple)) or not levels
            or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2 for k in levels)):
        raise ValueError(f"levels must be a non-empty list of integers >= 2 (the numbers K), got {levels!r}")
    return [int(k) for k in levels]


def plot_entropy_vs_levels(ax, levels: list, entropies: dict, ceiling: float | None = None) -> list:
    """Draw the entropy (bits) against the number of quantisation levels K on ``ax`` (log₂ scale), one line per
    model of ``entropies = {name: [H at each K]}`` (model k in the course's series k: its own colour, marker and
    line style); ``ceiling`` (e.g. log₂ of the images per class: the most a class's entropy can be, every image
    its own key) as a grey dotted line. Returns the lines. Chapter 05."""
    levels = _check_levels_list(levels)
    if not isinstance(entropies, dict) or not entropies:
        raise ValueError("entropies must be a non-empty dict {name: one entropy per number of levels}")
    lines = []
    for k, (name, values) in enumerate(entropies.items()):
        (line,) = ax.plot(levels, _series(values, f"entropies[{name!r}]", len(levels)), ms=4, label=name,
                          **series(k))
        lines.append(line)
    if ceiling is not None:
        _check_ceiling(ceiling)
        ax.axhline(ceiling, color=REFERENCE_COLOR, ls=":", lw=1.2,
                   label=f"ceiling: log₂(images per class) = {ceiling:.2f}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(k) for k in levels])
    ax.minorticks_off()
    ax.set_xlabel("quantisation levels K")
    ax.set_ylabel("entropy (bits)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return lines


def _check_ceiling(ceiling) -> float:
    if isinstance(ceiling, bool) or not isinstance(ceiling, (int, float, np.floating)) or not ceiling >= 0:
        raise ValueError(f"ceiling must be a number >= 0 (bits), got {ceiling!r}")
    return float(ceiling)


def _levels_entropy_words(name: str, levels: list, v: np.ndarray) -> str:
    """One model's entropy against K in words: its lowest and highest value, and whether it is monotonic."""
    low, high = int(np.argmin(v)), int(np.argmax(v))
    steps = np.diff(v)
    if len(v) < 2 or np.all(steps >= -1e-9):
        shape = "never falling as K grows"
    elif np.all(steps <= 1e-9):
        shape = "never rising as K grows"
    else:
        i = int(np.argmin(steps))
        shape = f"not monotonic (its largest fall from K = {levels[i]} to {levels[i + 1]})"
    return (f"{name}'s is lowest at K = {levels[low]} ({v[low]:.2f} bits), highest at K = {levels[high]} "
            f"({v[high]:.2f}), {shape}")


def _levels_alt(levels: list, entropies: dict, ceiling: float | None, accuracies: dict | None) -> str:
    """What :func:`entropy_vs_levels_figure` draws, in words: each model's entropy against K (lowest, highest,
    monotonic or not), how often the second model is at or below the first, the K near the ceiling, and each
    model's accuracy against K (where it comes within a point of its best)."""
    values = {name: np.asarray(v, dtype=float) for name, v in entropies.items()}
    alt = (f"{'Left: entropy' if accuracies is not None else 'Entropy'} (bits) against K, "
           f"{len(levels)} values from {levels[0]} to {levels[-1]} on a log scale, for {join_words(values)}"
           + ("; right: test accuracy (%)" if accuracies is not None else "") + ". Entropy: "
           + "; ".join(_levels_entropy_words(n, levels, v) for n, v in values.items()) + ".")
    if len(values) >= 2:
        (a, va), (b, vb) = list(values.items())[:2]
        alt += f" {b} is at or below {a} at {int((vb <= va + 1e-9).sum())} of {len(levels)} K."
    if ceiling is not None:
        near = []
        for n, v in values.items():
            ks = [str(k) for k, x in zip(levels, v) if x >= ceiling - 0.25]
            if ks:                                           # a few K by name, many by their number
                near.append(f"{n} at K = {', '.join(ks)}" if len(ks) <= 4 else f"{n} at {len(ks)} of {len(levels)} K")
        alt += (f" Within a quarter bit of the {ceiling:.2f}-bit ceiling (dotted): "
                + ("; ".join(near) if near else "no model at any K") + ".")
    if accuracies is not None:
        said = []
        for name, a in accuracies.items():
            a = 100 * np.asarray(a, dtype=float)
            best = float(a.max())
            start = next(i for i in range(len(a)) if (a[i:] >= best - 1).all())
            said.append(f"{name}'s from K = {levels[start]} on ({best:.1f} % at best, {a[0]:.1f} % at K = {levels[0]})")
        alt += " Accuracy within a point of its best: " + "; ".join(said) + "."
    return alt


def entropy_vs_levels_figure(levels: list, entropies: dict, ceiling: float | None = None,
                             accuracies: dict | None = None) -> Figure:
    """The REM paper's Figure 7: the entropy (bits) against the number of quantisation levels K, one line per
    model (:func:`plot_entropy_vs_levels`); with ``accuracies = {name: [accuracy at each K]}`` (shares in
    [0, 1]) a second panel shows the test accuracy (%) against K, each model in the same style as on the left.
    The figure carries alt text written from the values (each model's lowest and highest entropy and where, whether
    the curve is monotonic, the K near the ceiling, where the accuracy comes within a point of its best) and a
    caption. Chapter 05."""
    panels = 1 if accuracies is None else 2
    fig, axes = plt.subplots(1, panels, figsize=(MAX_FIGURE_WIDTH if panels == 2 else 5.0, 3.5),
                             constrained_layout=True, squeeze=False)
    plot_entropy_vs_levels(axes[0, 0], levels, entropies, ceiling)
    axes[0, 0].set_title("entropy of the parse trees", fontsize=10)
    if accuracies is not None:
        if not isinstance(accuracies, dict) or not accuracies:
            raise ValueError("accuracies must be a non-empty dict {name: one accuracy per number of levels}")
        ax = axes[0, 1]
        levels = _check_levels_list(levels)
        order = {name: k for k, name in enumerate(entropies)}        # a model keeps its style in both panels
        for k, (name, values) in enumerate(accuracies.items()):
            a = _series(values, f"accuracies[{name!r}]", len(levels))
            if a.min() < 0 or a.max() > 1:
                raise ValueError(f"accuracies[{name!r}] must be shares in [0, 1]")
            ax.plot(levels, 100 * a, ms=4, label=name, **series(order.get(name, len(entropies) + k)))
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(k) for k in levels])
        ax.minorticks_off()
        ax.set_xlabel("quantisation levels K")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title("accuracy", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    levels = _check_levels_list(levels)
    ceiling = None if ceiling is None else _check_ceiling(ceiling)
    caption = ("Entropy and test accuracy against the number of quantisation levels K" if accuracies is not None
               else "Entropy of the parse trees against the number of quantisation levels K")
    return describe(fig, _levels_alt(levels, entropies, ceiling, accuracies), caption)


# ---------------------------------------------------------------- keys per class (Figure 9)

def _class_names(class_names, classes: list) -> list[str]:
    if class_names is None:
        return [str(c) for c in classes]
    if isinstance(class_names, dict):
        return [str(class_names.get(c, c)) for c in classes]
    if not isinstance(class_names, (list, tuple)) or len(class_names) <= max(classes):
        raise ValueError(f"class_names must be a list with a name for every class up to {max(classes)}, "
                         f"or a dict {{class: name}}, got {class_names!r}")
    return [str(class_names[c]) for c in classes]


def plot_keys_per_class(ax, keys: dict, class_names=None) -> list:
    """Draw grouped bars on ``ax``: per class, the number of distinct parse trees (keys) of every model of
    ``keys = {name: {class: number of keys}}`` (e.g. ``{"Q": q.test.keys(), "REM": rem.test.keys()}``); a class
    a model never predicted has 0 keys. ``class_names``: a list indexed by class, or a dict. Model k's bars have
    the palette's colour k and the hatch ``HATCHES[k]``, so they differ in grey too. Returns the bar
    containers, one per model. Chapter 05."""
    if not isinstance(keys, dict) or not keys or not all(isinstance(k, dict) for k in keys.values()):
        raise ValueError("keys must be a non-empty dict {name: {class: number of keys}}, as RoutingMeasure.keys gives")
    classes = sorted({c for per_class in keys.values() for c in per_class})
    if not classes:
        raise ValueError("keys must hold at least one class")
    for name, per_class in keys.items():
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in per_class.values()):
            raise ValueError(f"keys[{name!r}] must map classes to numbers of keys (integers >= 0)")
    names = _class_names(class_names, classes)
    x = np.arange(len(classes))
    width = 0.8 / len(keys)
    bars = []
    for k, (name, per_class) in enumerate(keys.items()):
        heights = [per_class.get(c, 0) for c in classes]
        bars.append(ax.bar(x + (k - (len(keys) - 1) / 2) * width, heights, width, label=name,
                           color=PALETTE[k % len(PALETTE)], hatch=HATCHES[k % len(HATCHES)], edgecolor="white",
                           linewidth=0.5))
    ax.set_xticks(x, names, fontsize=8, rotation=30 if max(len(n) for n in names) > 3 else 0)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("keys (distinct parse trees)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return bars


def _keys_alt(keys: dict, class_names) -> str:
    """What :func:`keys_per_class_figure` draws, in words: each model's mean, most and fewest keys per class, and
    in how many classes the second model has fewer keys than the first."""
    classes = sorted({c for per_class in keys.values() for c in per_class})
    names = dict(zip(classes, _class_names(class_names, classes)))
    said = []
    for name, per_class in keys.items():
        counts = {c: per_class.get(c, 0) for c in classes}
        most, fewest = max(counts, key=counts.get), min(counts, key=counts.get)
        said.append(f"{name} has {sum(counts.values()) / len(classes):.1f} keys per class on average, most for "
                    f"{names[most]} ({counts[most]}), fewest for {names[fewest]} ({counts[fewest]})")
    alt = (f"Grouped bars: the number of distinct parse trees (keys) of each of {len(classes)} predicted classes, "
           f"one bar per model ({join_words(keys)}; " + ", ".join(
               f"{name} {'plain' if not HATCHES[k % len(HATCHES)] else 'hatched'}"
               for k, name in enumerate(keys)) + "). " + "; ".join(said) + ".")
    if len(keys) >= 2:
        (a, ka), (b, kb) = list(keys.items())[:2]
        fewer = sum(kb.get(c, 0) < ka.get(c, 0) for c in classes)
        alt += f" {b} has fewer keys than {a} in {fewer} of {len(classes)} classes."
    return alt


def keys_per_class_figure(keys: dict, class_names=None, title: str | None = None) -> Figure:
    """The REM paper's Figure 9: the number of keys of every class, grouped bars per model
    (:func:`plot_keys_per_class`). The figure carries alt text written from the counts (each model's mean, most
    and fewest keys, in how many classes the second model has fewer) and ``title`` as its caption. Chapter 05."""
    fig, ax = plt.subplots(figsize=(MAX_FIGURE_WIDTH, 3.4), constrained_layout=True)
    plot_keys_per_class(ax, keys, class_names)
    ax.set_title(title or "number of parse trees per class (test set)", fontsize=10)
    return describe(fig, _keys_alt(keys, class_names), title or "Number of parse trees per class (test set)")


# ---------------------------------------------------------------- the couplings against the bin edges

_STYLE_WORDS = {"-": "solid", "--": "dashed", "-.": "dash-dotted", ":": "dotted"}


def _bin_edges(levels: int, upper: float) -> list[float]:
    """The edges between the levels of :func:`capsule_lab.rem.quantize` at ``levels`` levels, below ``upper``."""
    return [e for e in ((m + 0.5) / (levels - 1) for m in range(levels - 1)) if e < upper]


def coupling_histogram_figure(couplings: dict, levels=(9, 11), upper: float = 0.3, bins: int = 60,
                              title: str | None = None) -> Figure:
    """Histograms of couplings with the quantisation's bin edges over them: where do the edges of K levels fall
    in the band the couplings lie in? ``couplings = {(panel, model): 1-D couplings}`` (e.g. every test image's
    couplings to its predicted class, ``{("mnist", "Q"): ..., ("mnist", "REM"): ...}``): one panel per panel
    name (at most 3, in order), one step histogram per model from 0 to ``upper`` in ``bins`` bins, model k in the
    course's series k (colour and line style); the edges ``(m + ½) / (K − 1)`` of each K of ``levels`` (at most
    3) as grey lines, dotted, dash-dotted, dashed. The figure carries alt text written from the couplings (the
    band from the 1st to the 99th percentile of each model's, which edges fall inside the widest band) and
    ``title`` (drawn above the panels) as its caption. Chapter 05."""
    if not isinstance(couplings, dict) or not couplings or not all(
            isinstance(key, tuple) and len(key) == 2 for key in couplings):
        raise ValueError("couplings must be a non-empty dict {(panel, model): 1-D couplings}, "
                         "e.g. {('mnist', 'Q'): ..., ('mnist', 'REM'): ...}")
    if isinstance(levels, (str, bytes)) or not isinstance(levels, (list, tuple)) or not 1 <= len(levels) <= 3:
        raise ValueError(f"levels must be a list of 1 to 3 numbers of levels K, got {levels!r}")
    levels = [_check_levels(k) for k in levels]
    if isinstance(upper, bool) or not isinstance(upper, (int, float)) or not 0 < upper <= 1:
        raise ValueError(f"upper must be a number in (0, 1], the right end of the histograms, got {upper!r}")
    check_positive_int(bins, "bins")
    values = {}
    for key, c in couplings.items():
        a = to_numpy(c, f"couplings[{key!r}]")
        if a.ndim != 1 or a.size == 0 or a.min() < 0 or a.max() > 1:
            raise ValueError(f"couplings[{key!r}] must be a non-empty 1-D array of couplings in [0, 1], "
                             f"got shape {a.shape}")
        values[key] = a
    panels = list(dict.fromkeys(panel for panel, _ in values))
    models = list(dict.fromkeys(model for _, model in values))
    if len(panels) > 3:
        raise ValueError(f"couplings must name at most 3 panels, got {panels}")
    fig, axes = plt.subplots(1, len(panels), figsize=(MAX_FIGURE_WIDTH, 2.8), sharey=True, constrained_layout=True,
                             squeeze=False)
    edge_styles = (":", "-.", "--")
    for ax, panel in zip(axes[0], panels):
        for k, model in enumerate(models):
            if (panel, model) in values:
                style = series(k)
                ax.hist(values[panel, model], bins=np.linspace(0, upper, bins + 1), histtype="step", label=model,
                        color=style["color"], linestyle=style["linestyle"], linewidth=1.4)
        for K, ls in zip(levels, edge_styles):
            for m, edge in enumerate(_bin_edges(K, upper)):
                ax.axvline(edge, color=REFERENCE_COLOR, linestyle=ls, linewidth=0.9,
                           label=f"bin edges, K = {K}" if m == 0 else None)
        ax.set_title(f"{panel}: couplings to the predicted class", fontsize=10)
        ax.set_xlabel("coupling $c_{ij}$, $j$ = predicted class")
    axes[0, 0].set_ylabel("capsule–image pairs")
    axes[0, 0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    bands = {key: np.quantile(a, [0.01, 0.99]) for key, a in values.items()}
    low, high = min(b[0] for b in bands.values()), max(b[1] for b in bands.values())
    inside = {K: [e for e in _bin_edges(K, upper) if low < e < high] for K in levels}
    styles = ", ".join(f"{model} {_STYLE_WORDS.get(series(k)['linestyle'], 'patterned')}"
                       for k, model in enumerate(models))
    edges = " and ".join(f"K = {K} ({_STYLE_WORDS[ls]})" for K, ls in zip(levels, edge_styles))
    cut = "; ".join((f"{len(e)} edge{'s' if len(e) > 1 else ''} of K = {K} ({', '.join(f'{x:.4g}' for x in e)})"
                     if e else f"no edge of K = {K}") for K, e in inside.items())
    alt = (f"Histograms of couplings from 0 to {upper:g}, {len(panels)} panel{'s' if len(panels) > 1 else ''} "
           f"({join_words(panels)}), {styles}; grey lines mark the bin edges of {edges}. 98 % of the couplings lie in "
           + "; ".join(f"[{b[0]:.3f}, {b[1]:.3f}] for {panel} {model}" for (panel, model), b in bands.items())
           + f". Between {low:.3f} and {high:.3f} lie {cut}.")
    return describe(fig, alt, title or "Couplings to the predicted class, with the bin edges of "
                    + " and ".join(f"K = {K}" for K in levels))


# ---------------------------------------------------------------- the parse tree of a class (§3.2)

def class_couplings(measure: RoutingMeasure, label: int, levels: int = 11) -> tuple[np.ndarray, int]:
    """:meth:`RoutingMeasure.class_tree <capsule_lab.rem_study.RoutingMeasure.class_tree>` for the pictures (that
    is :func:`capsule_lab.rem.class_parse_tree`): the mean quantised coupling ``c̃_(i,label) / (K − 1)`` of every
    primary capsule i over the images predicted as ``label``, and the number of those images. Returns ``(means
    (I,), number of images)``; the means are 0 when no image was predicted as ``label`` (a picture of an empty
    tree rather than an error). Chapter 05."""
    _check_measure(measure)
    _check_levels(levels)
    label = _check_label(label, measure.classes)
    return measure.class_tree(label, levels).numpy(), int((measure.predictions == label).sum())


def receptive_field_centres(config: BackboneConfig) -> np.ndarray:
    """The pixel coordinate (row or column, from 0) of the centre of the receptive field of every position of a
    primary-capsule grid: ``m · s + (k_conv − 1) / 2 + (k_primary − 1) / 2`` for m = 0 … g − 1 (the first
    convolution has stride 1, the primary capsules' convolution stride s). ``config``: any
    :class:`~capsule_lab.models.capsnet.BackboneConfig` — a :class:`~capsule_lab.models.CapsNetConfig` or a
    :class:`~capsule_lab.models.LadderCapsNetConfig`. For the MNIST CapsNet (9, 9, stride 2): 8, 10, …, 18;
    for the ladder network on 40×40 images: 8, 10, …, 30. Chapters 05 and 06."""
    if not isinstance(config, BackboneConfig):
        raise ValueError(f"config must be a capsule_lab.models.CapsNetConfig or LadderCapsNetConfig (a "
                         f"BackboneConfig), got {type(config).__name__}")
    m = np.arange(config.primary_grid)
    return m * config.primary_stride + (config.conv_kernel - 1) / 2 + (config.primary_kernel - 1) / 2


def _capsule_positions(H: int, W: int, O: int) -> np.ndarray:
    """(I, 2) node positions, capsules ordered (row, column, type): each grid position a unit cell (row r at
    y = −r), its O types on a small sub-grid inside the cell."""
    across = math.ceil(math.sqrt(O))
    down = math.ceil(O / across)
    step = 0.7 / max(across, down, 1)
    r, c, o = np.meshgrid(np.arange(H), np.arange(W), np.arange(O), indexing="ij")
    x = c + (o % across - (across - 1) / 2) * step
    y = -r - (o // across - (down - 1) / 2) * step
    return np.stack([x.ravel(), y.ravel()], axis=1)


def parse_tree_graph(ax, measure: RoutingMeasure, label: int, grid: tuple, levels: int = 11,
                     threshold: float | None = None, title: str | None = None):
    """Draw the parse tree of class ``label`` on ``ax``, backtracked from the predicted class (the REM paper,
    §3.2): the class capsule is a node on top; the primary capsules (``grid = (H, W, O)``, ordered (row, column,
    type) as :func:`capsule_lab.conv_to_capsules` makes them) are laid out as their H × W grid with O nodes per
    position, coloured by their mean quantised coupling to the class (:func:`class_couplings`); an edge joins
    the class to every capsule whose mean quantised coupling is above ``threshold`` (default 1/J, the uniform
    coupling; the paper uses ``1/|Ω|`` for its pictures), its width and opacity ∝ the coupling. The title says
    how many edges survive. Returns the node scatter (for a colour bar). Chapter 05."""
    means, n = class_couplings(measure, label, levels)
    H, W, O = _check_grid(grid, len(means))
    J = measure.classes
    threshold = 1 / J if threshold is None else _check_share(threshold, "threshold")
    positions = _capsule_positions(H, W, O)
    root = np.array([(W - 1) / 2, 1.6])
    kept = np.flatnonzero(means > threshold)
    if len(kept):
        strength = means[kept]
        colors = np.zeros((len(kept), 4))
        colors[:, :3] = mcolors.to_rgb(PALETTE[0])
        colors[:, 3] = 0.15 + 0.85 * strength
        ax.add_collection(LineCollection([[root, positions[i]] for i in kept], colors=colors,
                                         linewidths=0.3 + 2.0 * strength, zorder=1))
    nodes = ax.scatter(positions[:, 0], positions[:, 1], c=means, cmap="viridis", vmin=0, vmax=1,
                       s=max(6.0, 400 / math.sqrt(len(means))), edgecolors="0.3", linewidths=0.3, zorder=2)
    ax.scatter([root[0]], [root[1]], s=260, color=PALETTE[3], edgecolors="black", zorder=3)
    ax.annotate(str(label), root, ha="center", va="center", fontsize=9, zorder=4)
    ax.set_xticks(range(W), [str(c) for c in range(W)], fontsize=8)
    ax.set_yticks([-r for r in range(H)], [str(r) for r in range(H)], fontsize=8)
    ax.set_xlabel("column of the primary grid", fontsize=8)
    ax.set_ylabel("row of the primary grid", fontsize=8)
    ax.set_xlim(-0.6, W - 0.4)
    ax.set_ylim(-H + 0.4, 2.1)
    ax.set_aspect("equal")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    head = f"{title}: " if title else ""
    ax.set_title(f"{head}class {label} ({n} images)\n{len(kept)} of {len(means)} edges > {threshold:.3g}",
                 fontsize=9)
    return nodes


def _default_config(config, image_size: int, grid: tuple) -> CapsNetConfig:
    config = CapsNetConfig(image_size=image_size) if config is None else config
    centres = receptive_field_centres(config)
    if len(centres) != grid[0] or len(centres) != grid[1] or config.image_size != image_size:
        raise ValueError(f"config must give the primary grid (H, W) = ({grid[0]}, {grid[1]}) on "
                         f"{image_size}×{image_size} images; pass the model's CapsNetConfig")
    return config


def _position_sums(measure: RoutingMeasure, label: int, grid: tuple, levels: int) -> np.ndarray:
    """(H, W): the mean quantised couplings of class ``label`` summed over the O types at each grid position."""
    means, _ = class_couplings(measure, label, levels)
    H, W, O = _check_grid(grid, len(means))
    return means.reshape(H, W, O).sum(axis=-1)


def plot_backtracked_image(ax, images, measure: RoutingMeasure, label: int, grid: tuple, levels: int = 11,
                           config: CapsNetConfig | None = None, vmax: float | None = None):
    """Draw on ``ax`` the parse tree of class ``label`` taken back to the image: the mean of the ``images``
    ``(N, 1, S, S)`` (the test images of ``measure``) predicted as ``label``, and at the centre of every grid
    position's receptive field (:func:`receptive_field_centres` of ``config``, by default the course CapsNet's
    9 × 9 convolutions, stride 2, on S × S images) a dot whose size and colour are the summed mean quantised
    coupling of that position's O capsules, on a scale from 0 to ``vmax`` (default: the largest drawn; at most
    O). Returns the dot scatter (for a colour bar). Chapter 05."""
    _check_measure(measure)
    x = image_array(images, "images")
    N = len(measure.predictions)
    if x.shape[0] != N:
        raise ValueError(f"images must have shape (N, 1, S, S) with N = {N}, the images of the measure, "
                         f"got {x.shape}")
    summed = _position_sums(measure, label, grid, levels)
    config = _default_config(config, x.shape[1], summed.shape)
    centres = receptive_field_centres(config)
    chosen = (measure.predictions == label).numpy()
    mean_image = x[chosen].mean(axis=0) if chosen.any() else np.zeros(x.shape[1:])
    ax.imshow(mean_image, cmap="gray", vmin=0, vmax=max(1.0, float(mean_image.max())))
    if vmax is None:
        vmax = max(float(summed.max()), 1e-12)
    elif isinstance(vmax, bool) or not isinstance(vmax, (int, float)) or not vmax > 0:
        raise ValueError(f"vmax must be a number > 0, got {vmax!r}")
    rows, cols = np.meshgrid(centres, centres, indexing="ij")
    size = 10 + 120 * np.minimum(summed.ravel() / vmax, 1)
    dots = ax.scatter(cols.ravel(), rows.ravel(), s=size, c=summed.ravel(), cmap="plasma", vmin=0, vmax=vmax,
                      edgecolors="black", linewidths=0.3)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"mean image of class {label},\ncouplings at the receptive fields", fontsize=9)
    return dots


def _check_images_for(images, measures: dict):
    if images is None:
        return None
    for name, m in measures.items():
        n = len(m.predictions)
        if image_array(images, "images").shape[0] != n:
            raise ValueError(f"images must have shape (N, 1, S, S) with N = {n}, the images of measures[{name!r}]")
    return images


def _tree_words(measure: RoutingMeasure, label: int, grid: tuple, levels: int, threshold: float | None,
                with_image: bool) -> str:
    """One model's parse tree of class ``label`` in words: its edges, its strongest capsule, and (``with_image``)
    the grid position whose summed coupling is largest."""
    means, n = class_couplings(measure, label, levels)
    H, W, O = _check_grid(grid, len(means))
    threshold = 1 / measure.classes if threshold is None else float(threshold)
    edges = int((means > threshold).sum())
    if n == 0:
        return f"no image predicted as class {label}, so no edge"
    r, c, _ = np.unravel_index(int(np.argmax(means)), (H, W, O))
    words = (f"{edges} of {len(means)} edges ({n} images), the strongest coupling {means.max():.2f} at row {r}, "
             f"column {c}")
    if with_image:
        summed = means.reshape(H, W, O).sum(axis=-1)
        r, c = np.unravel_index(int(np.argmax(summed)), (H, W))
        words += f", the largest summed coupling on the image at row {r}, column {c}"
    return words


def parse_tree_graph_figure(measures: dict, label: int, grid: tuple, images=None, levels: int = 11,
                            threshold: float | None = None, config: CapsNetConfig | None = None) -> Figure:
    """The parse tree of class ``label`` for every model of ``measures = {name: RoutingMeasure}`` (e.g.
    ``{"Q": run.q.test, "REM": run.rem.test}``), one row per model: :func:`parse_tree_graph`, and beside it,
    when ``images`` ``(N, 1, S, S)`` (the measures' test images) are given, :func:`plot_backtracked_image`
    (the dots of all models on one colour scale). The figure carries alt text written from the couplings (each
    model's number of edges, its strongest capsule, where on the image the coupling is largest) and a caption.
    Chapter 05."""
    if not isinstance(measures, dict) or not measures:
        raise ValueError("measures must be a non-empty dict {name: RoutingMeasure}")
    for name, m in measures.items():
        _check_measure(m, f"measures[{name!r}]")
    _check_images_for(images, measures)
    columns = 1 if images is None else 2
    vmax = None
    if images is not None:                               # one colour scale for the dots of every model
        vmax = max(max(float(_position_sums(m, label, grid, levels).max()) for m in measures.values()), 1e-12)
    fig, axes = plt.subplots(len(measures), columns, squeeze=False, constrained_layout=True,
                             figsize=(MAX_FIGURE_WIDTH if columns == 2 else 4.6, 3.4 * len(measures)))
    for row, (name, m) in zip(axes, measures.items()):
        nodes = parse_tree_graph(row[0], m, label, grid, levels, threshold, title=name)
        fig.colorbar(nodes, ax=row[0], fraction=0.04, pad=0.02).set_label("mean quantised coupling", fontsize=8)
        if images is not None:
            dots = plot_backtracked_image(row[1], images, m, label, grid, levels, config, vmax)
            fig.colorbar(dots, ax=row[1], fraction=0.04, pad=0.02).set_label("summed over the types", fontsize=8)
    fig.suptitle(f"parse tree of class {label}, backtracked from the predicted class", fontsize=10)
    H, W, O = _check_grid(grid, next(iter(measures.values())).couplings.shape[1])
    shown = 1 / next(iter(measures.values())).classes if threshold is None else threshold
    alt = (f"Parse tree of class {label} for {join_words(measures)}, one row each: edges from the class capsule to the "
           f"primary capsules of the {H} × {W} × {O} grid whose mean quantised coupling (K = {levels}) is above "
           f"{shown:.3g}" + ("; beside each, the class's mean image with a dot at each receptive field, sized by the "
                             "coupling" if images is not None else "") + ". "
           + "; ".join(f"{name}: {_tree_words(m, label, grid, levels, threshold, images is not None)}"
                       for name, m in measures.items()) + ".")
    return describe(fig, alt, f"Parse tree of class {label}, backtracked from the predicted class")


# ---------------------------------------------------------------- saliency maps

def _normalised(m: np.ndarray) -> np.ndarray:
    low, high = float(m.min()), float(m.max())
    return (m - low) / (high - low) if high > low else np.zeros_like(m)


#: The grey level above which :func:`saliency_figure`'s description counts a pixel as the object's (as
#: :func:`capsule_lab.saliency.saliency_on_object` does).
OBJECT_LEVEL = 0.5


def _saliency_alt(x: np.ndarray, arrays: dict, labels) -> str:
    """What :func:`saliency_figure` draws, in words: per map, the share of its (scaled) mass on the object's pixels
    (grey level above ``OBJECT_LEVEL``, 0.5) beside the share of the pixels the object covers, and on how many
    images its brightest pixel is on the object."""
    objects = x > OBJECT_LEVEL
    with_object = [b for b in range(len(x)) if objects[b].any()]
    said = []
    for name, a in arrays.items():
        scaled = np.stack([_normalised(m) for m in a])
        shares = [scaled[b][objects[b]].sum() / scaled[b].sum() for b in with_object if scaled[b].sum() > 0]
        peaks = sum(bool(objects[b].flat[int(np.argmax(scaled[b]))]) for b in with_object if scaled[b].max() > 0)
        said.append(f"{name}: {100 * np.mean(shares):.0f} % of its mass on the object, its brightest pixel there in "
                    f"{peaks} of {len(with_object)} images" if shares else f"{name}: constant on every image")
    rows = f"{len(x)} images in rows" + (f" (predicted {', '.join(str(int(p)) for p in labels)})"
                                          if labels is not None else "")
    covered = f"{100 * objects[with_object].mean():.0f} %" if with_object else "none"
    return (f"{rows}; columns: the image, then {join_words(arrays)} over it, each map scaled to [0, 1] per image "
            f"(viridis, bright = salient). The object's pixels (grey level above {OBJECT_LEVEL:g}) cover {covered} of "
            f"the images. " + "; ".join(said) + ".")


def saliency_figure(images, maps: dict, predictions=None, title: str | None = None) -> Figure:
    """Images with their saliency maps: one row per image; the image, then every map of ``maps = {name: (B, H,
    W)}`` (e.g. eq. 16's coupling saliency and Grad-CAM) over it, each map scaled to [0, 1] per image (a
    constant map shows as 0) in viridis. images ``(B, H, W)`` or ``(B, 1, H, W)``; ``predictions`` ``(B,)`` the
    predicted classes, written beside the rows. At most 7 maps. The figure carries alt text written from the maps
    (per map, the share of its mass on the object's pixels, grey level above ``OBJECT_LEVEL`` (0.5), and on how many
    images its brightest pixel is there) and ``title`` as its caption. Chapter 05."""
    x = image_array(images, "images")
    if not isinstance(maps, dict) or not 1 <= len(maps) <= 7:
        raise ValueError("maps must be a dict {name: (B, H, W)} of 1 to 7 saliency maps")
    arrays = {}
    for name, m in maps.items():
        a = to_numpy(m, f"maps[{name!r}]")
        if a.shape != x.shape:
            raise ValueError(f"maps[{name!r}] must have shape (B, H, W) = {x.shape}, got {a.shape}")
        arrays[name] = a
    labels = None
    if predictions is not None:
        labels = to_numpy(predictions, "predictions")
        if labels.shape != (x.shape[0],):
            raise ValueError(f"predictions must have shape (B,) = ({x.shape[0]},), got {labels.shape}")
    columns = 1 + len(arrays)
    side = min(1.5, MAX_FIGURE_WIDTH / columns)
    fig, axes = plt.subplots(x.shape[0], columns, squeeze=False, constrained_layout=True,
                             figsize=(side * columns, side * x.shape[0] + 0.4))
    overlay = None
    for b, row in enumerate(axes):
        row[0].imshow(x[b], cmap="gray")
        for ax, (name, a) in zip(row[1:], arrays.items()):
            ax.imshow(x[b], cmap="gray")
            overlay = ax.imshow(_normalised(a[b]), cmap="viridis", alpha=0.5, vmin=0, vmax=1)
        for ax in row:
            ax.set_xticks([])
            ax.set_yticks([])
        if labels is not None:
            row[0].set_ylabel(f"predicted {int(labels[b])}", fontsize=8)
    for ax, name in zip(axes[0], ["image", *arrays]):
        ax.set_title(name, fontsize=9)
    fig.colorbar(overlay, ax=axes[:, -1], fraction=0.08, pad=0.04).set_label("saliency (scaled per image)",
                                                                               fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return describe(fig, _saliency_alt(x, arrays, labels),
                    title or f"{join_words(arrays)} over {x.shape[0]} images")


# ---------------------------------------------------------------- the pruning explorer's picture

def step_summary(step: Step, levels: int = 11) -> dict:
    """The numbers of one :class:`~capsule_lab.rem_study.Step`: ``epoch``, ``sparsity`` (overall share),
    ``accuracy`` (share), ``entropy`` (bits, mean over the predicted classes at ``levels`` levels) and
    ``mean_keys`` (keys per predicted class, averaged). Chapter 05."""
    if not isinstance(step, Step):
        raise ValueError(f"step must be a capsule_lab.rem_study.Step, got {type(step).__name__}")
    _check_levels(levels)
    entropy, keys = step.test.class_entropy(levels), step.test.keys(levels)
    return {"epoch": step.epoch, "sparsity": step.sparsity["overall"], "accuracy": step.test.accuracy,
            "entropy": sum(entropy.values()) / len(entropy) if entropy else math.nan,
            "mean_keys": sum(keys.values()) / len(keys) if keys else math.nan}


def _check_run(run) -> RemRun:
    if not isinstance(run, RemRun) or not run.pruned:
        raise ValueError("run must be a capsule_lab.rem_study.RemRun with pruned steps, as run_rem returns")
    return run


def _check_step_index(run: RemRun, step) -> int:
    if isinstance(step, Step):
        found = [k for k, s in enumerate(run.pruned) if s is step]
        if not found:
            raise ValueError("step must be one of run.pruned (or an index into it), got a Step that is not")
        return found[0]
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or not 0 <= step < len(run.pruned):
        raise ValueError(f"step must be an index into run.pruned, in [0, {len(run.pruned)}), got {step!r}")
    return int(step)


def pruning_explorer_figure(run: RemRun, step: int, label: int, grid: tuple, images=None, levels: int = 11,
                            config: CapsNetConfig | None = None) -> Figure:
    """The pruning explorer's picture (:func:`capsule_lab.widgets.pruning_explorer`) at ``run.pruned[step]``
    (``step`` an index, or one of the Steps of ``run.pruned``): the parse tree of class ``label``
    (:func:`parse_tree_graph`), the couplings taken back to the mean image when ``images`` are given
    (:func:`plot_backtracked_image`), and a box with the step's epoch, sparsity, accuracy, entropy and mean keys
    (:func:`step_summary`), beside the dense run's at the same epoch. The figure carries alt text written from
    these (the tree's edges, where on the image the coupling is largest, the box's numbers) and a caption naming
    the run, the epoch and the class. Chapter 05."""
    _check_run(run)
    step = _check_step_index(run, step)
    s = run.pruned[step]
    _check_images_for(images, {"run.pruned[step].test": s.test})
    panels = 2 if images is None else 3
    fig, axes = plt.subplots(1, panels, figsize=(MAX_FIGURE_WIDTH, 3.6), constrained_layout=True,
                             gridspec_kw={"width_ratios": [1.3, 1, 0.9][:panels - 1] + [0.9]})
    parse_tree_graph(axes[0], s.test, label, grid, levels)
    if images is not None:
        plot_backtracked_image(axes[1], images, s.test, label, grid, levels, config)
    numbers = step_summary(s, levels)
    lines = [f"epoch {numbers['epoch']}" + (" (REM's model)" if step == len(run.pruned) - 1 else ""),
             f"sparsity {100 * numbers['sparsity']:.1f} %",
             f"accuracy {100 * numbers['accuracy']:.2f} %",
             f"entropy {numbers['entropy']:.2f} bits (K = {levels})",
             f"keys per class {numbers['mean_keys']:.1f}"]
    dense = [d for d in run.dense if d.epoch == s.epoch]
    if dense:
        q = step_summary(dense[0], levels)
        lines += ["", f"Q at epoch {q['epoch']}:", f"accuracy {100 * q['accuracy']:.2f} %",
                  f"entropy {q['entropy']:.2f} bits", f"keys per class {q['mean_keys']:.1f}"]
    box = axes[-1]
    box.axis("off")
    box.text(0.0, 0.5, "\n".join(lines), va="center", ha="left", fontsize=8, family="monospace",
             bbox={"boxstyle": "round", "facecolor": "0.95", "edgecolor": "0.6"}, transform=box.transAxes)
    fig.suptitle(f"{run.dataset}, seed {run.seed}: the pruned run after {numbers['epoch']} epochs", fontsize=10)
    which = " (REM's model)" if step == len(run.pruned) - 1 else ""
    alt = (f"The pruned run of {run.dataset}, seed {run.seed}, at epoch {numbers['epoch']}{which}, "
           f"{100 * numbers['sparsity']:.1f} % sparse. Parse tree of class {label}: "
           f"{_tree_words(s.test, label, grid, levels, None, images is not None)}. The box: accuracy "
           f"{100 * numbers['accuracy']:.2f} %, entropy {numbers['entropy']:.2f} bits (K = {levels}), "
           f"{numbers['mean_keys']:.1f} keys per class")
    if dense:
        alt += (f"; Q at the same epoch: accuracy {100 * q['accuracy']:.2f} %, entropy {q['entropy']:.2f} bits, "
                f"{q['mean_keys']:.1f} keys per class")
    return describe(fig, alt + ".", f"The pruned run of {run.dataset}, seed {run.seed}, at epoch {numbers['epoch']}"
                    f"{which}: the parse tree of class {label}")
