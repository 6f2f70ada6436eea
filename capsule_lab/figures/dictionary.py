"""The parse-tree dictionary in pictures: its entropy against the number of quantisation levels K, its keys per
class, and where the quantisation's bin edges cut the couplings.

Taught in chapter 05 (``chapters/05_rem.ipynb``), after Renzulli, Tartaglione and Grangetto (the REM paper): a
model's couplings, quantised to K levels (:func:`capsule_lab.measures.parse_trees.quantize`), become a dictionary of
parse trees (keys) per class (:func:`capsule_lab.measures.parse_trees.parse_tree_dictionary`), whose entropy REM lowers.

- :func:`entropy_vs_levels_figure` — its Figure 7: entropy against K, one line per model, with the accuracy
  against K beside it;
- :func:`keys_per_class_figure` — its Figure 9: the number of distinct parse trees (keys) of every class;
- :func:`coupling_histogram_figure` — the couplings to the predicted class, in histograms, with the bin edges of
  the quantisation drawn over them: where the edges cut the band the couplings lie in.

The functions take plain numbers: lists of entropies and accuracies per K, dicts of keys per class, arrays of
couplings. Accuracies are shares in [0, 1] and drawn in %; entropies are in bits. Pure matplotlib: every function
returns the Figure (or draws on a given ``Axes``). Every ``*_figure`` function attaches alt text and a caption written
from the data it draws (:func:`capsule_lab.figures.descriptions.attach_description`); series differ by marker, line
style or hatch as well as by colour (:mod:`capsule_lab.figures.style`).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .._checks import check_positive_int, to_numpy
from .descriptions import attach_description, join_words
from .style import MAX_FIGURE_WIDTH, PALETTE, REFERENCE_COLOR, series

__all__ = ["plot_entropy_vs_levels", "entropy_vs_levels_figure", "plot_keys_per_class", "keys_per_class_figure",
           "coupling_histogram_figure"]

#: Hatches of the bars of successive models in :func:`plot_keys_per_class` (the first model's bars are plain).
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo")


def _check_levels(levels) -> int:
    return check_positive_int(levels, "levels", minimum=2)


def _series(values, name: str, n: int) -> np.ndarray:
    a = to_numpy(values, name)
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape (K,) = ({n},), one value per number of levels, got {a.shape}")
    return a


# ---------------------------------------------------------------- entropy against K (Figure 7)

def _check_levels_list(levels) -> list:
    if (not isinstance(levels, (list, tuple)) or not levels
            or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2 for k in levels)):
        raise ValueError(f"levels must be a non-empty list of integers >= 2 (the numbers K), got {levels!r}")
    return [int(k) for k in levels]


def plot_entropy_vs_levels(ax, levels: list, entropies: dict, ceiling: float | None = None) -> list:
    """Draw the entropy (bits) against the number of quantisation levels K on ``ax`` (log₂ scale), one line per
    model of ``entropies = {name: [H at each K]}`` (model k in the course's series k: its own colour, marker and
    line style); ``ceiling`` (e.g. log₂ of the images per class: the most a class's entropy can be, every image
    its own key) as a grey dotted line. Returns the lines. Chapter 05."""
    levels = _check_levels_list(levels)
    if not isinstance(entropies, dict) or not entropies:
        raise ValueError("entropies must be a non-empty dict {name: one entropy per number of levels}")
    lines = []
    for k, (name, values) in enumerate(entropies.items()):
        (line,) = ax.plot(levels, _series(values, f"entropies[{name!r}]", len(levels)), ms=4, label=name,
                          **series(k))
        lines.append(line)
    if ceiling is not None:
        _check_ceiling(ceiling)
        ax.axhline(ceiling, color=REFERENCE_COLOR, ls=":", lw=1.2,
                   label=f"ceiling: log₂(images per class) = {ceiling:.2f}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(k) for k in levels])
    ax.minorticks_off()
    ax.set_xlabel("quantisation levels K")
    ax.set_ylabel("entropy (bits)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return lines


def _check_ceiling(ceiling) -> float:
    if isinstance(ceiling, bool) or not isinstance(ceiling, (int, float, np.floating)) or not ceiling >= 0:
        raise ValueError(f"ceiling must be a number >= 0 (bits), got {ceiling!r}")
    return float(ceiling)


def _levels_entropy_words(name: str, levels: list, v: np.ndarray) -> str:
    """One model's entropy against K in words: its lowest and highest value, and whether it is monotonic."""
    low, high = int(np.argmin(v)), int(np.argmax(v))
    steps = np.diff(v)
    if len(v) < 2 or np.all(steps >= -1e-9):
        shape = "never falling as K grows"
    elif np.all(steps <= 1e-9):
        shape = "never rising as K grows"
    else:
        i = int(np.argmin(steps))
        shape = f"not monotonic (its largest fall from K = {levels[i]} to {levels[i + 1]})"
    return (f"{name}'s is lowest at K = {levels[low]} ({v[low]:.2f} bits), highest at K = {levels[high]} "
            f"({v[high]:.2f}), {shape}")


