"""The processes student code runs in, owned by the grader: started in their own session, killed with all
they started (used by ``capsule-lab grade`` for every chapter's exercises).

Student code runs in two kinds of process during grading: the notebook's kernel and the evaluation child
(:mod:`capsule_lab.grading.child`). Either may start processes of its own, and such a process may detach
(``setsid``, a double fork) to outlive its parent and, say, rewrite a report after the grader has written
it. :class:`Reaper` stops that on Linux: while it is active the grader is a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``), so a process orphaned anywhere below the grader is re-parented to the
grader instead of to init, wherever it moved its session or process group. :meth:`Reaper.reap` stops
(SIGSTOP, so nothing forks any more) and then kills (SIGKILL) every process below the grader that was not
there when the reaper started, until none is left. Elsewhere (no ``/proc``, no ``prctl``) only the
session of each process the grader started is killed (:func:`kill_session`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["Reaper", "start_in_new_session", "kill_session"]

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def start_in_new_session(args: list, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, ...)`` in a new session (its own process group), so it can be killed whole."""
    return subprocess.Popen(args, start_new_session=True, **kwargs)


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the process group (= session) that ``proc`` leads, then wait for ``proc``."""
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _prctl(option: int, arg: int) -> int | None:
    """Call prctl(2) through libc; None where that is not possible (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if option == _PR_GET_CHILD_SUBREAPER:
            value = ctypes.c_int(0)
            if libc.prctl(option, ctypes.byref(value), 0, 0, 0) != 0:
                return None
            return value.value
        return None if libc.prctl(option, arg, 0, 0, 0) != 0 else 0
    except (OSError, AttributeError):
        return None


def _parents() -> dict[int, tuple[int, str]] | None:
    """{pid: (parent pid, state)} of every process in /proc; None without /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    table = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) >= 2:
            table[int(entry.name)] = (int(fields[1]), fields[0])
    return table


class Reaper:
    """While active (``with Reaper() as reaper:``), processes orphaned below this one come back to it, and
    :meth:`reap` kills every process below it that was not there on entry. Leaving the block reaps too.

    On entry it records this process's existing children: they and everything below them are left alone.
    """

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._keep: set[int] = set()
        self._previous: int | None = None
        self.active = False
        self.killed: list[int] = []

    def __enter__(self) -> "Reaper":
        table = _parents()
        if table is not None:
            self._keep = {pid for pid, (ppid, _) in table.items() if ppid == self._pid}
        self._previous = _prctl(_PR_GET_CHILD_SUBREAPER, 0)
        self.active = self._previous is not None and _prctl(_PR_SET_CHILD_SUBREAPER, 1) is not None
        return self

    def __exit__(self, *exc) -> None:
        self.reap()
        if self.active and not self._previous:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)
        self.active = False

    def _below(self, table: dict) -> list[int]:
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        found, stack = [], [p for p in children.get(self._pid, []) if p not in self._keep]
        while stack:
            pid = stack.pop()
            found.append(pid)
            stack.extend(children.get(pid, []))
        return found

    def reap(self, rounds: int = 50) -> list[int]:
        """Stop, kill and wait for every process below this one started since entry; returns their pids."""
        killed = []
        for _ in range(rounds):
            table = _parents()
            if table is None:
                break
            below = self._below(table)
            if not below:
                break
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for pid in below:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)
            for pid in below:
                if table[pid][0] == self._pid:  # ours to wait for (orphans re-parented here included)
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(pid, 0)
            killed.extend(below)
            time.sleep(0.01)
        self.killed.extend(killed)
        return killed
