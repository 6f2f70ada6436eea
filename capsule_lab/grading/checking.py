"""Running a student's function on a task's cases and judging the result: :func:`check`, :class:`CheckResult`.

Used by every chapter's exercise notebook (chapters 01–07)::

    from capsule_lab.grading import check
    check("01.squash", squash)          # prints ✔ or ✘ with a hint, returns a CheckResult

:func:`check` runs the student's function and the task's reference on the same inputs (the task's
:class:`~capsule_lab.grading.tasks.Case` list, float32 and float64) and compares the values and, where the
task is differentiable, the gradients of a fixed random projection of the outputs (so that a stray
``detach`` is caught too). When an answer is wrong and matches a known mistake, the hint names the mistake.
While the student's function runs, the functions that are the task's answer refuse to run, and so does every
other function of the package the task does not allow (deny by default, :mod:`.lock`).

:func:`check` is feedback, not the grade: it runs in the student's own kernel, where the student's code
can change anything. The grader (:mod:`.evaluation`) uses the same three steps apart: :func:`expected`
(the reference, in the grader's process, before any student code), :func:`run_student` (in a child
process it owns; the results travel as :func:`to_record` plain tensors) and :func:`verdict` (back in
the grader's process).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
from dataclasses import asdict, dataclass, replace
from typing import Callable, Sequence

import torch

from .lock import AnswerRefused, call_student, denied, refusing_caller
from .tasks import Case, Task, generator, get_task

__all__ = ["RTOL", "ATOL", "NOT_IMPLEMENTED", "PLACE_HINT_AFTER", "GRADING_KERNEL_ENV", "BUG_HUNT_HINT", "CheckResult",
           "check", "Expected", "expected", "run_student", "verdict", "credit", "earned_points", "to_record",
           "from_record", "stand_ins", "stand_in_name", "stand_in_note"]

#: Set (to "1") in the environment of the kernel ``capsule-lab grade`` runs a notebook in: there a ``check(...)``
#: cell only prints that it was not run — the grade comes from the grader's own evaluation, and a check that trains
#: networks (08's mini-experiment) would only double the time.
GRADING_KERNEL_ENV = "CAPSULE_LAB_GRADING_KERNEL"
#: After this many failed checks of a bug hunt in one kernel, the check adds the task's ``place_hint``.
PLACE_HINT_AFTER = 3
#: What a bug hunt's failed check suggests besides the symptom (it names no line and no fix).
BUG_HUNT_HINT = ("run the function you were given on this case and compare each intermediate value with a hand "
                 "computation from the chapter: the first one that differs is computed on the wrong line.")

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
    kind: str | None = None             # with an error: "wrong" (not the right structure), "error", "refused"


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
    if task.returns_number:
        number = result.item() if isinstance(result, torch.Tensor) and result.numel() == 1 else result
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ValueError(f"{task.outputs[0]} should be a number, got {_describe(result)}")
        return (torch.tensor(float(number), dtype=torch.float64),)
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


def _refused_by(err: BaseException) -> str:
    """`` (called by your `quantized_keys`)``: the student's function that made the refused call, or ""."""
    name = refusing_caller(err)
    return f" (called by your `{name}`)" if name else ""


def _evaluate(task: Task, fn: Callable, case: Case, weights: list | None, student: bool) -> _Evaluation:
    """Run ``fn`` on a fresh copy of the case's inputs; with ``weights``, also take gradients."""
    want_grad = case.grad != "none" and weights is not None
    args = _clone_args(case, want_grad)
    try:
        result = call_student(fn, *args, **case.kwargs) if student else fn(*args, **case.kwargs)
    except NotImplementedError as err:
        raise _NotImplemented() from err
    except (Exception, SystemExit) as err:  # the student's code may raise anything (even sys.exit)
        if not student:
            raise
        kind = "refused" if isinstance(err, AnswerRefused) else "error"
        caller = _refused_by(err) if kind == "refused" else ""
        return _Evaluation(error=f"raised {type(err).__name__}: {err}{caller}", kind=kind)
    try:
        outputs = _structure(task, result)
    except ValueError as err:
        return _Evaluation(error=str(err), kind="wrong")
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
        kind = "refused" if isinstance(err, AnswerRefused) else "error"
        caller = _refused_by(err) if kind == "refused" else ""
        return _Evaluation(outputs=ev.outputs, error=f"backward pass raised {type(err).__name__}: {err}{caller}",
                           kind=kind)
    ev.grads = tuple(None if g is None else g.detach() for g in grads)
    return ev


