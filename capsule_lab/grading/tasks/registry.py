"""The task framework of the grading checks (chapters 01–08): what a graded exercise is, and the registry.

A :class:`Task` holds the course's reference implementation, the :class:`Case` inputs a student's
function is compared on, the hints (a general one, and one per known mistake, :class:`WrongAnswer`), the
name of the function the student writes in the exercise notebook (``function``), the package
functions that *are* the answer (``answers``) and what of the package the student's function may call
(``allowed``): while the student's function is checked or graded, the answers refuse to run, and so does
every other function of the package that the task does not allow (deny by default, see
:mod:`capsule_lab.grading.engine.lock`). :func:`check <capsule_lab.grading.engine.checking.check>`
and the grader look tasks up here by id (``"02.routing_step"``); the registry, not the notebook, says
which tasks a chapter has.

Each chapter's tasks live in their own module of :mod:`capsule_lab.grading.tasks`, which builds its tasks and hands
them to :func:`register`: ``ch01.py`` (chapter 01: ``01.squash``, ``01.margin_loss``, ``01.primary_capsules``, …),
``ch02.py`` (chapter 02: ``02.couplings``, ``02.routing_step``, ``02.dynamic_routing``, …),
``ch03.py`` (chapter 03, gradients through routing), ``ch04.py`` (chapter 04, dead capsules),
``ch05.py`` (chapter 05, REM: ``05.quantize_keys``, ``05.class_entropy``, ``05.flip_entropy``,
``05.global_prune``, ``05.entropy_vs_iterations``), ``ch06.py`` (chapter 06, the ladder capsule network:
``06.top_k``, ``06.regression``, ``06.gamma_activation``, ``06.ladder_forward``, ``06.activity_under_noise``) and
``ch07.py`` (chapter 07, learned routing: ``07.closed_form``, ``07.kernel_mixture``, ``07.predict_coupling``,
``07.similarity_loop``, ``07.entropy_vs_lambda``) and ``ch08.py`` (chapter 08, the routing bench:
``08.summary``, ``08.mcnemar``, ``08.predict_p_value``, ``08.new_router``). A later chapter adds its ``chNN.py``
the same way, and one import line in ``capsule_lab/grading/tasks/__init__.py``, which imports the chapter modules
so that the registry is complete as soon as anything of :mod:`capsule_lab.grading.tasks` is imported.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

__all__ = ["Case", "WrongAnswer", "Task", "KINDS", "TASKS", "register", "task_ids", "get_task",
           "tasks_for_chapter", "generator", "randn", "drawn", "drawn_seed", "case_seed"]


@dataclass(frozen=True)
class Case:
    """One input on which a student's function is compared with the reference.

    ``grad``: ``"compare"`` (gradients of a fixed random projection of the outputs must match the
    reference's), ``"finite"`` (they must only be finite, e.g. at s = 0) or ``"none"``. ``group``: the case
    group it belongs to (e.g. ``"float64"``, ``"zero vectors"``); a task whose cases form several groups
    gives partial credit, its points shared equally among the groups, each earned when all its cases pass.
    The exercise lists the groups, so that no case surprises the student. ``hidden``: a case ``grade`` drew for one
    notebook, like a published case of the same name but on other random inputs (``check`` never runs one).
    """

    name: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    grad: str = "compare"
    group: str = ""
    hidden: bool = False


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
    ``input_names`` the floating-point inputs, for messages about gradients (default: "argument 1", …);
    ``function`` the name the exercise notebook gives the student's function (the grader looks it up);
    ``answers`` the package functions that compute the answer (the reference is always one of them);
    ``allowed`` the qualified names of what of the package the student's function may call
    (``"capsule_lab.studies.bench.runner.run_router_bench"``; a class: constructing it and its methods), default
    nothing: everything else of the package refuses to run while it does (:mod:`.lock`), and the task's
    statement in the exercise says what it may call.

    Three kinds of task, one framework (CONTRIBUTING.md, "Exercises"): an implementation (the student
    writes a function of the chapter, or fixes a planted bug in one, a *bug hunt*), a *prediction* (a
    function of no arguments that returns the student's predicted number, written before the experiment
    that measures it) and a *mini-experiment* (a function that runs a small experiment and returns its
    measured number). ``kind`` says which: ``"implement"``, ``"bug hunt"``, ``"prediction"`` or
    ``"experiment"``. ``returns_number``: the function returns a plain number (compared as a float64
    scalar); ``rtol``/``atol``: the tolerance of the comparison (default the checker's tight one; a
    prediction or an experiment states its band, ``atol`` absolute, not scaled).

    ``uses``: the ids of earlier tasks of the chapter whose functions the student's function calls by name (05's
    mini-experiment calls the student's ``quantized_keys`` and ``class_entropy``); ``stand_in``: for a task that
    later tasks use, a plain implementation of it in its task module — neither the reference nor one of the
    answers, which stay refused — that takes the student's place where the student's function for it does not
    pass. A task is thus checked and graded on its own function: an earlier one it calls is the student's if
    that passes, else the stand-in, and the message says so (:func:`~capsule_lab.grading.engine.checking.check`,
    :func:`~capsule_lab.grading.engine.evaluation.score_functions`). One mistake costs one task.
    ``keeps_inputs``: the task asks to leave the inputs as they are; a function that writes into one (a tensor, or
    one in a list) fails the case, whatever it returns.

    A bug hunt's check shows the symptom only (the failing case, expected against got), never a known mistake's
    hint nor the definition it breaks; after :data:`~capsule_lab.grading.engine.checking.PLACE_HINT_AFTER` failed checks
    it adds a second hint, which narrows where the bug is, never how to fix it, and describes the code in front of
    it: ``planted`` holds the given code's wrong lines, each with where it is (``(code, where)``); while all of them
    are still in the student's function the second hint is ``place_hint``, where some are fixed it names those
    left, and where none is left (or the source cannot be read) it names no line
    (:func:`~capsule_lab.grading.engine.checking.second_hint`).
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
    function: str = ""
    answers: tuple = ()
    allowed: tuple = ()
    kind: str = "implement"
    returns_number: bool = False
    rtol: float | None = None
    atol: float | None = None
    place_hint: str = ""
    planted: tuple = ()
    uses: tuple = ()
    stand_in: Callable | None = None
    keeps_inputs: bool = False

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]

    def groups(self) -> list[str]:
        """The case groups, in the order of the cases (``[""]`` for a task scored all or nothing)."""
        return list(dict.fromkeys(case.group for case in self.cases()))

    @property
    def refused(self) -> tuple:
        """The functions refused while the student's function runs — the reference and ``answers``."""
        return tuple(dict.fromkeys((self.reference, *self.answers)))


#: The kinds of task (CONTRIBUTING.md, "What an exercise asks").
KINDS = ("implement", "bug hunt", "prediction", "experiment")

#: The registered tasks by id, in registration order (chapter by chapter); filled by :func:`register`.
TASKS: dict[str, Task] = {}


def register(*tasks: Task) -> None:
    """Add a chapter's tasks to the registry; each chapter's module calls this once.

    Raises ``ValueError`` for an id that is already registered, an id not of the form ``NN.name``, a task
    without the name of the student's function, an answer that is not a plain Python function, or an
    allow-list that is not a tuple of qualified names in ``capsule_lab``.
    """
    for task in tasks:
        if task.id in TASKS:
            raise ValueError(f"task {task.id!r} is already registered")
        if not (len(task.chapter) == 2 and task.chapter.isdigit() and "." in task.id):
            raise ValueError(f"task id {task.id!r} must look like 'NN.name'")
        if not task.function.isidentifier():
            raise ValueError(f"task {task.id!r} must name the student's function (function=...)")
        for fn in task.refused:
            if not hasattr(fn, "__code__"):
                raise ValueError(f"task {task.id!r}: answer {fn!r} is not a plain Python function")
        if not isinstance(task.allowed, tuple) or not all(
                isinstance(n, str) and n.startswith("capsule_lab.") and all(p.isidentifier() for p in n.split("."))
                for n in task.allowed):
            raise ValueError(f"task {task.id!r}: allowed must be a tuple of qualified names in capsule_lab "
                             f"(e.g. 'capsule_lab.capsules.squash'), got {task.allowed!r}")
        if task.kind not in KINDS:
            raise ValueError(f"task {task.id!r}: kind must be one of {list(KINDS)}, got {task.kind!r}")
        if task.kind == "bug hunt" and not task.place_hint.strip():
            raise ValueError(f"task {task.id!r}: a bug hunt needs a place_hint (where to look, never the fix)")
        if task.kind == "bug hunt" and not (task.planted and all(
                isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) and x.strip() for x in p)
                for p in task.planted)):
            raise ValueError(f"task {task.id!r}: a bug hunt needs its planted lines, (code, where) for each")
        for used in task.uses:
            earlier = TASKS.get(used)
            if earlier is None or earlier.chapter != task.chapter or earlier.stand_in is None:
                raise ValueError(f"task {task.id!r}: uses {used!r}, which must be an earlier task of chapter "
                                 f"{task.chapter} with a stand_in")
        if task.stand_in is not None and (not hasattr(task.stand_in, "__code__") or task.stand_in in task.refused):
            raise ValueError(f"task {task.id!r}: stand_in must be a plain Python function, not one of its answers")
        for name in ("rtol", "atol"):
            value = getattr(task, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"task {task.id!r}: {name} must be a number >= 0 or None, got {value!r}")
        TASKS[task.id] = task


