"""The instructor's gradebook: a class's grading reports as one row per student, with the hand-scored points merged
in (``capsule-lab gradebook``; every chapter's exercises, hand-scored items in 05–08).

``capsule-lab grade`` writes one report per *notebook*; a gradebook wants one row per *student*, with the same
columns every time. This module turns the first into the second, in the spirit of nbgrader's gradebook (students,
assignments, manual grades, exported as CSV) without a database: the report folder is the record, and the
instructor's hand-scored points live in a CSV beside it.

- **Who is who** (:func:`student_of`): a student is named by a pattern the instructor gives. ``file:REGEX`` searches
  the notebook's file name (the group named ``student``, else the first group, else the whole match; the default,
  :data:`DEFAULT_STUDENT`, takes what comes before ``_NN_``: ``alice_01_capsules.ipynb`` → ``alice``), ``folder``
  takes the notebook's folder (``submissions/alice/05_rem.ipynb`` → ``alice``), and ``metadata:KEY.KEY`` reads the
  notebook's own metadata (``metadata:capsule_lab.student``). A notebook the pattern does not name is an error that
  lists it, and so are two notebooks of one student for one chapter.
- **Fixed columns** (:func:`items`): every item of the chosen chapters, always, in course order — each checked task
  (its id, ``05.flip_entropy``), then each hand-scored item: a prediction's reasoning gets its own id
  (``05.flip_entropy.reasoning``), distinct from the checked number's; a written question keeps its id
  (``05.what_low_entropy_shows``). A chapter nobody submitted still has its columns.
- **Hand-scored points** (:func:`write_written_csv`, :func:`read_written_csv`): ``written.csv`` has one row per
  student and hand-scored item — the question, its rubric's criteria, the student's answer, ``max_points`` and an
  empty ``points`` cell for the instructor. Made again, it keeps every point already entered whose answer is
  unchanged (the answer's digest, ``answer_sha``); a point for an answer that changed since is dropped and named.
  Read back, a point above the item's maximum, below 0 or not a number, an unknown student or item, or a row given
  twice is refused with its line.
- **The gradebook** (:func:`gradebook_rows`, :func:`write_gradebook`): per student (``per="course"``) or per student
  and chapter (``per="chapter"``), the points of every item, each chapter's ``checked``, ``by hand`` and ``total``
  out of its maximum, and a ``status``: a chapter not graded (the grader failed on it) or not submitted carries no
  score, only why; hand-scored points not yet entered leave the total blank (``pending``). ``flags`` names what an
  instructor should look at: a full checked score beside cells that raised errors.
- **Exports** (:func:`write_export`): ``canvas`` (Canvas's gradebook import: ``Student, ID, SIS User ID, SIS Login
  ID, Section``, a ``Points Possible`` row, one column per chapter; the student's name from the pattern goes into
  ``SIS Login ID``) and ``moodle`` (Moodle's CSV grade import: ``username`` and one column per chapter, mapped on
  import). A chapter without a complete total is left blank, never 0.

The class's page at a glance is :mod:`.class_summary`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..tasks import TASKS
from ..tasks.questions import QUESTIONS
from .atomic import write_atomic
from .written import item_id

__all__ = ["DEFAULT_STUDENT", "Item", "items", "student_of", "students", "WRITTEN_CSV", "WRITTEN_COLUMNS",
           "write_written_csv", "read_written_csv", "gradebook_rows", "write_gradebook", "GRADEBOOK_CSV",
           "EXPORTS", "write_export", "flags_of", "chapter_maxima"]

#: The default student pattern, the name before ``_NN_`` in the file name (``alice_01_capsules.ipynb`` → alice).
DEFAULT_STUDENT = r"file:^(?P<student>.+?)_\d\d_"
#: The hand-scored points file the instructor edits, in the report folder.
WRITTEN_CSV = "written.csv"
#: Its columns; the instructor fills ``points`` (and may write a ``comment``).
WRITTEN_COLUMNS = ("student", "notebook", "chapter", "item", "question", "max_points", "status", "criteria",
                   "answer", "answer_sha", "points", "comment")
#: The gradebook ``capsule-lab gradebook`` writes.
GRADEBOOK_CSV = "gradebook.csv"
#: The learning platforms' import formats :func:`write_export` writes.
EXPORTS = ("canvas", "moodle")


@dataclass(frozen=True)
class Item:
    """One gradebook column: a checked task (``by_hand`` False) or a hand-scored answer, with its chapter and the
    points it is worth; ``question`` is the id of the written answer in a report (hand-scored items only)."""

    id: str
    chapter: str
    points: int
    by_hand: bool
    question: str = ""


def items(chapters: Sequence[str] | None = None) -> list[Item]:
    """The gradebook's columns for ``chapters`` (default: every chapter with tasks), in course order: each chapter's
    checked tasks (registry order), then its hand-scored items."""
    known = sorted({t.chapter for t in TASKS.values()})
    chosen = known if chapters is None else list(chapters)
    unknown = [c for c in chosen if c not in known]
    if unknown or not chosen:
        raise ValueError(f"unknown chapter(s) {', '.join(unknown) or '(none given)'}: the course's are "
                         f"{', '.join(known)}")
    out = []
    for chapter in sorted(set(chosen)):
        out += [Item(t.id, chapter, t.points, False) for t in TASKS.values() if t.chapter == chapter]
        out += [Item(item_id(q.id), chapter, q.points, True, q.id) for q in QUESTIONS.values()
                if q.id.split(".", 1)[0] == chapter]
    return out


# ---------------------------------------------------------------- who is who

def _metadata(path: Path, keys: list[str]):
    try:
        value = json.loads(path.read_text(encoding="utf8")).get("metadata", {})
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read the metadata of {path}: {err}") from None
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def student_of(notebook: str, pattern: str = DEFAULT_STUDENT) -> str | None:
    """The student a notebook belongs to, by ``pattern``: ``file:REGEX`` (searched in the file name: the group
    ``student``, else the first group, else the match), ``folder`` (the notebook's folder's name) or
    ``metadata:KEY.KEY`` (a string in the notebook's metadata, read from the file). None where the pattern does not
    name one (no match, no such key, an empty name)."""
    if not isinstance(pattern, str):
        raise ValueError(f"a student pattern is a string, got {pattern!r}")
    path = Path(notebook)
    kind, _, rest = pattern.partition(":")
    if kind == "file" and rest:
        try:
            regex = re.compile(rest)
        except re.error as err:
            raise ValueError(f"the student pattern {pattern!r} is no regular expression: {err}") from None
        match = regex.search(path.name)
        if match is None:
            return None
        name = match.group("student") if "student" in regex.groupindex else (
            match.group(1) if regex.groups else match.group(0))
    elif kind == "folder" and not rest:
        name = path.parent.name
    elif kind == "metadata" and rest:
        name = _metadata(path, rest.split("."))
        name = name if isinstance(name, str) else None
    else:
        raise ValueError(f"unknown student pattern {pattern!r}: use file:REGEX, folder or metadata:KEY.KEY")
    return name.strip() or None if isinstance(name, str) else None


def students(reports: Sequence[dict], pattern: str = DEFAULT_STUDENT) -> dict[tuple[str, str], dict]:
    """``{(student, chapter): report}`` for ``reports``. Raises ``ValueError`` naming every notebook the pattern does
    not name, and every student with two notebooks for one chapter."""
    out: dict = {}
    unnamed, doubled = [], []
    for r in sorted(reports, key=lambda r: r["notebook"]):
        name = student_of(r["notebook"], pattern)
        if name is None:
            unnamed.append(r["notebook"])
            continue
        key = (name, r.get("chapter") or "")
        if key in out:
            doubled.append(f"{name}, chapter {key[1] or '?'}: {out[key]['notebook']} and {r['notebook']}")
            continue
        out[key] = r
    if unnamed:
        raise ValueError(f"the student pattern {pattern!r} names no student in {len(unnamed)} notebook(s): "
                         + ", ".join(unnamed[:10]) + (" …" if len(unnamed) > 10 else "")
                         + " (give --student file:REGEX, folder or metadata:KEY)")
    if doubled:
        raise ValueError("two notebooks of one student for one chapter: " + "; ".join(doubled[:10]))
    return out


# ---------------------------------------------------------------- hand-scored points

def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf8")).hexdigest()[:16]


def _criteria(rubric) -> str:
    return " | ".join(f"{k}. {c}" for k, c in enumerate(rubric or (), start=1))


def write_written_csv(by_student: dict, path: str | os.PathLike, chapters: Sequence[str] | None = None) -> tuple:
    """Write the hand-scored points file ``path`` (``<report folder>/written.csv``) for the reports ``by_student``
    (:func:`students`): one row per student and hand-scored item of ``chapters`` whose notebook was graded, sorted
    by student and course order, ``points`` empty. Points (and comments) already in the file are kept where the student, item and answer are the same;
    returns ``(path, dropped)``: the ``(student, item)`` whose points were dropped because the answer changed."""
    path = Path(path)
    previous = {}
    if path.is_file():
        for row in _csv_rows(path):
            previous[(row.get("student", ""), row.get("item", ""))] = row
    buffer, dropped = io.StringIO(), []
    writer = csv.writer(buffer)
    writer.writerow(WRITTEN_COLUMNS)
    hand = [i for i in items(chapters) if i.by_hand]
    for (student, chapter), report in sorted(by_student.items()):
        if not report.get("graded"):
            continue
        for item in (i for i in hand if i.chapter == chapter):
            entry = (report.get("written") or {}).get(item.question) or {}
            answer = str(entry.get("answer", ""))
            sha = _digest(answer)
            points = comment = ""
            old = previous.get((student, item.id))
            if old is not None and (old.get("points", "").strip() or old.get("comment", "").strip()):
                if old.get("answer_sha") == sha:
                    points, comment = old.get("points", ""), old.get("comment", "")
                else:
                    dropped.append((student, item.id))
            writer.writerow([student, report["notebook"], chapter, item.id, QUESTIONS[item.question].title,
                             item.points, entry.get("status", "missing"), _criteria(entry.get("rubric")), answer,
                             sha, points, comment])
    write_atomic(path, buffer.getvalue())
    return path, dropped


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf8") as f:
        return list(csv.DictReader(f))


def read_written_csv(path: str | os.PathLike, by_student: dict, chapters: Sequence[str] | None = None) -> dict:
    """The hand-scored points in the instructor's ``written.csv``: ``{(student, item id): points}`` (a number; rows
    whose ``points`` cell is empty are left out, still to be scored). Raises ``ValueError`` listing every row with a
    point that is not a number, below 0 or above the item's maximum, for a student or item the reports
    ``by_student`` (:func:`students`) do not have, or given twice."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no hand-scored points file at {path} (capsule-lab gradebook writes one to fill in)")
    rows = _csv_rows(path)
    missing = [c for c in ("student", "item", "points") if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)} (the columns are {', '.join(WRITTEN_COLUMNS)})")
    known_items = {i.id: i for i in items(chapters) if i.by_hand}
    known_students = {s for s, _ in by_student}
    points, problems = {}, []
    for line, row in enumerate(rows, start=2):
        student, item_id, given = row.get("student", ""), row.get("item", ""), (row.get("points") or "").strip()
        if not given:
            continue
        where = f"line {line} ({student}, {item_id})"
        item = known_items.get(item_id)
        if student not in known_students:
            problems.append(f"{where}: no graded notebook of student {student!r}")
        elif item is None:
            problems.append(f"{where}: {item_id!r} is no hand-scored item of the chosen chapters")
        elif (student, item.chapter) not in by_student:
            problems.append(f"{where}: student {student!r} has no notebook for chapter {item.chapter}")
        else:
            try:
                value = float(given)
            except ValueError:
                problems.append(f"{where}: points {given!r} is not a number")
                continue
            if not 0 <= value <= item.points:
                problems.append(f"{where}: {given} points, outside 0 to {item.points}")
            elif (student, item_id) in points:
                problems.append(f"{where}: points given twice for this student and item")
            else:
                points[(student, item_id)] = int(value) if value == int(value) else value
    if problems:
        raise ValueError(f"{path}: {len(problems)} row(s) refused:\n  " + "\n  ".join(problems[:30]))
    return points


