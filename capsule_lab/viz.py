"""Figures for the course: routing couplings, the 2-D routing toy, training curves, reconstructions, pose sweeps.

Taught in chapter 02 (``chapters/02_dynamic_routing.ipynb``). Pure matplotlib: every function takes
tensors or arrays, draws, and returns the :class:`matplotlib.figure.Figure` (it never calls ``show``).
Inputs are checked and a ``ValueError`` names the expected shape.

Shapes (one sample, the batch dimension removed):
    votes      û_{j|i}   (I, J, 2)      for the 2-D toy
    couplings  c_ij      (I, J)         one per iteration → (R, I, J)
    poses      v_j       (J, 2)         one per iteration → (R, J, 2)
    images               (N, H, W) or (N, 1, H, W)
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

__all__ = [
    "OUTPUT_COLORS",
    "to_numpy",
    "plot_couplings",
    "draw_toy",
    "draw_coupling_bars",
    "plot_routing_state",
    "plot_toy_routing",
    "plot_history",
    "plot_reconstructions",
    "plot_pose_sweep",
]

# One colour per output capsule j in the toy pictures (colour-blind safe: blue, orange, green, purple).
# Figures are drawn for the book's text column (CONTRIBUTING.md, "Widgets and figures in the book"): at most
# this many inches wide at the notebooks' 100 dpi, so that text of at least 8 pt stays >= 9 px on screen.
MAX_FIGURE_WIDTH = 7.5
OUTPUT_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")


def to_numpy(x, name: str) -> np.ndarray:
    """A float numpy copy of a tensor / array / nested sequence (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric (a tensor, array or nested list), got {type(x).__name__}") from err
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    return a


def _stack(items, name: str, ndim: int, shape: str) -> np.ndarray:
    """Stack a sequence of ``ndim``-D arrays (or take an ``ndim+1``-D array) into ``(R, ...)``.

    A leading batch dimension of size 1 on each item is dropped, so ``RoutingResult.couplings`` of a
    single sample ``(1, I, J)`` can be passed as is.
    """
    if hasattr(items, "detach") or isinstance(items, np.ndarray):
        a = to_numpy(items, name)
        if a.ndim == ndim + 2 and a.shape[1] == 1:
            a = a[:, 0]
        if a.ndim != ndim + 1:
            raise ValueError(f"{name} must have shape (R, {shape}), got {a.shape}")
    else:
        if not isinstance(items, Sequence) or len(items) == 0:
            raise ValueError(f"{name} must be a non-empty sequence of arrays of shape ({shape})")
        parts = []
        for k, item in enumerate(items):
            p = to_numpy(item, f"{name}[{k}]")
            if p.ndim == ndim + 1 and p.shape[0] == 1:
                p = p[0]
            if p.ndim != ndim:
                raise ValueError(f"{name}[{k}] must have shape ({shape}), got {p.shape}")
            parts.append(p)
        if len({p.shape for p in parts}) != 1:
            raise ValueError(f"{name}: every iteration must have the same shape ({shape}), "
                             f"got {[p.shape for p in parts]}")
        a = np.stack(parts)
    if 0 in a.shape:
        raise ValueError(f"{name} must have shape (R, {shape}) with no empty dimension, got {a.shape}")
    return a


def _labels(labels, n: int, default: str, name: str) -> list[str]:
    if labels is None:
        return [default.format(k) for k in range(n)]
    labels = [str(x) for x in labels]
    if len(labels) != n:
        raise ValueError(f"{name} must have {n} entries, got {len(labels)}")
    return labels


def plot_couplings(
    couplings_per_iteration,
    input_labels: Sequence[str] | None = None,
    output_labels: Sequence[str] | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    cmap: str = "viridis",
) -> Figure:
    """Heatmaps of the coupling coefficients c_ij, one panel per routing iteration.

    Rows are the input capsules i, columns the output capsules j; every row of a dynamic-routing
    panel sums to 1 (softmax over the outputs). The colour scale is fixed to [0, 1] so the panels
    can be compared: watching the rows sharpen from uniform (iteration 1) towards one-hot is
    watching routing decide which whole each part belongs to.

    Args:
        couplings_per_iteration: ``(R, I, J)`` array/tensor, or a sequence of R arrays ``(I, J)``
            (``(1, I, J)`` is accepted for a single sample, e.g. ``[h.couplings for h in result.history]``).
        input_labels, output_labels: tick labels (default ``i=0…``, ``j=0…``).
        title: the figure's title.
        annotate: write the values in the cells (default: when there are at most 60 cells).
        cmap: a matplotlib colormap name.

    Returns:
        the Figure (R axes for the panels plus one for the colour bar).

    Chapter 02.
    """
    c = _stack(couplings_per_iteration, "couplings_per_iteration", 2, "I, J")
    R, I, J = c.shape
    if c.min() < -1e-6 or c.max() > 1 + 1e-6:
        raise ValueError("couplings must lie in [0, 1]")
    ins = _labels(input_labels, I, "i={}", "input_labels")
    outs = _labels(output_labels, J, "j={}", "output_labels")
    annotate = (I * J <= 60) if annotate is None else annotate
    panel_w = min(max(0.45 * J + 1.2, 2.2), 6.0, (MAX_FIGURE_WIDTH - 0.8) / R)
    fig, axes = plt.subplots(1, R, figsize=(panel_w * R + 0.8, min(max(0.32 * I + 1.3, 2.4), 9.0)),
                             squeeze=False, constrained_layout=True)
    image = None
    for r, ax in enumerate(axes[0]):
        image = ax.imshow(c[r], vmin=0.0, vmax=1.0, cmap=cmap, aspect="auto")
        ax.set_title(f"iteration {r + 1}")
        ax.set_xticks(range(J), outs)
        ax.set_yticks(range(I), ins if r == 0 else [""] * I)
        ax.set_xlabel("output capsule j")
        if r == 0:
            ax.set_ylabel("input capsule i")
        if annotate:
            for i in range(I):
                for j in range(J):
                    ax.text(j, i, f"{c[r, i, j]:.2f}", ha="center", va="center", fontsize=8,
                            color="black" if c[r, i, j] > 0.6 else "white")
    fig.colorbar(image, ax=list(axes[0]), label="coupling $c_{ij}$", shrink=0.9)
    if title:
        fig.suptitle(title)
    return fig


def _toy_inputs(votes, couplings, poses) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u = to_numpy(votes, "votes")
    if u.ndim == 4 and u.shape[0] == 1:
        u = u[0]
    if u.ndim != 3 or u.shape[2] != 2 or 0 in u.shape:
        raise ValueError(f"votes must have shape (I, J, 2) (or (1, I, J, 2)): 2-D votes, got {u.shape}")
    I, J, _ = u.shape
    c = to_numpy(couplings, "couplings")
    if c.ndim == 3 and c.shape[0] == 1:
        c = c[0]
    if c.shape != (I, J):
        raise ValueError(f"couplings must have shape (I, J) = ({I}, {J}), got {c.shape}")
    v = to_numpy(poses, "poses")
    if v.ndim == 3 and v.shape[0] == 1:
        v = v[0]
    if v.shape != (J, 2):
        raise ValueError(f"poses must have shape (J, 2) = ({J}, 2), got {v.shape}")
    if J > len(OUTPUT_COLORS):
        raise ValueError(f"the toy picture draws at most {len(OUTPUT_COLORS)} output capsules, got J = {J}")
    return u, c, v


def draw_toy(ax, votes, couplings, poses, input_labels: Sequence[str] | None = None,
             output_labels: Sequence[str] | None = None, limit: float | None = None) -> None:
    """Draw one routing state of the 2-D toy on ``ax``.

    Each vote û_{j|i} is a thin arrow from the origin in the colour of its output j, as opaque and as
    wide as its coupling c_ij (a vote that is not listened to fades away); each output v_j is a thick
    arrow in the same colour. votes ``(I, J, 2)``, couplings ``(I, J)``, poses ``(J, 2)``.

    Chapter 02.
    """
    u, c, v = _toy_inputs(votes, couplings, poses)
    I, J, _ = u.shape
    ins = _labels(input_labels, I, "{}", "input_labels")
    outs = _labels(output_labels, J, "v{}", "output_labels")
    lim = limit if limit is not None else 1.15 * max(np.abs(u).max(), np.abs(v).max(), 1.0)
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    ax.add_patch(plt.Circle((0, 0), 1.0, fill=False, ls=":", color="0.6", lw=0.8))  # ‖v‖ < 1
    for j in range(J):
        for i in range(I):
            w = float(np.clip(c[i, j], 0.0, 1.0))
            ax.annotate("", xy=tuple(u[i, j]), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color=OUTPUT_COLORS[j], alpha=0.15 + 0.85 * w,
                                        lw=0.5 + 2.5 * w, shrinkA=0, shrinkB=0))
            ax.text(*(u[i, j] * 1.06), ins[i], color=OUTPUT_COLORS[j], fontsize=8, alpha=0.3 + 0.7 * w,
                    ha="center", va="center")
        ax.annotate("", xy=tuple(v[j]), xytext=(0, 0),
                    arrowprops=dict(arrowstyle="simple,head_width=1.1,head_length=1.1", color=OUTPUT_COLORS[j],
                                    ec="black", lw=0.8, shrinkA=0, shrinkB=0))
        # Invisible line so that the legend has one entry per output capsule.
        ax.plot([], [], color=OUTPUT_COLORS[j], lw=4, label=f"{outs[j]}  ‖v‖={np.linalg.norm(v[j]):.2f}")
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.legend(loc="lower left", fontsize=8, framealpha=0.8)


