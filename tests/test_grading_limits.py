"""capsule_lab.grading: a notebook that allocates without bound or spins cannot take the grader down (issue 30).

The kernel and the evaluation child of ``capsule-lab grade`` run under a memory limit (``RLIMIT_DATA``) and a
CPU-time limit (``RLIMIT_CPU``), set by :func:`capsule_lab.grading.engine.processes.limited` before they start. One
batch (``grade([...])``, graded once, small limits so that it is quick) holds a greedy copy of exercise 01's
master and an honest copy: in the greedy one a kernel cell allocates without bound, another spins, the function
of ``01.margin_loss`` allocates without bound and that of ``01.primary_capsules`` spins. The greedy tasks get
the status ``memory limit`` / ``cpu limit`` (0 points, a message naming the limit, its size and the flag that
raises it), its other tasks and the honest notebook full marks, the kernel's cells are reported with their
limit, and the grader's own process is untouched. Without the limits the same batch would give ``timeout``
and no limit notes, so these tests fail.
"""

from __future__ import annotations

import csv
import os
import resource
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from capsule_lab.cli import build_parser
from capsule_lab.grading import STATUSES, grade, grade_notebook
from capsule_lab.grading.engine.processes import (DEFAULT_MEMORY_LIMIT_MB, check_limits, default_cpu_limit,
                                                  is_memory_error, limited, limits_supported)
from capsule_lab.grading.notebooks.kernel import run_notebook

ROOT = Path(__file__).resolve().parents[1]
MEMORY_MB = 2500    # 2.4 × what the kernel (1.0 GB) and the child (0.9 GB) map after importing torch and capsule_lab
CPU_S = 12          # 2.5–3.5 × what each process of the honest notebook uses (3.5–4.7 CPU-s, imports included)
TIMEOUT = 90        # wall-clock limits far above the CPU limit: a spinning loop meets the CPU limit first

# a kernel cell and a student function that never stop allocating (untouched memory: torch.empty and bytes(n),
# which CPython calloc's, take address space, not RAM, so a failed limit cannot exhaust the test machine either).
# The function fails with Python's MemoryError: torch's failed allocation builds a C++ backtrace (0.5 CPU-s each),
# and bytearray(n) zero-fills what it gets (1.6 CPU-s of page faults per call here, measured); in the task's
# eight cases either would take the evaluation child to its CPU limit instead (CI saw "cpu limit")
HOG_CELL = """\
def grab():
    hoard = []
    while True:
        hoard.append(torch.empty(2 ** 26))
grab()"""
SPIN_CELL = "while True:\n    pass"
GREEDY_MARGIN_LOSS = """\
def margin_loss(lengths, labels):
    hoard = []
    while True:
        hoard.append(bytes(256 * 2 ** 20))"""
SPINNING_PRIMARY_CAPSULES = """\
def primary_capsules(conv_out, capsule_dim):
    n = 0
    while True:
        n += 1"""

pytestmark = pytest.mark.skipif(not limits_supported(), reason="the limits need POSIX resource limits")


