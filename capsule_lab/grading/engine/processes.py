"""The processes student code runs in, owned by the grader: started in their own session, killed with all
they started (used by ``capsule-lab grade`` for every chapter's exercises).

Student code runs in two kinds of process during grading: the notebook's kernel and the evaluation child
(:mod:`capsule_lab.grading.engine.child`). Either may start processes of its own, and such a process may detach
(``setsid``, a double fork) to outlive its parent and, say, rewrite a report after the grader has written
it. :class:`Reaper` stops that on Linux: while it is active the grader is a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``), so a process orphaned anywhere below the grader is re-parented to the
grader instead of to init, wherever it moved its session or process group. :meth:`Reaper.reap` stops
(SIGSTOP, so nothing forks any more) and then kills (SIGKILL) every process below the grader that was not
there when the reaper started, until none is left. Elsewhere (no ``/proc``, no ``prctl``) only the
session of each process the grader started is killed (:func:`kill_session`).

Both kinds of process also run under a memory and a CPU-time limit (:func:`limited`, POSIX): a notebook
that allocates without bound or spins gets a clear status instead of taking the grader's machine, and the
rest of the batch, down with it.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["Reaper", "TreeUsage", "start_in_new_session", "kill_session", "DEFAULT_MEMORY_LIMIT_MB", "CPU_LIMIT_FACTOR",
           "CPU_LIMIT_MIN_S", "CPU_LIMIT_GRACE_S", "default_cpu_limit", "limits_supported", "limited",
           "check_limits", "usage", "is_memory_error"]

#: Memory (MB) a kernel or evaluation child may map for data (``capsule-lab grade --memory-limit``). The
#: limit is ``RLIMIT_DATA`` (private writable memory: the heap, anonymous ``mmap``, thread stacks), not
#: ``RLIMIT_AS`` (all address space): importing torch alone maps about 3.2–3.8 GB of address space (its
#: shared libraries), CUDA's initialisation reserves 14 GB more and a 20 GiB tensor on the GPU another
#: 20 GB, none of it memory the process uses on the host, so any useful ``RLIMIT_AS`` either breaks CUDA
#: (measured: 8 GB makes ``cudaGetDeviceCount`` fail) or bounds nothing. The data size, measured after
#: ``import torch, capsule_lab``: 0.8–0.9 GB in the evaluation child and 1.0 GB in the kernel on a 2-core
#: CPU machine; 1.3 GB after ``import torch`` on a 16-core H200 machine (more threads, more stacks), 1.4 GB
#: after CUDA's initialisation and 1.5 GB with 20 GiB on the GPU; grading every solution notebook peaked
#: at 1.3 GB. 4 GB is three times that, and far below a grading machine's memory.
DEFAULT_MEMORY_LIMIT_MB = 4096
#: The default CPU-time limit of a kernel or evaluation child is this many times the longer of the
#: grader's two time limits (``--timeout``, ``--task-timeout``), at least :data:`CPU_LIMIT_MIN_S`: 1,200
#: CPU-seconds with the defaults (:func:`default_cpu_limit`).
#: CPU time is summed over a process's threads and its whole life (torch's import, 3–5 s, included), so
#: it is a multiple of the wall-clock limits; grading a solution notebook took at most 26 CPU-seconds in
#: the kernel and 15 in the child (chapter 08, one thread).
CPU_LIMIT_FACTOR = 10
#: The default CPU-time limit is never below this many CPU-seconds, since short time limits (``--timeout 5``)
#: bound each cell, not the sum of a notebook's cells, which the kernel's CPU time counts.
CPU_LIMIT_MIN_S = 600
#: Seconds between the CPU-time limit's SIGXCPU (the soft limit) and its SIGKILL (the hard limit), for a
#: process that ignores SIGXCPU.
CPU_LIMIT_GRACE_S = 5

# Run as ``python -I -S -c _WRAPPER MEMORY_MB CPU_S ARGV...``: set the limits, then become ARGV (``exec``,
# so the pid, the session and the signals the grader sends stay the same) before any of its code runs.
# The soft limit equals the hard one for memory, so the student's code cannot raise it; no core files.
_WRAPPER = """\
import os, resource, sys
def limit(which, soft, hard):
    old = resource.getrlimit(which)[1]
    if old != resource.RLIM_INFINITY:
        soft, hard = min(soft, old), min(hard, old)
    resource.setrlimit(which, (soft, hard))
memory, cpu = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a process killed at a limit leaves no core file
if memory > 0:
    limit(resource.RLIMIT_DATA, memory * 2 ** 20, memory * 2 ** 20)
if cpu > 0:
    limit(resource.RLIMIT_CPU, cpu, cpu + %d)
os.execvp(sys.argv[3], sys.argv[3:])
""" % CPU_LIMIT_GRACE_S

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def start_in_new_session(args: list, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, ...)`` in a new session (its own process group), so it can be killed whole."""
    return subprocess.Popen(args, start_new_session=True, **kwargs)


