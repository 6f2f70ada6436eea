"""The fuzzy parse tree of a deep CapsNet, drawn, and a widget to compare depths and routings.

Taught in chapter 04 (``chapters/04_dead_capsules.ipynb``), after Mitterreiter et al. (2023), Figure 3:
capsules are nodes (one column per layer), couplings are fuzzy edges, the capsule norms colour the nodes,
dead capsules are marked. :func:`parse_tree_summary` reduces a :class:`~capsule_lab.diagnostics.CapsuleRecord`
(a dataset's worth of capsule norms and couplings) to means and standard deviations over the images;
:func:`plot_parse_tree` draws one statistic, :func:`parse_tree_figure` the mean and the standard deviation
side by side, and :func:`parse_tree_explorer_figure` the picture of one network among several (depth ×
routing) — the default state of :func:`capsule_lab.widgets.parse_tree_explorer`, for the static book.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from ..diagnostics import ACTIVE_EPS, DEAD_MEAN_EPS, DEAD_STD_EPS, CapsuleRecord, dead_mask, layer_table

__all__ = ["ParseTreeSummary", "parse_tree_summary", "plot_parse_tree", "parse_tree_figure",
           "format_layer_table", "parse_tree_explorer_figure"]


@dataclass
class ParseTreeSummary:
    """Per layer: ``norm_mean``/``norm_std`` ``(n^l,)`` and ``dead`` ``(n^l,)`` bool; per routing layer:
    ``coupling_mean``/``coupling_std`` ``(n^l, n^{l+1})``; the :func:`~capsule_lab.diagnostics.layer_table`
    rows and the accuracy on the dataset. Chapter 04."""

    norm_mean: list
    norm_std: list
    dead: list
    coupling_mean: list
    coupling_std: list
    table: list
    accuracy: float


def parse_tree_summary(record: CapsuleRecord, active_eps: float = ACTIVE_EPS, dead_mean_eps: float = DEAD_MEAN_EPS,
                       dead_std_eps: float = DEAD_STD_EPS) -> ParseTreeSummary:
    """Means and standard deviations (ddof 0) over the images of every capsule norm and coupling. Chapter 04."""
    if not isinstance(record, CapsuleRecord):
        raise ValueError("record must be a CapsuleRecord from capsule_lab.diagnostics.collect_capsules")
    return ParseTreeSummary(
        norm_mean=[n.double().mean(0).numpy() for n in record.norms],
        norm_std=[n.double().std(0, correction=0).numpy() for n in record.norms],
        dead=[dead_mask(n, dead_mean_eps, dead_std_eps).numpy() for n in record.norms],
        coupling_mean=[c.double().mean(0).numpy() for c in record.couplings],
        coupling_std=[c.double().std(0, correction=0).numpy() for c in record.couplings],
        table=layer_table(record, active_eps, dead_mean_eps, dead_std_eps),
        accuracy=record.accuracy,
    )


def _positions(sizes) -> list:
    top = max(sizes)
    return [np.linspace(0, top - 1, n) if n > 1 else np.array([(top - 1) / 2]) for n in sizes]


def plot_parse_tree(ax, summary: ParseTreeSummary, statistic: str = "mean", title: str | None = None,
                    edge_scale: float | None = None):
    """Draw the parse tree on ``ax``: columns of capsules (layer 1 = primary on the left), edges with opacity
    ∝ the coupling's mean (or std) over the images divided by ``edge_scale`` (default: the largest value drawn),
    nodes coloured by the norm's mean (or std), dead capsules as red crosses. Returns the node scatter of the
    last layer drawn (for a colour bar). Chapter 04."""
    if statistic not in {"mean", "std"}:
        raise ValueError(f"statistic must be 'mean' or 'std', got {statistic!r}")
    norms = summary.norm_mean if statistic == "mean" else summary.norm_std
    couplings = summary.coupling_mean if statistic == "mean" else summary.coupling_std
    sizes = [len(n) for n in norms]
    ys = _positions(sizes)
    scale = edge_scale
    if scale is None:
        scale = max((float(np.max(c)) for c in couplings), default=1.0)
    segments, strengths = [], []
    for l, c in enumerate(couplings):
        for i in range(c.shape[0]):
            for j in range(c.shape[1]):
                alpha = float(c[i, j]) / scale if scale > 0 else 0.0
                if alpha > 0.05:
                    segments.append([(l, ys[l][i]), (l + 1, ys[l + 1][j])])
                    strengths.append(min(alpha, 1.0))
    if segments:
        a = np.ceil(np.asarray(strengths) * 5) / 5          # five opacity levels: a readable (and small) picture
        colors = np.tile(to_rgba("tab:blue"), (len(a), 1))
        colors[:, 3] = a
        ax.add_collection(LineCollection(segments, colors=colors, linewidths=0.3 + 1.5 * a, antialiaseds=False,
                                         zorder=1))
    vmax = 1.0 if statistic == "mean" else max(0.05, max(float(np.max(n)) for n in norms))
    nodes = None
    for l, (n, dead) in enumerate(zip(norms, summary.dead)):
        nodes = ax.scatter(np.full(len(n), l), ys[l], c=n, cmap="viridis", vmin=0.0, vmax=vmax, s=70,
                           edgecolors="black", linewidths=0.5, zorder=2)
        if dead.any():
            ax.scatter(np.full(int(dead.sum()), l), ys[l][dead], marker="x", color="red", s=60, linewidths=2,
                       zorder=3)
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels([f"layer {l + 1}" if l < len(sizes) - 1 else "classes" for l in range(len(sizes))],
                       fontsize=8)
    ax.set_yticks([])
    ax.invert_yaxis()
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title, fontsize=10)
    return nodes


def parse_tree_figure(summary: ParseTreeSummary, title: str | None = None) -> Figure:
    """The paper's Figure 3 for one network: the parse tree's means (left) and standard deviations (right)
    over a dataset, edges on one opacity scale (the largest mean coupling) so that the panels compare;
    red crosses mark dead capsules. Chapter 04."""
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.6))
    scale = max((float(np.max(c)) for c in summary.coupling_mean), default=1.0)
    for ax, statistic in zip(axes, ("mean", "std")):
        nodes = plot_parse_tree(ax, summary, statistic, edge_scale=scale,
                                title=f"{statistic} over the images:\ncouplings (edges), norms (nodes)")
        fig.colorbar(nodes, ax=ax, fraction=0.04, pad=0.02, label=f"capsule norm ({statistic})")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def format_layer_table(table: list) -> str:
    """The rows of :func:`~capsule_lab.diagnostics.layer_table` as a fixed-width text table. Chapter 04."""
    lines = [" layer | alive |  dyr  |  dys  |  cnm  |  cns  |  car  |  cas  |  cdr  |  cds"]
    for r in table:
        dyn = (f"{r['dyr']:.2f} | {r['dys']:5.2f}" if r["dyr"] is not None else "  –   |   –  ")
        lines.append(f" {r['layer']:5d} | {r['alive']:5d} | {dyn} | {r['cnm']:.2f}  | {r['cns']:5.2f} | "
                     f"{r['car']:.2f}  | {r['cas']:5.2f} | {r['cdr']:.2f}  | {r['cds']:4.1f}")
    return "\n".join(lines)


def _pick(summaries: dict, depth: int, routing: str) -> ParseTreeSummary:
    if not isinstance(summaries, dict) or (depth, routing) not in summaries:
        known = sorted(summaries) if isinstance(summaries, dict) else []
        raise ValueError(f"no network for depth={depth!r}, routing={routing!r}; known: {known}")
    return summaries[(depth, routing)]


def parse_tree_explorer_figure(summaries: dict, depth: int, routing: str = "dynamic") -> Figure:
    """The parse-tree explorer's picture for one (depth, routing) key of ``summaries`` (a dict
    ``{(routing layers, "dynamic" | "uniform"): ParseTreeSummary}``): Figure 3 for that network. Chapter 04."""
    s = _pick(summaries, depth, routing)
    name = "RBA" if routing == "dynamic" else "uniform routing"
    dead = sum(int(d.sum()) for d in s.dead)
    return parse_tree_figure(s, title=f"{depth} routing layer{'s' * (depth != 1)}, {name}: "
                                      f"test accuracy {100 * s.accuracy:.1f}%, {dead} dead capsules")
