"""``eval_mode``: run a model in evaluation mode and give it back in the mode it was in.

Used wherever the course evaluates, decodes or measures a model mid-training (chapters 02–04): dropout and
batch-norm behave as at test time inside the block, and the caller's ``model.training`` is restored on exit,
also when the block raises. Re-exported from :mod:`capsule_lab.training`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

__all__ = ["eval_mode"]


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``with eval_mode(model): ...`` — ``model.eval()`` inside, ``model.train(previous)`` after. Chapter 02.

    Only the top module's flag is saved: every submodule comes back in that mode, as with ``model.train()``.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"eval_mode needs a torch.nn.Module, got {type(model).__name__}")
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
