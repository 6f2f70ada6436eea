"""The OS sandbox that every process running student code starts in (``capsule-lab grade``; exercises 01–08).

The notebook's kernel and the evaluation child (:mod:`.child`) run inside bubblewrap (``bwrap``, the sandbox of
Flatpak; Debian/Ubuntu package ``bubblewrap``). :func:`sandboxed` turns a command into one that starts in it:

- **a filesystem of its own, read-only**: only what Python needs is mounted — the system folders (``/usr``,
  ``/etc``, ...), Python and the virtual environment, the package, the course's data — plus a private ``/tmp``
  (a fresh ``tmpfs``: what a kernel leaves there is gone with it, and no other notebook's sandbox sees it), a read-only
  copy of the notebook's folder (:func:`stage_folder`: its files, no other notebook) and the folders the grader hands
  over for this one process (``writable``: the kernel's sockets, the evaluation's request and results). The reference
  cache, the report folder and the grader's key are not mounted at all (and masked with an empty ``tmpfs`` where they
  lie under something mounted);
- **no network** (its own network namespace: loopback only), **its own PID namespace** (it sees only its own
  processes: not the grader's command line, not another notebook's), its own IPC and UTS namespaces, a new session;
- **another user**: run as root, the grader starts it as root and :func:`confine` drops it to
  :data:`SANDBOX_UID` (``nobody``) before any student code runs, so it owns nothing of the grader's; run as
  anyone else, it is that user inside a user namespace, mapped to ``nobody`` (it can read what the grader can read
  of what is mounted, nothing more);
- **no new processes**: :func:`confine` installs a seccomp filter that refuses ``fork``, ``vfork``, ``clone``
  without ``CLONE_THREAD`` (threads stay allowed), ``clone3``, ``execve`` and ``execveat``, and the calls that would
  undo the sandbox (``unshare``, ``setns``, ``mount`` and the new mount API, ``chroot``, ``pivot_root``, ``ptrace``):
  whatever route a notebook takes to a process — ``subprocess``, ``os.fork``, an extension module's C code, a library
  loaded under another name — the kernel answers ``EPERM``. A filter cannot be removed once installed;
- **the package's source hidden from the evaluation** (``hide``): the evaluation child imports the whole package
  first, then :func:`confine` unmounts its folder, so no path, directory descriptor or hard link reaches its files
  while the student's functions run (a renamed copy of the package, imported ungated, is not possible).

Where bubblewrap cannot start (not Linux, not installed, no namespaces in a container), :func:`problem` says why and
names the fix; ``capsule-lab grade`` then stops unless ``--no-sandbox`` is given, and the reports say
``"sandbox": "none"``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["SANDBOX_UID", "BUBBLEWRAP", "NONE", "PACKAGE_MOUNT", "NOTEBOOK_FOLDER", "problem", "sandboxed", "confine",
           "stage_folder", "private_folder", "handed_over", "PACKAGE",
           "exit_status", "no_new_processes_filter"]

#: The user the sandboxed process runs as (``nobody``): when the grader runs as root, for real; otherwise as the name
#: the grader's own user has inside the sandbox's user namespace.
SANDBOX_UID = 65534
#: What a report's ``sandbox`` says: graded inside bubblewrap, or (``capsule-lab grade --no-sandbox``) outside any.
BUBBLEWRAP, NONE = "bubblewrap", "none"

_INSTALL = "install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; `make setup` does it where apt is)"
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: The package's own folder (``capsule_lab/``): the kernel reads it where it lies, the evaluation child from
#: :data:`PACKAGE_MOUNT` until :func:`confine` unmounts it.
PACKAGE = str(Path(__file__).resolve().parents[2])
#: Where the evaluation child sees the package until :func:`confine` unmounts it.
PACKAGE_MOUNT = "/capsule-lab-package"
#: Where a sandboxed kernel and evaluation find the copy of the notebook's folder (:func:`stage_folder`): their
#: working folder, the same wherever the notebook lies.
NOTEBOOK_FOLDER = "/notebook"
#: The environment a sandboxed process gets in place of the grader's home, caches and runtime folders: all in its
#: private /tmp (``check`` in a sandboxed kernel keeps a reference cache of its own, never the grader's).
_PRIVATE_ENV = {"HOME": "/tmp/home", "TMPDIR": "/tmp", "XDG_CACHE_HOME": "/tmp/cache",
                "XDG_CONFIG_HOME": "/tmp/config", "XDG_DATA_HOME": "/tmp/data", "XDG_RUNTIME_DIR": "/tmp/runtime",
                "CAPSULE_LAB_CACHE": "/tmp/capsule-lab-cache", "CAPSULE_LAB_CHECKPOINTS": "/tmp/checkpoints",
                "MPLCONFIGDIR": "/tmp/matplotlib", "IPYTHONDIR": "/tmp/ipython", "JUPYTER_RUNTIME_DIR": "/tmp/jupyter",
                "JUPYTER_CONFIG_DIR": "/tmp/jupyter-config", "JUPYTER_DATA_DIR": "/tmp/jupyter-data"}
#: Variables of the grader's environment a sandboxed process does not get (where the grader keeps its secrets).
_DROPPED_ENV = ("CAPSULE_LAB_GRADER_KEY", "SSH_AUTH_SOCK", "GNUPGHOME", "KRB5CCNAME", "DBUS_SESSION_BUS_ADDRESS")


def _as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


_PROBLEM: list = []      # problem()'s answer, once measured in this process


def problem() -> str | None:
    """Why no sandbox can start on this machine (a sentence that names the fix), or None when one can: Linux, ``bwrap``
    on the PATH, and a trial sandbox (with the namespaces, the mounts and the user the grader's use) that runs
    ``true``. Measured once per process. Exercises 01–08 (``capsule-lab grade``)."""
    if not _PROBLEM:
        _PROBLEM.append(_trial())
    return _PROBLEM[0]


def _trial() -> str | None:
    if not sys.platform.startswith("linux"):
        return (f"the grader's sandbox needs Linux (bubblewrap); this is {platform.system()}: grade on Linux (a "
                "Slurm node, GitHub Actions' ubuntu runner, a Linux VM), or pass --no-sandbox to grade without one")
    if _bwrap() is None:
        return f"bubblewrap (`bwrap`) is not installed: {_INSTALL}, or pass --no-sandbox to grade without a sandbox"
    true = shutil.which("true") or "/bin/true"
    try:
        with tempfile.TemporaryDirectory() as empty:     # the evaluation's kind: a folder to hide, capabilities
            done = subprocess.run(_bwrap_args("/", (), (), (empty, PACKAGE_MOUNT)) + ["--", true],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        return f"bubblewrap could not start a sandbox ({type(err).__name__}: {err}); pass --no-sandbox to grade without one"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return (f"bubblewrap could not start a sandbox here ({why[0]}): a container may need user namespaces "
                "(`--security-opt seccomp=unconfined`, or `sysctl kernel.unprivileged_userns_clone=1`); "
                "pass --no-sandbox to grade without one")
    return None


def _bwrap() -> str | None:
    return shutil.which("bwrap")


def _python_paths() -> list[str]:
    """What Python needs: its installation, the virtual environment and every folder on ``sys.path``."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)}
    return sorted(os.path.realpath(p) for p in paths) + sorted(paths)


def _outermost(paths) -> list[str]:
    """``paths`` without any that lies inside another of them, sorted."""
    kept: list[str] = []
    for p in sorted(set(os.path.normpath(p) for p in paths if p)):
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return kept


def _under(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _ancestors(paths, made: set) -> list[str]:
    """``--perms 0755 --dir`` for every folder above ``paths`` that the sandbox's root must hold (created once),
    so that a path under a folder only its owner may enter (``/root``) is reachable by the sandbox's user."""
    args = []
    for p in paths:
        parts = Path(p).parts
        for k in range(2, len(parts)):
            folder = str(Path(*parts[:k]))
            if folder not in made:
                made.add(folder)
                args += ["--perms", "0755", "--dir", folder]
    return args


def _bwrap_args(cwd: str, readable, writable, hide, masked=()) -> list[str]:
    args = [_bwrap() or "bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv"]
    if _as_root():                          # drops to SANDBOX_UID itself (confine), after the mounts
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        if hide:
            args += ["--cap-add", "CAP_SYS_ADMIN"]
    elif hide:                              # root of its own user namespace until confine unmounts and drops
        args += ["--unshare-user", "--disable-userns", "--uid", "0", "--gid", "0", "--cap-add", "CAP_SYS_ADMIN"]
    else:
        args += ["--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    for path in _SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm",
             "--perms", "1777", "--tmpfs", "/tmp"]
    made = set(_SYSTEM) | {"/tmp", "/proc", "/dev"}
    pairs = [(p, p) if isinstance(p, str) else tuple(p) for p in readable]
    binds = _outermost([inside for source, inside in pairs if source == inside and os.path.exists(source)])
    binds = [p for p in binds if not _under(p, _SYSTEM)]
    for p in binds:
        args += _ancestors([p], made) + ["--ro-bind", p, p]
    for source, inside in pairs:            # a folder mounted elsewhere than its own path (a notebook's copy)
        if source != inside:
            args += _ancestors([inside], made) + ["--ro-bind", source, inside]
    for source, inside in writable:
        args += _ancestors([inside], made) + ["--bind", source, inside]
    if hide:
        source, inside = hide
        args += _ancestors([inside], made) + ["--ro-bind", source, inside]
    for p in masked:                        # secrets that lie under a mounted folder: an empty tmpfs over them
        if p and _under(os.path.normpath(p), binds) and os.path.isdir(p):
            args += ["--tmpfs", os.path.normpath(p)]
    args += ["--chdir", cwd]
    return args


def sandboxed(args: list, *, cwd: str, env: dict, readable=(), writable=(), hide=None, masked=()) -> list:
    """``args`` (a command: ``[python, ...]``) as a command that runs it inside the sandbox (see the module
    docstring), in ``cwd`` (a path inside), with the environment ``env`` less the grader's secrets and with a
    private home, caches and runtime folders in its ``/tmp``. ``readable``: host folders (or files) mounted read-only
    besides the system's and Python's, each a path (mounted at that path) or a ``(host path, path inside)`` pair;
    ``writable``: ``(host folder, path inside)`` pairs mounted
    read-write; ``hide``: ``(package folder, path inside)`` mounted read-only until :func:`confine` unmounts it;
    ``masked``: folders covered with an empty ``tmpfs`` where they lie under a mounted one (the reference cache, the
    report folder). Raises ``RuntimeError`` with :func:`problem`'s sentence where no sandbox can start. Exercises 01–08.
    """
    why = problem()
    if why is not None:
        raise RuntimeError(why)
    if not isinstance(args, (list, tuple)) or not args:
        raise ValueError("args must be a non-empty command list")
    command = _bwrap_args(cwd, [*_python_paths(), *readable], writable, hide, masked)
    clean = {k: v for k, v in env.items() if k not in _DROPPED_ENV and k not in _PRIVATE_ENV}
    for key, value in {**clean, **_PRIVATE_ENV}.items():
        command += ["--setenv", key, str(value)]
    return command + ["--", *map(str, args)]


def exit_status(returncode: int | None) -> int | None:
    """A sandboxed process's exit status as ``subprocess`` gives an unsandboxed one's: bubblewrap exits with 128 + N
    when the process inside was killed by signal N, which becomes -N. Exercises 01–08."""
    if returncode is not None and 128 < returncode < 128 + 65:
        return -(returncode - 128)
    return returncode


@contextlib.contextmanager
def stage_folder(folder: str | os.PathLike, max_file_mb: float = 16):
    """A read-only copy of a notebook's ``folder`` for its sandbox (``with stage_folder(folder) as copy:``): its
    regular files, each up to ``max_file_mb`` MB, but no notebook (``*.ipynb``: another student's submission stays
    out of this one's sandbox) and no subfolder; readable by :data:`SANDBOX_UID`. Removed on leaving. The sandbox
    mounts it at :data:`NOTEBOOK_FOLDER`, its working folder, so the notebook's relative paths and local modules
    work. Exercises 01–08."""
    folder = Path(folder)
    copy = Path(tempfile.mkdtemp(prefix="capsule-lab-notebook-"))
    try:
        os.chmod(copy, 0o755)
        for entry in folder.iterdir() if folder.is_dir() else ():
            with contextlib.suppress(OSError):
                if (entry.is_file() and not entry.is_symlink() and entry.suffix != ".ipynb"
                        and entry.stat().st_size <= max_file_mb * 2 ** 20):
                    shutil.copyfile(entry, copy / entry.name)
                    os.chmod(copy / entry.name, 0o644)
        yield copy
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def private_folder(prefix: str) -> Path:
    """A new folder the grader hands to one sandboxed process to write in (the kernel's sockets, the evaluation's
    results): mode 0700, :func:`handed_over`. Exercises 01–08."""
    return handed_over(Path(tempfile.mkdtemp(prefix=prefix)))


def handed_over(path: Path) -> Path:
    """``path``, owned by :data:`SANDBOX_UID` when the grader is root (so that the sandbox's user may use it), else
    left the grader's own (the same user inside the sandbox). Exercises 01–08."""
    if _as_root():
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return path


# ---------------------------------------------------------------- inside the sandbox

#: Syscall numbers, per machine, of what the filter refuses (x86_64 and aarch64; -1: the machine has no such call).
_SYSCALLS = {
    "x86_64": {"audit": 0xC000003E, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
               "clone3": 435, "ptrace": 101, "chroot": 161, "mount": 165, "umount2": 166, "pivot_root": 155,
               "unshare": 272, "setns": 308, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
               "fsmount": 432, "fspick": 433, "mount_setattr": 442},
    "aarch64": {"audit": 0xC00000B7, "clone": 220, "fork": -1, "vfork": -1, "execve": 221, "execveat": 281,
                "clone3": 435, "ptrace": 117, "chroot": 51, "mount": 40, "umount2": 39, "pivot_root": 41,
                "unshare": 97, "setns": 268, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
                "fsmount": 432, "fspick": 433, "mount_setattr": 442},
}
_REFUSED = ("fork", "vfork", "execve", "execveat", "ptrace", "chroot", "mount", "umount2", "pivot_root", "unshare",
            "setns", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr")
_CLONE_THREAD = 0x00010000
_EPERM, _ENOSYS = 1, 38
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000
_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06
_X32_BIT = 0x40000000


def no_new_processes_filter(machine: str | None = None) -> bytes:
    """The seccomp program (classic BPF, ``struct sock_filter`` records) that :func:`confine` installs: on another
    architecture than the machine's, kill; ``clone3`` answers ``ENOSYS`` (its flags are out of a filter's reach, and
    the C library then falls back to ``clone``); ``clone`` without ``CLONE_THREAD`` and every call of
    ``_REFUSED`` answer ``EPERM``; the rest is allowed. Exercises 01–08."""
    numbers = _SYSCALLS.get(machine or platform.machine())
    if numbers is None:
        raise RuntimeError(f"the sandbox's seccomp filter knows x86_64 and aarch64, not {platform.machine()}")

    def stmt(code, k):
        return struct.pack("HBBI", code, 0, 0, k)

    def jump(code, k, jt, jf):
        return struct.pack("HBBI", code, jt, jf, k)

    refused = [numbers[name] for name in _REFUSED if numbers[name] >= 0]
    tests = [(n, "eperm") for n in refused] + [(numbers["clone3"], "enosys"), (numbers["clone"], "clone")]
    n = len(tests)
    # after the tests: [n] allow, [n+1] load clone's flags, [n+2] CLONE_THREAD?, [n+3] allow, [n+4] EPERM, [n+5] ENOSYS
    where = {"clone": n + 1, "eperm": n + 4, "enosys": n + 5}
    program = [stmt(_LD_W_ABS, 4), jump(_JEQ_K, numbers["audit"], 1, 0), stmt(_RET_K, _RET_KILL),
               stmt(_LD_W_ABS, 0)]
    if platform.machine() == "x86_64":      # the x32 ABI's numbers: refused outright
        program = program[:-1] + [stmt(_LD_W_ABS, 0), jump(_JSET_K, _X32_BIT, 0, 1), stmt(_RET_K, _RET_ERRNO | _EPERM)]
    program += [jump(_JEQ_K, number, where[target] - k - 1, 0) for k, (number, target) in enumerate(tests)]
    program += [stmt(_RET_K, _RET_ALLOW), stmt(_LD_W_ABS, 16), jump(_JSET_K, _CLONE_THREAD, 0, 1),
                stmt(_RET_K, _RET_ALLOW), stmt(_RET_K, _RET_ERRNO | _EPERM), stmt(_RET_K, _RET_ERRNO | _ENOSYS)]
    return b"".join(program)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _MNT_DETACH = 38, 22, 2, 2


def confine(hide: str | None = None) -> None:
    """Inside the sandbox, before any student code runs: unmount ``hide`` (the package's folder, once imported), drop
    to :data:`SANDBOX_UID` (the grader runs as root) or drop every capability (a user namespace), then install
    :func:`no_new_processes_filter`. Raises ``OSError`` if any step fails: a process that cannot be confined must not
    run the student's code. Exercises 01–08."""
    libc = ctypes.CDLL(None, use_errno=True)
    if hide:
        if libc.umount2(os.fsencode(hide), _MNT_DETACH) != 0:
            raise OSError(ctypes.get_errno(), f"the sandbox could not unmount {hide}")
    if os.getuid() == 0:
        if Path("/proc/self/uid_map").read_text().split()[:2] == ["0", "0"]:     # the machine's root
            os.setgroups([])
            os.setgid(SANDBOX_UID)
            os.setuid(SANDBOX_UID)          # a real other user: every capability goes with root
        else:                               # root of a user namespace: keep the name, lose the capabilities
            header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
            if libc.capset(ctypes.byref(header), ctypes.byref(data)) != 0:
                raise OSError(ctypes.get_errno(), "the sandbox could not drop its capabilities")
    program = no_new_processes_filter()
    buffer = ctypes.create_string_buffer(program)
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "the sandbox could not set no_new_privs")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "the sandbox could not install its seccomp filter")