def _mismatch(name: str, got: torch.Tensor, want: torch.Tensor, task: Task | None = None,
              symptom: bool = False) -> str | None:
    """None if ``got`` matches ``want`` (within the task's tolerance, if it states one); else what differs (with
    ``symptom`` or in a bug hunt: where, expected against got)."""
    if tuple(got.shape) != tuple(want.shape):
        return f"{name} has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"{name} has dtype {got.dtype}, expected {want.dtype} (keep the input's dtype)"
    g, w = got.double(), want.double()
    if not torch.isfinite(g).all() and torch.isfinite(w).all():
        return f"nan or inf in {name}"
    scale = max(1.0, float(w.abs().max())) if w.numel() else 1.0
    rtol = RTOL if task is None or task.rtol is None else task.rtol
    atol = ATOL * scale if task is None or task.atol is None else task.atol
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


def _compare(task: Task, case: Case, got: _Evaluation, want: _Evaluation, input_names: list) -> str | None:
    if got.error:
        return got.error
    for name, g, w in zip(task.outputs, got.outputs, want.outputs):
        problem = _mismatch(name, g, w, task)
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
        problem = _mismatch(f"gradient w.r.t. {name}", g, w, symptom=task.kind == "bug hunt")
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


@dataclass
class Expected:
    """One case as the grader knows it before any student code runs: the case (its inputs), the weights
    of the random projection whose gradient is compared (None: values only) and the reference's result."""

    case: Case
    weights: list | None
    want: _Evaluation


def expected(task: Task, cached: bool = False) -> list[Expected]:
    """The reference's outputs (and gradients) on every case of ``task``, in case order.

    With ``cached``, they are read from the reference cache when it has them for this package and torch, and
    kept there after they are computed (:mod:`.reference_cache`): a second process answers at once.
    """
    from . import reference_cache

    cases = task.cases()
    if cached:
        kept = reference_cache.load(task, cases)
        if kept is not None:
            return [Expected(case, weights, want) for case, (weights, want) in zip(cases, kept)]
    out = []
    for index, case in enumerate(cases):
        want0 = _evaluate(task, task.reference, case, None, student=False)
        weights = _weights(index, want0.outputs) if case.grad != "none" else None
        out.append(Expected(case, weights, _evaluate(task, task.reference, case, weights, student=False)))
    if cached:
        reference_cache.save(task, out)
    return out


def run_student(task: Task, fn: Callable, cases: Sequence[Expected], refuse: bool = True,
                also_allowed: tuple = ()) -> list[_Evaluation]:
    """Run the student's ``fn`` on fresh copies of the cases' inputs, in order, stopping after one that fails
    to produce tensors — unless the task gives partial credit by case group, when every case runs. With
    ``refuse``, the task's answers raise while it runs, and so does every other package function it calls
    that the task does not allow (:func:`.lock.denied`; the grader's child has them refused for good);
    ``also_allowed``: qualified names allowed besides ``task.allowed`` (the stand-ins of :func:`stand_ins`).

    Raises ``_NotImplemented`` when the function is a stub (raises NotImplementedError, returns ``...``).
    """
    results = []
    every_case = len(task.groups()) > 1
    gated = replace(task, allowed=task.allowed + tuple(also_allowed)) if also_allowed else task
    with (denied(gated) if refuse else contextlib.nullcontext()):
        for e in cases:
            got = _evaluate(task, fn, e.case, e.weights, student=True)
            results.append(got)
            if got.error and not every_case:
                break
    return results


def credit(task: Task, cases: Sequence[Expected], got: Sequence[_Evaluation]) -> tuple[float, list[str]]:
    """``(fraction of the task's points earned, the case groups failed)``: each case group is worth an equal
    share and is earned when every case in it matches the reference (a task of one group: all or nothing)."""
    failed = []
    for index, e in enumerate(cases):
        ok = index < len(got) and _compare(task, e.case, got[index], e.want, _input_names(task, e.case)) is None
        if not ok and e.case.group not in failed:
            failed.append(e.case.group)
    groups = list(dict.fromkeys(e.case.group for e in cases))
    return (len(groups) - len(failed)) / len(groups), failed


def earned_points(task: Task, fraction: float) -> float:
    """The points for ``fraction`` of ``task``: a whole number when it is one, else rounded to 0.01."""
    points = round(task.points * fraction, 2)
    return int(points) if points == int(points) else points


def verdict(task: Task, cases: Sequence[Expected], got: Sequence[_Evaluation]) -> tuple[str, str | None, str]:
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
            for k, wrong in enumerate(task.wrong_answers):
                mistaken = _mistake(task, k, e)
                if mistaken is not None and mistaken.error is None and \
                        _compare(task, e.case, g, mistaken, input_names) is None:
                    hint = wrong.hint
                    break
        return status, f"{problem} on case '{e.case.name}'", hint
    return "passed", None, ""


def _mistake(task: Task, index: int, e: Expected) -> _Evaluation | None:
    """What the task's known mistake ``index`` gives on the case of ``e`` (None: it is not implemented there), from
    the reference cache when it was kept (a mistake of an experiment trains networks), else run and kept."""
    from . import reference_cache

    memo = (task.id, id(task), index, e.case.name)
    if memo in _MISTAKES:
        return _MISTAKES[memo]
    mistaken = reference_cache.load_mistake(task, index, e.case.name)
    if mistaken is None:
        try:
            mistaken = _evaluate(task, task.wrong_answers[index].fn, e.case, e.weights, student=True)
        except _NotImplemented:
            return None
        reference_cache.save_mistake(task, index, e.case.name, mistaken)
    _MISTAKES[memo] = mistaken
    return mistaken


_MISTAKES: dict = {}  # (task id, task object, mistake, case) → its evaluation, once per process
_FAILED_CHECKS: dict = {}  # bug hunt id → failed checks in this process (the place hint comes after a few)


_CHECKED: dict = {}   # task id → (the task, its expected cases): check's reference answers, once per process


def _checked_cases(task: Task) -> list[Expected]:
    """:func:`expected` of ``task``, computed at its first :func:`check` (or read from the reference cache on disk)
    and kept for the process: the cases are seeded, so a second check of the same task (a student trying again,
    in this kernel or after a restart) compares at once instead of running the reference again (for an
    experiment, training its networks again)."""
    kept = _CHECKED.get(task.id)
    if kept is None or kept[0] is not task:
        kept = _CHECKED[task.id] = (task, expected(task, cached=True))
    return kept[1]


def _run_checks(task: Task, fn: Callable, also_allowed: tuple = ()) -> tuple[str | None, str, float, list]:
    """(None, "", 1.0, []) if ``fn`` passes every case, else (what differed, hint, fraction of the points
    earned, case groups failed). In-process: feedback only."""
    cases = _checked_cases(task)
    got = run_student(task, fn, cases, also_allowed=also_allowed)
    status, problem, hint = verdict(task, cases, got)
    fraction, failed = credit(task, cases, got)
    return problem, hint, 0.0 if status == "refused" else fraction, failed


# ---------------------------------------------------------------- a task graded on its own function

def stand_in_name(task: Task) -> str:
    """The qualified name of ``task.stand_in`` (``capsule_lab.grading.tasks_05._stand_in_keys``): what the task
    that uses it is allowed to call while it stands in."""
    return f"{task.stand_in.__module__}.{task.stand_in.__qualname__}"


def stand_in_note(replaced: Sequence[Task], verb: str) -> str:
    """`` (checked with the course's `quantized_keys` in place of yours, which does not pass 05.quantize_keys: this
    task counts on its own)``, or "" when nothing stood in."""
    if not replaced:
        return ""
    names = " and ".join(f"`{t.function}`" for t in replaced)
    which = "which does" if len(replaced) == 1 else "which do"
    return (f" ({verb} with the course's {names} in place of yours, {which} not pass "
            f"{' and '.join(t.id for t in replaced)}: this task counts on its own)")


def _failing_uses(task: Task, fn: Callable) -> list[Task]:
    """The earlier tasks ``task`` uses whose function, as the student's ``fn`` finds it (a global of the notebook,
    ``fn.__globals__``), is missing or does not pass its own check."""
    namespace = getattr(fn, "__globals__", None)
    out = []
    for used in (get_task(u) for u in task.uses):
        own = namespace.get(used.function) if isinstance(namespace, dict) else None
        try:
            passes = callable(own) and _run_checks(used, own)[0] is None
        except _NotImplemented:
            passes = False
        if not passes:
            out.append(used)
    return out


@contextlib.contextmanager
def stand_ins(namespace: dict, replaced: Sequence[Task]):
    """Within the block, the notebook's ``namespace`` holds each replaced task's ``stand_in`` under the name of the
    student's function for it; the student's own (or its absence) is put back on leaving."""
    missing = object()
    saved = {t.function: namespace.get(t.function, missing) for t in replaced}
    try:
        for t in replaced:
            namespace[t.function] = t.stand_in
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = value


# ---------------------------------------------------------------- passing results between processes

def to_record(ev: _Evaluation) -> dict:
    """A result as plain data (dicts, lists, str, bool and plain CPU tensors), for ``torch.save``."""
    def plain(t):
        return None if t is None else t.detach().as_subclass(torch.Tensor).to("cpu").contiguous().clone()

    return {"outputs": None if ev.outputs is None else [plain(t) for t in ev.outputs],
            "grads": None if ev.grads is None else [plain(t) for t in ev.grads],
            "differentiable": bool(ev.differentiable), "error": ev.error, "kind": ev.kind}


def from_record(record, task: Task) -> _Evaluation:
    """The inverse of :func:`to_record`, checking every field: ``ValueError`` for anything malformed."""
    def tensor(t, what):
        if type(t) is not torch.Tensor or t.layout != torch.strided or t.device.type != "cpu" or t.requires_grad:
            raise ValueError(f"{what} is not a plain CPU tensor")
        return t

    if not isinstance(record, dict) or set(record) != {"outputs", "grads", "differentiable", "error", "kind"}:
        raise ValueError("malformed result")
    error, kind = record["error"], record["kind"]
    if not (error is None or isinstance(error, str)) or kind not in (None, "wrong", "error", "refused"):
        raise ValueError("malformed error")
    if not isinstance(record["differentiable"], bool):
        raise ValueError("malformed flag")
    outputs, grads = record["outputs"], record["grads"]
    if outputs is not None:
        if not isinstance(outputs, list) or len(outputs) != len(task.outputs):
            raise ValueError("wrong number of outputs")
        outputs = tuple(tensor(t, "an output") for t in outputs)
    if grads is not None:
        if not isinstance(grads, list):
            raise ValueError("malformed gradients")
        grads = tuple(None if t is None else tensor(t, "a gradient") for t in grads)
    if error is None and outputs is None:
        raise ValueError("neither outputs nor an error")
    return _Evaluation(outputs=outputs, grads=grads, differentiable=record["differentiable"],
                       error=error[:2000] if error else error, kind=kind)


# ---------------------------------------------------------------- check()

@dataclass
class CheckResult:
    """The outcome of :func:`check`: task id, passed, points earned, points possible, message."""

    task: str
    passed: bool
    points: float
    max_points: int
    message: str

    def line(self) -> str:
        """The one-line summary :func:`check` prints."""
        if self.passed:
            return f"✔ {self.task} passed ({self.points}/{self.max_points} points)"
        if self.points:
            return f"✘ {self.task} partly passed ({self.points}/{self.max_points} points): {self.message}"
        return f"✘ {self.task} failed: {self.message}"

    def _ipython_display_(self):
        # check() has already printed the line; in a notebook, `check(...)` as a cell's last
        # expression would otherwise print the same result a second time.
        if not getattr(self, "_printed", False):
            sys.stdout.write(self.line() + "\n")

    def to_dict(self) -> dict:
        return asdict(self)


def check(task_id: str, fn: Callable, verbose: bool = True) -> CheckResult:
    """Check a student's function for the exercise ``task_id`` against the course's reference.

    Runs ``fn`` and the reference on seeded random and edge-case inputs (float32 and float64), compares
    the values (relative tolerance 1e-5) and, where the task is differentiable, the gradients. Anything
    the function raises counts as a failure, reported with its message; a function that returns
    ``...``/``None`` or raises ``NotImplementedError`` is "not implemented yet".

    While ``fn`` runs, the package functions that are the task's answer raise ("this task asks for your
    own implementation"): an answer that calls them fails with status ``refused``.

    Prints ``✔ 02.routing_step passed (2/2 points)`` or ``✘ 02.routing_step failed: <what differed, on
    which case> — hint: <hint>`` (unless ``verbose=False``) and returns a :class:`CheckResult`. A bug hunt's
    message gives the symptom only (the case, expected against got); from its :data:`PLACE_HINT_AFTER`-th failed
    check in this kernel on, it adds the task's second hint, which narrows the place, never the fix. This is
    feedback in the student's kernel; ``capsule-lab grade`` scores the notebook on its own (in the kernel it runs the
    notebook in, :data:`GRADING_KERNEL_ENV` is set and ``check`` runs nothing).

    Tasks: see :data:`~capsule_lab.grading.tasks.TASKS` (chapters 01–07). Unknown ids raise ``ValueError``.
    """
    task = get_task(task_id)
    if os.environ.get(GRADING_KERNEL_ENV) == "1":
        result = CheckResult(task.id, False, 0.0, task.points, "not checked in the grader's kernel")
        if verbose:
            sys.stdout.write(f"– {task.id} not checked while the notebook is graded: the grade comes from the "
                             "grader's own evaluation\n")
            result._printed = True
        return result
    fraction, failed, replaced = 0.0, [], []
    if not callable(fn):
        if fn is None or fn is Ellipsis:
            problem, hint = NOT_IMPLEMENTED, task.hint
        else:
            problem, hint = f"expected a function, got {_describe(fn)}", task.hint
    else:
        try:
            replaced = _failing_uses(task, fn) if task.uses else []
            with (stand_ins(fn.__globals__, replaced) if replaced else contextlib.nullcontext()):
                problem, hint, fraction, failed = _run_checks(task, fn, tuple(stand_in_name(t) for t in replaced))
        except _NotImplemented:
            problem, hint = NOT_IMPLEMENTED, task.hint
    passed = problem is None
    if not passed and task.kind == "bug hunt" and problem != NOT_IMPLEMENTED:
        _FAILED_CHECKS[task.id] = _FAILED_CHECKS.get(task.id, 0) + 1
        if _FAILED_CHECKS[task.id] >= PLACE_HINT_AFTER:     # repeated failures: narrow the place, never the fix
            hint = f"{hint} Second hint: {task.place_hint}"
    message = f"passed all {len(task.cases())} cases" if passed else f"{problem} — hint: {hint}"
    if not passed and fraction > 0:
        message += f" (case groups failed: {', '.join(failed)})"
    message += stand_in_note(replaced, "checked")
    result = CheckResult(task.id, passed, task.points if passed else earned_points(task, fraction), task.points,
                         message)
    if verbose:
        sys.stdout.write(result.line() + "\n")  # one write: the line reaches a notebook as one output
        result._printed = True
    return result
