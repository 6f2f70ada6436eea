"""Grading one student's notebook into its report (what instructors run; chapters 01–07): :func:`grade_notebook`.

:func:`grade_notebook` grades one notebook in three steps, all owned by the grader's process:

1. the chapter (from the notebook's metadata ``capsule_lab.chapter``, else its file name) and, from the
   task registry, its tasks; their inputs and reference answers are computed here, before any student
   code runs (:func:`capsule_lab.grading.engine.evaluation.prepare`);
2. the notebook runs in a fresh kernel for its outputs and errors (:mod:`.kernel`), with a per-cell time
   limit; then every process it left behind is killed (:class:`~capsule_lab.grading.engine.processes.Reaper`);
3. the student's functions are scored in a child process the grader starts and kills, on the grader's
   inputs, against the grader's answers (:mod:`capsule_lab.grading.engine.evaluation`).

The kernel and the child each run under a memory and a CPU-time limit
(:func:`~capsule_lab.grading.engine.processes.limited`), so one notebook cannot exhaust the grading machine.

The ``check(...)`` calls in the notebook are feedback for the student and count for nothing here: deleting
them changes no score, and nothing the student's code prints, writes or patches is read; in the grader's kernel
they run nothing (:data:`~capsule_lab.grading.engine.checking.GRADING_KERNEL_ENV`), so that a check that trains
networks does not double the time. :func:`~capsule_lab.grading.notebooks.batch.grade` does that for many notebooks
and writes a JSON report per notebook and ``grades.csv`` (``capsule-lab grade NOTEBOOK... --out reports``), through
:mod:`.batch` (parallel workers, resuming, shards). The kernel and the scoring process run in an OS
sandbox (:mod:`~capsule_lab.grading.engine.sandbox`; see the instructors' guide).
"""

from __future__ import annotations

import os
import re
import time
from contextlib import nullcontext
from pathlib import Path

from ..engine import sandbox as os_sandbox
from ..engine.checking import GRADING_KERNEL_ENV
from ..engine.evaluation import prepare, score_functions
from ..engine.hidden import draw, hidden_expected, new_nonce
from ..engine.processes import DEFAULT_MEMORY_LIMIT_MB, Reaper, check_limits, default_cpu_limit
from ..engine.reference_cache import cache_root, signed_by
from ..engine.signing import instructor_key, key_path, sign
from ...data.sources import data_root
from ..tasks import TASKS, tasks_for_chapter
from .atomic import write_json
from .kernel import run_notebook
from .written import written_answers

__all__ = ["chapter_of_notebook", "grade_notebook", "empty_report"]


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
        import nbformat  # when a notebook is read, not when capsule_lab.grading is imported

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


def empty_report(path, chapter, timeout, task_timeout, error: str) -> dict:
    """The report of a notebook that could not be graded at all (``graded: false``, ``grading_error``: why): the keys
    of :func:`grade_notebook`'s report, nothing scored (``capsule-lab grade``)."""
    return {"notebook": str(path), "chapter": chapter, "graded": False, "grading_error": error, "score": 0,
            "max_score": sum(t.points for t in tasks_for_chapter(chapter)) if chapter else 0, "tasks": {},
            "definition_errors": [], "cell_errors": [], "timed_out": False, "timeout_cell": None,
            "timeout_cells": [], "limit_cells": [], "kernel_restarts": [], "kernel_died": False, "aborted": None,
            "timeout": timeout, "task_timeout": task_timeout, "memory_limit_mb": None, "cpu_limit_s": None,
            "duration_s": 0.0, "written": {}, "sandbox": None, "hidden_draw": None}


def _sandbox(copy: Path, env: dict, key_file: Path) -> dict:
    """What the kernel's and the scoring process's sandboxes hold besides Python: the notebook's folder (its read-only
    copy, at :data:`~capsule_lab.grading.engine.sandbox.NOTEBOOK_FOLDER`, their working folder), the package and the
    course's data, read-only; the reference cache and the key's folder masked (where a mount would show them)."""
    inside = os_sandbox.NOTEBOOK_FOLDER
    return {"folder": inside, "env": env, "readable": [(str(copy), inside), os_sandbox.PACKAGE, str(data_root())],
            "masked": [str(cache_root()), str(key_file.parent)]}


