"""What chapter 05's pictures take from the study's runs, as plain data.

Taught in chapter 05. The figures (:mod:`capsule_lab.figures.pruning`, :mod:`capsule_lab.figures.dictionary`,
:mod:`capsule_lab.figures.parse_trees`) and the pruning explorer import no study: they take numbers, lists and
arrays. These functions hand them over: a run's epochs as curves (:func:`epoch_curve`), a measure's parse tree of
every class (:func:`class_trees`), and every step of a run as the explorer shows it (:func:`pruning_explorer_run`).
"""

from __future__ import annotations

import torch

from .._checks import check_positive_int
from .rem import RemRun, RoutingMeasure, Step, _parse_tree_numbers


def epoch_curve(steps: list, levels: int = 11) -> dict:
    """A run's steps (``RemRun.dense`` or ``RemRun.pruned``) as the plain numbers
    :func:`capsule_lab.figures.pruning_curve_figure` and :func:`capsule_lab.figures.entropy_accuracy_figure` draw:
    ``{"levels": K, "epoch", "accuracy", "entropy", "sparsity": one value per step}`` — the test measure's accuracy
    (a share) and mean parse-tree entropy at ``levels`` (bits; the model as it is, ``Step.test``), and the
    overall sparsity (a share). Chapter 05."""
    if not isinstance(steps, (list, tuple)) or not steps or not all(isinstance(s, Step) for s in steps):
        raise ValueError("steps must be a non-empty list of capsule_lab.studies.rem.Step, as RemRun.pruned holds")
    check_positive_int(levels, "levels", minimum=2)
    return {"levels": levels, "epoch": [s.epoch for s in steps], "accuracy": [s.test.accuracy for s in steps],
            "entropy": [s.test.entropy(levels) for s in steps], "sparsity": [s.sparsity["overall"] for s in steps]}


def class_trees(measure: RoutingMeasure, levels: int = 11) -> dict:
    """A measure's parse trees as the plain arrays :func:`capsule_lab.figures.parse_tree_graph_figure` draws:
    ``{"levels": K, "trees": (J, I), "predictions": (N,)}`` — every class's parse tree at ``levels``
    (:meth:`RoutingMeasure.class_tree`, zeros for a class never predicted) and every image's predicted class.
    Chapter 05."""
    if not isinstance(measure, RoutingMeasure):
        raise ValueError(f"measure must be a capsule_lab.studies.rem.RoutingMeasure, got {type(measure).__name__}")
    check_positive_int(levels, "levels", minimum=2)
    return {"levels": levels,
            "trees": torch.stack([measure.class_tree(j, levels) for j in range(measure.classes)]).numpy(),
            "predictions": measure.predictions.numpy()}


def _step_numbers(step: Step, levels: int) -> dict:
    numbers = _parse_tree_numbers(step.test, levels)
    return {"epoch": step.epoch, "sparsity": step.sparsity["overall"], "accuracy": numbers["accuracy"],
            "entropy": numbers["entropy"], "mean_keys": numbers["keys"]}


def pruning_explorer_run(run: RemRun, levels: int = 11) -> dict:
    """A run as the plain data the pruning explorer draws (:func:`capsule_lab.widgets.pruning_explorer`,
    :func:`capsule_lab.figures.pruning_explorer_figure`): ``dataset``, ``seed``, ``levels`` and, per step of the
    pruned and of the dense run, its ``epoch``, ``sparsity`` (overall share), ``accuracy`` (share), ``entropy`` (bits,
    mean over the predicted classes at ``levels``) and ``mean_keys`` (keys per predicted class) of its test measure;
    a pruned step also its parse ``trees`` (:func:`class_trees`). Chapter 05."""
    if not isinstance(run, RemRun) or not run.pruned:
        raise ValueError("run must be a capsule_lab.studies.rem.RemRun with pruned steps, as run_rem returns")
    return {"dataset": run.dataset, "seed": run.seed, "levels": levels,
            "pruned": [dict(_step_numbers(s, levels), trees=class_trees(s.test, levels)) for s in run.pruned],
            "dense": [_step_numbers(s, levels) for s in run.dense]}
