"""Written answers: the reasoning behind a prediction and the written question of an exercise, recorded with the
rubric that grades them, for the instructor to score (``capsule-lab grade``, exercises 05–08).

A prediction's check tells the student only whether the number lies inside its band (chapters' exercises,
"predict, then measure"); what the instructor wants to read is *why* they expected it. Each exercise therefore
has markdown cells the student writes in — the **Your reasoning.** cell after a prediction and the **Your
answer.** cell of the chapter's written question — marked in the master notebook with the cell metadata
``{"capsule_lab": {"written": "<question id>"}}`` (``capsule-lab assign`` keeps cell metadata, and so do Jupyter
and Colab when the student edits the cell); the questions and their rubrics are registered beside the tasks
(:mod:`capsule_lab.grading.tasks.questions`). :func:`written_answers` reads them from a submitted notebook;
:func:`capsule_lab.grading.grade_notebook` puts them into the report under ``"written"`` and
:func:`write_written` gathers every student's answer to each question, rubric first, into ``written.md``.

Nothing here is scored automatically: ``points`` stays ``None`` until an instructor fills it in; the notebook's
``score`` counts the checked tasks only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from ..tasks import TASKS
from ..tasks.questions import QUESTIONS, questions_for_chapter
from .atomic import write_atomic

__all__ = ["written_answers", "write_written", "item_id", "WRITTEN_NAME", "PLACEHOLDER"]

#: The file :func:`write_written` writes into the grader's output folder.
WRITTEN_NAME = "written.md"
#: What ``capsule-lab assign`` leaves in a written cell (:mod:`.assign`); an answer that is only this is empty.
PLACEHOLDER = "*Your answer here.*"
_HEADING = re.compile(r"^\s*\*\*(Your reasoning|Your answer)\.\*\*\s*", re.I)
_MARKER = re.compile(r"<!--\s*(BEGIN|END) SOLUTION\s*-->")


def item_id(question_id: str) -> str:
    """The id a hand-scored answer goes by in ``written.md``, ``written.csv`` and the gradebook: a prediction's
    reasoning shares its question id with the checked task (``05.flip_entropy``, the number), so it is
    ``05.flip_entropy.reasoning``; a written question keeps its own id. Exercises 05–08."""
    return f"{question_id}.reasoning" if question_id in TASKS else question_id


def _question_of(cell) -> str | None:
    meta = cell.get("metadata", {}).get("capsule_lab", {})
    qid = meta.get("written") if isinstance(meta, dict) else None
    return qid if isinstance(qid, str) else None


def _answer_text(source: str) -> str:
    text = _MARKER.sub("", _HEADING.sub("", source, count=1)).strip()
    return "" if text in ("", PLACEHOLDER) else text


def written_answers(nb, chapter: str) -> dict:
    """The written answers of a notebook ``nb`` (a NotebookNode or a notebook's dict) for chapter ``chapter``.

    Returns ``{question id: {"title", "answer", "status", "rubric", "points", "max_points"}}`` for every question
    the chapter registers: ``status`` is ``"answered"``, ``"empty"`` (the cell still holds the placeholder) or
    ``"missing"`` (no cell carries the question's metadata: deleted, or pasted into a new cell); ``answer`` is the
    cell's Markdown without its bold heading; ``points`` is ``None`` (the instructor's to give).
    Exercises 05–08.
    """
    cells = nb.get("cells", []) if isinstance(nb, dict) else []
    found: dict[str, list[str]] = {}
    for cell in cells:
        qid = _question_of(cell) if isinstance(cell, dict) and cell.get("cell_type") == "markdown" else None
        if qid is not None:
            source = cell.get("source", "")
            found.setdefault(qid, []).append(source if isinstance(source, str) else "".join(source))
    out = {}
    for q in questions_for_chapter(chapter):
        texts = [t for t in (_answer_text(s) for s in found.get(q.id, [])) if t]
        status = "answered" if texts else ("empty" if q.id in found else "missing")
        out[q.id] = {"title": q.title, "answer": "\n\n".join(texts), "status": status, "rubric": list(q.rubric),
                     "points": None, "max_points": q.points}
    return out


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.splitlines())


def write_written(reports: Sequence[dict], folder: str | Path) -> Path | None:
    """Write ``<folder>/written.md``: for each question any report holds, its rubric, then every notebook's answer
    (quoted, sorted by notebook) or why there is none. Returns its path, or None when no report has a written
    answer to record (``capsule-lab grade``)."""
    by_question: dict[str, list[tuple[str, dict]]] = {}
    for r in sorted(reports, key=lambda r: r["notebook"]):
        for qid, entry in (r.get("written") or {}).items():
            if isinstance(entry, dict):
                by_question.setdefault(qid, []).append((r["notebook"], entry))
    if not by_question:
        return None
    lines = ["# Written answers", "",
             "Scored by hand with each question's rubric (each criterion an equal share of the points); the "
             "grader's score counts the checked tasks only.", ""]
    for qid in sorted(by_question, key=lambda q: (list(QUESTIONS).index(q) if q in QUESTIONS else len(QUESTIONS), q)):
        entries = by_question[qid]
        first = entries[0][1]
        points = first.get("max_points", "?")
        lines += [f"## {item_id(qid)} — {first.get('title', '')} ({points} point{'' if points == 1 else 's'})", "",
                  "Rubric:",
                  ""]
        lines += [f"{k}. {criterion}" for k, criterion in enumerate(first.get("rubric", []), start=1)] + [""]
        for notebook, entry in entries:
            lines.append(f"### {notebook}")
            lines.append("")
            if entry.get("status") == "answered":
                lines.append(_quoted(str(entry.get("answer", ""))))
            else:
                lines.append(f"*No answer ({entry.get('status')}).*")
            lines.append("")
    path = Path(folder) / WRITTEN_NAME
    write_atomic(path, "\n".join(lines))
    return path
