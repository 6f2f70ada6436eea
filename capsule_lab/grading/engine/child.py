"""The evaluation child of ``capsule-lab grade``: the student's functions run on the grader's inputs here.

Used for every chapter's exercises (chapters 01–07). :mod:`capsule_lab.grading.engine.evaluation` starts this
module as its own process (``python -I``, calling :func:`run` with WORKDIR), in a new session, and kills
it when a task runs past its time limit. Nothing this process writes decides a score: it only turns the
student's functions into *values* (plain tensors), which the grader compares with the answers it
computed itself. In order, it

1. reads the grader's request (``WORKDIR/request.pt``: the notebook's code cells, the tasks, their inputs);
2. imports the whole package, refuses the chapter's answers for good and gates every other package
   function (:func:`~capsule_lab.grading.engine.lock.deny_for_good`: deny by default — while the notebook's
   definitions load, only what one of the chapter's tasks allows and ``capsule_lab.course.profiles.setup``, the
   setup cell's, may be called from the student's code; while a task runs, only what that task allows), and
   installs an audit hook (:func:`sys.addaudithook`, which cannot be removed) that refuses to re-read any of
   the package's files (source or bytecode: ``importlib.reload``, ``exec`` of the file, ``marshal`` of the
   ``.pyc``), to look at every object or referrer through ``gc``, to set a profile or trace function (either
   would hand out the gates' frames), to start processes (where the reference would run unrefused) and to call
   C functions through ctypes;
3. runs the notebook's *definitions*, cell by cell (:func:`definitions`): its imports, function and class
   definitions and top-level assignments — not its expression statements (``check(...)``, prints), loops,
   ``if``/``with``/``try`` blocks or IPython magics — each statement with a time limit, errors noted and
   skipped, as a kernel would go on after a failing cell;
4. for each task, switches the allow-list to the task's (:func:`~capsule_lab.grading.engine.lock.allow_task`), looks
   up the function the exercise asks for by its name and runs it on every case
   (:func:`~capsule_lab.grading.engine.running.run_student`), writing ``WORKDIR/result-K.pt`` (``torch.save`` of
   plain data) before the next task.

Progress is written to ``WORKDIR/progress`` (``loading N`` / ``task K``) so that the grader can tell which
statement or task ran out of time.
"""

from __future__ import annotations

import ast
import gc
import importlib.util
import io
import linecache
import os
import re
import signal
import subprocess
import sys

import torch

from ..tasks import TASKS
from ..tasks.registry import Case
from .checking import stand_in_name, stand_ins
from .lock import allow_task, deny_for_good, package_modules
from .records import to_record
from .reference_cache import cache_root
from .running import Expected, StubAnswer, run_student
from .sandbox import confine

__all__ = ["definitions", "main", "run"]

_KEPT = ("Import", "ImportFrom", "FunctionDef", "AsyncFunctionDef", "ClassDef", "Assign", "AnnAssign",
         "AugAssign")
_MAGIC = re.compile(r"^(\s*)[%!]")


class _Overtime(BaseException):
    """A statement of the notebook ran past its time limit while the definitions were loading."""


def definitions(sources: list[str]) -> list[tuple[int, ast.Module]]:
    """The statements the child runs, as ``(cell index, one-statement module)``, in notebook order.

    ``sources`` are the notebook's code cells (index = position among all cells; ``None`` for other
    cells). Line magics and shell lines (``%pip``, ``!ls``) become ``pass``; a cell magic (``%%time``) or a
    cell that does not parse is skipped. Only imports, ``def``/``class`` and assignments at the top level
    of a cell are kept.
    """
    out = []
    for index, source in enumerate(sources):
        if source is None or source.lstrip().startswith("%%"):
            continue
        lines = [_MAGIC.sub(r"\1pass  # ", line) for line in source.split("\n")]
        try:
            tree = ast.parse("\n".join(lines), filename=f"<cell {index}>")
        except SyntaxError:
            continue
        for node in tree.body:
            if type(node).__name__ in _KEPT:
                out.append((index, ast.Module(body=[node], type_ignores=[])))
    return out


def _write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


_SPAWNING = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
             "pty.spawn")
