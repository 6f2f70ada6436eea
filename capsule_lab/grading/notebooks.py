"""Grading students' notebooks (what instructors run; chapters 01–07): :func:`grade_notebook`, :func:`grade`.

:func:`grade_notebook` grades one notebook in three steps, all owned by the grader's process:

1. the chapter (from the notebook's metadata ``capsule_lab.chapter``, else its file name) and, from the
   task registry, its tasks; their inputs and reference answers are computed here, before any student
   code runs (:func:`capsule_lab.grading.evaluation.prepare`);
2. the notebook runs in a fresh kernel for its outputs and errors (:mod:`.kernel`), with a per-cell time
   limit; then every process it left behind is killed (:class:`~capsule_lab.grading.processes.Reaper`);
3. the student's functions are scored in a child process the grader starts and kills, on the grader's
   inputs, against the grader's answers (:mod:`.evaluation`).

The ``check(...)`` calls in the notebook are feedback for the student and count for nothing here: deleting
them changes no score, and nothing the student's code prints, writes or patches is read. :func:`grade`
does that for many notebooks and writes a JSON report per notebook and ``grades.csv``
(``capsule-lab grade NOTEBOOK... --out reports``). Grading is not a sandbox: the student's code runs with
the grader's rights (see the instructors' guide).
"""

from __future__ import annotations

import csv
import os
import re
import time
from pathlib import Path
from typing import Sequence

from .evaluation import prepare
from .evaluation import score_functions
from .kernel import run_notebook
from .processes import Reaper
from .tasks import TASKS, tasks_for_chapter

__all__ = ["chapter_of_notebook", "grade_notebook", "grade", "CSV_NAME"]

#: The summary :func:`grade` writes into its output folder.
CSV_NAME = "grades.csv"


def _chapter_from_metadata(nb) -> str | None:
    meta = nb.get("metadata", {}).get("capsule_lab", {}) if isinstance(nb, dict) else {}
    chapter = meta.get("chapter") if isinstance(meta, dict) else None
    return chapter if isinstance(chapter, str) and re.fullmatch(r"\d{2}", chapter) else None


def chapter_of_notebook(path: str | os.PathLike, nb=None) -> str:
    """The chapter ``NN`` of a notebook: its metadata ``capsule_lab.chapter`` (the exercises carry it, so a
    renamed submission still grades), else its file name (``01_capsules.ipynb``, ``Copy of 01_capsules``).

    ``nb``: the notebook if already read (else it is read from ``path`` when that is a readable notebook).
    Raises ``ValueError`` if neither tells the chapter.
    """
    if nb is None and Path(path).is_file():
        import nbformat

        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 - not a notebook: fall back to the name
            nb = None
    chapter = _chapter_from_metadata(nb) if nb is not None else None
    if chapter:
        return chapter
    name = Path(path).name
    m = re.match(r"(\d{2})_", name) or re.search(r"(?<![0-9A-Za-z])(\d{2})_", name)
    if not m:
        raise ValueError(f"cannot tell the chapter of {name!r}: its metadata has no capsule_lab.chapter and "
                         "its name is not like 'NN_topic.ipynb' (pass the chapter explicitly)")
    return m.group(1)


def _empty_report(path, chapter, timeout, task_timeout, error: str) -> dict:
    return {"notebook": str(path), "chapter": chapter, "graded": False, "grading_error": error, "score": 0,
            "max_score": sum(t.points for t in tasks_for_chapter(chapter)) if chapter else 0, "tasks": {},
            "definition_errors": [], "cell_errors": [], "timed_out": False, "timeout_cell": None,
            "timeout_cells": [], "kernel_restarts": [], "kernel_died": False, "aborted": None,
            "timeout": timeout, "task_timeout": task_timeout, "duration_s": 0.0}


