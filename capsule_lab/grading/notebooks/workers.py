"""Grading a class's notebooks in worker processes (``capsule-lab grade --jobs N``; every chapter's exercises).

:class:`Workers` starts N worker processes (the ``spawn`` start method: forking a process that has loaded torch is
unsafe) that each grade one notebook at a time with :func:`grade_one`. Each worker, before it receives a notebook,
computes the answers of the batch's chapters (:func:`prepare_chapters`, cached per process) and checks that the
package's source is the one the batch started with; no notebook is handed out before every first worker is ready.
Each worker is a child subreaper while it grades (the :class:`~capsule_lab.grading.engine.processes.Reaper` of
``grade_notebook``), so what a notebook starts dies with it. A worker that dies (a student's code killed it, the
machine ran out of memory) costs only its notebook, whose report then says ``graded: false`` and why; a new worker
takes its place. What to grade, and where the reports go, is :mod:`.batch`'s.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections import deque
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable, Sequence

from ..engine.evaluation import prepare
from ..engine.processes import Reaper
from ..engine.reference_cache import package_fingerprint, signed_by
from ..engine.signing import instructor_key
from ..tasks import tasks_for_chapter
from .report import empty_report, grade_notebook

__all__ = ["Workers", "grade_one", "prepare_chapters"]

_WORKER_START_TIMEOUT = 600.0  # seconds for a worker to import torch and compute the batch's answers


def grade_one(path: str, grading: dict, key_file: str | None = None) -> dict:
    """:func:`~capsule_lab.grading.notebooks.report.grade_notebook` of ``path`` with the keywords ``grading`` and the
    instructor's ``key_file``; a notebook that cannot be graded at all gets a report saying why
    (:func:`~capsule_lab.grading.notebooks.report.empty_report`) instead of stopping the batch (``capsule-lab
    grade``)."""
    try:
        return grade_notebook(path, key_file=key_file, **grading)
    except Exception as err:  # noqa: BLE001 - one bad file must not stop a class's grading
        return empty_report(Path(path), None, grading.get("timeout"), grading.get("task_timeout"),
                            f"{type(err).__name__}: {err}")


def prepare_chapters(chapters: Sequence[str], key_file: str | None = None) -> None:
    """The inputs and reference answers of every task of ``chapters``, computed (or read from the grader's reference
    cache, signed with the key in ``key_file``) in this process before any notebook of the batch runs
    (:func:`~capsule_lab.grading.engine.evaluation.prepare`)."""
    with signed_by(instructor_key(key_file)):
        prepare([t for c in chapters for t in tasks_for_chapter(c)])


def _worker(conn, chapters: list, digest: str, grading: dict, key_file: str | None) -> None:
    """A grading worker (spawned): compute the batch's answers, say so (``("ready", problem or None)``), then
    grade each notebook it is sent (a path → ``("graded", path, report)``) until it is sent ``None``."""
    with contextlib.suppress(OSError):
        os.setpgrp()  # a Ctrl-C in the terminal reaches the batch's process, which stops the workers
    problem = None
    try:
        prepare_chapters(chapters, key_file)
        if package_fingerprint()["digest"] != digest:
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
            report = empty_report(Path(path), None, grading.get("timeout"), grading.get("task_timeout"), problem)
        else:
            report = grade_one(path, grading, key_file)
        conn.send(("graded", path, report))


class Workers:
    """N spawned workers; notebooks handed out one at a time; a dead worker's notebook reported, the worker
    replaced. This process is a child subreaper meanwhile, so a dead worker's kernel and child come back here
    and are killed (:class:`Reaper`, re-entered after each replacement so that live workers are kept)."""

    def __init__(self, jobs: int, chapters: list, digest: str, grading: dict, key_file: str | None = None):
        self.context = multiprocessing.get_context("spawn")
        self.args = (chapters, digest, grading, key_file)
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
                    finish(w["busy"], died(w["busy"], self._death(why)))
                # a worker that dies before it was ready is not replaced (it would die again)
                self._reap_and_replace(replace=w["ready"] and bool(pending))

    def _death(self, why: str) -> str:
        """What a notebook's report says when its worker died while grading it: without the sandbox, the notebook's
        code (it runs as the grader's user, and may signal the worker); in the sandbox it cannot (another PID
        namespace and user), so the machine or the grader."""
        if self.args[2].get("sandbox", True):
            return (f"the grading worker died while grading it ({why}), not by the notebook's code, which the sandbox "
                    "keeps from the grader's processes (the machine's memory? a fault of the grader?); the rest of "
                    "the batch went on")
        return (f"the notebook's code ended its grading process ({why}; without the sandbox its code may signal "
                "the grader's processes); this notebook only, the rest of the batch went on")

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
