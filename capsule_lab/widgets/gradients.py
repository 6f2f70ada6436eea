"""The gradient-terms explorer: the two terms of ∂L/∂û on a toy layer, as the couplings polarise.

Taught in chapter 03. Sliders for the routing iterations r and for how polarised the couplings are; the
numbers are :func:`capsule_lab.measures.gradients.polarised_gradient_terms`, the picture
:func:`capsule_lab.figures.plot_gradient_terms`. :func:`gradient_terms_figure` draws the default state.
"""

from __future__ import annotations

import ipywidgets as widgets

from ..figures.descriptions import attach_description, description_of
from ..figures.gradients import plot_gradient_terms
from ..measures.gradients import gradient_terms, polarised_gradient_terms
from .figure_output import show_figure

__all__ = ["gradient_terms_figure", "GradientTermsExplorer", "gradient_terms_explorer"]

#: The explorer's sliders start here: Sabour's three iterations, no added polarisation.
_DEFAULT_ITERATIONS, _DEFAULT_POLARISATION = 3, 0.0


def _gradient_terms_state(iterations: int, polarisation: float):
    """(figure, gradient_terms summary) of the explorer's state; the figure carries its alt text and caption."""
    couplings, grad = polarised_gradient_terms(iterations, polarisation)
    summary = gradient_terms(grad)
    fig = plot_gradient_terms(couplings, grad.term1[0].flatten(1).norm(dim=1), grad.term2[0].flatten(1).norm(dim=1),
                              title=f"r = {iterations}, polarisation {polarisation:g}: "
                                    f"‖term 2‖/‖term 1‖ = {summary['ratio']:.3f}, cos(total, term 1) = "
                                    f"{summary['cosine']:.3f}")
    alt = (f"The toy layer after {iterations} routing iteration{'s' * (iterations != 1)} at polarisation "
           f"{polarisation:g}: over all inputs ‖term 2‖/‖term 1‖ = {summary['ratio']:.3f}, cos(total, term 1) = "
           f"{summary['cosine']:.3f}. " + description_of(fig).alt)
    if (iterations, polarisation) == (_DEFAULT_ITERATIONS, _DEFAULT_POLARISATION):
        caption = (f"The gradient-terms explorer at its default settings (r = {iterations}, no added polarisation); "
                   "its sliders change the number of routing iterations and the polarisation of the couplings.")
    else:
        caption = (f"The gradient-terms explorer at r = {iterations} and polarisation {polarisation:g}; its sliders "
                   "change the number of routing iterations and the polarisation of the couplings.")
    return attach_description(fig, alt, caption), summary


def gradient_terms_figure(iterations: int = _DEFAULT_ITERATIONS, polarisation: float = _DEFAULT_POLARISATION):
    """The gradient-terms explorer's picture: couplings and per-input norms of the two terms, with its alt text
    (the ratio and cosine of the terms, the couplings, the inputs where term 2 is larger) and caption attached
    (``capsule_lab.figures.show(fig)`` shows them). Chapter 03."""
    return _gradient_terms_state(iterations, polarisation)[0]


class GradientTermsExplorer(widgets.VBox):
    """Sliders ``iterations`` and ``polarisation`` over :func:`gradient_terms_figure`; ``.summary`` holds the
    :func:`capsule_lab.measures.gradients.gradient_terms` of the current state and ``.figure`` the Figure. Chapter
    03."""

    def __init__(self):
        style = {"description_width": "initial"}
        self.iterations = widgets.IntSlider(value=_DEFAULT_ITERATIONS, min=1, max=6, description="iterations r",
                                            continuous_update=False, style=style)
        self.polarisation = widgets.FloatSlider(value=_DEFAULT_POLARISATION, min=0.0, max=10.0, step=0.5,
                                                description="polarisation",
                                                continuous_update=False, style=style)
        self.output = widgets.Output()
        self.figure = self.summary = None
        super().__init__([widgets.HBox([self.iterations, self.polarisation]), self.output])
        self.iterations.observe(self._redraw, names="value")
        self.polarisation.observe(self._redraw, names="value")
        self._redraw()

    def _redraw(self, change=None) -> None:
        fig, self.summary = _gradient_terms_state(int(self.iterations.value), float(self.polarisation.value))
        self.figure = show_figure(self.output, fig)


def gradient_terms_explorer() -> GradientTermsExplorer:
    """A widget: pick the number of routing iterations and how polarised the couplings are, and see the two
    terms of ∂L/∂û per input capsule (:func:`gradient_terms_figure` draws the default state). Chapter 03."""
    return GradientTermsExplorer()
