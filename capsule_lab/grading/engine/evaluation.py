"""Scoring a notebook's functions in a process the grader owns (``capsule-lab grade``, chapters 01–07).

The grade of a task comes from here, never from what ran in the student's kernel:

1. :func:`prepare`: the grader computes every task's inputs and the reference's answers itself, in its
   own process, before any student code runs (and keeps them for the rest of the process), or reads the answers
   it computed in an earlier run from the reference cache (:mod:`.reference_cache`);
2. :func:`score_functions`: it starts :mod:`capsule_lab.grading.engine.child` in a new session with the notebook's code
   cells and each task's *inputs* (never the answers), gives each task ``task_timeout`` seconds and kills
   the child's whole session when one runs over (then starts a new child for the remaining tasks); the
   child runs under a memory and a CPU-time limit (:func:`~capsule_lab.grading.engine.processes.limited`), and a
   task that runs out of either gets its own status, the remaining tasks again going to a new child;
3. the child sends back plain tensors (``torch.save``; read here with ``torch.load(weights_only=True)``
   and checked field by field), and the grader compares them with its own answers
   (:func:`~capsule_lab.grading.engine.judging.verdict`).

A task scores its points with status ``passed``; otherwise ``wrong``, ``error``, ``timeout``, ``not found``
(no function of the expected name), ``refused`` (the function called the package's answer), ``memory
limit`` (an allocation failed at the child's memory limit) or ``cpu limit`` (the child used up its
CPU time: SIGXCPU, or SIGKILL at the hard limit, with the time used at the limit). With
``wrong`` or ``error``, a task whose cases form several groups earns the share of each group whose cases
all pass (:func:`~capsule_lab.grading.engine.judging.credit`); the other statuses earn nothing.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import torch

from ..tasks import TASKS
from ..tasks.registry import Task
from .checking import stand_in_note
from .hidden import fixed_cases, graded_cases
from .judging import credit, earned_points, passed_cases, verdict
from .processes import (DEFAULT_MEMORY_LIMIT_MB, check_limits, default_cpu_limit, is_memory_error, kill_session,
                        limited, start_in_new_session, TreeUsage, usage)
from . import sandbox as os_sandbox
from .records import from_record
from .reference_cache import package_fingerprint
from .running import NOT_IMPLEMENTED, Expected, expected

__all__ = ["STATUSES", "prepare", "score_functions"]

#: Every status a graded task can have; only ``passed`` earns points.
STATUSES = ("passed", "wrong", "error", "timeout", "not found", "refused", "memory limit", "cpu limit")

_EXPECTED: dict[str, list[Expected]] = {}
_DIGEST: list[str] = []           # the package's source as the grader first saw it (before student code)
_STARTUP_TIMEOUT = 120.0          # seconds for the child to import torch and the package
_MAX_RESULT_BYTES = 64 * 2 ** 20  # a result file larger than this is not read
_MAX_LOAD_RESTARTS = 3
_POLL = 0.02
_TIGHT_MEMORY_MB = 2048           # below this, a child that does not start may lack the memory to import torch
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])   # the folder that holds capsule_lab/
_WORKDIR_INSIDE = "/evaluation"                              # where a sandboxed child finds its request


def _package_digest() -> str:
    return package_fingerprint()["digest"]


def prepare(tasks: Sequence[Task]) -> None:
    """Compute (once per process) the inputs and the reference's answers of ``tasks``, in this process;
    the first call also fingerprints the package's source files (the evaluation child imports them)."""
    if not _DIGEST:
        _DIGEST.append(_package_digest())
    for task in tasks:
        if task.id not in _EXPECTED:      # an experiment's drawn cases run on the seeds drawn for each notebook only
            _EXPECTED[task.id] = expected(dataclasses.replace(task, cases=lambda fixed=fixed_cases(task): fixed),
                                          cached=True)


