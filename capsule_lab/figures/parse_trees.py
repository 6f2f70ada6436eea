"""A class's parse tree, drawn: the class capsule on top, an edge to every primary capsule coupled to it above a
threshold, and the couplings taken back to the image.

Taught in chapter 05 (``chapters/05_rem.ipynb``), after Renzulli, Tartaglione and Grangetto (the REM paper), §3.2:

- :func:`class_couplings` — one class's tree as numbers: the mean quantised coupling of every primary capsule;
- :func:`parse_tree_graph` — the tree as a graph, the primary capsules laid out on their grid;
- :func:`plot_backtracked_image` — the tree taken back to the class's mean image, a dot at every receptive field;
- :func:`parse_tree_graph_figure` — both, one row per model (Q and REM).

The functions take plain data: a model's **parse trees**, the dict ``{"levels": K, "trees": (J, I), "predictions":
(N,)}`` — the parse tree of every class (:func:`capsule_lab.measures.parse_trees.class_parse_tree`: the mean over the
images predicted as the class of the quantised coupling ``c̃_(i,j) / (K − 1)`` of every primary capsule i, zeros for a
class never predicted) and every image's predicted class; :func:`capsule_lab.studies.rem_pictures.class_trees` makes it
from a measured model. Pure matplotlib: every function returns the Figure (or draws on a given ``Axes``);
:func:`parse_tree_graph_figure` attaches alt text and a caption written from the couplings it draws
(:func:`capsule_lab.figures.descriptions.attach_description`).
"""

from __future__ import annotations

import math
from typing import Mapping

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from .._checks import check_class_index, check_positive_int, image_array, to_numpy
from ..models import CapsNetConfig
from .descriptions import attach_description, join_words
from .geometry import receptive_field_centres
from .style import MAX_FIGURE_WIDTH, PALETTE

__all__ = ["check_parse_trees", "class_couplings", "parse_tree_graph", "plot_backtracked_image", "parse_tree_words",
           "parse_tree_graph_figure"]


# ---------------------------------------------------------------- argument checks

def check_parse_trees(trees, name: str = "trees") -> dict:
    """A model's parse trees (see the module) as numpy arrays, checked: ``{"levels": K >= 2, "trees": (J, I) in
    [0, 1], "predictions": (N,) classes in [0, J)}``. Chapter 05."""
    if not isinstance(trees, Mapping) or not {"levels", "trees", "predictions"} <= set(trees):
        raise ValueError(f"{name} must be a dict {{'levels': K, 'trees': (J, I), 'predictions': (N,)}}, a model's "
                         f"parse trees (capsule_lab.studies.rem_pictures.class_trees), got {type(trees).__name__}")
    levels = check_positive_int(trees["levels"], f"{name}['levels']", minimum=2)
    per_class = to_numpy(trees["trees"], f"{name}['trees']").astype(float)
    if per_class.ndim != 2 or 0 in per_class.shape or per_class.min() < 0 or per_class.max() > 1:
        raise ValueError(f"{name}['trees'] must have shape (J, I), mean quantised couplings in [0, 1], "
                         f"got shape {per_class.shape}")
    predictions = to_numpy(trees["predictions"], f"{name}['predictions']")
    if predictions.ndim != 1 or (predictions.size and (predictions.min() < 0 or predictions.max() >= len(per_class)
                                                       or np.any(predictions != np.round(predictions)))):
        raise ValueError(f"{name}['predictions'] must have shape (N,), classes in [0, J) = [0, {len(per_class)}), "
                         f"got shape {predictions.shape}")
    return {"levels": levels, "trees": per_class, "predictions": predictions.astype(int)}


def _check_grid(grid, capsules: int) -> tuple[int, int, int]:
    if (not isinstance(grid, (tuple, list)) or len(grid) != 3
            or any(isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 1 for g in grid)
            or grid[0] * grid[1] * grid[2] != capsules):
        raise ValueError(f"grid must be (H, W, O), three positive integers with H·W·O = I = {capsules} "
                         f"(the primary capsules), got {grid!r}")
    return int(grid[0]), int(grid[1]), int(grid[2])


