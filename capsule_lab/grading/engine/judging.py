"""Judging a function's results against the reference's: :func:`verdict` (passed, wrong, error or refused, with the
hint), :func:`credit` (partial credit by case group) and :func:`earned_points`. Exercises 01–08.

Values are compared within a tolerance (:data:`RTOL`, :data:`ATOL` scaled by the reference's largest value, or the
band a prediction or an experiment states), and so are the gradients, where the task is differentiable. When an
answer is wrong and behaves like one of the task's known mistakes (its ``wrong_answers``, run here — the course's
code, never the student's — or read from the reference cache), the hint names that mistake; a bug hunt's message
gives the symptom only (the case, expected against got: :data:`BUG_HUNT_HINT`). The same verdict serves the
student's feedback (:func:`~capsule_lab.grading.engine.checking.check`, in the student's kernel) and the grade
(:mod:`.evaluation`, on the results the evaluation child sends back).
"""

from __future__ import annotations

import math
import re
from typing import Sequence

import torch

from ..tasks.registry import Case, Task, get_task
from . import reference_cache
from .records import Evaluation
from .running import Expected, StubAnswer, evaluate

__all__ = ["RTOL", "ATOL", "GRAD_ATOL_SINGLE", "BUG_HUNT_HINT", "HIDDEN_NOTE", "verdict", "credit", "passed_cases", "earned_points"]

#: What a bug hunt's failed check suggests besides the symptom (it names no line and no fix).
BUG_HUNT_HINT = ("run the function you were given on this case and compare each intermediate value with a hand "
                 "computation from the chapter: the first one that differs is computed on the wrong line.")

#: The note added to the message of a failed hidden case (the student saw the published cases only).
HIDDEN_NOTE = (" (a case drawn for this grading: the published case of that name on other numbers, which `check` "
               "does not run; an answer that fits only the published cases fails here)")

#: The relative tolerance of a comparison with the reference (a task that states its band uses its own).
RTOL = 1e-5
#: The absolute tolerance of a comparison, scaled by max(1, largest reference value) for each compared tensor.
ATOL = 1e-6
#: The absolute tolerance of a *gradient* in single (or lower) precision, scaled the same way: a gradient through
#: several routing iterations in float32 differs from the reference's by up to ~1e-5 of its largest value when the
#: student's sums run in another order (measured: 07.similarity_loop, 8 of 30 draws of its hidden cases beyond
#: 1e-6, largest 4e-6 of the scale), which is rounding, not a mistake.
GRAD_ATOL_SINGLE = 1e-5


