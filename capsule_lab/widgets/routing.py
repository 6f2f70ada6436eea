"""The routing explorer: dynamic routing on a 2-D toy, with sliders for the iterations and the agreement scale.

Taught in chapter 02. Sliders for the number of iterations r (1–6) and for a scale λ on the agreement added
to the logits, ``b_ij ← b_ij + λ ⟨û_{j|i}, v_j⟩`` (λ = 1 is Sabour's routing): the routing is
:class:`capsule_lab.routing.ScaledRouter`, the picture :func:`capsule_lab.figures.plot_routing_state`.
:func:`routing_explorer_figure` draws the widget's default state for the static book.
"""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
import torch

from ..figures.descriptions import attach_description, description_of
from ..figures.routing import plot_routing_state
from ..routing import ScaledRouter, check_votes
from .figure_output import show_figure

__all__ = ["toy_votes", "routing_explorer_figure", "RoutingExplorer", "routing_explorer"]

# The sliders' starting values: what routing_explorer_figure draws by default.
_DEFAULT_ITERATIONS, _DEFAULT_SCALE = 3, 1.0


def toy_votes() -> torch.Tensor:
    """The chapter's 2-D toy: 5 input capsules voting for 2 output capsules, shape ``(1, 5, 2, 2)``.

    Inputs 0–2 agree on output 0 (their votes for output 1 scatter); inputs 3–4 are outliers for
    output 0 and agree with each other on output 1. Chapter 02.
    """
    return torch.tensor([[
        # vote for output 0     vote for output 1
        [[1.00, 0.45], [-0.30, 0.55]],   # input 0
        [[0.95, 0.60], [0.40, -0.70]],   # input 1
        [[1.10, 0.50], [-0.60, -0.20]],  # input 2
        [[-0.55, 0.90], [-0.30, 1.05]],  # input 3
        [[0.20, -1.00], [-0.45, 0.95]],  # input 4
    ]])


def _toy(votes) -> torch.Tensor:
    votes = toy_votes() if votes is None else votes
    if isinstance(votes, np.ndarray):
        votes = torch.from_numpy(votes).float()
    if isinstance(votes, torch.Tensor) and votes.dim() == 3:
        votes = votes.unsqueeze(0)
    if (not isinstance(votes, torch.Tensor) or votes.dim() != 4 or votes.shape[0] != 1
            or votes.shape[3] != 2 or not votes.is_floating_point()):
        got = tuple(votes.shape) if isinstance(votes, torch.Tensor) else type(votes).__name__
        raise ValueError(f"votes must be a float tensor of shape (1, I, J, 2) or (I, J, 2): 2-D votes, got {got}")
    check_votes(votes)
    return votes.detach()


def routing_explorer_figure(votes=None, iterations: int = _DEFAULT_ITERATIONS, scale: float = _DEFAULT_SCALE):
    """The routing explorer's picture for fixed values: the toy after ``iterations`` iterations, and its couplings.

    votes ``(1, I, J, 2)`` or ``(I, J, 2)`` (default :func:`toy_votes`). Returns the Figure of
    :func:`capsule_lab.figures.plot_routing_state` (``axes[1].patches[j * I + i]`` has height c_ij), with alt
    text for these settings and a caption that names the explorer's sliders (``show(fig)`` shows both).

    Chapter 02.
    """
    fig = _routing_state(_toy(votes), iterations, scale)[0]
    settings = f"r = {iterations} iteration{'s' * (iterations != 1)}, agreement scale λ = {scale:g}"
    where = ("at its default settings" if (iterations, scale) == (_DEFAULT_ITERATIONS, _DEFAULT_SCALE)
             else f"at {settings} (defaults r = {_DEFAULT_ITERATIONS}, λ = {_DEFAULT_SCALE:g})")
    return attach_description(fig, f"The routing explorer after {settings}. " + description_of(fig).alt,
                              f"The routing explorer {where}; its sliders change the number of iterations r and the "
                              "agreement scale λ")


def _routing_state(votes: torch.Tensor, iterations: int, scale: float):
    """(figure, routing result) of the routing explorer's state."""
    result = ScaledRouter(iterations, scale)(votes)
    fig = plot_routing_state(votes[0], result.couplings[0], result.poses[0],
                                 title=f"r = {iterations} iteration{'s' * (iterations != 1)}, "
                                       f"agreement scale λ = {scale:g}")
    return fig, result


class RoutingExplorer(widgets.VBox):
    """The routing explorer (see :func:`routing_explorer`): sliders ``iterations`` and ``scale``, an ``output``.

    After every change ``result`` holds the :class:`RoutingResult` drawn and ``figure`` the Figure.
    """

    def __init__(self, votes=None):
        self.votes = _toy(votes)
        self.iterations = widgets.IntSlider(value=_DEFAULT_ITERATIONS, min=1, max=6, step=1, description="iterations r",
                                            continuous_update=False, style={"description_width": "initial"})
        self.scale = widgets.FloatSlider(value=_DEFAULT_SCALE, min=0.0, max=5.0, step=0.25,
                                         description="agreement scale λ",
                                         continuous_update=False, readout_format=".2f",
                                         style={"description_width": "initial"})
        self.output = widgets.Output()
        self.figure = None
        self.result = None
        super().__init__([widgets.HBox([self.iterations, self.scale]), self.output])
        self.iterations.observe(self._redraw, names="value")
        self.scale.observe(self._redraw, names="value")
        self._redraw()

    def _redraw(self, change=None) -> None:
        fig, self.result = _routing_state(self.votes, int(self.iterations.value), float(self.scale.value))
        self.figure = show_figure(self.output, fig)


def routing_explorer(votes=None) -> RoutingExplorer:
    """A widget to explore dynamic routing on a 2-D toy with two output capsules.

    Sliders: the number of routing iterations r (1–6, default 3) and the agreement scale λ (0–5,
    default 1), which multiplies the agreement added to the logits, ``b ← b + λ⟨û, v⟩`` (a larger λ is
    a colder softmax). Below them the toy (votes thin, outputs thick) and the coupling bars are
    redrawn; :func:`routing_explorer_figure` draws the same picture for the default values.

    votes ``(1, I, J, 2)`` or ``(I, J, 2)``; default :func:`toy_votes`. Returns the widget.

    Chapter 02.
    """
    return RoutingExplorer(votes)
