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
when the student's code calls it but what the task allows (deny by default, :mod:`.lock`): its answer, and
every second route to it through another module, refuse to run. Nothing the student's code prints, writes or patches decides a
score; the ``check`` calls in the notebook are feedback only. :func:`grade` does that for many notebooks
and writes a JSON report per notebook and ``grades.csv``; :func:`grade_batch` grades a class in parallel
(``--jobs N``), resumes an interrupted batch and grades one shard of it (``--shard K/N``), and
:func:`merge_reports` joins the shards (``capsule-lab grade-merge``). Grading is not a sandbox: the student's code
runs with the grader's rights (see the instructors' guide).

The package, one idea per module:

- :mod:`.tasks`: the framework: :class:`Case`, :class:`WrongAnswer`, :class:`Task` and the registry
  (:func:`task_ids`, :func:`get_task`, :func:`tasks_for_chapter`, :func:`~capsule_lab.grading.tasks.register`);
- ``tasks_01``, ``tasks_02``, …: each chapter's tasks (references, cases, wrong answers, hints),
  registered on import below; a later chapter adds ``tasks_NN.py`` and one import line here;
- :mod:`.checking`: running a function on a task's cases and judging it, :func:`check`, :class:`CheckResult`;
- :mod:`.reference_cache`: the reference answers of each task kept on disk, so a second check or grading answers
  at once;
- :mod:`.lock`: deny by default: while the student's function runs, nothing of the package runs for it
  but what its task allows;
- :mod:`.kernel`: running a notebook in a kernel for its outputs, errors and timeouts (nbclient);
- :mod:`.evaluation` and :mod:`.child`: scoring the student's functions in a child process the grader owns;
- :mod:`.processes`: starting and killing the processes student code runs in, and all they start;
- :mod:`.notebooks`: :func:`grade_notebook`, :func:`grade`, the reports;
- :mod:`.batch`: grading a class: worker processes, reports written as they come and resumed by content
  hash, shards and their merge, ``grades.csv`` rebuilt from the reports;
- :mod:`.assign`: the student notebooks in ``exercises/`` generated from ``solutions/`` (``capsule-lab assign``).
- :mod:`.written`: the written answers (a prediction's reasoning, each exercise's written question) and their
  rubrics, recorded for the instructor, never scored.
"""

from __future__ import annotations

from . import tasks_01, tasks_02, tasks_03, tasks_04, tasks_05, tasks_06, tasks_07, tasks_08  # noqa: F401 - registers the chapters' tasks, in chapter order
from .checking import ATOL, NOT_IMPLEMENTED, RTOL  # noqa: F401 - module constants of the former grading.py
from .checking import CheckResult, check
from .evaluation import STATUSES
from .lock import AnswerRefused
from .batch import grade_batch, merge_reports
from .notebooks import chapter_of_notebook, grade, grade_notebook
from .tasks import TASKS, Case, Task, WrongAnswer, get_task, task_ids, tasks_for_chapter

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