def _function_cell(nb, name: str):
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(f"def {name}(")]
    return cell


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """One graded batch: ``greedy/01_capsules.ipynb`` and ``honest/01_capsules.ipynb``, both chapter 01."""
    honest = nbformat.read(ROOT / "solutions" / "01_capsules.ipynb", as_version=4)
    greedy = nbformat.read(ROOT / "solutions" / "01_capsules.ipynb", as_version=4)
    assert greedy.metadata["capsule_lab"] == {"chapter": "01"}
    _function_cell(greedy, "margin_loss").source = GREEDY_MARGIN_LOSS
    _function_cell(greedy, "primary_capsules").source = SPINNING_PRIMARY_CAPSULES
    # the cell that calls primary_capsules at the top level goes (the child would spin while it loads the
    # definitions, one more CPU limit to wait for); the one that calls margin_loss stays (it fails at once)
    (explore,) = [c for c in greedy.cells if c.source.startswith("# Explore") and "primary_capsules(" in c.source]
    greedy.cells.remove(explore)
    squash = greedy.cells.index(_function_cell(greedy, "squash"))
    greedy.cells.insert(squash + 1, new_code_cell(HOG_CELL))
    greedy.cells.insert(squash + 2, new_code_cell(SPIN_CELL))
    paths = []
    for name, nb in (("greedy", greedy), ("honest", honest)):
        folder = tmp_path_factory.mktemp(name)
        nbformat.write(nb, folder / "01_capsules.ipynb")
        paths.append(folder / "01_capsules.ipynb")
    out = tmp_path_factory.mktemp("reports")
    limits_before = [resource.getrlimit(r) for r in (resource.RLIMIT_DATA, resource.RLIMIT_CPU)]
    pid = os.getpid()
    reports = grade(paths, out_dir=out, timeout=TIMEOUT, task_timeout=TIMEOUT, memory_limit_mb=MEMORY_MB,
                    cpu_limit_s=CPU_S)
    measure = next(i for i, c in enumerate(greedy.cells)
                   if c.source.startswith("# Measure") and "margin_loss(" in c.source)
    return {"greedy": reports[0], "honest": reports[1], "out": out, "hog_cell": squash + 1, "measure_cell": measure,
            "spin_cell": squash + 2, "pid": pid, "limits_before": limits_before}


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-limits")
def test_a_function_that_allocates_without_bound_gets_the_memory_limit_status(batch):
    task = batch["greedy"]["tasks"]["01.margin_loss"]
    assert task["status"] == "memory limit" and task["points"] == 0 and not task["passed"]
    assert f"{MEMORY_MB} MB" in task["message"] and "--memory-limit" in task["message"]
    # the same function called by a top-level assignment while the definitions load fails there and is noted
    (error,) = [e for e in batch["greedy"]["definition_errors"] if e["cell"] == batch["measure_cell"]]
    assert error["error"].startswith("MemoryError")


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-limits")
def test_a_function_that_spins_gets_the_cpu_limit_status_and_later_tasks_are_scored(batch):
    tasks = batch["greedy"]["tasks"]
    task = tasks["01.primary_capsules"]
    assert task["status"] == "cpu limit" and task["points"] == 0
    assert f"{CPU_S} CPU-seconds" in task["message"] and "--cpu-limit" in task["message"]
    # the tasks before and after the limits are scored (after the spin, in a fresh evaluation child)
    for tid in ("01.squash", "01.equal_length", "01.steps_to_long"):
        assert tasks[tid]["status"] == "passed", (tid, tasks[tid]["message"])
    assert batch["greedy"]["score"] == batch["greedy"]["max_score"] - 2
    assert batch["greedy"]["graded"] and batch["greedy"]["grading_error"] is None, batch["greedy"]["grading_error"]


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-limits")
def test_kernel_cells_that_hit_a_limit_are_reported_and_the_notebook_goes_on(batch):
    report = batch["greedy"]
    assert report["limit_cells"] == [
        {"cell": batch["hog_cell"], "limit": "memory", "message": report["limit_cells"][0]["message"]},
        {"cell": batch["spin_cell"], "limit": "cpu", "message": report["limit_cells"][1]["message"]},
    ]
    assert f"{MEMORY_MB} MB" in report["limit_cells"][0]["message"]
    assert "SIGXCPU" in report["limit_cells"][1]["message"]
    # the memory error is a cell error; the CPU limit killed the kernel, replaced for the cells after it
    assert batch["hog_cell"] in [e["cell"] for e in report["cell_errors"]]
    assert report["kernel_restarts"] == [{"cell": batch["spin_cell"], "why": (
        f"the kernel used up its CPU-time limit of {CPU_S} CPU-seconds")}]
    assert report["aborted"] is None and report["timeout_cells"] == []
    assert report["memory_limit_mb"] == MEMORY_MB and report["cpu_limit_s"] == CPU_S


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-limits")
def test_the_rest_of_the_batch_is_graded_and_the_grader_survives(batch):
    honest = batch["honest"]
    assert honest["graded"], honest["grading_error"]
    assert honest["score"] == honest["max_score"] == 5
    assert all(t["status"] == "passed" for t in honest["tasks"].values())
    assert honest["limit_cells"] == [] and honest["cell_errors"] == []
    # the same process graded the batch, its own limits untouched, and wrote every report
    assert os.getpid() == batch["pid"]
    assert [resource.getrlimit(r) for r in (resource.RLIMIT_DATA, resource.RLIMIT_CPU)] == batch["limits_before"]
    written = sorted(p.name for p in batch["out"].glob("*.json"))
    assert len(written) == 2 and written == sorted(Path(batch[k]["report"]).name for k in ("greedy", "honest"))
    with open(batch["out"] / "grades.csv", newline="") as f:
        rows = {Path(r["notebook"]).parent.name[:6]: r for r in csv.DictReader(f)}
    assert {k: (r["task_limits"], r["cell_limits"]) for k, r in rows.items()} == {"greedy": ("2", "2"),
                                                                               "honest": ("0", "0")}