def _request(chapter: str, folder: Path, sources: list, tasks: Sequence[Task], statement_timeout: float,
             start: int, skip: list, cases_of: dict, replaced: dict | None = None, hide: str | None = None) -> dict:
    specs = []
    for task in tasks:
        cases = [{"name": e.case.name, "args": list(e.case.args), "kwargs": dict(e.case.kwargs),
                  "grad": e.case.grad, "weights": e.weights} for e in cases_of[task.id]]
        # the inputs only: the answers stay here; and the earlier tasks whose stand-ins take the student's place
        specs.append({"id": task.id, "cases": cases, "stand_ins": list((replaced or {}).get(task.id, ()))})
    return {"chapter": chapter, "folder": str(folder), "sources": sources, "tasks": specs, "start": start,
            "skip": list(skip), "statement_timeout": float(statement_timeout), "hide": hide}


def _outcome(task: Task, status: str, problem: str | None = None, hint: str | None = None,
             fraction: float = 0.0, failed: Sequence[str] = (), hidden: dict | None = None,
             total: int | None = None) -> dict:
    """A task's outcome; ``fraction`` of its points for a task not passed (partial credit by case group);
    ``hidden``: ``{"cases", "passed"}`` of its hidden cases, where it had any; ``total``: the cases run (default the
    published ones and the hidden)."""
    passed = status == "passed"
    hint = "" if passed else (task.hint if hint is None else hint)
    total = len(_EXPECTED[task.id]) + (hidden["cases"] if hidden else 0) if total is None else total
    message = f"passed all {total} cases" if passed else f"{problem} — hint: {hint}"
    if hidden:
        message += f" (hidden cases drawn for this grading: {hidden['passed']} of {hidden['cases']} passed)"
    points = task.points if passed else earned_points(task, fraction if status in ("wrong", "error") else 0.0)
    if not passed and points:
        message += f" (case groups failed: {', '.join(failed)})"
    out = {"points": points, "max_points": task.points, "status": status, "passed": passed, "message": message,
           "hint": hint}
    if hidden is not None:
        out["hidden"] = dict(hidden)
    return out


def _memory_outcome(task: Task, memory_limit_mb: float) -> dict:
    return _outcome(task, "memory limit",
                    f"`{task.function}` ran out of memory: the evaluation process may use {memory_limit_mb:g} MB "
                    "(an instructor raises the limit with `capsule-lab grade --memory-limit MB`)",
                    "your function allocates far more than the task needs: look for a list or tensor that grows "
                    "in a loop, or a tensor far larger than the inputs")


def _cpu_outcome(task: Task, cpu_limit_s: float, where: str) -> dict:
    return _outcome(task, "cpu limit",
                    f"{where} used up the evaluation process's CPU-time limit of {cpu_limit_s:g} CPU-seconds "
                    "(an instructor raises it with `capsule-lab grade --cpu-limit S`)",
                    "your function computes far longer than the task needs: look for a loop that never ends or "
                    "repeats the whole computation")


def _judge(task: Task, path: Path, cases: list, memory_limit_mb: float = 0) -> dict:
    """The outcome of one task from the child's result file (untrusted: any defect is an ``error``) against
    ``cases`` (its published and hidden :class:`Expected`); with a memory limit, a case that failed to allocate makes
    it ``memory limit``."""
    try:
        if path.stat().st_size > _MAX_RESULT_BYTES:
            raise ValueError("the result is too large")
        result = torch.load(path, weights_only=True)
        if not isinstance(result, dict) or not isinstance(result.get("found"), bool):
            raise ValueError("malformed result")
        if not result["found"]:
            return _outcome(task, "not found", f"no function named `{task.function}` in the notebook")
        if result.get("not_implemented") is True:
            return _outcome(task, "error", NOT_IMPLEMENTED)
        if isinstance(result.get("failure"), str):
            if memory_limit_mb and is_memory_error(result["failure"]):
                return _memory_outcome(task, memory_limit_mb)
            return _outcome(task, "error", f"your function's result could not be read: {result['failure']}")
        records = result.get("cases")
        if not isinstance(records, list) or not records or len(records) > len(cases):
            raise ValueError("malformed result")
        got = [from_record(c, task) for c in records]
    except Exception as err:  # noqa: BLE001 - whatever the child wrote, it earns nothing
        return _outcome(task, "error", f"the evaluation returned no usable result ({type(err).__name__}: {err})")
    if memory_limit_mb and any(g.error and is_memory_error(g.error) for g in got):
        return _memory_outcome(task, memory_limit_mb)
    status, problem, hint = verdict(task, cases, got)
    fraction, failed = credit(task, cases, got)
    hidden = [k for k, e in enumerate(cases) if e.case.hidden]
    counts = None
    if hidden:
        ok = passed_cases(task, cases, got)
        counts = {"cases": len(hidden), "passed": sum(ok[k] for k in hidden)}
    return _outcome(task, status, problem, hint, fraction, failed, counts, total=len(cases))


