"""Figures of the gradients through routing: the unrolled graph, the two gradient terms, and how their ratio
and the couplings' polarisation evolve during training.

Taught in chapter 03 (``chapters/03_routing_gradients.ipynb``). Pure matplotlib, like :mod:`capsule_lab.figures.routing`:
every function draws and returns the Figure (it never calls ``show``) and checks its inputs.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch

from .._checks import check_positive_int, to_numpy

__all__ = ["routing_graph_edges", "draw_routing_graph", "plot_routing_graphs", "plot_gradient_terms",
           "plot_gradient_history"]

_LIVE, _DEAD = "#d62728", "0.75"   # edges the gradient flows back through, and edges it does not


def routing_graph_edges(iterations: int, constant_couplings: bool = False) -> list[tuple[str, str, bool]]:
    """The unrolled computational graph of K routing iterations as edges ``(from, to, carries_gradient)``.

    Nodes: ``"u"`` (the votes û), ``"b1"`` (the prior logits), and per iteration t: ``"c{t}"``, ``"s{t}"``,
    ``"v{t}"``, ``"b{t+1}"`` (t < K); ``"L"`` the loss, which reads v^(K). An edge carries gradient back
    to û when it lies on a path from û to L that backpropagation follows; with ``constant_couplings``
    (the supplement's Fig. 3) nothing flows into the couplings, so only û → s^(K) → v^(K) → L is live.
    Chapter 03.
    """
    K = check_positive_int(iterations, "iterations")
    edges = []
    for t in range(1, K + 1):
        edges += [(f"b{t}", f"c{t}"), (f"c{t}", f"s{t}"), ("u", f"s{t}"), (f"s{t}", f"v{t}")]
        if t < K:
            edges += [(f"b{t}", f"b{t + 1}"), (f"v{t}", f"b{t + 1}"), ("u", f"b{t + 1}")]
    edges.append((f"v{K}", "L"))
    blocked = {(f"c{t}", f"s{t}") for t in range(1, K + 1)} if constant_couplings else set()
    open_edges = [e for e in edges if e not in blocked]
    from_u = _reachable("u", open_edges)                                     # nodes that depend on û
    to_loss = _reachable("L", [(b, a) for a, b in open_edges])               # nodes the loss depends on
    return [(a, b, (a, b) not in blocked and a in from_u and b in to_loss) for a, b in edges]


def _reachable(start: str, edges) -> set:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        for a, b in edges:
            if a == node and b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


def _positions(K: int) -> dict:
    """Rows: logits b (top), couplings c, sums s and poses v; the votes û below, the loss at the right."""
    pos = {"u": (K + 0.5, -1.0), "L": (2 * K + 2.0, 1.0)}
    for t in range(1, K + 1):
        pos.update({f"b{t}": (2.0 * t, 3.0), f"c{t}": (2.0 * t, 2.0), f"s{t}": (2.0 * t, 1.0),
                    f"v{t}": (2.0 * t + 1.0, 1.0)})
    return pos


_LABELS = {"u": r"$\hat u$", "L": r"$\mathcal{L}$"}


def draw_routing_graph(ax, iterations: int = 3, constant_couplings: bool = False, title: str | None = None) -> None:
    """Draw :func:`routing_graph_edges` on ``ax``: gradient-carrying edges red, the others grey. Chapter 03."""
    edges = routing_graph_edges(iterations, constant_couplings)
    pos = _positions(iterations)
    for a, b, live in edges:
        rad = 0.0
        if a == "u":  # bend the vote edges around the rows they cross
            rad = (0.45 if b.startswith("b") else 0.12) * (1 if pos[b][0] > pos["u"][0] else -1)
        ax.add_patch(FancyArrowPatch(pos[a], pos[b], connectionstyle=f"arc3,rad={rad}", arrowstyle="-|>",
                                     mutation_scale=11, lw=1.8 if live else 1.0, color=_LIVE if live else _DEAD,
                                     shrinkA=11, shrinkB=11, zorder=1))
    for name, (x, y) in pos.items():
        label = _LABELS.get(name) or f"${name[0]}^{{({name[1:]})}}$"
        ax.text(x, y, label, ha="center", va="center", fontsize=11, zorder=2,
                bbox=dict(boxstyle="circle,pad=0.25", fc="white", ec="0.3"))
    xs, ys = zip(*pos.values())
    ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    ax.set_ylim(min(ys) - 1.0, max(ys) + 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10)


def plot_routing_graphs(iterations: int = 3) -> Figure:
    """The supplement's two graphs (Appx. C) side by side: couplings as functions of û (Fig. 2) and as
    constants (Fig. 3). Red edges carry gradient from the loss back to the votes. Chapter 03.
    """
    fig, axes = plt.subplots(2, 1, figsize=(6.5, 6.4), constrained_layout=True)
    draw_routing_graph(axes[0], iterations, False, "couplings are functions of the votes (full gradient)")
    draw_routing_graph(axes[1], iterations, True, "couplings treated as constants (detached)")
    axes[1].plot([], [], color=_LIVE, lw=1.8, label="gradient flows back to û")
    axes[1].plot([], [], color=_DEAD, lw=1.0, label="forward only")
    axes[1].legend(loc="lower right", fontsize=8, frameon=False)
    return fig


def plot_gradient_terms(couplings, term1, term2, title: str | None = None) -> Figure:
    """One sample's couplings ``(I, J)`` as a heat map, beside the per-input-capsule norms of the two
    gradient terms ``(I,)`` each (‖term 1‖ and ‖term 2‖ over all output capsules and dimensions). Chapter 03.
    """
    c = to_numpy(couplings, "couplings")
    t1, t2 = to_numpy(term1, "term1"), to_numpy(term2, "term2")
    if c.ndim != 2 or t1.shape != (c.shape[0],) or t2.shape != (c.shape[0],):
        raise ValueError(f"couplings must be (I, J) and term1, term2 (I,), got {c.shape}, {t1.shape}, {t2.shape}")
    I, J = c.shape
    fig, (ax_c, ax_t) = plt.subplots(1, 2, figsize=(7.5, 3.0), constrained_layout=True,
                                     gridspec_kw={"width_ratios": [1, 1.6]})
    im = ax_c.imshow(c, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax_c.set_xlabel("output capsule j")
    ax_c.set_ylabel("input capsule i")
    ax_c.set_xticks(range(J))
    ax_c.set_yticks(range(I))
    ax_c.set_title("couplings $c_{ij}^{(K)}$")
    fig.colorbar(im, ax=ax_c, shrink=0.8)
    x = np.arange(I)
    ax_t.bar(x - 0.2, t1, width=0.4, label="term 1 (constant couplings)", color="#1f77b4")
    ax_t.bar(x + 0.2, t2, width=0.4, label="term 2 (through the couplings)", color="#ff7f0e")
    ax_t.set_xticks(x)
    ax_t.set_xlabel("input capsule i")
    ax_t.set_title(r"$\|\partial\mathcal{L}/\partial\hat u_{\cdot|i}\|$ by term")
    ax_t.legend(fontsize=8)
    ax_t.grid(alpha=0.3, axis="y")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_gradient_history(epochs: Sequence[int], records: Sequence[dict]) -> Figure:
    """Over training: ‖term 2‖/‖term 1‖ and cos(total, term 1) (left), and the couplings' polarisation —
    mean max_j c_ij and mean entropy in bits, with their uniform values dashed (right). ``records`` are
    dicts from :func:`capsule_lab.gradients.capsnet_gradient_terms`, one per epoch. Chapter 03.
    """
    if len(epochs) != len(records) or not records:
        raise ValueError(f"need one record per epoch, got {len(epochs)} epochs and {len(records)} records")
    keys = ("ratio", "cosine", "max_coupling", "entropy_bits", "uniform_max", "uniform_entropy_bits")
    missing = [k for k in keys if any(k not in r for r in records)]
    if missing:
        raise ValueError(f"records lack {missing}: use capsule_lab.gradients.capsnet_gradient_terms")
    get = lambda k: np.array([r[k] for r in records], dtype=float)  # noqa: E731
    fig, (ax_g, ax_c) = plt.subplots(1, 2, figsize=(7.5, 3.0), constrained_layout=True)
    ax_g.plot(epochs, get("ratio"), "o-", label="‖term 2‖ / ‖term 1‖")
    ax_g.plot(epochs, get("cosine"), "s-", label="cos(total gradient, term 1)")
    ax_g.set_xlabel("epoch")
    ax_g.set_title("the two gradient terms\nat the class layer", fontsize=10)
    ax_g.set_ylim(0, 1.05)
    ax_g.legend(fontsize=8)
    ax_c.plot(epochs, get("max_coupling"), "o-", color="#2ca02c", label="mean max$_j$ $c_{ij}$")
    ax_c.axhline(records[0]["uniform_max"], color="#2ca02c", ls="--", lw=0.8)
    ax_c.set_ylabel("mean max$_j$ $c_{ij}$", color="#2ca02c")
    ax_e = ax_c.twinx()
    ax_e.plot(epochs, get("entropy_bits"), "s-", color="#9467bd", label="entropy (bits)")
    ax_e.axhline(records[0]["uniform_entropy_bits"], color="#9467bd", ls="--", lw=0.8)
    ax_e.set_ylabel("mean coupling entropy (bits)", color="#9467bd")
    ax_c.set_xlabel("epoch")
    ax_c.set_title("polarisation of the couplings\n(dashed: uniform)", fontsize=10)
    for ax in (ax_g, ax_c):
        ax.set_xticks(list(epochs))
        ax.grid(alpha=0.3)
    return fig