# ---------------------------------------------------------------- the mechanism, without a kernel

def test_statuses_name_the_limits():
    assert STATUSES[-2:] == ("memory limit", "cpu limit")


def test_limited_sets_the_limits_before_the_command_runs():
    probe = ("import resource as r; print(r.getrlimit(r.RLIMIT_DATA), r.getrlimit(r.RLIMIT_CPU), "
             "r.getrlimit(r.RLIMIT_CORE))")
    out = subprocess.run(limited([sys.executable, "-c", probe], 3000, 7.5), capture_output=True, text=True,
                         check=True).stdout
    assert out.split("\n")[0] == f"({3000 * 2 ** 20}, {3000 * 2 ** 20}) (8, 13) (0, 0)"
    assert limited(["echo", "x"]) == limited(["echo", "x"], 0, 0) == ["echo", "x"]


def test_a_process_over_its_limits_fails_as_the_grader_expects():
    """An allocation past the memory limit raises (the process lives on); a spin past the CPU limit is
    killed by SIGXCPU (what the grader reads as the CPU limit)."""
    hog = "h = []\ntry:\n    while True: h.append(bytearray(2 ** 26))\nexcept MemoryError:\n    print(len(h))"
    out = subprocess.run(limited([sys.executable, "-c", hog], 500), capture_output=True, text=True, check=True)
    assert 0 < int(out.stdout) < 8
    spin = subprocess.run(limited([sys.executable, "-c", "while True: pass"], 0, 1), timeout=60)
    assert spin.returncode == -__import__("signal").SIGXCPU


def test_the_default_limits():
    assert DEFAULT_MEMORY_LIMIT_MB == 4096
    assert default_cpu_limit(120) == default_cpu_limit(120, 60) == 1200  # 10 × the longer time limit
    assert default_cpu_limit(5, 5) == 600                                # at least 600 CPU-seconds


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-limits")
def test_the_kernel_runs_under_the_default_limits(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[new_code_cell(
        "import resource\nprint(resource.getrlimit(resource.RLIMIT_DATA), resource.getrlimit(resource.RLIMIT_CPU))")])
    report = run_notebook(nb, tmp_path, timeout=120, env=dict(os.environ))
    assert report["cell_errors"] == [] and report["kernel_error"] is None
    assert nb.cells[0].outputs[0]["text"].strip() == f"({4096 * 2 ** 20}, {4096 * 2 ** 20}) (1200, 1205)"


def test_an_evaluation_child_that_cannot_start_under_its_limits_says_so(tmp_path):
    from capsule_lab.grading import tasks_for_chapter
    from capsule_lab.grading.engine.evaluation import score_functions

    tasks = tasks_for_chapter("01")[:1]
    scored = score_functions("01", ["def squash(s, dim=-1):\n    return s"], tmp_path, tasks, task_timeout=30,
                             memory_limit_mb=200)  # torch's import needs about 1 GB
    assert "did not start" in scored["grading_error"] and "--memory-limit" in scored["grading_error"]
    assert scored["tasks"][tasks[0].id]["status"] == "error"


