"""The ladder capsule network's pictures: which lower capsules matter, how many the pruning layer keeps, and what
the ladder layer regresses.

Taught in chapter 06 (``chapters/06_ladder.ipynb``), after Jeong, Lee and Kim, "Ladder capsule network" (ICML
2019):

- :func:`coupling_length_figure` — its Figure 1 (the thought experiment of §3.1): the lengths of the most active
  primary capsules of a trained dynamic-routing CapsNet (bars) and their couplings to the digit's class (a line,
  the uniform coupling 1/J dashed), from :func:`capsule_lab.measures.activity.most_active_couplings`;
- :func:`activity_profile_figure` — its Figure 4: the mean activity of the most active primary capsules by rank,
  one curve per K, from :func:`capsule_lab.measures.activity.activity_profile`;
- :func:`plot_kept_capsules` — the primary capsules the pruning layer keeps, at the centres of their receptive
  fields on the image (:mod:`capsule_lab.figures.geometry`);
- :func:`ladder_explorer_result` / :func:`ladder_explorer_figure` — one image through an L-CapsNet: the kept
  capsules, the predicted class's regression of them (eqs. 2–3) against their actual poses, the per-capsule
  squared distances and the class activities d_j (eq. 4); the picture of
  :func:`capsule_lab.widgets.ladder_explorer` (:func:`draw_ladder_explorer` draws it from the result).

Its Table 3, the seconds per training step, is :mod:`capsule_lab.figures.step_times`'. Pure matplotlib: every
function returns the Figure (or draws on a given ``Axes``) and checks its inputs. Each ``*_figure`` function also
attaches what its figure shows, in words written from the data it draws: the alt text and the caption
(:func:`capsule_lab.figures.descriptions.attach_description`), so a chapter's cell ends with ``show(fig)``. Series
are told apart by marker or hatch as well as by colour (:mod:`capsule_lab.figures.style`).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from .._checks import check_class_index, check_positive_int, check_tensor, to_numpy
from ..models.capsnet import BackboneConfig
from ..models.ladder_capsnet import LadderCapsNet
from .descriptions import attach_description
from .geometry import check_backbone, receptive_field_centres
from .style import MARKERS, MAX_FIGURE_WIDTH, PALETTE, REFERENCE_COLOR

__all__ = ["plot_coupling_length", "coupling_length_figure", "coupling_length_description", "plot_activity_profile",
           "activity_profile_figure", "activity_profile_description", "kept_capsule_positions", "plot_kept_capsules",
           "ladder_explorer_result", "ladder_explorer_figure", "draw_ladder_explorer", "ladder_explorer_description"]

# The course's palette (capsule_lab.figures.style.PALETTE: blue, vermillion, bluish green, reddish purple, black,
# orange, sky blue, yellow).
LENGTH_COLOR = PALETTE[0]       # the paper's Figure 1: lengths as blue bars,
COUPLING_COLOR = PALETTE[1]     # couplings as a vermillion line with circles
KEPT_COLOR = PALETTE[5]         # the kept capsules on the image (orange with black edges, seen on black and white)
PREDICTED_COLOR = PALETTE[1]    # the explorer's predicted class (hatched),
LABEL_COLOR = PALETTE[2]        # its true label (a triangle)
REGRESSION_COLOR = PALETTE[3]   # the regressed entries and their distances
# Curves of the activity profile: a marker per network as well as a colour; solid, dash-dot and dotted lines
# (dashed lines mark K).
_PROFILE_LINESTYLES = ("-", "-.", ":")


# ---------------------------------------------------------------- argument checks

def _vector(x, name: str, shape: str = "(top,)") -> np.ndarray:
    a = to_numpy(x, name)
    if a.ndim != 1 or a.shape[0] == 0:
        raise ValueError(f"{name} must have shape {shape}, a non-empty 1-D tensor, got {a.shape}")
    return a


def _non_increasing(a: np.ndarray, name: str, what: str) -> None:
    if np.any(np.diff(a) > 1e-6 * max(1.0, float(np.abs(a).max()))):
        raise ValueError(f"{name} must be non-increasing ({what}, sorted from the most active)")


def _index(value, n: int, name: str) -> int:
    if isinstance(value, (np.integer,)):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
        raise ValueError(f"{name} must be an integer in [0, {n}), got {value!r}")
    return value


# ---------------------------------------------------------------- Figure 1: lengths and couplings

def plot_coupling_length(ax, lengths, couplings, label: int, classes: int = 10):
    """Draw the ladder paper's Figure 1 on ``ax``: the lengths ‖u_i‖ of the most active primary capsules, sorted
    from the most active (blue bars, left axis), and their couplings c_ij to class ``label`` (vermillion circles
    joined by a line, right axis, a twin of ``ax``), with the uniform coupling 1/J (``classes`` = J) a dashed grey
    line.

    lengths, couplings: ``(top,)`` each, as :func:`capsule_lab.measures.activity.most_active_couplings` returns them (or
    their means over the images of a class, rank by rank). Returns ``(ax, coupling_axis)``. Chapter 06.
    """
    a = _vector(lengths, "lengths")
    c = _vector(couplings, "couplings")
    if c.shape != a.shape:
        raise ValueError(f"couplings must have shape (top,) = {a.shape}, one per capsule of lengths, got {c.shape}")
    if a.min() < 0:
        raise ValueError("lengths must be >= 0 (capsule lengths ‖u_i‖)")
    _non_increasing(a, "lengths", "the capsules by length")
    if c.min() < 0 or c.max() > 1 + 1e-6:
        raise ValueError("couplings must be in [0, 1] (routing couplings, a softmax over the classes)")
    check_positive_int(classes, "classes", minimum=2)
    check_class_index(int(label) if isinstance(label, np.integer) else label, classes)
    rank = np.arange(1, len(a) + 1)
    ax.bar(rank, a, width=0.8, color=LENGTH_COLOR, alpha=0.8, label="length ‖u_i‖ (bars)")
    ax_c = ax.twinx()
    ax_c.plot(rank, c, marker="o", ls="-", ms=2.5, lw=0.8, color=COUPLING_COLOR, markevery=max(1, len(c) // 50),
              label=f"coupling c_ij to class {label} (circles)")
    ax_c.axhline(1 / classes, color=REFERENCE_COLOR, ls="--", lw=1, label=f"uniform coupling 1/J = {1 / classes:.2g}")
    ax.set_xlim(0.3, len(a) + 0.7)
    ax.set_ylim(0, max(1.0, float(a.max()) * 1.05))
    ax_c.set_ylim(0, max(float(c.max()) * 1.1, 1.5 / classes))
    ax.set_xlabel("rank of the primary capsule by length (1 = most active)")
    ax.set_ylabel("length ‖u_i‖", color=LENGTH_COLOR)
    ax_c.set_ylabel(f"coupling c_ij to class {label}", color=COUPLING_COLOR)
    ax.tick_params(axis="y", colors=LENGTH_COLOR)
    ax_c.tick_params(axis="y", colors=COUPLING_COLOR)
    handles = [h for axis in (ax, ax_c) for h in axis.get_legend_handles_labels()[0]]
    ax_c.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="upper right")
    return ax, ax_c


def coupling_length_figure(lengths, couplings, label: int, classes: int = 10, title: str | None = None) -> Figure:
    """The ladder paper's Figure 1: the lengths (bars) of the most active primary capsules of a trained
    dynamic-routing CapsNet and their couplings (line) to the class ``label``, against the uniform 1/J
    (:func:`plot_coupling_length`). Long capsules with large couplings build the class capsule; the many short
    ones, coupled near 1/J, could be dropped — the argument for the pruning layer. The figure carries its
    description (:func:`coupling_length_description`). Chapter 06."""
    fig, ax = plt.subplots(figsize=(MAX_FIGURE_WIDTH, 3.4), constrained_layout=True)
    plot_coupling_length(ax, lengths, couplings, label, classes)
    ax.set_title(title or f"the {len(_vector(lengths, 'lengths'))} most active primary capsules of a "
                          f"digit {label}: length and coupling to its class", fontsize=10)
    return attach_description(fig, *coupling_length_description(lengths, couplings, label, classes))


def coupling_length_description(lengths, couplings, label: int, classes: int = 10) -> tuple[str, str]:
    """``(alt, caption)`` of :func:`coupling_length_figure` for the same arguments, written from the numbers it
    draws: the lengths at the first and last rank, the couplings' range and where the highest is, the mean
    coupling of the more and of the less active half, and how many ranks lie above the uniform 1/J. Chapter 06."""
    a = _vector(lengths, "lengths")
    c = _vector(couplings, "couplings")
    if c.shape != a.shape:
        raise ValueError(f"couplings must have shape (top,) = {a.shape}, one per capsule of lengths, got {c.shape}")
    check_positive_int(classes, "classes", minimum=2)
    top, uniform, half = len(a), 1 / classes, max(1, len(a) // 2)
    above = int((c > uniform).sum())
    share = (f"All {top}" if above == top else "None" if above == 0 else f"{above} of the {top}") + (
        " ranks lie" if above != 1 else " rank lies")
    halves = (f"; the {half} most active average {c[:half].mean():.4f}, the other {top - half} "
              f"{c[half:].mean():.4f}" if top > 1 else "")
    alt = (f"Bars on the left axis: the mean length of the {top} most active primary capsules by rank, "
           f"{a[0]:.2f} at rank 1 and {a[-1]:.2f} at rank {top}. A line with circles on the right axis: their mean "
           f"coupling to class {label}, between {c.min():.4f} and {c.max():.4f} (highest at rank "
           f"{int(c.argmax()) + 1}){halves}. {share} above the uniform coupling 1/J = {uniform:.2g}, drawn as a "
           f"dashed grey line.")
    caption = f"Lengths of the {top} most active primary capsules and their couplings to class {label}"
    return alt, caption


# ---------------------------------------------------------------- Figure 4: activity profiles

def _check_profiles(profiles) -> dict:
    if not isinstance(profiles, dict) or not profiles:
        raise ValueError("profiles must be a non-empty dict {K or label: (top,) mean activities}, "
                         "as capsule_lab.measures.activity.activity_profile returns them")
    arrays = {}
    for key, values in profiles.items():
        if isinstance(key, bool) or not isinstance(key, (int, np.integer, str)):
            raise ValueError(f"profiles' keys must be the number K (an int) or a label (a str), got {key!r}")
        a = _vector(values, f"profiles[{key!r}]")
        _non_increasing(a, f"profiles[{key!r}]", "mean activities by rank")
        arrays[key] = a
    return arrays


def plot_activity_profile(ax, profiles: dict, mark_k: bool = True) -> list:
    """Draw the ladder paper's Figure 4 on ``ax``: per network, the mean activity of its primary capsules by rank
    (1 = the most active of each image), one curve per entry of ``profiles = {K or label: (top,)}``
    (:func:`capsule_lab.measures.activity.activity_profile`), each with its own colour, marker and line style (solid,
    dash-dot, dotted); with ``mark_k``, a dashed vertical line at every integer key K, in its curve's colour and
    named "K = ..." on a top axis: the capsules left of it are the ones the pruning layer keeps. A sharp drop at K means
    kept and dropped capsules are clearly told apart. Returns the curves. Chapter 06."""
    arrays = _check_profiles(profiles)
    lines = []
    for k, (key, a) in enumerate(arrays.items()):
        name = _profile_name(key)
        every = max(1, len(a) // 12)             # about a dozen markers a curve, offset so that they do not overlap
        (line,) = ax.plot(np.arange(1, len(a) + 1), a, lw=1.5, label=name, color=PALETTE[k % 5],
                          marker=MARKERS[k % len(MARKERS)], ms=4, ls=_PROFILE_LINESTYLES[k % len(_PROFILE_LINESTYLES)],
                          markevery=((k * max(1, every // 5)) % every, every))
        lines.append(line)
        if mark_k and not isinstance(key, str):
            ax.axvline(int(key) + 0.5, color=line.get_color(), ls="--", lw=1)
    marks = [(int(key), line.get_color()) for key, line in zip(arrays, lines) if not isinstance(key, str)]
    if mark_k and marks:                            # each dashed line named on a top axis, in its curve's colour
        named = ax.secondary_xaxis("top")
        named.set_xticks([k + 0.5 for k, _ in marks], [f"K = {k}" for k, _ in marks])
        named.tick_params(axis="x", labelsize=7, length=3)
        for text, (_, color) in zip(named.get_xticklabels(), marks):
            text.set_color(color)
    ax.set_xlabel("rank of the primary capsule by activity (1 = most active)")
    ax.set_ylabel("mean activity ‖u_i‖")
    ax.set_ylim(bottom=0)
    ax.set_xlim(0.5, max(len(a) for a in arrays.values()) + 0.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return lines


def activity_profile_figure(profiles: dict, mark_k: bool = True, title: str | None = None) -> Figure:
    """The ladder paper's Figure 4: the mean activity of the most active primary capsules by rank, one curve per K
    (:func:`plot_activity_profile`), dashed lines at the K kept. The figure carries its description
    (:func:`activity_profile_description`). Chapter 06."""
    fig, ax = plt.subplots(figsize=(6.0, 3.4), constrained_layout=True)
    plot_activity_profile(ax, profiles, mark_k)
    ax.set_title(title or "activity of the primary capsules by rank, per K", fontsize=10)
    return attach_description(fig, *activity_profile_description(profiles, mark_k))


def _profile_name(key) -> str:
    return f"K = {int(key)}" if not isinstance(key, str) else key


def activity_profile_description(profiles: dict, mark_k: bool = True) -> tuple[str, str]:
    """``(alt, caption)`` of :func:`activity_profile_figure` for the same ``profiles``, written from the curves it
    draws: each curve's mean activity at rank 1, at the last rank and at rank K (integer keys), the first rank
    below 0.5, and which curve ends lowest. Chapter 06."""
    arrays = _check_profiles(profiles)
    top = max(len(a) for a in arrays.values())
    parts = []
    for key, a in arrays.items():
        at_k = (f", {a[int(key) - 1]:.2f} at rank {int(key)}" if not isinstance(key, str) and 1 < int(key) < len(a)
                else "")
        below = next((rank + 1 for rank, value in enumerate(a) if value < 0.5), None)
        parts.append(f"{_profile_name(key)} from {a[0]:.2f} to {a[-1]:.2f}{at_k}, "
                     + (f"below 0.5 from rank {below}" if below else "never below 0.5"))
    ks = [int(key) for key in arrays if not isinstance(key, str)]
    marks = (f", a dashed vertical line at K = {', '.join(str(k) for k in ks)}" if mark_k and ks else "")
    lowest = min(arrays, key=lambda key: arrays[key][-1])
    alt = (f"Mean activity of the primary capsules against their rank by activity, 1 to {top}, one curve per "
           f"network{marks}. From rank 1 to rank {top}: " + "; ".join(parts) + f". The lowest at the last rank is "
           f"{_profile_name(lowest)} ({arrays[lowest][-1]:.2f}).")
    caption = "Mean activity of the primary capsules by rank, one curve per network"
    return alt, caption


# ---------------------------------------------------------------- the kept capsules on the image

def kept_capsule_positions(indices, config: BackboneConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where the primary capsules ``indices`` ``(K,)`` sit on the image: capsule i is ordered (row, column, type)
    on the g × g grid of O types (:class:`capsule_lab.capsules.PrimaryCapsules`), so its grid row is
    ``i // (g·O)`` and its column ``(i // O) % g``, and its receptive field is centred at
    :func:`~capsule_lab.figures.receptive_field_centres` of them. Returns ``(rows, columns, counts)`` in pixels,
    one entry per distinct grid position, with the number of kept capsule types there. Chapter 06."""
    config = check_backbone(config)
    n, g, types = config.primary_caps, config.primary_grid, config.primary_types
    idx = to_numpy(indices, "indices")
    if idx.ndim != 1 or np.any(idx != np.round(idx)) or (idx.size and (idx.min() < 0 or idx.max() >= n)):
        raise ValueError(f"indices must have shape (K,), integers in [0, n) = [0, {n}) (primary capsules), "
                         f"got {idx.shape if idx.ndim != 1 else idx.tolist()}")
    idx = idx.astype(int)
    positions, counts = np.unique(idx // types, return_counts=True)     # position = row · g + column
    centres = receptive_field_centres(config)
    return centres[positions // g], centres[positions % g], counts


def plot_kept_capsules(ax, image, indices, config: BackboneConfig, title: str | None = None):
    """Draw ``image`` (``(S, S)``, ``(1, S, S)`` or ``(1, 1, S, S)``, S = ``config.image_size``) in grey on
    ``ax`` and, at the centre of the receptive field of every grid position holding kept primary capsules
    ``indices`` ``(K,)`` (:func:`kept_capsule_positions`), an orange marker whose area grows with the number of
    kept capsule types there; that number is written on the marker when it is more than 1. Returns the marker
    scatter. Chapter 06."""
    config = check_backbone(config)
    x = to_numpy(image, "image")
    while x.ndim > 2 and x.shape[0] == 1:
        x = x[0]
    S = config.image_size
    if x.shape != (S, S):
        raise ValueError(f"image must have shape (S, S), (1, S, S) or (1, 1, S, S) with S = {S} "
                         f"(config.image_size), got {to_numpy(image, 'image').shape}")
    rows, cols, counts = kept_capsule_positions(indices, config)
    ax.imshow(x, cmap="gray", vmin=min(0.0, float(x.min())), vmax=max(1.0, float(x.max())))
    dots = ax.scatter(cols, rows, s=14 + 22 * (counts - 1), color=KEPT_COLOR, edgecolors="black", linewidths=0.6,
                      alpha=0.9, zorder=3)
    for r, c, n in zip(rows, cols, counts):
        if n > 1:
            ax.annotate(str(n), (c, r), ha="center", va="center", fontsize=6, zorder=4)
    ax.set_xlim(-0.5, S - 0.5)
    ax.set_ylim(S - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_yticks([])
    K = len(to_numpy(indices, "indices"))
    ax.set_title(title or f"{K} kept capsules at {len(counts)} positions", fontsize=9)
    return dots


# ---------------------------------------------------------------- one image through an L-CapsNet

def _check_models(models, k) -> LadderCapsNet:
    if not isinstance(models, dict) or not models:
        raise ValueError("models must be a non-empty dict {K: LadderCapsNet}")
    if k not in models:
        raise ValueError(f"k must be one of the keys of models, {list(models)}, got {k!r}")
    if not isinstance(models[k], LadderCapsNet):
        raise ValueError(f"models[{k!r}] must be a capsule_lab.models.LadderCapsNet, got {type(models[k]).__name__}")
    return models[k]


def ladder_explorer_result(models: dict, images, labels, k, index: int) -> dict:
    """The numbers behind :func:`ladder_explorer_figure`: image ``images[index]`` through the L-CapsNet
    ``models[k]`` in eval mode without gradients (its mode is restored). ``images`` ``(N, 1, S, S)``,
    ``labels`` ``(N,)``. Returns a dict of CPU tensors and numbers: ``k``, ``index``, ``label``, ``prediction``
    (the class of the largest activity), ``indices`` ``(K,)`` (the kept capsules, ascending), ``activities``
    ``(J,)`` (d_j), ``errors`` ``(J,)`` (the mean squared regression error (1/K) Σ_i ‖u^reg_i − u_i‖² of
    every class j, eq. 4's exponent over −γ), ``selected`` ``(K, d)`` (U_K), ``regressed`` ``(K, d)`` (u_reg of the
    predicted class) and ``distances`` ``(K,)`` (its per-capsule squared distances). Chapter 06."""
    model = _check_models(models, k)
    c = model.config
    check_tensor(images, "images", f"(N, {c.in_channels}, {c.image_size}, {c.image_size})",
                 sizes=(None, c.in_channels, c.image_size, c.image_size), nonempty=True, floating=True)
    N = images.shape[0]
    check_tensor(labels, "labels", f"(N,) = ({N},)", sizes=(N,))
    index = _index(index, N, "index")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(images[index:index + 1].to(device))
    finally:
        model.train(was_training)
    activities = out.activities[0].float().cpu()
    selected = out.selected[0].float().cpu()
    regressed_all = out.regressed[0].float().cpu()                      # (J, K, d)
    squared = ((regressed_all - selected.unsqueeze(0)) ** 2).sum(dim=-1)   # (J, K)
    prediction = int(activities.argmax())
    return {"k": k, "index": index, "label": int(labels[index]), "prediction": prediction,
            "indices": out.indices[0].cpu(), "activities": activities, "errors": squared.mean(dim=-1),
            "selected": selected, "regressed": regressed_all[prediction], "distances": squared[prediction]}


def ladder_explorer_figure(models: dict, images, labels, k, index: int = 0) -> Figure:
    """The ladder explorer's picture (:func:`capsule_lab.widgets.ladder_explorer`): image ``images[index]``
    through the L-CapsNet ``models[k]`` (:func:`ladder_explorer_result`), four panels:

    - the kept primary capsules on the image (:func:`plot_kept_capsules`);
    - the predicted class's regression of the kept capsules (eq. 3) against their actual poses U_K: one point per
      entry of the K × d matrices, the line y = x where a perfect regression would put them;
    - the squared distance ‖u^reg_i − u_i‖² of every kept capsule i, with their mean (eq. 4's exponent over
      −γ) dashed;
    - the class activities δ_j (the paper's d_j), the prediction hatched and the true label marked by a triangle.

    The figure carries its description (:func:`ladder_explorer_description`). Chapter 06."""
    result = ladder_explorer_result(models, images, labels, k, index)
    return draw_ladder_explorer(result, images[index], models[k].config)


def draw_ladder_explorer(r: dict, image, config: BackboneConfig) -> Figure:
    """:func:`ladder_explorer_figure` from its :func:`ladder_explorer_result` ``r``, the ``image`` it was computed on
    and the network's ``config`` (the widget computes the result once, for its numbers too). Chapter 06."""
    k, index = r["k"], r["index"]
    fig, axes = plt.subplots(2, 2, figsize=(MAX_FIGURE_WIDTH, 5.6), constrained_layout=True)
    plot_kept_capsules(axes[0, 0], image, r["indices"], config,
                       title=f"image {index}: the {len(r['indices'])} kept capsules")

    ax = axes[0, 1]
    actual, regressed = r["selected"].numpy().ravel(), r["regressed"].numpy().ravel()
    ax.scatter(actual, regressed, s=6, color=REGRESSION_COLOR, alpha=0.6, label=f"{r['selected'].numel()} entries")
    low = min(float(actual.min()), float(regressed.min()), -0.1)
    high = max(float(actual.max()), float(regressed.max()), 0.1)
    ax.plot([low, high], [low, high], color=REFERENCE_COLOR, lw=1, ls="--", marker="none", label="y = x")
    ax.set_xlabel("actual pose entry (U_K)", fontsize=8)
    ax.set_ylabel(f"regressed from class {r['prediction']}", fontsize=8)
    ax.set_title(f"class {r['prediction']} regresses the kept capsules", fontsize=9)
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)

    ax = axes[1, 0]
    distances = r["distances"].numpy()
    ax.bar(np.arange(len(distances)), distances, color=REGRESSION_COLOR, alpha=0.8)
    mean = float(r["errors"][r["prediction"]])
    ax.axhline(mean, color=REFERENCE_COLOR, ls="--", lw=1, label=f"mean {mean:.3g}")
    ax.set_xlabel("kept capsule (row of U_K, ascending index)", fontsize=8)
    ax.set_ylabel("squared distance", fontsize=8)
    ax.set_title(f"‖u_reg − u_i‖² for class {r['prediction']}", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")

    ax = axes[1, 1]
    activities = r["activities"].numpy()
    bars = ax.bar(np.arange(len(activities)), activities, color="0.7", edgecolor="black", linewidth=0.4)
    bars[r["prediction"]].set_facecolor(PREDICTED_COLOR)
    bars[r["prediction"]].set_hatch("///")
    bars[r["prediction"]].set_label(f"predicted {r['prediction']}")
    ax.scatter([r["label"]], [min(1.05, float(activities[r["label"]]) + 0.05)], marker="v", color=LABEL_COLOR,
               edgecolors="black", linewidths=0.4, zorder=3, label=f"true label {r['label']}")
    ax.set_xticks(range(len(activities)))
    ax.set_ylim(0, 1.12)
    ax.set_xlabel("class j", fontsize=8)
    ax.set_ylabel("activity δ_j", fontsize=8)
    ax.set_title(f"predicted {r['prediction']}, true {r['label']}", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"L-CapsNet with K = {k}: image {index}", fontsize=10)
    return attach_description(fig, *ladder_explorer_description(r, config))


def ladder_explorer_description(result: dict, config: BackboneConfig) -> tuple[str, str]:
    """``(alt, caption)`` of :func:`ladder_explorer_figure` from its :func:`ladder_explorer_result` ``result`` and
    the network's ``config``, written from what the four panels draw: where the kept capsules sit, how closely the
    predicted class regresses them (the correlation of regressed and actual entries), the squared distances, and
    the two most active classes against the true label. Chapter 06."""
    config = check_backbone(config)
    keys = ("k", "index", "label", "prediction", "indices", "activities", "errors", "selected", "regressed",
            "distances")
    if not isinstance(result, dict) or any(key not in result for key in keys):
        raise ValueError(f"result must be the dict ladder_explorer_result returns, with the keys {list(keys)}")
    r = result
    rows, cols, counts = kept_capsule_positions(r["indices"], config)
    activities = to_numpy(r["activities"], "activities").astype(float)
    j, label = int(r["prediction"]), int(r["label"])
    second = int(np.argsort(-activities, kind="stable")[1]) if len(activities) > 1 else j
    actual = to_numpy(r["selected"], "selected").astype(float).ravel()
    regressed = to_numpy(r["regressed"], "regressed").astype(float).ravel()
    spread = actual.std() * regressed.std()
    correlation = (f"correlation {float(np.corrcoef(actual, regressed)[0, 1]):.2f}" if spread > 0
                   else "no spread to correlate")
    distances = to_numpy(r["distances"], "distances").astype(float)
    S = config.image_size
    alt = (f"Four panels for test image {r['index']}, a {label}, through the L-CapsNet with K = {r['k']}. Top left: "
           f"the {len(distances)} kept primary capsules sit at {len(counts)} places, rows {rows.min():.0f} to "
           f"{rows.max():.0f} and columns {cols.min():.0f} to {cols.max():.0f} of the {S}-pixel image, up to "
           f"{int(counts.max())} capsule types at one place. Top right: the {actual.size} pose entries that class {j} "
           f"regresses against the actual ones, {correlation} (a perfect regression lies on the dashed diagonal). "
           f"Bottom left: each kept capsule's squared distance, mean {float(r['errors'][j]):.3g}, largest "
           f"{distances.max():.3g} at row {int(distances.argmax())}. Bottom right: the class activities; class {j} is "
           f"predicted with δ = {activities[j]:.3f}, then class {second} with {activities[second]:.3f}; the true "
           f"label {label} is {'the prediction' if j == label else 'not the prediction'}.")
    caption = (f"One test digit through the L-CapsNet with K = {r['k']}: the kept capsules, their regression from the "
               f"predicted class and the class activities")
    return alt, caption