def _dtype_advice(want: torch.Tensor, inputs: tuple) -> str:
    """" (keep the input's dtype)" where that is the advice: ``want`` is floating and every floating tensor among
    ``inputs`` has its dtype; else nothing (an integer result, inputs of other dtypes or none, Python numbers)."""
    floating = [a.dtype for a in inputs if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if want.is_floating_point() and floating and all(d == want.dtype for d in floating):
        return " (keep the input's dtype)" if len(floating) == 1 else " (keep the inputs' dtype)"
    return ""


def _mismatch(name: str, got: torch.Tensor, want: torch.Tensor, task: Task | None = None,
              symptom: bool = False, gradient: bool = False, inputs: tuple = ()) -> str | None:
    """None if ``got`` matches ``want`` (within the task's tolerance, if it states one; a ``gradient`` in single
    precision within :data:`GRAD_ATOL_SINGLE`); else what differs (with ``symptom`` or in a bug hunt: where, expected
    against got). ``inputs``: the case's arguments, for the advice on a wrong dtype (:func:`_dtype_advice`)."""
    if tuple(got.shape) != tuple(want.shape):
        return f"{name} has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"{name} has dtype {got.dtype}, expected {want.dtype}{_dtype_advice(want, inputs)}"
    g, w = got.double(), want.double()
    if not torch.isfinite(g).all() and torch.isfinite(w).all():
        return f"nan or inf in {name}"
    scale = max(1.0, float(w.abs().max())) if w.numel() else 1.0
    rtol = RTOL if task is None or task.rtol is None else task.rtol
    atol = ATOL * scale if task is None or task.atol is None else task.atol
    if gradient and want.dtype in (torch.float32, torch.float16, torch.bfloat16):
        atol = max(atol, GRAD_ATOL_SINGLE * scale)
    if not torch.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        diff = float((g - w).abs().nan_to_num(nan=math.inf).max())
        if symptom or (task is not None and task.kind == "bug hunt"):
            return _symptom(name, g, w)
        if task is not None and task.returns_number and task.kind == "prediction":
            # a prediction stays one: the message says outside the band, never where the band is centred
            return (f"{name} {float(g):.4g} is outside the accepted band (±{atol + rtol * abs(float(w)):.3g} around "
                    "the measured value, which a check does not show)")
        if task is not None and task.returns_number:
            return f"{name} {float(g):.4g} is not within {atol + rtol * abs(float(w)):.3g} of {float(w):.4g}"
        return f"wrong {name} (largest difference {diff:.3g})"
    return None


def _symptom(name: str, got: torch.Tensor, want: torch.Tensor) -> str:
    """A bug hunt's symptom: where ``got`` differs most from ``want``, expected against got, and how many differ."""
    difference = (got - want).abs().nan_to_num(nan=math.inf)
    if want.numel() <= 1:
        return f"wrong {name}: expected {float(want):.4g}, got {float(got):.4g}"
    flat = int(difference.flatten().argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), want.shape))
    differ = int((difference > ATOL * max(1.0, float(want.abs().max()))).sum())
    return (f"wrong {name}: at index {index} expected {float(want.flatten()[flat]):.4g}, got "
            f"{float(got.flatten()[flat]):.4g} ({differ} of {want.numel()} entries differ)")


def _compare(task: Task, case: Case, got: Evaluation, want: Evaluation, input_names: list) -> str | None:
    if got.error:
        return got.error
    for name, g, w in zip(task.outputs, got.outputs, want.outputs):
        problem = _mismatch(name, g, w, task, inputs=tuple(case.args))
        if problem:
            return problem
    if case.grad == "none" or want.grads is None:
        return None
    if not got.differentiable:
        return "the output carries no gradient (did you detach it or compute it under torch.no_grad?)"
    if got.grads is None or len(got.grads) != len(want.grads):      # never fewer checks than the reference has
        return (f"the result holds {0 if got.grads is None else len(got.grads)} gradient(s) where the case has "
                f"{len(want.grads)} inputs to differentiate")
    for name, g, w in zip(input_names, got.grads, want.grads):
        if case.grad == "finite":
            if g is not None and not torch.isfinite(g).all():
                return f"nan or inf in the gradient w.r.t. {name}"
            continue
        if g is None:
            g = torch.zeros_like(w) if w is not None else None
        if w is None:
            w = torch.zeros_like(g) if g is not None else None
        if g is None:
            continue
        problem = _mismatch(f"gradient w.r.t. {name}", g, w, symptom=task.kind == "bug hunt", gradient=True,
                            inputs=(w,))                 # a gradient has its input's dtype
        if problem:
            return problem
    return None


