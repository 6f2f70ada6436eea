"""The written questions of the exercises (05–08), registered beside the tasks, each with the rubric that grades it.

A prediction's check tells the student only whether the number lies inside its band (chapters' exercises,
"predict, then measure"); what the instructor wants to read is *why* they expected it. So each exercise has
markdown cells the student writes in — the **Your reasoning.** cell after a prediction and the **Your answer.**
cell of the chapter's written question — and each is registered here as a :class:`Question`, with the rubric an
instructor scores it by. The chapter's task module registers its questions (:func:`register_questions`) beside its
tasks. Reading the answers from a submitted notebook and writing them out for the instructor is
:mod:`capsule_lab.grading.notebooks.written`'s; nothing scores them automatically.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Question", "QUESTIONS", "register_questions", "questions_for_chapter"]


@dataclass(frozen=True)
class Question:
    """A written answer the instructor grades by hand.

    ``id``: a prediction task's id for the reasoning behind that prediction (``"05.flip_entropy"``), else
    ``"NN.<name>"`` for the chapter's written question; ``title``: what is asked, in a line; ``rubric``: what a
    full answer contains, one criterion per entry, each worth ``points / len(rubric)``.
    """

    id: str
    title: str
    rubric: tuple
    points: int = 2

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]


#: The registered questions by id, chapter by chapter; filled by :func:`register_questions`.
QUESTIONS: dict[str, Question] = {}


def register_questions(*questions: Question) -> None:
    """Add a chapter's written questions (its task module calls this once, beside ``register``)."""
    for q in questions:
        if not re.fullmatch(r"\d{2}\.[a-z0-9_]+", q.id):
            raise ValueError(f"question id {q.id!r}: expected 'NN.name'")
        if q.id in QUESTIONS:
            raise ValueError(f"question {q.id!r} is registered twice")
        if not q.rubric or not all(isinstance(r, str) and r.strip() for r in q.rubric):
            raise ValueError(f"question {q.id!r}: a rubric needs at least one criterion, each a non-empty string")
        if not isinstance(q.points, int) or q.points <= 0:
            raise ValueError(f"question {q.id!r}: points must be a positive integer, got {q.points!r}")
        QUESTIONS[q.id] = q


def questions_for_chapter(chapter: str) -> list[Question]:
    """The written questions of chapter ``NN``, in registration order (none for a chapter without them)."""
    return [q for q in QUESTIONS.values() if q.chapter == chapter]