def task_ids() -> list[str]:
    """All task ids, sorted. Chapters 01–07."""
    return sorted(TASKS)


def get_task(task_id: str) -> Task:
    """The :class:`Task` with this id; ``ValueError`` listing the known tasks otherwise."""
    if not isinstance(task_id, str) or task_id not in TASKS:
        raise ValueError(f"unknown task {task_id!r}: known tasks are {', '.join(task_ids())}")
    return TASKS[task_id]


def tasks_for_chapter(chapter: str) -> list[Task]:
    """The tasks of one chapter (``"01"`` → every ``01.*`` task), in registry order (empty if none)."""
    return [t for t in TASKS.values() if t.chapter == chapter]


# ---------------------------------------------------------------- helpers for the chapters' cases

_DRAW: list = []    # the draw of hidden cases while :func:`drawn` is active (the innermost last)


def generator(seed: int) -> torch.Generator:
    """A CPU random generator with this seed: every task's cases are the same on every run — except within
    :func:`drawn`, where the seed is mixed with the draw's, so the same cases come out on other numbers."""
    if _DRAW:
        seed = (seed * 0x9E3779B97F4A7C15 + _DRAW[-1]) % 2 ** 63
    return torch.Generator().manual_seed(seed)


@contextlib.contextmanager
def drawn(draw: int) -> Iterator[None]:
    """Within the block, :func:`generator` draws other numbers, fixed by ``draw`` (a whole number ≥ 0): the grader
    builds a task's hidden cases with its ``cases()`` here (:func:`~capsule_lab.grading.engine.hidden.hidden_cases`).
    """
    if isinstance(draw, bool) or not isinstance(draw, int) or draw < 0:
        raise ValueError(f"a draw is a whole number >= 0, got {draw!r}")
    _DRAW.append(draw % 2 ** 63)
    try:
        yield
    finally:
        _DRAW.pop()


