"""REM's runs epoch by epoch: entropy and accuracy while pruning, entropy against accuracy, and one step of the
pruned run with a class's parse tree.

Taught in chapter 05 (``chapters/05_rem.ipynb``), after Renzulli, Tartaglione and Grangetto (the REM paper):

- :func:`pruning_curve_figure` — its Figure 8: entropy (vermillion, circles) and test accuracy (blue, squares) of
  the pruned run per epoch, the overall sparsity on the top axis, the dense run (Q) dashed beside it;
- :func:`entropy_accuracy_figure` — entropy against test accuracy, one point per epoch and one line per run:
  does a lower entropy only come with a less trained model?
- :func:`pruning_explorer_figure` — the picture of :func:`capsule_lab.widgets.pruning_explorer` at one step: a class's
  parse tree (:mod:`capsule_lab.figures.parse_trees`) and the step's numbers (:func:`step_summary`).

The functions take plain data. A run's **epoch curve** is the dict ``{"levels": K, "epoch": [...], "accuracy":
[...], "entropy": [...], "sparsity": [...]}``: per epoch the test accuracy (a share in [0, 1], drawn in %), the mean
parse-tree entropy at K levels (bits) and the overall sparsity (a share);
:func:`capsule_lab.studies.rem_pictures.epoch_curve` makes it from a run's steps. The explorer's run is
:func:`capsule_lab.studies.rem_pictures.pruning_explorer_run`'s dict. Pure matplotlib: every function returns the Figure
(or draws on a given ``Axes``). Every ``*_figure`` function attaches alt text and a caption written from the data it
draws (:func:`capsule_lab.figures.descriptions.attach_description`), so that a chapter shows it with ``show(fig)``;
series differ by marker and line style as well as by colour (:mod:`capsule_lab.figures.style`).
"""

from __future__ import annotations

import math
from typing import Mapping

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .._checks import check_positive_int, image_array, to_numpy
from ..models import CapsNetConfig
from .descriptions import attach_description
from .parse_trees import check_parse_trees, parse_tree_graph, parse_tree_words, plot_backtracked_image
from .style import MAX_FIGURE_WIDTH, PALETTE, REFERENCE_COLOR, series

__all__ = ["check_epoch_curve", "plot_pruning_curve", "pruning_curve_figure", "plot_entropy_accuracy",
           "entropy_accuracy_figure", "step_summary", "pruning_explorer_figure"]

ENTROPY_COLOR = PALETTE[1]      # the paper's Figure 8 draws entropy in red (here vermillion, with circles),
ACCURACY_COLOR = PALETTE[0]     # accuracy in blue (with squares)
_CURVE_KEYS = ("epoch", "accuracy", "entropy", "sparsity")
#: The numbers of a step of the pruning explorer's run (:func:`step_summary`).
_STEP_KEYS = ("epoch", "sparsity", "accuracy", "entropy", "mean_keys")


# ---------------------------------------------------------------- argument checks

def check_epoch_curve(curve, name: str = "curve") -> dict:
    """A run's epoch curve (see the module), checked: ``levels`` K >= 2 and one ``epoch``, ``accuracy`` (a share),
    ``entropy`` (bits, >= 0) and ``sparsity`` (a share) per epoch, as numpy arrays. Chapter 05."""
    if not isinstance(curve, Mapping) or not {"levels", *_CURVE_KEYS} <= set(curve):
        raise ValueError(f"{name} must be a dict {{'levels': K, 'epoch', 'accuracy', 'entropy', 'sparsity': one value "
                         f"per epoch}}, a run's epoch curve (capsule_lab.studies.rem_pictures.epoch_curve), got "
                         f"{type(curve).__name__}")
    levels = check_positive_int(curve["levels"], f"{name}['levels']", minimum=2)
    columns = {key: to_numpy(curve[key], f"{name}[{key!r}]") for key in _CURVE_KEYS}
    n = len(columns["epoch"])
    for key, a in columns.items():
        if a.shape != (n,) or n == 0:
            raise ValueError(f"{name}[{key!r}] must have shape (E,) = ({n},), one value per epoch, got {a.shape}")
    for key in ("accuracy", "sparsity"):
        if columns[key].min() < 0 or columns[key].max() > 1:
            raise ValueError(f"{name}[{key!r}] must be shares in [0, 1]")
    if columns["entropy"].min() < 0:
        raise ValueError(f"{name}['entropy'] must be >= 0 (bits)")
    if np.any(columns["epoch"] != np.round(columns["epoch"])):
        raise ValueError(f"{name}['epoch'] must be whole numbers of epochs")
    return {"levels": levels, **columns, "epoch": columns["epoch"].astype(int)}