def draw_coupling_bars(ax, couplings, input_labels: Sequence[str] | None = None,
                       output_labels: Sequence[str] | None = None) -> None:
    """Stacked bars of c_ij on ``ax``: one bar per input capsule i, one segment per output j.

    For dynamic routing each bar has height Σ_j c_ij = 1. The segments are drawn output by output
    (all of j = 0, then j = 1, …), so ``ax.patches[j * I + i].get_height()`` is c_ij.

    Chapter 02.
    """
    c = to_numpy(couplings, "couplings")
    if c.ndim == 3 and c.shape[0] == 1:
        c = c[0]
    if c.ndim != 2 or 0 in c.shape:
        raise ValueError(f"couplings must have shape (I, J), got {c.shape}")
    I, J = c.shape
    if J > len(OUTPUT_COLORS):
        raise ValueError(f"at most {len(OUTPUT_COLORS)} output capsules can be drawn, got J = {J}")
    ins = _labels(input_labels, I, "{}", "input_labels")
    outs = _labels(output_labels, J, "v{}", "output_labels")
    bottom = np.zeros(I)
    for j in range(J):
        ax.bar(range(I), c[:, j], bottom=bottom, color=OUTPUT_COLORS[j], label=f"to {outs[j]}",
               edgecolor="white", lw=0.5)
        bottom += c[:, j]
    ax.set_xticks(range(I), ins)
    ax.set_xlabel("input capsule i")
    ax.set_ylabel("coupling $c_{ij}$")
    ax.set_ylim(0, max(1.0, bottom.max()) * 1.2)  # head room for the legend above the bars
    ax.legend(loc="upper center", ncol=J, fontsize=8, framealpha=0.8)


