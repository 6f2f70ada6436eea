"""Running a student's notebook in a kernel for its outputs and errors (``capsule-lab grade``, chapters 01–07).

:func:`run_notebook` executes an in-memory copy of the notebook with nbclient, a per-cell time limit and a
cap on each cell's stored output, and reports which cells raised, which timed out and whether the kernel
had to be replaced. The kernel's run is reported to the instructor but decides no score
(:mod:`capsule_lab.grading.engine.evaluation` does that). A cell that runs past its limit is interrupted and
execution goes on with the next cell; when the kernel no longer answers after the interrupt (a loop that
swallows ``KeyboardInterrupt``) or dies (``os._exit``), it is shut down at once and the remaining cells
run in a fresh kernel, without the earlier cells' state.

The kernel runs under a memory and a CPU-time limit (:func:`~capsule_lab.grading.engine.processes.limited`, set by
a wrapper in the kernel's command line before the kernel starts). A cell whose allocation fails at the
memory limit raises (``MemoryError``, torch's ``can't allocate memory``) and the next cell runs; a kernel
killed at the CPU-time limit (SIGXCPU) is replaced like any dead kernel. Either is reported as a cell that
hit a limit (``limit_cells``).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from ..engine import sandbox as os_sandbox
from ..engine.processes import DEFAULT_MEMORY_LIMIT_MB, check_limits, default_cpu_limit, is_memory_error, limited

__all__ = ["TIMEOUT_ENAME", "run_notebook"]

TIMEOUT_ENAME = "CellTimeoutError"
_WARM_UP = '__import__("capsule_lab.grading")'
_WARM_UP_TIMEOUT = 300.0
_MAX_OUTPUT_CHARS = 200_000  # per cell; more is dropped (a student printing in a loop must not exhaust memory)
_START_TRIES = 3  # a kernel that dies before its first cell is started again: ports are picked, freed, then bound,
#                   so two kernels started at once (grade -j 2) can pick the same port and one dies at start


class _KernelStuck(Exception):
    pass


#: The sandboxed kernel's first code: confine it (:func:`~capsule_lab.grading.engine.sandbox.confine`), then run the
#: kernel's module (``python -c _KERNEL_BOOT MODULE ARGS...`` in place of ``python -m MODULE ARGS...``).
_KERNEL_BOOT = ("import runpy, sys; from capsule_lab.grading.engine.sandbox import confine; confine(); "
                "sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


def _kernel_in_sandbox(cmd: list, sandbox: dict, connection_file: str) -> list:
    """The kernel's command ``[python, -m, module, ...]`` run in the sandbox: its sockets (IPC, in the folder of its
    connection file, the only folder it may write to besides its private /tmp), the notebook's folder copy."""
    if len(cmd) < 3 or cmd[1] != "-m":
        raise RuntimeError(f"the sandbox runs a kernel started as `python -m MODULE`, not {cmd!r}")
    sockets = os.path.dirname(connection_file)
    os_sandbox.handed_over(Path(connection_file))   # the sandbox's user reads it (the grader wrote it, mode 0600)
    env = dict(sandbox["env"], JPY_PARENT_PID="1")     # its parent inside is the sandbox's pid 1: no poller
    return os_sandbox.sandboxed([cmd[0], "-c", _KERNEL_BOOT, *cmd[2:]], cwd=sandbox["folder"], env=env,
                                readable=sandbox["readable"], writable=[(sockets, sockets)],
                                masked=sandbox["masked"])


def _limited_kernel_manager_class():
    from jupyter_client import AsyncKernelManager

    class LimitedKernelManager(AsyncKernelManager):
        """A kernel manager whose kernel command first sets the grader's limits (``grading_limits``:
        ``(memory MB, CPU-seconds)``), then becomes the kernel: in the sandbox (``grading_sandbox``: what
        :func:`_kernel_in_sandbox` mounts; None: none), talking over IPC sockets in a folder of its own."""

        grading_limits: tuple = (0, 0)
        grading_sandbox: dict | None = None

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            if self.grading_sandbox is not None:
                cmd = _kernel_in_sandbox(cmd, self.grading_sandbox, self.connection_file)
            return limited(cmd, *self.grading_limits)

    return LimitedKernelManager


