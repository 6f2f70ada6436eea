"""Running a function on a task's cases: the reference's answers (:func:`expected`) and the student's
(:func:`run_student`), each case's result an :class:`~.records.Evaluation`. Exercises 01–08.

Both run the function on a fresh copy of each case's inputs (the task's
:class:`~capsule_lab.grading.tasks.registry.Case` list, float32 and float64) and, where the task is differentiable,
take the gradients of a fixed random projection of the outputs (so that a stray ``detach`` is caught too). The
reference runs first, in the grader's process before any student code (its answers kept in the reference cache,
:mod:`.reference_cache`); the student's function runs through the gates of :mod:`.lock`, so that the task's answers,
and every function of the package the task does not allow, refuse to run for it. Judging the results is
:mod:`.judging`'s.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch

from ..tasks.registry import Case, Task, generator
from . import reference_cache
from .lock import call_student, denied, refusing_caller
from .records import Evaluation
from .refusal import AnswerRefused

__all__ = ["NOT_IMPLEMENTED", "StubAnswer", "describe_value", "evaluate", "Expected", "expected", "run_student"]

#: What a stub's check and grade say (its function raises ``NotImplementedError`` or returns ``...``).
NOT_IMPLEMENTED = "not implemented yet"


class StubAnswer(Exception):
    """The student's function is a stub: it raises ``NotImplementedError`` or returns ``...``/``None`` (reported as
    :data:`NOT_IMPLEMENTED`)."""


def _clone_args(case: Case, requires_grad: bool) -> tuple:
    """Fresh copies of the case's inputs: its tensors, also inside lists and tuples (a student's function that writes
    into an input must not change the case for the next run)."""
    def fresh(a):
        if isinstance(a, torch.Tensor):
            a = a.detach().clone()
            if requires_grad and a.is_floating_point():
                a.requires_grad_(True)
            return a
        if isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a):
            return type(a)(x.detach().clone() if isinstance(x, torch.Tensor) else x for x in a)
        return a
    return tuple(fresh(a) for a in case.args)


def _tensors(args) -> list:
    """The tensors among ``args``, also inside lists and tuples, in order."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out += [x for x in a if isinstance(x, torch.Tensor)]
    return out


def _changed_inputs(case: Case, args: tuple) -> bool:
    """Whether the function changed any of its input tensors in place (compared with the case's own)."""
    return any(before.shape != after.shape or not torch.equal(before, after.detach())
               for before, after in zip(_tensors(case.args), _tensors(args)))


def _structure(task: Task, result) -> tuple:
    """The student's return value as a tuple of tensors in ``task.outputs`` order, or raise ValueError."""
    if result is None or result is Ellipsis:
        raise StubAnswer()
    if task.returns_number:
        number = result.item() if isinstance(result, torch.Tensor) and result.numel() == 1 else result
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ValueError(f"{task.outputs[0]} should be a number, got {describe_value(result)}")
        return (torch.tensor(float(number), dtype=torch.float64),)
    n = len(task.outputs)
    if n == 1:
        items = (result,)
    else:
        if not isinstance(result, (tuple, list)) or len(result) != n:
            raise ValueError(f"expected a tuple ({', '.join(task.outputs)}), got {describe_value(result)}")
        items = tuple(result)
        if any(x is None or x is Ellipsis for x in items):
            raise StubAnswer()
    for name, x in zip(task.outputs, items):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} should be a torch.Tensor, got {describe_value(x)}")
    return items


def describe_value(x) -> str:
    """What ``x`` is, for messages: ``a tensor of shape (2, 3)``, ``a tuple of length 2``, ``a float``."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of length {len(x)}"
    return f"a {type(x).__name__}"


def _weights(case_index: int, outputs: Sequence[torch.Tensor]) -> list:
    g = generator(10_000 + case_index)
    return [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in outputs]


def _refused_by(err: BaseException) -> str:
    """`` (called by your `quantized_keys`)``: the student's function that made the refused call, or ""."""
    name = refusing_caller(err)
    return f" (called by your `{name}`)" if name else ""


