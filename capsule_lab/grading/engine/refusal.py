"""Refusing the answer: a package function whose code is replaced by one that raises :class:`AnswerRefused`.
Exercises 01–08.

An exercise asks the student to write, say, dynamic routing; the package already holds it
(``capsule_lab.routing.dynamic_routing``). While the student's function for a task is checked or graded, the task's
*answers* — its reference and the functions listed in ``answers``
(:class:`~capsule_lab.grading.tasks.registry.Task`) — raise :class:`AnswerRefused` ("this task asks for your own
implementation") however they are reached, even from inside the package. That works because it is the function's
*code* that is replaced (``f.__code__``), not a name: every alias — a module attribute, ``from … import f as _ref``,
a re-export, a bound method — shares the one function object.

:func:`refused` does it for the duration of a ``with`` block and puts every code back; :func:`refuse_for_good` for the
rest of the process, keeping no copy of the original code (the grader's evaluation child). Every *other* function of
the package is gated by :mod:`.lock` (deny by default), which builds on this.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator

__all__ = ["AnswerRefused", "REFUSAL", "qualified_name", "refusing_code", "plain_functions", "refused",
           "refuse_for_good"]

#: The message an answer function raises while it is refused (followed by its name).
REFUSAL = "this task asks for your own implementation"

_EXCEPTION_GLOBAL = "__capsule_lab_answer_refused__"


class AnswerRefused(RuntimeError):
    """Raised by a package function while it is the answer of the task being checked or graded, or, while
    the student's function runs, by any package function the task does not allow."""


def qualified_name(fn: Callable) -> str:
    """``module.qualname`` of a function (``capsule_lab.routing.dynamic_routing``), for messages."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


def refusing_code(fn: Callable):
    """A code object that raises AnswerRefused naming ``fn``, with ``fn``'s name; fits ``fn.__code__``."""
    if not hasattr(fn, "__code__") or not hasattr(fn, "__globals__"):
        raise ValueError(f"can only refuse plain Python functions, got {fn!r}")
    if fn.__code__.co_freevars:
        raise ValueError(f"cannot refuse {qualified_name(fn)}: it is a closure")
    name = fn.__code__.co_name
    if not name.isidentifier():  # a lambda
        name = "refused_answer"
    message = f"{REFUSAL}: {qualified_name(fn)} is not available while this task is checked or graded"
    source = f"def {name}(*args, **kwargs):\n    raise {_EXCEPTION_GLOBAL}({message!r})\n"
    namespace: dict = {}
    exec(compile(source, fn.__code__.co_filename, "exec"), namespace)
    # the exception class is looked up in the function's own module globals
    fn.__globals__.setdefault(_EXCEPTION_GLOBAL, AnswerRefused)
    code = namespace[name].__code__
    namespace.clear()   # the throwaway function and its namespace form a cycle: gone now, not at the next gc
    return code


def plain_functions(functions: Iterable[Callable]) -> list:
    """``functions`` without repeats, in order; ``ValueError`` for anything that is not a plain Python function."""
    fns = list(dict.fromkeys(functions))
    for fn in fns:
        if not callable(fn) or not hasattr(fn, "__code__"):
            raise ValueError(f"can only refuse plain Python functions, got {fn!r}")
    return fns


@contextlib.contextmanager
def refused(functions: Iterable[Callable]) -> Iterator[None]:
    """Within the ``with`` block, every function in ``functions`` raises :class:`AnswerRefused`.

    The original code is restored on leaving the block, also after an exception or an interrupt.
    Raises ``ValueError`` for something that is not a plain Python function (or is a closure).
    """
    fns = plain_functions(functions)
    replacements = [(fn, fn.__code__, refusing_code(fn)) for fn in fns]
    try:
        for fn, _, code in replacements:
            fn.__code__ = code
        yield
    finally:
        for fn, original, _ in replacements:
            fn.__code__ = original


def refuse_for_good(functions: Iterable[Callable]) -> list[str]:
    """Make every function in ``functions`` raise :class:`AnswerRefused` for the rest of the process.

    Keeps no reference to the original code. Returns the qualified names refused (for the report).
    Raises ``ValueError`` as :func:`refused` does.
    """
    fns = plain_functions(functions)
    codes = [refusing_code(fn) for fn in fns]
    for fn, code in zip(fns, codes):
        fn.__code__ = code
    return [qualified_name(fn) for fn in fns]
