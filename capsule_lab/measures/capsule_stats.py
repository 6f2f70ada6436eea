"""Diagnostics of deep capsule networks: capsule activation, dead capsules, routing dynamics, gradient starvation.

Taught in chapter 04 (``chapters/04_dead_capsules.ipynb``), after Mitterreiter et al., "Why Capsule Neural
Networks Do Not Scale" (AAAI 2023), §4.1–4.3. For one capsule layer with n capsules and k input images:

    norms   ‖u_(i,j,:)‖       (k, n)        image i, capsule j
    cns  = 1/k Σ_i Σ_j ‖u_(i,j,:)‖           capsule norm sum            cnm = cns / n   (norm mean)
    cas  = 1/k Σ_i Σ_j 1[‖u_(i,j,:)‖ ≥ ε]    sum of active capsules      car = cas / n   (active rate)
    cds  = Σ_j 1[μ_j ≤ ε₁ and σ_j ≤ ε₂]      sum of dead capsules        cdr = cds / n   (dead rate)

with μ_j and σ_j the mean and standard deviation (ddof 0) of capsule j's norm over the k images. For the
couplings ``c`` ``(k, I, n)`` from a layer of I capsules to the n capsules above it:

    dyr(u_i) = 1/n Σ_j std_k(c_(·,i,j)) / std(pr_n),   std(pr_n) = √((1 − 1/n)/n),   dys(u_i) = n · dyr(u_i)

averaged over the I lower capsules (a *perfect* routing pr_n sends each image to exactly one capsule, every
capsule equally often: its dyr is 1). The paper states no thresholds ε, ε₁, ε₂; the defaults here are the
ones chapter 04 justifies, and every function takes them as arguments.

Besides the metrics: :func:`collect_capsules` runs a trained network over a dataset and keeps every
layer's capsule norms and couplings; :func:`layer_table` turns that into the per-layer rows of the paper's
Tables 1 and 2; :func:`activation_correlation` is the paper's Figure 4 measure; :class:`GradientTracker`
records per-capsule gradient norms (capsule activations and transformation matrices) with torch hooks
while a network trains (Theorem 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from .._checks import check_nonnegative, check_tensor
from ..training import outputs

__all__ = ["ACTIVE_EPS", "DEAD_MEAN_EPS", "DEAD_STD_EPS", "active_mask", "dead_mask", "activation_stats",
           "perfect_routing_std", "routing_dynamics_per_capsule", "routing_dynamics", "activation_correlation",
           "CapsuleRecord", "collect_capsules", "layer_table", "GradientTracker", "mean_and_sd"]

#: The activity threshold ε — a capsule is *active* on an image when its length is at least m⁻ = 0.1, the
#: length below which the margin loss calls a class capsule absent (chapter 04, "thresholds").
ACTIVE_EPS = 0.1
#: The dead thresholds ε₁ (this one, on the mean) and ε₂ (on the standard deviation) — a capsule is *dead*
#: when the mean and the standard deviation of its length over the images are both at most 0.01, a tenth
#: of ε, so it is (almost) never active and carries (almost) no signal.
DEAD_MEAN_EPS = 0.01
#: The dead threshold ε₂ on the standard deviation of a capsule's length (see :data:`DEAD_MEAN_EPS`).
DEAD_STD_EPS = 0.01


# ------------------------------------------------------------------------------------------ input checks

def _as_tensor(x, name: str, ndim: int, shape: str) -> torch.Tensor:
    """``x`` (tensor or array) as a float64 CPU tensor of ``ndim`` dimensions, none of them empty."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a tensor or array of shape {shape}, got {type(x).__name__}")
    check_tensor(x, name, shape, ndim=ndim, nonempty=True)
    if x.dtype == torch.bool or not (x.is_floating_point() or x.dtype in (torch.int32, torch.int64)):
        raise ValueError(f"{name} must hold real numbers, shape {shape}, got dtype {x.dtype}")
    x = x.detach().to("cpu", torch.float64)
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} must be finite, shape {shape}")
    return x


def _check_eps(**eps) -> None:
    for name, value in eps.items():
        check_nonnegative(value, name)


# ------------------------------------------------------------------------------------------ activation

def active_mask(norms, active_eps: float = ACTIVE_EPS) -> torch.Tensor:
    """1_active: ``(k, n)`` bool, True where capsule j is active on image i, ``‖u_(i,j,:)‖ ≥ ε``.

    norms ``(k images, n capsules)``. Chapter 04.
    """
    _check_eps(active_eps=active_eps)
    return _as_tensor(norms, "norms", 2, "(K images, n capsules)") >= active_eps


