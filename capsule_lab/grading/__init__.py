"""Grading: the checks behind the chapters' exercises, and the notebook grader.

Taught alongside every chapter's exercise notebook (``exercises/NN_topic.ipynb``). Two parts:

**Checks** (what students call in Colab, with nothing but the package installed)::

    from capsule_lab.grading import check
    check("01.squash", squash)          # prints ✔ or ✘ with a hint, returns a CheckResult

:func:`check` runs the student's function and the reference implementation of the course on the same
seeded random and edge-case inputs (float32 and float64) and compares the values and, where the task is
differentiable, the gradients of a fixed random projection of the outputs (so that a stray ``detach``
is caught too). When an answer is wrong and matches a known mistake, the hint names the mistake.

The tasks (see :data:`TASKS`; the table is made from the registry when the package is imported):

{TASK_TABLE}

**Grading** (what instructors run, ``capsule-lab grade NOTEBOOK... --out reports``): :func:`grade_notebook`
takes the chapter's tasks from the registry and computes their inputs and reference answers in its own
process before any student code runs; executes a copy of the notebook in a fresh kernel for its outputs
and errors (per-cell time limit); kills whatever the kernel left running; then scores the student's
functions in a child process it starts and kills (per-task time limit), which returns plain tensors that
the grader compares with its own answers. While the student's function runs, nothing of the package runs
when the student's code calls it but what the task allows (deny by default, :mod:`.engine.lock`): its answer,
and every second route to it through another module, refuse to run. Nothing the student's code prints, writes or
patches decides a score; the ``check`` calls in the notebook are feedback only. :func:`grade` does that for many
notebooks and writes a JSON report per notebook and ``grades.csv``; :func:`grade_batch` grades a class in parallel
(``--jobs N``), resumes an interrupted batch and grades one shard of it (``--shard K/N``), and
:func:`merge_reports` joins the shards (``capsule-lab grade-merge``). The kernel and the scoring process run in an
OS sandbox (:mod:`.engine.sandbox`; see the instructors' guide).

The package, in three layers, in import order — **tasks ← engine ← notebooks**: each sub-package imports only
from the ones before it (the engine reads the tasks; the notebooks read the tasks and score with the engine), this
module re-exports the public names of all three, and ``tests/test_import_graph.py`` keeps the whole of
``capsule_lab`` free of import circles:

1. :mod:`.tasks` (task content, the lowest): the framework — :class:`Case`, :class:`WrongAnswer`, :class:`Task` —
   and the registry (:func:`task_ids`, :func:`get_task`, :func:`tasks_for_chapter`,
   :func:`~capsule_lab.grading.tasks.registry.register`); ``tasks.ch01``, ``tasks.ch02``, …: each chapter's tasks
   (references, cases, wrong answers, hints), registered when the package is imported (a later chapter adds
   ``tasks/chNN.py`` and one import line in ``tasks/__init__.py``); :mod:`.tasks.questions`: the written questions
   and their rubrics, registered beside the tasks, recorded for the instructor, never scored.
2. :mod:`.engine` (the checking engine; imports the tasks): :mod:`.engine.records` (a case's result and its plain
   data), :mod:`.engine.refusal` and :mod:`.engine.lock` (deny by default: while the student's function runs,
   nothing of the package runs for it but what its task allows), :mod:`.engine.reference_cache` (the reference
   answers kept on disk, so a second check or grading answers at once), :mod:`.engine.running` and
   :mod:`.engine.judging` (running a function on a task's cases and judging it), :mod:`.engine.checking`
   (:func:`check`, :class:`CheckResult`), :mod:`.engine.processes` (starting and killing the processes student code
   runs in, and all they start), :mod:`.engine.evaluation` and :mod:`.engine.child` (scoring the student's
   functions in a child process the grader owns).
3. :mod:`.notebooks` (notebook files in and out; imports the tasks and the engine): :mod:`.notebooks.assign` (the
   student notebooks in ``exercises/`` generated from ``solutions/``, ``capsule-lab assign``),
   :mod:`.notebooks.written` (the written answers read from a notebook), :mod:`.notebooks.kernel` (running a
   notebook in a kernel for its outputs, errors and timeouts: nbclient), :mod:`.notebooks.report`
   (:func:`grade_notebook`), :mod:`.notebooks.folder` (a folder of reports: ``grades.csv``, merging shards),
   :mod:`.notebooks.workers` and :mod:`.notebooks.batch` (grading a class: worker processes, reports written as
   they come and resumed by content hash, shards; :func:`grade`).
"""

from __future__ import annotations

from .tasks import TASKS, Case, Task, WrongAnswer, get_task, task_ids, tasks_for_chapter
from .engine.checking import CheckResult, check
from .engine.evaluation import STATUSES
from .engine.judging import ATOL, RTOL
from .engine.refusal import AnswerRefused
from .engine.running import NOT_IMPLEMENTED
from .notebooks.batch import grade, grade_batch
from .notebooks.folder import merge_reports
from .notebooks.report import chapter_of_notebook, grade_notebook

__all__ = [
    "Case", "WrongAnswer", "Task", "TASKS", "CheckResult", "AnswerRefused", "STATUSES",
    "task_ids", "get_task", "tasks_for_chapter", "chapter_of_notebook", "check",
    "grade_notebook", "grade", "grade_batch", "merge_reports",
]


def _task_table() -> str:
    """The registered tasks as a reStructuredText table: id, points, kind, the function the student writes."""
    rows = [(f"``{t.id}``", str(t.points), t.kind, f"``{t.function}``: {t.title}") for t in TASKS.values()]
    head = ("task", "points", "kind", "the student writes")
    widths = [max(len(r[k]) for r in rows + [head]) for k in range(4)]
    rule = "  ".join("=" * w for w in widths)
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
    return "\n".join([rule, line(head), rule, *map(line, rows), rule])


__doc__ = __doc__.replace("{TASK_TABLE}", _task_table())

