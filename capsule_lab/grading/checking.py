"""Running a student's function on a task's cases: :func:`check`, :class:`CheckResult` and the record file.

Used by every chapter's exercise notebook (chapters 01 and 02 so far)::

    from capsule_lab.grading import check
    check("01.squash", squash)          # prints ✔ or ✘ with a hint, returns a CheckResult

:func:`check` runs the student's function and the task's reference on the same inputs (the task's
:class:`~capsule_lab.grading.tasks.Case` list, float32 and float64) and compares the values and, where the
task is differentiable, the gradients of a fixed random projection of the outputs (so that a stray
``detach`` is caught too). When an answer is wrong and matches a known mistake, the hint names the mistake.
Each result is also appended as a JSON line to the file named by ``$CAPSULE_LAB_GRADE_RECORD``
(:data:`RECORD_ENV`) when that is set: that is how the notebook grader collects the results.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import torch

from .tasks import Case, Task, generator, get_task

__all__ = ["RECORD_ENV", "RTOL", "ATOL", "NOT_IMPLEMENTED", "CheckResult", "check"]

RECORD_ENV = "CAPSULE_LAB_GRADE_RECORD"
RTOL = 1e-5
ATOL = 1e-6  # scaled by max(1, largest reference value) for each compared tensor
NOT_IMPLEMENTED = "not implemented yet"


# ---------------------------------------------------------------- running a function on the cases

class _NotImplemented(Exception):
    pass


@dataclass
class _Evaluation:
    outputs: tuple | None = None        # the output tensors (detached)
    grads: tuple | None = None          # gradients w.r.t. the floating inputs (None entries: not reached)
    differentiable: bool = True         # every output that should carry a gradient does
    error: str | None = None


def _clone_args(case: Case, requires_grad: bool) -> tuple:
    out = []
    for a in case.args:
        if isinstance(a, torch.Tensor):
            a = a.detach().clone()
            if requires_grad and a.is_floating_point():
                a.requires_grad_(True)
        out.append(a)
    return tuple(out)


def _structure(task: Task, result) -> tuple:
    """The student's return value as a tuple of tensors in ``task.outputs`` order, or raise ValueError."""
    if result is None or result is Ellipsis:
        raise _NotImplemented()
    n = len(task.outputs)
    if n == 1:
        items = (result,)
    else:
        if not isinstance(result, (tuple, list)) or len(result) != n:
            raise ValueError(f"expected a tuple ({', '.join(task.outputs)}), got {_describe(result)}")
        items = tuple(result)
        if any(x is None or x is Ellipsis for x in items):
            raise _NotImplemented()
    for name, x in zip(task.outputs, items):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} should be a torch.Tensor, got {_describe(x)}")
    return items


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of length {len(x)}"
    return f"a {type(x).__name__}"


def _weights(case_index: int, outputs: Sequence[torch.Tensor]) -> list:
    g = generator(10_000 + case_index)
    return [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in outputs]


def _evaluate(task: Task, fn: Callable, case: Case, weights: list | None, student: bool) -> _Evaluation:
    """Run ``fn`` on a fresh copy of the case's inputs; with ``weights``, also take gradients."""
    want_grad = case.grad != "none" and weights is not None
    args = _clone_args(case, want_grad)
    try:
        result = fn(*args, **case.kwargs)
    except NotImplementedError as err:
        raise _NotImplemented() from err
    except (Exception, SystemExit) as err:  # the student's code may raise anything (even sys.exit)
        if not student:
            raise
        return _Evaluation(error=f"raised {type(err).__name__}: {err}")
    try:
        outputs = _structure(task, result)
    except ValueError as err:
        return _Evaluation(error=str(err))
    ev = _Evaluation(outputs=tuple(o.detach() for o in outputs))
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
        return _Evaluation(outputs=ev.outputs, error=f"backward pass raised {type(err).__name__}: {err}")
    ev.grads = tuple(None if g is None else g.detach() for g in grads)
    return ev


