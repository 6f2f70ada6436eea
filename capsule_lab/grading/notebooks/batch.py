"""Grading a class: a batch of notebooks in parallel, resumable and in shards (``capsule-lab grade --jobs N
--shard K/N``, ``capsule-lab grade-merge``; every chapter's exercises).

:func:`grade_batch` grades whole notebooks with :func:`~capsule_lab.grading.notebooks.report.grade_notebook`, each
in its own kernel and evaluation child as always, and adds what a class of hundreds of notebooks needs (:func:`grade`
is the same for a list of notebooks, returning their reports):

- **Workers** (:mod:`.workers`). With ``jobs=N``, N worker processes (the ``spawn`` start method: forking a process that
  has loaded torch is unsafe) each grade one notebook at a time. Each worker, before it receives a notebook,
  computes the answers of the batch's chapters (:func:`~capsule_lab.grading.engine.evaluation.prepare`, cached per
  process) and checks that the package's source is the one the batch started with; no notebook is handed
  out before every first worker is ready. Each worker is a child subreaper while it grades (the
  :class:`~capsule_lab.grading.engine.processes.Reaper` of ``grade_notebook``), so what a notebook starts dies with
  it. A worker that dies (a student's code killed it, the machine ran out of memory) costs only its
  notebook, whose report then says ``graded: false`` and why; a new worker takes its place. The batch's own
  process only hands out notebooks and writes reports, so it also sees Ctrl-C and SIGTERM (nbclient takes
  both over while a kernel runs). With ``jobs=None`` (the library's default) the notebooks are graded in
  this process, one after the other, without that protection.
- **Reports at once.** Each notebook's JSON report is written (to a temporary file, then renamed) the
  moment it is graded, with the sha256 of the notebook's bytes (``sha256``), the grader that graded it
  (``grader``: the package version and a digest of its source) and the grading ``settings`` (time limits,
  chapter, ...); ``grades.csv`` is rebuilt after every report from the reports in the folder, one row per
  notebook in the order of the notebooks' paths (:mod:`.folder`). At the end, the reports of this run are
  written once more from memory, so nothing a later notebook's code wrote over them survives.
- **Signed reports.** Each report carries a MAC under the instructor's key (``key_file``, default
  :func:`~capsule_lab.grading.engine.signing.key_path`, made on first use, never inside the output folder;
  :mod:`capsule_lab.grading.engine.signing`). Only reports that verify count: a file in the folder that does not is
  ``refused`` (named in :class:`Batch`), left out of ``grades.csv``, and its notebook graded again.
- **Resume.** A notebook whose signed report in the folder has the same content hash, grader and settings, and
  was graded, is skipped (``force=True`` grades everything again): an interrupted batch (Ctrl-C, a
  scheduler's time limit: SIGTERM is turned into an interrupt) resumes where it stopped. Which notebooks to
  skip is decided from the folder as it is before any student code runs.
- **Shards.** ``shard=(K, N)`` grades every N-th notebook of the sorted paths, starting at the K-th
  (:func:`shard_of`); report names are chosen over the whole list, so shards never clash in a shared
  folder. :func:`~capsule_lab.grading.notebooks.folder.merge_reports` builds one folder and one ``grades.csv``
  from the shards' folders, refusing a notebook graded with different contents, or by different graders, in two
  of them.

A notebook is known by its path as given (``report["notebook"]``), so shards and merges must name the
notebooks the same way (run every shard from the same folder).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import threading
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from ..engine.reference_cache import package_fingerprint
from ..engine.sandbox import problem as sandbox_problem
from ..engine.signing import instructor_key, key_path, sign
from .atomic import write_json
from .folder import read_reports, write_summaries
from .report import chapter_of_notebook, empty_report
from .workers import Workers, grade_one, prepare_chapters

__all__ = ["Batch", "grade_batch", "grade", "parse_shard", "shard_of", "default_jobs", "grader_fingerprint",
           "notebook_sha256"]


class Batch(NamedTuple):
    """What :func:`grade_batch` did: ``reports`` of the batch's notebooks in the order given (graded now or
    read back), the paths it ``graded`` now and ``skipped`` (already graded, same content), and the report files
    in the folder it ``refused`` (not signed with the instructor's key)."""

    reports: list
    graded: list
    skipped: list
    refused: list = []


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
                key_file: str | os.PathLike | None = None, **grading) -> Batch:
    """Grade ``paths`` into ``out_dir`` (see the module docstring): in ``jobs`` worker processes (None: in
    this one), the ``shard`` (K, N) only, skipping notebooks already graded there with the same content,
    grader and settings unless ``force``; ``on_start`` is
    called with the paths to grade and those skipped before the first notebook runs, ``on_report`` with
    each report as soon as it is written. ``timeout``, ``kernel_name``, ``task_timeout``,
    ``chapter`` and any further keyword go to :func:`~capsule_lab.grading.notebooks.report.grade_notebook` for
    every notebook. Each report gets ``sha256``, ``grader``, ``settings`` and ``report`` (its file), and is signed
    with the instructor's key in ``key_file`` (default :func:`~capsule_lab.grading.engine.signing.key_path`).

    Raises ``ValueError`` for no notebooks, a bad ``jobs``, ``shard`` or time limit, a key inside ``out_dir`` or one
    others may read; ``KeyboardInterrupt``
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
    if grading.get("sandbox", True) and sandbox_problem() is not None:
        raise RuntimeError(sandbox_problem())           # before any notebook runs (--no-sandbox: sandbox=False)
    grading.setdefault("sandbox", True)                 # recorded either way: a run with and one without differ
    settings = {"timeout": timeout, "task_timeout": task_timeout, "chapter": chapter, "kernel_name": kernel_name,
                **grading}
    grading = {"timeout": timeout, "kernel_name": kernel_name, "task_timeout": task_timeout, "chapter": chapter,
               **grading}
    fingerprint = grader_fingerprint()
    key_file = str(key_path(key_file))
    signing_key = instructor_key(key_file, outside=[out])

    # Before any student code runs: the folder as it is now (the reports signed with the key), the notebooks'
    # hashes, what to skip.
    snapshot = read_reports(out, signing_key)
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
        report = sign(report, signing_key)
        write_json(files_of[key], report)
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
        return empty_report(Path(key), guess, timeout, task_timeout, why)

    out.mkdir(parents=True, exist_ok=True)
    try:
        with _sigterm_interrupts():
            if todo and jobs is None:  # in this process, one after the other
                prepare_chapters(sorted(chapters), key_file)  # every answer before the first notebook runs
                for key in todo:
                    finish(key, grade_one(key, grading, key_file))
            elif todo:
                workers = Workers(min(jobs, len(todo)), sorted(chapters), fingerprint["digest"], grading, key_file)
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
            write_json(path, rows[key])
        for path in out.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
                claims = json.loads(path.read_text(encoding="utf8")).get("notebook")
                if claims in ours and path != ours[claims]:
                    path.unlink()
        write_summaries(list(rows.values()), out)
    reports = [done.get(_key(p)) or rows[_key(p)] for p in given]
    return Batch(reports, [k for k in todo if k in done], skipped, [str(p) for p in snapshot.refused])


def grade(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike = "reports", timeout: float = 120,
          kernel_name: str = "python3", task_timeout: float | None = None, chapter: str | None = None, *,
          jobs: int | None = None, shard: tuple[int, int] | None = None, force: bool = False,
          **grading) -> list[dict]:
    """Grade several notebooks: ``<out_dir>/<notebook stem>.json`` each and ``<out_dir>/grades.csv``; returns
    the notebooks' reports in the order given.

    ``grades.csv`` (also for one notebook) has one row per report in the folder, sorted by notebook path:
    ``notebook, chapter, graded, score, max_score``, one column per task (its points; empty for another
    chapter's task), then ``task_timeouts``, ``task_errors`` and ``task_limits`` (tasks with status timeout; error
    or refused; memory or cpu limit), ``cell_timeouts``, ``cell_errors`` and ``cell_limits`` (in the kernel's run)
    and ``grading_error``. A notebook that
    cannot be graded at all (unreadable, no chapter) gets a report with ``graded: false`` and its
    ``grading_error`` instead of stopping the batch. Every task's answers are computed before the first
    notebook runs. Each report is written the moment its notebook is graded; a notebook already graded in
    ``out_dir`` with the same content, grader and settings is not graded again (unless ``force``); ``jobs``
    worker processes grade in parallel (None: this process grades); ``shard=(K, N)`` grades one slice: see
    :func:`grade_batch`, which gets every further keyword too. Chapters 01–07 (``capsule-lab grade``).
    """
    return grade_batch(paths, out_dir, jobs=jobs, shard=shard, force=force, timeout=timeout,
                       kernel_name=kernel_name, task_timeout=task_timeout, chapter=chapter, **grading).reports