# ---------------------------------------------------------------- the gradebook

def flags_of(report: dict) -> str:
    """What an instructor should look at in one notebook's report: a full checked score beside cells that raised
    errors (the functions pass, yet the notebook does not run as submitted); empty when nothing."""
    flags = []
    errors = len(report.get("cell_errors") or ())
    if report.get("graded") and errors and report.get("score") == report.get("max_score"):
        flags.append(f"full score with {errors} cell error{'s' if errors != 1 else ''}")
    return "; ".join(flags)


def _number(x):
    return int(x) if isinstance(x, float) and x == int(x) else round(x, 2) if isinstance(x, float) else x


def gradebook_rows(by_student: dict, hand: dict, chapters: Sequence[str] | None = None,
                   per: str = "course") -> tuple[list[str], list[list]]:
    """The gradebook as ``(columns, rows)``: for each student (``per="course"``, one row across ``chapters``) or each
    student and chapter (``per="chapter"``), ``student`` (and ``chapter``), every item's points, then per chapter
    ``checked``, ``by hand``, ``total`` and ``max``, the ``status`` and the ``flags``. A chapter not graded or not
    submitted has no points, only its status; hand points not entered yet leave ``by hand`` and ``total`` blank
    (status ``pending N``). ``hand``: :func:`read_written_csv`'s answer."""
    if per not in ("course", "chapter"):
        raise ValueError(f"per must be 'course' or 'chapter', got {per!r}")
    columns_items = items(chapters)
    chosen = sorted({i.chapter for i in columns_items})
    names = sorted({s for s, _ in by_student})

    def chapter_cells(student: str, chapter: str) -> tuple[list, list, str, str]:
        own = [i for i in columns_items if i.chapter == chapter]
        maximum = sum(i.points for i in own)
        report = by_student.get((student, chapter))
        if report is None:
            return [""] * len(own), ["", "", "", maximum], "not submitted", ""
        if not report.get("graded"):
            return [""] * len(own), ["", "", "", maximum], f"not graded: {report.get('grading_error') or '?'}", ""
        cells, pending = [], 0
        for item in own:
            if item.by_hand:
                value = hand.get((student, item.id))
                pending += value is None
                cells.append("" if value is None else value)
            else:
                task = report["tasks"].get(item.id)
                cells.append(task["points"] if isinstance(task, dict) else 0)
        checked = sum(c for c, i in zip(cells, own) if not i.by_hand)
        by_hand = sum(c for c, i in zip(cells, own) if i.by_hand and c != "")
        status = f"pending {pending}" if pending else "complete"
        totals = [_number(checked), "" if pending else _number(by_hand),
                  "" if pending else _number(checked + by_hand), maximum]
        return cells, totals, status, flags_of(report)

    if per == "chapter":
        columns = ["student", "chapter"] + [i.id for i in columns_items] + ["checked", "by hand", "total", "max",
                                                                             "status", "flags"]
        rows = []
        for student in names:
            for chapter in chosen:
                if (student, chapter) not in by_student:
                    continue
                cells, totals, status, flags = chapter_cells(student, chapter)
                before = [""] * sum(i.chapter < chapter for i in columns_items)
                after = [""] * sum(i.chapter > chapter for i in columns_items)
                rows.append([student, chapter, *before, *cells, *after, *totals, status, flags])
        return columns, rows
    columns = ["student"]
    for chapter in chosen:
        columns += [i.id for i in columns_items if i.chapter == chapter]
        columns += [f"{chapter} checked", f"{chapter} by hand", f"{chapter} total", f"{chapter} max"]
    columns += ["status", "flags"]
    rows = []
    for student in names:
        row, statuses, flags = [student], [], []
        for chapter in chosen:
            cells, totals, status, flag = chapter_cells(student, chapter)
            row += cells + totals
            if status != "complete":
                statuses.append(f"{chapter}: {status}")
            if flag:
                flags.append(f"{chapter}: {flag}")
        stray = by_student.get((student, ""))           # graded=no before its chapter was known
        if stray is not None:
            statuses.append(f"{stray['notebook']}: not graded: {stray.get('grading_error') or '?'}")
        rows.append(row + ["; ".join(statuses) or "complete", "; ".join(flags)])
    return columns, rows