def grade_notebook(path: str | os.PathLike, timeout: float = 120, kernel_name: str = "python3",
                   chapter: str | None = None, report_path: str | os.PathLike | None = None,
                   task_timeout: float | None = None, memory_limit_mb: float | None = None,
                   cpu_limit_s: float | None = None, sandbox: bool = True,
                   key_file: str | os.PathLike | None = None) -> dict:
    """Grade one student's notebook; the file itself is never written.

    The notebook is read into memory; its chapter is ``chapter``, else its metadata, else its name. The
    tasks are the chapter's tasks in the registry (whatever check cells the notebook still has). The
    notebook runs in a fresh kernel (in its folder, ``CAPSULE_LAB_PROFILE=quick``) where each cell may run
    ``timeout`` seconds; the student's functions are then scored in a separate process, each task
    within ``task_timeout`` seconds (default: ``timeout``). The kernel and the scoring process may each use
    ``memory_limit_mb`` MB of data (default :data:`~capsule_lab.grading.engine.processes.DEFAULT_MEMORY_LIMIT_MB`,
    4096) and ``cpu_limit_s`` CPU-seconds (default: 10 × the longer of the two time limits, at least 600:
    1,200; :func:`~capsule_lab.grading.engine.processes.default_cpu_limit`); 0 turns a limit off. Limits need
    POSIX (Linux, macOS). With ``sandbox`` (the default) the kernel and the scoring process run in the OS sandbox
    (:mod:`capsule_lab.grading.engine.sandbox`: bubblewrap, Linux), each with a read-only copy of the notebook's
    folder, and ``RuntimeError`` names the fix where none can start; ``sandbox=False`` (``capsule-lab grade
    --no-sandbox``) runs them with the grader's rights, and the report says ``"sandbox": "none"``. The answers are
    read from and kept in the grader's own cache, signed with the instructor's key (``key_file``, default
    :func:`~capsule_lab.grading.engine.signing.key_path`; made on first use), which also signs the report written to
    ``report_path`` (its ``"mac"``).

    Returns (and, with ``report_path``, writes as JSON) a report::

        {"notebook", "chapter", "graded", "grading_error", "score", "max_score",
         "tasks": {id: {points, max_points, status, passed, message, hint}},
         "definition_errors": [{cell, statement, error}], "cell_errors": [{cell, ename, evalue}],
         "timed_out", "timeout_cell", "timeout_cells", "limit_cells": [{cell, limit, message}],
         "kernel_restarts": [{cell, why}], "kernel_died", "aborted", "timeout", "task_timeout",
         "memory_limit_mb", "cpu_limit_s", "duration_s", "sandbox" ("bubblewrap" or "none"), "hidden_draw",
         "written": {question id: {title, answer, status, rubric, points (None), max_points}}}

    ``status`` is one of ``passed wrong error timeout``, ``not found``, ``refused``, ``memory limit``,
    ``cpu limit``; a task with hidden cases (drawn for this notebook from the instructor's key and the nonce
    ``hidden_draw``: :mod:`capsule_lab.grading.engine.hidden`) also has ``hidden: {cases, passed}``; ``limit_cells`` are the kernel's cells that hit a limit (``limit``: ``"memory"``, an
    allocation failed; ``"cpu"``, the kernel was killed and the next cell ran in a fresh one). ``graded`` is False
    (with ``grading_error``) only when grading itself failed: no kernel could start, the evaluation process
    could not start. ``written`` holds the student's written answers with their rubrics, for the instructor to
    score (:func:`~capsule_lab.grading.notebooks.written.written_answers`; none is scored here). Raises
    ``ValueError`` for a missing file, a bad time limit or an unknown chapter.
    Chapters 01–07 (``capsule-lab grade``).
    """
    import nbformat  # when a notebook is read, not when capsule_lab.grading is imported

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"notebook not found: {path}")
    for name, value in (("timeout", timeout), ("task_timeout", task_timeout)):
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    task_timeout = float(timeout if task_timeout is None else task_timeout)
    check_limits(memory_limit_mb, cpu_limit_s)
    if sandbox and os_sandbox.problem() is not None:
        raise RuntimeError(os_sandbox.problem())
    memory_limit_mb = float(DEFAULT_MEMORY_LIMIT_MB if memory_limit_mb is None else memory_limit_mb)
    cpu_limit_s = float(default_cpu_limit(timeout, task_timeout) if cpu_limit_s is None else cpu_limit_s)
    try:
        nb = nbformat.read(path, as_version=4)  # the in-memory copy that is executed
    except Exception as err:  # noqa: BLE001 - unreadable JSON, not a notebook
        raise ValueError(f"cannot read {path} as a notebook: {type(err).__name__}: {err}") from err
    chapter = chapter or chapter_of_notebook(path, nb)
    tasks = tasks_for_chapter(chapter)
    if not tasks:
        raise ValueError(f"chapter {chapter!r} of {path.name} has no graded tasks "
                         f"(chapters with tasks: {', '.join(sorted({t.chapter for t in TASKS.values()}))})")
    key_file = key_path(key_file)
    key = instructor_key(key_file, outside=[Path(report_path).parent] if report_path is not None else [])
    with signed_by(key):
        report = _grade(path, nb, chapter, tasks, timeout, kernel_name, task_timeout, memory_limit_mb, cpu_limit_s,
                        sandbox, key_file, key)
    if report_path is not None:
        write_json(Path(report_path), sign(report, key))
    return report


