"""The ladder explorer: pick K and an image, and see which primary capsules the pruning layer keeps, how well the
predicted class regresses them, and the class activities.

Taught in chapter 06, after Jeong, Lee and Kim, "Ladder capsule network" (ICML 2019), §3 (the pruning and
ladder layers, eqs. 2–4). The picture is :func:`capsule_lab.figures.ladder_explorer_figure`, the numbers
:func:`capsule_lab.figures.ladder_explorer_result`; the figure of the default state is what the static book
shows.
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from ..figures.ladder import draw_ladder_explorer, ladder_explorer_result
from .figure_output import show_figure_png

__all__ = ["LadderExplorer", "ladder_explorer"]


class LadderExplorer(widgets.VBox):
    """The ladder explorer (see :func:`ladder_explorer`): ``k`` toggle buttons over the networks' K, an ``index``
    slider over the images, an ``image`` of the figure and a ``numbers`` line; ``figure`` holds the Figure shown
    and ``result`` its :func:`~capsule_lab.figures.ladder_explorer_result` (kept indices, class activities,
    prediction, mean squared regression error per class). Chapter 06."""

    def __init__(self, models: dict, images, labels, k=None, index: int = 0):
        if not isinstance(models, dict) or not models:
            raise ValueError("models must be a non-empty dict {K: LadderCapsNet}")
        k = next(iter(models)) if k is None else k
        # check every argument once (and the first picture) before building the widgets
        ladder_explorer_result(models, images, labels, k, index)
        self.models, self.images, self.labels = models, images, labels
        options = [(key if isinstance(key, str) else f"K = {key}", key) for key in models]
        self.k = widgets.ToggleButtons(options=options, value=k, description="kept",
                                       style={"button_width": "70px"})
        self.index = widgets.IntSlider(value=index, min=0, max=images.shape[0] - 1, description="image",
                                       continuous_update=False, layout=widgets.Layout(width="60%"))
        self.image = widgets.Image(format="png")
        self.numbers = widgets.HTML()
        self.figure = None
        self.result = None
        super().__init__([self.k, self.index, self.image, self.numbers])
        self.k.observe(self._redraw, names="value")
        self.index.observe(self._redraw, names="value")
        self._redraw()

    def _redraw(self, change=None) -> None:
        k, index = self.k.value, self.index.value
        self.result = r = ladder_explorer_result(self.models, self.images, self.labels, k, index)
        fig = draw_ladder_explorer(r, self.images[index], self.models[k].config)   # ladder_explorer_figure
        self.figure = show_figure_png(self.image, fig, dpi=80)
        j = r["prediction"]
        line = (f"K = {k} · image {index} · true {r['label']} · predicted {j} "
                f"(d = {float(r['activities'][j]):.3f}) · mean squared regression error {float(r['errors'][j]):.4f}")
        self.numbers.value = f"<pre>{html.escape(line)}</pre>"


def ladder_explorer(models: dict, images, labels, k=None, index: int = 0) -> LadderExplorer:
    """A widget to look inside L-CapsNets: toggle buttons over the K of ``models = {K: LadderCapsNet}`` (starting
    at ``k``, by default the first) and a slider over the images ``images`` ``(N, 1, S, S)`` (labels ``(N,)``),
    starting at ``index``; it draws :func:`~capsule_lab.figures.ladder_explorer_figure` (the kept capsules on
    the image, the predicted class's regression of them, the class activities) and prints the prediction and
    its mean squared regression error. Chapter 06.
    """
    return LadderExplorer(models, images, labels, k, index)
