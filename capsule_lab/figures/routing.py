"""Figures of routing: the couplings per iteration, and the 2-D routing toy (votes, poses, coupling bars).

Taught in chapter 02 (``chapters/02_dynamic_routing.ipynb``). Pure matplotlib: every function takes tensors
or arrays, draws, and returns the :class:`matplotlib.figure.Figure` (it never calls ``show``). Inputs are
checked and a ``ValueError`` names the expected shape. Each ``plot_*`` function attaches alt text and a caption
written from the numbers it draws (:func:`capsule_lab.figures.descriptions.attach_description`), so a chapter
ends its cell with ``show(fig)``. Output capsule j is told apart by colour *and* by line style (its votes) or hatch
(its bars).

Shapes (one sample, the batch dimension removed):
    votes      û_{j|i}   (I, J, 2)      for the 2-D toy
    couplings  c_ij      (I, J)         one per iteration → (R, I, J)
    poses      v_j       (J, 2)         one per iteration → (R, J, 2)
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .._checks import stack_per_iteration, tick_labels, to_numpy
from .descriptions import attach_description, join_words
from .style import LINESTYLES, MAX_FIGURE_WIDTH, OUTPUT_COLORS, REFERENCE_COLOR

__all__ = ["plot_couplings", "draw_toy", "draw_coupling_bars", "plot_routing_state", "plot_toy_routing"]

#: The hatch of output capsule j's segments in the coupling bars (besides its colour).
_HATCHES = ("", "////", "....", "xxxx", "\\\\\\\\", "++++")


def _assignment(c: np.ndarray, ins: Sequence[str], outs: Sequence[str]) -> str:
    """Which output each input couples to most, in words: 'inputs 0, 1 and 2 send most of their vote to v0 (0.72,
    0.94, 0.84) and input 3 to v1 (0.79)'; 'every coupling is 0.50' when all are equal."""
    if np.ptp(c) < 5e-4:
        return f"every coupling is {c.flat[0]:.2f}"
    best = c.argmax(axis=1)
    groups = []
    for j in range(c.shape[1]):
        rows = [i for i in range(c.shape[0]) if best[i] == j]
        if rows:
            who = ("inputs " if len(rows) > 1 else "input ") + join_words([ins[i] for i in rows])
            groups.append((who, len(rows) > 1, f"{outs[j]} (" + ", ".join(f"{c[i, j]:.2f}" for i in rows) + ")"))
    who, plural, where = groups[0]
    head = f"{who} send{'' if plural else 's'} most of {'their' if plural else 'its'} vote to {where}"
    return join_words([head] + [f"{who} to {where}" for who, _, where in groups[1:]])


def _uniformity(c: np.ndarray) -> str:
    """How decided couplings (I, J) are: the mean largest coupling of an input against uniform 1/J."""
    return f"the largest coupling of an input is {c.max(axis=1).mean():.2f} on average (uniform: {1 / c.shape[1]:.2f})"


def _state(c: np.ndarray, ins: Sequence[str], outs: Sequence[str]) -> str:
    """Couplings (I, J) in words: who sends its vote where for a few inputs, how decided they are for many."""
    return _assignment(c, ins, outs) if c.shape[0] <= 8 else _uniformity(c)


def _change(first: float, last: float) -> str:
    """'grows from 0.70 to 0.89' (or falls, or stays at 0.89)."""
    if round(first, 2) == round(last, 2):
        return f"stays at {last:.2f}"
    return f"{'grows' if last > first else 'falls'} from {first:.2f} to {last:.2f}"