def _levels_alt(levels: list, entropies: dict, ceiling: float | None, accuracies: dict | None) -> str:
    """What :func:`entropy_vs_levels_figure` draws, in words: each model's entropy against K (lowest, highest,
    monotonic or not), how often the second model is at or below the first, the K near the ceiling, and each
    model's accuracy against K (where it comes within a point of its best)."""
    values = {name: np.asarray(v, dtype=float) for name, v in entropies.items()}
    alt = (f"{'Left: entropy' if accuracies is not None else 'Entropy'} (bits) against K, "
           f"{len(levels)} values from {levels[0]} to {levels[-1]} on a log scale, for {join_words(values)}"
           + ("; right: test accuracy (%)" if accuracies is not None else "") + ". Entropy: "
           + "; ".join(_levels_entropy_words(n, levels, v) for n, v in values.items()) + ".")
    if len(values) >= 2:
        (a, va), (b, vb) = list(values.items())[:2]
        alt += f" {b} is at or below {a} at {int((vb <= va + 1e-9).sum())} of {len(levels)} K."
    if ceiling is not None:
        near = []
        for n, v in values.items():
            ks = [str(k) for k, x in zip(levels, v) if x >= ceiling - 0.25]
            if ks:                                           # a few K by name, many by their number
                near.append(f"{n} at K = {', '.join(ks)}" if len(ks) <= 4 else f"{n} at {len(ks)} of {len(levels)} K")
        alt += (f" Within a quarter bit of the {ceiling:.2f}-bit ceiling (dotted): "
                + ("; ".join(near) if near else "no model at any K") + ".")
    if accuracies is not None:
        said = []
        for name, a in accuracies.items():
            a = 100 * np.asarray(a, dtype=float)
            best = float(a.max())
            start = next(i for i in range(len(a)) if (a[i:] >= best - 1).all())
            said.append(f"{name}'s from K = {levels[start]} on ({best:.1f} % at best, {a[0]:.1f} % at K = {levels[0]})")
        alt += " Accuracy within a point of its best: " + "; ".join(said) + "."
    return alt


