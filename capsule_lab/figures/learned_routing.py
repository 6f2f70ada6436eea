"""Similarity routing as clustering: where one output capsule's pose μ settles among its votes, and how λ1 and λ2
shape the couplings.

Taught in chapter 07 (``chapters/07_learned_routing.ipynb``), after Faria, "Learning to compute inner
consensus" (§4.1, its Figure 2). For one output capsule j, similarity routing minimises over the couplings
c_{·j} (a distribution over the inputs i):

    F = Σ_i c_i (−k_i) + λ1 KL(c ‖ uniform) + λ2 KL(c ‖ a),   k_i = k(μ, v_i)

whose minimiser is ``c_i ∝ a_i^{λ2/(λ1+λ2)} exp(k_i/(λ1+λ2))``
(:func:`capsule_lab.routing.closed_form_couplings`), alternating with the pose ``μ = Σ_i c_i v_i``. λ1 pulls the
couplings toward uniform (a soft, wide cluster), λ2 toward the input activations a_i (votes of silent capsules are
ignored whatever their agreement), and a small λ1 + λ2 makes the kernel decide (a hard cluster around μ).

- :func:`clustered_votes` — a seeded 2-D toy: the votes of I input capsules for one output capsule, in clusters of
  different sizes and activations, plus outliers;
- :func:`similarity_clusters` — similarity routing of the toy with a single Gaussian kernel
  (:func:`capsule_lab.routing.similarity_routing`): the couplings, the pose and its trajectory;
- :func:`plot_similarity_routing` — one panel: the votes sized and coloured by their coupling, ringed by their
  activation, the pose μ and its path;
- :func:`similarity_grid_figure` — the paper's Figure 2: one panel per (λ1, λ2);
- :func:`similarity_routing_words` — what one panel shows, in words, for the figures' alt text.

Pure matplotlib: every function returns the Figure (or draws on a given ``Axes``) and checks its inputs; a
``*_figure`` function attaches alt text and a caption written from the routing it draws
(:func:`capsule_lab.figures.descriptions.attach_description`).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from .._checks import check_nonnegative, check_positive_int, to_numpy
from ..routing import similarity_routing
from .descriptions import attach_description
from .style import MAX_FIGURE_WIDTH, PALETTE

__all__ = ["DEFAULT_PAIRS", "SimilarityClusters", "clustered_votes", "similarity_clusters",
           "plot_similarity_routing", "similarity_grid_figure", "similarity_routing_words"]

#: The (λ1, λ2) of :func:`similarity_grid_figure`'s panels by default: the kernel nearly alone (small λ1, no
#: λ2), λ1 large (spread), the kernel and the activations (no λ1, small λ2), both large.
DEFAULT_PAIRS = ((0.05, 0.0), (1.0, 0.0), (0.0, 0.2), (1.0, 1.0))

POSE_COLOR = PALETTE[1]         # vermillion: the pose, drawn as a star, its path as a line
COUPLING_CMAP = "viridis"


class SimilarityClusters(NamedTuple):
    """What :func:`similarity_clusters` returns (NumPy arrays, float64).

    couplings: ``(I,)`` the final couplings c_i^T (they sum to 1), the closed form at the previous pose
    ``trajectory[-2]``.
    pose: ``(2,)`` the final pose μ^T = Σ_i c_i^T v_i.
    trajectory: ``(T + 1, 2)`` the poses μ^0 (the plain mean of the votes) … μ^T.
    """

    couplings: np.ndarray
    pose: np.ndarray
    trajectory: np.ndarray


# ---------------------------------------------------------------- argument checks

def _votes(votes, name: str = "votes") -> np.ndarray:
    v = to_numpy(votes, name)
    if v.ndim != 2 or v.shape[1] != 2 or v.shape[0] < 2:
        raise ValueError(f"{name} must have shape (I, 2), 2-D votes of I >= 2 input capsules for one output "
                         f"capsule, got {v.shape}")
    return v


def _activations(activations, count: int) -> np.ndarray:
    a = to_numpy(activations, "activations")
    if a.shape != (count,):
        raise ValueError(f"activations must have shape (I,) = ({count},), one per vote, got {a.shape}")
    if a.min() < 0 or a.max() > 1:
        raise ValueError("activations must be in [0, 1] (capsule lengths a_i)")
    return a


def _lambdas(lam1, lam2) -> tuple[float, float]:
    check_nonnegative(lam1, "lam1")
    check_nonnegative(lam2, "lam2")
    if not lam1 + lam2 > 0 or math.isinf(lam1 + lam2):
        raise ValueError(f"lam1 + lam2 must be finite and > 0 (the closed form divides by it), got "
                         f"lam1 = {lam1!r}, lam2 = {lam2!r}")
    return float(lam1), float(lam2)


def _length_scale(length_scale) -> float:
    check_nonnegative(length_scale, "length_scale")
    if not length_scale > 0 or math.isinf(length_scale):
        raise ValueError(f"length_scale must be a finite number > 0, got {length_scale!r}")
    return float(length_scale)


# ---------------------------------------------------------------- the toy

def clustered_votes(seed: int = 0, sizes: Sequence[int] = (12, 6, 4),
                    outliers: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded 2-D toy for one output capsule: the votes ``(I, 2)`` and activations ``(I,)`` (float64) of
    I = Σ sizes + outliers input capsules.

    Three clusters (with the default ``sizes``): the largest (12 votes, around (−0.35, −0.25)) comes from
    nearly silent capsules (a_i ≈ 0.1), the second (6 votes, around (0.4, 0.3)) from active ones
    (a_i ≈ 0.9), the third (4 votes, around (−0.3, 0.5)) from half-active ones (a_i ≈ 0.5); the outliers are
    spread over the unit disc with mixed activations. So the kernel alone (λ2 = 0, small λ1) settles μ on the
    largest cluster, λ2 moves it to the active one, and λ1 spreads the couplings over every vote. All votes lie
    in the unit disc, like the normalised votes of eq. 1. Chapter 07.
    """
    check_positive_int(seed, "seed", minimum=0)
    sizes = tuple(sizes)
    if not 1 <= len(sizes) <= 3:
        raise ValueError(f"sizes must hold 1 to 3 cluster sizes, got {sizes!r}")
    for s in sizes:
        check_positive_int(s, "sizes entries")
    check_positive_int(outliers, "outliers", minimum=0)
    rng = np.random.default_rng(seed)
    centres = np.array([[-0.35, -0.25], [0.4, 0.3], [-0.3, 0.5]])
    levels = np.array([0.1, 0.9, 0.5])
    votes, acts = [], []
    for k, s in enumerate(sizes):
        votes.append(centres[k] + 0.07 * rng.standard_normal((s, 2)))
        acts.append(np.clip(levels[k] + 0.05 * rng.standard_normal(s), 0.02, 1.0))
    if outliers:
        radius = 0.5 + 0.4 * rng.random(outliers)
        angle = 2 * np.pi * (np.arange(outliers) / outliers + 0.15 + 0.1 * rng.random(outliers))
        votes.append(np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1))
        acts.append(rng.uniform(0.2, 0.8, outliers))
    v, a = np.concatenate(votes), np.concatenate(acts)
    v = v / np.maximum(1.0, np.linalg.norm(v, axis=1, keepdims=True))       # inside the unit disc
    return torch.from_numpy(v), torch.from_numpy(a)


