"""Hidden cases: inputs ``grade`` draws for each notebook from the instructor's secret, besides the published cases
that ``check`` shows (``capsule-lab grade``; the implementations and bug hunts of exercises 01–08).

The published cases are fixed (every task seeds its inputs, :func:`~capsule_lab.grading.tasks.registry.generator`)
and named in the feedback, so a table of their answers — computed with the package in another notebook and pasted
as literals — would pass them. The grader therefore draws, for every notebook, a number from the instructor's key
and a fresh nonce (:func:`draw`: the HMAC of the nonce under the key) and builds each task's cases again with that
draw mixed into every seed (:func:`~capsule_lab.grading.tasks.registry.drawn`): the same shapes, dtypes, groups and
edge cases (zero rows, long and tiny vectors) on other numbers. A case whose inputs come out the same (a literal,
``torch.zeros``) is left out; what remains joins its group, so a group earns its points only when its published and
its hidden cases pass. The reference's answers on them are computed here, outside the sandbox, before any of the
notebook's code runs, and never cached (they differ for every notebook).

Predictions return a number the student works out: they have no hidden cases (a table of their answers is the same
as knowing them). An experiment's case gets a hidden twin where it takes its seed from
:func:`~capsule_lab.grading.tasks.registry.case_seed` (every seed but 0, in the experiments of exercises 05-08): a
case whose seed the exercise names, whose answer the student could copy (a failing check shows the expected
number), would otherwise pass by a lookup. ``check`` too runs such a case on a seed drawn afresh at every call
(:func:`redrawn_cases`), so that a lookup fails there as well; seed 0's cases stay as they are (an exercise may print
their answers), and every case group holds a drawn case.
The report records
the nonce (``hidden_draw``): with the key, the instructor draws the same cases again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from typing import Sequence

import torch

from ..tasks.registry import Case, Task, drawn
from .running import Expected, expected

__all__ = ["HIDDEN_KINDS", "HIDDEN_PREFIX", "draw", "new_nonce", "hidden_cases", "hidden_expected", "redrawn_cases",
           "fixed_cases", "graded_cases"]

#: The kinds of task that get hidden cases.
HIDDEN_KINDS = ("implement", "bug hunt", "experiment")
#: How a hidden case's name starts (the rest is the published case's name it mirrors).
HIDDEN_PREFIX = "hidden: "


def new_nonce() -> str:
    """A fresh nonce for one notebook's draw (16 hex digits)."""
    return secrets.token_hex(8)


def draw(key: bytes, nonce: str) -> int:
    """The draw of hidden cases for ``nonce`` under the instructor's ``key``: the first 63 bits of
    HMAC-SHA256(key, nonce). Without the key, knowing the nonce tells nothing of the cases."""
    if not isinstance(key, bytes) or len(key) < 16:
        raise ValueError(f"the instructor's key must be bytes (at least 16), got {type(key).__name__}")
    if not isinstance(nonce, str) or not nonce:
        raise ValueError(f"a nonce must be a non-empty string, got {nonce!r}")
    digest = hmac.new(key, b"hidden cases\0" + nonce.encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _drawn_twins(task: Task, number: int) -> list[Case | None]:
    """For each published case of ``task``, its twin built under the draw ``number``, or None where the inputs come
    out the same. The twins keep their groups (a name may change: a drawn seed names itself)."""
    published = task.cases()
    with drawn(number):
        again = task.cases()
    if [c.group for c in again] != [c.group for c in published]:
        raise ValueError(f"task {task.id}: its cases change groups under a draw; a case's group must not depend on "
                         "the random numbers")
    return [None if _same(c.args, p.args) and _same(c.kwargs, p.kwargs) else c for c, p in zip(again, published)]


def hidden_cases(task: Task, number: int) -> list[Case]:
    """``task``'s cases built again under the draw ``number``: each one whose inputs differ from its published
    twin's, named ``"hidden: <its name>"``, in the same group, marked ``hidden``. None for a prediction
    (:data:`HIDDEN_KINDS`), nor for an experiment's case on a literal seed (seed 0)."""
    if task.kind not in HIDDEN_KINDS:
        return []
    return [dataclasses.replace(c, name=HIDDEN_PREFIX + c.name, hidden=True)
            for c in _drawn_twins(task, number) if c is not None]


def redrawn_cases(task: Task, number: int) -> list[tuple[Case, bool]]:
    """What ``check`` runs of an experiment: its published cases in order, each that changes under the draw
    ``number`` (a seed from :func:`~capsule_lab.grading.tasks.registry.drawn_seed`) replaced by its drawn twin, as
    ``(case, drawn)`` pairs. Every other kind: the published cases, none drawn (its hidden cases are grade's)."""
    published = task.cases()
    if task.kind != "experiment":
        return [(c, False) for c in published]
    return [(p, False) if c is None else (c, True) for c, p in zip(_drawn_twins(task, number), published)]


def fixed_cases(task: Task) -> list[Case]:
    """The published cases of ``task`` that no draw changes: all of them, but for an experiment only those on a
    literal seed (seed 0; :func:`~capsule_lab.grading.tasks.registry.case_seed`). The reference's answers on them are
    the ones kept on disk, by ``check`` and by ``grade``; an experiment's other cases run only on drawn seeds."""
    return [case for case, drawn_now in redrawn_cases(task, 0) if not drawn_now]


def hidden_expected(tasks: Sequence[Task], number: int) -> dict[str, list[Expected]]:
    """``{task id: [Expected]}``: the hidden cases of each of ``tasks`` under the draw ``number`` with the
    reference's answers, computed here (the projection weights of the gradient check drawn too); never cached."""
    out = {}
    for task in tasks:
        cases = hidden_cases(task, number)
        if cases:
            with drawn(number):
                out[task.id] = expected(dataclasses.replace(task, cases=lambda cases=cases: cases))
    return out


def graded_cases(task: Task, published: Sequence[Expected], hidden: Sequence[Expected]) -> list[Expected]:
    """What ``grade`` runs of ``task``: its published cases, then its hidden ones. For an experiment a drawn case's
    hidden twin takes its published one's place (08's seeds 1 and 2 stand for seeds drawn anew): each drawn seed
    trains once, and the student's function runs on no seed it could have been told."""
    if task.kind != "experiment" or not hidden:
        return [*published, *hidden]
    fixed = {case.name for case in fixed_cases(task)}
    return [e for e in published if e.case.name in fixed] + list(hidden)