def _check_curves(curves) -> dict:
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError("curves must be a non-empty dict {name: epoch curve}, e.g. {'Q': epoch_curve(run.dense), "
                         "'REM': epoch_curve(run.pruned)}")
    checked = {name: check_epoch_curve(c, f"curves[{name!r}]") for name, c in curves.items()}
    if len({c["levels"] for c in checked.values()}) > 1:
        raise ValueError(f"curves must share one number of levels K, got "
                         f"{ {name: c['levels'] for name, c in checked.items()} }")
    return checked


def _check_pruned_and_dense(curve, dense) -> tuple:
    curve = check_epoch_curve(curve)
    dense = None if dense is None else check_epoch_curve(dense, "dense")
    if dense is not None and dense["levels"] != curve["levels"]:
        raise ValueError(f"dense must be at the curve's number of levels K = {curve['levels']}, got {dense['levels']}")
    return curve, dense


def _check_paper(paper) -> dict:
    if paper is not None and (not isinstance(paper, dict) or not set(paper) <= {"entropy", "accuracy"}):
        raise ValueError("paper must be a dict with the keys 'entropy' (bits) and/or 'accuracy' (a share in [0, 1])")
    paper = dict(paper or {})
    if "entropy" in paper and (isinstance(paper["entropy"], bool) or not isinstance(paper["entropy"], (int, float))
                               or not paper["entropy"] >= 0):
        raise ValueError(f"paper['entropy'] must be a number >= 0 (bits), got {paper['entropy']!r}")
    if "accuracy" in paper and (isinstance(paper["accuracy"], bool) or not isinstance(paper["accuracy"], (int, float))
                                or not 0 <= paper["accuracy"] <= 1):
        raise ValueError(f"paper['accuracy'] must be a share in [0, 1], got {paper['accuracy']!r}")
    return paper


def _change(first: float, last: float, tolerance: float) -> str:
    """'rises', 'falls' or 'stays level' from ``first`` to ``last`` (level: within ``tolerance``)."""
    if last > first + tolerance:
        return "rises"
    if last < first - tolerance:
        return "falls"
    return "stays level"


# ---------------------------------------------------------------- entropy and accuracy while pruning (Figure 8)

def plot_pruning_curve(ax, curve, paper: dict | None = None, dense=None):
    """Draw the REM paper's Figure 8 on ``ax``: the entropy (bits, vermillion circles, left axis) and the test
    accuracy (%, blue squares, right axis, a twin of ``ax``) of the pruned run's epoch ``curve`` per epoch, solid;
    the dense run's curve ``dense`` (Q) dashed, so that Q and REM compare at the same epoch; the overall sparsity of
    ``curve`` (%) on a top axis; the paper's numbers ``paper = {"entropy": bits, "accuracy": share}`` (either key)
    as grey dotted lines, each named in the legend.

    curve, dense: epoch curves (see the module; :func:`capsule_lab.studies.rem_pictures.epoch_curve` of
    ``RemRun.pruned`` and ``RemRun.dense``), at the same K. Returns ``(ax, accuracy_axis)``. Chapter 05.
    """
    curve, dense = _check_pruned_and_dense(curve, dense)
    paper = _check_paper(paper)
    levels = curve["levels"]
    ax_acc = ax.twinx()
    for run, style, name in ((curve, "-", "REM (pruned)"), (dense, "--", "Q (dense)")):
        if run is None:
            continue
        every = max(1, math.ceil(len(run["epoch"]) / 25))               # markers stay readable on long runs
        ax.plot(run["epoch"], run["entropy"], style, marker="o", ms=3, markevery=every, color=ENTROPY_COLOR,
                label=f"entropy, {name}")
        ax_acc.plot(run["epoch"], 100 * run["accuracy"], style, marker="s", ms=3, markevery=every,
                    color=ACCURACY_COLOR, label=f"accuracy, {name}")
    if "entropy" in paper:                                     # reference lines: grey, dotted, labelled
        ax.axhline(float(paper["entropy"]), color=REFERENCE_COLOR, ls=":", lw=1,
                   label=f"paper's REM entropy: {float(paper['entropy']):.2f} bits")
    if "accuracy" in paper:
        share = float(paper["accuracy"])
        ax_acc.axhline(100 * share, color=REFERENCE_COLOR, ls=":", lw=1.6,
                       label=f"paper's REM accuracy: {100 * share:.2f} %")
    epochs = curve["epoch"]
    every = max(1, math.ceil(len(epochs) / 8))                  # at most 8 sparsity labels on the top axis
    top = ax.secondary_xaxis("top")
    top.set_xticks(epochs[::every], [f"{100 * s:.0f}" for s in curve["sparsity"][::every]], fontsize=8)
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


