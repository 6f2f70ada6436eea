"""The grader's OS sandbox (capsule_lab.grading.engine.sandbox): the seccomp program read by an interpreter written
here, a sandboxed process probed from inside, and attack notebooks graded by the real grader in one batch with an
honest one (issue: "a grader no student can reach around")."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from capsule_lab.grading.engine import sandbox

ROOT = Path(__file__).resolve().parents[1]
needs_sandbox = pytest.mark.skipif(sandbox.problem() is not None, reason=f"no sandbox here: {sandbox.problem()}")


# ---------------------------------------------------------------- the seccomp program, interpreted here

def _run_bpf(program: bytes, nr: int, arch: int, args0: int = 0) -> int:
    """Classic BPF as seccomp runs it (the four instructions the program uses), on ``struct seccomp_data``."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, args0, 0, 0, 0, 0, 0)
    code = [struct.unpack("HBBI", program[k:k + 8]) for k in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:                                      # ld [k]: a 32-bit word of seccomp_data
            acc = struct.unpack_from("<I", data, k)[0]
        elif op == 0x15:                                    # jeq #k
            pc += jt if acc == k else jf
        elif op == 0x45:                                    # jset #k
            pc += jt if acc & k else jf
        elif op == 0x06:                                    # ret #k
            return k
        else:
            raise AssertionError(f"unexpected instruction {op:#x}")
        pc += 1


ALLOW, EPERM, ENOSYS, KILL = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000


@pytest.mark.parametrize("machine, numbers", [
    ("x86_64", {"read": 0, "write": 1, "openat": 257, "mmap": 9, "futex": 202, "clone": 56, "fork": 57, "vfork": 58,
                "execve": 59, "execveat": 322, "clone3": 435, "mount": 165, "unshare": 272, "ptrace": 101}),
    ("aarch64", {"read": 63, "write": 64, "openat": 56, "mmap": 222, "futex": 98, "clone": 220, "execve": 221,
                 "execveat": 281, "clone3": 435, "mount": 40, "unshare": 97, "ptrace": 117}),
])
def test_the_filter_refuses_new_processes_and_allows_threads(machine, numbers, monkeypatch):
    monkeypatch.setattr(sandbox.platform, "machine", lambda: machine)
    program = sandbox.no_new_processes_filter(machine)
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[machine]
    for allowed in ("read", "write", "openat", "mmap", "futex"):
        assert _run_bpf(program, numbers[allowed], arch) == ALLOW, allowed
    assert _run_bpf(program, numbers["clone"], arch, args0=0x003D0F00) == ALLOW      # glibc's pthread_create flags
    assert _run_bpf(program, numbers["clone"], arch, args0=0x01200011) == EPERM      # glibc's fork(): no CLONE_THREAD
    assert _run_bpf(program, numbers["clone3"], arch) == ENOSYS                     # falls back to clone
    for refused in ("fork", "vfork", "execve", "execveat", "mount", "unshare", "ptrace"):
        if refused in numbers:
            assert _run_bpf(program, numbers[refused], arch) == EPERM, refused
    assert _run_bpf(program, numbers["read"], 0x40000003) == KILL                   # i386: another architecture
    if machine == "x86_64":
        assert _run_bpf(program, 0x40000000 | numbers["execve"], arch) == EPERM       # the x32 ABI's execve


def test_a_command_is_refused_where_no_sandbox_can_start(monkeypatch):
    monkeypatch.setattr(sandbox, "_PROBLEM", [])                 # measured again here, then forgotten
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    assert "apt-get install bubblewrap" in sandbox.problem() and "--no-sandbox" in sandbox.problem()
    with pytest.raises(RuntimeError, match="bubblewrap"):
        sandbox.sandboxed([sys.executable, "-c", "pass"], cwd="/", env={})
    assert sandbox.exit_status(152) == -24 and sandbox.exit_status(3) == 3 and sandbox.exit_status(-9) == -9


# ---------------------------------------------------------------- a sandboxed process, probed from inside

PROBE = r"""
import json, os, socket, subprocess, sys
from capsule_lab.grading.engine.sandbox import confine
hide = sys.argv[1]
seen = {"package_before": sorted(os.listdir(hide))[:3]}
confine(hide)
def attempt(what, fn):
    try:
        fn()
        seen[what] = "ran"
    except Exception as err:
        seen[what] = type(err).__name__ + ": " + str(err)[:80]
attempt("fork", lambda: os._exit(0) if os.fork() == 0 else None)
attempt("subprocess", lambda: subprocess.run(["true"]))
attempt("posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}))
attempt("write_root", lambda: open("/escape", "w"))
attempt("secret", lambda: open(sys.argv[2]).read())
attempt("network", lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))
attempt("listdir_package", lambda: seen.__setitem__("package_after", os.listdir(hide)))
seen["tmp_before"] = sorted(os.listdir("/tmp"))
open("/tmp/left-here", "w").write("x")
seen["uid"] = os.getuid()
seen["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps(seen))
"""


@needs_sandbox
def test_a_sandboxed_process_is_confined(tmp_path):
    package = Path(sandbox.PACKAGE)
    secret = tmp_path / "grader" / "key"
    secret.parent.mkdir()
    secret.write_text("the grader's secret")
    results = []
    for _ in range(2):
        command = sandbox.sandboxed([sys.executable, "-c", PROBE, f"{sandbox.PACKAGE_MOUNT}/capsule_lab", str(secret)],
                                    cwd="/tmp", env=dict(os.environ), hide=(str(package), f"{sandbox.PACKAGE_MOUNT}/capsule_lab"),
                                    readable=[str(package)], masked=[str(secret.parent)])
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    seen = results[0]
    assert seen["package_before"] and seen.get("package_after") == []     # the package's source gone once confined
    for what in ("fork", "subprocess", "posix_spawn"):
        assert seen[what].startswith("PermissionError") and "Operation not permitted" in seen[what], seen[what]
    assert "Read-only file system" in seen["write_root"] or "Permission denied" in seen["write_root"]
    assert seen["secret"].startswith("FileNotFoundError")                 # not mounted at all
    assert seen["network"].startswith("OSError") and "unreachable" in seen["network"]
    # each sandbox its own /tmp: nothing of the host's (this test's own folder is there) nor of the first sandbox,
    # only the mount points of Python and the package where a checkout lies under /tmp
    mounted = {Path(p).parts[2] for p in [*sandbox._python_paths(), sandbox.PACKAGE] if p.startswith("/tmp/")}
    assert set(seen["tmp_before"]) <= mounted and set(results[1]["tmp_before"]) <= mounted
    assert Path(tmp_path).parts[2] not in mounted and "left-here" not in mounted
    assert len(seen["processes"]) <= 3                                     # bubblewrap's init and this process
    if os.geteuid() == 0:
        assert seen["uid"] == sandbox.SANDBOX_UID                          # another user, for real
    assert not Path("/escape").exists()


# ---------------------------------------------------------------- attack notebooks, graded in one batch

#: A Python extension module (built here with the C compiler) whose ``run(argv)`` starts a process from C: fork,
#: execv, waitpid. No Python-level gate sees it; only the kernel can refuse it.
EXTENSION = r"""
#include <Python.h>
#include <sys/wait.h>
#include <unistd.h>
static PyObject *run(PyObject *self, PyObject *args) {
    PyObject *list; if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list)) return NULL;
    Py_ssize_t n = PyList_Size(list); char **argv = calloc(n + 1, sizeof(char *));
    for (Py_ssize_t k = 0; k < n; k++) argv[k] = (char *)PyUnicode_AsUTF8(PyList_GetItem(list, k));
    pid_t pid = fork();
    if (pid < 0) { free(argv); return PyErr_SetFromErrno(PyExc_OSError); }
    if (pid == 0) { execv(argv[0], argv); _exit(127); }
    int status; waitpid(pid, &status, 0); free(argv);
    return PyLong_FromLong(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}
static PyMethodDef methods[] = {{"run", run, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "helper", NULL, -1, methods};
PyMODINIT_FUNC PyInit_helper(void) { return PyModule_Create(&module); }
"""

#: squash, computed by a fresh Python started from C (no gate there), with its Jacobian so the gradient check passes.
PROCESS_ATTACK = r"""
import base64, importlib.util, os, sys, tempfile, torch
SO = base64.b64decode("{so}")
def squash(s, dim=-1):
    work = tempfile.mkdtemp()
    with open(os.path.join(work, "helper.so"), "wb") as f:
        f.write(SO)
    spec = importlib.util.spec_from_file_location("helper", os.path.join(work, "helper.so"))
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    torch.save((s.detach(), dim), os.path.join(work, "in.pt"))
    code = ("import sys, torch; from capsule_lab.capsules import squash as f; s, d = torch.load(sys.argv[1]); "
            "torch.save((f(s, d), torch.autograd.functional.jacobian(lambda x: f(x, d), s)), sys.argv[2])")
    helper.run([sys.executable, "-c", code, os.path.join(work, "in.pt"), os.path.join(work, "out.pt")])
    y, jacobian = torch.load(os.path.join(work, "out.pt"))
    delta = (s - s.detach()).reshape(-1)
    return y + (jacobian.reshape(y.numel(), -1).to(s.dtype) @ delta).reshape(y.shape)
"""

#: The package's own squash, from a copy of its source read through a directory descriptor (no path string the
#: audit hook could match) and executed under another name: ungated.
SOURCE_ATTACK = r"""
import os, capsule_lab
def squash(s, dim=-1):
    for folder in (os.path.dirname(capsule_lab.__file__), {package!r}):
        try:
            fd = os.open(folder, os.O_RDONLY)
            with open("capsules.py", opener=lambda path, flags: os.open(path, flags, dir_fd=fd)) as f:
                source = f.read()
            break
        except OSError as err:
            problem = err
    else:
        raise problem
    copy = {{"__name__": "not_the_package"}}
    exec(compile(source.replace("from .", "from capsule_lab."), "copy.py", "exec"), copy)
    return copy["squash"](s, dim)
"""

#: The kernel (which runs every cell) leaves the package's answers in /tmp; the evaluation reads them back.
PREPARED_ATTACK = r"""
import os, torch
if os.environ.get("CAPSULE_LAB_GRADING_KERNEL"):                   # an expression: only the kernel runs this block
    torch.save("prepared by the kernel", "/tmp/prepared.pt")
def squash(s, dim=-1):
    note = torch.load("/tmp/prepared.pt")                          # FileNotFoundError in a sandbox of its own
    n = (s * s).sum(dim=dim, keepdim=True)
    return n / (1 + n) * s / torch.sqrt(n + 1e-8)
"""

#: The grader's reference cache, listed through a directory descriptor (the answers live there).
CACHE_ATTACK = r"""
import os, torch
def squash(s, dim=-1):
    fd = os.open({cache!r}, os.O_RDONLY)
    if not [name for name in os.listdir(fd) if name.startswith("01.squash-reference")]:
        raise FileNotFoundError("no reference answers in the cache")
    n = (s * s).sum(dim=dim, keepdim=True)                          # read them: a working squash stands for it
    return n / (1 + n) * s / torch.sqrt(n + 1e-8)
"""


#: A squash that is wrong (always zero) and the "friend" who hands in the same.
TRIVIAL_SQUASH = """
def squash(s, dim=-1):
    return s * 0
"""

#: The kernel writes the trivial answers into the grader's cache under its file name (signed with a key of its own:
#: it has not the instructor's), then kills its grading worker so that a fresh one reads the cache.
POISON_ATTACK = TRIVIAL_SQUASH + r"""
import dataclasses, os, signal
if os.environ.get("CAPSULE_LAB_GRADING_KERNEL"):                   # only the kernel runs this block
    from capsule_lab.grading import get_task
    from capsule_lab.grading.engine import reference_cache as rc
    from capsule_lab.grading.engine.running import expected
    os.environ["CAPSULE_LAB_CACHE"] = {cache!r}
    task = get_task("01.squash")
    with rc.signed_by(bytes(32)):
        rc.save(task, expected(dataclasses.replace(task, reference=squash)))
    os.kill(os.getppid(), signal.SIGKILL)                          # the grading worker
"""

#: The kernel writes a graded, full-score report for the student's later submission into the output folder, with its
#: sha256, the grader's fingerprint and the settings (the issue read them from /proc; the test hands them over).
FORGE_ATTACK = TRIVIAL_SQUASH + r"""
import json, os
if os.environ.get("CAPSULE_LAB_GRADING_KERNEL"):
    report = {{"notebook": {later!r}, "chapter": "01", "graded": True, "grading_error": None, "score": 5,
              "max_score": 5, "tasks": {{}}, "timeout_cells": [], "cell_errors": [], "sha256": {sha256!r},
              "grader": {grader!r}, "settings": {settings!r}}}
    with open(os.path.join({out!r}, "later_01.json"), "w") as f:
        json.dump(report, f)
"""

#: With --jobs 2, the kernel watches /tmp for the other notebook's evaluation folder and writes its results there.
WATCH_ATTACK = TRIVIAL_SQUASH + r"""
import glob, os, time, torch
if os.environ.get("CAPSULE_LAB_GRADING_KERNEL"):
    seen, deadline = set(), time.monotonic() + 60
    while time.monotonic() < deadline:
        for folder in glob.glob("/tmp/capsule-lab-evaluation-*"):
            seen.add(folder)
            for k in range(8):
                try:
                    torch.save({"found": True, "not_implemented": False, "cases": []}, f"{folder}/result-{k}.pt")
                except OSError:
                    pass
        time.sleep(0.05)
    raise RuntimeError(f"saw {len(seen)} evaluation folder(s)")
"""


def _with_squash(solution: Path, code: str, out: Path) -> Path:
    nb = nbformat.read(solution, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith("def squash")]
    assert len(cells) == 1
    cells[0].source = code
    nbformat.write(nb, out)
    return out


@pytest.fixture(scope="module")
def extension(tmp_path_factory):
    import sysconfig

    compiler = shutil.which("cc") or shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    if compiler is None or not (Path(include) / "Python.h").exists():
        pytest.skip("building the attack's extension needs a C compiler and Python's headers")
    folder = tmp_path_factory.mktemp("extension")
    (folder / "helper.c").write_text(EXTENSION)
    subprocess.run([compiler, "-shared", "-fPIC", f"-I{include}", str(folder / "helper.c"), "-o",
                    str(folder / "helper.so")], check=True, capture_output=True)
    return base64.b64encode((folder / "helper.so").read_bytes()).decode()


@pytest.mark.slow
@needs_sandbox
def test_attack_notebooks_score_nothing_and_honest_ones_keep_their_points(tmp_path, extension, monkeypatch):
    from capsule_lab.grading import grade
    from capsule_lab.grading.engine.reference_cache import cache_root

    monkeypatch.setenv("CAPSULE_LAB_CACHE", str(tmp_path / "cache"))
    package = sandbox.PACKAGE
    solution = ROOT / "solutions" / "01_capsules.ipynb"
    folder = tmp_path / "class"
    folder.mkdir()
    honest = shutil.copy(solution, folder / "honest_01.ipynb")
    attacks = {
        "process": PROCESS_ATTACK.replace("{so}", extension),
        "source": SOURCE_ATTACK.format(package=package),
        "prepared": PREPARED_ATTACK,
        "cache": CACHE_ATTACK.format(cache=str(cache_root() / "grader")),
        "poison": POISON_ATTACK.format(cache=str(cache_root())),
        "watch": WATCH_ATTACK,
    }
    paths = [_with_squash(solution, code, folder / f"{name}_01.ipynb") for name, code in attacks.items()]
    alone = grade([honest], tmp_path / "alone", timeout=120, jobs=1)[0]
    reports = grade([honest, *paths], tmp_path / "batch", timeout=120, jobs=2)
    by_name = {Path(r["notebook"]).stem.split("_")[0]: r for r in reports}
    assert alone["score"] == alone["max_score"] == 5 and by_name["honest"]["score"] == 5
    assert by_name["honest"]["tasks"] == alone["tasks"]
    reasons = {"process": "Operation not permitted", "source": "No such file or directory",
               "prepared": "No such file or directory", "cache": "No such file or directory"}
    for name, reason in reasons.items():
        report = by_name[name]
        squash = report["tasks"]["01.squash"]
        assert report["graded"] and report["sandbox"] == "bubblewrap"
        assert squash["points"] == 0 and squash["status"] in ("error", "refused"), (name, squash)
        assert reason in squash["message"], (name, squash["message"])
        assert report["score"] == 4, (name, report["tasks"])             # the other tasks, honest, keep theirs
    # the kernel wrote its answers into a private /tmp and signalled its own namespace's first process: the worker
    # lived (the report is graded), the honest notebook kept its points, and the poisoner's squash is judged wrong
    poison = by_name["poison"]
    assert poison["graded"] and poison["tasks"]["01.squash"]["status"] == "wrong" and poison["score"] == 4
    # the watcher, run beside the others, never saw another notebook's evaluation folder
    watch = by_name["watch"]
    assert any("saw 0 evaluation folder(s)" in e["evalue"] for e in watch["cell_errors"]), watch["cell_errors"]
    assert watch["tasks"]["01.squash"]["status"] == "wrong" and watch["score"] == 4


@pytest.mark.slow
def test_without_the_sandbox_the_key_refuses_poisoned_answers_and_forged_reports(tmp_path, monkeypatch):
    """--no-sandbox: the kernel runs with the grader's rights, so it can write the cache and the output folder and
    kill its worker. What the key holds there: answers and reports written without it are refused (the attack code
    does not read the key; with the grader's rights it could: book/instructors.md says so)."""
    from capsule_lab.grading import grade_batch
    from capsule_lab.grading.engine.reference_cache import cache_root, package_fingerprint

    monkeypatch.setenv("CAPSULE_LAB_CACHE", str(tmp_path / "cache"))
    solution = ROOT / "solutions" / "01_capsules.ipynb"
    folder, out = tmp_path / "class", tmp_path / "out"
    folder.mkdir()
    honest = shutil.copy(solution, folder / "honest_01.ipynb")
    later = shutil.copy(ROOT / "exercises" / "01_capsules.ipynb", folder / "later_01.ipynb")   # unanswered
    settings = {"timeout": 120, "task_timeout": None, "chapter": None, "kernel_name": "python3", "sandbox": False}
    forge = FORGE_ATTACK.format(later=str(later), sha256=hashlib.sha256(Path(later).read_bytes()).hexdigest(),
                                grader=package_fingerprint(), settings=settings, out=str(out))
    paths = {name: _with_squash(solution, code, folder / f"{name}_01.ipynb") for name, code in
             (("forge", forge), ("poison", POISON_ATTACK.format(cache=str(cache_root()))), ("friend", TRIVIAL_SQUASH))}
    alone = {p.name: grade_batch([p], tmp_path / f"alone-{p.stem}", jobs=1, sandbox=False).reports[0]
             for p in (Path(honest), paths["friend"])}
    # one worker: the forger, then the poisoner (its worker killed), then an honest notebook and the friend
    batch = grade_batch([paths["forge"], paths["poison"], honest, paths["friend"]], out, jobs=1, sandbox=False)
    got = {Path(r["notebook"]).name: r for r in batch.reports}
    poison = got["poison_01.ipynb"]
    assert not poison["graded"] and "the notebook's code ended its grading process" in poison["grading_error"]
    for name, report in alone.items():                                  # exactly what they get alone
        assert got[name]["tasks"] == report["tasks"] and got[name]["score"] == report["score"], name
    assert got["friend_01.ipynb"]["tasks"]["01.squash"]["status"] == "wrong"
    assert (out / "later_01.json").is_file(), "the forger's report is there, as in the issue"
    # the later submission: graded, not skipped on the forged report, which is named as refused
    again = grade_batch([later], out, jobs=1, sandbox=False)
    assert again.skipped == [] and again.graded == [str(later)]
    assert str(out / "later_01.json") in again.refused
    assert again.reports[0]["graded"] and again.reports[0]["score"] == 0

def test_a_result_with_fewer_gradients_is_judged_wrong_not_checked_less(tmp_path, monkeypatch):
    """A record that drops a gradient used to shorten the comparison (``zip``); now it is a failed case."""
    from dataclasses import replace

    from capsule_lab.grading import get_task
    from capsule_lab.grading.engine.judging import verdict
    from capsule_lab.grading.engine.running import expected

    monkeypatch.setenv("CAPSULE_LAB_CACHE", str(tmp_path))
    task = get_task("01.squash")
    cases = expected(task)
    assert verdict(task, cases, [e.want for e in cases])[0] == "passed"
    short = [replace(e.want, grads=e.want.grads[:-1]) if e.want.grads else e.want for e in cases]
    status, problem, _ = verdict(task, cases, short)
    assert status != "passed" and "gradient(s) where the case has 1 inputs" in problem
