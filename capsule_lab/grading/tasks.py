"""The task framework of the grading checks (chapters 01 and 02): what a graded exercise is, and the registry.

A :class:`Task` holds the course's reference implementation, the :class:`Case` inputs a student's
function is compared on and the hints (a general one, and one per known mistake, :class:`WrongAnswer`).
:func:`check <capsule_lab.grading.checking.check>` looks tasks up here by id (``"02.routing_step"``).

Each chapter's tasks live in their own module, which builds its tasks and hands them to :func:`register`:
``tasks_01.py`` (chapter 01: ``01.squash``, ``01.margin_loss``, ``01.primary_capsules``) and
``tasks_02.py`` (chapter 02: ``02.couplings``, ``02.routing_step``, ``02.dynamic_routing``). Later
chapters add ``tasks_03.py``, ``tasks_04.py``, … the same way, and one import line in
``capsule_lab/grading/__init__.py``, which imports the chapter modules so that the registry is complete
as soon as ``capsule_lab.grading`` is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

__all__ = ["Case", "WrongAnswer", "Task", "TASKS", "ALIASES", "register", "task_ids", "get_task",
           "tasks_for_chapter", "generator", "randn"]


@dataclass(frozen=True)
class Case:
    """One input on which a student's function is compared with the reference.

    ``grad``: ``"compare"`` (gradients of a fixed random projection of the outputs must match the
    reference's), ``"finite"`` (they must only be finite, e.g. at s = 0) or ``"none"``.
    """

    name: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    grad: str = "compare"


@dataclass(frozen=True)
class WrongAnswer:
    """A known mistake: if the student's answer behaves like ``fn``, the check prints ``hint``."""

    label: str
    fn: Callable
    hint: str


@dataclass(frozen=True)
class Task:
    """A graded exercise: the reference, the inputs it is checked on and the hints.

    ``outputs`` names the tensors the function returns (one name: a single tensor; several: a tuple);
    ``input_names`` the floating-point inputs, for messages about gradients (default: "argument 1", …).
    """

    id: str
    title: str
    points: int
    reference: Callable
    cases: Callable[[], list]
    hint: str
    outputs: tuple = ("output",)
    wrong_answers: tuple = ()
    nonfinite_hint: str = ""
    input_names: tuple = ()

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]


#: The registered tasks by id, in registration order (chapter by chapter); filled by :func:`register`.
TASKS: dict[str, Task] = {}

#: Other names accepted by :func:`check <capsule_lab.grading.checking.check>` (the instructors' guide uses
#: ``02.routing``); filled by :func:`register`.
ALIASES: dict[str, str] = {}


def register(*tasks: Task, aliases: dict[str, str] | None = None) -> None:
    """Add a chapter's tasks (and other names for them) to the registry; each chapter's module calls this once.

    Raises ``ValueError`` for an id that is already registered or an alias of an unknown task.
    """
    for task in tasks:
        if task.id in TASKS or task.id in ALIASES:
            raise ValueError(f"task {task.id!r} is already registered")
        TASKS[task.id] = task
    for alias, target in (aliases or {}).items():
        if alias in TASKS or alias in ALIASES:
            raise ValueError(f"task {alias!r} is already registered")
        if target not in TASKS:
            raise ValueError(f"alias {alias!r} names the unknown task {target!r}")
        ALIASES[alias] = target


def task_ids() -> list[str]:
    """All task ids, sorted. Chapters 01–02."""
    return sorted(TASKS)


def get_task(task_id: str) -> Task:
    """The :class:`Task` with this id (or alias); ``ValueError`` listing the known tasks otherwise."""
    tid = ALIASES.get(task_id, task_id) if isinstance(task_id, str) else task_id
    if tid not in TASKS:
        raise ValueError(f"unknown task {task_id!r}: known tasks are {', '.join(task_ids())}")
    return TASKS[tid]


def tasks_for_chapter(chapter: str) -> list[Task]:
    """The tasks of one chapter (``"01"`` → every ``01.*`` task), in registry order."""
    return [t for t in TASKS.values() if t.chapter == chapter]



# ---------------------------------------------------------------- helpers for the chapters' cases

def generator(seed: int) -> torch.Generator:
    """A CPU random generator with this seed: every task's cases are the same on every run."""
    return torch.Generator().manual_seed(seed)


def randn(gen, *shape, dtype=torch.float32, scale=1.0):
    """Standard normal values (drawn in float64, so that both dtypes see the same numbers) times ``scale``."""
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)
