"""The students' feedback: :func:`check` runs a student's function on a task's cases and prints the verdict,
:class:`CheckResult`; and how a task that uses earlier tasks' functions counts on its own (the stand-ins).

Used by every chapter's exercise notebook (chapters 01–08)::

    from capsule_lab.grading import check
    check("01.squash", squash)          # prints ✔ or ✘ with a hint, returns a CheckResult

:func:`check` runs the student's function and the task's reference on the same inputs (the task's
:class:`~capsule_lab.grading.tasks.registry.Case` list, float32 and float64) and compares the values and, where the
task is differentiable, the gradients of a fixed random projection of the outputs (so that a stray
``detach`` is caught too). When an answer is wrong and matches a known mistake, the hint names the mistake.
While the student's function runs, the functions that are the task's answer refuse to run, and so does every
other function of the package the task does not allow (deny by default, :mod:`.lock`).

:func:`check` is feedback, not the grade: it runs in the student's own kernel, where the student's code
can change anything. The grader (:mod:`.evaluation`) uses the same three steps apart:
:func:`~.running.expected` (the reference, in the grader's process, before any student code),
:func:`~.running.run_student` (in a child process it owns; the results travel as
:func:`~.records.to_record` plain tensors) and :func:`~.judging.verdict` (back in the grader's process).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import secrets
import sys
from dataclasses import asdict, dataclass, replace
from typing import Callable, Sequence

from ..tasks.registry import Task, get_task
from .hidden import redrawn_cases
from .judging import credit, earned_points, verdict
from .running import NOT_IMPLEMENTED, Expected, StubAnswer, describe_value, expected, run_student

__all__ = ["PLACE_HINT_AFTER", "NO_LINE_HINT", "second_hint", "GRADING_KERNEL_ENV", "CheckResult", "check",
           "stand_ins", "stand_in_name", "stand_in_note"]

#: Set (to "1") in the environment of the kernel ``capsule-lab grade`` runs a notebook in: there a ``check(...)``
#: cell only prints that it was not run — the grade comes from the grader's own evaluation, and a check that trains
#: networks (08's mini-experiment) would only double the time.
GRADING_KERNEL_ENV = "CAPSULE_LAB_GRADING_KERNEL"
#: After this many failed checks of a bug hunt in one kernel, the check adds its second hint (:func:`second_hint`).
PLACE_HINT_AFTER = 3

#: The second hint where none of the given code's wrong lines is left in the student's function, or its source
#: cannot be read: it names no line.
NO_LINE_HINT = ("the given code's wrong lines are no longer in your function as given; what the check shows now comes "
                "from the function as it is: compare it, step by step, with the task's list.")


def _code(source: str) -> str:
    """``source`` without comments and whitespace, for finding a line in it."""
    return re.sub(r"\s+", "", "\n".join(line.split("#", 1)[0] for line in source.splitlines()))


def second_hint(task: Task, fn: Callable) -> str:
    """A bug hunt's second hint for the function in front of it: ``task.place_hint`` while every planted line of the
    given code is still in ``fn`` (comments and spacing aside), the places of those left where some are fixed,
    :data:`NO_LINE_HINT` where none is left or ``fn``'s source cannot be read. Chapters 01-08 (the exercises)."""
    try:
        code = _code(inspect.getsource(fn))
    except (OSError, TypeError):
        return NO_LINE_HINT
    left = [where for line, where in task.planted if _code(line) in code]
    if len(left) == len(task.planted):
        return task.place_hint
    if left:
        return (f"{len(task.planted) - len(left)} of the given code's {len(task.planted)} wrong lines "
                f"{'is' if len(task.planted) - len(left) == 1 else 'are'} changed; still as given: {'; '.join(left)}.")
    return NO_LINE_HINT

_FAILED_CHECKS: dict = {}  # bug hunt id → failed checks in this process (the place hint comes after a few)

_CHECKED: dict = {}   # task id → (the task, its expected cases): check's reference answers, once per process


def fresh_draw() -> int:
    """The draw of one check's drawn cases (an experiment's seeds, :func:`~.hidden.redrawn_cases`): new at every call,
    so that no table of answers holds them."""
    return secrets.randbits(63)


def _checked_cases(task: Task) -> list[Expected]:
    """:func:`~.running.expected` of ``task``, computed at its first :func:`check` (or read from the reference cache on
    disk) and kept for the process: the cases are seeded, so a second check of the same task (a student trying again,
    in this kernel or after a restart) compares at once instead of running the reference again (for an
    experiment, training its networks again). An experiment's cases whose seeds are drawn (08's) are the exception:
    they are drawn afresh for every check (:func:`fresh_draw`) and the reference runs on them every time; its fixed
    cases (08's seed 0) are kept on disk like any other task's."""
    pairs = redrawn_cases(task, fresh_draw())
    kept = _CHECKED.get(task.id)
    if kept is None or kept[0] is not task:
        fixed = [case for case, drawn in pairs if not drawn]
        kept = _CHECKED[task.id] = (task, expected(replace(task, cases=lambda: fixed), cached=True))
    drawn_now = [case for case, drawn in pairs if drawn]
    known, fresh = iter(kept[1]), iter(expected(replace(task, cases=lambda: drawn_now)) if drawn_now else ())
    return [next(fresh) if drawn else next(known) for _, drawn in pairs]


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
    """The qualified name of ``task.stand_in`` (``capsule_lab.grading.tasks.ch05._stand_in_keys``): what the task
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
        except StubAnswer:
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

    Tasks: see :data:`~capsule_lab.grading.tasks.registry.TASKS` (chapters 01–08). Unknown ids raise ``ValueError``.
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
            problem, hint = f"expected a function, got {describe_value(fn)}", task.hint
    else:
        try:
            replaced = _failing_uses(task, fn) if task.uses else []
            with (stand_ins(fn.__globals__, replaced) if replaced else contextlib.nullcontext()):
                problem, hint, fraction, failed = _run_checks(task, fn, tuple(stand_in_name(t) for t in replaced))
        except StubAnswer:
            problem, hint = NOT_IMPLEMENTED, task.hint
    passed = problem is None
    if not passed and task.kind == "bug hunt" and problem != NOT_IMPLEMENTED:
        _FAILED_CHECKS[task.id] = _FAILED_CHECKS.get(task.id, 0) + 1
        if _FAILED_CHECKS[task.id] >= PLACE_HINT_AFTER:     # repeated failures: narrow the place, never the fix
            hint = f"{hint} Second hint: {second_hint(task, fn)}"
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
