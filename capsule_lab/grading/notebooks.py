"""Grading students' notebooks (what instructors run; chapters 01–02 so far): :func:`grade_notebook`, :func:`grade`.

:func:`grade_notebook` executes a copy of a student's notebook in a fresh kernel with a per-cell time limit
(an nbclient client that also caps each cell's output and records errors and timeouts) and collects the
results of the :func:`~capsule_lab.grading.checking.check` calls made in it; :func:`grade` does that for many
notebooks and writes JSON reports and a CSV summary (``capsule-lab grade NOTEBOOK... --out reports``). The
checks report to the grader through the file named by ``CAPSULE_LAB_GRADE_RECORD`` (one JSON line per
check), so nothing depends on parsing cell outputs. Grading is not a sandbox: the student's code runs with
the grader's rights.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Sequence

from .checking import RECORD_ENV
from .tasks import ALIASES, TASKS, tasks_for_chapter

__all__ = ["chapter_of_notebook", "grade_notebook", "grade"]

_TIMEOUT_ENAME = "CellTimeoutError"
_WARM_UP = '__import__("capsule_lab.grading")'
_WARM_UP_TIMEOUT = 300.0
_MAX_OUTPUT_CHARS = 200_000  # per cell; more is dropped (a student printing in a loop must not exhaust memory)


def chapter_of_notebook(path: str | os.PathLike) -> str:
    """The chapter ``NN`` of a notebook from its file name (``01_capsules.ipynb``, also ``Copy of 01_capsules``).

    Raises ``ValueError`` if the name holds no ``NN_`` prefix.
    """
    name = Path(path).name
    m = re.match(r"(\d{2})_", name) or re.search(r"(?<![0-9A-Za-z])(\d{2})_", name)
    if not m:
        raise ValueError(f"cannot tell the chapter of {name!r}: expected a file name like 'NN_topic.ipynb'")
    return m.group(1)


class _KernelStuck(Exception):
    pass


def _grading_client_class():
    from nbclient import NotebookClient

    class GradingClient(NotebookClient):
        """An nbclient client that caps each cell's stored output and records errors and timeouts."""

        def __init__(self, *args, grace: float = 10.0, **kwargs):
            super().__init__(*args, **kwargs)
            self.grace = grace
            self.cell_errors: list = []
            self.timeout_cells: list = []
            self._output_chars: dict = {}
            self.on_cell_error = self._on_cell_error
            self.on_notebook_start = self._warm_up

        async def _warm_up(self, notebook):
            """Import the package (torch included) before the first cell, so that the per-cell time limit
            measures the student's code, not the library's import; binds no name in the kernel."""
            from queue import Empty

            from jupyter_core.utils import ensure_async

            msg_id = await ensure_async(self.kc.execute(_WARM_UP, silent=True, store_history=False))
            deadline = time.monotonic() + _WARM_UP_TIMEOUT
            while time.monotonic() < deadline:
                try:
                    msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=deadline - time.monotonic()))
                except Empty:
                    return
                if msg.get("parent_header", {}).get("msg_id") == msg_id:
                    return

        def output(self, outs, msg, display_id, cell_index):
            used = self._output_chars.get(cell_index, 0)
            if used >= _MAX_OUTPUT_CHARS:
                return None
            out = super().output(outs, msg, display_id, cell_index)
            if out is not None:
                used += len(json.dumps(out, default=str))
                self._output_chars[cell_index] = used
                if used >= _MAX_OUTPUT_CHARS:
                    import nbformat

                    outs.append(nbformat.v4.new_output(
                        "stream", name="stderr", text="\n[output truncated by the grader]\n"))
            return out

        async def _on_cell_error(self, cell, cell_index, execute_reply):
            content = execute_reply.get("content", {})
            if content.get("ename") == _TIMEOUT_ENAME:
                self.timeout_cells.append(cell_index)
                if not await self._kernel_responds():
                    raise _KernelStuck(cell_index)
                return
            self.cell_errors.append({"cell": cell_index, "ename": str(content.get("ename", "")),
                                     "evalue": str(content.get("evalue", ""))[:2000]})

        async def _kernel_responds(self) -> bool:
            """After an interrupt: does the kernel answer a kernel_info request within ``grace`` seconds?"""
            from queue import Empty

            from jupyter_core.utils import ensure_async

            msg_id = await ensure_async(self.kc.kernel_info())
            deadline = time.monotonic() + self.grace
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                try:
                    msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=remaining))
                except Empty:
                    return False
                if msg.get("parent_header", {}).get("msg_id") == msg_id:
                    return True

    return GradingClient