def _grading_client_class():
    from nbclient import NotebookClient

    class GradingClient(NotebookClient):
        """An nbclient client that caps each cell's stored output and records errors and timeouts."""

        def __init__(self, *args, grace: float = 10.0, limits: tuple = (0, 0), sandbox: dict | None = None,
                     **kwargs):
            super().__init__(*args, **kwargs)
            self.grace = grace
            self.limits = limits
            self.sandbox = sandbox
            self.sockets: str | None = None
            self.kernel_process = None
            self.cell_errors: list = []
            self.timeout_cells: list = []
            self.current_cell: int | None = None
            self._output_chars: dict = {}
            self.on_cell_error = self._on_cell_error
            self.on_cell_execute = self._on_cell_execute
            self.on_notebook_start = self._warm_up

        async def _on_cell_execute(self, cell, cell_index):
            self.current_cell = cell_index

        def create_kernel_manager(self):
            km = super().create_kernel_manager()
            km.grading_limits = self.limits
            # IPC sockets in a folder of their own: the sandbox has no network, and outside it TCP would only make
            # the kernel warn (once per notebook) that it talks unencrypted; Windows has no IPC sockets
            if self.sandbox is not None or os.name == "posix":
                self.sockets = str(os_sandbox.private_folder("capsule-lab-kernel-") if self.sandbox is not None
                                   else tempfile.mkdtemp(prefix="capsule-lab-kernel-"))
                km.transport = "ipc"
                km.connection_file = os.path.join(self.sockets, "kernel.json")
                km.ip = os.path.join(self.sockets, "kernel")
            if self.sandbox is not None:
                km.grading_sandbox = self.sandbox
                km.kernel_spec.interrupt_mode = "message"   # a signal would not reach it (its own session)
            return km

        async def _warm_up(self, notebook):
            """Import the package (torch included) before the first cell, so that the per-cell time limit
            measures the student's code, not the library's import; binds no name in the kernel."""
            from queue import Empty

            from jupyter_core.utils import ensure_async

            # the kernel's process, kept to read its exit status if it dies (a CPU-time limit's SIGXCPU)
            self.kernel_process = getattr(getattr(self.km, "provisioner", None), "process", None)
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
            if content.get("ename") == TIMEOUT_ENAME:
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


def _killed_by_cpu_limit(client) -> bool:
    proc = client.kernel_process
    if proc is None:
        return False
    try:
        proc.wait(timeout=5)
    except Exception:  # noqa: BLE001 - still running (then it was not the limit) or not ours to wait for
        return False
    return os_sandbox.exit_status(proc.returncode) == -signal.SIGXCPU


def _started_and_executed(make_client, env, tries: int = _START_TRIES):
    """A client from ``make_client()`` that has run its notebook (``client.execute(env=env)``): when the
    kernel fails before any cell ran (it died before replying to ``kernel_info``, its port taken by another
    kernel), a new client tries again, up to ``tries`` starts in all. Returns ``(client, error)``: the
    exception that ended the last try, or None."""
    for attempt in range(1, tries + 1):
        client = make_client()
        try:
            client.execute(env=env)
            return client, None
        except Exception as err:  # noqa: BLE001 - run_notebook sorts the errors; only a failed start is retried
            atexit.unregister(client._cleanup_kernel)  # nbclient leaves it registered when the start fails
            if client.current_cell is not None or isinstance(err, _KernelStuck) or attempt == tries:
                return client, err
            if getattr(client, "sockets", None):
                shutil.rmtree(client.sockets, ignore_errors=True)
            time.sleep(0.5 * attempt)


#: What to install where no kernel can run a notebook: the extra that brings ipykernel and nbconvert (a plain
#: ``pip install capsule-lab`` does not, so that the package stays light where only its modules are used).
NOTEBOOKS_EXTRA = 'pip install "capsule-lab[notebooks]"'


def missing_kernel_advice(error: BaseException, kernel_name: str) -> str:
    """The sentence added to a kernel that could not start, when the cause is a missing kernel (no kernel spec named
    ``kernel_name``, or no ``ipykernel`` to run one): what to install. Empty for any other cause. Chapters 01–08
    (``capsule-lab grade``)."""
    import importlib.util

    missing_spec = type(error).__name__ == "NoSuchKernel"
    if not missing_spec and importlib.util.find_spec("ipykernel") is not None:
        return ""
    what = f"no Jupyter kernel named {kernel_name!r}" if missing_spec else "ipykernel is not installed"
    return f"; {what}: install what running and grading notebooks needs with `{NOTEBOOKS_EXTRA}` (ipykernel, nbconvert)"


