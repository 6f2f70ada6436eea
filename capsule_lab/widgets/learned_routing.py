"""The similarity-routing explorer: slide λ1, λ2, the kernel's width and the iterations, and watch one output
capsule's pose settle among its votes.

Taught in chapter 07, after Faria, "Learning to compute inner consensus" (§4.1). The routing is
:func:`capsule_lab.figures.similarity_clusters` (similarity routing with one Gaussian kernel), the picture
:func:`capsule_lab.figures.plot_similarity_routing`, the objective
:func:`capsule_lab.routing.similarity_objective`; :func:`similarity_routing_explorer_figure` draws the
widget's default state for the static book.
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch

from ..figures.descriptions import attach_description
from ..figures.learned_routing import (_activations, _entropy, _lambdas, _length_scale, _panel_title, _votes,
                                       clustered_votes, plot_similarity_routing, similarity_clusters,
                                       similarity_routing_words)
from ..figures.style import MAX_FIGURE_WIDTH
from ..routing import similarity_objective
from .._checks import check_positive_int
from .figure_output import show_figure_png

__all__ = ["LAMBDA_VALUES", "LENGTH_SCALES", "similarity_routing_result", "similarity_routing_explorer_figure",
           "SimilarityRoutingExplorer", "similarity_routing_explorer"]

#: Slider values for λ1 and λ2 — 0, then roughly log-spaced from 0.01 to 10.
LAMBDA_VALUES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
#: The values the kernel-width slider offers (the votes lie in the unit disc).
LENGTH_SCALES = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0)
#: The explorer's default settings: λ1, λ2, the kernel width ℓ and the iterations T.
_DEFAULTS = (0.0, 0.2, 0.2, 3)


def _toy(votes, activations):
    if votes is None and activations is None:
        return clustered_votes()
    if votes is None or activations is None:
        raise ValueError("give both votes (I, 2) and activations (I,), or neither (the default toy)")
    v = _votes(votes)
    return torch.from_numpy(v), torch.from_numpy(_activations(activations, v.shape[0]))


def similarity_routing_result(votes, activations, lam1: float, lam2: float, length_scale: float = 0.2,
                              iterations: int = 3) -> dict:
    """The numbers behind the explorer: :func:`~capsule_lab.figures.similarity_clusters` of the votes
    ``(I, 2)`` and activations ``(I,)``, plus the kernel values the final couplings were computed from and the
    objective they minimise. Returns a dict of NumPy arrays and floats: ``lam1``, ``lam2``, ``length_scale``,
    ``iterations``, ``couplings`` ``(I,)``, ``pose`` ``(2,)``, ``trajectory`` ``(T + 1, 2)``, ``kernel`` ``(I,)``
    (``k_i = exp(−|μ − v_i|² / (2 ℓ²))`` at μ = ``trajectory[-2]``, the pose that gave the couplings) and
    ``objective`` (:func:`capsule_lab.routing.similarity_objective` of the couplings for that kernel,
    its minimum over the couplings). Chapter 07.
    """
    v = _votes(votes)
    a = _activations(activations, v.shape[0])
    r = similarity_clusters(v, a, lam1, lam2, length_scale, iterations)
    previous = r.trajectory[-2]
    kernel = np.exp(-((v - previous) ** 2).sum(axis=1) / (2 * float(length_scale) ** 2))
    objective = similarity_objective(torch.from_numpy(r.couplings)[None, :, None],
                                     torch.from_numpy(kernel)[None, :, None], torch.from_numpy(a)[None],
                                     float(lam1), float(lam2))
    return {"lam1": float(lam1), "lam2": float(lam2), "length_scale": float(length_scale),
            "iterations": iterations, "couplings": r.couplings, "pose": r.pose, "trajectory": r.trajectory,
            "kernel": kernel, "objective": float(objective[0, 0])}


def _draw(votes, activations, r: dict):
    fig, ax = plt.subplots(figsize=(min(MAX_FIGURE_WIDTH, 4.6), 4.9), constrained_layout=True)
    plot_similarity_routing(ax, votes, activations, r["couplings"], r["pose"], r["trajectory"],
                            _panel_title(r["lam1"], r["lam2"], r["couplings"]), length_scale=r["length_scale"])
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel(f"dot: coupling c_i · ring: activation a_i · ℓ = {r['length_scale']:g}, T = {r['iterations']}",
                  fontsize=8)
    return fig


def similarity_routing_explorer_figure(votes=None, activations=None, lam1: float = 0.0, lam2: float = 0.2,
                                       length_scale: float = 0.2, iterations: int = 3):
    """The explorer's picture for fixed values (the widget's default state by default): one output capsule's
    votes ``(I, 2)`` and activations ``(I,)`` (default :func:`~capsule_lab.figures.clustered_votes`), routed by
    similarity routing with λ1, λ2, one Gaussian kernel of width ``length_scale`` and ``iterations`` T
    (:func:`similarity_routing_result`), drawn by :func:`~capsule_lab.figures.plot_similarity_routing`.
    Returns the Figure, with alt text written from the routing (the couplings, where the pose moves and settles,
    the objective) and a caption that says whether these are the explorer's default settings and what its
    sliders change (the default settings are the sliders' starting values, whatever the votes). Chapter 07.
    """
    votes, activations = _toy(votes, activations)
    r = similarity_routing_result(votes, activations, lam1, lam2, length_scale, iterations)
    fig = _draw(votes, activations, r)
    setting = f"λ1 = {r['lam1']:g}, λ2 = {r['lam2']:g}, ℓ = {r['length_scale']:g}, T = {r['iterations']}"
    start = r["trajectory"][0] + 0.0
    words = similarity_routing_words(votes, activations, r["couplings"], r["pose"], r["length_scale"])
    alt = (f"Similarity routing of one output capsule's {len(r['couplings'])} votes in 2-D at {setting}: a dot's "
           f"size and colour are its coupling, its ring its activation, and the pose moves from the mean of the "
           f"votes, ({start[0]:.2f}, {start[1]:.2f}), to a star. {words[0].upper() + words[1:]}; the couplings' "
           f"entropy is {_entropy(r['couplings']):.2f} of log I = {np.log(len(r['couplings'])):.2f}; the objective "
           f"F = {r['objective']:.4f}.")
    is_default = all(abs(x - d) < 1e-12 for x, d in zip(
        (r["lam1"], r["lam2"], r["length_scale"], r["iterations"]), _DEFAULTS))
    caption = (f"The similarity-routing explorer at its default settings ({setting}); its sliders change λ1, λ2, "
               f"the kernel width ℓ and the iterations T" if is_default
               else f"The similarity-routing explorer's picture at {setting}")
    return attach_description(fig, alt, caption)


def _option(value, options, name: str):
    for option in options:
        if abs(option - value) <= 1e-9 * max(1.0, abs(value)):
            return option
    raise ValueError(f"{name} must be one of the slider's values {list(options)}, got {value!r}")


class SimilarityRoutingExplorer(widgets.VBox):
    """The similarity-routing explorer (see :func:`similarity_routing_explorer`): selection sliders ``lam1``
    and ``lam2`` over :data:`LAMBDA_VALUES`, ``length_scale`` over :data:`LENGTH_SCALES`, an integer slider
    ``iterations`` (1–10), an ``image`` of the figure and a ``numbers`` line. ``figure`` holds the Figure shown
    and ``result`` its :func:`similarity_routing_result` (couplings, pose, trajectory, kernel, objective); with
    λ1 = λ2 = 0 (no closed form) both keep the last valid state and ``numbers`` says why. Chapter 07.
    """

    def __init__(self, votes=None, activations=None, lam1: float = 0.0, lam2: float = 0.2,
                 length_scale: float = 0.2, iterations: int = 3):
        votes, activations = _toy(votes, activations)
        _lambdas(lam1, lam2)
        _length_scale(length_scale)
        check_positive_int(iterations, "iterations")
        if iterations > 10:
            raise ValueError(f"iterations must be an integer in [1, 10] (the slider's range), got {iterations!r}")
        self.votes, self.activations = votes, activations
        layout = widgets.Layout(width="60%")
        self.lam1 = widgets.SelectionSlider(options=LAMBDA_VALUES, value=_option(lam1, LAMBDA_VALUES, "lam1"),
                                            description="λ1", continuous_update=False, layout=layout)
        self.lam2 = widgets.SelectionSlider(options=LAMBDA_VALUES, value=_option(lam2, LAMBDA_VALUES, "lam2"),
                                            description="λ2", continuous_update=False, layout=layout)
        self.length_scale = widgets.SelectionSlider(options=LENGTH_SCALES,
                                                    value=_option(length_scale, LENGTH_SCALES, "length_scale"),
                                                    description="width ℓ", continuous_update=False, layout=layout)
        self.iterations = widgets.IntSlider(value=iterations, min=1, max=10, description="iterations T",
                                            continuous_update=False, layout=layout,
                                            style={"description_width": "initial"})
        self.image = widgets.Image(format="png")
        self.numbers = widgets.HTML()
        self.figure = None
        self.result = None
        super().__init__([self.lam1, self.lam2, self.length_scale, self.iterations, self.image, self.numbers])
        for control in (self.lam1, self.lam2, self.length_scale, self.iterations):
            control.observe(self._redraw, names="value")
        self._redraw()

    def _redraw(self, change=None) -> None:
        lam1, lam2 = self.lam1.value, self.lam2.value
        if lam1 + lam2 == 0:
            self.numbers.value = "<pre>λ1 + λ2 must be > 0 (the closed form divides by it): raise one of them</pre>"
            return
        self.result = r = similarity_routing_result(self.votes, self.activations, lam1, lam2,
                                                    self.length_scale.value, self.iterations.value)
        self.figure = show_figure_png(self.image, _draw(self.votes, self.activations, r), dpi=80)
        line = (f"λ1 = {lam1:g} · λ2 = {lam2:g} · exponent on a_i λ2/(λ1+λ2) = {lam2 / (lam1 + lam2):.2f} · "
                f"temperature λ1+λ2 = {lam1 + lam2:g} · μ = ({r['pose'][0]:.3f}, {r['pose'][1]:.3f}) · "
                f"objective F = {r['objective']:.4f}")
        self.numbers.value = f"<pre>{html.escape(line)}</pre>"


def similarity_routing_explorer(votes=None, activations=None, lam1: float = 0.0, lam2: float = 0.2,
                                length_scale: float = 0.2, iterations: int = 3) -> SimilarityRoutingExplorer:
    """A widget to explore similarity routing for one output capsule: sliders for λ1 and λ2
    (:data:`LAMBDA_VALUES`, 0 to 10), the kernel width ℓ (:data:`LENGTH_SCALES`) and the iterations T (1–10),
    starting at the given values (each must be one of its slider's); votes ``(I, 2)`` and activations ``(I,)``
    default to :func:`~capsule_lab.figures.clustered_votes`. It draws
    :func:`similarity_routing_explorer_figure` and prints the pose and the objective. Chapter 07.
    """
    return SimilarityRoutingExplorer(votes, activations, lam1, lam2, length_scale, iterations)
