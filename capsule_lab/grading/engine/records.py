"""One case's result, in memory and as plain data: what running a function on a task's case gives
(:class:`Evaluation`), and its form for ``torch.save`` (:func:`to_record`, :func:`from_record`). Exercises 01–08.

The same result is made in one process and read in another: the grader's evaluation child turns the student's
function into results that travel to the grader as files, and the reference cache keeps the reference's results
(and those of a task's known mistakes) on disk for the next process. Both write plain data only — dicts, lists,
str, bool and plain CPU tensors, read back with ``torch.load(weights_only=True)`` — and both read it back through
:func:`from_record`, which checks every field, since neither file is trusted: the child's is the student's code's,
the cache's may be damaged or foreign.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..tasks.registry import Task

__all__ = ["Evaluation", "to_record", "from_record"]


@dataclass
class Evaluation:
    """What running a function on one case gave: its outputs (detached) and, where gradients were taken, the
    gradients with respect to the case's floating inputs (``None`` entries: not reached); ``differentiable``: every
    output that should carry a gradient does; or an ``error`` with its ``kind`` (``"wrong"``: not the right
    structure, ``"error"``: it raised, ``"refused"``: it called what the task refuses)."""

    outputs: tuple | None = None
    grads: tuple | None = None
    differentiable: bool = True
    error: str | None = None
    kind: str | None = None


def to_record(ev: Evaluation) -> dict:
    """A result as plain data (dicts, lists, str, bool and plain CPU tensors), for ``torch.save``."""
    def plain(t):
        return None if t is None else t.detach().as_subclass(torch.Tensor).to("cpu").contiguous().clone()

    return {"outputs": None if ev.outputs is None else [plain(t) for t in ev.outputs],
            "grads": None if ev.grads is None else [plain(t) for t in ev.grads],
            "differentiable": bool(ev.differentiable), "error": ev.error, "kind": ev.kind}


def from_record(record, task: Task) -> Evaluation:
    """The inverse of :func:`to_record` for a result of ``task`` (as many outputs as it has), checking every field:
    ``ValueError`` for anything malformed."""
    def tensor(t, what):
        if type(t) is not torch.Tensor or t.layout != torch.strided or t.device.type != "cpu" or t.requires_grad:
            raise ValueError(f"{what} is not a plain CPU tensor")
        return t

    if not isinstance(record, dict) or set(record) != {"outputs", "grads", "differentiable", "error", "kind"}:
        raise ValueError("malformed result")
    error, kind = record["error"], record["kind"]
    if not (error is None or isinstance(error, str)) or kind not in (None, "wrong", "error", "refused"):
        raise ValueError("malformed error")
    if not isinstance(record["differentiable"], bool):
        raise ValueError("malformed flag")
    outputs, grads = record["outputs"], record["grads"]
    if outputs is not None:
        if not isinstance(outputs, list) or len(outputs) != len(task.outputs):
            raise ValueError("wrong number of outputs")
        outputs = tuple(tensor(t, "an output") for t in outputs)
    if grads is not None:
        if not isinstance(grads, list):
            raise ValueError("malformed gradients")
        grads = tuple(None if t is None else tensor(t, "a gradient") for t in grads)
    if error is None and outputs is None:
        raise ValueError("neither outputs nor an error")
    return Evaluation(outputs=outputs, grads=grads, differentiable=record["differentiable"],
                      error=error[:2000] if error else error, kind=kind)
