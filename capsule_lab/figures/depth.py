"""A deep CapsNet, layer by layer and depth by depth: measures against the number of routing layers, and how well each
layer's capsules keep their lengths under an affine transformation.

Taught in chapter 04 (``chapters/04_dead_capsules.ipynb``), after Mitterreiter et al. (2023):
:func:`depth_figure` draws measures (accuracy, dead rate, ...) against the number of routing layers, one series per
routing, a point per seed; :func:`activation_correlation_figure` is the paper's Figure 4, the activation correlation
of every layer against the strength of the transformation. Both take plain numbers, return the Figure and attach alt
text and a caption written from the numbers they draw (:func:`capsule_lab.figures.descriptions.attach_description`);
series differ in marker and line style as well as colour (:mod:`capsule_lab.figures.style`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .descriptions import attach_description, join_words
from .style import PALETTE, REFERENCE_COLOR, series

__all__ = ["depth_figure", "activation_correlation_figure"]


def _per_seed(values, name: str, depths: int) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) != depths:
        raise ValueError(f"{name} must hold one value (or one list of values, per seed) per depth, {depths} in all")
    out = []
    for v in values:
        a = np.atleast_1d(np.asarray(v, dtype=float))
        if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)):
            raise ValueError(f"{name}: every depth needs one or more finite numbers, got {v!r}")
        out.append(a)
    return out


def depth_figure(depths: Sequence[int], panels: Sequence[Mapping], title: str | None = None) -> Figure:
    """Measures against the number of routing layers, one panel each (one to three), one series per routing.

    ``panels``: a list of dicts ``{"label": y-axis label, "values": {routing name: per depth, a number or a list of
    numbers (one per seed)}, "fmt": format of the numbers in the alt text (default ".2f"), "ylim": (low, high)
    (optional), "reference": (depth, value, label) (optional, e.g. the paper's number)}``. A routing keeps its
    colour, marker and line style in every panel; with several seeds every seed is a point and a line joins the
    medians, side by side so that none hides another. Attaches alt text (per panel and routing, the value or the
    median per depth, the seeds' range, the reference) and a caption ending in ``title``. Chapter 04.
    """
    depths = [int(d) for d in depths]
    if not depths:
        raise ValueError("depths must name at least one number of routing layers")
    if isinstance(panels, Mapping) or not isinstance(panels, Sequence) or not 1 <= len(panels) <= 3:
        raise ValueError("panels must be a list of 1 to 3 dicts with 'label' and 'values'")
    checked, names = [], []
    for panel in panels:
        if not isinstance(panel, Mapping) or not isinstance(panel.get("label"), str) or \
                not isinstance(panel.get("values"), Mapping) or not panel["values"]:
            raise ValueError("every panel must be a dict with a 'label' (str) and 'values' ({routing: per depth})")
        unknown = set(panel) - {"label", "values", "fmt", "ylim", "reference"}
        if unknown:
            raise ValueError(f"unknown panel keys {sorted(unknown)}")
        values = {str(n): _per_seed(v, f"{panel['label']}, {n}", len(depths)) for n, v in panel["values"].items()}
        reference = panel.get("reference")
        if reference is not None and (not isinstance(reference, tuple) or len(reference) != 3):
            raise ValueError(f"reference must be (depth, value, label), got {reference!r}")
        checked.append({"label": panel["label"], "values": values, "fmt": panel.get("fmt", ".2f"),
                        "ylim": panel.get("ylim"), "reference": reference})
        names += [n for n in values if n not in names]
    if len(names) > len(PALETTE):
        raise ValueError(f"at most {len(PALETTE)} routings, got {len(names)}")
    seeds = max(len(a) for p in checked for v in p["values"].values() for a in v)
    several = seeds > 1
    if len(checked) <= 2:
        fig, axes = plt.subplots(1, len(checked), figsize=(7.2, 3.2), squeeze=False)
    else:
        fig, axes = plt.subplots(len(checked), 1, figsize=(7.0, 8.0), sharex=True, squeeze=False)
    axes = list(axes.flat)
    x0 = np.asarray(depths, dtype=float)
    for ax, panel in zip(axes, checked):
        for name, per_depth in panel["values"].items():
            k = names.index(name)
            style = series(k)
            side = (k - (len(names) - 1) / 2) * (0.24 if several else 0.08)
            if several:
                for d, a in zip(x0, per_depth):
                    xs = d + side + 0.04 * (np.arange(len(a)) - (len(a) - 1) / 2)
                    ax.plot(xs, a, marker=style["marker"], ls="none", color=style["color"], alpha=0.7,
                            label=f"{name}, one point per seed" if d == x0[0] else None)
                ax.plot(x0 + side, [np.median(a) for a in per_depth], color=style["color"], ls=style["linestyle"],
                        marker="", label=f"{name}, median")
            else:
                ax.plot(x0 + side, [a[0] for a in per_depth], **style, label=name)
        if panel["reference"] is not None:
            d, value, label = panel["reference"]
            ax.plot([d], [value], marker="*", ls="none", color=REFERENCE_COLOR, markersize=12, label=label)
        ax.set_ylabel(panel["label"])
        if panel["ylim"] is not None:
            ax.set_ylim(*panel["ylim"])
        ax.set_xticks(depths)
        ax.legend(fontsize=7 if several else 8)
    for ax in (axes if len(checked) <= 2 else axes[-1:]):
        ax.set_xlabel("routing layers")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()

    span = f"{depths[0]} to {depths[-1]}" if len(depths) > 1 else f"{depths[0]}"
    panels_word = ("One panel", "Two panels", "Three panels")[len(checked) - 1]
    parts = [f"{panels_word} against the number of routing layers, {span}, "
             + (f"{seeds} seeds per point (a point per seed, lines through the medians)." if several
                else "one network per point.")]
    for panel in checked:
        fmt, words = panel["fmt"], []
        for name, per_depth in panel["values"].items():
            middle = [format(float(np.median(a)), fmt) for a in per_depth]
            said = f"{middle[0]} at every depth" if len(set(middle)) == 1 and len(depths) > 1 else ", ".join(middle)
            every = np.concatenate(per_depth)
            low, high = format(float(every.min()), fmt), format(float(every.max()), fmt)
            if several and low != high:
                said += f" (medians; single seeds from {low} to {high})"
            elif several:
                said += " in every seed"
            words.append(f"{name} {said}")
        if panel["reference"] is not None:
            d, value, label = panel["reference"]
            words.append(f"{label} {format(float(value), fmt)} at {d} layers")
        parts.append(f"{panel['label'][0].upper()}{panel['label'][1:]}: " + "; ".join(words) + ".")
    caption = ("Measures against the number of routing layers, per routing" + (f" ({title})." if title else "."))
    return attach_description(fig, " ".join(parts), caption)


def activation_correlation_figure(strengths: Sequence[float], correlations: Sequence[Sequence[float]],
                                  labels: Sequence[str] | None = None, title: str | None = None) -> Figure:
    """The paper's Figure 4: per layer, the activation correlation (capsule lengths on the original against the
    transformed images, :func:`capsule_lab.measures.capsule_stats.activation_correlation`) against the strength of the
    affine transformation. ``correlations``: one list per layer, one value per strength; ``labels``: one name per layer
    (default "layer 1", "layer 2", ...). Each layer has its own colour, marker and line style. Attaches alt text
    (whether each layer falls as the strength grows, the values at the weakest and strongest transformation, the
    highest and lowest layer there) and a caption ending in ``title``. Chapter 04."""
    s = np.asarray(strengths, dtype=float)
    if s.ndim != 1 or s.size < 2 or not np.all(np.isfinite(s)) or not np.all(np.diff(s) > 0):
        raise ValueError(f"strengths must be two or more increasing numbers, got {strengths!r}")
    if isinstance(correlations, Mapping):
        correlations = list(correlations.values())
    values = [np.asarray(v, dtype=float) for v in correlations]
    if not values or len(values) > len(PALETTE) or any(v.shape != s.shape or not np.all(np.isfinite(v))
                                                       for v in values):
        raise ValueError(f"correlations must be 1 to {len(PALETTE)} lists of {s.size} finite values, one per strength")
    labels = [f"layer {k + 1}" for k in range(len(values))] if labels is None else [str(x) for x in labels]
    if len(labels) != len(values):
        raise ValueError(f"labels must name each of the {len(values)} layers, got {len(labels)}")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for k, (v, label) in enumerate(zip(values, labels)):
        ax.plot(s, v, **series(k), label=label)
    ax.set_xlabel("strength of the affine transformation")
    ax.set_ylabel("activation correlation")
    ax.set_title(title or "capsule length correlation, original vs transformed", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()

    falling = [bool(np.all(np.diff(v) < 0)) for v in values]
    if all(falling):
        trend = "Every layer's correlation falls at every step of the strength"
    elif any(falling):
        fall = join_words([label for label, f in zip(labels, falling) if f])
        trend = f"The correlation falls at every step of the strength for {fall}, not for the others"
    else:
        trend = "No layer's correlation falls at every step of the strength"
    start = [format(float(v[0]), ".3f") for v in values]
    start_words = (f"{start[0]} for every layer" if len(set(start)) == 1
                   else ", ".join(f"{l} {x}" for l, x in zip(labels, start)))
    end = [float(v[-1]) for v in values]
    hi, lo = int(np.argmax(end)), int(np.argmin(end))
    alt = (f"The activation correlation of capsule lengths on the original and on the transformed digits, against "
           f"the strength of the affine transformation from {s[0]:g} to {s[-1]:g}, for {len(values)} layers. "
           f"{trend}: from {start_words} at strength {s[0]:g} to "
           + ", ".join(f"{l} {e:.3f}" for l, e in zip(labels, end))
           + f" at strength {s[-1]:g}, where {labels[hi]} is highest and {labels[lo]} lowest.")
    caption = ("Activation correlation against the strength of the affine transformation, per layer"
               + (f" ({title})." if title else "."))
    return attach_description(fig, alt, caption)