def test_what_counts_as_running_out_of_the_memory_limit():
    assert is_memory_error("raised MemoryError: ") and is_memory_error("MemoryError")
    assert is_memory_error("RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                           "can't allocate memory: you tried to allocate 268435456 bytes. Error code 12")
    assert not is_memory_error("raised OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not is_memory_error("raised ValueError: shapes differ")


@pytest.mark.parametrize("bad", [-1, "2", True, float("nan"), float("inf")])
def test_limits_are_checked(bad, tmp_path):
    with pytest.raises(ValueError, match="memory_limit_mb must be a number of megabytes >= 0"):
        check_limits(bad, None)
    with pytest.raises(ValueError, match="cpu_limit_s must be a number of CPU-seconds >= 0"):
        check_limits(None, bad)
    nb = tmp_path / "01_capsules.ipynb"
    nb.write_text((ROOT / "solutions" / "01_capsules.ipynb").read_text(encoding="utf8"), encoding="utf8")
    with pytest.raises(ValueError, match="cpu_limit_s"):
        grade_notebook(nb, cpu_limit_s=bad)


def test_the_cli_refuses_a_negative_limit(tmp_path, capsys):
    from capsule_lab.cli import main

    nb = tmp_path / "01_capsules.ipynb"
    nb.write_text((ROOT / "solutions" / "01_capsules.ipynb").read_text(encoding="utf8"), encoding="utf8")
    assert main(["grade", str(nb), "--memory-limit", "-1", "--out", str(tmp_path / "out")]) == 2
    assert "--memory-limit must be a number of megabytes >= 0" in capsys.readouterr().err
    assert main(["grade", str(nb), "--cpu-limit", "-5", "--out", str(tmp_path / "out")]) == 2
    assert "--cpu-limit must be a number of CPU-seconds >= 0" in capsys.readouterr().err


def test_the_cli_takes_the_limits():
    args = build_parser().parse_args(["grade", "a.ipynb", "--memory-limit", "3000", "--cpu-limit", "600"])
    assert (args.memory_limit, args.cpu_limit) == (3000, 600)
    args = build_parser().parse_args(["grade", "a.ipynb"])
    assert (args.memory_limit, args.cpu_limit) == (None, None)


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-limits")
def test_a_kernel_that_dies_at_start_because_its_port_is_taken_is_started_again(tmp_path, monkeypatch):
    """Two kernels started at once can pick the same free port; the one that binds second dies before
    replying to kernel_info (CI, `grade -j 2`). The grader starts it again instead of failing the notebook. (On
    Linux the grader's kernels talk over IPC sockets, which have no ports; the kernel here is put on TCP, as on
    Windows, where the clash can still happen.)"""
    import socket

    from capsule_lab.grading.notebooks import kernel

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    manager_class = kernel._limited_kernel_manager_class()
    starts = []

    class FirstStartClashes(manager_class):
        async def _async_pre_start_kernel(self, **kw):
            self.transport, self.ip = "tcp", "127.0.0.1"
            starts.append(len(starts) == 0)
            if starts[-1]:  # the first kernel is told to bind a port that is already taken
                self.cache_ports = False
                self.shell_port = busy.getsockname()[1]
            return await super()._async_pre_start_kernel(**kw)

    monkeypatch.setattr(kernel, "_limited_kernel_manager_class", lambda: FirstStartClashes)
    nb = nbformat.v4.new_notebook(cells=[new_code_cell("print(6 * 7)")])
    try:
        report = kernel.run_notebook(nb, tmp_path, timeout=60, env=dict(os.environ))
    finally:
        busy.close()
    assert starts == [True, False]
    assert report["kernel_error"] is None and report["cell_errors"] == []
    assert nb.cells[0].outputs[0]["text"] == "42\n"


def test_a_missing_kernel_says_what_to_install(tmp_path):
    """A plain ``pip install capsule-lab`` has no ipykernel: the grader's error names the extra that brings it."""
    nb = nbformat.v4.new_notebook(cells=[new_code_cell("print(1)")])
    report = run_notebook(nb, tmp_path, timeout=30, kernel_name="no-such-kernel-here", env=dict(os.environ))
    assert report["kernel_error"].startswith("NoSuchKernel")
    assert "no Jupyter kernel named 'no-such-kernel-here'" in report["kernel_error"]
    assert 'pip install "capsule-lab[notebooks]"' in report["kernel_error"]


def test_the_advice_is_given_only_for_a_missing_kernel(monkeypatch):
    from jupyter_client.kernelspec import NoSuchKernel

    from capsule_lab.grading.notebooks import kernel

    assert kernel.missing_kernel_advice(RuntimeError("port in use"), "python3") == ""           # another cause
    assert "capsule-lab[notebooks]" in kernel.missing_kernel_advice(NoSuchKernel("python3"), "python3")
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "ipykernel" else object())
    advice = kernel.missing_kernel_advice(RuntimeError("No module named ipykernel_launcher"), "python3")
    assert "ipykernel is not installed" in advice and "capsule-lab[notebooks]" in advice


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_tree_usage_sums_the_processes_below_and_finds_a_new_one_at_the_next_scan():
    """processes.TreeUsage (the grader polls the sandboxed evaluation's tree every 20 ms): CPU summed over the tree
    as psutil sees it, a child started after a scan counted from the next scan, one that ended scanned away at once."""
    import subprocess
    import sys
    import time

    import psutil

    from capsule_lab.grading.engine.processes import TreeUsage, usage

    def until(condition, seconds=60.0):
        end = time.monotonic() + seconds
        while not condition():
            assert time.monotonic() < end, "timed out"
            time.sleep(0.05)

    def spun(pid, at_least):                    # the process has used this much CPU (it spins, then sleeps)
        return lambda: sum(psutil.Process(pid).cpu_times()[:2]) >= at_least

    spin = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\ntime.sleep({rest})"
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        f"a = subprocess.Popen([sys.executable, '-c', {spin.format(s=0.6, rest=60)!r}])\n"
        "sys.stdin.readline()\n"
        f"b = subprocess.Popen([sys.executable, '-c', {spin.format(s=0.3, rest=0)!r}])\n"
        "sys.stdin.readline()\n"
        "b.wait()\n"
        "time.sleep(60)")], stdin=subprocess.PIPE, text=True)

    def say():
        parent.stdin.write("go\n")
        parent.stdin.flush()

    try:
        until(lambda: len(psutil.Process(parent.pid).children()) == 1)
        watch = TreeUsage(parent.pid, rescan_s=3600)          # one scan, then only the processes it found
        (a,) = psutil.Process(parent.pid).children()
        until(spun(a.pid, 0.6))
        first = watch()
        by_psutil = sum(sum(psutil.Process(p).cpu_times()[:2]) for p in (parent.pid, a.pid))
        assert len(watch._pids) == 2 and abs(first[0] - by_psutil) <= 0.05 and first[0] >= 0.6
        assert first == usage(parent.pid, below=True)
        say()
        until(lambda: len(psutil.Process(parent.pid).children()) == 2)
        b = next(c for c in psutil.Process(parent.pid).children() if c.pid != a.pid)
        until(spun(b.pid, 0.3))
        assert watch()[0] == pytest.approx(first[0], abs=0.05)     # not scanned again: not seen yet
        watch.rescan_s = 0
        assert watch()[0] >= first[0] + 0.3 - 0.05 and len(watch._pids) == 3
        watch.rescan_s = 3600
        say()                                                 # b ends and is waited for: gone from /proc
        until(lambda: not psutil.pid_exists(b.pid))
        assert watch() is not None and len(watch._pids) == 2  # scanned again at once
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()
    with pytest.raises(ValueError, match="rescan_s"):
        TreeUsage(1, rescan_s=-1)
