"""The pruning explorer: walk through REM's pruned run epoch by epoch and watch a class's parse tree thin out.

Taught in chapter 05, after Renzulli, Tartaglione and Grangetto (the REM paper), §3.2 and Figure 8. The
picture is :func:`capsule_lab.figures.pruning_explorer_figure`, the numbers :func:`capsule_lab.figures.step_summary`;
the figure of the default state (REM's model, the last step) is what the static book shows. The run is plain data,
:func:`capsule_lab.studies.rem_pictures.pruning_explorer_run`'s dict.
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import numpy as np

from .._checks import check_class_index
from ..figures.parse_trees import check_parse_trees
from ..figures.pruning import pruning_explorer_figure, step_summary
from ..models import CapsNetConfig
from .figure_output import show_figure_png

__all__ = ["PruningExplorer", "pruning_explorer"]


class PruningExplorer(widgets.VBox):
    """The pruning explorer (see :func:`pruning_explorer`): a ``step`` slider over the pruned run's steps, a
    ``label`` dropdown of the classes, an ``image`` of the figure and a ``numbers`` line; ``figure`` holds the
    Figure shown and ``summary`` its :func:`~capsule_lab.figures.step_summary`. Chapter 05."""

    def __init__(self, run: dict, grid: tuple, images=None, label: int | None = None,
                 config: CapsNetConfig | None = None):
        if not isinstance(run, dict) or not run.get("pruned"):
            raise ValueError("run must be a dict with pruned steps, as capsule_lab.studies.rem_pictures.pruning_explorer_run "
                             "makes it")
        self.run, self.grid, self.images, self.config = run, grid, images, config
        last = check_parse_trees(run["pruned"][-1].get("trees"), "run['pruned'][-1]['trees']")
        classes = len(last["trees"])
        if label is None:               # the class REM's model predicts most (the smallest on a tie)
            label = int(np.bincount(last["predictions"], minlength=classes).argmax()) if len(last["predictions"]) else 0
        check_class_index(label, classes)
        options = [(f"epoch {s['epoch']} · sparsity {100 * s['sparsity']:.0f} %", k)
                   for k, s in enumerate(run["pruned"])]
        self.step = widgets.SelectionSlider(options=options, value=len(run["pruned"]) - 1, description="pruned run",
                                            continuous_update=False, style={"description_width": "initial"},
                                            layout=widgets.Layout(width="60%"))
        self.label = widgets.Dropdown(options=list(range(classes)), value=label, description="class",
                                      layout=widgets.Layout(width="25%"))
        self.image = widgets.Image(format="png")
        self.numbers = widgets.HTML()
        self.figure = None
        self.summary = None
        super().__init__([widgets.HBox([self.step, self.label]), self.image, self.numbers])
        self.step.observe(self._redraw, names="value")
        self.label.observe(self._redraw, names="value")
        self._redraw()

    def _redraw(self, change=None) -> None:
        self.summary = step_summary(self.run["pruned"][self.step.value])
        fig = pruning_explorer_figure(self.run, self.step.value, self.label.value, self.grid, self.images,
                                      self.config)
        self.figure = show_figure_png(self.image, fig, dpi=80)
        s = self.summary
        line = (f"epoch {s['epoch']} · sparsity {100 * s['sparsity']:.1f} % · accuracy {100 * s['accuracy']:.2f} % · "
                f"entropy {s['entropy']:.2f} bits (K = {self.run['levels']}) · "
                f"keys per class {s['mean_keys']:.1f}")
        self.numbers.value = f"<pre>{html.escape(line)}</pre>"


def pruning_explorer(run: dict, grid: tuple, images=None, label: int | None = None,
                     config: CapsNetConfig | None = None) -> PruningExplorer:
    """A widget to walk through REM's pruned run: a slider over its steps ("epoch e · sparsity s %", starting at
    REM's model, the last step) and a class dropdown (by default the class REM's model predicts most); it draws
    :func:`~capsule_lab.figures.pruning_explorer_figure` (the class's parse tree, backtracked to the mean image
    when ``images`` are given) and prints the step's accuracy, entropy (at the run's K) and keys per class.

    run: :func:`capsule_lab.studies.rem_pictures.pruning_explorer_run` of a :class:`~capsule_lab.studies.rem.RemRun`;
    grid ``(H, W, O)`` of the primary capsules; images ``(N, 1, S, S)``, the test images of the run's measures; config:
    the model's :class:`~capsule_lab.models.CapsNetConfig` (for the receptive fields). Chapter 05.
    """
    return PruningExplorer(run, grid, images, label, config)