def limits_supported() -> bool:
    """Whether :func:`limited` can limit a process here (POSIX, with ``RLIMIT_DATA`` and ``RLIMIT_CPU``)."""
    try:
        import resource
    except ImportError:
        return False
    return hasattr(resource, "RLIMIT_DATA") and hasattr(resource, "RLIMIT_CPU") and hasattr(os, "execvp")


def default_cpu_limit(*time_limits: float) -> float:
    """The default CPU-time limit for the grader's time limits (seconds): :data:`CPU_LIMIT_FACTOR` × the
    longest, at least :data:`CPU_LIMIT_MIN_S` (``capsule-lab grade``)."""
    return float(max(CPU_LIMIT_MIN_S, CPU_LIMIT_FACTOR * max(time_limits)))


def check_limits(memory_limit_mb, cpu_limit_s) -> None:
    """``ValueError`` unless each limit is None (the default) or a number ≥ 0 (0: no limit)."""
    for name, value in (("memory_limit_mb", memory_limit_mb), ("cpu_limit_s", cpu_limit_s)):
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                  or not value >= 0 or value == float("inf")):
            unit = "megabytes" if name == "memory_limit_mb" else "CPU-seconds"
            raise ValueError(f"{name} must be a number of {unit} >= 0 (0: no limit), got {value!r}")


def limited(args: list, memory_limit_mb: float | None = None, cpu_limit_s: float | None = None) -> list:
    """The command ``args`` run under a memory limit (``RLIMIT_DATA``, MB) and a CPU-time limit
    (``RLIMIT_CPU``, seconds; SIGXCPU, then SIGKILL :data:`CPU_LIMIT_GRACE_S` later), set in the new
    process before ``args`` runs (``capsule-lab grade``). None or 0: no such limit; ``args`` itself when
    there is none, or where the platform cannot limit (:func:`limits_supported`)."""
    check_limits(memory_limit_mb, cpu_limit_s)
    memory = int(memory_limit_mb or 0)
    cpu = int(-(-float(cpu_limit_s or 0) // 1))  # whole seconds, rounded up
    if not (memory or cpu) or not limits_supported():
        return list(args)
    return [sys.executable, "-I", "-S", "-c", _WRAPPER, str(memory), str(cpu), *map(str, args)]


def usage(pid: int, below: bool = False) -> tuple[float, float | None] | None:
    """``(CPU-seconds used, data size in MB)`` of a process from ``/proc`` (the size None once it has exited
    and is not yet waited for); None where unknown (no ``/proc``, no such process). ``below``: of the process and every
    process below it, the CPU-seconds summed and the largest data size (a sandboxed process runs under bubblewrap's
    two)."""
    if below:
        return _summed([usage(p) for p in _tree(pid)])
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
        fields = stat[stat.rfind(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    for line in status.splitlines():
        if line.startswith("VmData:"):
            return cpu, int(line.split()[1]) / 1024
    return cpu, None


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it, from a scan of all of /proc (``[pid]`` without /proc)."""
    table = _parents() or {}
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        stack += children.get(p, [])
    return pids


def _summed(found: list) -> tuple[float, float | None] | None:
    """The usages of a process tree (None for each process not found) as one: CPU summed, the largest data size."""
    found = [u for u in found if u is not None]
    if not found:
        return None
    sizes = [size for _, size in found if size is not None]
    return sum(cpu for cpu, _ in found), (max(sizes) if sizes else None)


class TreeUsage:
    """``usage(pid, below=True)`` for a loop that polls it every few milliseconds: the scan of all of /proc that finds
    the processes below ``pid`` runs every ``rescan_s`` seconds, and at once when one of those found has gone; in
    between, only the processes last found are read (two small files each). A process started since the last scan
    counts from the next one. (A scan reads every process's stat: polled every 20 ms it cost the grader about a
    second of CPU per notebook.) ``capsule-lab grade``."""

    def __init__(self, pid: int, rescan_s: float = 0.25):
        if not rescan_s >= 0:
            raise ValueError(f"rescan_s must be a number of seconds >= 0, got {rescan_s!r}")
        self.pid, self.rescan_s = pid, rescan_s
        self._pids: list[int] = []
        self._scanned = -math.inf

    def __call__(self) -> tuple[float, float | None] | None:
        now = time.monotonic()
        if now - self._scanned >= self.rescan_s:
            self._pids, self._scanned = _tree(self.pid), now
        found = [usage(p) for p in self._pids]
        if any(u is None for u in found):                # one has gone (or the tree changed): look again now
            self._pids, self._scanned = _tree(self.pid), now
            found = [usage(p) for p in self._pids]
        return _summed(found)


# Python's MemoryError (not torch's OutOfMemoryError: the GPU's), torch's and the C library's words for ENOMEM
_MEMORY_ERRORS = re.compile(r"(?<![A-Za-z])MemoryError|can't allocate memory|Cannot allocate memory|bad_alloc")


def is_memory_error(text: str) -> bool:
    """Whether an error's text says an allocation failed on the host (``MemoryError``, torch's
    ``DefaultCPUAllocator: can't allocate memory``, ``std::bad_alloc``); not CUDA's out-of-memory."""
    return isinstance(text, str) and _MEMORY_ERRORS.search(text) is not None


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