def drawn_seed(published: int) -> int:
    """The training seed of an experiment's case: ``published`` outside :func:`drawn`, and within it another seed,
    fixed by the draw and by ``published``, from 3 to 2³¹ − 1 (never one of the published seeds 0, 1 and 2). An
    experiment whose cases take their seeds from here gets cases no table of answers holds: ``check`` draws them
    afresh at every call and ``grade`` from the instructor's key (:mod:`~capsule_lab.grading.engine.hidden`)."""
    if isinstance(published, bool) or not isinstance(published, int) or published < 0:
        raise ValueError(f"a seed is a whole number >= 0, got {published!r}")
    if not _DRAW:
        return published
    return 3 + (published * 0x9E3779B97F4A7C15 + _DRAW[-1]) % (2 ** 31 - 4)


def case_seed(published: int) -> tuple[int, str]:
    """``(seed, "seed …")``: the seed an experiment's case runs on and how its name says it. Seed 0 stays as it is
    (an exercise may print its answer); any other is :func:`drawn_seed` of ``published``, named ``"seed 1"`` as
    published and ``"seed 1896249921, drawn"`` within a draw (the feedback names the seed a check ran)."""
    seed = drawn_seed(published) if published != 0 else 0
    return seed, f"seed {seed}" + (", drawn" if seed != published else "")


def randn(gen, *shape, dtype=torch.float32, scale=1.0):
    """Standard normal values (drawn in float64, so that both dtypes see the same numbers) times ``scale``."""
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)