def _pruning_curve_alt(curve: dict, dense: dict | None, paper: dict) -> str:
    """What :func:`pruning_curve_figure` draws, in words: each run's entropy and accuracy at its first and last
    epoch, the sparsity reached, the paper's lines."""
    said = []
    for run, name in ((curve, "REM (solid)"), (dense, "Q (dashed)")):
        if run is None:
            continue
        entropy, accuracy = run["entropy"], 100 * run["accuracy"]
        said.append(f"{name}: entropy {_change(entropy[0], entropy[-1], 0.05)} from {entropy[0]:.2f} to "
                    f"{entropy[-1]:.2f} bits, accuracy {_change(accuracy[0], accuracy[-1], 0.05)} from "
                    f"{accuracy[0]:.1f} % to {accuracy[-1]:.1f} %")
    first, last = 100 * curve["sparsity"][0], 100 * curve["sparsity"][-1]
    alt = (f"Per epoch from {curve['epoch'][0]} to {curve['epoch'][-1]}, entropy (bits, K = {curve['levels']}; "
           f"circles, left axis) and test accuracy (%; squares, right axis); the top axis gives the pruned run's "
           f"sparsity, from {first:.0f} % to {last:.1f} %. " + "; ".join(said) + ".")
    lines = []
    if "entropy" in paper:
        lines.append(f"{float(paper['entropy']):.2f} bits")
    if "accuracy" in paper:
        lines.append(f"{100 * float(paper['accuracy']):.2f} %")
    if lines:
        alt += f" Grey dotted lines mark the paper's REM at {' and '.join(lines)}."
    return alt


def pruning_curve_figure(curve, paper: dict | None = None, dense=None, title: str | None = None) -> Figure:
    """The REM paper's Figure 8 for one run: entropy (vermillion, circles) and test accuracy (blue, squares) of the
    pruned run's epoch ``curve`` per epoch, the overall sparsity on the top axis, the dense run's curve dashed beside
    it (see :func:`plot_pruning_curve`). The figure carries alt text written from the curves (each run's entropy and
    accuracy at its first and last epoch, the sparsity reached) and ``title`` as its caption. Chapter 05."""
    alt = _pruning_curve_alt(*_check_pruned_and_dense(curve, dense), _check_paper(paper))
    fig, ax = plt.subplots(figsize=(MAX_FIGURE_WIDTH, 4.3), constrained_layout=True)
    plot_pruning_curve(ax, curve, paper, dense)
    ax.set_title(title or "entropy and accuracy while pruning", fontsize=10)
    return attach_description(fig, alt, title or "Entropy and test accuracy per epoch while pruning")


# ---------------------------------------------------------------- entropy against accuracy