# ---------------------------------------------------------------- the routing

def similarity_clusters(votes, activations, lam1: float, lam2: float, length_scale: float = 0.2,
                        iterations: int = 3) -> SimilarityClusters:
    """Similarity routing of the 2-D votes ``(I, 2)`` of one output capsule with input ``activations``
    ``(I,)``: :func:`capsule_lab.routing.similarity_routing` (couplings normalised over the inputs,
    Σ_i c_i = 1) with one Gaussian kernel ``k(x, y) = exp(−|x − y|² / (2 ℓ²))`` of ``length_scale`` ℓ > 0,
    λ1, λ2 ≥ 0 (λ1 + λ2 > 0) and ``iterations`` T ≥ 1, in float64.

    From uniform couplings (μ^0 the plain mean of the votes), each iteration sets
    ``c_i ∝ a_i^{λ2/(λ1+λ2)} exp(k(μ, v_i)/(λ1+λ2))`` (eq. 11) and then ``μ = Σ_i c_i v_i``. Returns
    :class:`SimilarityClusters` (couplings ``(I,)``, pose ``(2,)``, trajectory ``(T + 1, 2)``). Chapter 07.
    """
    v = _votes(votes)
    a = _activations(activations, v.shape[0])
    lam1, lam2 = _lambdas(lam1, lam2)
    scale = _length_scale(length_scale)
    check_positive_int(iterations, "iterations")
    out = similarity_routing(torch.from_numpy(v)[None, :, None], torch.from_numpy(a)[None], lam1, lam2,
                             torch.tensor([scale], dtype=torch.float64), torch.zeros(1, dtype=torch.float64),
                             torch.tensor([10.0, -5.0, 1.0], dtype=torch.float64), iterations, history=True)
    trajectory = torch.stack([step.poses[0, 0] for step in out.history])
    return SimilarityClusters(out.couplings[0, :, 0].numpy(), out.poses[0, 0].numpy(), trajectory.numpy())