def dead_mask(norms, dead_mean_eps: float = DEAD_MEAN_EPS, dead_std_eps: float = DEAD_STD_EPS) -> torch.Tensor:
    """1_dead: ``(n,)`` bool, True for a capsule whose norm has mean ≤ ε₁ and standard deviation ≤ ε₂ over the
    k images (ddof 0).

    norms ``(k images, n capsules)``. Chapter 04.
    """
    _check_eps(dead_mean_eps=dead_mean_eps, dead_std_eps=dead_std_eps)
    x = _as_tensor(norms, "norms", 2, "(K images, n capsules)")
    return (x.mean(dim=0) <= dead_mean_eps) & (x.std(dim=0, correction=0) <= dead_std_eps)


def activation_stats(norms, active_eps: float = ACTIVE_EPS, dead_mean_eps: float = DEAD_MEAN_EPS,
                     dead_std_eps: float = DEAD_STD_EPS) -> dict:
    """Mitterreiter et al.'s capsule activation statistics of one layer (their §4.3 and Table 2).

    Args:
        norms: ``(K images, n capsules)`` capsule lengths ‖u_(i,j,:)‖ (tensor or array).
        active_eps: ε, a capsule is active on an image when its length is ≥ ε.
        dead_mean_eps, dead_std_eps: ε₁, ε₂, a capsule is dead when the mean of its length over the images
            is ≤ ε₁ and its standard deviation (ddof 0) is ≤ ε₂.

    Returns:
        ``{"cns", "cnm", "cas", "car", "cds", "cdr"}`` as floats: the capsule norm sum (mean over images of
        the sum over capsules) and mean (cns / n), the sum of active capsules (mean over images) and their
        rate (cas / n), the number of dead capsules and their rate (cds / n).

    The paper calls the number of dead capsules "cns" in its text (a clash with the norm sum) and "cds" in
    Table 2; we use cds. It gives no values for ε, ε₁, ε₂: the defaults are chapter 04's choice.

    Chapter 04.
    """
    x = _as_tensor(norms, "norms", 2, "(K images, n capsules)")
    n = x.shape[1]
    cns = x.sum(dim=1).mean().item()
    cas = active_mask(x, active_eps).sum(dim=1, dtype=torch.float64).mean().item()
    cds = float(dead_mask(x, dead_mean_eps, dead_std_eps).sum().item())
    return {"cns": cns, "cnm": cns / n, "cas": cas, "car": cas / n, "cds": cds, "cdr": cds / n}


# ------------------------------------------------------------------------------------------ routing

