"""A folder of grading reports: read back, summarised in ``grades.csv`` and ``written.md``, and shards' folders
merged into one (``capsule-lab grade``, ``capsule-lab grade-merge``; every chapter's exercises).

The grader's output folder holds one JSON report per notebook (what
:func:`~capsule_lab.grading.notebooks.report.grade_notebook` returns, with the batch's ``sha256``, ``grader``,
``settings`` and ``report``) and the summaries rebuilt from them: ``grades.csv`` (:func:`write_csv`, one row per
notebook in the order of the notebooks' paths) and ``written.md``
(:func:`~capsule_lab.grading.notebooks.written.write_written`). The folder, not the run, is the record:
:func:`read_reports` reads it back (a batch resumes from it), and :func:`merge_reports` builds one folder and one
``grades.csv`` from the folders of several shards, refusing a notebook graded with different contents, or by
different graders, in two of them.

Every report the grader writes is signed with the instructor's key (:mod:`capsule_lab.grading.engine.signing`):
given the key, :func:`read_reports` reads only the reports whose MAC verifies and lists the others as ``refused``, so
neither a resumed batch nor a merge takes a report the grader did not write.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Sequence

from ..._checks import check_folders
from ..engine.signing import existing_key, sign, verify
from ..tasks import TASKS
from .atomic import write_atomic, write_json
from .gradebook import flags_of
from .written import write_written

__all__ = ["CSV_NAME", "CSV_COLUMNS_HEAD", "CSV_COLUMNS_TAIL", "Reports", "read_reports", "write_csv",
           "write_summaries", "merge_reports"]

#: The summary :func:`write_csv` writes into the grader's output folder.
CSV_NAME = "grades.csv"
#: The first columns of ``grades.csv``; one column per task follows, then :data:`CSV_COLUMNS_TAIL`.
CSV_COLUMNS_HEAD = ("notebook", "chapter", "graded", "score", "max_score")
#: The last columns of ``grades.csv``: counts of tasks and cells that timed out, failed or hit a limit, the error.
CSV_COLUMNS_TAIL = ("task_timeouts", "task_errors", "task_limits", "cell_timeouts", "cell_errors", "cell_limits",
                    "sandbox", "grading_error", "flags")
_REPORT_KEYS = {"notebook", "chapter", "graded", "score", "max_score", "tasks", "timeout_cells", "cell_errors",
                "grading_error"}


class Reports(dict):
    """:func:`read_reports`' answer: ``{notebook: (file, report)}``, and ``refused``, the files that look like reports
    but whose MAC does not verify under the key (sorted)."""

    refused: list


def read_reports(folder: str | os.PathLike, key: bytes | None = None) -> Reports:
    """The reports in ``folder``: ``{notebook: (file, report)}`` from its ``*.json`` files (hidden and
    temporary files, and JSON that is not a grader's report, are left out); of two files naming the same
    notebook, the newer. With ``key`` (the instructor's), only reports signed with it count; the others are listed
    in the answer's ``refused``. An absent folder has none (``capsule-lab grade``, ``capsule-lab grade-merge``)."""
    folder = Path(folder)
    found: dict[str, tuple[Path, dict, int]] = {}
    refused: list[Path] = []
    if not folder.is_dir():
        out = Reports()
        out.refused = []
        return out
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            report = json.loads(path.read_text(encoding="utf8"))
            mtime = path.stat().st_mtime_ns
        except (OSError, ValueError):
            continue
        if not (isinstance(report, dict) and _REPORT_KEYS <= set(report) and isinstance(report["notebook"], str)
                and isinstance(report["tasks"], dict)):
            continue
        if key is not None and not verify(report, key):
            refused.append(path)
            continue
        name = report["notebook"]
        if name not in found or mtime > found[name][2]:
            found[name] = (path, report, mtime)
    out = Reports({k: (p, r) for k, (p, r, _) in found.items()})
    out.refused = refused
    return out


def _csv_row(r: dict, columns: list[str]) -> list:
    statuses = [t.get("status") for t in r["tasks"].values() if isinstance(t, dict)]
    tasks = r["tasks"]
    graded = bool(r["graded"])                   # an ungraded notebook's row carries no score, only why
    return [r["notebook"], r["chapter"] or "", "yes" if graded else "no", r["score"] if graded else "",
            r["max_score"] if graded else "",
            *[tasks[t]["points"] if graded and isinstance(tasks.get(t), dict) else "" for t in columns],
            statuses.count("timeout"), sum(s in ("error", "refused") for s in statuses),
            sum(s in ("memory limit", "cpu limit") for s in statuses),
            len(r["timeout_cells"]), len(r["cell_errors"]), len(r.get("limit_cells", ())), r.get("sandbox") or "",
            r["grading_error"] or "", flags_of(r)]


def write_csv(reports: Sequence[dict], folder: str | os.PathLike) -> Path:
    """Write ``<folder>/grades.csv`` from ``reports``: one row per notebook, sorted by its path, with
    ``notebook, chapter, graded, score, max_score``, the points of every task of the course (registry order: the
    same columns whatever chapters the folder holds), then ``task_timeouts, task_errors, task_limits`` (tasks with
    status timeout; error or refused; memory or cpu limit), ``cell_timeouts, cell_errors, cell_limits`` (cells of
    the kernel's run), ``grading_error`` and ``flags`` (:func:`~.gradebook.flags_of`: a full score beside cell
    errors). A notebook that was not graded has no score or points, only ``graded=no`` and its error. One row per
    notebook, as graded; ``capsule-lab gradebook`` makes the per-student gradebook.
    Written through a temporary file and a rename; returns its path (``capsule-lab grade``, ``capsule-lab
    grade-merge``)."""
    rows = sorted(reports, key=lambda r: r["notebook"])
    present = {t for r in rows for t in r["tasks"]}
    columns = list(TASKS) + sorted(present - set(TASKS))
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([*CSV_COLUMNS_HEAD, *columns, *CSV_COLUMNS_TAIL])
    for r in rows:
        writer.writerow(_csv_row(r, columns))
    path = Path(folder) / CSV_NAME
    write_atomic(path, buffer.getvalue())
    return path


def write_summaries(reports: Sequence[dict], folder: str | os.PathLike) -> Path:
    """Rebuild the summaries of ``folder`` from ``reports``: ``grades.csv`` (:func:`write_csv`) and, when any report
    records written answers, ``written.md`` (:func:`~capsule_lab.grading.notebooks.written.write_written`). Returns
    the CSV's path."""
    path = write_csv(reports, folder)
    write_written(reports, folder)
    return path


# ---------------------------------------------------------------- merging shards

def merge_reports(folders: Sequence[str | os.PathLike], out_dir: str | os.PathLike, key: bytes | None = None,
                  refused: list | None = None) -> list[dict]:
    """One folder from the report folders of several shards: every report copied into ``out_dir`` (a report
    already there for another notebook stays) and one ``grades.csv`` rebuilt from them; returns the reports.
    Only reports signed with ``key`` (default: the instructor's, at
    :func:`~capsule_lab.grading.engine.signing.key_path`, which must exist) are taken, each copy signed again (its
    ``report`` field names the new file); the files refused are appended to ``refused``.

    Raises ``ValueError`` for no key, a missing folder, no signed reports, a notebook graded with different contents
    in two folders (its ``sha256`` differs), or reports made by different graders (``capsule-lab
    grade-merge``, every chapter).
    """
    folders = check_folders(folders, "report")
    if key is None:
        key = existing_key(outside=[out_dir])
    chosen: dict[str, tuple[Path, dict]] = {}
    conflicts, graders = [], {}
    for folder in folders:
        found = read_reports(folder, key)
        if refused is not None:
            refused.extend(found.refused)
        for name, (path, report) in found.items():
            graders.setdefault(json.dumps(report.get("grader"), sort_keys=True), str(path))
            if name not in chosen:
                chosen[name] = (path, report)
                continue
            first_path, first = chosen[name]
            if first.get("sha256") != report.get("sha256"):
                conflicts.append(f"{name}: {first_path} has content {str(first.get('sha256'))[:12]}, "
                                 f"{path} has {str(report.get('sha256'))[:12]}")
            elif report.get("graded") and not first.get("graded"):
                chosen[name] = (path, report)
    if conflicts:
        raise ValueError(f"{len(conflicts)} notebook(s) graded with different contents in two folders (a "
                         "student resubmitted between shards?); grade them again into one folder:\n  "
                         + "\n  ".join(conflicts[:20]))
    if not chosen:
        raise ValueError(f"no grading reports signed with this grader's key in {', '.join(map(str, folders))}")
    if len(graders) > 1:
        raise ValueError("these reports were made by different graders (capsule_lab versions or sources): "
                         + "; ".join(f"{g} in e.g. {p}" for g, p in graders.items())
                         + " — grade every shard with the same installation")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    existing = read_reports(out, key)
    rows = {name: report for name, (_, report) in existing.items()}
    taken = {path.name: name for name, (path, _) in existing.items()}
    for name in sorted(chosen):
        path, report = chosen[name]
        target = existing[name][0] if name in existing else None
        if target is None:
            stem, k = path.stem, 1
            while f"{stem}.json" in taken:
                k += 1
                stem = f"{path.stem}__{k}"
            target = out / f"{stem}.json"
            taken[target.name] = name
        report = sign(dict(report, report=str(target)), key)
        write_json(target, report)
        rows[name] = report
    write_summaries(list(rows.values()), out)
    return sorted(rows.values(), key=lambda r: r["notebook"])