def _iterations_alt(c: np.ndarray, ins: Sequence[str], outs: Sequence[str], poses: np.ndarray | None = None) -> str:
    """The couplings (R, I, J) of iteration 1 and of the last iteration in words, with the output lengths that
    ``poses`` (R, J, D) give, if given."""
    R, J = len(c), c.shape[2]
    lengths = None if poses is None else np.linalg.norm(poses, axis=-1)
    if R == 1:
        text = f"In its one iteration {_state(c[0], ins, outs)}"
        if lengths is not None:
            text += "; " + join_words([f"{outs[j]} has length {lengths[0, j]:.2f}" for j in range(J)])
        return text + "."
    text = f"In iteration 1 {_state(c[0], ins, outs)}"
    if lengths is not None:
        text += " (" + join_words([f"{outs[j]} has length {lengths[0, j]:.2f}" for j in range(J)]) + ")"
    text += f". By iteration {R} {_state(c[-1], ins, outs)}"
    if lengths is not None:
        text += "; the length of " + join_words([f"{outs[j]} {_change(lengths[0, j], lengths[-1, j])}"
                                              for j in range(J)])
    return text + "."


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
        the Figure (R axes for the panels plus one for the colour bar), with alt text saying which output each
        input couples to most in the first and the last iteration (for up to 8 inputs; for more, the mean largest
        coupling) and a caption (:func:`capsule_lab.figures.descriptions.attach_description`).

    Chapter 02.
    """
    c = stack_per_iteration(couplings_per_iteration, "couplings_per_iteration", 2, "I, J")
    R, I, J = c.shape
    if c.min() < -1e-6 or c.max() > 1 + 1e-6:
        raise ValueError("couplings must lie in [0, 1]")
    ins = tick_labels(input_labels, I, "i={}", "input_labels")
    outs = tick_labels(output_labels, J, "j={}", "output_labels")
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
    iterations = "iteration 1" if R == 1 else f"iterations 1 to {R}"
    alt = (f"Heatmaps of the couplings of {I} input capsules (rows) to {J} output capsules (columns), one panel per "
           f"routing iteration, on one colour scale from 0 to 1. " + _iterations_alt(c, ins, outs))
    attach_description(fig, alt, f"Couplings of {I} input capsules to {J} output capsules, routing {iterations}")
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

    Each vote û_{j|i} is a thin arrow from the origin in the colour and line style of its output j (solid for
    j = 0, dashed for j = 1, ...), as opaque and as wide as its coupling c_ij (a vote that is not listened to
    fades away); each output v_j is a thick arrow in the same colour, labelled with its name at the tip.
    votes ``(I, J, 2)``, couplings ``(I, J)``, poses ``(J, 2)``.

    Chapter 02.
    """
    u, c, v = _toy_inputs(votes, couplings, poses)
    I, J, _ = u.shape
    ins = tick_labels(input_labels, I, "{}", "input_labels")
    outs = tick_labels(output_labels, J, "v{}", "output_labels")
    lim = limit if limit is not None else 1.15 * max(np.abs(u).max(), np.abs(v).max(), 1.0)
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    ax.add_patch(plt.Circle((0, 0), 1.0, fill=False, ls=":", color=REFERENCE_COLOR, lw=0.8))  # ‖v‖ < 1
    for j in range(J):
        for i in range(I):
            w = float(np.clip(c[i, j], 0.0, 1.0))
            ax.annotate("", xy=tuple(u[i, j]), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color=OUTPUT_COLORS[j], alpha=0.15 + 0.85 * w,
                                        lw=0.5 + 2.5 * w, linestyle=LINESTYLES[j], shrinkA=0, shrinkB=0))
            ax.text(*(u[i, j] * 1.06), ins[i], color=OUTPUT_COLORS[j], fontsize=8, alpha=0.3 + 0.7 * w,
                    ha="center", va="center")
        ax.annotate("", xy=tuple(v[j]), xytext=(0, 0),
                    arrowprops=dict(arrowstyle="simple,head_width=1.1,head_length=1.1", color=OUTPUT_COLORS[j],
                                    ec="black", lw=0.8, shrinkA=0, shrinkB=0))
        # The output's name beside its tip (on the side away from the arrow), so it needs no colour to be found.
        norm = float(np.linalg.norm(v[j]))
        if norm > 0:
            side = np.array([-v[j][1], v[j][0]]) / norm
            ax.text(*(v[j] * 0.55 + 0.09 * lim * side), outs[j], fontsize=8, fontweight="bold", ha="center",
                    va="center", color=OUTPUT_COLORS[j], bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none",
                                                                   alpha=0.8))
        # Invisible line so that the legend has one entry per output capsule, in its votes' style.
        ax.plot([], [], color=OUTPUT_COLORS[j], lw=2, linestyle=LINESTYLES[j], marker="",
                label=f"{outs[j]}  ‖v‖={norm:.2f}")
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.legend(loc="lower left", fontsize=8, framealpha=0.8)


def draw_coupling_bars(ax, couplings, input_labels: Sequence[str] | None = None,
                       output_labels: Sequence[str] | None = None) -> None:
    """Stacked bars of c_ij on ``ax``: one bar per input capsule i, one segment per output j.

    For dynamic routing each bar has height Σ_j c_ij = 1. The segments are drawn output by output
    (all of j = 0, then j = 1, …), so ``ax.patches[j * I + i].get_height()`` is c_ij; output j's segments have
    their own colour and hatch (plain, hatched ////, dotted, ...).

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
    ins = tick_labels(input_labels, I, "{}", "input_labels")
    outs = tick_labels(output_labels, J, "v{}", "output_labels")
    bottom = np.zeros(I)
    for j in range(J):
        ax.bar(range(I), c[:, j], bottom=bottom, color=OUTPUT_COLORS[j], label=f"to {outs[j]}",
               edgecolor="white", lw=0.5, hatch=_HATCHES[j])
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
    dropped). This is the routing explorer's picture (:mod:`capsule_lab.widgets.routing`). Returns the Figure
    with two axes: ``axes[0]`` the toy, ``axes[1]`` the bars, and alt text naming the output each input sends most
    of its vote to, and the outputs' lengths.

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
    I, J, _ = u.shape
    ins = tick_labels(input_labels, I, "{}", "input_labels")
    outs = tick_labels(output_labels, J, "v{}", "output_labels")
    lengths = join_words([f"{outs[j]} of length {np.linalg.norm(v[j]):.2f}" for j in range(J)])
    alt = (f"Left: the 2-D votes of {I} input capsules for {J} output capsules, thin arrows as opaque and as thick as "
           f"their couplings, and the outputs as thick arrows, {lengths}. Right: one stacked bar of couplings per input "
           f"capsule; {_state(c, ins, outs)}.")
    attach_description(fig, alt, f"Votes, outputs and couplings of {I} input and {J} output capsules after routing")
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
        the Figure, one axis per iteration titled ``iteration r``, with alt text saying where each input sends
        most of its vote and how long the outputs are in the first and the last iteration.

    Chapter 02.
    """
    c = stack_per_iteration(couplings_per_iteration, "couplings_per_iteration", 2, "I, J")
    v = stack_per_iteration(poses_per_iteration, "poses_per_iteration", 2, "J, 2")
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
    I, J, _ = u.shape
    ins = tick_labels(input_labels, I, "{}", "input_labels")
    outs = tick_labels(output_labels, J, "v{}", "output_labels")
    alt = (f"The 2-D votes of {I} input capsules for {J} output capsules, one panel per routing iteration: votes are "
           f"thin arrows, as opaque and as thick as their couplings, outputs thick arrows. "
           + _iterations_alt(c, ins, outs, v))
    attach_description(fig, alt, f"Routing by agreement on a 2-D toy of {I} input and {J} output capsules, "
                       + ("iteration 1" if R == 1 else f"iterations 1 to {R}"))
    return fig
