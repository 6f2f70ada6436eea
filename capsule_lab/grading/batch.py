"""Grading a class: a batch of notebooks in parallel, resumable and in shards (``capsule-lab grade --jobs N
--shard K/N``, ``capsule-lab grade-merge``; every chapter's exercises).

:func:`grade_batch` grades whole notebooks with :func:`~capsule_lab.grading.notebooks.grade_notebook`, each in
its own kernel and evaluation child as always, and adds what a class of hundreds of notebooks needs:

- **Workers.** With ``jobs=N``, N worker processes (the ``spawn`` start method: forking a process that
  has loaded torch is unsafe) each grade one notebook at a time. Each worker, before it receives a notebook,
  computes the answers of the batch's chapters (:func:`~capsule_lab.grading.evaluation.prepare`, cached per
  process) and checks that the package's source is the one the batch started with; no notebook is handed
  out before every first worker is ready. Each worker is a child subreaper while it grades (the
  :class:`~capsule_lab.grading.processes.Reaper` of ``grade_notebook``), so what a notebook starts dies with
  it. A worker that dies (a student's code killed it, the machine ran out of memory) costs only its
  notebook, whose report then says ``graded: false`` and why; a new worker takes its place. The batch's own
  process only hands out notebooks and writes reports, so it also sees Ctrl-C and SIGTERM (nbclient takes
  both over while a kernel runs). With ``jobs=None`` (the library's default) the notebooks are graded in
  this process, one after the other, without that protection.
- **Reports at once.** Each notebook's JSON report is written (to a temporary file, then renamed) the
  moment it is graded, with the sha256 of the notebook's bytes (``sha256``), the grader that graded it
  (``grader``: the package version and a digest of its source) and the grading ``settings`` (time limits,
  chapter, ...); ``grades.csv`` is rebuilt after every report from the reports in the folder, one row per
  notebook in the order of the notebooks' paths. At the end, the reports of this run are written once more
  from memory, so nothing a later notebook's code wrote over them survives.
- **Resume.** A notebook whose report in the folder has the same content hash, grader and settings, and
  was graded, is skipped (``force=True`` grades everything again): an interrupted batch (Ctrl-C, a
  scheduler's time limit: SIGTERM is turned into an interrupt) resumes where it stopped. Which notebooks to
  skip is decided from the folder as it is before any student code runs.
- **Shards.** ``shard=(K, N)`` grades every N-th notebook of the sorted paths, starting at the K-th
  (:func:`shard_of`); report names are chosen over the whole list, so shards never clash in a shared
  folder. :func:`merge_reports` builds one folder and one ``grades.csv`` from the shards' folders, refusing a
  notebook graded with different contents, or by different graders, in two of them.

A notebook is known by its path as given (``report["notebook"]``), so shards and merges must name the
notebooks the same way (run every shard from the same folder).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import re
import signal
import threading
from collections import deque
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from .notebooks import CSV_NAME, _empty_report, _write_atomic, _write_json, chapter_of_notebook, grade_notebook
from .processes import Reaper
from .reference_cache import package_fingerprint
from .tasks import TASKS, tasks_for_chapter

__all__ = ["Batch", "grade_batch", "merge_reports", "write_csv", "write_summaries", "read_reports", "parse_shard",
           "shard_of", "default_jobs", "grader_fingerprint", "notebook_sha256", "CSV_COLUMNS_HEAD", "CSV_COLUMNS_TAIL"]

#: The first columns of ``grades.csv``; one column per task follows, then :data:`CSV_COLUMNS_TAIL`.
CSV_COLUMNS_HEAD = ("notebook", "chapter", "graded", "score", "max_score")
#: The last columns of ``grades.csv``: counts of tasks and cells that timed out, failed or hit a limit, the error.
CSV_COLUMNS_TAIL = ("task_timeouts", "task_errors", "task_limits", "cell_timeouts", "cell_errors", "cell_limits",
                    "grading_error")
_REPORT_KEYS = {"notebook", "chapter", "graded", "score", "max_score", "tasks", "timeout_cells", "cell_errors",
                "grading_error"}
_WORKER_START_TIMEOUT = 600.0  # seconds for a worker to import torch and compute the batch's answers


class Batch(NamedTuple):
    """What :func:`grade_batch` did: ``reports`` of the batch's notebooks in the order given (graded now or
    read back), and the paths it ``graded`` now and ``skipped`` (already graded, same content)."""

    reports: list
    graded: list
    skipped: list


# ---------------------------------------------------------------- identities

def notebook_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a notebook file's bytes (hex), as recorded in its report (``capsule-lab grade``)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def grader_fingerprint() -> dict:
    """``{"version", "digest"}`` of the installed grader: the package version and the sha256 of every source
    file of ``capsule_lab`` (relative path and bytes), so a changed grader grades again (``capsule-lab grade``)."""
    return package_fingerprint()


def default_jobs() -> int:
    """Worker processes for ``capsule-lab grade`` when ``--jobs`` is not given: the CPUs this process may
    run on (``os.sched_getaffinity``), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` → ``(K, N)``, 1 ≤ K ≤ N (``capsule-lab grade --shard K/N``); ``ValueError`` otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m:
        raise ValueError(f"--shard must be K/N, the K-th of N shards (e.g. 2/8), got {text!r}")
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise ValueError(f"--shard K/N: the number of shards N must be at least 1, got {text!r}")
    if not 1 <= k <= n:
        raise ValueError(f"--shard K/N: the shard K must be between 1 and N={n} (shards count from 1), got {text!r}")
    return k, n


def shard_of(paths: Sequence[str | os.PathLike], k: int, n: int) -> list[Path]:
    """Shard ``k`` of ``n`` (1-based) of ``paths``: sorted by path, every ``n``-th starting at the ``k``-th.
    The shards of 1..n are disjoint and together are all of ``paths`` (``capsule-lab grade --shard K/N``)."""
    if not (isinstance(n, int) and isinstance(k, int) and n >= 1 and 1 <= k <= n):
        raise ValueError(f"a shard must be K/N with 1 <= K <= N, got {k!r}/{n!r}")
    return sorted((Path(p) for p in paths), key=str)[k - 1::n]


def _key(path: str | os.PathLike) -> str:
    """A notebook's name in reports, CSV rows and merges: its path as given (``Path`` spelling)."""
    return str(Path(path))


def _report_names(paths: Sequence[Path]) -> list[str]:
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


# ---------------------------------------------------------------- the out folder

def read_reports(folder: str | os.PathLike) -> dict[str, tuple[Path, dict]]:
    """The reports in ``folder``: ``{notebook: (file, report)}`` from its ``*.json`` files (hidden and
    temporary files, and JSON that is not a grader's report, are left out); of two files naming the same
    notebook, the newer. An absent folder has none (``capsule-lab grade``, ``capsule-lab grade-merge``)."""
    folder = Path(folder)
    found: dict[str, tuple[Path, dict, int]] = {}
    if not folder.is_dir():
        return {}
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
        key = report["notebook"]
        if key not in found or mtime > found[key][2]:
            found[key] = (path, report, mtime)
    return {k: (p, r) for k, (p, r, _) in found.items()}


def _csv_row(r: dict, columns: list[str]) -> list:
    statuses = [t.get("status") for t in r["tasks"].values() if isinstance(t, dict)]
    tasks = r["tasks"]
    return [r["notebook"], r["chapter"] or "", "yes" if r["graded"] else "no", r["score"], r["max_score"],
            *[tasks[t]["points"] if isinstance(tasks.get(t), dict) else "" for t in columns],
            statuses.count("timeout"), sum(s in ("error", "refused") for s in statuses),
            sum(s in ("memory limit", "cpu limit") for s in statuses),
            len(r["timeout_cells"]), len(r["cell_errors"]), len(r.get("limit_cells", ())), r["grading_error"] or ""]


def write_csv(reports: Sequence[dict], folder: str | os.PathLike) -> Path:
    """Write ``<folder>/grades.csv`` from ``reports``: one row per notebook, sorted by its path, with
    ``notebook, chapter, graded, score, max_score``, the points of each task any report has (registry
    order), then ``task_timeouts, task_errors, task_limits`` (tasks with status timeout; error or refused; memory
    or cpu limit), ``cell_timeouts, cell_errors, cell_limits`` (cells of the kernel's run), ``grading_error``. Written through
    a temporary file and a rename; returns its path (``capsule-lab grade``, ``capsule-lab grade-merge``)."""
    import io

    rows = sorted(reports, key=lambda r: r["notebook"])
    present = {t for r in rows for t in r["tasks"]}
    columns = [t for t in TASKS if t in present] + sorted(present - set(TASKS))
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([*CSV_COLUMNS_HEAD, *columns, *CSV_COLUMNS_TAIL])
    for r in rows:
        writer.writerow(_csv_row(r, columns))
    path = Path(folder) / CSV_NAME
    _write_atomic(path, buffer.getvalue())
    return path


def write_summaries(reports: Sequence[dict], folder: str | os.PathLike) -> Path:
    """Rebuild the summaries of ``folder`` from ``reports``: ``grades.csv`` (:func:`write_csv`) and, when any report
    records written answers, ``written.md`` (:func:`~capsule_lab.grading.written.write_written`). Returns the
    CSV's path."""
    from .written import write_written

    path = write_csv(reports, folder)
    write_written(reports, folder)
    return path


# ---------------------------------------------------------------- grading one notebook (here or in a worker)

def _grade_one(path: str, grading: dict) -> dict:
    try:
        return grade_notebook(path, **grading)
    except Exception as err:  # noqa: BLE001 - one bad file must not stop a class's grading
        return _empty_report(Path(path), None, grading.get("timeout"), grading.get("task_timeout"),
                             f"{type(err).__name__}: {err}")


def _prepare(chapters: Sequence[str]) -> None:
    from .evaluation import prepare

    prepare([t for c in chapters for t in tasks_for_chapter(c)])


def _worker(conn, chapters: list, digest: str, grading: dict) -> None:
    """A grading worker (spawned): compute the batch's answers, say so (``("ready", problem or None)``), then
    grade each notebook it is sent (a path → ``("graded", path, report)``) until it is sent ``None``."""
    with contextlib.suppress(OSError):
        os.setpgrp()  # a Ctrl-C in the terminal reaches the batch's process, which stops the workers
    problem = None
    try:
        _prepare(chapters)
        if grader_fingerprint()["digest"] != digest:
            problem = ("capsule_lab's source files changed during grading (did a student's code write to them?): "
                       "reinstall the package and grade again, read-only this time")
    except Exception as err:  # noqa: BLE001 - reported for every notebook this worker is given
        problem = f"the grading worker could not start: {type(err).__name__}: {err}"
    conn.send(("ready", problem))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        path = message
        if problem:
            report = _empty_report(Path(path), None, grading.get("timeout"), grading.get("task_timeout"), problem)
        else:
            report = _grade_one(path, grading)
        conn.send(("graded", path, report))


class _Workers:
    """N spawned workers; notebooks handed out one at a time; a dead worker's notebook reported, the worker
    replaced. This process is a child subreaper meanwhile, so a dead worker's kernel and child come back here
    and are killed (:class:`Reaper`, re-entered after each replacement so that live workers are kept)."""

    def __init__(self, jobs: int, chapters: list, digest: str, grading: dict):
        import multiprocessing

        self.context = multiprocessing.get_context("spawn")
        self.args = (chapters, digest, grading)
        self.workers: list[dict] = []
        self.started = 0
        for _ in range(jobs):
            self._start()
        self.reaper = Reaper().__enter__()

    def _start(self) -> None:
        ours, theirs = self.context.Pipe()
        proc = self.context.Process(target=_worker, args=(theirs, *self.args), daemon=True,
                                    name=f"capsule-lab-grader-{self.started + 1}")
        proc.start()
        theirs.close()
        self.started += 1
        self.workers.append({"proc": proc, "conn": ours, "ready": False, "busy": None, "number": self.started})

    def _reap_and_replace(self, replace: bool) -> None:
        self.reaper.__exit__(None, None, None)  # kills what the dead worker left (live workers are kept)
        if replace:
            self._start()
        self.reaper = Reaper().__enter__()

    def run(self, todo: list, finish: Callable[[str, dict], None], died: Callable[[str, str], dict]) -> None:
        """Grade the notebooks ``todo`` (paths); ``finish(path, report)`` for each, with ``died(path, why)``'s
        report for one whose worker died."""
        from multiprocessing.connection import wait

        pending = deque(todo)
        jobs = len(self.workers)
        gate = False  # no notebook before every first worker has computed its answers (or died)
        while pending or any(w["busy"] is not None for w in self.workers):
            if not self.workers:
                for key in pending:
                    finish(key, died(key, "no grading worker could start"))
                return
            gate = gate or all(w["ready"] or w["number"] > jobs for w in self.workers)
            for w in self.workers:
                if gate and w["ready"] and w["busy"] is None and pending:
                    w["busy"] = pending.popleft()
                    with contextlib.suppress(OSError, ValueError):
                        w["conn"].send(w["busy"])
            objects = [w["conn"] for w in self.workers] + [w["proc"].sentinel for w in self.workers]
            ready = wait(objects, timeout=_WORKER_START_TIMEOUT)
            for w in list(self.workers):
                dead = False
                try:
                    while w["conn"].poll():
                        message = w["conn"].recv()
                        if message[0] == "ready":
                            w["ready"] = True
                            continue
                        _, key, report = message
                        if key == w["busy"]:
                            w["busy"] = None
                            finish(key, report)
                except (EOFError, OSError):
                    dead = True
                dead = dead or (w["proc"].sentinel in ready and not w["proc"].is_alive())
                if not ready and not w["ready"]:
                    dead = True  # did not start in time
                if not dead:
                    continue
                w["proc"].kill()
                w["proc"].join()
                with contextlib.suppress(OSError):
                    w["conn"].close()
                self.workers.remove(w)
                code = w["proc"].exitcode
                why = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
                       else f"exit status {code}")
                if w["busy"] is not None:
                    finish(w["busy"], died(w["busy"], f"the grading worker died while grading it ({why}); "
                                                      "the rest of the batch went on"))
                # a worker that dies before it was ready is not replaced (it would die again)
                self._reap_and_replace(replace=w["ready"] and bool(pending))

    def close(self, kill: bool = False) -> None:
        """Stop the workers (``kill``: at once, e.g. on Ctrl-C) and kill whatever they left behind."""
        for w in self.workers:
            if kill:
                w["proc"].kill()
            with contextlib.suppress(OSError, ValueError):
                w["conn"].send(None)
        for w in self.workers:
            w["proc"].join(timeout=10)
            if w["proc"].is_alive():
                w["proc"].kill()
                w["proc"].join()
            with contextlib.suppress(OSError):
                w["conn"].close()
        self.workers = []
        self.reaper.__exit__(None, None, None)


@contextlib.contextmanager
def _sigterm_interrupts():
    """While active, SIGTERM (a scheduler's time limit, ``kill``) raises KeyboardInterrupt like Ctrl-C, so the
    batch stops its workers and kernels and keeps the reports written so far."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------- the batch

def _chapter_guess(path: Path, data: bytes | None, chapter: str | None) -> str | None:
    if chapter:
        return chapter
    try:
        nb = json.loads(data) if data is not None else {}
    except ValueError:
        nb = {}
    try:
        return chapter_of_notebook(path, nb if isinstance(nb, dict) else {})
    except ValueError:
        return None


def grade_batch(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike = "reports", *,
                jobs: int | None = None,
                shard: tuple[int, int] | None = None, force: bool = False,
                on_start: Callable[[list, list], None] | None = None,
                on_report: Callable[[dict], None] | None = None, timeout: float = 120,
                kernel_name: str = "python3", task_timeout: float | None = None, chapter: str | None = None,
                **grading) -> Batch:
    """Grade ``paths`` into ``out_dir`` (see the module docstring): in ``jobs`` worker processes (None: in
    this one), the ``shard`` (K, N) only, skipping notebooks already graded there with the same content,
    grader and settings unless ``force``; ``on_start`` is
    called with the paths to grade and those skipped before the first notebook runs, ``on_report`` with
    each report as soon as it is written. ``timeout``, ``kernel_name``, ``task_timeout``,
    ``chapter`` and any further keyword go to :func:`~capsule_lab.grading.notebooks.grade_notebook` for
    every notebook. Each report gets ``sha256``, ``grader``, ``settings`` and ``report`` (its file).

    Raises ``ValueError`` for no notebooks, a bad ``jobs``, ``shard`` or time limit; ``KeyboardInterrupt``
    (also on SIGTERM) after stopping the workers, with the reports written so far kept
    (``capsule-lab grade``, every chapter).
    """
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
        raise ValueError(f"--jobs must be a whole number of worker processes, at least 1, got {jobs!r}")
    for name, value in (("timeout", timeout), ("task_timeout", task_timeout)):
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    given = list(dict.fromkeys(Path(p) for p in paths))  # each notebook once, in the order given
    if not given:
        raise ValueError("no notebooks to grade")
    names = dict(zip(map(_key, given), _report_names(given)))  # chosen over the whole list: shards agree
    if shard is not None:
        k, n = shard
        keep = set(map(_key, shard_of(given, k, n)))
        given = [p for p in given if _key(p) in keep]
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    settings = {"timeout": timeout, "task_timeout": task_timeout, "chapter": chapter, "kernel_name": kernel_name,
                **grading}
    grading = {"timeout": timeout, "kernel_name": kernel_name, "task_timeout": task_timeout, "chapter": chapter,
               **grading}
    fingerprint = grader_fingerprint()

    # Before any student code runs: the folder as it is now, the notebooks' hashes, what to skip.
    snapshot = read_reports(out)
    rows = {key: report for key, (_, report) in snapshot.items()}
    files_of = {key: path for key, (path, _) in snapshot.items()}
    taken = {path.name for path in files_of.values()}
    hashes, chapters, todo, skipped = {}, set(), [], []
    for p in given:
        key = _key(p)
        try:
            data = p.read_bytes()
            hashes[key] = hashlib.sha256(data).hexdigest()
        except OSError:
            data, hashes[key] = None, None
        old = rows.get(key)
        if (not force and old is not None and hashes[key] is not None and old.get("graded") is True
                and old.get("sha256") == hashes[key] and old.get("grader") == fingerprint
                and old.get("settings") == json.loads(json.dumps(settings))):
            skipped.append(key)
            continue
        todo.append(key)
        guess = _chapter_guess(p, data, chapter)
        if guess:
            chapters.add(guess)
    for key in todo:  # a new report's file: the notebook's old one, else a free name
        if key not in files_of:
            name, k = names[key], 1
            while f"{name}.json" in taken:
                k += 1
                name = f"{names[key]}__{k}"
            files_of[key] = out / f"{name}.json"
            taken.add(files_of[key].name)

    if on_start is not None:
        on_start(list(todo), list(skipped))
    done: dict[str, dict] = {}

    def finish(key: str, report: dict) -> None:
        report.update(sha256=hashes[key], grader=fingerprint, settings=settings, report=str(files_of[key]))
        _write_json(files_of[key], report)
        done[key] = rows[key] = report
        write_summaries(list(rows.values()), out)
        if on_report is not None:
            on_report(report)

    def died(key: str, why: str) -> dict:
        try:
            data = Path(key).read_bytes()
        except OSError:
            data = None
        guess = _chapter_guess(Path(key), data, chapter)
        return _empty_report(Path(key), guess, timeout, task_timeout, why)

    out.mkdir(parents=True, exist_ok=True)
    try:
        with _sigterm_interrupts():
            if todo and jobs is None:  # in this process, one after the other
                _prepare(sorted(chapters))  # every answer before the first notebook runs
                for key in todo:
                    finish(key, _grade_one(key, grading))
            elif todo:
                workers = _Workers(min(jobs, len(todo)), sorted(chapters), fingerprint["digest"], grading)
                try:
                    workers.run(todo, finish, died)
                except BaseException:
                    workers.close(kill=True)
                    raise
                workers.close()
    finally:
        # now that no student code runs any more: this batch's reports written once more from memory (so they
        # are the newest in the folder), any other file that claims one of its notebooks removed, the CSV
        ours = {key: files_of[key] for key in [*done, *skipped]}
        for key, path in ours.items():
            _write_json(path, rows[key])
        for path in out.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
                claims = json.loads(path.read_text(encoding="utf8")).get("notebook")
                if claims in ours and path != ours[claims]:
                    path.unlink()
        write_summaries(list(rows.values()), out)
    reports = [done.get(_key(p)) or rows[_key(p)] for p in given]
    return Batch(reports, [k for k in todo if k in done], skipped)


# ---------------------------------------------------------------- merging shards

def merge_reports(folders: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> list[dict]:
    """One folder from the report folders of several shards: every report copied into ``out_dir`` (a report
    already there for another notebook stays) and one ``grades.csv`` rebuilt from them; returns the reports.

    Raises ``ValueError`` for a missing folder, no reports at all, a notebook graded with different contents
    in two folders (its ``sha256`` differs), or reports made by different graders (``capsule-lab
    grade-merge``, every chapter).
    """
    folders = [Path(f) for f in folders]
    if not folders:
        raise ValueError("no report folders to merge")
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise ValueError(f"report folder(s) not found: {', '.join(missing)}")
    chosen: dict[str, tuple[Path, dict]] = {}
    conflicts, graders = [], {}
    for folder in folders:
        for key, (path, report) in read_reports(folder).items():
            graders.setdefault(json.dumps(report.get("grader"), sort_keys=True), str(path))
            if key not in chosen:
                chosen[key] = (path, report)
                continue
            first_path, first = chosen[key]
            if first.get("sha256") != report.get("sha256"):
                conflicts.append(f"{key}: {first_path} has content {str(first.get('sha256'))[:12]}, "
                                 f"{path} has {str(report.get('sha256'))[:12]}")
            elif report.get("graded") and not first.get("graded"):
                chosen[key] = (path, report)
    if conflicts:
        raise ValueError(f"{len(conflicts)} notebook(s) graded with different contents in two folders (a "
                         "student resubmitted between shards?); grade them again into one folder:\n  "
                         + "\n  ".join(conflicts[:20]))
    if not chosen:
        raise ValueError(f"no grading reports in {', '.join(map(str, folders))}")
    if len(graders) > 1:
        raise ValueError("these reports were made by different graders (capsule_lab versions or sources): "
                         + "; ".join(f"{g} in e.g. {p}" for g, p in graders.items())
                         + " — grade every shard with the same installation")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    existing = read_reports(out)
    rows = {key: report for key, (_, report) in existing.items()}
    taken = {path.name: key for key, (path, _) in existing.items()}
    for key in sorted(chosen):
        path, report = chosen[key]
        target = existing[key][0] if key in existing else None
        if target is None:
            name, k = path.stem, 1
            while f"{name}.json" in taken:
                k += 1
                name = f"{path.stem}__{k}"
            target = out / f"{name}.json"
            taken[target.name] = key
        report = dict(report, report=str(target))
        _write_json(target, report)
        rows[key] = report
    write_summaries(list(rows.values()), out)
    return sorted(rows.values(), key=lambda r: r["notebook"])