def _read_records(path: str) -> list:
    records = []
    try:
        with open(path, encoding="utf8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("task"), str):
                    records.append(rec)
    except OSError:
        pass
    return records


def grade_notebook(path: str | os.PathLike, timeout: int = 120, kernel_name: str = "python3",
                   chapter: str | None = None, report_path: str | os.PathLike | None = None) -> dict:
    """Execute a copy of a student's notebook in a fresh kernel and score the checks it ran.

    The notebook is read into memory and executed there; the file itself is never written. Each cell
    may run for ``timeout`` seconds (the package and torch are imported before the first cell, so that
    their import time is not charged to it); a cell that runs longer is interrupted, reported, and
    execution continues with the next cell (if the kernel no longer answers, grading stops there). Cell errors
    do not stop execution. The kernel runs in the notebook's folder with ``CAPSULE_LAB_PROFILE=quick``
    and ``CAPSULE_LAB_GRADE_RECORD`` set, so that every :func:`check` call reports its result.

    The tasks graded are those of the notebook's chapter (``01_capsules.ipynb`` → ``01.*``; or
    ``chapter``); the last result of each counts, and a task whose check never ran scores 0 ("not run").

    Returns (and, with ``report_path``, writes as JSON) a report::

        {"notebook", "chapter", "score", "max_score", "tasks": {id: {points, max_points, passed, message}},
         "cell_errors": [{cell, ename, evalue}], "timed_out", "timeout_cell", "timeout_cells",
         "kernel_died", "aborted", "timeout", "duration_s"}

    Cell indices count all cells from 0. Chapters 01–02 (``capsule-lab grade``).
    """
    import nbformat
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"notebook not found: {path}")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    chapter = chapter or chapter_of_notebook(path)
    tasks = tasks_for_chapter(chapter)
    nb = nbformat.read(path, as_version=4)  # the in-memory copy that is executed

    fd, record = tempfile.mkstemp(prefix="capsule-lab-grade-", suffix=".jsonl")
    os.close(fd)
    env = dict(os.environ)
    env.update({RECORD_ENV: record, "CAPSULE_LAB_PROFILE": "quick"})
    client = _grading_client_class()(
        nb, timeout=int(math.ceil(timeout)), kernel_name=kernel_name, allow_errors=True,
        interrupt_on_timeout=True, record_timing=False, store_widget_state=False,
        error_on_timeout={"ename": _TIMEOUT_ENAME, "evalue": f"cell did not finish within {timeout} s",
                          "traceback": []},
        grace=max(5.0, min(30.0, float(timeout))),
        resources={"metadata": {"path": str(path.resolve().parent)}},
    )
    kernel_died, aborted = False, None
    start = time.monotonic()
    try:
        client.execute(env=env)
    except _KernelStuck as err:
        aborted = f"the kernel did not respond after the timeout in cell {err.args[0]}; later cells were not run"
    except DeadKernelError:
        kernel_died = True
        aborted = "the kernel died; later cells were not run"
    except CellTimeoutError as err:
        aborted = f"timed out: {err}"
    except Exception as err:  # a broken kernel spec, a failed start, …: report, don't crash a batch
        aborted = f"{type(err).__name__}: {err}"
    duration = time.monotonic() - start
    records = _read_records(record)
    try:
        os.unlink(record)
    except OSError:
        pass

    last: dict = {}
    for rec in records:
        tid = ALIASES.get(rec["task"], rec["task"])
        if tid in TASKS:
            last[tid] = rec
    results = {}
    for task in tasks:
        rec = last.get(task.id)
        if rec is None:
            results[task.id] = {"points": 0, "max_points": task.points, "passed": False, "message": "not run"}
        else:
            passed = bool(rec.get("passed"))
            results[task.id] = {"points": task.points if passed else 0, "max_points": task.points,
                                "passed": passed, "message": str(rec.get("message", ""))}
    report = {
        "notebook": str(path),
        "chapter": chapter,
        "score": sum(r["points"] for r in results.values()),
        "max_score": sum(t.points for t in tasks),
        "tasks": results,
        "cell_errors": client.cell_errors,
        "timed_out": bool(client.timeout_cells),
        "timeout_cell": client.timeout_cells[0] if client.timeout_cells else None,
        "timeout_cells": list(client.timeout_cells),
        "kernel_died": kernel_died,
        "aborted": aborted,
        "timeout": timeout,
        "duration_s": round(duration, 2),
    }
    if report_path is not None:
        _write_json(Path(report_path), report)
    return report


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf8")


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


def grade(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike = "reports", timeout: int = 120,
          kernel_name: str = "python3") -> list[dict]:
    """Grade several notebooks: ``<out_dir>/<notebook stem>.json`` each and, for more than one,
    ``<out_dir>/grades.csv`` (one row per notebook: notebook, score, max_score, one column per task).

    A notebook that cannot be graded at all (unreadable, no chapter in its name) gets a report with its
    error and score 0 instead of stopping the batch. Chapters 01–02 (``capsule-lab grade``).
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("no notebooks to grade")
    out = Path(out_dir)
    reports = []
    for p, name in zip(paths, _report_names(paths)):
        try:
            report = grade_notebook(p, timeout=timeout, kernel_name=kernel_name)
        except Exception as err:  # noqa: BLE001 - one bad file must not stop a class's grading
            report = {"notebook": str(p), "chapter": None, "score": 0, "max_score": 0, "tasks": {},
                      "cell_errors": [], "timed_out": False, "timeout_cell": None, "timeout_cells": [],
                      "kernel_died": False, "aborted": f"{type(err).__name__}: {err}", "timeout": timeout,
                      "duration_s": 0.0}
        report["report"] = str(out / f"{name}.json")
        _write_json(out / f"{name}.json", report)
        reports.append(report)
    if len(reports) > 1:
        columns = sorted({t for r in reports for t in r["tasks"]})
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "grades.csv", "w", newline="", encoding="utf8") as f:
            writer = csv.writer(f)
            writer.writerow(["notebook", "score", "max_score", *columns])
            for r in reports:
                writer.writerow([r["notebook"], r["score"], r["max_score"],
                                 *[r["tasks"][t]["points"] if t in r["tasks"] else "" for t in columns]])
    return reports
