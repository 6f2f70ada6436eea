"""The grading's task content: what each chapter's exercise asks, and the registry that holds it (exercises 01–08).

The lowest of grading's three layers (tasks ← engine ← notebooks): nothing here imports the engine that runs the
tasks or the notebooks that ask for them; a task is data the engine reads — its reference, cases, known mistakes,
hints and allow-list.

- :mod:`.registry`: the framework — :class:`~.registry.Case`, :class:`~.registry.WrongAnswer`,
  :class:`~.registry.Task` — and the registry (:data:`~.registry.TASKS`, :func:`~.registry.register`,
  :func:`~.registry.get_task`, :func:`~.registry.tasks_for_chapter`);
- :mod:`.questions`: the written questions of exercises 05–08 and their rubrics, registered beside the tasks;
- ``ch01`` … ``ch08``: each chapter's tasks (references, cases, wrong answers, hints, stand-ins) and written
  questions, registered when this package is imported, in chapter order; a later chapter adds ``chNN.py`` and one
  import line here.
"""

from __future__ import annotations

from .questions import QUESTIONS, Question, questions_for_chapter, register_questions
from .registry import (KINDS, TASKS, Case, Task, WrongAnswer, generator, get_task, randn, register, task_ids,
                       tasks_for_chapter)

from . import ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08

__all__ = ["Case", "WrongAnswer", "Task", "KINDS", "TASKS", "register", "task_ids", "get_task", "tasks_for_chapter",
           "generator", "randn", "Question", "QUESTIONS", "register_questions", "questions_for_chapter"]
