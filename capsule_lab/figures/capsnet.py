"""Figures of a trained CapsNet: its training curves, its reconstructions, and its pose sweeps.

Taught in chapter 02 (``chapters/02_dynamic_routing.ipynb``), after Sabour et al. (2017), Figs. 3–4. Pure
matplotlib, like :mod:`capsule_lab.figures.routing`: every function draws and returns the Figure and checks
its inputs. Images are ``(N, H, W)`` or ``(N, 1, H, W)``.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .._checks import image_array, to_numpy
from .style import MAX_FIGURE_WIDTH

__all__ = ["plot_history", "plot_reconstructions", "plot_pose_sweep"]


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


def plot_reconstructions(images, reconstructions, labels=None, predictions=None, title: str | None = None) -> Figure:
    """Held-out digits (top row) and the decoder's reconstructions of them (bottom row).

    Args:
        images, reconstructions: ``(N, H, W)`` or ``(N, 1, H, W)``, values in [0, 1], the same shape.
        labels: optional ``(N,)`` true classes, shown above the digits.
        predictions: optional ``(N,)`` predicted classes (the capsule the decoder reconstructed from),
            shown above the reconstructions.
        title: the figure's title.

    Returns:
        The Figure with 2·N axes, row-major — the N originals, then the N reconstructions.

    Chapter 02.
    """
    x = image_array(images, "images")
    y = image_array(reconstructions, "reconstructions")
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
        The Figure with one axis holding the K × P montage — perturbations along x, dimensions along y.

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