def _mismatch(name: str, got: torch.Tensor, want: torch.Tensor) -> str | None:
    """None if ``got`` matches ``want``; else what differs."""
    if tuple(got.shape) != tuple(want.shape):
        return f"{name} has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"{name} has dtype {got.dtype}, expected {want.dtype} (keep the input's dtype)"
    g, w = got.double(), want.double()
    if not torch.isfinite(g).all() and torch.isfinite(w).all():
        return f"nan or inf in {name}"
    scale = max(1.0, float(w.abs().max())) if w.numel() else 1.0
    if not torch.allclose(g, w, rtol=RTOL, atol=ATOL * scale, equal_nan=True):
        diff = float((g - w).abs().nan_to_num(nan=math.inf).max())
        return f"wrong {name} (largest difference {diff:.3g})"
    return None


def _compare(task: Task, case: Case, got: _Evaluation, want: _Evaluation, input_names: list) -> str | None:
    if got.error:
        return got.error
    for name, g, w in zip(task.outputs, got.outputs, want.outputs):
        problem = _mismatch(name, g, w)
        if problem:
            return problem
    if case.grad == "none" or want.grads is None:
        return None
    if not got.differentiable:
        return "the output carries no gradient (did you detach it or compute it under torch.no_grad?)"
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
        problem = _mismatch(f"gradient w.r.t. {name}", g, w)
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


def _run_checks(task: Task, fn: Callable) -> tuple[str | None, str]:
    """(None, "") if ``fn`` passes every case, else (what differed, hint)."""
    cases = task.cases()
    for index, case in enumerate(cases):
        want0 = _evaluate(task, task.reference, case, None, student=False)
        weights = _weights(index, want0.outputs) if case.grad != "none" else None
        want = _evaluate(task, task.reference, case, weights, student=False)
        got = _evaluate(task, fn, case, weights, student=True)
        input_names = _input_names(task, case)
        problem = _compare(task, case, got, want, input_names)
        if problem is None:
            continue
        hint = task.hint
        if "nan or inf" in problem and task.nonfinite_hint:
            hint = task.nonfinite_hint
        elif got.error is None:
            for wrong in task.wrong_answers:
                try:
                    mistaken = _evaluate(task, wrong.fn, case, weights, student=True)
                except _NotImplemented:
                    continue
                if mistaken.error is None and _compare(task, case, got, mistaken, input_names) is None:
                    hint = wrong.hint
                    break
        return f"{problem} on case '{case.name}'", hint
    return None, ""


# ---------------------------------------------------------------- check()

@dataclass
class CheckResult:
    """The outcome of :func:`check`: task id, passed, points earned, points possible, message."""

    task: str
    passed: bool
    points: int
    max_points: int
    message: str

    def line(self) -> str:
        """The one-line summary :func:`check` prints."""
        if self.passed:
            return f"✔ {self.task} passed ({self.points}/{self.max_points} points)"
        return f"✘ {self.task} failed: {self.message}"

    def _ipython_display_(self):
        # check() has already printed the line; in a notebook, `check(...)` as a cell's last
        # expression would otherwise print the same result a second time.
        if not getattr(self, "_printed", False):
            sys.stdout.write(self.line() + "\n")

    def to_dict(self) -> dict:
        return asdict(self)


def _record(result: CheckResult) -> None:
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf8") as f:
        f.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")


def check(task_id: str, fn: Callable, verbose: bool = True) -> CheckResult:
    """Check a student's function for the exercise ``task_id`` against the course's reference.

    Runs ``fn`` and the reference on seeded random and edge-case inputs (float32 and float64), compares
    the values (relative tolerance 1e-5) and, where the task is differentiable, the gradients. Anything
    the function raises counts as a failure, reported with its message; a function that returns
    ``...``/``None`` or raises ``NotImplementedError`` is "not implemented yet".

    Prints ``✔ 02.routing_step passed (2/2 points)`` or ``✘ 02.routing_step failed: <what differed, on
    which case> — hint: <hint>`` (unless ``verbose=False``), appends the result as a JSON line to the
    file named by ``$CAPSULE_LAB_GRADE_RECORD`` if that is set (how ``capsule-lab grade`` collects it)
    and returns a :class:`CheckResult`.

    Tasks: ``01.squash``, ``01.margin_loss``, ``01.primary_capsules`` (chapter 01), ``02.couplings``,
    ``02.routing_step``, ``02.dynamic_routing`` (chapter 02). Unknown ids raise ``ValueError``.
    """
    task = get_task(task_id)
    if not callable(fn):
        if fn is None or fn is Ellipsis:
            problem, hint = NOT_IMPLEMENTED, task.hint
        else:
            problem, hint = f"expected a function, got {_describe(fn)}", task.hint
    else:
        try:
            problem, hint = _run_checks(task, fn)
        except _NotImplemented:
            problem, hint = NOT_IMPLEMENTED, task.hint
    passed = problem is None
    message = f"passed all {len(task.cases())} cases" if passed else f"{problem} — hint: {hint}"
    result = CheckResult(task.id, passed, task.points if passed else 0, task.points, message)
    if verbose:
        sys.stdout.write(result.line() + "\n")  # one write: the line reaches a notebook as one output
        result._printed = True
    _record(result)
    return result
