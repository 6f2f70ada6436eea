"""The parse-tree explorer: compare the fuzzy parse trees of trained deep CapsNets by depth and routing.

Taught in chapter 04, after Mitterreiter et al. (2023), Figure 3. The pictures and the summaries are
:mod:`capsule_lab.figures.dead_capsules`'; :func:`capsule_lab.figures.parse_tree_explorer_figure` draws the
widget's default state for the static book.
"""

from __future__ import annotations

from typing import Mapping

import ipywidgets as widgets

from ..figures.dead_capsules import explorer_routings, layer_statistics_table, parse_tree_explorer_figure
from .figure_output import show_figure_png

__all__ = ["ParseTreeExplorer", "parse_tree_explorer"]


class ParseTreeExplorer(widgets.VBox):
    """The parse-tree explorer (see :func:`parse_tree_explorer`): ``depth`` and ``routing`` controls, an
    ``image`` of the figure and the layer ``table`` (an HTML table with a caption, read as a table by a screen
    reader); ``figure`` and ``summary`` hold what is shown. Chapter 04."""

    def __init__(self, summaries: dict, depth: int | None = None, routing: str | None = None,
                 names: Mapping | None = None, labels: Mapping | None = None):
        self.names, self.labels = explorer_routings(summaries, names, labels)
        self.summaries = summaries
        depths = sorted({d for d, _ in summaries})
        routings = list(self.names)
        self.depth = widgets.SelectionSlider(options=depths, value=depth if depth in depths else depths[-1],
                                             description="routing layers", continuous_update=False,
                                             style={"description_width": "initial"})
        self.routing = widgets.ToggleButtons(options=[(self.labels[r], r) for r in routings],
                                             value=routing if routing in routings else routings[0])
        self.image = widgets.Image(format="png")
        self.table = widgets.HTML()
        self.figure = None
        self.summary = None
        super().__init__([widgets.HBox([self.depth, self.routing]), self.image, self.table])
        self.depth.observe(self._redraw, names="value")
        self.routing.observe(self._redraw, names="value")
        self._redraw()

    def _redraw(self, change=None) -> None:
        key = (self.depth.value, self.routing.value)
        if key not in self.summaries:
            self.table.value = f"<p>no network trained for {key[0]} routing layers with {self.names[key[1]]}</p>"
            self.image.value = b""
            return
        self.summary = self.summaries[key]
        fig = parse_tree_explorer_figure(self.summaries, *key, names=self.names, labels=self.labels)
        self.figure = show_figure_png(self.image, fig, dpi=60)
        self.table.value = layer_statistics_table(
            self.summary.table,
            caption=f"Per-layer statistics, {key[0]} routing layers with {self.names[key[1]]}")._repr_html_()


def parse_tree_explorer(summaries: dict, depth: int | None = None, routing: str | None = None,
                        names: Mapping | None = None, labels: Mapping | None = None) -> ParseTreeExplorer:
    """A widget to compare the parse trees of trained deep CapsNets: pick the number of routing layers and
    the routing; it draws :func:`~capsule_lab.figures.parse_tree_explorer_figure` and shows the layer table
    (:func:`capsule_lab.figures.dead_capsules.layer_statistics_table`).

    summaries: ``{(routing layers, routing): ParseTreeSummary}``; ``depth`` and ``routing`` (by default the deepest
    network and the first routing) where it opens; ``names`` and ``labels`` (``{routing: words}``) how its sentences
    and its controls name the routings (:func:`capsule_lab.figures.dead_capsules.explorer_routings`; chapter 04:
    ``names={"dynamic": "RBA", "uniform": "uniform routing"}``, ``labels={"dynamic": "RBA", "uniform": "uniform"}``).
    Chapter 04.
    """
    return ParseTreeExplorer(summaries, depth, routing, names, labels)
