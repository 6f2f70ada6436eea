"""Figures of the gradients through routing: the unrolled graph, the two gradient terms, and how their ratio
and the couplings' polarisation evolve during training.

Taught in chapter 03 (``chapters/03_routing_gradients.ipynb``). Pure matplotlib, like
:mod:`capsule_lab.figures.routing`: every function draws and returns the Figure (it never calls ``show``) and checks its
inputs, and attaches the figure's alt text and caption, written from the numbers it draws
(:func:`capsule_lab.figures.descriptions.attach_description`).
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch

from .._checks import check_positive_int, to_numpy
from .descriptions import attach_description, join_words
from .style import PALETTE, REFERENCE_COLOR, series

__all__ = ["routing_graph_edges", "draw_routing_graph", "plot_routing_graphs", "plot_gradient_terms",
           "plot_gradient_history"]

# Edges the gradient flows back through: thick, solid, vermillion; edges used only forward: thin, dashed, grey.
_LIVE, _DEAD = PALETTE[1], "0.6"


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
    """Draw :func:`routing_graph_edges` on ``ax``: gradient-carrying edges thick, solid and red (vermillion), the
    others thin, dashed and grey. Chapter 03."""
    edges = routing_graph_edges(iterations, constant_couplings)
    pos = _positions(iterations)
    for a, b, live in edges:
        rad = 0.0
        if a == "u":  # bend the vote edges around the rows they cross
            rad = (0.45 if b.startswith("b") else 0.12) * (1 if pos[b][0] > pos["u"][0] else -1)
        ax.add_patch(FancyArrowPatch(pos[a], pos[b], connectionstyle=f"arc3,rad={rad}", arrowstyle="-|>",
                                     mutation_scale=11, lw=1.8 if live else 1.0, color=_LIVE if live else _DEAD,
                                     linestyle="-" if live else (0, (4, 2)), shrinkA=11, shrinkB=11, zorder=1))
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


def _node_name(name: str) -> str:
    """A node of :func:`routing_graph_edges` in words: ``"u"`` → ``"û"``, ``"c2"`` → ``"c(2)"``."""
    return {"u": "û", "L": "L"}.get(name) or f"{name[0]}({name[1:]})"


def _edge_list(edges) -> str:
    """``"b(1) → c(1), c(1) → s(1) and b(1) → b(2)"``."""
    names = [f"{_node_name(a)} → {_node_name(b)}" for a, b in edges]
    return join_words(names)


def _path(edges) -> str:
    """The live edges as one path from û (``"û → s(3) → v(3) → L"``), or as a list if they are not one path."""
    following = dict(edges)
    if len(following) != len(edges) or "u" not in following:
        return _edge_list(edges)
    nodes = ["u"]
    while nodes[-1] in following and len(nodes) <= len(edges):
        nodes.append(following[nodes[-1]])
    if len(nodes) != len(edges) + 1:
        return _edge_list(edges)
    return " → ".join(_node_name(n) for n in nodes)


def _routing_graphs_description(iterations: int = 3) -> tuple[str, str]:
    """Alt text and caption of :func:`plot_routing_graphs`, from :func:`routing_graph_edges`: how many edges carry
    gradient back to the votes in each graph, which do not in the top one, and the one path left in the bottom
    one. Chapter 03."""
    K = check_positive_int(iterations, "iterations")
    full, detached = routing_graph_edges(K, False), routing_graph_edges(K, True)
    n = len(full)
    live_full = [(a, b) for a, b, live in full if live]
    dead_full = [(a, b) for a, b, live in full if not live]
    live_detached = [(a, b) for a, b, live in detached if live]
    forward_only = (f"only {_edge_list(dead_full)} {'is' if len(dead_full) == 1 else 'are'} used forward only"
                    if len(dead_full) <= 4 else f"the other {len(dead_full)} are used forward only")
    alt = (f"The unrolled graph of {K} routing iteration{'s' * (K != 1)}, drawn twice: nodes for the votes û, the "
           f"logits b, couplings c, sums s and poses v of each iteration, and the loss L. Top, couplings as functions "
           f"of the votes: {len(live_full)} of {n} edges carry gradient back to the votes (thick solid lines); "
           f"{forward_only} (thin dashed lines). Bottom, couplings held constant: {len(live_detached)} of {n} edges "
           f"carry gradient, the path {_path(live_detached)}; the other {n - len(live_detached)} are forward only.")
    caption = (f"The unrolled routing graph for K = {K}, with the couplings as functions of the votes (top) and held "
               f"constant (bottom), after the supplement's Fig. 2 and 3.")
    return alt, caption


def plot_routing_graphs(iterations: int = 3) -> Figure:
    """The supplement's two graphs (Appx. C) one above the other: couplings as functions of û (Fig. 2) and as
    constants (Fig. 3). Thick, solid red edges carry gradient from the loss back to the votes; thin, dashed grey
    ones are used only forward. Attaches alt text (the edge counts of both graphs and the one path left
    in the bottom one) and a caption. Chapter 03.
    """
    alt, caption = _routing_graphs_description(iterations)
    fig, axes = plt.subplots(2, 1, figsize=(6.5, 6.4), constrained_layout=True)
    draw_routing_graph(axes[0], iterations, False, "couplings are functions of the votes (full gradient)")
    draw_routing_graph(axes[1], iterations, True, "couplings treated as constants (detached)")
    handles = [Line2D([], [], color=_LIVE, lw=1.8, ls="-", marker="", label="gradient flows back to û"),
               Line2D([], [], color=_DEAD, lw=1.0, ls=(0, (4, 2)), marker="", label="forward only")]
    axes[1].legend(handles=handles, loc="lower right", fontsize=8, frameon=False)
    return attach_description(fig, alt, caption)


def _gradient_terms_description(couplings, term1, term2) -> str:
    """Alt text of :func:`plot_gradient_terms` from the numbers it draws: the range of the couplings and the largest
    one, how polarised they are (each input's largest coupling, on average, against uniform 1/J), and for how many
    input capsules term 2 is larger than term 1. Chapter 03."""
    c = to_numpy(couplings, "couplings").astype(float)
    t1, t2 = to_numpy(term1, "term1").astype(float), to_numpy(term2, "term2").astype(float)
    if c.ndim != 2 or t1.shape != (c.shape[0],) or t2.shape != (c.shape[0],):
        raise ValueError(f"couplings must be (I, J) and term1, term2 (I,), got {c.shape}, {t1.shape}, {t2.shape}")
    I, J = c.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(t1 > 0, t2 / np.where(t1 > 0, t1, 1.0), np.where(t2 > 0, np.inf, 0.0))
    k = int(np.argmax(ratio))
    times = "with term 1 zero" if not np.isfinite(ratio[k]) else f"{ratio[k]:.2g} times term 1"
    larger = int((t2 > t1).sum())
    if not t2.any():
        term2_words = "term 2 is zero for every input"
    elif larger == I:
        term2_words = f"term 2 is larger for all {I} inputs, up to {times} (input {k})"
    elif larger:
        term2_words = f"term 2 is larger for {larger} of the {I} inputs, up to {times} (input {k})"
    else:
        term2_words = f"term 2 is smaller for every input, at most {times} (input {k})"
    a, b = int(np.argmax(t1)), int(np.argmax(t2))
    if not t2.any():
        tallest = f"term 1 is tallest at input {a} ({t1[a]:.3g})"
    elif a == b:
        tallest = f"the tallest bars of both terms are at input {a} ({t1[a]:.3g} and {t2[b]:.3g})"
    else:
        tallest = f"term 1 is tallest at input {a} ({t1[a]:.3g}), term 2 at input {b} ({t2[b]:.3g})"
    return (f"Left, a heat map of the couplings of {I} inputs (rows) to {J} outputs (columns): each input's largest "
            f"coupling is {c.max(axis=1).mean():.2f} on average (uniform: {1 / J:.2f}), at most {c.max():.2f}. "
            f"Right, bars of ‖term 1‖ (plain) and ‖term 2‖ (hatched) per input: {term2_words}; {tallest}.")


def plot_gradient_terms(couplings, term1, term2, title: str | None = None) -> Figure:
    """One sample's couplings ``(I, J)`` as a heat map, beside the per-input-capsule norms of the two
    gradient terms ``(I,)`` each (‖term 1‖ and ‖term 2‖ over all output capsules and dimensions), told apart by
    colour and hatching. Attaches alt text written from the numbers drawn (the couplings' range and
    polarisation, for how many inputs term 2 exceeds term 1) and a caption. Chapter 03.
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
    ax_t.bar(x - 0.2, t1, width=0.4, label="term 1 (constant couplings)", color=PALETTE[0], edgecolor="white")
    ax_t.bar(x + 0.2, t2, width=0.4, label="term 2 (through the couplings)", color=PALETTE[1], hatch="///",
             edgecolor="white")
    ax_t.set_xticks(x)
    ax_t.set_xlabel("input capsule i")
    ax_t.set_title(r"$\|\partial\mathcal{L}/\partial\hat u_{\cdot|i}\|$ by term")
    ax_t.legend(fontsize=8)
    ax_t.grid(alpha=0.3, axis="y")
    if title:
        fig.suptitle(title, fontsize=10)
    caption = "Couplings and the two gradient terms per input capsule" + (f": {title}." if title else ".")
    return attach_description(fig, _gradient_terms_description(c, t1, t2), caption)


#: The markers' names, for axis labels that say which series an axis belongs to.
_MARKER_NAMES = {"o": "circles", "s": "squares", "^": "triangles", "D": "diamonds", "v": "down triangles",
                 "P": "plus signs", "X": "crosses", "*": "stars"}


def _trend(xs, values, fmt: str, unit: str = "epoch", suffix: str = "") -> str:
    """How ``values`` (one per x) change, in words that are true for them: "rises at every epoch, from 0.100 at
    epoch 0 to 0.118 at epoch 3", "falls at every ...", "stays at ...", or "goes from a to b, between lo and hi".
    ``suffix`` follows every number (" bits")."""
    v = [float(x) for x in values]
    xs = list(xs)
    text = [format(x, fmt) + suffix for x in v]
    if len(set(text)) == 1:
        return f"stays at {text[0]}"
    ends = f"from {text[0]} at {unit} {xs[0]} to {text[-1]} at {unit} {xs[-1]}"
    d = np.diff(v)
    if np.all(d > 0):
        return f"rises at every {unit}, {ends}"
    if np.all(d < 0):
        return f"falls at every {unit}, {ends}"
    return f"goes {ends}, between {format(min(v), fmt)}{suffix} and {format(max(v), fmt)}{suffix}"


def _gradient_history_description(epochs: Sequence[int], records: Sequence[dict]) -> str:
    """Alt text of :func:`plot_gradient_history` from the numbers it draws: how the ratio of the terms, the cosine,
    the mean largest coupling and the coupling entropy change over the epochs, against their uniform values.
    Chapter 03."""
    _check_history(epochs, records)
    get = lambda k: [r[k] for r in records]  # noqa: E731
    return (f"Left, over epochs {epochs[0]} to {epochs[-1]} at the class layer: ‖term 2‖/‖term 1‖ "
            f"{_trend(epochs, get('ratio'), '.3f')}, and the cosine between the total gradient and term 1 "
            f"{_trend(epochs, get('cosine'), '.4f')}. Right, the polarisation of the couplings: the mean largest "
            f"coupling {_trend(epochs, get('max_coupling'), '.4f')} (uniform: {records[0]['uniform_max']:.4f}), and "
            f"the mean coupling entropy {_trend(epochs, get('entropy_bits'), '.4f', suffix=' bits')} (uniform: "
            f"{records[0]['uniform_entropy_bits']:.4f} bits).")


def _check_history(epochs, records) -> None:
    if len(epochs) != len(records) or not records:
        raise ValueError(f"need one record per epoch, got {len(epochs)} epochs and {len(records)} records")
    keys = ("ratio", "cosine", "max_coupling", "entropy_bits", "uniform_max", "uniform_entropy_bits")
    missing = [k for k in keys if any(k not in r for r in records)]
    if missing:
        raise ValueError(f"records lack {missing}: use capsule_lab.measures.gradients.capsnet_gradient_terms")


def plot_gradient_history(epochs: Sequence[int], records: Sequence[dict]) -> Figure:
    """Over training: ‖term 2‖/‖term 1‖ and cos(total, term 1) (left), and the couplings' polarisation —
    mean max_j c_ij and mean entropy in bits, with their uniform values as grey reference lines (right). ``records``
    are dicts from :func:`capsule_lab.measures.gradients.capsnet_gradient_terms`, one per epoch. Every series has its
    own colour, marker and line style. Attaches alt text written from the records (how each measure changes
    over the epochs, against its uniform value) and a caption. Chapter 03.
    """
    _check_history(epochs, records)
    get = lambda k: np.array([r[k] for r in records], dtype=float)  # noqa: E731
    fig, (ax_g, ax_c) = plt.subplots(1, 2, figsize=(7.5, 3.8), constrained_layout=True)
    ax_g.plot(epochs, get("ratio"), **series(0), label="‖term 2‖ / ‖term 1‖")
    ax_g.plot(epochs, get("cosine"), **series(1), label="cos(total gradient, term 1)")
    ax_g.set_xlabel("epoch")
    ax_g.set_title("the two gradient terms\nat the class layer", fontsize=10)
    ax_g.set_ylim(0, 1.05)
    ax_g.legend(fontsize=8)
    max_style, entropy_style = series(2), series(3)
    lines = ax_c.plot(epochs, get("max_coupling"), **max_style, label="mean max$_j$ $c_{ij}$")
    lines += [ax_c.axhline(records[0]["uniform_max"], color=REFERENCE_COLOR, ls="--", lw=0.9,
                           label=f"uniform max$_j$ $c_{{ij}}$ ({records[0]['uniform_max']:.2f})")]
    ax_c.set_ylabel(f"mean max$_j$ $c_{{ij}}$ ({_MARKER_NAMES.get(max_style['marker'], 'markers')})")
    ax_e = ax_c.twinx()
    lines += ax_e.plot(epochs, get("entropy_bits"), **entropy_style, label="entropy (bits)")
    lines += [ax_e.axhline(records[0]["uniform_entropy_bits"], color=REFERENCE_COLOR, ls=":", lw=1.2,
                           label=f"uniform entropy ({records[0]['uniform_entropy_bits']:.2f} bits)")]
    ax_e.set_ylabel(f"mean coupling entropy in bits ({_MARKER_NAMES.get(entropy_style['marker'], 'markers')})")
    ax_c.set_xlabel("epoch")
    ax_c.set_title("polarisation of the couplings\n(grey: uniform values)", fontsize=10)
    ax_c.legend(handles=lines, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    for ax in (ax_g, ax_c):
        ax.set_xticks(list(epochs))
        ax.grid(alpha=0.3)
    caption = ("The two gradient terms at the class layer and the polarisation of the couplings, measured after "
               "every epoch of training.")
    return attach_description(fig, _gradient_history_description(epochs, records), caption)