def plot_routing_state(votes, couplings, poses, title: str | None = None,
                       input_labels: Sequence[str] | None = None,
                       output_labels: Sequence[str] | None = None) -> Figure:
    """The toy after routing: the votes and outputs (left) beside the coupling bars (right).

    votes ``(I, J, 2)``, couplings ``(I, J)``, poses ``(J, 2)`` (a leading batch dimension of 1 is
    dropped). This is the routing explorer's picture (:mod:`capsule_lab.widgets`). Returns the Figure
    with two axes: ``axes[0]`` the toy, ``axes[1]`` the bars.

    Chapter 02.
    """
    u, c, v = _toy_inputs(votes, couplings, poses)
    fig, (left, right) = plt.subplots(1, 2, figsize=(MAX_FIGURE_WIDTH, 3.6), constrained_layout=True,
                                      gridspec_kw=dict(width_ratios=(1.1, 1.0)))
    draw_toy(left, u, c, v, input_labels, output_labels)
    left.set_title("votes (thin) and outputs (thick)")
    draw_coupling_bars(right, c, input_labels, output_labels)
    right.set_title("couplings $c_{ij}$ (softmax over j)")
    if title:
        fig.suptitle(title)
    return fig


def plot_toy_routing(
    votes,
    couplings_per_iteration,
    poses_per_iteration,
    input_labels: Sequence[str] | None = None,
    output_labels: Sequence[str] | None = None,
    title: str | None = None,
) -> Figure:
    """The 2-D routing toy, one panel per iteration: votes as thin arrows, outputs as thick arrows.

    Args:
        votes: ``(I, J, 2)`` (or ``(1, I, J, 2)``) the 2-D votes û_{j|i}.
        couplings_per_iteration: ``(R, I, J)`` or a sequence of R arrays ``(I, J)`` — the couplings
            each iteration used.
        poses_per_iteration: ``(R, J, 2)`` or a sequence of R arrays ``(J, 2)`` — the outputs v_j
            each iteration produced.
        input_labels, output_labels: names of the capsules.
        title: the figure's title.

    Returns:
        the Figure, one axis per iteration titled ``iteration r``.

    Chapter 02.
    """
    c = _stack(couplings_per_iteration, "couplings_per_iteration", 2, "I, J")
    v = _stack(poses_per_iteration, "poses_per_iteration", 2, "J, 2")
    if len(c) != len(v):
        raise ValueError(f"couplings_per_iteration and poses_per_iteration must have the same number of "
                         f"iterations R, got {len(c)} and {len(v)}")
    u, _, _ = _toy_inputs(votes, c[0], v[0])
    lim = 1.15 * max(np.abs(u).max(), np.abs(v).max(), 1.0)
    R = len(c)
    fig, axes = plt.subplots(1, R, figsize=(min(3.3 * R, MAX_FIGURE_WIDTH), 3.0), squeeze=False,
                             constrained_layout=True)
    for r, ax in enumerate(axes[0]):
        draw_toy(ax, u, c[r], v[r], input_labels, output_labels, limit=lim)
        ax.set_title(f"iteration {r + 1}")
    if title:
        fig.suptitle(title)
    return fig