def _progress(workdir: Path, prefix: str) -> int | None:
    try:
        text = (workdir / "progress").read_text()
    except (OSError, UnicodeDecodeError):
        return None
    word, _, number = text.partition(" ")
    return int(number) if word == prefix and number.isdigit() else None


def _limit_hit(code: int | None, seen: tuple | None, memory_limit_mb: float, cpu_limit_s: float) -> str | None:
    """Which limit ended the (exited) child, whose exit status was ``code``, if one did: ``"cpu"`` for SIGXCPU, or SIGKILL once the CPU
    time last seen reached the limit; ``"memory"`` for a death by signal or error status with the data size
    last seen within 10% of the limit (an allocation the child could not even report)."""
    import signal

    if cpu_limit_s and (code == -signal.SIGXCPU or (code == -signal.SIGKILL and seen and seen[0] >= cpu_limit_s - 1)):
        return "cpu"
    if memory_limit_mb and code != 0 and seen and seen[1] is not None and seen[1] >= 0.9 * memory_limit_mb:
        return "memory"
    return None


def score_functions(chapter: str, sources: list, folder: str | os.PathLike, tasks: Sequence[Task],
                    task_timeout: float = 60.0, env: dict | None = None,
                    memory_limit_mb: float | None = None, cpu_limit_s: float | None = None,
                    sandbox: dict | None = None, hidden: dict | None = None) -> dict:
    """Score ``tasks`` on the functions the notebook's code cells define (see the module docstring).

    ``sources``: the notebook's cells' sources, ``None`` for non-code cells; ``folder``: the notebook's
    folder (the child's working directory). Each child may use ``memory_limit_mb`` MB of data (None:
    :data:`~capsule_lab.grading.engine.processes.DEFAULT_MEMORY_LIMIT_MB`) and ``cpu_limit_s`` CPU-seconds (None:
    :func:`~capsule_lab.grading.engine.processes.default_cpu_limit` of ``task_timeout``); 0: no such limit
    (:func:`~capsule_lab.grading.engine.processes.limited`). ``sandbox``: None, or each child runs in the OS sandbox
    (:mod:`.sandbox`: ``{"folder", "env", "readable", "masked"}`` as for the kernel), the package's source unmounted
    before the notebook's code runs, its request and results in a folder of its own that the grader reads once the
    child is gone. ``hidden``: ``{task id: [Expected]}``, the notebook's hidden cases
    (:func:`~capsule_lab.grading.engine.hidden.hidden_expected`), scored after the published ones; each outcome of
    a task that has some records ``hidden: {cases, passed}``.

    A task that uses earlier tasks' functions (``Task.uses``) is graded on its own: where one of those did not
    pass, the task is graded again in a new child with that task's ``stand_in`` in place of the student's
    function, and its message says so.
    Returns ``{"tasks": {id: outcome}, "definition_errors": [...],
    "grading_error": None or why the evaluation itself failed, "evaluations": number of child processes}``;
    each outcome is ``{points, max_points, status, passed, message, hint}`` (and ``stand_ins``, the ids of the
    tasks whose stand-ins were used, where any was).
    """
    if not isinstance(task_timeout, (int, float)) or task_timeout <= 0:
        raise ValueError(f"task_timeout must be a positive number of seconds, got {task_timeout!r}")
    check_limits(memory_limit_mb, cpu_limit_s)
    memory_limit_mb = float(DEFAULT_MEMORY_LIMIT_MB if memory_limit_mb is None else memory_limit_mb)
    cpu_limit_s = float(default_cpu_limit(task_timeout) if cpu_limit_s is None else cpu_limit_s)
    prepare(tasks)
    cases_of = {t.id: graded_cases(t, _EXPECTED[t.id], (hidden or {}).get(t.id, ())) for t in tasks}
    limits = (task_timeout, env, memory_limit_mb, cpu_limit_s, sandbox, cases_of)
    scored = _score(chapter, sources, folder, tasks, *limits)
    outcomes = scored["tasks"]
    replaced = {t.id: [u for u in t.uses if not outcomes.get(u, {}).get("passed")] for t in tasks}
    again = [t for t in tasks if replaced[t.id] and scored["grading_error"] is None
             and outcomes[t.id]["status"] != "not found" and not outcomes[t.id]["message"].startswith(NOT_IMPLEMENTED)]
    if again:
        second = _score(chapter, sources, folder, again, *limits, replaced=replaced)
        scored["evaluations"] += second["evaluations"]
        scored["grading_error"] = second["grading_error"]
        for task in again:
            outcome = dict(second["tasks"][task.id], stand_ins=replaced[task.id])
            outcome["message"] += stand_in_note([TASKS[u] for u in replaced[task.id]], "graded")
            outcomes[task.id] = outcome
    return scored


