"""Which capsules die in a deep CapsNet, and why: the fuzzy parse tree with its dead capsules, the per-layer
statistics, the gradients that starve a short capsule, and the dead rate of a search.

Taught in chapter 04 (``chapters/04_dead_capsules.ipynb``), after Mitterreiter et al. (2023), Figure 3:
capsules are nodes (one column per layer), couplings are fuzzy edges, the capsule norms colour the nodes,
dead capsules are marked. :func:`parse_tree_summary` reduces a
:class:`~capsule_lab.measures.capsule_stats.CapsuleRecord` (a dataset's worth of capsule norms and couplings) to means
and standard deviations over the images;
:func:`plot_parse_tree` draws one statistic, :func:`parse_tree_figure` the mean and the standard deviation
side by side, and :func:`parse_tree_explorer_figure` the picture of one network among several (depth ×
routing) — the default state of :func:`capsule_lab.widgets.parse_tree_explorer`, for the static book.
:func:`layer_statistics_table` shows a network's per-layer statistics (the paper's Tables 1 and 2) as a
:class:`~capsule_lab.evidence.tables.Table`. :func:`capsule_gradients_figure` draws a capsule's length and the two
gradients of Theorem 2 at every training step, :func:`dead_rate_search_figure` the dead rate per setting of a search.

The chapter's figures against depth are :mod:`capsule_lab.figures.depth`'s. Every figure function attaches its alt
text and caption, written from the numbers it draws (:func:`capsule_lab.figures.descriptions.attach_description`);
series differ in marker and line style as well as colour (:mod:`capsule_lab.figures.style`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from ..measures.capsule_stats import ACTIVE_EPS, DEAD_MEAN_EPS, DEAD_STD_EPS, CapsuleRecord, dead_mask, layer_table
from ..evidence.tables import Table
from .descriptions import attach_description, join_words
from .style import PALETTE, REFERENCE_COLOR, series

__all__ = ["ParseTreeSummary", "parse_tree_summary", "plot_parse_tree", "parse_tree_figure",
           "format_layer_table", "LAYER_STATISTICS", "layer_statistics_table", "explorer_routings",
           "parse_tree_explorer_figure", "capsule_gradients_figure", "dead_rate_search_figure"]

_EDGE_COLOR, _DEAD_COLOR = PALETTE[0], PALETTE[1]       # couplings; the crosses on dead capsules


@dataclass
class ParseTreeSummary:
    """Per layer: ``norm_mean``/``norm_std`` ``(n^l,)`` and ``dead`` ``(n^l,)`` bool; per routing layer:
    ``coupling_mean``/``coupling_std`` ``(n^l, n^{l+1})``; the :func:`~capsule_lab.measures.capsule_stats.layer_table`
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
        raise ValueError("record must be a CapsuleRecord from capsule_lab.measures.capsule_stats.collect_capsules")
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
    nodes coloured by the norm's mean (or std), dead capsules as red (vermillion) crosses. Returns the node scatter
    of the last layer drawn (for a colour bar). Chapter 04."""
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
        colors = np.tile(to_rgba(_EDGE_COLOR), (len(a), 1))
        colors[:, 3] = a
        ax.add_collection(LineCollection(segments, colors=colors, linewidths=0.3 + 1.5 * a, antialiaseds=False,
                                         zorder=1))
    vmax = 1.0 if statistic == "mean" else max(0.05, max(float(np.max(n)) for n in norms))
    nodes = None
    for l, (n, dead) in enumerate(zip(norms, summary.dead)):
        nodes = ax.scatter(np.full(len(n), l), ys[l], c=n, cmap="viridis", vmin=0.0, vmax=vmax, s=70,
                           edgecolors="black", linewidths=0.5, zorder=2)
        if dead.any():
            ax.scatter(np.full(int(dead.sum()), l), ys[l][dead], marker="x", color=_DEAD_COLOR, s=60, linewidths=2,
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


def _numbers(values, fmt: str = ".2f", every: str | None = None) -> str:
    """``"0.45, 0.39 and 0.29"``; ``"0.000 in every routing layer"`` (``every="routing layer"``) if they are all
    the same."""
    texts = [format(int(v) if fmt == "d" else float(v), fmt) for v in values]
    if not texts:
        return "none"
    if every is not None and len(texts) > 1 and len(set(texts)) == 1:
        return f"{texts[0]} in every {every}"
    return join_words(texts)


def _parse_tree_alt(summary: ParseTreeSummary) -> str:
    """What :func:`parse_tree_figure` draws, in words: the layers, the mean norm per layer, the largest mean coupling
    and the mean spread of the couplings per routing layer, and the dead capsules."""
    sizes = [len(n) for n in summary.norm_mean]
    dead = [(l + 1, int(d.sum())) for l, d in enumerate(summary.dead) if d.any()]
    if dead:
        where = "; ".join(f"{n} in layer {l}" for l, n in dead)
        total = sum(n for _, n in dead)
        dead_words = f"{total} capsule{'s' * (total != 1)} dead, marked by crosses: {where}."
    else:
        dead_words = "No capsule is dead."
    spread_max = max((float(np.max(c)) for c in summary.coupling_std), default=0.0)
    return (f"Two drawings of the parse tree of {len(sizes)} capsule layers of {_numbers(sizes, 'd')} capsules (the "
            f"last the classes), capsules as nodes in columns and couplings as edges. Left, means over the images: "
            f"the mean capsule norm per layer is {_numbers([n.mean() for n in summary.norm_mean])}; the largest mean "
            f"coupling per routing layer is {_numbers([c.max() for c in summary.coupling_mean], '.3f')} (uniform: "
            f"{_numbers([1 / c.shape[1] for c in summary.coupling_mean], '.3f')}). Right, standard deviations over "
            f"the images: the couplings vary by "
            f"{_numbers([c.mean() for c in summary.coupling_std], '.3f', every='routing layer')} on average, by "
            f"{spread_max:.3f} at most. {dead_words}")


def parse_tree_figure(summary: ParseTreeSummary, title: str | None = None) -> Figure:
    """The paper's Figure 3 for one network: the parse tree's means (left) and standard deviations (right)
    over a dataset, edges on one opacity scale (the largest mean coupling) so that the panels compare;
    crosses mark dead capsules. Attaches alt text written from the summary (mean norms, largest and most
    varying couplings per layer, dead capsules) and a caption ending in ``title``. Chapter 04."""
    if not isinstance(summary, ParseTreeSummary):
        raise ValueError(f"summary must be a ParseTreeSummary (parse_tree_summary), got {type(summary).__name__}")
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.6))
    scale = max((float(np.max(c)) for c in summary.coupling_mean), default=1.0)
    for ax, statistic in zip(axes, ("mean", "std")):
        nodes = plot_parse_tree(ax, summary, statistic, edge_scale=scale,
                                title=f"{statistic} over the images:\ncouplings (edges), norms (nodes)")
        fig.colorbar(nodes, ax=ax, fraction=0.04, pad=0.02, label=f"capsule norm ({statistic})")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    caption = ("The fuzzy parse tree: means and standard deviations over the images of the couplings (edges) and "
               "the capsule norms (nodes)" + (f", {title}." if title else "."))
    return attach_description(fig, _parse_tree_alt(summary), caption)


def format_layer_table(table: list) -> str:
    """The rows of :func:`~capsule_lab.measures.capsule_stats.layer_table` as a fixed-width text table, for a terminal;
    a notebook shows :func:`layer_statistics_table`. Chapter 04."""
    lines = [" layer | alive |  dyr  |  dys  |  cnm  |  cns  |  car  |  cas  |  cdr  |  cds"]
    for r in table:
        dyn = (f"{r['dyr']:.2f} | {r['dys']:5.2f}" if r["dyr"] is not None else "  –   |   –  ")
        lines.append(f" {r['layer']:5d} | {r['alive']:5d} | {dyn} | {r['cnm']:.2f}  | {r['cns']:5.2f} | "
                     f"{r['car']:.2f}  | {r['cas']:5.2f} | {r['cdr']:.2f}  | {r['cds']:4.1f}")
    return "\n".join(lines)


#: The statistics of a :func:`~capsule_lab.measures.capsule_stats.layer_table` row, in the paper's order (Tables 1
#: and 2).
LAYER_STATISTICS = ("alive", "dyr", "dys", "cnm", "cns", "car", "cas", "cdr", "cds")
_LAYER_FORMATS = {"dyr": ".2f", "dys": ".2f", "cnm": ".2f", "cns": ".2f", "car": ".2f", "cas": ".2f", "cdr": ".2f",
                  "cds": ".1f"}


def layer_statistics_table(table: list, caption: str = "Per-layer statistics of one network (the paper's Tables 1 "
                           "and 2)", statistics: Sequence[str] = LAYER_STATISTICS) -> Table:
    """The rows of :func:`~capsule_lab.measures.capsule_stats.layer_table` as a
    :class:`~capsule_lab.evidence.tables.Table`: one row per capsule layer (primary first), a column per statistic in
    ``statistics`` (default all of
    :data:`LAYER_STATISTICS`; a chapter shows a few at a time so that the table fits a phone), with the digits of
    :func:`format_layer_table`. dyr and dys of the class layer show as missing. Chapter 04."""
    if isinstance(table, (str, bytes)) or not isinstance(table, Sequence) or not table or \
            not all(isinstance(r, Mapping) and "layer" in r for r in table):
        raise ValueError("table must be a non-empty list of layer_table rows (dicts with 'layer' and the statistics)")
    statistics = tuple(statistics) if not isinstance(statistics, str) else (statistics,)
    unknown = [k for k in statistics if k not in LAYER_STATISTICS]
    if not statistics or unknown:
        raise ValueError(f"statistics must name some of {list(LAYER_STATISTICS)}, got {list(statistics)}")
    missing = sorted({k for r in table for k in statistics if k not in r})
    if missing:
        raise ValueError(f"the rows lack {missing}: use capsule_lab.measures.capsule_stats.layer_table")
    return Table(("layer",) + statistics, [[r["layer"]] + [r[k] for k in statistics] for r in table],
                 caption=caption, formats={k: _LAYER_FORMATS[k] for k in statistics if k in _LAYER_FORMATS})


def _pick(summaries: dict, depth: int, routing: str) -> ParseTreeSummary:
    if not isinstance(summaries, dict) or (depth, routing) not in summaries:
        known = sorted(summaries) if isinstance(summaries, dict) else []
        raise ValueError(f"no network for depth={depth!r}, routing={routing!r}; known: {known}")
    return summaries[(depth, routing)]


def _words(mapping, name: str) -> dict:
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping) or not all(isinstance(v, str) and v for v in mapping.values()):
        raise ValueError(f"{name} must be a dict {{routing: words}} of non-empty strings, got {mapping!r}")
    return dict(mapping)


def explorer_routings(summaries: dict, names: Mapping | None = None, labels: Mapping | None = None) -> tuple:
    """How the parse-tree explorer names the routings of ``summaries`` (``{(routing layers, routing):
    ParseTreeSummary}``), in the order they first appear there: ``(names, labels)``, two dicts over every routing —
    ``names[routing]``, how a sentence names it (from ``names``; default "<routing> routing"), and
    ``labels[routing]``, its control's label (from ``labels``; default the routing itself). The caller says what
    a routing is called (chapter 04: RBA); the explorer never asks. Chapter 04."""
    if not isinstance(summaries, dict) or not summaries or not all(
            isinstance(key, tuple) and len(key) == 2 for key in summaries):
        raise ValueError("summaries must be a non-empty dict {(routing layers, routing): ParseTreeSummary}")
    routings = list(dict.fromkeys(routing for _, routing in summaries))
    names, labels = _words(names, "names"), _words(labels, "labels")
    return ({r: names.get(r, f"{r} routing") for r in routings}, {r: labels.get(r, str(r)) for r in routings})


def parse_tree_explorer_figure(summaries: dict, depth: int, routing: str | None = None, names: Mapping | None = None,
                               labels: Mapping | None = None) -> Figure:
    """The parse-tree explorer's picture for one (depth, routing) key of ``summaries`` (a dict
    ``{(routing layers, routing): ParseTreeSummary}``; ``routing`` by default the first of them): Figure 3 for that
    network, with alt text (the network, its accuracy and its parse tree in numbers) and a caption saying it is the
    explorer in the state it opens in. ``names`` and ``labels`` (``{routing: words}``) say how sentences and the
    explorer's controls name the routings (:func:`explorer_routings`; chapter 04: ``names={"dynamic": "RBA",
    "uniform": "uniform routing"}``, ``labels={"dynamic": "RBA", "uniform": "uniform"}``). Chapter 04."""
    names, labels = explorer_routings(summaries, names, labels)
    routing = next(iter(names)) if routing is None else routing
    s = _pick(summaries, depth, routing)
    name = names[routing]
    dead = sum(int(d.sum()) for d in s.dead)
    fig = parse_tree_figure(s, title=f"{depth} routing layer{'s' * (depth != 1)}, {name}: "
                                     f"test accuracy {100 * s.accuracy:.1f}%, {dead} dead capsules")
    alt = (f"The network with {depth} routing layer{'s' * (depth != 1)} and {name}, test accuracy "
           f"{100 * s.accuracy:.1f} %. " + _parse_tree_alt(s))
    caption = (f"The parse-tree explorer as it opens, at {depth} routing layer{'s' * (depth != 1)} with {name}; its "
               f"controls choose the number of routing layers and the routing ({join_words(labels.values(), 'or')}).")
    return attach_description(fig, alt, caption)


# ------------------------------------------------------------------------------ why capsules die

def _check_curve(values, name: str, length: int | None = None) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.ndim != 1 or a.size == 0 or (length is not None and a.size != length) or not np.all(np.isfinite(a)) \
            or np.any(a < 0):
        raise ValueError(f"{name} must be a non-empty 1-D sequence of finite non-negative numbers"
                         + (f" of length {length}" if length is not None else "") + f", got shape {a.shape}")
    return a


_GRADIENT_PANELS = (("norm", "mean capsule length ‖u‖"), ("activation", "‖∂L/∂u‖ (Theorem 2, left)"),
                    ("weight", "‖∂L/∂W‖ (Theorem 2, right)"))


def _capsule_gradients_alt(curves: dict, log_steps: bool) -> str:
    labels = list(curves)
    n = len(curves[labels[0]]["norm"])
    end = {k: float(c["norm"][-1]) for k, c in curves.items()}
    named = (f"{len(labels)} capsule{'s' * (len(labels) != 1)}: " + "; ".join(labels) if len(labels) <= 3
             else f"{len(labels)} capsules")
    text = (f"Three panels over {n} training steps{' (logarithmic step axis)' if log_steps else ''}, each on a "
            f"logarithmic scale: the mean length ‖u‖, ‖∂L/∂u‖ and ‖∂L/∂W‖ of {named}.")
    short, long = min(labels, key=end.get), max(labels, key=end.get)
    peak = int(np.argmax(curves[short]["norm"]))
    if curves[short]["norm"][peak] > 2 * end[short]:
        text += (f" The length of {short} peaks at {curves[short]['norm'][peak]:.3g} at step {peak + 1} and ends at "
                 f"{end[short]:.3g}.")
    get = lambda label, key: float(curves[label][key][-1])  # noqa: E731
    if short == long:
        return text + (f" At the last step its length is {end[short]:.3g}, ‖∂L/∂u‖ {get(short, 'activation'):.2g} "
                       f"and ‖∂L/∂W‖ {get(short, 'weight'):.2g}.")
    w_short, w_long = get(short, "weight"), get(long, "weight")
    if w_long > w_short > 0:
        factor = w_long / w_short
        below = f"{factor:,.0f} times below" if factor >= 10 else f"{factor:.2g} times below"
    elif w_long > w_short:
        below = "zero, below"
    else:
        below = "not below"
    return text + (f" At the last step the shortest capsule, {short}, has length {end[short]:.3g} and ‖∂L/∂W‖ "
                   f"{w_short:.2g}, {below} the longest, {long}, with length {end[long]:.3g} and ‖∂L/∂W‖ {w_long:.2g}; "
                   f"their ‖∂L/∂u‖ are {get(short, 'activation'):.2g} and {get(long, 'activation'):.2g}.")


def capsule_gradients_figure(curves: Mapping[str, Mapping], log_steps: bool = False,
                             title: str | None = None) -> Figure:
    """Capsules at every training step, in three panels on a log scale: the mean length ‖u‖, the gradient
    ‖∂L/∂u‖ reaching the capsule and ‖∂L/∂W‖ of the matrices that read it (Theorem 2's two sides).

    ``curves``: ``{label: {"norm": (steps,), "activation": (steps,), "weight": (steps,)}}``, one to eight
    capsules, e.g. columns of :meth:`capsule_lab.measures.capsule_stats.GradientTracker.history` or a shipped run's
    ``capsule_history``. Each capsule gets its own colour, marker and line style. ``log_steps`` puts the steps on
    a log axis (the deciding steps are the first few). Attaches alt text (the shortest capsule at the end against
    the longest: its length, its ‖∂L/∂W‖ and ‖∂L/∂u‖) and a caption ending in ``title``. Chapter 04.
    """
    if not isinstance(curves, Mapping) or not 1 <= len(curves) <= len(PALETTE):
        raise ValueError(f"curves must be a dict of 1 to {len(PALETTE)} capsules {{label: {{'norm', 'activation', "
                         f"'weight'}}}}, got {type(curves).__name__}")
    checked, length = {}, None
    for label, curve in curves.items():
        if not isinstance(label, str) or not isinstance(curve, Mapping):
            raise ValueError(f"every curve must be label (str) → {{'norm', 'activation', 'weight'}}, got {label!r}")
        checked[label] = {key: _check_curve(curve.get(key, []), f"curve {label!r}: {key}", length)
                          for key, _ in _GRADIENT_PANELS}
        length = len(checked[label]["norm"])
        if any(len(v) != length for v in checked[label].values()):
            raise ValueError(f"curve {label!r}: norm, activation and weight must have one value per step each")
    steps = np.arange(1, length + 1)
    legend_inches = 0.18 * math.ceil(len(checked) / 2) + 0.1           # the legend's rows, below the panels
    fig, axes = plt.subplots(3, 1, figsize=(7.0, 7.0 + legend_inches), sharex=True)
    for k, (label, curve) in enumerate(checked.items()):
        for ax, (key, _) in zip(axes, _GRADIENT_PANELS):
            ax.plot(steps, curve[key], **series(k), markevery=0.08, lw=1.2, label=label)
    for ax, (_, name) in zip(axes, _GRADIENT_PANELS):
        ax.set_title(name, fontsize=10)
        ax.set_yscale("log")
    if log_steps:
        axes[-1].set_xscale("log")
    axes[-1].set_xlabel("training step")
    handles, names = axes[0].get_legend_handles_labels()         # below the panels, where it hides no curve
    fig.legend(handles, names, loc="lower center", ncol=2, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, legend_inches / (7.0 + legend_inches), 1, 1))
    caption = ("The length of each capsule and the two gradients of Theorem 2 at every training step"
               + (f", {title}." if title else "."))
    return attach_description(fig, _capsule_gradients_alt(checked, log_steps), caption)


_HATCHES = ("", "///", "...", "\\\\", "xx", "oo")


def dead_rate_search_figure(rates: Mapping[str, Sequence[float]], accuracy: Mapping[str, float],
                            layers: Sequence[int] = (2, 3, 4), reference: tuple | None = None,
                            title: str | None = None) -> Figure:
    """A search's dead rates: for every setting (a row, in the order given) one bar per hidden layer, told apart
    by colour and hatching, and the setting's test accuracy at the right.

    ``rates``: ``{setting: [cdr of each of layers]}`` (means over seeds, in [0, 1]); ``accuracy``: ``{setting:
    test accuracy in %}``; ``reference``: ``(value, label)`` of a dashed reference line, e.g. the paper's rate.
    Attaches alt text (the settings that kill every capsule, those that kill some, with their largest rate and
    accuracy, and the accuracy range of the rest) and a caption ending in ``title``. Chapter 04.
    """
    layers = list(layers)
    if not layers or not 1 <= len(layers) <= len(_HATCHES):
        raise ValueError(f"layers must name 1 to {len(_HATCHES)} layers, got {layers!r}")
    if not isinstance(rates, Mapping) or not rates:
        raise ValueError("rates must be a non-empty dict {setting: [dead rate per layer]}")
    if not isinstance(accuracy, Mapping) or set(accuracy) != set(rates):
        raise ValueError("accuracy must be a dict with the same settings as rates")
    r = {s: _check_curve(v, f"rates[{s!r}]", len(layers)) for s, v in rates.items()}
    if any(np.any(v > 1) for v in r.values()):
        raise ValueError("dead rates must lie in [0, 1]")
    acc = {s: float(accuracy[s]) for s in rates}
    if reference is not None and (not isinstance(reference, tuple) or len(reference) != 2):
        raise ValueError(f"reference must be (value, label), got {reference!r}")
    names = list(r)
    y = np.arange(len(names))
    height = 0.8 / len(layers)
    fig, ax = plt.subplots(figsize=(7.0, max(2.5, 0.3 * len(names) + 1.3)))
    for k, layer in enumerate(layers):
        ax.barh(y + (k - (len(layers) - 1) / 2) * height, [r[s][k] for s in names], height=height,
                color=PALETTE[k], hatch=_HATCHES[k], edgecolor="white", linewidth=0, label=f"layer {layer}")
    for i, s in enumerate(names):
        ax.text(1.02, i, f"{acc[s]:.0f}%", va="center", fontsize=8)
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.15)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_xlabel("dead rate cdr (mean over seeds); right: test accuracy")
    if reference is not None:
        ax.axvline(float(reference[0]), color=REFERENCE_COLOR, lw=1.0, ls="--", label=str(reference[1]))
    ax.legend(fontsize=8, loc="upper center")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()

    every = [s for s in names if np.all(r[s] >= 1.0)]
    some = sorted((s for s in names if r[s].max() > 0 and s not in every), key=lambda s: -r[s].max())
    none = [s for s in names if r[s].max() == 0]
    quoted = lambda s: f'"{s}"'  # noqa: E731
    text = (f"The dead rate cdr of layers {_numbers(layers, 'd')} (one bar each: plain, hatched, dotted) for "
            f"{len(names)} settings, with each setting's test accuracy at the right.")
    if every:
        text += (" Every capsule of these layers is dead with " + "; ".join(f"{quoted(s)} ({acc[s]:.1f} % accurate)"
                                                                             for s in every) + ".")
    if some:
        text += (f" Capsules die in {len(some)} {'more ' if every else ''}setting{'s' * (len(some) != 1)} (largest "
                 "rate, accuracy): " + "; ".join(f"{quoted(s)} {r[s].max():.2f}, {acc[s]:.0f} %" for s in some) + ".")
    if none:
        low, high = min(acc[s] for s in none), max(acc[s] for s in none)
        text += (f" None die in the other {len(none)}, whose accuracy ranges from {low:.0f} to {high:.0f} %."
                 if len(none) > 1 else f" None die in {quoted(none[0])} ({acc[none[0]]:.0f} %).")
    if reference is not None:
        text += f" A dashed line at {float(reference[0]):.2f} marks the reference, {reference[1]}."
    caption = ("The dead rate of each hidden layer and the test accuracy per setting"
               + (f" ({title})." if title else "."))
    return attach_description(fig, text, caption)