def plot_entropy_accuracy(ax, curves: dict) -> list:
    """Draw the entropy (bits) against the test accuracy (%) on ``ax``: one point per epoch, one line per run of
    ``curves = {name: epoch curve}`` (at one K) in the order of the epochs, its first and last epochs written beside
    them. A run whose entropy is low only while its accuracy is low shows that the low entropy comes with a less
    trained model. Run k is drawn with the course's series k (:func:`~capsule_lab.figures.style.series`: its own
    colour, marker and line style). Returns the lines. Chapter 05."""
    checked = _check_curves(curves)
    lines = []
    for k, (name, c) in enumerate(checked.items()):
        epochs, entropy, accuracy = c["epoch"], c["entropy"], 100 * c["accuracy"]
        (line,) = ax.plot(accuracy, entropy, ms=4, markevery=max(1, math.ceil(len(epochs) / 25)), label=name,
                          **series(k))
        lines.append(line)
        for k in {0, len(epochs) - 1}:
            ax.annotate(f"epoch {epochs[k]}", (accuracy[k], entropy[k]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8, color=line.get_color())
    ax.set_xlabel("test accuracy (%)")
    ax.set_ylabel(f"entropy (bits, K = {next(iter(checked.values()))['levels']})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return lines


def _entropy_accuracy_alt(curves: dict) -> str:
    """What :func:`entropy_accuracy_figure` draws, in words: each run from its first to its last epoch, in how
    many runs the entropy rose, and which run ends lowest."""
    said, ends, rose = [], {}, 0
    for name, c in curves.items():
        epochs, entropy, accuracy = c["epoch"], c["entropy"], 100 * c["accuracy"]
        said.append(f"{name} from {accuracy[0]:.1f} % and {entropy[0]:.2f} bits (epoch {epochs[0]}) to "
                    f"{accuracy[-1]:.1f} % and {entropy[-1]:.2f} bits (epoch {epochs[-1]})")
        ends[name] = entropy[-1]
        rose += entropy[-1] > entropy[0]
    lowest = min(ends, key=ends.get)
    levels = next(iter(curves.values()))["levels"]
    return (f"Entropy (bits, K = {levels}) against test accuracy (%), one point per epoch and one line per run, each "
            f"run with its own marker and line style: " + "; ".join(said) + f". The entropy is higher at the last "
            f"epoch than at the first in {rose} of {len(curves)} runs; {lowest} ends with the lowest entropy.")


def entropy_accuracy_figure(curves: dict, title: str | None = None) -> Figure:
    """Entropy against test accuracy, one point per epoch and one line per run (:func:`plot_entropy_accuracy`),
    e.g. ``{"Q": epoch_curve(run.dense), "REM": epoch_curve(run.pruned)}``. The figure carries alt text written from
    the runs (each run's first and last point, in how many runs the entropy rose, the run that ends lowest) and
    ``title`` as its caption. Chapter 05."""
    alt = _entropy_accuracy_alt(_check_curves(curves))
    fig, ax = plt.subplots(figsize=(5.5, 3.8), constrained_layout=True)
    plot_entropy_accuracy(ax, curves)
    ax.set_title(title or "entropy against accuracy, one point per epoch", fontsize=10)
    return attach_description(fig, alt, title or "Entropy against test accuracy, one point per epoch")


# ---------------------------------------------------------------- the pruning explorer's picture

def step_summary(step) -> dict:
    """The numbers of one step of the pruning explorer's run
    (:func:`capsule_lab.studies.rem_pictures.pruning_explorer_run`): ``epoch``, ``sparsity`` (overall share),
    ``accuracy`` (share), ``entropy`` (bits, mean over the predicted classes at the run's K) and ``mean_keys`` (keys per
    predicted class, averaged). Chapter 05."""
    if not isinstance(step, Mapping) or not set(_STEP_KEYS) <= set(step):
        raise ValueError(f"step must be a dict with the keys {list(_STEP_KEYS)}, a step of "
                         f"capsule_lab.studies.rem_pictures.pruning_explorer_run, got {type(step).__name__}")
    return {key: step[key] for key in _STEP_KEYS}


def _check_run(run) -> dict:
    if (not isinstance(run, Mapping) or not {"dataset", "seed", "levels", "pruned", "dense"} <= set(run)
            or not isinstance(run["pruned"], (list, tuple)) or not run["pruned"]
            or not isinstance(run["dense"], (list, tuple))):
        raise ValueError("run must be a dict {'dataset', 'seed', 'levels', 'pruned': [steps], 'dense': [steps]} with "
                         "pruned steps, as capsule_lab.studies.rem_pictures.pruning_explorer_run makes it")
    for k, s in enumerate(run["pruned"]):
        step_summary(s)
        check_parse_trees(s.get("trees"), f"run['pruned'][{k}]['trees']")
    return run


def _check_step_index(run: dict, step) -> int:
    n = len(run["pruned"])
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or not 0 <= step < n:
        raise ValueError(f"step must be an index into run['pruned'], in [0, {n}), got {step!r}")
    return int(step)


def pruning_explorer_figure(run, step: int, label: int, grid: tuple, images=None,
                            config: CapsNetConfig | None = None) -> Figure:
    """The pruning explorer's picture (:func:`capsule_lab.widgets.pruning_explorer`) at ``run["pruned"][step]``
    (``run``: :func:`capsule_lab.studies.rem_pictures.pruning_explorer_run`'s dict): the parse tree of class ``label``
    (:func:`~capsule_lab.figures.parse_trees.parse_tree_graph`), the couplings taken back to the mean image when
    ``images`` are given (:func:`~capsule_lab.figures.parse_trees.plot_backtracked_image`), and a box with the step's
    epoch, sparsity, accuracy, entropy and mean keys (:func:`step_summary`), beside the dense run's at the same
    epoch. The figure carries alt text written from these (the tree's edges, where on the image the coupling is
    largest, the box's numbers) and a caption naming the run, the epoch and the class. Chapter 05."""
    run = _check_run(run)
    step = _check_step_index(run, step)
    s = run["pruned"][step]
    trees, levels = s["trees"], run["levels"]
    if images is not None and image_array(images, "images").shape[0] != len(check_parse_trees(trees)["predictions"]):
        raise ValueError(f"images must have shape (N, 1, S, S) with N = {len(trees['predictions'])}, the images of "
                         f"run['pruned'][{step}]['trees']")
    panels = 2 if images is None else 3
    fig, axes = plt.subplots(1, panels, figsize=(MAX_FIGURE_WIDTH, 3.6), constrained_layout=True,
                             gridspec_kw={"width_ratios": [1.3, 1, 0.9][:panels - 1] + [0.9]})
    parse_tree_graph(axes[0], trees, label, grid)
    if images is not None:
        plot_backtracked_image(axes[1], images, trees, label, grid, config)
    numbers = step_summary(s)
    last = step == len(run["pruned"]) - 1
    lines = [f"epoch {numbers['epoch']}" + (" (REM's model)" if last else ""),
             f"sparsity {100 * numbers['sparsity']:.1f} %",
             f"accuracy {100 * numbers['accuracy']:.2f} %",
             f"entropy {numbers['entropy']:.2f} bits (K = {levels})",
             f"keys per class {numbers['mean_keys']:.1f}"]
    dense = [d for d in run["dense"] if d["epoch"] == s["epoch"]]
    if dense:
        q = step_summary(dense[0])
        lines += ["", f"Q at epoch {q['epoch']}:", f"accuracy {100 * q['accuracy']:.2f} %",
                  f"entropy {q['entropy']:.2f} bits", f"keys per class {q['mean_keys']:.1f}"]
    box = axes[-1]
    box.axis("off")
    box.text(0.0, 0.5, "\n".join(lines), va="center", ha="left", fontsize=8, family="monospace",
             bbox={"boxstyle": "round", "facecolor": "0.95", "edgecolor": "0.6"}, transform=box.transAxes)
    name = f"{run['dataset']}, seed {run['seed']}"
    fig.suptitle(f"{name}: the pruned run after {numbers['epoch']} epochs", fontsize=10)
    which = " (REM's model)" if last else ""
    alt = (f"The pruned run of {name}, at epoch {numbers['epoch']}{which}, "
           f"{100 * numbers['sparsity']:.1f} % sparse. Parse tree of class {label}: "
           f"{parse_tree_words(trees, label, grid, None, images is not None)}. The box: accuracy "
           f"{100 * numbers['accuracy']:.2f} %, entropy {numbers['entropy']:.2f} bits (K = {levels}), "
           f"{numbers['mean_keys']:.1f} keys per class")
    if dense:
        alt += (f"; Q at the same epoch: accuracy {100 * q['accuracy']:.2f} %, entropy {q['entropy']:.2f} bits, "
                f"{q['mean_keys']:.1f} keys per class")
    return attach_description(fig, alt + ".", f"The pruned run of {name}, at epoch {numbers['epoch']}{which}: the "
                              f"parse tree of class {label}")