def grade_notebook(path: str | os.PathLike, timeout: float = 120, kernel_name: str = "python3",
                   chapter: str | None = None, report_path: str | os.PathLike | None = None,
                   task_timeout: float | None = None) -> dict:
    """Grade one student's notebook; the file itself is never written.

    The notebook is read into memory; its chapter is ``chapter``, else its metadata, else its name. The
    tasks are the chapter's tasks in the registry (whatever check cells the notebook still has). The
    notebook runs in a fresh kernel (in its folder, ``CAPSULE_LAB_PROFILE=quick``) where each cell may run
    ``timeout`` seconds; the student's functions are then scored in a separate process, each task
    within ``task_timeout`` seconds (default: ``timeout``).

    Returns (and, with ``report_path``, writes as JSON) a report::

        {"notebook", "chapter", "graded", "grading_error", "score", "max_score",
         "tasks": {id: {points, max_points, status, passed, message, hint}},
         "definition_errors": [{cell, statement, error}], "cell_errors": [{cell, ename, evalue}],
         "timed_out", "timeout_cell", "timeout_cells", "kernel_restarts": [{cell, why}], "kernel_died",
         "aborted", "timeout", "task_timeout", "duration_s"}

    ``status`` is one of ``passed wrong error timeout``, ``not found``, ``refused``. ``graded`` is False
    (with ``grading_error``) only when grading itself failed: no kernel could start, the evaluation process
    could not start. Raises ``ValueError`` for a missing file, a bad time limit or an unknown chapter.
    Chapters 01–07 (``capsule-lab grade``).
    """
    import nbformat

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"notebook not found: {path}")
    for name, value in (("timeout", timeout), ("task_timeout", task_timeout)):
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    task_timeout = float(timeout if task_timeout is None else task_timeout)
    try:
        nb = nbformat.read(path, as_version=4)  # the in-memory copy that is executed
    except Exception as err:  # noqa: BLE001 - unreadable JSON, not a notebook
        raise ValueError(f"cannot read {path} as a notebook: {type(err).__name__}: {err}") from err
    chapter = chapter or chapter_of_notebook(path, nb)
    tasks = tasks_for_chapter(chapter)
    if not tasks:
        raise ValueError(f"chapter {chapter!r} of {path.name} has no graded tasks "
                         f"(chapters with tasks: {', '.join(sorted({t.chapter for t in TASKS.values()}))})")
    prepare(tasks)  # the answers, before any student code runs
    sources = [c.source if c.cell_type == "code" else None for c in nb.cells]
    folder = path.resolve().parent
    env = dict(os.environ)
    env["CAPSULE_LAB_PROFILE"] = "quick"

    start = time.monotonic()
    with Reaper() as reaper:
        run = run_notebook(nb, folder, timeout, kernel_name, env)
        reaper.reap()  # nothing the kernel started outlives it
        scored = score_functions(chapter, sources, folder, tasks, task_timeout, env)
        reaper.reap()
    grading_error = run["kernel_error"] and f"no kernel could run the notebook: {run['kernel_error']}"
    grading_error = grading_error or scored["grading_error"]
    results = scored["tasks"]
    report = {
        "notebook": str(path),
        "chapter": chapter,
        "graded": grading_error is None,
        "grading_error": grading_error,
        "score": sum(r["points"] for r in results.values()),
        "max_score": sum(t.points for t in tasks),
        "tasks": results,
        "definition_errors": scored["definition_errors"],
        "cell_errors": run["cell_errors"],
        "timed_out": bool(run["timeout_cells"]),
        "timeout_cell": run["timeout_cells"][0] if run["timeout_cells"] else None,
        "timeout_cells": run["timeout_cells"],
        "kernel_restarts": run["kernel_restarts"],
        "kernel_died": run["kernel_died"],
        "aborted": run["aborted"],
        "timeout": timeout,
        "task_timeout": task_timeout,
        "duration_s": round(time.monotonic() - start, 2),
    }
    if report_path is not None:
        _write_json(Path(report_path), report)
    return report


def _write_json(path: Path, data: dict) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf8")
    os.replace(tmp, path)


def _report_names(paths: list[Path]) -> list[str]:
    """Report file stems: the notebook's stem, prefixed by its folder when two notebooks share a stem."""
    stems = [p.stem for p in paths]
    names = []
    for p in paths:
        if stems.count(p.stem) == 1:
            names.append(p.stem)
        else:
            parent = re.sub(r"[^\w.-]+", "_", p.resolve().parent.name) or "notebook"
            names.append(f"{parent}__{p.stem}")
    seen: dict = {}
    unique = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        unique.append(n if seen[n] == 1 else f"{n}__{seen[n]}")
    return unique


def _csv_row(r: dict, columns: list[str]) -> list:
    statuses = [t["status"] for t in r["tasks"].values()]
    return [r["notebook"], r["chapter"] or "", "yes" if r["graded"] else "no", r["score"], r["max_score"],
            *[r["tasks"][t]["points"] if t in r["tasks"] else "" for t in columns],
            statuses.count("timeout"), sum(s in ("error", "refused") for s in statuses),
            len(r["timeout_cells"]), len(r["cell_errors"]), r["grading_error"] or ""]


def grade(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike = "reports", timeout: float = 120,
          kernel_name: str = "python3", task_timeout: float | None = None, chapter: str | None = None) -> list[dict]:
    """Grade several notebooks: ``<out_dir>/<notebook stem>.json`` each and ``<out_dir>/grades.csv``.

    ``grades.csv`` (also for one notebook) has one row per notebook: ``notebook, chapter, graded, score,
    max_score``, one column per task (its points; empty for another chapter's task), then
    ``task_timeouts`` and ``task_errors`` (tasks with status timeout; error or refused),
    ``cell_timeouts`` and ``cell_errors`` (in the kernel's run) and ``grading_error``. A notebook that
    cannot be graded at all (unreadable, no chapter) gets a report with ``graded: false`` and its
    ``grading_error`` instead of stopping the batch. Every task's answers are computed before the first
    notebook runs. Chapters 01–07 (``capsule-lab grade``).
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("no notebooks to grade")
    prepare(list(TASKS.values()))  # before any student code runs
    out = Path(out_dir)
    reports = []
    for p, name in zip(paths, _report_names(paths)):
        try:
            report = grade_notebook(p, timeout=timeout, kernel_name=kernel_name, chapter=chapter,
                                    task_timeout=task_timeout)
        except Exception as err:  # noqa: BLE001 - one bad file must not stop a class's grading
            report = _empty_report(p, None, timeout, task_timeout, f"{type(err).__name__}: {err}")
        report["report"] = str(out / f"{name}.json")
        reports.append(report)
    # written only now, when no student code runs any more (a later notebook cannot touch an earlier report)
    for report in reports:
        _write_json(Path(report["report"]), report)
    columns = [t for t in TASKS if any(t in r["tasks"] for r in reports)]
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (CSV_NAME + ".tmp")
    with open(tmp, "w", newline="", encoding="utf8") as f:
        writer = csv.writer(f)
        writer.writerow(["notebook", "chapter", "graded", "score", "max_score", *columns, "task_timeouts",
                         "task_errors", "cell_timeouts", "cell_errors", "grading_error"])
        for r in reports:
            writer.writerow(_csv_row(r, columns))
    os.replace(tmp, out / CSV_NAME)
    return reports