def plot_history(history) -> Figure:
    """Training curves of a :class:`capsule_lab.training.History`: loss (left) and accuracy (right).

    The accuracy panel shows the training accuracy (measured on the fly, while the weights change)
    and, when recorded, the test accuracy after each epoch, in %.

    Chapter 02.
    """
    h = history.to_dict() if hasattr(history, "to_dict") else history
    if not isinstance(h, dict) or not {"epoch", "train_loss", "train_accuracy"} <= set(h):
        raise ValueError("history must be a training.History (or its to_dict()) with epoch, train_loss, "
                         "train_accuracy")
    epochs = list(h["epoch"])
    if not epochs:
        raise ValueError("history is empty: train for at least one epoch")
    for key in ("train_loss", "train_accuracy"):
        if len(h[key]) != len(epochs):
            raise ValueError(f"history[{key!r}] must have one entry per epoch ({len(epochs)}), got {len(h[key])}")
    test = list(h.get("test_accuracy") or [])
    if test and len(test) != len(epochs):
        raise ValueError(f"history['test_accuracy'] must have one entry per epoch ({len(epochs)}), got {len(test)}")
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(MAX_FIGURE_WIDTH, 3.0), constrained_layout=True)
    ax_loss.plot(epochs, h["train_loss"], "o-", color="0.2")
    ax_loss.set_title("training loss")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("margin + 0.0005 × reconstruction")
    ax_acc.plot(epochs, 100 * np.asarray(h["train_accuracy"]), "o-", label="train (during the epoch)")
    if test:
        ax_acc.plot(epochs, 100 * np.asarray(test), "s-", label="held-out test")
        for e, a in zip(epochs, test):
            ax_acc.annotate(f"{100 * a:.2f}", (e, 100 * a), textcoords="offset points", xytext=(0, 6),
                            ha="center", fontsize=8)
    ax_acc.margins(y=0.15)
    ax_acc.set_title("accuracy (%)")
    ax_acc.set_xlabel("epoch")
    ax_acc.legend(loc="lower right", fontsize=8)
    for ax in (ax_loss, ax_acc):
        ax.set_xticks(epochs)
        ax.grid(alpha=0.3)
    return fig


def _images(x, name: str) -> np.ndarray:
    a = to_numpy(x, name)
    if a.ndim == 4 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 3 or 0 in a.shape:
        raise ValueError(f"{name} must have shape (N, H, W) or (N, 1, H, W), got {a.shape}")
    return a