def _grade(path: Path, nb, chapter: str, tasks: list, timeout: float, kernel_name: str, task_timeout: float,
           memory_limit_mb: float, cpu_limit_s: float, sandbox: bool, key_file: Path, key: bytes) -> dict:
    """:func:`grade_notebook`'s work once its arguments are checked: the answers, the kernel's run, the scoring."""
    prepare(tasks)  # the answers, before any student code runs
    nonce = new_nonce()
    hidden = hidden_expected(tasks, draw(key, nonce))   # this notebook's hidden cases and their answers
    sources = [c.source if c.cell_type == "code" else None for c in nb.cells]
    folder = path.resolve().parent
    env = dict(os.environ)
    env["CAPSULE_LAB_PROFILE"] = "quick"

    start = time.monotonic()
    with Reaper() as reaper, (os_sandbox.stage_folder(folder) if sandbox else nullcontext()) as copy:
        kernel_env = dict(env, **{GRADING_KERNEL_ENV: "1"})   # the notebook's check cells: feedback, not run here
        box = _sandbox(copy, kernel_env, key_file) if sandbox else None
        run = run_notebook(nb, folder, timeout, kernel_name, kernel_env, memory_limit_mb, cpu_limit_s, box)
        reaper.reap()  # nothing the kernel started outlives it
        box = _sandbox(copy, env, key_file) if sandbox else None
        scored = score_functions(chapter, sources, folder, tasks, task_timeout, env, memory_limit_mb, cpu_limit_s,
                                 box, hidden)
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
        "limit_cells": run["limit_cells"],
        "kernel_restarts": run["kernel_restarts"],
        "kernel_died": run["kernel_died"],
        "aborted": run["aborted"],
        "timeout": timeout,
        "task_timeout": task_timeout,
        "memory_limit_mb": memory_limit_mb or None,
        "cpu_limit_s": cpu_limit_s or None,
        "duration_s": round(time.monotonic() - start, 2),
        "written": written_answers(nb, chapter),
        "sandbox": os_sandbox.BUBBLEWRAP if sandbox else os_sandbox.NONE,
        "hidden_draw": nonce,
    }
    return report