# ---------------------------------------------------------------- the picture

def plot_similarity_routing(ax, votes, activations, couplings, pose, trajectory=None, title: str | None = None,
                            length_scale: float | None = None):
    """Draw one output capsule's similarity routing on ``ax``: every vote ``(I, 2)`` as a dot whose area and
    colour (viridis, 0 … the largest coupling) grow with its coupling c_i ``(I,)``, inside a black ring whose
    thickness grows with its input activation a_i ``(I,)`` (a thin grey ring: a silent capsule); the pose μ
    ``(2,)`` as a vermillion star, its ``trajectory`` ``(T + 1, 2)`` from μ^0 (an open circle) as a line;
    with ``length_scale`` ℓ, a dashed circle of radius ℓ around μ (the kernel's width). Returns the dots'
    scatter (its offsets are the votes, its array the couplings). Chapter 07.
    """
    v = _votes(votes)
    I = v.shape[0]
    a = _activations(activations, I)
    c = to_numpy(couplings, "couplings")
    if c.shape != (I,):
        raise ValueError(f"couplings must have shape (I,) = ({I},), one per vote, got {c.shape}")
    if c.min() < 0 or abs(c.sum() - 1) > 1e-4:
        raise ValueError(f"couplings must be >= 0 and sum to 1 over the inputs, got sum {c.sum():.4g}")
    mu = to_numpy(pose, "pose")
    if mu.shape != (2,):
        raise ValueError(f"pose must have shape (2,), got {mu.shape}")
    path = None
    if trajectory is not None:
        path = to_numpy(trajectory, "trajectory")
        if path.ndim != 2 or path.shape[1] != 2 or path.shape[0] == 0:
            raise ValueError(f"trajectory must have shape (T + 1, 2), got {path.shape}")
    if length_scale is not None:
        length_scale = _length_scale(length_scale)

    ax.scatter(v[:, 0], v[:, 1], s=110, facecolors="none", edgecolors=["black" if x > 0.3 else "0.6" for x in a],
               linewidths=0.3 + 2.2 * a, zorder=2)
    dots = ax.scatter(v[:, 0], v[:, 1], s=8 + 900 * c, c=c, cmap=COUPLING_CMAP,
                      norm=Normalize(0, max(float(c.max()), 1e-12)), edgecolors="none", alpha=0.9, zorder=3)
    if path is not None:
        ax.plot(path[:, 0], path[:, 1], "-", color=POSE_COLOR, lw=1.2, zorder=4)
        ax.plot(path[0, 0], path[0, 1], "o", mfc="none", mec=POSE_COLOR, ms=6, zorder=4, label="μ⁰ (mean of votes)")
    ax.plot(mu[0], mu[1], "*", color=POSE_COLOR, ms=13, mec="black", mew=0.5, zorder=5, label="μ (final pose)")
    if length_scale is not None:
        ax.add_patch(plt.Circle(tuple(mu), length_scale, fill=False, ls="--", lw=0.8, color=POSE_COLOR, zorder=4))
    ax.add_patch(plt.Circle((0, 0), 1.0, fill=False, lw=0.5, color="0.7", zorder=1))
    ax.set_xlim(-1.05, 1.05)
    ax.set_ylim(-1.05, 1.05)
    ax.set_aspect("equal")
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.2)
    if title is not None:
        ax.set_title(title, fontsize=9)
    return dots


def _entropy(c: np.ndarray) -> float:
    c = c[c > 0]
    return float(-(c * np.log(c)).sum())


def _panel_title(lam1: float, lam2: float, c: np.ndarray) -> str:
    return (f"λ1 = {lam1:g}, λ2 = {lam2:g}: max c = {c.max():.2f}\n"
            f"entropy {_entropy(c):.2f} of log I = {math.log(len(c)):.2f}")