def evaluate(task: Task, fn: Callable, case: Case, weights: list | None, student: bool) -> Evaluation:
    """Run ``fn`` on a fresh copy of the case's inputs; with ``weights``, also take gradients."""
    want_grad = case.grad != "none" and weights is not None
    args = _clone_args(case, want_grad)
    try:
        result = call_student(fn, *args, **case.kwargs) if student else fn(*args, **case.kwargs)
    except NotImplementedError as err:
        raise StubAnswer() from err
    except (Exception, SystemExit) as err:  # the student's code may raise anything (even sys.exit)
        if not student:
            raise
        kind = "refused" if isinstance(err, AnswerRefused) else "error"
        caller = _refused_by(err) if kind == "refused" else ""
        return Evaluation(error=f"raised {type(err).__name__}: {err}{caller}", kind=kind)
    if student and task.keeps_inputs and _changed_inputs(case, args):
        return Evaluation(error="your function changed its inputs in place: the task asks to leave them as they "
                                "are and return new tensors", kind="wrong")
    try:
        outputs = _structure(task, result)
    except ValueError as err:
        return Evaluation(error=str(err), kind="wrong")
    ev = Evaluation(outputs=tuple(o.detach() for o in outputs))
    if not want_grad:
        return ev
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    terms = []
    for o, w in zip(outputs, weights):
        if o.requires_grad and o.shape == w.shape and o.dtype == w.dtype:
            terms.append((o * w).sum())
        elif not o.requires_grad:
            ev.differentiable = False
    if not terms:
        ev.grads = tuple(None for _ in inputs)
        return ev
    try:
        grads = torch.autograd.grad(sum(terms), inputs, allow_unused=True)
    except (Exception, SystemExit) as err:
        if not student:
            raise
        kind = "refused" if isinstance(err, AnswerRefused) else "error"
        caller = _refused_by(err) if kind == "refused" else ""
        return Evaluation(outputs=ev.outputs, error=f"backward pass raised {type(err).__name__}: {err}{caller}",
                          kind=kind)
    ev.grads = tuple(None if g is None else g.detach() for g in grads)
    return ev


@dataclass
class Expected:
    """One case as the grader knows it before any student code runs: the case (its inputs), the weights
    of the random projection whose gradient is compared (None: values only) and the reference's result."""

    case: Case
    weights: list | None
    want: Evaluation


def expected(task: Task, cached: bool = False) -> list[Expected]:
    """The reference's outputs (and gradients) on every case of ``task``, in case order.

    With ``cached``, they are read from the reference cache when it has them for this package and torch, and
    kept there after they are computed (:mod:`.reference_cache`): a second process answers at once.
    """
    cases = task.cases()
    if cached:
        kept = reference_cache.load(task, cases)
        if kept is not None:
            return [Expected(case, weights, want) for case, (weights, want) in zip(cases, kept)]
    out = []
    for index, case in enumerate(cases):
        want0 = evaluate(task, task.reference, case, None, student=False)
        if case.grad == "none":       # values only: the first run is the answer (an experiment trains once)
            out.append(Expected(case, None, want0))
            continue
        weights = _weights(index, want0.outputs)     # the projection is shaped by the outputs: a second run
        out.append(Expected(case, weights, evaluate(task, task.reference, case, weights, student=False)))
    if cached:
        reference_cache.save(task, out)
    return out


def run_student(task: Task, fn: Callable, cases: Sequence[Expected], refuse: bool = True,
                also_allowed: tuple = ()) -> list[Evaluation]:
    """Run the student's ``fn`` on fresh copies of the cases' inputs, in order, stopping after one that fails
    to produce tensors — unless the task gives partial credit by case group, when every case runs. With
    ``refuse``, the task's answers raise while it runs, and so does every other package function it calls
    that the task does not allow (:func:`.lock.denied`; the grader's child has them refused for good);
    ``also_allowed``: qualified names allowed besides ``task.allowed`` (the stand-ins of
    :func:`~capsule_lab.grading.engine.checking.stand_ins`).

    Raises :class:`StubAnswer` when the function is a stub (raises NotImplementedError, returns ``...``).
    """
    results = []
    every_case = len(task.groups()) > 1
    gated = replace(task, allowed=task.allowed + tuple(also_allowed)) if also_allowed else task
    with (denied(gated) if refuse else contextlib.nullcontext()):
        for e in cases:
            got = evaluate(task, fn, e.case, e.weights, student=True)
            results.append(got)
            if got.error and not every_case:
                break
    return results