def plot_reconstructions(images, reconstructions, labels=None, predictions=None, title: str | None = None) -> Figure:
    """Held-out digits (top row) and the decoder's reconstructions of them (bottom row).

    Args:
        images, reconstructions: ``(N, H, W)`` or ``(N, 1, H, W)``, values in [0, 1], the same shape.
        labels: optional ``(N,)`` true classes, shown above the digits.
        predictions: optional ``(N,)`` predicted classes (the capsule the decoder reconstructed from),
            shown above the reconstructions.
        title: the figure's title.

    Returns:
        the Figure with 2·N axes (row-major: the N originals, then the N reconstructions).

    Chapter 02.
    """
    x = _images(images, "images")
    y = _images(reconstructions, "reconstructions")
    if x.shape != y.shape:
        raise ValueError(f"reconstructions must have the images' shape {x.shape}, got {y.shape}")
    N = len(x)
    lab = None if labels is None else [int(k) for k in to_numpy(labels, "labels").reshape(-1)]
    pred = None if predictions is None else [int(k) for k in to_numpy(predictions, "predictions").reshape(-1)]
    for name, seq in (("labels", lab), ("predictions", pred)):
        if seq is not None and len(seq) != N:
            raise ValueError(f"{name} must have shape (N,) = ({N},), got {len(seq)} entries")
    fig, axes = plt.subplots(2, N, figsize=(min(1.05 * N + 0.6, MAX_FIGURE_WIDTH), 2.4), squeeze=False, constrained_layout=True)
    for n in range(N):
        for row, (img, names, head) in enumerate(((x, lab, "label"), (y, pred, "decoded"))):
            ax = axes[row, n]
            ax.imshow(img[n], cmap="gray_r", vmin=0.0, vmax=1.0)
            ax.set_xticks([])
            ax.set_yticks([])
            if names is not None:
                ax.set_title(f"{head} {names[n]}", fontsize=8)
        if n == 0:
            axes[0, 0].set_ylabel("input", fontsize=9)
            axes[1, 0].set_ylabel("reconstruction", fontsize=9)
    if title:
        fig.suptitle(title)
    return fig


def plot_pose_sweep(sweep, perturbations, dims: Sequence[int] | None = None, title: str | None = None) -> Figure:
    """What each pose dimension encodes: reconstructions as one dimension of the winning capsule is nudged.

    As in Sabour et al.'s Fig. 4: rows are pose dimensions, columns the perturbations added to that
    one dimension (−0.25 … 0.25 in steps of 0.05 in the paper), each cell the decoder's image.

    Args:
        sweep: ``(K, P, H, W)`` (or ``(K, P, 1, H, W)``) reconstructions for K dimensions × P perturbations
            (e.g. from :func:`capsule_lab.widgets.pose_sweep`).
        perturbations: ``(P,)`` the values added, used as column titles.
        dims: the K dimension indices, used as row labels (default 0…K−1).
        title: the figure's title.

    Returns:
        the Figure, one axis holding the K × P montage (x ticks: perturbations, y ticks: dimensions).

    Chapter 02.
    """
    s = to_numpy(sweep, "sweep")
    if s.ndim == 5 and s.shape[2] == 1:
        s = s[:, :, 0]
    if s.ndim != 4 or 0 in s.shape:
        raise ValueError(f"sweep must have shape (K dims, P perturbations, H, W), got {s.shape}")
    K, P, H, W = s.shape
    p = to_numpy(perturbations, "perturbations").reshape(-1)
    if len(p) != P:
        raise ValueError(f"perturbations must have shape (P,) = ({P},), got {len(p)} values")
    d = list(range(K)) if dims is None else [int(k) for k in dims]
    if len(d) != K:
        raise ValueError(f"dims must have K = {K} entries, got {len(d)}")
    # One image of K×P tiles (one imshow is much faster to draw than K·P axes), 1-pixel white gaps.
    gap = 1
    montage = np.zeros((K * (H + gap) - gap, P * (W + gap) - gap))
    for k in range(K):
        for q in range(P):
            montage[k * (H + gap):k * (H + gap) + H, q * (W + gap):q * (W + gap) + W] = s[k, q]
    fig, ax = plt.subplots(figsize=(0.5 * P + 1.2, 0.5 * K + 0.9), constrained_layout=True)
    ax.imshow(montage, cmap="gray_r", vmin=0.0, vmax=1.0, interpolation="nearest")
    for k in range(1, K):
        ax.axhline(k * (H + gap) - 0.5 - gap / 2, color="0.75", lw=0.6)
    for q in range(1, P):
        ax.axvline(q * (W + gap) - 0.5 - gap / 2, color="0.75", lw=0.6)
    ax.set_xticks([q * (W + gap) + (W - 1) / 2 for q in range(P)], [f"{x:+.2f}" for x in p], fontsize=8)
    ax.set_yticks([k * (H + gap) + (H - 1) / 2 for k in range(K)], [f"dim {x}" for x in d], fontsize=8)
    ax.tick_params(length=0)
    ax.set_xlabel("value added to the pose dimension")
    ax.set_title(title or "reconstruction as one pose dimension is perturbed", fontsize=10)
    return fig
