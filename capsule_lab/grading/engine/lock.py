"""Deny by default: while the student's function runs, nothing of the package runs but what the task allows.

Used by every chapter's graded exercise (chapters 01–08). An exercise asks the student to write, say,
dynamic routing; the package already holds it (``capsule_lab.routing.dynamic_routing``), and often a second
route to the same numbers as well (another chapter's layer, a router's method, the grading package's own
references). So the refusal is **deny by default**: while the student's function for a task runs,

- the task's *answers* — its reference and the functions listed in ``answers``
  (:class:`~capsule_lab.grading.tasks.registry.Task`) — raise :class:`~.refusal.AnswerRefused` ("this task asks for
  your own implementation") however they are reached, even from inside the package (:mod:`.refusal`);
- every other function of the package (module functions, methods, static and class methods, properties,
  ``__init__`` of its classes and modules, lambdas and closures it made) raises :class:`~.refusal.AnswerRefused`
  naming itself and the task when the student's code calls it, unless the task names it in ``allowed``
  (``"capsule_lab.studies.bench.runner.run_router_bench"``; a class allows its constructor and its methods, those it
  inherits from the package's classes included). What an allowed function calls in turn runs: the refusal
  is decided at *call entry*, by the caller — the nearest frame on the stack that is neither the library
  (torch, the standard library: ``nn.Module.__call__``, ``functools``, ``dataclasses.replace``, …) nor a gate
  below. Code of the package calls freely; the student's code (and anything else) only what is allowed. A
  router the student hands to an allowed bench runs as the student's code again.

That works because it is the function's *code* that is replaced (``f.__code__``), not a name: every alias —
a module attribute, ``from … import f as _ref``, a re-export, a bound method — shares the one function
object. An answer's code becomes one that raises; every other function's becomes a small *gate* that asks who
calls and then runs a twin of the function (the same code, globals, defaults and closure).

Two uses:

- :func:`denied` (a context manager): for the duration only, then every code is put back.
  :func:`~capsule_lab.grading.engine.checking.check` uses it, so the in-notebook feedback says "refused" too; it
  runs in the student's own kernel, where nothing can be hidden from the student's code: feedback only.
- :func:`deny_for_good`: for the rest of the process. The answers are refused with no copy of their code kept
  anywhere (:func:`~.refusal.refuse_for_good`); the other functions' gates ask an audit hook
  (:func:`sys.addaudithook`: it cannot be removed, nor reached from Python), which alone holds the twins, and which
  refuses to hand out the package's code objects (a running twin's frame's ``f_code`` to the student's code, a
  closure's ``__code__`` to anyone) or to let ``__code__`` be assigned. The grader's evaluation process
  (:mod:`capsule_lab.grading.engine.child`) calls it before any student code runs, so that a function copied or
  called ahead of time gets nothing either; :func:`allow_task` then switches the allow-list from task to task.

What it cannot stop: a student who copies the package's *source* into the notebook. That is plagiarism, for
the instructor to judge; it is not something code can tell from an honest answer.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import sys
import sysconfig
import types
import warnings
from typing import Callable, Iterable, Iterator

import capsule_lab

from .refusal import REFUSAL, AnswerRefused, plain_functions, qualified_name, refuse_for_good, refusing_code

__all__ = ["package_functions", "resolve_allowed", "denied", "deny_for_good", "allow_task", "call_student",
           "package_modules", "refusing_caller"]

#: The file name of :data:`call_student`'s code: not the package's.
_STUDENT_CALL = "<the student's function>"

#: The audit event by which a gate asks, in the grader's child, whether its function may run.
_GATE_EVENT = "capsule_lab.grading.gate"

#: The audit event by which :func:`allow_task` switches the allow-list of :func:`deny_for_good`'s gates.
_SWITCH_EVENT = "capsule_lab.grading.allow_task"

#: Attributes whose reading hands out a code object: watched once :func:`deny_for_good` ran.
_CODE_ATTRIBUTES = frozenset({"__code__", "f_code", "gi_code", "cr_code", "ag_code"})


# ---------------------------------------------------------------- what the package is

def _package_dir() -> str:
    return os.path.realpath(os.path.dirname(capsule_lab.__file__))


def package_modules() -> list[types.ModuleType]:
    """Every module of ``capsule_lab``, imported (``pkgutil.walk_packages``), in a stable order."""
    names = ["capsule_lab"] + [m.name for m in pkgutil.walk_packages(capsule_lab.__path__, "capsule_lab.")]
    return [importlib.import_module(name) for name in names]


def _class_functions(cls: type) -> list:
    """The plain functions in a class's own ``__dict__``: methods, static and class methods' functions,
    property accessors (``cached_property`` too)."""
    out = []
    for value in vars(cls).values():
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            out += [f for f in (value.fget, value.fset, value.fdel) if isinstance(f, types.FunctionType)]
        elif isinstance(getattr(value, "func", None), types.FunctionType) and not isinstance(value, types.FunctionType):
            out.append(value.func)  # functools.cached_property, partialmethod
        elif isinstance(value, types.FunctionType):
            out.append(value)
    return out


def _ours(obj) -> bool:
    module = vars(obj).get("__module__") if isinstance(obj, type) else getattr(obj, "__module__", None)
    return isinstance(module, str) and (module == "capsule_lab" or module.startswith("capsule_lab."))


def _is_autograd_backward(cls: type, fn) -> bool:
    """``backward``/``jvp``/``vjp`` of a ``torch.autograd.Function``: run by the autograd engine on a graph its
    ``forward`` (which is gated) built, so they are the engine's, not the caller's."""
    return fn.__name__ in ("backward", "jvp", "vjp") and any(
        f"{b.__module__}.{b.__qualname__}" == "torch.autograd.function.Function" for b in cls.__mro__)


_PACKAGE_FUNCTIONS: list = []


def package_functions() -> list:
    """Every plain Python function of the package (imported in full first): its modules' functions, its
    classes' methods, static and class methods and property accessors (also those ``dataclasses`` and
    ``NamedTuple`` generate), and every lambda and closure of its code that exists now (found by ``gc``).
    Not the gates' own machinery, nor ``backward`` of an autograd ``Function``. Computed once per process."""
    if _PACKAGE_FUNCTIONS:
        return list(_PACKAGE_FUNCTIONS)
    import gc

    modules = package_modules()
    root = _package_dir() + os.sep
    found: dict = {}
    skip: dict = {}
    classes = [obj for m in modules for obj in vars(m).values() if isinstance(obj, type) and _ours(obj)]
    classes += [obj for obj in gc.get_objects() if issubclass(type(obj), type) and _ours(obj)]
    inside: dict = {}   # file name → whether it is one of the package's files

    def package_code(fn) -> bool:
        """Its code is the package's (or generated for it: dataclasses, NamedTuple): not a decorator's wrapper
        (``contextlib.contextmanager``'s, torch's), whose code is shared with every function it wraps."""
        filename = fn.__code__.co_filename
        if filename not in inside:
            inside[filename] = (os.path.realpath(filename).startswith(root) if filename.startswith(os.sep)
                                else filename.startswith("<string>"))
        return inside[filename]

    for cls in dict.fromkeys(classes):
        for fn in _class_functions(cls):
            if package_code(fn):
                (skip if _is_autograd_backward(cls, fn) else found).setdefault(id(fn), fn)
    for m in modules:
        for obj in vars(m).values():
            if isinstance(obj, types.FunctionType) and _ours(obj) and package_code(obj):
                found.setdefault(id(obj), obj)
    for obj in gc.get_objects():
        if type(obj) is types.FunctionType and id(obj) not in found and id(obj) not in skip:
            filename = obj.__code__.co_filename
            if filename.startswith(os.sep) and package_code(obj):
                found[id(obj)] = obj
    machinery = __name__
    functions = [fn for fn in found.values()
                 if not (fn.__module__ == machinery and "<locals>" in fn.__qualname__)
                 and fn.__code__.co_filename != _STUDENT_CALL and id(fn) not in skip]
    _PACKAGE_FUNCTIONS.extend(functions)
    return list(functions)