def write_gradebook(by_student: dict, hand: dict, path: str | os.PathLike, chapters: Sequence[str] | None = None,
                    per: str = "course") -> Path:
    """Write :func:`gradebook_rows` as CSV to ``path`` (through a temporary file); returns the path."""
    columns, rows = gradebook_rows(by_student, hand, chapters, per)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    writer.writerows(rows)
    write_atomic(Path(path), buffer.getvalue())
    return Path(path)


def chapter_maxima(chapters: Sequence[str] | None = None) -> dict[str, int]:
    """``{chapter: points}``: each chosen chapter's checked and hand-scored points together (:func:`items`)."""
    maxima: dict[str, int] = {}
    for item in items(chapters):
        maxima[item.chapter] = maxima.get(item.chapter, 0) + item.points
    return maxima


def _chapter_totals(by_student: dict, hand: dict, chapters) -> tuple[list[str], list[str], dict, dict]:
    """(students, chapters, {(student, chapter): total or ""}, {chapter: max}) from the course gradebook."""
    columns, rows = gradebook_rows(by_student, hand, chapters, "course")
    maxima = chapter_maxima(chapters)
    totals = {(row[0], c): row[columns.index(f"{c} total")] for row in rows for c in maxima}
    return [row[0] for row in rows], list(maxima), totals, maxima


