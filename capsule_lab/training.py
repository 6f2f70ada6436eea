"""Training and evaluation: one loop for every capsule network in the course, CPU or GPU.

Taught in chapter 02. A model takes ``model(images, targets)`` while training (the decoder needs the
target) and ``model(images)`` to predict, and returns an output with ``.scores`` ``(B, J)``; the class
is the highest score (the longest class capsule). The loss is ``loss_fn(output, images, targets)``, by default the
model's own (``model.loss``, :class:`~capsule_lab.models.CapsuleNetwork`). Mixed precision is used only on CUDA, so the
same call runs on a laptop: autocast to bfloat16 where the GPU computes it natively, to float16 with gradient scaling
on an older GPU such as free Colab's T4 (:func:`amp_dtype`).

One of each: :func:`train_step` is the one training step (:func:`fit` and the benches take it), and
:func:`outputs` is the one pass of a trained model over a dataset (evaluation mode, no gradient, batches, the
device, the run's precision) from which every measure — :func:`evaluate`'s accuracy and the studies' couplings,
capsules and parse trees — is a reduction.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch
from torch.nn.utils import prune
from torch.utils.data import DataLoader, Dataset, TensorDataset
from tqdm.auto import tqdm

from ._checks import check_one_of, check_positive_int
from .data.transforms import random_shift

__all__ = ["OPTIMIZERS", "Schedule", "History", "batches", "amp_dtype", "precision", "grad_scaler", "mixed_precision",
           "train_step", "outputs", "evaluate", "fit", "fit_profile", "save_checkpoint", "load_checkpoint"]


#: The optimisers :func:`fit` accepts (chapter 04 compares them on dying capsules).
OPTIMIZERS = ("adam", "sgd")


@dataclass(frozen=True)
class Schedule:
    """How :func:`fit` trains: ``epochs`` epochs of batches of ``batch_size``, Adam (or SGD with ``momentum``) from
    ``lr`` decayed by ``lr_decay`` per epoch, training images shifted by up to ``max_shift`` pixels.

    Every chapter's settings hold one (:mod:`capsule_lab.course.profiles`); ``fit(model, train,
    **schedule.fit_options())`` trains with it. Chapter 02.
    """

    epochs: int
    batch_size: int
    lr: float
    lr_decay: float = 1.0
    max_shift: int = 0
    optimizer: str = "adam"
    momentum: float = 0.0

    def __post_init__(self):
        _check_schedule(self.epochs, self.batch_size, self.lr, self.lr_decay, self.max_shift, self.optimizer,
                        self.momentum)

    def fit_options(self) -> dict:
        """The schedule as :func:`fit`'s keyword arguments."""
        return asdict(self)