def _check_share(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a share in [0, 1], got {value!r}")
    return float(value)


def _check_models(models) -> dict:
    if not isinstance(models, Mapping) or not models:
        raise ValueError("trees must be a non-empty dict {name: parse trees} (capsule_lab.studies.rem_pictures.class_trees "
                         "of each model)")
    return {name: check_parse_trees(t, f"trees[{name!r}]") for name, t in models.items()}


# ---------------------------------------------------------------- the parse tree of a class (§3.2)

def class_couplings(trees, label: int) -> tuple[np.ndarray, int]:
    """Class ``label``'s parse tree from a model's parse ``trees`` (see the module): the mean quantised coupling
    ``c̃_(i,label) / (K − 1)`` of every primary capsule i over the images predicted as ``label``
    (:func:`capsule_lab.measures.parse_trees.class_parse_tree`), and the number of those images. Returns ``(means (I,),
    number of images)``; the means are 0 when no image was predicted as ``label`` (a picture of an empty tree rather
    than an error). Chapter 05."""
    trees = check_parse_trees(trees)
    label = check_class_index(int(label) if isinstance(label, np.integer) else label, len(trees["trees"]))
    return trees["trees"][label], int((trees["predictions"] == label).sum())


def _capsule_positions(H: int, W: int, O: int) -> np.ndarray:
    """(I, 2) node positions, capsules ordered (row, column, type): each grid position a unit cell (row r at
    y = −r), its O types on a small sub-grid inside the cell."""
    across = math.ceil(math.sqrt(O))
    down = math.ceil(O / across)
    step = 0.7 / max(across, down, 1)
    r, c, o = np.meshgrid(np.arange(H), np.arange(W), np.arange(O), indexing="ij")
    x = c + (o % across - (across - 1) / 2) * step
    y = -r - (o // across - (down - 1) / 2) * step
    return np.stack([x.ravel(), y.ravel()], axis=1)


def parse_tree_graph(ax, trees, label: int, grid: tuple, threshold: float | None = None, title: str | None = None):
    """Draw the parse tree of class ``label`` on ``ax``, backtracked from the predicted class (the REM paper,
    §3.2): the class capsule is a node on top; the primary capsules (``grid = (H, W, O)``, ordered (row, column,
    type) as :func:`capsule_lab.conv_to_capsules` makes them) are laid out as their H × W grid with O nodes per
    position, coloured by their mean quantised coupling to the class (:func:`class_couplings` of the model's parse
    ``trees``); an edge joins the class to every capsule whose mean quantised coupling is above ``threshold``
    (default 1/J, the uniform coupling; the paper uses ``1/|Ω|`` for its pictures), its width and opacity ∝ the
    coupling. The title says how many edges survive. Returns the node scatter (for a colour bar). Chapter 05."""
    means, n = class_couplings(trees, label)
    H, W, O = _check_grid(grid, len(means))
    J = len(check_parse_trees(trees)["trees"])
    threshold = 1 / J if threshold is None else _check_share(threshold, "threshold")
    positions = _capsule_positions(H, W, O)
    root = np.array([(W - 1) / 2, 1.6])
    kept = np.flatnonzero(means > threshold)
    if len(kept):
        strength = means[kept]
        colors = np.zeros((len(kept), 4))
        colors[:, :3] = mcolors.to_rgb(PALETTE[0])
        colors[:, 3] = 0.15 + 0.85 * strength
        ax.add_collection(LineCollection([[root, positions[i]] for i in kept], colors=colors,
                                         linewidths=0.3 + 2.0 * strength, zorder=1))
    nodes = ax.scatter(positions[:, 0], positions[:, 1], c=means, cmap="viridis", vmin=0, vmax=1,
                       s=max(6.0, 400 / math.sqrt(len(means))), edgecolors="0.3", linewidths=0.3, zorder=2)
    ax.scatter([root[0]], [root[1]], s=260, color=PALETTE[3], edgecolors="black", zorder=3)
    ax.annotate(str(label), root, ha="center", va="center", fontsize=9, zorder=4)
    ax.set_xticks(range(W), [str(c) for c in range(W)], fontsize=8)
    ax.set_yticks([-r for r in range(H)], [str(r) for r in range(H)], fontsize=8)
    ax.set_xlabel("column of the primary grid", fontsize=8)
    ax.set_ylabel("row of the primary grid", fontsize=8)
    ax.set_xlim(-0.6, W - 0.4)
    ax.set_ylim(-H + 0.4, 2.1)
    ax.set_aspect("equal")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    head = f"{title}: " if title else ""
    ax.set_title(f"{head}class {label} ({n} images)\n{len(kept)} of {len(means)} edges > {threshold:.3g}",
                 fontsize=9)
    return nodes


def _default_config(config, image_size: int, grid: tuple) -> CapsNetConfig:
    config = CapsNetConfig(image_size=image_size) if config is None else config
    centres = receptive_field_centres(config)
    if len(centres) != grid[0] or len(centres) != grid[1] or config.image_size != image_size:
        raise ValueError(f"config must give the primary grid (H, W) = ({grid[0]}, {grid[1]}) on "
                         f"{image_size}×{image_size} images; pass the model's CapsNetConfig")
    return config


def _position_sums(trees, label: int, grid: tuple) -> np.ndarray:
    """(H, W): the mean quantised couplings of class ``label`` summed over the O types at each grid position."""
    means, _ = class_couplings(trees, label)
    H, W, O = _check_grid(grid, len(means))
    return means.reshape(H, W, O).sum(axis=-1)


def plot_backtracked_image(ax, images, trees, label: int, grid: tuple, config: CapsNetConfig | None = None,
                           vmax: float | None = None):
    """Draw on ``ax`` the parse tree of class ``label`` taken back to the image: the mean of the ``images``
    ``(N, 1, S, S)`` (the images the parse ``trees`` were measured on) predicted as ``label``, and at the centre of
    every grid position's receptive field (:func:`~capsule_lab.figures.geometry.receptive_field_centres` of
    ``config``, by default the course CapsNet's 9 × 9 convolutions, stride 2, on S × S images) a dot whose size and
    colour are the summed mean quantised coupling of that position's O capsules, on a scale from 0 to ``vmax``
    (default: the largest drawn; at most O). Returns the dot scatter (for a colour bar). Chapter 05."""
    checked = check_parse_trees(trees)
    x = image_array(images, "images")
    N = len(checked["predictions"])
    if x.shape[0] != N:
        raise ValueError(f"images must have shape (N, 1, S, S) with N = {N}, the images of the parse trees, "
                         f"got {x.shape}")
    summed = _position_sums(checked, label, grid)
    config = _default_config(config, x.shape[1], summed.shape)
    centres = receptive_field_centres(config)
    chosen = checked["predictions"] == label
    mean_image = x[chosen].mean(axis=0) if chosen.any() else np.zeros(x.shape[1:])
    ax.imshow(mean_image, cmap="gray", vmin=0, vmax=max(1.0, float(mean_image.max())))
    if vmax is None:
        vmax = max(float(summed.max()), 1e-12)
    elif isinstance(vmax, bool) or not isinstance(vmax, (int, float)) or not vmax > 0:
        raise ValueError(f"vmax must be a number > 0, got {vmax!r}")
    rows, cols = np.meshgrid(centres, centres, indexing="ij")
    size = 10 + 120 * np.minimum(summed.ravel() / vmax, 1)
    dots = ax.scatter(cols.ravel(), rows.ravel(), s=size, c=summed.ravel(), cmap="plasma", vmin=0, vmax=vmax,
                      edgecolors="black", linewidths=0.3)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"mean image of class {label},\ncouplings at the receptive fields", fontsize=9)
    return dots


def _check_images_for(images, models: dict):
    """``images`` (or None) if they are ``(N, 1, S, S)`` with N the images of every model's parse trees of
    ``models = {name: parse trees}``, else ValueError. Chapter 05."""
    if images is None:
        return None
    for name, t in models.items():
        n = len(check_parse_trees(t, f"trees[{name!r}]")["predictions"])
        if image_array(images, "images").shape[0] != n:
            raise ValueError(f"images must have shape (N, 1, S, S) with N = {n}, the images of trees[{name!r}]")
    return images


def parse_tree_words(trees, label: int, grid: tuple, threshold: float | None, with_image: bool) -> str:
    """One model's parse tree of class ``label`` in words, for a figure's alt text: its edges, its strongest capsule,
    and (``with_image``) the grid position whose summed coupling is largest. Chapter 05."""
    means, n = class_couplings(trees, label)
    H, W, O = _check_grid(grid, len(means))
    threshold = 1 / len(check_parse_trees(trees)["trees"]) if threshold is None else float(threshold)
    edges = int((means > threshold).sum())
    if n == 0:
        return f"no image predicted as class {label}, so no edge"
    r, c, _ = np.unravel_index(int(np.argmax(means)), (H, W, O))
    words = (f"{edges} of {len(means)} edges ({n} images), the strongest coupling {means.max():.2f} at row {r}, "
             f"column {c}")
    if with_image:
        summed = means.reshape(H, W, O).sum(axis=-1)
        r, c = np.unravel_index(int(np.argmax(summed)), (H, W))
        words += f", the largest summed coupling on the image at row {r}, column {c}"
    return words


def parse_tree_graph_figure(trees: dict, label: int, grid: tuple, images=None, threshold: float | None = None,
                            config: CapsNetConfig | None = None) -> Figure:
    """The parse tree of class ``label`` for every model of ``trees = {name: parse trees}`` (e.g. ``{"Q":
    class_trees(run.q.test), "REM": class_trees(run.rem.test)}``, :func:`capsule_lab.studies.rem_pictures.class_trees`),
    one row per model: :func:`parse_tree_graph`, and beside it, when ``images`` ``(N, 1, S, S)`` (the images the trees
    were measured on) are given, :func:`plot_backtracked_image` (the dots of all models on one colour scale). The figure
    carries alt text written from the couplings (each model's number of edges, its strongest capsule, where on the
    image the coupling is largest) and a caption. Chapter 05."""
    models = _check_models(trees)
    _check_images_for(images, models)
    first = next(iter(models.values()))
    levels = first["levels"]
    columns = 1 if images is None else 2
    vmax = None
    if images is not None:                               # one colour scale for the dots of every model
        vmax = max(max(float(_position_sums(t, label, grid).max()) for t in models.values()), 1e-12)
    fig, axes = plt.subplots(len(models), columns, squeeze=False, constrained_layout=True,
                             figsize=(MAX_FIGURE_WIDTH if columns == 2 else 4.6, 3.4 * len(models)))
    for row, (name, t) in zip(axes, models.items()):
        nodes = parse_tree_graph(row[0], t, label, grid, threshold, title=name)
        fig.colorbar(nodes, ax=row[0], fraction=0.04, pad=0.02).set_label("mean quantised coupling", fontsize=8)
        if images is not None:
            dots = plot_backtracked_image(row[1], images, t, label, grid, config, vmax)
            fig.colorbar(dots, ax=row[1], fraction=0.04, pad=0.02).set_label("summed over the types", fontsize=8)
    fig.suptitle(f"parse tree of class {label}, backtracked from the predicted class", fontsize=10)
    H, W, O = _check_grid(grid, first["trees"].shape[1])
    shown = 1 / len(first["trees"]) if threshold is None else threshold
    alt = (f"Parse tree of class {label} for {join_words(models)}, one row each: edges from the class capsule to the "
           f"primary capsules of the {H} × {W} × {O} grid whose mean quantised coupling (K = {levels}) is above "
           f"{shown:.3g}" + ("; beside each, the class's mean image with a dot at each receptive field, sized by the "
                             "coupling" if images is not None else "") + ". "
           + "; ".join(f"{name}: {parse_tree_words(t, label, grid, threshold, images is not None)}"
                       for name, t in models.items()) + ".")
    return attach_description(fig, alt, f"Parse tree of class {label}, backtracked from the predicted class")