def run_notebook(nb, folder: str | os.PathLike, timeout: float, kernel_name: str = "python3",
                 env: dict | None = None, memory_limit_mb: float | None = None,
                 cpu_limit_s: float | None = None, sandbox: dict | None = None) -> dict:
    """Execute the cells of ``nb`` (a NotebookNode, changed in place: outputs) in a fresh kernel.

    Each cell may run ``timeout`` seconds; each kernel may use ``memory_limit_mb`` MB of data (None:
    :data:`~capsule_lab.grading.engine.processes.DEFAULT_MEMORY_LIMIT_MB`) and ``cpu_limit_s`` CPU-seconds (None:
    :func:`~capsule_lab.grading.engine.processes.default_cpu_limit` of ``timeout``); 0: no such limit
    (:func:`~capsule_lab.grading.engine.processes.limited`). ``sandbox``: None, or the kernel runs in the OS sandbox
    (:mod:`~capsule_lab.grading.engine.sandbox`) with ``{"folder": its working folder inside, "env": its environment,
    "readable": what it may read besides Python, "masked": what must stay hidden}``.
    Returns ``{"cell_errors": [{cell, ename, evalue}], "timeout_cells": [...], "limit_cells": [{cell,
    limit ("memory" or "cpu"), message}], "kernel_restarts": [{cell, why}], "kernel_died": bool, "aborted":
    None or why execution stopped early, "kernel_error": None or why no kernel could run at all}``; cell
    indices count all cells from 0 (``capsule-lab grade``, chapters 01–07).
    """
    import nbformat
    from nbclient.exceptions import DeadKernelError

    check_limits(memory_limit_mb, cpu_limit_s)
    memory_limit_mb = float(DEFAULT_MEMORY_LIMIT_MB if memory_limit_mb is None else memory_limit_mb)
    cpu_limit_s = float(default_cpu_limit(timeout) if cpu_limit_s is None else cpu_limit_s)
    client_class = _grading_client_class()
    report = {"cell_errors": [], "timeout_cells": [], "limit_cells": [], "kernel_restarts": [],
              "kernel_died": False, "aborted": None, "kernel_error": None}
    start = 0
    while start < len(nb.cells):
        part = nbformat.v4.new_notebook(metadata=nb.metadata, cells=nb.cells[start:])

        def make_client(part=part):
            return client_class(
                part, timeout=max(1, int(round(timeout))), kernel_name=kernel_name, allow_errors=True,
                interrupt_on_timeout=True, record_timing=False, store_widget_state=False,
                shutdown_kernel="immediate",
                error_on_timeout={"ename": TIMEOUT_ENAME, "evalue": f"cell did not finish within {timeout:g} s",
                                  "traceback": []},
                grace=max(5.0, min(30.0, float(timeout))),
                resources={"metadata": {"path": str(folder)}},
                kernel_manager_class=_limited_kernel_manager_class(), limits=(memory_limit_mb, cpu_limit_s),
                sandbox=sandbox,
            )
        restart_after, why = None, None
        client, error = _started_and_executed(make_client, env)
        if client.sockets:
            shutil.rmtree(client.sockets, ignore_errors=True)
        if isinstance(error, _KernelStuck):
            restart_after, why = error.args[0], "the kernel did not respond after the timeout"
        elif isinstance(error, DeadKernelError):
            report["kernel_died"] = True
            restart_after, why = client.current_cell, "the kernel died"
            if cpu_limit_s and client.current_cell is not None and _killed_by_cpu_limit(client):
                why = f"the kernel used up its CPU-time limit of {cpu_limit_s:g} CPU-seconds"
                report["limit_cells"].append({"cell": client.current_cell + start, "limit": "cpu", "message": (
                    f"{why} (killed by SIGXCPU; raise the limit with `capsule-lab grade --cpu-limit S`)")})
        elif error is not None:  # a broken kernel spec, a failed start: report, don't crash a batch
            if client.current_cell is None:
                report["kernel_error"] = (f"{type(error).__name__}: {error} ({_START_TRIES} starts tried)"
                                          + missing_kernel_advice(error, kernel_name))
            else:
                report["aborted"] = f"{type(error).__name__}: {error}; later cells were not run"
        report["cell_errors"] += [{**e, "cell": e["cell"] + start} for e in client.cell_errors]
        if memory_limit_mb:
            report["limit_cells"] += [
                {"cell": e["cell"] + start, "limit": "memory", "message": (
                    f"{e['ename']}: an allocation failed at the kernel's memory limit of {memory_limit_mb:g} MB "
                    "(raise it with `capsule-lab grade --memory-limit MB`)")}
                for e in client.cell_errors if is_memory_error(f"{e['ename']}: {e['evalue']}")]
        report["timeout_cells"] += [c + start for c in client.timeout_cells]
        if restart_after is None or report["kernel_error"] or report["aborted"]:
            if why is not None:
                report["aborted"] = f"{why}; later cells were not run"
            break
        cell = restart_after + start
        report["kernel_restarts"].append({"cell": cell, "why": why})
        if len(report["kernel_restarts"]) > 10:
            report["aborted"] = f"{why} in cell {cell} (more than 10 restarts); later cells were not run"
            break
        start = cell + 1
    report["limit_cells"].sort(key=lambda c: c["cell"])
    return report
