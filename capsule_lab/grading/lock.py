"""Refusing the answer: the package functions that compute a task's answer raise while the student's runs.

Used by every chapter's graded exercise (chapters 01–07). An exercise asks the student to write, say,
dynamic routing; the package already holds it (``capsule_lab.routing.dynamic_routing``). So while the
student's function for a task runs, the task's reference and the functions listed in its ``answers``
(:class:`~capsule_lab.grading.tasks.Task`) raise :class:`AnswerRefused` ("this task asks for your own
implementation") however they are reached: as a module attribute, through ``from … import f as _ref``,
a re-export (``capsule_lab.squash``), a method or another package function that calls them, or any other
reference to the same function object. That works because it is the function's *code* that is replaced
(``f.__code__``), not a name: every alias shares the one function object.

Two uses:

- :func:`refused` (a context manager): for the duration only, then the code is put back.
  :func:`~capsule_lab.grading.checking.check` uses it, so the in-notebook feedback says "refused" too.
- :func:`refuse_for_good`: for the rest of the process, with no copy of the original code kept anywhere
  in it. The grader's evaluation process (:mod:`capsule_lab.grading.child`) calls it before any student
  code runs, so that a function copied or called ahead of time (``types.FunctionType(f.__code__, …)``, a
  table of answers computed while the notebook's cells load) gets nothing either.

What it cannot stop: a student who copies the reference's *source* into the notebook. That is plagiarism,
for the instructor to judge; it is not something code can tell from an honest answer.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator

__all__ = ["AnswerRefused", "REFUSAL", "refused", "refuse_for_good", "qualified_name"]

#: The message an answer function raises while it is refused (followed by its name).
REFUSAL = "this task asks for your own implementation"

_EXCEPTION_GLOBAL = "__capsule_lab_answer_refused__"


class AnswerRefused(RuntimeError):
    """Raised by a package function while it is the answer of the task being checked or graded."""


def qualified_name(fn: Callable) -> str:
    """``module.qualname`` of a function (``capsule_lab.routing.dynamic_routing``), for messages."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


def _refusing_code(fn: Callable):
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
    return namespace[name].__code__


def _functions(functions: Iterable[Callable]) -> list:
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
    fns = _functions(functions)
    replacements = [(fn, fn.__code__, _refusing_code(fn)) for fn in fns]
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
    fns = _functions(functions)
    codes = [_refusing_code(fn) for fn in fns]
    for fn, code in zip(fns, codes):
        fn.__code__ = code
    return [qualified_name(fn) for fn in fns]