_FOREIGN = ("ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "ctypes.cdata")
_UNIMPORTABLE = ("_posixsubprocess", "_ctypes", "ctypes")
_INTROSPECTION = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.setprofile", "sys.settrace")

#: What the notebook's top-level code may call while its definitions load, besides what its tasks allow: the
#: setup cell (CONTRIBUTING.md, "Notebooks").
LOADING_ALLOWED = ("capsule_lab.course.profiles.setup",)

#: The key of the loading phase's allow-list: what a refusal while the definitions load names.
_LOADING = "this notebook's definitions (loaded before its tasks)"


def _audit_hook(forbidden: frozenset, forbidden_folders: tuple):
    """From now on: refuse to open the package's files again or anything in the reference caches (the answers:
    the grader's and ``check``'s, ``forbidden_folders``), to look through ``gc``, to set a profile or trace function, to start processes, to call
    C functions through ctypes and to import the modules that would do either without an audit event."""

    def hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            try:
                path = os.path.realpath(os.fsdecode(args[0]))
            except (TypeError, ValueError):
                return
            if path in forbidden or any(path == f or path.startswith(f + os.sep) for f in forbidden_folders):
                raise PermissionError(f"the grader refuses to open {path} while your functions are graded")
        elif event.startswith(_SPAWNING) or (event == "import" and args and args[0] in _UNIMPORTABLE):
            raise PermissionError("the grader does not let your functions start processes")
        elif event.startswith(_FOREIGN):
            raise PermissionError("the grader does not let your functions call C code through ctypes")
        elif event.startswith(_INTROSPECTION):
            raise PermissionError(f"the grader does not let your functions use {event} while they are graded")

    return hook


def _disarm_spawning() -> None:
    """Drop every reference to the process-starting primitive that raises no audit event
    (``_posixsubprocess.fork_exec``): in ``subprocess``, ``sys.modules`` and the interpreter's copy of
    the module's dict, so that not even ``gc`` can find it afterwards."""
    module = sys.modules.pop("_posixsubprocess", None)
    fork_exec = getattr(module, "fork_exec", None)
    for name in ("_fork_exec", "_posixsubprocess"):
        if hasattr(subprocess, name):
            setattr(subprocess, name, None)
    if fork_exec is not None:
        for holder in gc.get_referrers(fork_exec):
            if isinstance(holder, dict):
                for key in [k for k, v in holder.items() if v is fork_exec]:
                    del holder[key]
            elif isinstance(holder, list):
                holder[:] = [v for v in holder if v is not fork_exec]
    del module, fork_exec
    gc.collect()


def _forbidden_files(functions, modules=()) -> frozenset:
    """The source files of ``functions`` and of ``modules`` (the whole package), and their cached bytecode."""
    sources = {fn.__code__.co_filename for fn in functions}
    sources |= {m.__file__ for m in modules if getattr(m, "__file__", None)}
    files = set()
    for source in sources:
        src = os.path.realpath(source)
        files.add(src)
        try:
            files.add(os.path.realpath(importlib.util.cache_from_source(src)))
        except (NotImplementedError, ValueError):
            pass
    return frozenset(files)


def main(workdir: str) -> int:
    """Run one evaluation (see the module docstring); the exit status is 0 unless the request is unusable."""
    request = torch.load(os.path.join(workdir, "request.pt"), weights_only=True)
    tasks = [TASKS[t["id"]] for t in request["tasks"]]
    chapter = [task for task in TASKS.values() if task.chapter == request["chapter"]]
    answers = [fn for task in chapter for fn in task.refused]
    forbidden = _forbidden_files(answers, package_modules())   # imports the whole package, before the hooks
    replaced = {t["id"]: [TASKS[u] for u in t.get("stand_ins", ()) if u in TASKS and TASKS[u].stand_in] for t in
                request["tasks"]}
    # a task may also call the stand-ins that take the place of the student's earlier functions it uses
    allow_lists = {f"task {task.id}": task.allowed + tuple(stand_in_name(u) for u in replaced.get(task.id, ()))
                   for task in chapter}
    allow_lists[_LOADING] = tuple(dict.fromkeys([*LOADING_ALLOWED, *(n for t in chapter for n in t.allowed)]))
    deny_for_good(answers, allow_lists, _LOADING)
    _disarm_spawning()
    if request.get("hide"):     # in the OS sandbox: the package's source unmounted, another user, no new processes
        linecache.clearcache()
        confine(request["hide"])
    caches = tuple(os.path.realpath(cache_root() / name) for name in ("grader", "references"))
    sys.addaudithook(_audit_hook(forbidden, caches))
    progress = os.path.join(workdir, "progress")
    _write(os.path.join(workdir, "ready"), b"")

    # the notebook's folder, last: local helper modules import, but nothing already imported is shadowed
    sys.path.append(request["folder"])
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    limit = float(request["statement_timeout"])

    def overtime(signum, frame):
        raise _Overtime()

    errors = []
    for n, (cell, module) in enumerate(definitions(request["sources"])):
        if n in request["skip"]:
            errors.append({"cell": cell, "statement": n, "error": "skipped: it did not finish in an earlier run"})
            continue
        _write(progress, f"loading {n}".encode())
        try:
            signal.signal(signal.SIGALRM, overtime)
            signal.setitimer(signal.ITIMER_REAL, limit)
            exec(compile(module, f"<cell {cell}>", "exec"), namespace)
        except _Overtime:
            errors.append({"cell": cell, "statement": n, "error": f"did not finish within {limit:g} s"})
        except BaseException as err:  # noqa: BLE001 - the student's code may raise anything
            errors.append({"cell": cell, "statement": n, "error": f"{type(err).__name__}: {err}"[:500]})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    _write(os.path.join(workdir, "loaded.pt"), _dumps({"errors": errors}))

    for k, (task, spec) in enumerate(zip(tasks, request["tasks"])):
        if k < request["start"]:
            continue
        _write(progress, f"task {k}".encode())
        allow_task(f"task {task.id}")
        fn = namespace.get(task.function)
        if not callable(fn):
            result = {"found": False}
        else:
            try:
                cases = [Expected(Case(c["name"], tuple(c["args"]), dict(c["kwargs"]), c["grad"]), c["weights"], None)
                         for c in spec["cases"]]
                with stand_ins(namespace, replaced.get(task.id, ())):
                    got = run_student(task, fn, cases, refuse=False)  # refused for good above, allowed per task
                result = {"found": True, "not_implemented": False, "cases": [to_record(g) for g in got]}
            except StubAnswer:
                result = {"found": True, "not_implemented": True, "cases": []}
            except BaseException as err:  # noqa: BLE001 - e.g. a result that cannot be turned into plain data
                result = {"found": True, "not_implemented": False, "cases": [],
                          "failure": f"{type(err).__name__}: {err}"[:500]}
        _write(os.path.join(workdir, f"result-{k}.pt"), _dumps(result))
    return 0


def _dumps(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def run(workdir: str) -> None:
    """The child's entry point: output to /dev/null (nobody reads it), :func:`main`, then exit at once."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    status = 1
    try:
        status = main(workdir)
    finally:
        os._exit(status)
