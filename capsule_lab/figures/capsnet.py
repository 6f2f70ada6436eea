"""Figures of a trained CapsNet: its training curves, its reconstructions, and its pose sweeps.

Taught in chapter 02 (``chapters/02_dynamic_routing.ipynb``), after Sabour et al. (2017), Figs. 3–4. Pure
matplotlib, like :mod:`capsule_lab.figures.routing`: every function draws and returns the Figure and checks
its inputs, and attaches alt text and a caption written from the numbers it draws
(:func:`capsule_lab.figures.descriptions.attach_description`; a chapter ends its cell with ``show(fig)``). Images are
``(N, H, W)`` or ``(N, 1, H, W)``.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .._checks import image_array, to_numpy
from .descriptions import attach_description, join_words
from .style import MAX_FIGURE_WIDTH, series

__all__ = ["plot_history", "plot_reconstructions", "plot_pose_sweep"]


def _course(values, epochs, fmt: str, best: str) -> str:
    """How a per-epoch curve runs, in words: 'rises every epoch, from 95.30 to 97.70', 'falls every epoch, ...', or
    'goes from a to b, highest (best="max") / lowest (best="min") c after epoch k'."""
    values = [float(x) for x in values]
    if len(values) == 1:
        return f"is {values[0]:{fmt}} after epoch {epochs[0]}"
    steps = np.diff(values)
    ends = f"from {values[0]:{fmt}} to {values[-1]:{fmt}}"
    if np.all(steps > 0):
        return f"rises every epoch, {ends}"
    if np.all(steps < 0):
        return f"falls every epoch, {ends}"
    k = int(np.argmax(values) if best == "max" else np.argmin(values))
    return f"goes {ends}, {'highest' if best == 'max' else 'lowest'} {values[k]:{fmt}} after epoch {epochs[k]}"


def plot_history(history) -> Figure:
    """Training curves of a :class:`capsule_lab.training.History`: loss (left) and accuracy (right).

    The accuracy panel shows the training accuracy (measured on the fly, while the weights change; series 0,
    as the loss) and, when recorded, the test accuracy after each epoch (series 1), in %. The alt text says how
    each curve runs from the first to the last epoch.

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
    ax_loss.plot(epochs, h["train_loss"], **series(0))
    ax_loss.set_title("training loss")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("margin + 0.0005 × reconstruction")
    ax_acc.plot(epochs, 100 * np.asarray(h["train_accuracy"]), **series(0), label="train (during the epoch)")
    if test:
        ax_acc.plot(epochs, 100 * np.asarray(test), **series(1), label="held-out test")
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
    span = f"epoch {epochs[0]}" if len(epochs) == 1 else f"epochs {epochs[0]} to {epochs[-1]}"
    alt = (f"Two panels over {span}. Left: the training loss {_course(h['train_loss'], epochs, '.3g', 'min')}. "
           f"Right, accuracy in %: the training accuracy, measured during each epoch, "
           f"{_course(100 * np.asarray(h['train_accuracy']), epochs, '.2f', 'max')}")
    if test:
        alt += f"; the held-out test accuracy {_course(100 * np.asarray(test), epochs, '.2f', 'max')}"
    attach_description(fig, alt + ".", f"Training loss and accuracy over {len(epochs)} epoch{'s' * (len(epochs) != 1)}")
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
        The Figure with 2·N axes, row-major — the N originals, then the N reconstructions; its alt text names
        the labels, the predictions (and any wrong one) and the mean squared error per pixel.

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
    fig, axes = plt.subplots(2, N, figsize=(min(1.05 * N + 0.6, MAX_FIGURE_WIDTH), 2.4), squeeze=False,
                             constrained_layout=True)
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
    attach_description(fig, _reconstructions_alt(x, y, lab, pred),
                       f"{N} digit{'s' * (N != 1)} and their reconstructions")
    return fig


def _reconstructions_alt(x: np.ndarray, y: np.ndarray, labels, predictions) -> str:
    """What :func:`plot_reconstructions` shows, in words: the labels, the predictions (and which are wrong), and
    the mean squared error per pixel, overall and of the best and the worst reconstruction."""
    N = len(x)
    name = ((lambda n: f"the {labels[n]} in position {n + 1}") if labels is not None
            else (lambda n: f"the digit in position {n + 1}"))
    text = f"Top row: {N} digit{'s' * (N != 1)}"
    if labels is not None:
        text += ", labelled " + ", ".join(str(k) for k in labels)
    text += "; bottom row: the decoder's reconstruction of each"
    if predictions is not None:
        text += ", from the capsule of its predicted class, " + ", ".join(str(k) for k in predictions)
        if labels is not None:
            wrong = [n for n in range(N) if labels[n] != predictions[n]]
            text += (f". All {N} predictions are correct" if not wrong else
                     f". {N - len(wrong)} of {N} predictions are correct; "
                     + join_words([f"{name(n)} is read as a {predictions[n]}" for n in wrong]))
    errors = ((x - y) ** 2).reshape(N, -1).mean(axis=1)
    text += f". Mean squared error per pixel {errors.mean():.3f}"
    if N > 1:
        best, worst = int(errors.argmin()), int(errors.argmax())
        text += f", from {errors[best]:.3f} for {name(best)} to {errors[worst]:.3f} for {name(worst)}"
    return text + "."


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
        The Figure with one axis holding the K × P montage — perturbations along x, dimensions along y — and alt
        text naming the dimensions whose perturbation changes the image most and least.

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
    attach_description(fig, f"A grid of decoded digits: {K} row{'s' * (K != 1)}, one per pose dimension "
                            f"({_span(d)}), by {P} column{'s' * (P != 1)}, the value added to that dimension "
                            f"({p[0]:+.2f} to {p[-1]:+.2f}). " + _sweep_change(s, p, d),
                       f"Reconstructions as one of {K} pose dimension{'s' * (K != 1)} is perturbed by {p[0]:+.2f} to "
                       f"{p[-1]:+.2f}")
    return fig


def _span(dims: Sequence[int]) -> str:
    """'dim 0 to dim 15' for a run of dimensions, else 'dim 0, dim 5 and dim 15'."""
    if len(dims) > 3 and list(dims) == list(range(dims[0], dims[0] + len(dims))):
        return f"dim {dims[0]} to dim {dims[-1]}"
    return join_words([f"dim {k}" for k in dims])


def _sweep_change(s: np.ndarray, p: np.ndarray, dims: Sequence[int]) -> str:
    """Which dimensions change the image most and least between the first and the last perturbation (mean absolute
    pixel difference), in words."""
    if len(p) < 2:
        return "With one column, no change between values is shown."
    change = np.abs(s[:, -1] - s[:, 0]).reshape(len(dims), -1).mean(axis=1)
    order = np.argsort(-change, kind="stable")

    def listed(ks):
        return join_words([f"dim {dims[k]}" for k in ks]) + " (" + ", ".join(f"{change[k]:.3f}" for k in ks) + ")"

    head = f"Between the columns {p[0]:+.2f} and {p[-1]:+.2f} the image changes, in mean absolute pixel difference, "
    if len(dims) <= 4:
        return head + "along " + listed(order) + "."
    return head + f"most along {listed(order[:3])} and least along {listed(order[-1:])}."