def _child_command(workdir: Path, folder: Path, env: dict, sandbox: dict | None) -> tuple[list, str | None]:
    """The evaluation child's command, and the package folder it unmounts before the notebook's code runs (None
    outside a sandbox)."""
    if sandbox is None:
        bootstrap = (f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
                     "from capsule_lab.grading.engine.child import run; run(sys.argv[1])")
        return [sys.executable, "-I", "-c", bootstrap, str(workdir)], None
    hide = f"{os_sandbox.PACKAGE_MOUNT}/capsule_lab"
    bootstrap = (f"import sys; sys.path.insert(0, {os_sandbox.PACKAGE_MOUNT!r}); "
                 "from capsule_lab.grading.engine.child import run; run(sys.argv[1])")
    readable = [r for r in sandbox["readable"] if r != os_sandbox.PACKAGE]
    command = os_sandbox.sandboxed([sys.executable, "-I", "-c", bootstrap, _WORKDIR_INSIDE], cwd=str(folder),
                                   env=env, readable=readable, writable=[(str(workdir), _WORKDIR_INSIDE)],
                                   hide=(os_sandbox.PACKAGE, hide),
                                   masked=[*sandbox["masked"], os_sandbox.PACKAGE])
    return command, hide


def _score(chapter: str, sources: list, folder: str | os.PathLike, tasks: Sequence[Task], task_timeout: float,
           env: dict | None, memory_limit_mb: float, cpu_limit_s: float, sandbox: dict | None, cases_of: dict,
           replaced: dict | None = None) -> dict:
    """:func:`score_functions` in child processes, without the second round; ``cases_of``: {task id: its published
    and hidden cases}; ``replaced``: {task id: [ids of the earlier tasks whose stand-ins take the student's place]}."""
    folder = Path(folder).resolve() if sandbox is None else Path(sandbox["folder"])
    env = dict(os.environ if env is None else env)
    outcomes: dict[str, dict] = {}
    definition_errors: list = []
    skip: list[int] = []
    start, runs, load_failures, grading_error = 0, 0, 0, None
    load_timeout = 2 * task_timeout + 10

    while start < len(tasks) and grading_error is None:
        if _package_digest() != _DIGEST[0]:  # the child would import changed code: trust nothing it says
            grading_error = ("capsule_lab's source files changed during grading (did a student's code write "
                             "to them?): reinstall the package and grade again, read-only this time")
            break
        workdir = (os_sandbox.private_folder("capsule-lab-evaluation-") if sandbox is not None
                   else Path(tempfile.mkdtemp(prefix="capsule-lab-evaluation-")))
        command, hide = _child_command(workdir, folder, env, sandbox)
        torch.save(_request(chapter, folder, sources, tasks, task_timeout, start, skip, cases_of, replaced, hide),
                   workdir / "request.pt")
        proc = start_in_new_session(limited(command, memory_limit_mb, cpu_limit_s),
                                    cwd=str(folder if sandbox is None else workdir), env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        runs += 1
        phase, k, seen, finished = "starting", start, None, []
        tree_usage = TreeUsage(proc.pid) if sandbox is not None else None     # bubblewrap's tree
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        try:
            while True:
                # read before poll() reaps the child: its CPU time is still there (in a sandbox: bubblewrap's tree)
                now_used = tree_usage() if tree_usage is not None else usage(proc.pid)
                if now_used is not None:
                    seen = (now_used[0], seen[1] if now_used[1] is None and seen else now_used[1])
                exited = proc.poll() is not None
                now = time.monotonic()
                if phase == "starting" and (workdir / "ready").exists():
                    phase, deadline = "loading", now + load_timeout
                if phase == "loading" and (workdir / "loaded.pt").exists():
                    try:
                        loaded = torch.load(workdir / "loaded.pt", weights_only=True)
                        if isinstance(loaded, dict) and isinstance(loaded.get("errors"), list):
                            definition_errors = [e for e in loaded["errors"] if isinstance(e, dict)][:100]
                    except Exception:  # noqa: BLE001 - the child's word about its own loading is only reported
                        pass
                    phase, deadline = "tasks", now + task_timeout
                if phase == "tasks":
                    while k < len(tasks) and (workdir / f"result-{k}.pt").exists():
                        finished.append(k)      # judged once the child is gone
                        k, deadline = k + 1, now + task_timeout
                    if k >= len(tasks):
                        start = k
                        break
                overtime = now > deadline
                if not (exited or overtime):
                    time.sleep(_POLL)
                    continue
                # the child exited early, or ran out of time: decide, then (maybe) start another one
                code = proc.returncode if sandbox is None else os_sandbox.exit_status(proc.returncode)
                how = (f"did not finish within {task_timeout:g} s" if overtime
                       else f"ended the evaluation process (exit status {code})")
                hit = None if overtime else _limit_hit(code, seen, memory_limit_mb, cpu_limit_s)
                if phase == "starting":
                    grading_error = ("the evaluation process did not start "
                                     + ("in time" if overtime else f"(exit status {code})"))
                    if not overtime and (hit or 0 < memory_limit_mb < _TIGHT_MEMORY_MB):
                        grading_error += (f"; its limits ({memory_limit_mb:g} MB, {cpu_limit_s:g} CPU-seconds) may be "
                                          "too small for importing torch (about 1 GB): raise them with "
                                          "--memory-limit / --cpu-limit")
                elif phase == "loading":
                    load_failures += 1
                    n = _progress(workdir, "loading")
                    if n is None or n in skip or load_failures > _MAX_LOAD_RESTARTS:
                        for task in tasks[start:]:
                            if hit == "cpu":
                                outcomes[task.id] = _cpu_outcome(task, cpu_limit_s,
                                                                 "loading the notebook's definitions")
                            elif hit == "memory":
                                outcomes[task.id] = _memory_outcome(task, memory_limit_mb)
                            else:
                                outcomes[task.id] = _outcome(
                                    task, "timeout" if overtime else "error",
                                    f"the notebook's definitions did not finish loading ({how})")
                        start = len(tasks)
                    else:
                        skip.append(n)
                else:
                    if hit == "cpu":
                        outcomes[tasks[k].id] = _cpu_outcome(tasks[k], cpu_limit_s, f"`{tasks[k].function}`")
                    elif hit == "memory":
                        outcomes[tasks[k].id] = _memory_outcome(tasks[k], memory_limit_mb)
                    else:
                        outcomes[tasks[k].id] = _outcome(tasks[k], "timeout" if overtime else "error",
                                                         f"`{tasks[k].function}` {how}")
                    start = k + 1
                break
        finally:
            kill_session(proc)
            for j in finished:              # the results, read once nothing can write them any more
                outcomes[tasks[j].id] = _judge(tasks[j], workdir / f"result-{j}.pt", cases_of[tasks[j].id],
                                               memory_limit_mb)
            shutil.rmtree(workdir, ignore_errors=True)

    if grading_error is not None:
        for task in tasks:
            outcomes.setdefault(task.id, _outcome(task, "error", f"not graded: {grading_error}"))
    return {"tasks": {t.id: outcomes[t.id] for t in tasks}, "definition_errors": definition_errors,
            "grading_error": grading_error, "evaluations": runs}