def entropy_vs_levels_figure(levels: list, entropies: dict, ceiling: float | None = None,
                             accuracies: dict | None = None) -> Figure:
    """The REM paper's Figure 7: the entropy (bits) against the number of quantisation levels K, one line per
    model (:func:`plot_entropy_vs_levels`); with ``accuracies = {name: [accuracy at each K]}`` (shares in
    [0, 1]) a second panel shows the test accuracy (%) against K, each model in the same style as on the left.
    The figure carries alt text written from the values (each model's lowest and highest entropy and where, whether
    the curve is monotonic, the K near the ceiling, where the accuracy comes within a point of its best) and a
    caption. Chapter 05."""
    panels = 1 if accuracies is None else 2
    fig, axes = plt.subplots(1, panels, figsize=(MAX_FIGURE_WIDTH if panels == 2 else 5.0, 3.5),
                             constrained_layout=True, squeeze=False)
    plot_entropy_vs_levels(axes[0, 0], levels, entropies, ceiling)
    axes[0, 0].set_title("entropy of the parse trees", fontsize=10)
    if accuracies is not None:
        if not isinstance(accuracies, dict) or not accuracies:
            raise ValueError("accuracies must be a non-empty dict {name: one accuracy per number of levels}")
        ax = axes[0, 1]
        levels = _check_levels_list(levels)
        order = {name: k for k, name in enumerate(entropies)}        # a model keeps its style in both panels
        for k, (name, values) in enumerate(accuracies.items()):
            a = _series(values, f"accuracies[{name!r}]", len(levels))
            if a.min() < 0 or a.max() > 1:
                raise ValueError(f"accuracies[{name!r}] must be shares in [0, 1]")
            ax.plot(levels, 100 * a, ms=4, label=name, **series(order.get(name, len(entropies) + k)))
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(k) for k in levels])
        ax.minorticks_off()
        ax.set_xlabel("quantisation levels K")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title("accuracy", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    levels = _check_levels_list(levels)
    ceiling = None if ceiling is None else _check_ceiling(ceiling)
    caption = ("Entropy and test accuracy against the number of quantisation levels K" if accuracies is not None
               else "Entropy of the parse trees against the number of quantisation levels K")
    return attach_description(fig, _levels_alt(levels, entropies, ceiling, accuracies), caption)


# ---------------------------------------------------------------- keys per class (Figure 9)

def _class_names(class_names, classes: list) -> list[str]:
    if class_names is None:
        return [str(c) for c in classes]
    if isinstance(class_names, dict):
        return [str(class_names.get(c, c)) for c in classes]
    if not isinstance(class_names, (list, tuple)) or len(class_names) <= max(classes):
        raise ValueError(f"class_names must be a list with a name for every class up to {max(classes)}, "
                         f"or a dict {{class: name}}, got {class_names!r}")
    return [str(class_names[c]) for c in classes]


def plot_keys_per_class(ax, keys: dict, class_names=None) -> list:
    """Draw grouped bars on ``ax``: per class, the number of distinct parse trees (keys) of every model of
    ``keys = {name: {class: number of keys}}`` (:func:`capsule_lab.measures.parse_trees.keys_per_class` of each model's
    dictionary, e.g. ``{"Q": {0: 12, 1: 30}, "REM": {0: 3}}``); a class a model never predicted has 0 keys.
    ``class_names``: a list indexed by class, or a dict. Model k's bars have the palette's colour k and the hatch
    ``HATCHES[k]``, so they differ in grey too. Returns the bar containers, one per model. Chapter 05."""
    if not isinstance(keys, dict) or not keys or not all(isinstance(k, dict) for k in keys.values()):
        raise ValueError("keys must be a non-empty dict {name: {class: number of keys}}, as "
                         "capsule_lab.measures.parse_trees.keys_per_class gives")
    classes = sorted({c for per_class in keys.values() for c in per_class})
    if not classes:
        raise ValueError("keys must hold at least one class")
    for name, per_class in keys.items():
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in per_class.values()):
            raise ValueError(f"keys[{name!r}] must map classes to numbers of keys (integers >= 0)")
    names = _class_names(class_names, classes)
    x = np.arange(len(classes))
    width = 0.8 / len(keys)
    bars = []
    for k, (name, per_class) in enumerate(keys.items()):
        heights = [per_class.get(c, 0) for c in classes]
        bars.append(ax.bar(x + (k - (len(keys) - 1) / 2) * width, heights, width, label=name,
                           color=PALETTE[k % len(PALETTE)], hatch=HATCHES[k % len(HATCHES)], edgecolor="white",
                           linewidth=0.5))
    ax.set_xticks(x, names, fontsize=8, rotation=30 if max(len(n) for n in names) > 3 else 0)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("keys (distinct parse trees)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return bars


def _keys_alt(keys: dict, class_names) -> str:
    """What :func:`keys_per_class_figure` draws, in words: each model's mean, most and fewest keys per class, and
    in how many classes the second model has fewer keys than the first."""
    classes = sorted({c for per_class in keys.values() for c in per_class})
    names = dict(zip(classes, _class_names(class_names, classes)))
    said = []
    for name, per_class in keys.items():
        counts = {c: per_class.get(c, 0) for c in classes}
        most, fewest = max(counts, key=counts.get), min(counts, key=counts.get)
        said.append(f"{name} has {sum(counts.values()) / len(classes):.1f} keys per class on average, most for "
                    f"{names[most]} ({counts[most]}), fewest for {names[fewest]} ({counts[fewest]})")
    alt = (f"Grouped bars: the number of distinct parse trees (keys) of each of {len(classes)} predicted classes, "
           f"one bar per model ({join_words(keys)}; " + ", ".join(
               f"{name} {'plain' if not HATCHES[k % len(HATCHES)] else 'hatched'}"
               for k, name in enumerate(keys)) + "). " + "; ".join(said) + ".")
    if len(keys) >= 2:
        (a, ka), (b, kb) = list(keys.items())[:2]
        fewer = sum(kb.get(c, 0) < ka.get(c, 0) for c in classes)
        alt += f" {b} has fewer keys than {a} in {fewer} of {len(classes)} classes."
    return alt


def keys_per_class_figure(keys: dict, class_names=None, title: str | None = None) -> Figure:
    """The REM paper's Figure 9: the number of keys of every class, grouped bars per model
    (:func:`plot_keys_per_class`). The figure carries alt text written from the counts (each model's mean, most
    and fewest keys, in how many classes the second model has fewer) and ``title`` as its caption. Chapter 05."""
    fig, ax = plt.subplots(figsize=(MAX_FIGURE_WIDTH, 3.4), constrained_layout=True)
    plot_keys_per_class(ax, keys, class_names)
    ax.set_title(title or "number of parse trees per class (test set)", fontsize=10)
    return attach_description(fig, _keys_alt(keys, class_names),
                              title or "Number of parse trees per class (test set)")


# ---------------------------------------------------------------- the couplings against the bin edges

_STYLE_WORDS = {"-": "solid", "--": "dashed", "-.": "dash-dotted", ":": "dotted"}


def _bin_edges(levels: int, upper: float) -> list[float]:
    """The edges between the levels of :func:`capsule_lab.measures.parse_trees.quantize` at ``levels`` levels, below
    ``upper``."""
    return [e for e in ((m + 0.5) / (levels - 1) for m in range(levels - 1)) if e < upper]


def _counted_quantiles(counts: np.ndarray, shares) -> list[float]:
    """Quantiles of values counted in equal bins of [0, 1], to a bin's width: for a share below one half the lower
    edge of the bin the share falls in, above it the upper edge (so the band they span holds at least that mass)."""
    cumulative = np.cumsum(counts) / counts.sum()
    width = 1 / counts.size
    return [float(np.searchsorted(cumulative, q) + (q > 0.5)) * width for q in shares]


def coupling_histogram_figure(couplings: dict, levels=(9, 11), upper: float = 0.3, bins: int = 60,
                              title: str | None = None, counted: bool = False) -> Figure:
    """Histograms of couplings with the quantisation's bin edges over them: where do the edges of K levels fall
    in the band the couplings lie in? ``couplings = {(panel, model): 1-D couplings}`` (e.g. every test image's
    couplings to its predicted class, ``{("mnist", "Q"): ..., ("mnist", "REM"): ...}``): one panel per panel
    name (at most 3, in order), one step histogram per model from 0 to ``upper`` in ``bins`` bins, model k in the
    course's series k (colour and line style); the edges ``(m + ½) / (K − 1)`` of each K of ``levels`` (at most
    3) as grey lines, dotted, dash-dotted, dashed. The figure carries alt text written from the couplings (the
    band from the 1st to the 99th percentile of each model's, which edges fall inside the widest band) and
    ``title`` (drawn above the panels) as its caption. With ``counted=True`` each value is not couplings but their
    counts in equal bins of [0, 1] (``model_extras``'s ``coupling_counts``, summed over seeds): the histogram keeps
    those bins (``bins`` is unused) and draws each bin's share of the pairs (test sets of different sizes side by
    side), and the percentiles are read to a bin's width. Chapter 05."""
    if not isinstance(couplings, dict) or not couplings or not all(
            isinstance(key, tuple) and len(key) == 2 for key in couplings):
        raise ValueError("couplings must be a non-empty dict {(panel, model): 1-D couplings}, "
                         "e.g. {('mnist', 'Q'): ..., ('mnist', 'REM'): ...}")
    if isinstance(levels, (str, bytes)) or not isinstance(levels, (list, tuple)) or not 1 <= len(levels) <= 3:
        raise ValueError(f"levels must be a list of 1 to 3 numbers of levels K, got {levels!r}")
    levels = [_check_levels(k) for k in levels]
    if isinstance(upper, bool) or not isinstance(upper, (int, float)) or not 0 < upper <= 1:
        raise ValueError(f"upper must be a number in (0, 1], the right end of the histograms, got {upper!r}")
    check_positive_int(bins, "bins")
    values = {}
    for key, c in couplings.items():
        a = to_numpy(c, f"couplings[{key!r}]")
        if counted and (a.ndim != 1 or a.size == 0 or a.min() < 0 or a.sum() == 0):
            raise ValueError(f"couplings[{key!r}] must be non-negative counts in equal bins of [0, 1], not all zero, "
                             f"got shape {a.shape}")
        if not counted and (a.ndim != 1 or a.size == 0 or a.min() < 0 or a.max() > 1):
            raise ValueError(f"couplings[{key!r}] must be a non-empty 1-D array of couplings in [0, 1], "
                             f"got shape {a.shape}")
        values[key] = a
    panels = list(dict.fromkeys(panel for panel, _ in values))
    models = list(dict.fromkeys(model for _, model in values))
    if len(panels) > 3:
        raise ValueError(f"couplings must name at most 3 panels, got {panels}")
    fig, axes = plt.subplots(1, len(panels), figsize=(MAX_FIGURE_WIDTH, 2.8), sharey=True, constrained_layout=True,
                             squeeze=False)
    edge_styles = (":", "-.", "--")
    for ax, panel in zip(axes[0], panels):
        for k, model in enumerate(models):
            if (panel, model) in values:
                style = series(k)
                a = values[panel, model]
                if counted:                              # the counts' own bins, up to `upper`
                    edges = np.linspace(0, 1, a.size + 1)
                    shown = int(np.searchsorted(edges, upper, side="right")) - 1
                    points, drawn = (edges[:shown] + edges[1:shown + 1]) / 2, edges[:shown + 1]
                    weights = a[:shown] / a.sum()
                else:
                    points, weights, drawn = a, None, np.linspace(0, upper, bins + 1)
                ax.hist(points, bins=drawn, weights=weights, histtype="step", label=model,
                        color=style["color"], linestyle=style["linestyle"], linewidth=1.4)
        for K, ls in zip(levels, edge_styles):
            for m, edge in enumerate(_bin_edges(K, upper)):
                ax.axvline(edge, color=REFERENCE_COLOR, linestyle=ls, linewidth=0.9,
                           label=f"bin edges, K = {K}" if m == 0 else None)
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("coupling $c_{ij}$, $j$ = predicted class")
    axes[0, 0].set_ylabel("share of capsule–image pairs" if counted else "capsule–image pairs")
    axes[0, 0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    bands = {key: _counted_quantiles(a, (0.01, 0.99)) if counted else np.quantile(a, [0.01, 0.99])
             for key, a in values.items()}
    low, high = min(b[0] for b in bands.values()), max(b[1] for b in bands.values())
    inside = {K: [e for e in _bin_edges(K, upper) if low < e < high] for K in levels}
    styles = ", ".join(f"{model} {_STYLE_WORDS.get(series(k)['linestyle'], 'patterned')}"
                       for k, model in enumerate(models))
    edges = " and ".join(f"K = {K} ({_STYLE_WORDS[ls]})" for K, ls in zip(levels, edge_styles))
    cut = "; ".join((f"{len(e)} edge{'s' if len(e) > 1 else ''} of K = {K} ({', '.join(f'{x:.4g}' for x in e)})"
                     if e else f"no edge of K = {K}") for K, e in inside.items())
    alt = (f"Histograms of couplings from 0 to {upper:g}, {len(panels)} panel{'s' if len(panels) > 1 else ''} "
           f"({join_words(panels)}), {styles}; grey lines mark the bin edges of {edges}. 98 % of the couplings lie in "
           + "; ".join(f"[{b[0]:.3f}, {b[1]:.3f}] for {panel} {model}" for (panel, model), b in bands.items())
           + f". Between {low:.3f} and {high:.3f} lie {cut}.")
    return attach_description(fig, alt, title or "Couplings to the predicted class, with the bin edges of "
                              + " and ".join(f"K = {K}" for K in levels))