def _input_names(task: Task, case: Case) -> list:
    """Names of the differentiable inputs, for messages (the task's ``input_names``, else "argument N")."""
    names = list(task.input_names)
    floating = [i for i, a in enumerate(case.args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if names and len(names) == len(floating):
        return names
    return [f"argument {i + 1}" for i in floating]


def passed_cases(task: Task, cases: Sequence[Expected], got: Sequence[Evaluation]) -> list[bool]:
    """For each of ``cases``: whether ``got`` has a result for it that matches the reference."""
    return [index < len(got) and _compare(task, e.case, got[index], e.want, _input_names(task, e.case)) is None
            for index, e in enumerate(cases)]


def credit(task: Task, cases: Sequence[Expected], got: Sequence[Evaluation]) -> tuple[float, list[str]]:
    """``(fraction of the task's points earned, the case groups failed)``: each case group is worth an equal
    share and is earned when every case in it (published and hidden) matches the reference (a task of one group:
    all or nothing)."""
    failed = []
    for e, ok in zip(cases, passed_cases(task, cases, got)):
        if not ok and e.case.group not in failed:
            failed.append(e.case.group)
    groups = list(dict.fromkeys(e.case.group for e in cases))
    return (len(groups) - len(failed)) / len(groups), failed


def earned_points(task: Task, fraction: float) -> float:
    """The points for ``fraction`` of ``task``: a whole number when it is one, else rounded to 0.01."""
    points = round(task.points * fraction, 2)
    return int(points) if points == int(points) else points


def verdict(task: Task, cases: Sequence[Expected], got: Sequence[Evaluation]) -> tuple[str, str | None, str]:
    """Compare the student's results with the expected ones: ``(status, problem or None, hint)``.

    ``status``: ``passed``, ``wrong`` (values, shapes, dtypes or gradients differ), ``error`` (the function
    raised) or ``refused`` (it called a function that is the task's answer). The first differing case
    decides; when the answer behaves like a known mistake of the task, the hint names that mistake. The
    wrong answers are the course's code, run here, never the student's.
    """
    for index, e in enumerate(cases):
        input_names = _input_names(task, e.case)
        if index >= len(got):
            return "error", f"no result for case '{e.case.name}'", task.hint
        g = got[index]
        problem = _compare(task, e.case, g, e.want, input_names)
        if problem is None:
            continue
        status = (g.kind or "error") if g.error else "wrong"
        hint = task.hint
        if status == "refused":
            caller = re.search(r"\(called by your `(\w+)`\)", g.error or "")
            caller = caller.group(1) if caller else task.function or "the function"
            hint = f"write {caller} yourself, in plain torch (chapter {task.chapter})."
            if caller != task.function and any(get_task(u).function == caller for u in task.uses):
                hint = (f"your {caller} (an earlier task's function, which {task.function} calls) calls the package: "
                        f"write it yourself, in plain torch (chapter {task.chapter}).")
        elif "nan or inf" in problem and task.nonfinite_hint:
            hint = task.nonfinite_hint
        elif task.kind == "bug hunt":
            hint = BUG_HUNT_HINT        # the symptom only: no known mistake, no definition it breaks
        elif g.error is None:
            close = []                                  # every known mistake the answer behaves like, and how closely
            for k, wrong in enumerate(task.wrong_answers):
                mistaken = _mistake(task, k, e)
                if mistaken is not None and mistaken.error is None and \
                        _compare(task, e.case, g, mistaken, input_names) is None:
                    close.append((_distance(g, mistaken), k, wrong.hint))
            if close:
                hint = min(close)[2]                    # the nearest, where two mistakes lie within the band
        return status, f"{problem} on case '{e.case.name}'" + (HIDDEN_NOTE if e.case.hidden else ""), hint
    return "passed", None, ""


def _distance(got: Evaluation, mistaken: Evaluation) -> float:
    """How far an answer's outputs lie from a known mistake's: the largest absolute difference over them."""
    return max((float((g.double() - m.double()).abs().max()) if g.numel() else 0.0
                for g, m in zip(got.outputs, mistaken.outputs)), default=0.0)


def _mistake(task: Task, index: int, e: Expected) -> Evaluation | None:
    """What the task's known mistake ``index`` gives on the case of ``e`` (None: it is not implemented there), from
    the reference cache when it was kept (a mistake of an experiment trains networks), else run and kept."""
    if e.case.hidden:       # drawn for one notebook: run, never kept
        try:
            return evaluate(task, task.wrong_answers[index].fn, e.case, e.weights, student=True)
        except StubAnswer:
            return None
    memo = (task.id, id(task), index, e.case.name)
    if memo in _MISTAKES:
        return _MISTAKES[memo]
    mistaken = reference_cache.load_mistake(task, index, e.case.name)
    if mistaken is None:
        try:
            mistaken = evaluate(task, task.wrong_answers[index].fn, e.case, e.weights, student=True)
        except StubAnswer:
            return None
        reference_cache.save_mistake(task, index, e.case.name, mistaken)
    _MISTAKES[memo] = mistaken
    return mistaken


_MISTAKES: dict = {}  # (task id, task object, mistake, case) → its evaluation, once per process