def perfect_routing_std(n: int) -> float:
    """std(pr_n) = √((1 − 1/n)/n): the standard deviation of one coupling under a perfect routing to n capsules
    (each image one-hot on one target, every target equally often: a Bernoulli(1/n) variable). Chapter 04."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"a routing needs n >= 2 target capsules, got {n!r}")
    return math.sqrt((1.0 - 1.0 / n) / n)


def _mask(mask, size: int, name: str) -> torch.Tensor:
    if mask is None:
        return torch.ones(size, dtype=torch.bool)
    m = torch.as_tensor(mask)
    if m.shape != (size,) or m.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool mask of shape ({size},), got {tuple(m.shape)} {m.dtype}")
    return m.cpu()


def routing_dynamics_per_capsule(couplings, targets=None) -> torch.Tensor:
    """dyr of every lower capsule: ``(I,)`` float64, ``dyr(u_i) = 1/n Σ_j std_k(c_(·,i,j)) / std(pr_n)``.

    Args:
        couplings: ``(K images, I lower capsules, n upper capsules)``.
        targets: optional bool mask ``(n,)`` of the upper capsules to count (e.g. the alive ones); then n is
            the number of True entries, in the mean and in std(pr_n).

    Chapter 04.
    """
    c = _as_tensor(couplings, "couplings", 3, "(K images, I, n)")
    keep = _mask(targets, c.shape[2], "targets")
    n = int(keep.sum())
    std = c[:, :, keep].std(dim=0, correction=0)              # (I, n): std over the images
    return std.mean(dim=1) / perfect_routing_std(n)


def routing_dynamics(couplings, targets=None, sources=None) -> dict:
    """Mitterreiter et al.'s routing dynamics of one routing layer (their §4.1 and Table 1).

    Args:
        couplings: ``(K images, I, n)`` couplings c from the I capsules of layer l to the n capsules of l + 1.
        targets: optional bool mask ``(n,)``: count only these upper capsules (n becomes their number).
        sources: optional bool mask ``(I,)``: average only over these lower capsules.

    Returns:
        ``{"dyr", "dys"}`` as floats: the dynamic routing coefficient, the mean over lower capsules of
        ``1/n Σ_j std(c_(·,i,j)) / √((1 − 1/n)/n)`` (std over images, ddof 0), and the expected number of
        target capsules, the mean of ``n · dyr(u_i)``.

    With the defaults this is the definition in the paper's text. Its Table 1 is consistent with another
    reading: there dys ≈ dyr × (the number of *alive* capsules of layer l + 1), not × n (4.50/0.30 ≈ 15 vs
    14.9 alive, 1.72/0.25 ≈ 6.9 vs 7.0, 1.79/0.30 ≈ 6.0 vs 5.9, 3.78/0.38 ≈ 9.9 vs 10), as if dead targets had
    been left out; ``targets=alive`` computes that reading. The paper does not say; chapter 04 shows both.

    Chapter 04.
    """
    c = _as_tensor(couplings, "couplings", 3, "(K images, I, n)")
    keep_i = _mask(sources, c.shape[1], "sources")
    if not keep_i.any():
        raise ValueError("sources must keep at least one lower capsule")
    n = int(_mask(targets, c.shape[2], "targets").sum())
    dyr = routing_dynamics_per_capsule(c, targets)[keep_i]
    return {"dyr": dyr.mean().item(), "dys": (n * dyr).mean().item()}


# ------------------------------------------------------------------------------------------ Figure 4

def activation_correlation(norms_a, norms_b, eps: float = 1e-12) -> float:
    """Mean over capsules of the cross-correlation ``v₁ᵀv₂ / (‖v₁‖ ‖v₂‖)`` of each capsule's lengths on two
    versions of the same k images (Mitterreiter et al., §4.2, Figure 4): 1 for viewpoint-invariant lengths.

    norms_a, norms_b: ``(K images, n capsules)``, the lengths on the images and on their transformed copies.
    Norms are never exactly 0 after a squash; ``eps`` only guards the division.

    Chapter 04.
    """
    a = _as_tensor(norms_a, "norms_a", 2, "(K images, n capsules)")
    b = _as_tensor(norms_b, "norms_b", 2, "(K images, n capsules)")
    if a.shape != b.shape:
        raise ValueError(f"norms_a and norms_b must have the same shape (K, n), "
                         f"got {tuple(a.shape)} and {tuple(b.shape)}")
    corr = (a * b).sum(dim=0) / (a.norm(dim=0) * b.norm(dim=0)).clamp_min(eps)
    return corr.mean().item()


# ------------------------------------------------------------------------------------------ collection

@dataclass
class CapsuleRecord:
    """What :func:`collect_capsules` keeps for a dataset of K images. Chapter 04.

    norms: one ``(K, n^l)`` tensor per capsule layer, primary first; couplings: one ``(K, n^l, n^{l+1})``
    tensor per routing layer; labels and predictions ``(K,)``.
    """

    norms: list
    couplings: list
    labels: torch.Tensor
    predictions: torch.Tensor

    @property
    def accuracy(self) -> float:
        return (self.predictions == self.labels).double().mean().item()


def collect_capsules(model: torch.nn.Module, data: Dataset, batch_size: int = 500, device=None,
                     amp: bool = False) -> CapsuleRecord:
    """Run a trained network over ``data`` and keep every layer's capsule norms and every routing layer's couplings
    (a reduction of :func:`capsule_lab.training.outputs`: evaluation mode, no gradient, ``device``, ``amp``).

    ``model(x)`` must return an output with ``.capsules`` (one ``(B, n^l, d)`` tensor per layer) and
    ``.couplings`` (one ``(B, n^l, n^{l+1})`` tensor per routing layer), as
    :class:`~capsule_lab.models.DeepCapsNet` does, and ``.scores`` ``(B, classes)``. Results on the CPU in float32.

    Chapter 04.
    """
    norms, couplings, labels, predictions = None, None, [], []
    for _, y, out in outputs(model, data, batch_size, device, amp):
        if not hasattr(out, "capsules") or not hasattr(out, "couplings"):
            raise ValueError("model(x) must return .capsules and .couplings (e.g. capsule_lab.models.DeepCapsNet)")
        if norms is None:
            norms, couplings = [[] for _ in out.capsules], [[] for _ in out.couplings]
        for store, u in zip(norms, out.capsules):
            store.append(u.norm(dim=-1).float().cpu())
        for store, c in zip(couplings, out.couplings):
            store.append(c.float().cpu())
        labels.append(y.cpu())
        predictions.append(out.scores.argmax(dim=1).cpu())
    if norms is None:
        raise ValueError("cannot collect capsules on an empty dataset")
    return CapsuleRecord([torch.cat(n) for n in norms], [torch.cat(c) for c in couplings],
                         torch.cat(labels), torch.cat(predictions))


def layer_table(record: CapsuleRecord, active_eps: float = ACTIVE_EPS, dead_mean_eps: float = DEAD_MEAN_EPS,
                dead_std_eps: float = DEAD_STD_EPS, alive_targets: bool = False) -> list:
    """The paper's Tables 1 and 2 for one network: one dict per capsule layer (primary first).

    Keys: ``layer`` (1-based), ``capsules``, ``alive`` (= capsules − cds), the six :func:`activation_stats`
    and, for every layer but the last, the :func:`routing_dynamics` ``dyr``/``dys`` of its couplings to the next
    layer (None for the class layer). With ``alive_targets`` the routing dynamics count only the alive
    capsules of the next layer (the reading of Table 1 discussed in :func:`routing_dynamics`).

    Chapter 04.
    """
    rows, dead = [], [dead_mask(norms, dead_mean_eps, dead_std_eps) for norms in record.norms]
    for l, norms in enumerate(record.norms):
        stats = activation_stats(norms, active_eps, dead_mean_eps, dead_std_eps)
        row = {"layer": l + 1, "capsules": norms.shape[1], "alive": norms.shape[1] - int(stats["cds"]), **stats,
               "dyr": None, "dys": None}
        if l < len(record.couplings):
            targets = ~dead[l + 1] if alive_targets else None
            if targets is None or int(targets.sum()) >= 2:
                row.update(routing_dynamics(record.couplings[l], targets=targets))
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------ gradients

class GradientTracker:
    """Per-capsule gradient norms while a :class:`~capsule_lab.models.DeepCapsNet` trains (Theorem 2), via hooks.

    For every training step (every backward pass) it records, per capsule layer l and capsule i:

    * ``activation[l]``: the mean over the batch of ‖∂L/∂u_(i,:)‖, the gradient reaching the capsule;
    * ``weight[l]`` (routing layers only, l < L): ‖∂L/∂W_(·,i)‖_F, the gradient of every transformation
      matrix that reads capsule i (``W[i]`` of shape ``(J, d, d_in)``): by Theorem 2 it scales with ‖u_i‖;
    * ``norm[l]``: the mean over the batch of ‖u_(i,:)‖.

    How: a forward hook on the model registers a tensor hook on each capsule tensor of the output (only
    when it requires a gradient, i.e. while training), and a hook on each routing layer's weight reads its
    gradient. Use it as a context manager around :func:`capsule_lab.training.fit`; :meth:`history` returns
    ``{"activation": [(steps, n^l)], "weight": [(steps, n^l)], "norm": [(steps, n^l)]}`` as numpy arrays.

    Chapter 04.
    """

    def __init__(self, model: torch.nn.Module):
        if not hasattr(model, "layers") or not all(hasattr(layer, "weight") for layer in model.layers):
            raise ValueError("GradientTracker needs a model with .layers of routing layers with .weight "
                             "(e.g. capsule_lab.models.DeepCapsNet)")
        self.model = model
        self.records = {"activation": [], "weight": [], "norm": []}
        self._step = {}
        self._handles = []

    def __enter__(self) -> "GradientTracker":
        self._handles.append(self.model.register_forward_hook(self._on_forward))
        for l, layer in enumerate(self.model.layers):
            self._handles.append(layer.weight.register_hook(self._weight_hook(l)))
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove the hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _on_forward(self, module, inputs, output) -> None:
        capsules = output.capsules
        if not capsules[-1].requires_grad:          # evaluation or no_grad: nothing will flow back
            return
        self._flush()
        L = len(capsules)
        self._step = {"activation": [None] * L, "weight": [None] * (L - 1),
                      "norm": [u.detach().norm(dim=-1).mean(dim=0).float().cpu() for u in capsules]}
        for l, u in enumerate(capsules):
            u.register_hook(self._activation_hook(l))

    def _activation_hook(self, l: int):
        def hook(grad):
            self._step["activation"][l] = grad.detach().norm(dim=-1).mean(dim=0).float().cpu()
        return hook

    def _weight_hook(self, l: int):
        def hook(grad):
            if self._step:
                self._step["weight"][l] = grad.detach().flatten(1).norm(dim=1).float().cpu()   # (I,)
        return hook

    def _flush(self) -> None:
        """Store the finished step (if its backward pass ran)."""
        step, self._step = self._step, {}
        if step and all(g is not None for g in step["weight"]):
            for key in self.records:
                self.records[key].append([t if t is not None else torch.zeros_like(step["norm"][i])
                                          for i, t in enumerate(step[key])])

    def history(self) -> dict:
        """``{"activation", "weight", "norm"}``: per layer, a ``(steps, n^l)`` numpy array. Chapter 04."""
        self._flush()
        out = {}
        for key, steps in self.records.items():
            layers = len(steps[0]) if steps else 0
            out[key] = [np.stack([s[l].numpy() for s in steps]) for l in range(layers)]
        return out


def mean_and_sd(values: Sequence[float]) -> tuple:
    """(mean, population standard deviation, ddof 0) of a list of numbers (Nones left out), e.g. one metric over
    seeds: the spread the seeds showed, not a standard error. Chapter 04."""
    a = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if a.size == 0:
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std())