def similarity_routing_words(votes, activations, couplings, pose, length_scale: float) -> str:
    """What one panel of similarity routing shows, in words (for the alt text of chapter 07's figures): the
    largest coupling, where the final pose is, and how many votes lie within the kernel width ``length_scale``
    of it with their mean activation — the cluster the pose settled on. votes ``(I, 2)``, activations ``(I,)``,
    couplings ``(I,)``, pose ``(2,)``. Chapter 07.

    >>> similarity_routing_words([[0.0, 0.0], [1.0, 0.0]], [0.9, 0.1], [0.8, 0.2], [0.05, 0.0], 0.2)
    'largest coupling 0.80; pose at (0.05, 0.00), among 1 vote within ℓ (mean activation 0.90)'
    """
    v = _votes(votes)
    a = _activations(activations, v.shape[0])
    c = to_numpy(couplings, "couplings")
    if c.shape != (v.shape[0],):
        raise ValueError(f"couplings must have shape (I,) = ({v.shape[0]},), one per vote, got {c.shape}")
    mu = to_numpy(pose, "pose")
    if mu.shape != (2,):
        raise ValueError(f"pose must have shape (2,), got {mu.shape}")
    scale = _length_scale(length_scale)
    near = np.linalg.norm(v - mu, axis=1) <= scale
    count = int(near.sum())
    where = (f"among {count} vote{'s' if count != 1 else ''} within ℓ (mean activation {a[near].mean():.2f})"
             if count else "no vote within ℓ")
    x, y = (round(float(z), 2) + 0.0 for z in mu)                  # + 0.0: no "-0.00"
    return f"largest coupling {c.max():.2f}; pose at ({x:.2f}, {y:.2f}), {where}"


def similarity_grid_figure(votes=None, activations=None, pairs: Sequence[tuple] = DEFAULT_PAIRS,
                           length_scale: float = 0.2, iterations: int = 3) -> Figure:
    """The paper's Figure 2: similarity routing of one output capsule's votes ``(I, 2)`` with ``activations``
    ``(I,)`` (default: :func:`clustered_votes`), one panel (:func:`plot_similarity_routing`) per (λ1, λ2) of
    ``pairs`` (default :data:`DEFAULT_PAIRS`), the same Gaussian kernel of width ``length_scale`` and
    ``iterations`` T in each (:func:`similarity_clusters`). Each panel's title gives the largest coupling and
    the couplings' entropy (log I: uniform). With the default toy: small λ1 and λ2 = 0 settle μ on the largest
    cluster, of nearly silent capsules; λ1 = 1 spreads the couplings over all the votes (μ stays near the
    mean); λ1 = 0, λ2 = 0.2 moves μ to the active cluster; λ1 = λ2 = 1: couplings ∝ √a_i, spread over the
    active votes. The figure carries alt text written from each panel's routing
    (:func:`similarity_routing_words`) and a caption. Chapter 07.
    """
    if votes is None and activations is None:
        votes, activations = clustered_votes()
    elif votes is None or activations is None:
        raise ValueError("give both votes (I, 2) and activations (I,), or neither (the default toy)")
    v = _votes(votes)
    a = _activations(activations, v.shape[0])
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence) or not 1 <= len(pairs) <= 6:
        raise ValueError(f"pairs must be a sequence of 1 to 6 (lam1, lam2) pairs, got {pairs!r}")
    checked = []
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"pairs must hold (lam1, lam2) pairs, got {pair!r}")
        checked.append(_lambdas(*pair))
    _length_scale(length_scale)
    check_positive_int(iterations, "iterations")
    n = len(checked)
    cols = 2 if n == 4 else min(n, 3)
    rows = math.ceil(n / cols)
    width = min(MAX_FIGURE_WIDTH, 2.5 * cols + 0.6)
    fig, axes = plt.subplots(rows, cols, squeeze=False, figsize=(width, 2.45 * rows * width / (2.5 * cols) + 0.5),
                             constrained_layout=True)
    said = []
    for k, (lam1, lam2) in enumerate(checked):
        ax = axes.flat[k]
        r = similarity_clusters(v, a, lam1, lam2, length_scale, iterations)
        plot_similarity_routing(ax, v, a, r.couplings, r.pose, r.trajectory, _panel_title(lam1, lam2, r.couplings),
                                length_scale=length_scale)
        said.append(f"λ1 = {lam1:g}, λ2 = {lam2:g}: "
                    + similarity_routing_words(v, a, r.couplings, r.pose, length_scale))
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=7)
    fig.suptitle(f"similarity routing of one output capsule (ℓ = {length_scale:g}, T = {iterations})\n"
                 f"dot: coupling c_i (area, colour) · ring: activation a_i · dashed: radius ℓ", fontsize=9)
    alt = (f"{n} panels, one per (λ1, λ2), of one output capsule's {len(v)} votes in 2-D: a dot's size is its "
           f"coupling, its ring its activation, a star the final pose (ℓ = {length_scale:g}, T = {iterations}). "
           + "; ".join(said) + ".")
    return attach_description(fig, alt, f"Similarity routing of one output capsule for {n} pairs (λ1, λ2), "
                                        f"ℓ = {length_scale:g}, T = {iterations}")