def write_export(by_student: dict, hand: dict, path: str | os.PathLike, platform: str,
                 chapters: Sequence[str] | None = None) -> Path:
    """Write a learning platform's grade import to ``path``: one column per chapter, named
    ``capsule-lab NN (max points)``, holding its total (checked and hand-scored points) where complete, else blank.
    ``canvas``: Canvas's gradebook CSV (``Student, ID, SIS User ID, SIS Login ID, Section``, then the chapters; a
    second row ``Points Possible``; the student's name from the pattern in ``SIS Login ID``, the others blank).
    ``moodle``: ``username`` and the chapters, for Moodle's "Import grades from CSV" (map ``username`` to the
    user's username, each chapter to a grade item)."""
    if platform not in EXPORTS:
        raise ValueError(f"unknown export {platform!r}: choose one of {', '.join(EXPORTS)}")
    names, chosen, totals, maxima = _chapter_totals(by_student, hand, chapters)
    headers = [f"capsule-lab {c} ({maxima[c]} points)" for c in chosen]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    if platform == "canvas":
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *headers])
        writer.writerow(["    Points Possible", "", "", "", "", *(maxima[c] for c in chosen)])
        writer.writerows(["", "", "", s, "", *(totals[(s, c)] for c in chosen)] for s in names)
    else:
        writer.writerow(["username", *headers])
        writer.writerows([s, *(totals[(s, c)] for c in chosen)] for s in names)
    write_atomic(Path(path), buffer.getvalue())
    return Path(path)
