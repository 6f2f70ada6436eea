"""Saliency maps over their images: where a model looks, map by map.

Taught in chapter 05 (``chapters/05_rem.ipynb``), after Renzulli, Tartaglione and Grangetto (the REM paper), §4.3.4
and Figure 5: :func:`saliency_figure` shows images with their saliency maps (eq. 16's coupling saliency,
:func:`capsule_lab.measures.saliency.coupling_saliency_maps`, and Grad-CAM,
:func:`capsule_lab.measures.saliency.grad_cam`) overlaid, each map scaled per image. It takes plain arrays, returns the
Figure and attaches alt text and a caption written from the maps
(:func:`capsule_lab.figures.descriptions.attach_description`).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .._checks import image_array, to_numpy
from .descriptions import attach_description, join_words
from .style import MAX_FIGURE_WIDTH

__all__ = ["OBJECT_LEVEL", "saliency_figure"]


def _normalised(m: np.ndarray) -> np.ndarray:
    low, high = float(m.min()), float(m.max())
    return (m - low) / (high - low) if high > low else np.zeros_like(m)


#: The grey level above which :func:`saliency_figure`'s description counts a pixel as the object's (as
#: :func:`capsule_lab.measures.saliency.saliency_on_object` does).
OBJECT_LEVEL = 0.5


def _saliency_alt(x: np.ndarray, arrays: dict, labels) -> str:
    """What :func:`saliency_figure` draws, in words: per map, the share of its (scaled) mass on the object's pixels
    (grey level above ``OBJECT_LEVEL``, 0.5) beside the share of the pixels the object covers, and on how many
    images its brightest pixel is on the object."""
    objects = x > OBJECT_LEVEL
    with_object = [b for b in range(len(x)) if objects[b].any()]
    said = []
    for name, a in arrays.items():
        scaled = np.stack([_normalised(m) for m in a])
        shares = [scaled[b][objects[b]].sum() / scaled[b].sum() for b in with_object if scaled[b].sum() > 0]
        peaks = sum(bool(objects[b].flat[int(np.argmax(scaled[b]))]) for b in with_object if scaled[b].max() > 0)
        said.append(f"{name}: {100 * np.mean(shares):.0f} % of its mass on the object, its brightest pixel there in "
                    f"{peaks} of {len(with_object)} images" if shares else f"{name}: constant on every image")
    rows = f"{len(x)} images in rows" + (f" (predicted {', '.join(str(int(p)) for p in labels)})"
                                          if labels is not None else "")
    covered = f"{100 * objects[with_object].mean():.0f} %" if with_object else "none"
    return (f"{rows}; columns: the image, then {join_words(arrays)} over it, each map scaled to [0, 1] per image "
            f"(viridis, bright = salient). The object's pixels (grey level above {OBJECT_LEVEL:g}) cover {covered} of "
            f"the images. " + "; ".join(said) + ".")


def saliency_figure(images, maps: dict, predictions=None, title: str | None = None) -> Figure:
    """Images with their saliency maps: one row per image; the image, then every map of ``maps = {name: (B, H,
    W)}`` (e.g. eq. 16's coupling saliency and Grad-CAM) over it, each map scaled to [0, 1] per image (a
    constant map shows as 0) in viridis. images ``(B, H, W)`` or ``(B, 1, H, W)``; ``predictions`` ``(B,)`` the
    predicted classes, written beside the rows. At most 7 maps. The figure carries alt text written from the maps
    (per map, the share of its mass on the object's pixels, grey level above ``OBJECT_LEVEL`` (0.5), and on how many
    images its brightest pixel is there) and ``title`` as its caption. Chapter 05."""
    x = image_array(images, "images")
    if not isinstance(maps, dict) or not 1 <= len(maps) <= 7:
        raise ValueError("maps must be a dict {name: (B, H, W)} of 1 to 7 saliency maps")
    arrays = {}
    for name, m in maps.items():
        a = to_numpy(m, f"maps[{name!r}]")
        if a.shape != x.shape:
            raise ValueError(f"maps[{name!r}] must have shape (B, H, W) = {x.shape}, got {a.shape}")
        arrays[name] = a
    labels = None
    if predictions is not None:
        labels = to_numpy(predictions, "predictions")
        if labels.shape != (x.shape[0],):
            raise ValueError(f"predictions must have shape (B,) = ({x.shape[0]},), got {labels.shape}")
    columns = 1 + len(arrays)
    side = min(1.5, MAX_FIGURE_WIDTH / columns)
    fig, axes = plt.subplots(x.shape[0], columns, squeeze=False, constrained_layout=True,
                             figsize=(side * columns, side * x.shape[0] + 0.4))
    overlay = None
    for b, row in enumerate(axes):
        row[0].imshow(x[b], cmap="gray")
        for ax, (name, a) in zip(row[1:], arrays.items()):
            ax.imshow(x[b], cmap="gray")
            overlay = ax.imshow(_normalised(a[b]), cmap="viridis", alpha=0.5, vmin=0, vmax=1)
        for ax in row:
            ax.set_xticks([])
            ax.set_yticks([])
        if labels is not None:
            row[0].set_ylabel(f"predicted {int(labels[b])}", fontsize=8)
    for ax, name in zip(axes[0], ["image", *arrays]):
        ax.set_title(name, fontsize=9)
    fig.colorbar(overlay, ax=axes[:, -1], fraction=0.08, pad=0.04).set_label("saliency (scaled per image)",
                                                                               fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return attach_description(fig, _saliency_alt(x, arrays, labels),
                              title or f"{join_words(arrays)} over {x.shape[0]} images")

