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

Predictions return a number the student works out, and experiments take seeds as literal arguments: neither has
hidden cases (a table of their answers is the same as knowing them; see the instructors' guide). The report records
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

__all__ = ["HIDDEN_KINDS", "HIDDEN_PREFIX", "draw", "new_nonce", "hidden_cases", "hidden_expected"]

#: The kinds of task that get hidden cases.
HIDDEN_KINDS = ("implement", "bug hunt")
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


def hidden_cases(task: Task, number: int) -> list[Case]:
    """``task``'s cases built again under the draw ``number``: each one whose inputs differ from its published
    twin's, named ``"hidden: <published name>"``, in the same group, marked ``hidden``. None for a prediction or an
    experiment (:data:`HIDDEN_KINDS`)."""
    if task.kind not in HIDDEN_KINDS:
        return []
    published = task.cases()
    with drawn(number):
        again = task.cases()
    if [c.name for c in again] != [c.name for c in published]:
        raise ValueError(f"task {task.id}: its cases change names under a draw; a case's name must not depend on "
                         "the random numbers")
    return [dataclasses.replace(c, name=HIDDEN_PREFIX + c.name, hidden=True) for c, p in zip(again, published)
            if not (_same(c.args, p.args) and _same(c.kwargs, p.kwargs))]


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
