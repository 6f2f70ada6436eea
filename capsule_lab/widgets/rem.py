"""The pruning explorer: walk through REM's pruned run epoch by epoch and watch a class's parse tree thin out.

Taught in chapter 05, after Renzulli, Tartaglione and Grangetto (the REM paper), §3.2 and Figure 8. The
picture is :func:`capsule_lab.figures.pruning_explorer_figure`, the numbers
:func:`capsule_lab.figures.step_summary`; the figure of the default state (REM's model, the last step) is what the static
book shows.
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from .._checks import check_class_index
from ..figures.rem import pruning_explorer_figure, step_summary
from ..models import CapsNetConfig
from ..rem_study import RemRun
from .figure_output import show_figure_png

__all__ = ["PruningExplorer", "pruning_explorer"]


class PruningExplorer(widgets.VBox):
    """The pruning explorer (see :func:`pruning_explorer`): a ``step`` slider over the pruned run's steps, a
    ``label`` dropdown of the classes, an ``image`` of the figure and a ``numbers`` line; ``figure`` holds the
    Figure shown and ``summary`` its :func:`~capsule_lab.figures.step_summary`. Chapter 05."""

    def __init__(self, run: RemRun, grid: tuple, images=None, label: int | None = None, levels: int = 11,
                 config: CapsNetConfig | None = None):
        if not isinstance(run, RemRun) or not run.pruned:
            raise ValueError("run must be a capsule_lab.rem_study.RemRun with pruned steps, as run_rem returns")
        self.run, self.grid, self.images, self.levels, self.config = run, grid, images, levels, config
        classes = run.pruned[0].test.classes
        if label is None:
            label = int(run.rem.test.predictions.mode().values) if len(run.rem.test.predictions) else 0
        check_class_index(label, classes)
        options = [(f"epoch {s.epoch} · sparsity {100 * s.sparsity['overall']:.0f} %", k)
                   for k, s in enumerate(run.pruned)]
        self.step = widgets.SelectionSlider(options=options, value=len(run.pruned) - 1, description="pruned run",
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
        step = self.run.pruned[self.step.value]
        self.summary = step_summary(step, self.levels)
        fig = pruning_explorer_figure(self.run, self.step.value, self.label.value, self.grid, self.images,
                                      self.levels, self.config)
        self.figure = show_figure_png(self.image, fig, dpi=80)
        s = self.summary
        line = (f"epoch {s['epoch']} · sparsity {100 * s['sparsity']:.1f} % · accuracy {100 * s['accuracy']:.2f} % · "
                f"entropy {s['entropy']:.2f} bits (K = {self.levels}) · keys per class {s['mean_keys']:.1f}")
        self.numbers.value = f"<pre>{html.escape(line)}</pre>"


def pruning_explorer(run: RemRun, grid: tuple, images=None, label: int | None = None, levels: int = 11,
                     config: CapsNetConfig | None = None) -> PruningExplorer:
    """A widget to walk through REM's pruned run: a slider over its steps ("epoch e · sparsity s %", starting at
    REM's model, the last step) and a class dropdown (by default the class REM's model predicts most); it draws
    :func:`~capsule_lab.figures.pruning_explorer_figure` (the class's parse tree, backtracked to the mean image
    when ``images`` are given) and prints the step's accuracy, entropy (K = ``levels``) and keys per class.

    run: a :class:`~capsule_lab.rem_study.RemRun`; grid ``(H, W, O)`` of the primary capsules; images
    ``(N, 1, S, S)``, the test images of the run's measures; config: the model's
    :class:`~capsule_lab.models.CapsNetConfig` (for the receptive fields). Chapter 05.
    """
    return PruningExplorer(run, grid, images, label, levels, config)