def _check_schedule(epochs, batch_size, lr, lr_decay, max_shift, optimizer, momentum) -> None:
    for value, name, minimum in ((epochs, "epochs", 0), (batch_size, "batch_size", 1), (max_shift, "max_shift", 0)):
        check_positive_int(value, name, minimum)
    for value, name in ((lr, "lr"), (lr_decay, "lr_decay")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a number > 0, got {value!r}")
    check_one_of(optimizer, tuple(OPTIMIZERS), "optimizer")
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum < 1:
        raise ValueError(f"momentum must be a number in [0, 1), got {momentum!r}")
    if optimizer == "adam" and momentum != 0:
        raise ValueError(f"momentum must be 0 with optimizer='adam' (it is SGD's), got {momentum!r}")


@dataclass
class History:
    """Per-epoch record of a training run. Chapter 02."""

    epoch: list = field(default_factory=list)
    train_loss: list = field(default_factory=list)
    train_accuracy: list = field(default_factory=list)
    test_accuracy: list = field(default_factory=list)
    lr: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    #: What ``fit``'s ``on_epoch_end`` returned after each epoch (None where it returned nothing): a measurement taken
    #: as the model trains, kept with the history so that a run resumed or loaded from its checkpoint still has it.
    epoch_end: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "History":
        return cls(**{k: list(v) for k, v in d.items()})


def batches(data: Dataset, batch_size: int, shuffle: bool = False,
            generator: torch.Generator | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ``(images, labels)`` batches: sliced directly from a ``TensorDataset``, else via a ``DataLoader``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if isinstance(data, TensorDataset):
        images, labels = data.tensors[:2]
        n = len(labels)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        for i in range(0, n, batch_size):
            idx = order[i:i + batch_size]
            yield images[idx], labels[idx]
    else:
        yield from DataLoader(data, batch_size=batch_size, shuffle=shuffle, generator=generator)


def amp_dtype(device) -> Optional[torch.dtype]:
    """The half-precision type mixed precision computes in on ``device``: bfloat16 on a GPU that computes it natively
    (CUDA compute capability 8.0 and above: A100, L4, A10, H100, RTX 30xx/40xx), float16 on an older one (the T4 of
    free Colab, V100, P100: 7.x and below, where bfloat16 is only emulated and slow; float16's narrow range needs a
    gradient scaler, :func:`grad_scaler`), None on a CPU (float32: autocast stays off). Chapter 02.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return None
    major, _ = torch.cuda.get_device_capability(device)
    return torch.bfloat16 if major >= 8 else torch.float16


def precision(device, amp: bool) -> str:
    """What a run on ``device`` with ``amp`` computes in, in words, for the line a chapter prints before it trains:
    ``"float32"``, ``"mixed precision (bfloat16)"`` or ``"mixed precision (float16, gradient scaling)"``
    (:func:`amp_dtype`). Chapter 02."""
    dtype = amp_dtype(device) if amp else None
    if dtype is None:
        return "float32"
    return "mixed precision (bfloat16)" if dtype == torch.bfloat16 else "mixed precision (float16, gradient scaling)"


def grad_scaler(device, amp: bool) -> torch.amp.GradScaler:
    """The gradient scaler :func:`train_step` steps through: enabled only where mixed precision computes in float16
    (:func:`amp_dtype`; bfloat16 has float32's range and needs none), a no-op elsewhere. Chapter 02."""
    return torch.amp.GradScaler("cuda", enabled=bool(amp) and amp_dtype(device) == torch.float16)


def mixed_precision(device: torch.device, amp: bool):
    """The autocast context :func:`fit` trains in: mixed precision in :func:`amp_dtype` (bfloat16 where the GPU
    computes it natively, else float16) when ``amp`` on CUDA, disabled otherwise. Chapter 02."""
    dtype = amp_dtype(device) if amp else None
    if dtype is not None:
        return torch.autocast("cuda", dtype=dtype)
    return torch.autocast(torch.device(device).type, enabled=False)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
               images: torch.Tensor, labels: torch.Tensor, loss_fn: Callable, amp: bool = False) -> tuple:
    """One training step on one batch: the forward pass and ``loss_fn(output, images, labels)`` (in mixed precision
    with ``amp`` on CUDA, :func:`mixed_precision`), the backward pass through the gradient ``scaler``, the
    optimiser's step. ``images`` and ``labels`` are on the model's device. Returns ``(loss, output)``.

    :func:`fit` takes it for every batch, the benches to time one step (:mod:`capsule_lab.measures.cost`). Chapter 02.
    """
    with mixed_precision(images.device, amp):
        out = model(images, labels)
        loss = loss_fn(out, images, labels)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss, out


@torch.no_grad()
def outputs(model: torch.nn.Module, data: Dataset, batch_size: int = 500, device=None,
            amp: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor, Any]]:
    """Yield ``(images, labels, output)`` for every batch of ``data``, in order: the model in evaluation mode
    (until the iteration ends), without gradients, on ``device`` (default: the model's), in mixed precision with
    ``amp`` on CUDA. Images and labels are on the device. Every measure of a trained model is a reduction of
    this pass (:func:`evaluate` is the accuracy). Chapter 02.
    """
    device = torch.device(device or next(model.parameters()).device)
    with eval_mode(model):
        for x, y in batches(data, batch_size):
            x, y = x.to(device), y.to(device)
            with mixed_precision(device, amp):
                out = model(x)
            yield x, y, out


def evaluate(model: torch.nn.Module, data: Dataset, batch_size: int = 500, device=None, amp: bool = False) -> float:
    """Accuracy (in [0, 1]) of the highest class score on ``data`` (a reduction of :func:`outputs`). Chapter 02."""
    correct = total = 0
    for _, y, out in outputs(model, data, batch_size, device, amp):
        correct += (out.scores.argmax(dim=1) == y).sum().item()
        total += len(y)
    if total == 0:
        raise ValueError("cannot evaluate on an empty dataset")
    return correct / total


def fit(
    model: torch.nn.Module,
    train: Dataset,
    test: Dataset | None = None,
    *,
    epochs: int = 1,
    batch_size: int = 128,
    lr: float = 1e-3,
    lr_decay: float = 0.9,
    optimizer: str = "adam",
    momentum: float = 0.0,
    max_shift: int = 0,
    device=None,
    amp: bool = False,
    seed: int = 0,
    loss_fn: Callable | None = None,
    checkpoint: str | Path | None = None,
    progress: bool = True,
    on_epoch_end: Callable[[int, torch.nn.Module], None] | None = None,
) -> History:
    """Train ``model`` with Adam (or SGD) and a per-epoch exponential learning-rate decay; return its :class:`History`.

    Args:
        train, test: datasets of ``(image, label)``; ``test`` is evaluated after every epoch.
        epochs, batch_size, lr, lr_decay: the optimiser with ``ExponentialLR(lr_decay)`` stepped once per epoch.
        optimizer: ``"adam"`` (the default; it divides each step by a running estimate of the gradient's size,
            so a tiny but non-zero gradient still moves a weight at the full learning rate) or ``"sgd"``
            (``w ← w − lr·g``, or with ``momentum`` μ > 0 the heavy-ball ``m ← μ·m + g, w ← w − lr·m``: a tiny
            gradient makes a tiny step). Chapter 04 compares them on dying capsules.
        momentum: SGD's momentum μ in [0, 1); must be 0 with Adam.
        max_shift: random translation of training images in pixels (Sabour: 2; 0 turns it off).
        device: "cpu", "cuda", ...; default: the model's device. ``amp`` uses mixed precision on CUDA only.
        seed: seeds the shuffling and the shifts (the model's initialisation is the caller's).
        loss_fn: ``loss_fn(output, images, targets)``; default: the model's own, ``model.loss``.
        checkpoint: if given, the run's whole state — the model, the optimiser, the learning-rate schedule, the
            gradient scaler, the shuffling generator and the history — is saved there after every epoch (written to
            a temporary file, then renamed, so a disconnect mid-write leaves the last good one), and a run started
            again with the same path *resumes*: it loads that state and trains the epochs still to do, to the same
            weights as a run never interrupted; a run already finished loads and returns at once. The checkpoint
            must come from the same settings (all but ``epochs``, which may grow), else ``ValueError``.
            ``on_epoch_end`` is called only for the epochs trained in this call; what it returned for the earlier
            ones comes back with the saved history (``History.epoch_end``).
        progress: show a tqdm progress bar.
        on_epoch_end: called as ``on_epoch_end(epoch, model)`` after every epoch (after the evaluation),
            e.g. to measure something about the model as it trains (chapter 03 measures gradients); what it returns
            is appended to ``History.epoch_end`` and saved with a checkpoint (keep it to numbers, strings, tensors,
            lists and dicts of them: a checkpoint loads nothing else).

    Chapter 02 (the SGD option: chapter 04).
    """
    _check_schedule(epochs, batch_size, lr, lr_decay, max_shift, optimizer, momentum)
    if loss_fn is None and not callable(getattr(model, "loss", None)):
        raise ValueError(f"loss_fn is needed: {type(model).__name__} has no loss of its own (model.loss)")
    loss_fn = loss_fn if loss_fn is not None else model.loss
    device = torch.device(device or next(model.parameters()).device)
    model.to(device).train()
    optimizer = (torch.optim.Adam(model.parameters(), lr=lr) if optimizer == "adam"
                 else torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum))
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=lr_decay)
    scaler = grad_scaler(device, amp)
    generator = torch.Generator().manual_seed(seed)
    history = History()
    run = {"batch_size": batch_size, "lr": lr, "lr_decay": lr_decay, "optimizer": type(optimizer).__name__,
           "momentum": momentum, "max_shift": max_shift, "seed": seed, "train_size": len(train)}
    done = 0
    if checkpoint is not None and Path(checkpoint).exists():
        done, history = _resume(checkpoint, run, model, optimizer, scheduler, scaler, generator, device)
    steps = -(-len(train) // batch_size)
    for epoch in range(done + 1, epochs + 1):
        start, total_loss, correct, seen = time.perf_counter(), 0.0, 0, 0
        bar = tqdm(batches(train, batch_size, shuffle=True, generator=generator), total=steps,
                   desc=f"epoch {epoch}/{epochs}", disable=not progress, leave=False)
        for x, y in bar:
            x = random_shift(x, max_shift, generator=generator) if max_shift else x
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss, out = train_step(model, optimizer, scaler, x, y, loss_fn, amp)
            total_loss += loss.item() * len(y)
            correct += (out.scores.detach().argmax(dim=1) == y).sum().item()
            seen += len(y)
            bar.set_postfix(loss=f"{total_loss / seen:.4f}")
        history.epoch.append(epoch)
        history.lr.append(optimizer.param_groups[0]["lr"])
        scheduler.step()
        history.train_loss.append(total_loss / max(seen, 1))
        history.train_accuracy.append(correct / max(seen, 1))
        history.seconds.append(time.perf_counter() - start)
        if test is not None:
            history.test_accuracy.append(evaluate(model, test, device=device, amp=amp))
        history.epoch_end.append(on_epoch_end(epoch, model) if on_epoch_end is not None else None)
        model.train()
        if checkpoint is not None:
            save_checkpoint(checkpoint, model, optimizer, history, resume={
                "run": run, "epoch": epoch, "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                "generator": generator.get_state()})
    return history


def fit_profile(model: torch.nn.Module, train: Dataset, test: Dataset | None, profile, **overrides) -> History:
    """:func:`fit` with a profile's :class:`Schedule`, device and precision (``overrides``: any of fit's keywords).
    Chapter 02."""
    settings = dict(**profile.schedule.fit_options(), device=profile.device, amp=profile.amp)
    settings.update(overrides)
    return fit(model, train, test, **settings)


def save_checkpoint(path: str | Path, model: torch.nn.Module, optimizer=None, history: History | None = None,
                    resume: dict | None = None) -> None:
    """Save the model's (and optimiser's) state and the history, loadable with ``weights_only=True``; ``resume`` is
    what :func:`fit` adds to pick a run up where it stopped (its settings, the epoch, the schedule's, the scaler's and
    the shuffling generator's states). Written to a temporary file beside ``path`` and renamed over it, so an
    interrupted write never leaves a broken checkpoint. Chapter 02."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    torch.save({
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "history": history.to_dict() if history is not None else None,
        "resume": resume,
    }, partial)
    os.replace(partial, path)


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer=None, map_location="cpu") -> History | None:
    """Load a checkpoint written by :func:`save_checkpoint` (safely: ``weights_only=True``); return its history.
    Chapter 02."""
    return _load_state(torch.load(path, map_location=map_location, weights_only=True), model, optimizer)


def _restore_pruning(model: torch.nn.Module, state: dict) -> None:
    """Give ``model`` the reparametrisation :mod:`torch.nn.utils.prune` leaves in a pruned network's state dict
    (``weight_orig`` and ``weight_mask`` for ``weight``) wherever ``state`` has it and ``model`` has not, so that a
    network pruned while it trained (chapters 05 and 08) loads into a fresh copy; the masks come from ``state``."""
    for module_name, module in model.named_modules():
        prefix = f"{module_name}." if module_name else ""
        for name, _ in list(module.named_parameters(recurse=False)):
            if f"{prefix}{name}_orig" in state and f"{prefix}{name}_mask" in state:
                prune.identity(module, name)


def _load_state(blob: dict, model: torch.nn.Module, optimizer=None) -> History | None:
    """A checkpoint's model (and optimiser) state loaded into ``model`` (and ``optimizer``); its history."""
    _restore_pruning(model, blob["model"])
    model.load_state_dict(blob["model"])
    if optimizer is not None and blob.get("optimizer") is not None:
        optimizer.load_state_dict(blob["optimizer"])
    return History.from_dict(blob["history"]) if blob.get("history") is not None else None


def _resume(path, run: dict, model, optimizer, scheduler, scaler, generator, device) -> tuple[int, History]:
    """Load :func:`fit`'s checkpoint at ``path`` into the run's objects: ``(epochs done, history)``."""
    blob = torch.load(path, map_location=device, weights_only=True)
    saved = blob.get("resume")
    if not isinstance(saved, dict) or blob.get("history") is None:
        raise ValueError(f"{path} is not a checkpoint fit can resume (saved without its run's state): "
                         "delete it or pass another checkpoint path")
    if saved["run"] != run:
        differs = sorted(k for k in run if saved["run"].get(k) != run[k])
        raise ValueError(f"{path} was saved by a run with other settings ({', '.join(differs)}: "
                         f"{ {k: saved['run'].get(k) for k in differs} } there, { {k: run[k] for k in differs} } "
                         "here): delete it or pass another checkpoint path")
    history = _load_state(blob, model, optimizer)
    scheduler.load_state_dict(saved["scheduler"])
    if saved["scaler"] and scaler.is_enabled():         # a CPU's or a bfloat16 run's scaler saved nothing to load
        scaler.load_state_dict(saved["scaler"])
    generator.set_state(saved["generator"].cpu())
    return int(saved["epoch"]), history


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``with eval_mode(model): ...`` — ``model.eval()`` inside, ``model.train(previous)`` after: a model evaluated,
    decoded or measured mid-training (chapters 02–04) has dropout and batch norm as at test time inside the block and
    comes back in the mode it was in, also when the block raises. Only the top module's flag is saved: every
    submodule comes back in that mode, as with ``model.train()``. Chapter 02.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"eval_mode needs a torch.nn.Module, got {type(model).__name__}")
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