def resolve_allowed(names: Iterable[str]) -> list:
    """The functions an allow-list names: ``"capsule_lab.data.sources.load_mnist"`` → that function (a re-export's name
    works too); a class → its methods and those of the package's classes it inherits from. ``ValueError`` for a
    name that is not an object of ``capsule_lab``."""
    out = []
    for name in names:
        if not isinstance(name, str) or not name.startswith("capsule_lab."):
            raise ValueError(f"allowed: {name!r} is not a qualified name in capsule_lab (e.g. 'capsule_lab.squash')")
        parts = name.split(".")
        obj = None
        for k in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:k]))
            except ImportError:
                continue
            try:
                for attr in parts[k:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                raise ValueError(f"allowed: {name!r} does not exist in capsule_lab") from None
            break
        if isinstance(obj, type):
            for base in obj.__mro__:
                if _ours(base):
                    out += _class_functions(base)
        elif isinstance(obj, types.FunctionType):
            while isinstance(obj, types.FunctionType):   # a decorated function: the one it wraps
                out.append(obj)
                obj = getattr(obj, "__wrapped__", None)
        else:
            raise ValueError(f"allowed: {name!r} is neither a function nor a class of capsule_lab")
    return out


# ---------------------------------------------------------------- the gates

_TEMPLATES: dict = {}


def _gate_template(free: int):
    """A code object ``(*args, **kwargs) → CHECK(EVENT, KEY, box); box.pop()(*args, **kwargs)`` with ``free``
    free variables (so that it fits a closure's ``__code__``); CHECK, EVENT and KEY are placeholders among its
    constants. No local name holds the twin while it runs."""
    if free not in _TEMPLATES:
        names = [f"_free{k}" for k in range(free)]
        lines = ["def _outer():"]
        if names:
            lines.append(f"    {' = '.join(names)} = None")
        lines += ["    def gate(*args, **kwargs):",
                  "        box = []",
                  "        '__check__'('__event__', '__key__', box)",
                  "        return box.pop()(*args, **kwargs)"]
        if names:
            lines.append(f"        {', '.join(names)},")  # never run: only makes them free variables
        lines.append("    return gate")
        namespace: dict = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "'str' object is not callable": a placeholder
            exec(compile("\n".join(lines), "<gate>", "exec"), namespace)
        _TEMPLATES[free] = namespace["_outer"]().__code__
    return _TEMPLATES[free]


def _library_roots() -> tuple:
    roots = set()
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        paths = sysconfig.get_paths(vars={"base": prefix, "platbase": prefix, "installed_base": prefix,
                                          "installed_platbase": prefix})
        roots.update(os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    return tuple(sorted(roots))


def _where(path: str, root: str, library: tuple) -> str:
    """Where code of file ``path`` comes from, by its file name alone: ``"gate"``, ``"package"`` (a file under
    ``root``), ``"library"`` (torch, the standard library, frozen modules) or ``"other"`` (the student's cells,
    anything else)."""
    if path == "<gate>":
        return "gate"
    real = os.path.realpath(path) if path.startswith(os.sep) else path
    if real.startswith(root):
        return "package"
    if path.startswith("<frozen ") or real.startswith(library):
        return "library"
    return "other"


def refusing_caller(err: BaseException) -> str | None:
    """The name of the student's function that made the call ``err`` (an :class:`AnswerRefused`) refuses: the
    innermost frame of its traceback, below the refused function's own (or its gate's), whose code is neither the
    package's, the library's, a gate nor :data:`call_student` — or None."""
    root, library, name = _package_dir() + os.sep, _library_roots(), None
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:   # the last frame is the refused function's (or its gate's)
        code = tb.tb_frame.f_code
        if code.co_filename != _STUDENT_CALL and _where(code.co_filename, root, library) == "other":
            name = code.co_name
        tb = tb.tb_next
    return name if name and name.isidentifier() else None


def _grader_code(code, engine: str) -> bool:
    """Whether ``code`` is the grader's own: a file of the grading engine (``engine``), the task registry's data
    model (``grading/tasks/registry.py``: it calls nothing of the package), or a method ``dataclasses`` or
    ``NamedTuple`` generated (``<string>``: it only stores its fields)."""
    path = code.co_filename
    if path.startswith("<string>"):
        return True
    real = os.path.realpath(path)
    return real.startswith(engine) or real == os.path.join(os.path.dirname(os.path.dirname(engine)), "tasks",
                                                             "registry.py")


def _machinery(functions: list, sealed: bool = False):
    """The gates of ``functions`` and the state they share, all in closures: nothing of it is an attribute of a
    module. Returns ``(install, uninstall, allow, hook, state)``."""
    originals = [fn.__code__ for fn in functions]
    names = [qualified_name(fn) for fn in functions]
    index_of = {id(fn): k for k, fn in enumerate(functions)}
    root = _package_dir() + os.sep
    library = _library_roots()
    switch = allow_task.__code__
    package_codes: dict = {}

    def add(code):
        if id(code) not in package_codes:
            package_codes[id(code)] = code
            for const in code.co_consts:
                if isinstance(const, types.CodeType):
                    add(const)

    for code in originals:
        add(code)
    # sealed (the grader's evaluation process): the grader's own frames grant nothing but the grader's own code.
    # Its code calls the student's function and reads module globals the student's code can rebind (a
    # frameless callable such as ``operator.call`` or a ``functools.partial`` in their place would make the
    # grader the caller of a stand-in); so a function called from the grader's frames runs only if it is the
    # grader's too (its engine's, or a dataclass's generated method), whatever the student's code rebound.
    engine = os.path.join(root, "grading", "engine") + os.sep
    grader_keys = frozenset(k for k, code in enumerate(originals) if _grader_code(code, engine)) if sealed \
        else frozenset()
    kinds: dict = {}          # id(code) → (code, "package" | "grader" | "through" | "other")
    state = {"task": "", "allowed": frozenset(), "names": (), "twins": None, "trusted": 0, "sealed": False,
             "lists": {}, "saved": [], "tasks": {}, "on": False}

    def kind(code) -> str:
        entry = kinds.get(id(code))
        if entry is not None and entry[0] is code:
            return entry[1]
        # (the file-name part of :func:`_where`, written out: _where is a package function, so it has a gate,
        # which would ask this machinery again)
        path = code.co_filename
        real = os.path.realpath(path) if path.startswith(os.sep) else path
        if package_codes.get(id(code)) is code:
            result = "grader" if sealed and real.startswith(engine) else "package"
        elif path == "<gate>":
            result = "through" if id(code) in gate_ids else "other"
        elif real.startswith(root):
            result = "other"        # claims to be the package's, but is not its code
        elif path.startswith("<frozen ") or real.startswith(library):
            result = "through"      # torch, the standard library: the caller is further up
        else:
            result = "other"        # the student's (a notebook cell), or anything else
        kinds[id(code)] = (code, result)
        return result

    def decide(key: int, frame) -> None:
        """Return if ``frame`` (the caller of function ``key``) may call it, else raise AnswerRefused."""
        if key in state["allowed"]:
            return
        while frame is not None:
            found = kind(frame.f_code)
            if found == "package" or (found == "grader" and key in grader_keys):
                return
            if found != "through":
                break
            frame = frame.f_back
        what = ", ".join(state["names"]) or "nothing"
        raise AnswerRefused(f"{names[key]} is not available while {state['task']} is checked or graded: it may "
                            f"call {what} of capsule_lab ({REFUSAL})")

    def check(event: str, key: int, box: list) -> None:
        """The gate's question in the student's kernel (:func:`denied`): a plain call."""
        if not state["on"]:
            raise AnswerRefused(f"{names[key]}: its gate outlived the check")
        try:
            decide(key, sys._getframe(2))   # 0: check, 1: the gate, 2: whoever called the function
        finally:
            frame = None
        box.append(state["twins"][key])

    gates = []
    checker = sys.audit if sealed else check   # sealed: the question goes to the audit hook, out of reach
    for k, code in enumerate(originals):
        template = _gate_template(len(code.co_freevars))
        consts = tuple(checker if c == "__check__" else k if c == "__key__" else _GATE_EVENT if c == "__event__"
                       else c for c in template.co_consts)
        gates.append(template.replace(co_consts=consts, co_name=code.co_name, co_qualname=code.co_qualname,
                                      co_filename="<gate>", co_firstlineno=code.co_firstlineno))
    gate_ids = {id(g) for g in gates}

    def allow(task: str, allowed: tuple) -> None:
        key = (task, tuple(allowed))
        if key not in state["lists"]:
            state["lists"][key] = frozenset(index_of[id(fn)] for fn in resolve_allowed(allowed) if id(fn) in index_of)
        state["task"], state["allowed"], state["names"] = task, state["lists"][key], tuple(allowed)

    def install(answers=()) -> None:
        if state["twins"] is None:   # made once: the same code, globals, defaults and closure
            twins = []
            for fn, code in zip(functions, originals):
                twin = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
                twin.__kwdefaults__, twin.__qualname__ = fn.__kwdefaults__, fn.__qualname__
                twin.__module__ = fn.__module__
                twins.append(twin)
            state["twins"] = twins
        refusing = [(fn, refusing_code(fn)) for fn in answers]
        state["saved"] = [(fn, fn.__code__) for fn in answers if id(fn) not in index_of]
        state["on"] = True
        for fn, gate in zip(functions, gates):
            fn.__code__ = gate
        for fn, code in refusing:
            fn.__code__ = code

    def uninstall() -> None:
        for fn, code in zip(functions, originals):
            fn.__code__ = code
        for fn, code in state["saved"]:
            fn.__code__ = code
        state["on"], state["saved"] = False, []

    def trusted_frame(depth: int):
        state["trusted"] += 1
        try:
            frame = sys._getframe(depth + 1)
            return frame, frame.f_code
        finally:
            state["trusted"] -= 1

    def hook(event: str, args) -> None:
        if not state["sealed"] or state["trusted"]:
            return
        if event == _GATE_EVENT:
            gate, code = trusted_frame(1)            # the gate's frame raised the event
            if id(code) not in gate_ids or gates[args[0]] is not code:
                raise PermissionError("only the package's gates ask the grader")
            state["trusted"] += 1
            try:
                decide(args[0], gate.f_back)
            finally:
                state["trusted"] -= 1
                gate = None
            args[1].append(state["twins"][args[0]])
        elif event == "object.__getattr__" and len(args) > 1 and args[1] in _CODE_ATTRIBUTES:
            state["trusted"] += 1
            try:
                reader = kind(sys._getframe(1).f_code)
                value = getattr(args[0], args[1])
            finally:
                state["trusted"] -= 1
            # a frame's code only to the library (traceback reads it and hands out strings); the package's own
            # code objects (a running twin's, a closure made since) to nobody
            if reader == "other" if args[1] == "f_code" else package_codes.get(id(value), kinds) is value:
                raise PermissionError(f"the grader does not let your functions read {args[1]} while they are graded")
        elif event == "object.__setattr__" and len(args) > 1 and args[1] == "__code__":
            raise PermissionError("the grader does not let your functions replace a function's __code__")
        elif event == _SWITCH_EVENT:
            _, caller = trusted_frame(1)             # the frame that raised the event
            if caller is not switch or args[0] not in state["tasks"]:
                raise PermissionError("only the grader switches the task")
            allow(args[0], state["tasks"][args[0]])

    return install, uninstall, allow, hook, state


#: The student's function is called through this, never straight from the package's code: so the package
#: functions it calls, or that it *is* (``couplings = capsule_lab.….softmax``), see a caller that is not the
#: package's. Its code is not the package's (its file name says so).
call_student = eval(compile("lambda fn, *args, **kwargs: fn(*args, **kwargs)", _STUDENT_CALL, "eval"))

_CHECKING: list = []   # the machinery check() reuses: in the student's kernel, feedback only


@contextlib.contextmanager
def denied(task) -> Iterator[None]:
    """Within the ``with`` block, ``task``'s answers (``task.refused``) raise :class:`AnswerRefused`, and so does
    every other function of the package called from outside the package unless ``task.allowed`` names it; every
    code is put back on leaving the block, also after an exception or an interrupt. The gates are built once per
    process (the first call imports the whole package); each use swaps ``__code__`` twice on every function."""
    answers = plain_functions(task.refused)
    if not _CHECKING:
        _CHECKING.append(_machinery(package_functions()))
    install, uninstall, allow, _, _ = _CHECKING[0]
    allow(f"task {task.id}", tuple(task.allowed))
    try:
        install(answers)
        yield
    finally:
        uninstall()


def deny_for_good(answers: Iterable[Callable], allow_lists: dict, first: str) -> list[str]:
    """For the rest of the process: ``answers`` are refused for good (:func:`~.refusal.refuse_for_good`, no copy of
    their code kept) and every other function of the package is gated, its allow-list ``allow_lists[first]`` until
    :func:`allow_task` switches to another key of ``allow_lists`` (``{"task 01.squash": ("capsule_lab.…", …)}``;
    the key is what a refusal's message names). Installs an audit hook, which cannot be removed: the gates ask it
    (an audit event) whether their function may run, and it refuses from now on to hand out the package's code
    objects (a frame's ``f_code`` to code that is neither the package's nor the library's; a function's,
    generator's or coroutine's code to anyone, when it is the package's) and to assign ``__code__``. Returns
    the qualified names of the answers refused."""
    answers = plain_functions(answers)
    names = refuse_for_good(answers)
    functions = [fn for fn in package_functions() if all(fn is not a for a in answers)]
    install, _, allow, hook, state = _machinery(functions, sealed=True)
    state["tasks"] = {str(k): tuple(v) for k, v in allow_lists.items()}
    allow(first, state["tasks"][first])
    install()
    state["sealed"] = True
    sys.addaudithook(hook)
    return names


def allow_task(key: str) -> None:
    """After :func:`deny_for_good`: the student's code may now call what ``allow_lists[key]`` names. Only this
    function switches (the audit hook checks that the event comes from its code)."""
    sys.audit(_SWITCH_EVENT, key)
