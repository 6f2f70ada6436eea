"""Grading: the checks behind the exercises of chapters 01 and 02, and the notebook grader.

Taught alongside every chapter's exercise notebook (``exercises/NN_topic.ipynb``). Two parts:

**Checks** (what students call in Colab, with nothing but the package installed)::

    from capsule_lab.grading import check
    check("01.squash", squash)          # prints ✔ or ✘ with a hint, returns a CheckResult

:func:`check` runs the student's function and the reference implementation of the course on the same
seeded random and edge-case inputs (float32 and float64) and compares the values and, where the task is
differentiable, the gradients of a fixed random projection of the outputs (so that a stray ``detach``
is caught too). When an answer is wrong and matches a known mistake, the hint names the mistake.

The tasks (see :data:`TASKS`):

======================  ======  ============================================================
task                    points  the student writes
======================  ======  ============================================================
``01.squash``           1       ``squash(s, dim=-1)`` (chapter 01, squash)
``01.margin_loss``      1       ``margin_loss(lengths (B, J), labels (B,))`` (chapter 01, margin loss)
``01.primary_capsules`` 1       ``primary_capsules(conv_out (B, C·D, H, W), capsule_dim)`` (chapter 01)
``02.couplings``        1       ``couplings(logits (B, I, J))``: softmax over the outputs j (chapter 02)
``02.routing_step``     2       ``routing_step(votes, logits)`` → ``(poses, new_logits)`` (chapter 02)
``02.dynamic_routing``  2       ``dynamic_routing(votes, iterations)`` → poses (chapter 02)
======================  ======  ============================================================

**Grading** (what instructors run): :func:`grade_notebook` executes a copy of a student's notebook in a
fresh kernel with a per-cell time limit and collects the results of the :func:`check` calls made in it;
:func:`grade` does that for many notebooks and writes JSON reports and a CSV summary
(``capsule-lab grade NOTEBOOK... --out reports``). The checks report to the grader through a file named
by the environment variable ``CAPSULE_LAB_GRADE_RECORD`` (one JSON line per check), so nothing depends
on parsing cell outputs. Grading is not a sandbox: the student's code runs with the grader's rights.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .capsules import conv_to_capsules, margin_loss, squash
from .routing import agreement, dynamic_routing, routing_step

__all__ = [
    "RECORD_ENV", "Case", "WrongAnswer", "Task", "TASKS", "ALIASES", "CheckResult",
    "task_ids", "get_task", "tasks_for_chapter", "chapter_of_notebook", "check",
    "grade_notebook", "grade",
]

RECORD_ENV = "CAPSULE_LAB_GRADE_RECORD"
RTOL = 1e-5
ATOL = 1e-6  # scaled by max(1, largest reference value) for each compared tensor
NOT_IMPLEMENTED = "not implemented yet"


# ---------------------------------------------------------------- tasks

@dataclass(frozen=True)
class Case:
    """One input on which a student's function is compared with the reference.

    ``grad``: ``"compare"`` (gradients of a fixed random projection of the outputs must match the
    reference's), ``"finite"`` (they must only be finite, e.g. at s = 0) or ``"none"``.
    """

    name: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    grad: str = "compare"


@dataclass(frozen=True)
class WrongAnswer:
    """A known mistake: if the student's answer behaves like ``fn``, the check prints ``hint``."""

    label: str
    fn: Callable
    hint: str


@dataclass(frozen=True)
class Task:
    """A graded exercise: the reference, the inputs it is checked on and the hints.

    ``outputs`` names the tensors the function returns (one name: a single tensor; several: a tuple).
    """

    id: str
    title: str
    points: int
    reference: Callable
    cases: Callable[[], list]
    hint: str
    outputs: tuple = ("output",)
    wrong_answers: tuple = ()
    nonfinite_hint: str = ""

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(gen, *shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


# --- 01.squash --------------------------------------------------------------------------------------

def _ref_squash(s, dim=-1):
    return squash(s, dim=dim)


def _squash_cases() -> list:
    g = _gen(101)
    cases = [
        Case("random (4, 8), float32", (_randn(g, 4, 8),)),
        Case("random (2, 3, 16), float64", (_randn(g, 2, 3, 16, dtype=torch.float64),)),
        Case("random (2, 8, 5) squashed along dim=1, float32", (_randn(g, 2, 8, 5),), {"dim": 1}),
        Case("random (6, 3) squashed along dim=0, float64", (_randn(g, 6, 3, dtype=torch.float64),), {"dim": 0}),
    ]
    z = _randn(g, 5, 4)
    z[1] = 0.0
    z[3] = 0.0
    cases.append(Case("rows 1 and 3 are zero vectors, float32", (z,)))
    cases.append(Case("all-zero input (3, 8), float64: gradient at s = 0",
                      (torch.zeros(3, 8, dtype=torch.float64),), grad="finite"))
    for dtype in (torch.float32, torch.float64):
        name = str(dtype).replace("torch.", "")
        big = _randn(g, 4, 8, dtype=torch.float64)
        big = big / big.norm(dim=-1, keepdim=True) * torch.tensor([1e3, 1e5, 1e7, 1e8], dtype=torch.float64)[:, None]
        cases.append(Case(f"very large vectors (‖s‖ from 1e3 to 1e8), {name}", (big.to(dtype),)))
        small = _randn(g, 4, 8, dtype=torch.float64)
        small = small / small.norm(dim=-1, keepdim=True) * torch.tensor([1e-2, 1e-3, 1e-4, 1e-6],
                                                                         dtype=torch.float64)[:, None]
        # near 0 the result depends on the ε a student picks: values and finiteness are checked, and the
        # gradient must only be finite
        cases.append(Case(f"very small vectors (‖s‖ from 1e-2 to 1e-6), {name}", (small.to(dtype),),
                          grad="finite"))
    return cases


def _norm2(s, dim):
    return (s * s).sum(dim=dim, keepdim=True)


_SQUASH_WRONG = (
    WrongAnswer("no ‖s‖² factor", lambda s, dim=-1: s / (1 + _norm2(s, dim)),
                "the length of v must be ‖s‖²/(1+‖s‖²): you are missing the factor ‖s‖² "
                "(v = ‖s‖²/(1+‖s‖²) · s/‖s‖)."),
    WrongAnswer("unit vector", lambda s, dim=-1: s / torch.sqrt(_norm2(s, dim) + 1e-16),
                "you returned the unit vector s/‖s‖: multiply it by ‖s‖²/(1+‖s‖²) so that short vectors "
                "shrink towards 0 and long ones to a length just below 1."),
    WrongAnswer("last dim only", lambda s, dim=-1: squash(s, dim=-1),
                "you squashed along the last dimension: squash along `dim` (use it in every sum/norm)."),
)


# --- 01.margin_loss ---------------------------------------------------------------------------------

def _ref_margin_loss(lengths, labels):
    return margin_loss(lengths, labels)


def _margin_cases() -> list:
    g = _gen(102)

    def rand_lengths(B, J, dtype):
        return torch.rand(B, J, generator=g, dtype=torch.float64).to(dtype)

    def labels(B, J):
        return torch.randint(0, J, (B,), generator=g)

    cases = [
        Case("random lengths (8, 10), float32", (rand_lengths(8, 10, torch.float32), labels(8, 10))),
        Case("random lengths (5, 4), float64", (rand_lengths(5, 4, torch.float64), labels(5, 4))),
        Case("one sample (1, 3), float32", (rand_lengths(1, 3, torch.float32), labels(1, 3))),
    ]
    # exactly at the margins: ‖v‖ = m⁺ = 0.9 for the label, m⁻ = 0.1 for the others → loss 0
    at = torch.full((4, 5), 0.1)
    y = torch.tensor([0, 2, 4, 1])
    at[torch.arange(4), y] = 0.9
    cases.append(Case("lengths exactly at the margins 0.9 / 0.1, float32", (at, y)))
    at64 = at.double()
    at64[0, 1] = 0.95   # absent class above m⁻ … and present class below m⁺
    at64[1, 2] = 0.5
    cases.append(Case("lengths at and around the margins, float64", (at64, y)))
    ext = torch.tensor([[0.0, 0.99, 0.0], [0.99, 0.0, 0.99], [0.0, 0.0, 0.0]], dtype=torch.float64)
    cases.append(Case("lengths 0 and 0.99, float64", (ext, torch.tensor([1, 1, 2]))))
    return cases


def _margin_terms(lengths, labels):
    T = torch.nn.functional.one_hot(labels, lengths.shape[1]).to(lengths.dtype)
    present = T * torch.clamp(0.9 - lengths, min=0) ** 2
    absent = 0.5 * (1 - T) * torch.clamp(lengths - 0.1, min=0) ** 2
    return T, present, absent


_MARGIN_WRONG = (
    WrongAnswer("mean over classes", lambda l, y: sum(_margin_terms(l, y)[1:]).mean(),
                "sum the loss over the classes k and average only over the batch (you averaged over the "
                "classes too)."),
    WrongAnswer("sum over batch", lambda l, y: sum(_margin_terms(l, y)[1:]).sum(),
                "average over the batch (you summed over it)."),
    WrongAnswer("λ on the present class",
                lambda l, y: (0.5 * _margin_terms(l, y)[1] + _margin_terms(l, y)[2]).sum(1).mean(),
                "λ = 0.5 down-weights only the absent classes (1 − T_k), not the present one."),
    WrongAnswer("no max(0, ·)", lambda l, y: ((lambda T: T * (0.9 - l) ** 2 + 0.5 * (1 - T) * (l - 0.1) ** 2)(
        _margin_terms(l, y)[0])).sum(1).mean(),
        "each term is max(0, ·)²: a present class longer than 0.9 (or an absent one shorter than 0.1) "
        "costs nothing."),
)


# --- 01.primary_capsules ----------------------------------------------------------------------------

def _ref_primary(conv_out, capsule_dim):
    return conv_to_capsules(conv_out, capsule_dim)


def _primary_cases() -> list:
    g = _gen(103)
    B, C, D, H, W = 2, 3, 4, 2, 5
    b, c, d, h, w = torch.meshgrid(*(torch.arange(n) for n in (B, C, D, H, W)), indexing="ij")
    # the value spells its own index: 10000·b + 1000·type + 100·component + 10·row + column
    coded = (10000 * b + 1000 * c + 100 * d + 10 * h + w).reshape(B, C * D, H, W).float()
    return [
        Case("coded values 10000·b + 1000·type + 100·component + 10·row + column, B=2 C=3 D=4 H=2 W=5",
             (coded, D), grad="none"),
        Case("random (2, 16, 3, 3) with capsule_dim 8, float64",
             (_randn(g, 2, 16, 3, 3, dtype=torch.float64), 8), grad="none"),
        Case("random (1, 12, 6, 6) with capsule_dim 6 (H = W = D), float32",
             (_randn(g, 1, 12, 6, 6), 6), grad="none"),
        Case("one capsule type: random (2, 8, 3, 4) with capsule_dim 8, float32",
             (_randn(g, 2, 8, 3, 4), 8), grad="none"),
    ]


def _primary_view_bug(x, D):
    return x.reshape(x.shape[0], -1, D)


def _primary_type_major(x, D):
    B, CD, H, W = x.shape
    return x.reshape(B, CD // D, D, H, W).permute(0, 1, 3, 4, 2).reshape(B, -1, D)


def _primary_swapped(x, D):
    B, CD, H, W = x.shape
    return x.reshape(B, D, CD // D, H, W).permute(0, 3, 4, 2, 1).reshape(B, -1, D)


_PRIMARY_WRONG = (
    WrongAnswer("spatial neighbours", _primary_view_bug,
                "your capsules group D neighbouring *positions* of one channel (x.view(B, -1, D) on the "
                "(B, C·D, H, W) tensor). A capsule is the D channels of one type at one position: view as "
                "(B, C, D, H, W), permute to (B, H, W, C, D), then reshape to (B, H·W·C, D)."),
    WrongAnswer("type-major order", _primary_type_major,
                "the capsules are right but in the wrong order: order them by (row, column, type), i.e. "
                "permute to (B, H, W, C, D) before flattening, not (B, C, H, W, D)."),
    WrongAnswer("component-major channels", _primary_swapped,
                "channel c·D + d is component d of type c: view the channels as (C, D), not (D, C)."),
)


# --- 02.couplings -----------------------------------------------------------------------------------

def _ref_couplings(logits):
    return torch.softmax(logits, dim=-1)


def _couplings_cases() -> list:
    g = _gen(201)
    large = _randn(g, 2, 5, 4, scale=1000.0)
    return [
        Case("random logits (2, 6, 4), float32", (_randn(g, 2, 6, 4),)),
        Case("random logits (3, 5, 10), float64", (_randn(g, 3, 5, 10, dtype=torch.float64),)),
        Case("zero logits (2, 7, 3): uniform couplings, float32", (torch.zeros(2, 7, 3),)),
        Case("large logits (±1000) (2, 5, 4), float32", (large,)),
        Case("large logits (±1000) (2, 5, 4), float64", (large.double() * 1.5,)),
        Case("one input capsule (2, 1, 5), float64", (_randn(g, 2, 1, 5, dtype=torch.float64),)),
        Case("one output capsule (2, 4, 1), float32", (_randn(g, 2, 4, 1),)),
    ]


_COUPLINGS_WRONG = (
    WrongAnswer("softmax over inputs", lambda b: torch.softmax(b, dim=1),
                "you normalised over the input capsules i (dim 1). Each input capsule i shares its output "
                "among the parents j: Σ_j c_ij = 1, a softmax over the last dimension (J)."),
    WrongAnswer("softmax over everything", lambda b: torch.softmax(b.flatten(1), dim=1).view_as(b),
                "normalise each input capsule's logits separately over j (the last dimension), not over "
                "the whole (I, J) table."),
)


# --- 02.routing_step --------------------------------------------------------------------------------

def _ref_routing_step(votes, logits):
    step = routing_step(votes, logits)
    return step.poses, logits + agreement(votes, step.poses)


def _routing_step_cases() -> list:
    g = _gen(202)
    return [
        Case("random votes (2, 6, 3, 4) and logits, float32", (_randn(g, 2, 6, 3, 4), _randn(g, 2, 6, 3))),
        Case("random votes (1, 8, 5, 8), zero logits, float64",
             (_randn(g, 1, 8, 5, 8, dtype=torch.float64), torch.zeros(1, 8, 5, dtype=torch.float64))),
        Case("random votes (3, 4, 4, 6), large logits (±30), float64",
             (_randn(g, 3, 4, 4, 6, dtype=torch.float64), _randn(g, 3, 4, 4, dtype=torch.float64, scale=30.0))),
        Case("long votes (2, 5, 3, 4) (‖û‖ ≈ 10), float32", (_randn(g, 2, 5, 3, 4, scale=5.0), _randn(g, 2, 5, 3))),
        Case("one input and one output capsule (2, 1, 1, 3), float64",
             (_randn(g, 2, 1, 1, 3, dtype=torch.float64), _randn(g, 2, 1, 1, dtype=torch.float64))),
    ]


def _step_softmax_inputs(u, b):
    v = squash(torch.einsum("bij,bijd->bjd", torch.softmax(b, dim=1), u))
    return v, b + torch.einsum("bijd,bjd->bij", u, v)


def _step_no_update(u, b):
    return routing_step(u, b).poses, b


def _step_detached(u, b):
    v = routing_step(u, b).poses
    return v, b + torch.einsum("bijd,bjd->bij", u, v).detach()


def _step_agree_with_s(u, b):
    s = torch.einsum("bij,bijd->bjd", torch.softmax(b, dim=-1), u)
    return squash(s), b + torch.einsum("bijd,bjd->bij", u, s)


def _step_no_squash(u, b):
    s = torch.einsum("bij,bijd->bjd", torch.softmax(b, dim=-1), u)
    return s, b + torch.einsum("bijd,bjd->bij", u, s)


_ROUTING_STEP_WRONG = (
    WrongAnswer("logits not updated", _step_no_update,
                "you returned the logits unchanged: the new logits are b_ij + ⟨û_{j|i}, v_j⟩."),
    WrongAnswer("detached update", _step_detached,
                "the values are right but the gradients are not: don't detach (or use torch.no_grad for) the "
                "agreement. Sabour's Algorithm 1 lets gradients flow through b ← b + ⟨û, v⟩."),
    WrongAnswer("softmax over inputs", _step_softmax_inputs,
                "the couplings are a softmax over the output capsules j (last dim of the logits), not over "
                "the inputs i."),
    WrongAnswer("agreement with s", _step_agree_with_s,
                "the agreement is measured with the squashed output v_j = squash(s_j), not with s_j."),
    WrongAnswer("no squash", _step_no_squash,
                "the output capsule is squashed: v_j = squash(s_j), and the agreement uses v_j."),
)


# --- 02.dynamic_routing -----------------------------------------------------------------------------

def _ref_dynamic_routing(votes, iterations):
    return dynamic_routing(votes, iterations).poses


def _dynamic_cases() -> list:
    g = _gen(203)
    return [
        Case("random votes (2, 6, 3, 4), 1 iteration, float32", (_randn(g, 2, 6, 3, 4), 1)),
        Case("random votes (2, 6, 3, 4), 2 iterations, float64", (_randn(g, 2, 6, 3, 4, dtype=torch.float64), 2)),
        Case("random votes (2, 8, 4, 6), 3 iterations, float32", (_randn(g, 2, 8, 4, 6), 3)),
        Case("random votes (1, 10, 5, 8), 4 iterations, float64",
             (_randn(g, 1, 10, 5, 8, dtype=torch.float64), 4)),
        Case("long votes (2, 6, 3, 4) (‖û‖ ≈ 6), 5 iterations, float64",
             (_randn(g, 2, 6, 3, 4, dtype=torch.float64, scale=3.0), 5)),
        Case("one output capsule (2, 5, 1, 4), 3 iterations, float32", (_randn(g, 2, 5, 1, 4), 3)),
    ]


def _routing_variant(softmax_dim=-1, update=True, detach=False, extra=0):
    def route(votes, iterations):
        b = torch.zeros(votes.shape[:3], dtype=votes.dtype)
        for r in range(iterations + extra):
            v = squash(torch.einsum("bij,bijd->bjd", torch.softmax(b, dim=softmax_dim), votes))
            if update:
                a = torch.einsum("bijd,bjd->bij", votes, v)
                b = b + (a.detach() if detach else a)
        return v
    return route


_DYNAMIC_WRONG = (
    WrongAnswer("no update", _routing_variant(update=False),
                "your poses are those of uniform routing: update the logits after each iteration, "
                "b ← b + ⟨û_{j|i}, v_j⟩, and use them in the next softmax."),
    WrongAnswer("detached update", _routing_variant(detach=True),
                "the values are right but the gradients are not: don't detach the agreement (or wrap the "
                "loop in torch.no_grad). Algorithm 1 lets gradients flow through every iteration."),
    WrongAnswer("one iteration too many", _routing_variant(extra=1),
                "you ran one routing iteration too many: `iterations` = r softmax–sum–squash steps, the "
                "first one with b = 0."),
    WrongAnswer("one iteration too few", _routing_variant(extra=-1),
                "you ran one routing iteration too few: `iterations` = r softmax–sum–squash steps, the "
                "first one with b = 0."),
    WrongAnswer("softmax over inputs", _routing_variant(softmax_dim=1),
                "the couplings are a softmax over the output capsules j (last dim of b), not over the inputs i."),
)


TASKS: dict[str, Task] = {t.id: t for t in [
    Task("01.squash", "Squash", 1, _ref_squash, _squash_cases,
         hint="v = ‖s‖²/(1+‖s‖²) · s/‖s‖ along `dim`; compute ‖s‖ as sqrt(‖s‖² + ε²) with a tiny ε so that "
              "s = 0 gives 0 with a finite gradient (chapter 01, section on the squash).",
         outputs=("v",), wrong_answers=_SQUASH_WRONG,
         nonfinite_hint="at or near s = 0 your squash gives nan or inf: put a tiny ε inside the square root, "
                        "‖s‖ = sqrt(‖s‖² + ε²), instead of dividing by ‖s‖ = 0; for long vectors avoid "
                        "forming ‖s‖² · s before dividing."),
    Task("01.margin_loss", "Margin loss", 1, _ref_margin_loss, _margin_cases,
         hint="L = Σ_k T_k max(0, 0.9 − ‖v_k‖)² + 0.5 (1 − T_k) max(0, ‖v_k‖ − 0.1)², T = one-hot of the labels; "
              "sum over the classes k, mean over the batch (chapter 01, section on the margin loss).",
         outputs=("loss",), wrong_answers=_MARGIN_WRONG),
    Task("01.primary_capsules", "Primary capsules", 1, _ref_primary, _primary_cases,
         hint="capsule (h, w, c) is conv_out[b, c·D:(c+1)·D, h, w]: view as (B, C, D, H, W), permute to "
              "(B, H, W, C, D), reshape to (B, H·W·C, D) (chapter 01, section on primary capsules).",
         outputs=("capsules",), wrong_answers=_PRIMARY_WRONG),
    Task("02.couplings", "Coupling coefficients", 1, _ref_couplings, _couplings_cases,
         hint="c_ij = exp(b_ij) / Σ_k exp(b_ik): a softmax over the output capsules (last dimension), computed "
              "stably (subtract the maximum over j first, or use torch.softmax) (chapter 02, routing by hand).",
         outputs=("couplings",), wrong_answers=_COUPLINGS_WRONG,
         nonfinite_hint="large logits overflow exp(): subtract max_j b_ij before exponentiating (the softmax "
                        "does not change), or use torch.softmax(b, dim=-1)."),
    Task("02.routing_step", "One routing iteration", 2, _ref_routing_step, _routing_step_cases,
         hint="c = softmax_j(b); s_j = Σ_i c_ij û_{j|i}; v_j = squash(s_j); return (v, b + ⟨û_{j|i}, v_j⟩) with "
              "nothing detached (chapter 02, routing iteration by iteration).",
         outputs=("poses", "new_logits"), wrong_answers=_ROUTING_STEP_WRONG,
         nonfinite_hint="compute the softmax stably (torch.softmax) and the squash with ε inside the square root."),
    Task("02.dynamic_routing", "Dynamic routing", 2, _ref_dynamic_routing, _dynamic_cases,
         hint="start from b = 0; repeat `iterations` times: c = softmax_j(b), v = squash(Σ_i c û), b ← b + ⟨û, v⟩; "
              "return the last v, shape (B, J, D), nothing detached (chapter 02, the vectorised routing).",
         outputs=("poses",), wrong_answers=_DYNAMIC_WRONG,
         nonfinite_hint="compute the softmax stably (torch.softmax) and the squash with ε inside the square root."),
]}

#: Other names accepted by :func:`check` (the instructors' guide uses ``02.routing``).
ALIASES = {"02.routing": "02.dynamic_routing"}


def task_ids() -> list[str]:
    """All task ids, sorted. Chapters 01–02."""
    return sorted(TASKS)


def get_task(task_id: str) -> Task:
    """The :class:`Task` with this id (or alias); ``ValueError`` listing the known tasks otherwise."""
    tid = ALIASES.get(task_id, task_id) if isinstance(task_id, str) else task_id
    if tid not in TASKS:
        raise ValueError(f"unknown task {task_id!r}: known tasks are {', '.join(task_ids())}")
    return TASKS[tid]


def tasks_for_chapter(chapter: str) -> list[Task]:
    """The tasks of one chapter (``"01"`` → every ``01.*`` task), in registry order."""
    return [t for t in TASKS.values() if t.chapter == chapter]


# ---------------------------------------------------------------- running a function on the cases

class _NotImplemented(Exception):
    pass


@dataclass
class _Evaluation:
    outputs: tuple | None = None        # the output tensors (detached)
    grads: tuple | None = None          # gradients w.r.t. the floating inputs (None entries: not reached)
    differentiable: bool = True         # every output that should carry a gradient does
    error: str | None = None


def _clone_args(case: Case, requires_grad: bool) -> tuple:
    out = []
    for a in case.args:
        if isinstance(a, torch.Tensor):
            a = a.detach().clone()
            if requires_grad and a.is_floating_point():
                a.requires_grad_(True)
        out.append(a)
    return tuple(out)


def _structure(task: Task, result) -> tuple:
    """The student's return value as a tuple of tensors in ``task.outputs`` order, or raise ValueError."""
    if result is None or result is Ellipsis:
        raise _NotImplemented()
    n = len(task.outputs)
    if n == 1:
        items = (result,)
    else:
        if not isinstance(result, (tuple, list)) or len(result) != n:
            raise ValueError(f"expected a tuple ({', '.join(task.outputs)}), got {_describe(result)}")
        items = tuple(result)
        if any(x is None or x is Ellipsis for x in items):
            raise _NotImplemented()
    for name, x in zip(task.outputs, items):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} should be a torch.Tensor, got {_describe(x)}")
    return items


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of length {len(x)}"
    return f"a {type(x).__name__}"


def _weights(case_index: int, outputs: Sequence[torch.Tensor]) -> list:
    g = _gen(10_000 + case_index)
    return [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in outputs]


def _evaluate(task: Task, fn: Callable, case: Case, weights: list | None, student: bool) -> _Evaluation:
    """Run ``fn`` on a fresh copy of the case's inputs; with ``weights``, also take gradients."""
    want_grad = case.grad != "none" and weights is not None
    args = _clone_args(case, want_grad)
    try:
        result = fn(*args, **case.kwargs)
    except NotImplementedError as err:
        raise _NotImplemented() from err
    except (Exception, SystemExit) as err:  # the student's code may raise anything (even sys.exit)
        if not student:
            raise
        return _Evaluation(error=f"raised {type(err).__name__}: {err}")
    try:
        outputs = _structure(task, result)
    except ValueError as err:
        return _Evaluation(error=str(err))
    ev = _Evaluation(outputs=tuple(o.detach() for o in outputs))
    if not want_grad:
        return ev
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    terms = []
    for o, w in zip(outputs, weights):
        if o.requires_grad and o.shape == w.shape and o.dtype == w.dtype:
            terms.append((o * w).sum())
        elif not o.requires_grad:
            ev.differentiable = False
    if not terms:
        ev.grads = tuple(None for _ in inputs)
        return ev
    try:
        grads = torch.autograd.grad(sum(terms), inputs, allow_unused=True)
    except (Exception, SystemExit) as err:
        if not student:
            raise
        return _Evaluation(outputs=ev.outputs, error=f"backward pass raised {type(err).__name__}: {err}")
    ev.grads = tuple(None if g is None else g.detach() for g in grads)
    return ev


def _mismatch(name: str, got: torch.Tensor, want: torch.Tensor) -> str | None:
    """None if ``got`` matches ``want``; else what differs."""
    if tuple(got.shape) != tuple(want.shape):
        return f"{name} has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"{name} has dtype {got.dtype}, expected {want.dtype} (keep the input's dtype)"
    g, w = got.double(), want.double()
    if not torch.isfinite(g).all() and torch.isfinite(w).all():
        return f"nan or inf in {name}"
    scale = max(1.0, float(w.abs().max())) if w.numel() else 1.0
    if not torch.allclose(g, w, rtol=RTOL, atol=ATOL * scale, equal_nan=True):
        diff = float((g - w).abs().nan_to_num(nan=math.inf).max())
        return f"wrong {name} (largest difference {diff:.3g})"
    return None


def _compare(task: Task, case: Case, got: _Evaluation, want: _Evaluation, input_names: list) -> str | None:
    if got.error:
        return got.error
    for name, g, w in zip(task.outputs, got.outputs, want.outputs):
        problem = _mismatch(name, g, w)
        if problem:
            return problem
    if case.grad == "none" or want.grads is None:
        return None
    if not got.differentiable:
        return "the output carries no gradient (did you detach it or compute it under torch.no_grad?)"
    for name, g, w in zip(input_names, got.grads, want.grads):
        if case.grad == "finite":
            if g is not None and not torch.isfinite(g).all():
                return f"nan or inf in the gradient w.r.t. {name}"
            continue
        if g is None:
            g = torch.zeros_like(w) if w is not None else None
        if w is None:
            w = torch.zeros_like(g) if g is not None else None
        if g is None:
            continue
        problem = _mismatch(f"gradient w.r.t. {name}", g, w)
        if problem:
            return problem
    return None


def _input_names(fn: Callable, case: Case) -> list:
    """Names of the differentiable inputs, for messages (the reference's argument names)."""
    names = {_ref_squash: ["s"], _ref_margin_loss: ["lengths"], _ref_couplings: ["logits"],
             _ref_routing_step: ["votes", "logits"], _ref_dynamic_routing: ["votes"]}.get(fn)
    floating = [i for i, a in enumerate(case.args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if names and len(names) == len(floating):
        return names
    return [f"argument {i + 1}" for i in floating]


def _run_checks(task: Task, fn: Callable) -> tuple[str | None, str]:
    """(None, "") if ``fn`` passes every case, else (what differed, hint)."""
    cases = task.cases()
    for index, case in enumerate(cases):
        want0 = _evaluate(task, task.reference, case, None, student=False)
        weights = _weights(index, want0.outputs) if case.grad != "none" else None
        want = _evaluate(task, task.reference, case, weights, student=False)
        got = _evaluate(task, fn, case, weights, student=True)
        problem = _compare(task, case, got, want, _input_names(task.reference, case))
        if problem is None:
            continue
        hint = task.hint
        if "nan or inf" in problem and task.nonfinite_hint:
            hint = task.nonfinite_hint
        elif got.error is None:
            for wrong in task.wrong_answers:
                try:
                    mistaken = _evaluate(task, wrong.fn, case, weights, student=True)
                except _NotImplemented:
                    continue
                if mistaken.error is None and _compare(task, case, got, mistaken,
                                                       _input_names(task.reference, case)) is None:
                    hint = wrong.hint
                    break
        return f"{problem} on case '{case.name}'", hint
    return None, ""


# ---------------------------------------------------------------- check()

@dataclass
class CheckResult:
    """The outcome of :func:`check`: task id, passed, points earned, points possible, message."""

    task: str
    passed: bool
    points: int
    max_points: int
    message: str

    def line(self) -> str:
        """The one-line summary :func:`check` prints."""
        if self.passed:
            return f"✔ {self.task} passed ({self.points}/{self.max_points} points)"
        return f"✘ {self.task} failed: {self.message}"

    def _ipython_display_(self):
        # check() has already printed the line; in a notebook, `check(...)` as a cell's last
        # expression would otherwise print the same result a second time.
        if not getattr(self, "_printed", False):
            sys.stdout.write(self.line() + "\n")

    def to_dict(self) -> dict:
        return asdict(self)


def _record(result: CheckResult) -> None:
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf8") as f:
        f.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")


def check(task_id: str, fn: Callable, verbose: bool = True) -> CheckResult:
    """Check a student's function for the exercise ``task_id`` against the course's reference.

    Runs ``fn`` and the reference on seeded random and edge-case inputs (float32 and float64), compares
    the values (relative tolerance 1e-5) and, where the task is differentiable, the gradients. Anything
    the function raises counts as a failure, reported with its message; a function that returns
    ``...``/``None`` or raises ``NotImplementedError`` is "not implemented yet".

    Prints ``✔ 02.routing_step passed (2/2 points)`` or ``✘ 02.routing_step failed: <what differed, on
    which case> — hint: <hint>`` (unless ``verbose=False``), appends the result as a JSON line to the
    file named by ``$CAPSULE_LAB_GRADE_RECORD`` if that is set (how ``capsule-lab grade`` collects it)
    and returns a :class:`CheckResult`.

    Tasks: ``01.squash``, ``01.margin_loss``, ``01.primary_capsules`` (chapter 01), ``02.couplings``,
    ``02.routing_step``, ``02.dynamic_routing`` (chapter 02). Unknown ids raise ``ValueError``.
    """
    task = get_task(task_id)
    if not callable(fn):
        if fn is None or fn is Ellipsis:
            problem, hint = NOT_IMPLEMENTED, task.hint
        else:
            problem, hint = f"expected a function, got {_describe(fn)}", task.hint
    else:
        try:
            problem, hint = _run_checks(task, fn)
        except _NotImplemented:
            problem, hint = NOT_IMPLEMENTED, task.hint
    passed = problem is None
    message = f"passed all {len(task.cases())} cases" if passed else f"{problem} — hint: {hint}"
    result = CheckResult(task.id, passed, task.points if passed else 0, task.points, message)
    if verbose:
        sys.stdout.write(result.line() + "\n")  # one write: the line reaches a notebook as one output
        result._printed = True
    _record(result)
    return result


# ---------------------------------------------------------------- grading notebooks

_TIMEOUT_ENAME = "CellTimeoutError"
_WARM_UP = '__import__("capsule_lab.grading")'
_WARM_UP_TIMEOUT = 300.0
_MAX_OUTPUT_CHARS = 200_000  # per cell; more is dropped (a student printing in a loop must not exhaust memory)


def chapter_of_notebook(path: str | os.PathLike) -> str:
    """The chapter ``NN`` of a notebook from its file name (``01_capsules.ipynb``, also ``Copy of 01_capsules``).

    Raises ``ValueError`` if the name holds no ``NN_`` prefix.
    """
    name = Path(path).name
    m = re.match(r"(\d{2})_", name) or re.search(r"(?<![0-9A-Za-z])(\d{2})_", name)
    if not m:
        raise ValueError(f"cannot tell the chapter of {name!r}: expected a file name like 'NN_topic.ipynb'")
    return m.group(1)


class _KernelStuck(Exception):
    pass


def _grading_client_class():
    from nbclient import NotebookClient

    class GradingClient(NotebookClient):
        """An nbclient client that caps each cell's stored output and records errors and timeouts."""

        def __init__(self, *args, grace: float = 10.0, **kwargs):
            super().__init__(*args, **kwargs)
            self.grace = grace
            self.cell_errors: list = []
            self.timeout_cells: list = []
            self._output_chars: dict = {}
            self.on_cell_error = self._on_cell_error
            self.on_notebook_start = self._warm_up

        async def _warm_up(self, notebook):
            """Import the package (torch included) before the first cell, so that the per-cell time limit
            measures the student's code, not the library's import; binds no name in the kernel."""
            from queue import Empty

            from jupyter_core.utils import ensure_async

            msg_id = await ensure_async(self.kc.execute(_WARM_UP, silent=True, store_history=False))
            deadline = time.monotonic() + _WARM_UP_TIMEOUT
            while time.monotonic() < deadline:
                try:
                    msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=deadline - time.monotonic()))
                except Empty:
                    return
                if msg.get("parent_header", {}).get("msg_id") == msg_id:
                    return

        def output(self, outs, msg, display_id, cell_index):
            used = self._output_chars.get(cell_index, 0)
            if used >= _MAX_OUTPUT_CHARS:
                return None
            out = super().output(outs, msg, display_id, cell_index)
            if out is not None:
                used += len(json.dumps(out, default=str))
                self._output_chars[cell_index] = used
                if used >= _MAX_OUTPUT_CHARS:
                    import nbformat

                    outs.append(nbformat.v4.new_output(
                        "stream", name="stderr", text="\n[output truncated by the grader]\n"))
            return out

        async def _on_cell_error(self, cell, cell_index, execute_reply):
            content = execute_reply.get("content", {})
            if content.get("ename") == _TIMEOUT_ENAME:
                self.timeout_cells.append(cell_index)
                if not await self._kernel_responds():
                    raise _KernelStuck(cell_index)
                return
            self.cell_errors.append({"cell": cell_index, "ename": str(content.get("ename", "")),
                                     "evalue": str(content.get("evalue", ""))[:2000]})

        async def _kernel_responds(self) -> bool:
            """After an interrupt: does the kernel answer a kernel_info request within ``grace`` seconds?"""
            from queue import Empty

            from jupyter_core.utils import ensure_async

            msg_id = await ensure_async(self.kc.kernel_info())
            deadline = time.monotonic() + self.grace
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                try:
                    msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=remaining))
                except Empty:
                    return False
                if msg.get("parent_header", {}).get("msg_id") == msg_id:
                    return True

    return GradingClient


def _read_records(path: str) -> list:
    records = []
    try:
        with open(path, encoding="utf8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("task"), str):
                    records.append(rec)
    except OSError:
        pass
    return records


def grade_notebook(path: str | os.PathLike, timeout: int = 120, kernel_name: str = "python3",
                   chapter: str | None = None, report_path: str | os.PathLike | None = None) -> dict:
    """Execute a copy of a student's notebook in a fresh kernel and score the checks it ran.

    The notebook is read into memory and executed there; the file itself is never written. Each cell
    may run for ``timeout`` seconds (the package and torch are imported before the first cell, so that
    their import time is not charged to it); a cell that runs longer is interrupted, reported, and
    execution continues with the next cell (if the kernel no longer answers, grading stops there). Cell errors
    do not stop execution. The kernel runs in the notebook's folder with ``CAPSULE_LAB_PROFILE=quick``
    and ``CAPSULE_LAB_GRADE_RECORD`` set, so that every :func:`check` call reports its result.

    The tasks graded are those of the notebook's chapter (``01_capsules.ipynb`` → ``01.*``; or
    ``chapter``); the last result of each counts, and a task whose check never ran scores 0 ("not run").

    Returns (and, with ``report_path``, writes as JSON) a report::

        {"notebook", "chapter", "score", "max_score", "tasks": {id: {points, max_points, passed, message}},
         "cell_errors": [{cell, ename, evalue}], "timed_out", "timeout_cell", "timeout_cells",
         "kernel_died", "aborted", "timeout", "duration_s"}

    Cell indices count all cells from 0. Chapters 01–02 (``capsule-lab grade``).
    """
    import nbformat
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"notebook not found: {path}")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    chapter = chapter or chapter_of_notebook(path)
    tasks = tasks_for_chapter(chapter)
    nb = nbformat.read(path, as_version=4)  # the in-memory copy that is executed

    fd, record = tempfile.mkstemp(prefix="capsule-lab-grade-", suffix=".jsonl")
    os.close(fd)
    env = dict(os.environ)
    env.update({RECORD_ENV: record, "CAPSULE_LAB_PROFILE": "quick"})
    client = _grading_client_class()(
        nb, timeout=int(math.ceil(timeout)), kernel_name=kernel_name, allow_errors=True,
        interrupt_on_timeout=True, record_timing=False, store_widget_state=False,
        error_on_timeout={"ename": _TIMEOUT_ENAME, "evalue": f"cell did not finish within {timeout} s",
                          "traceback": []},
        grace=max(5.0, min(30.0, float(timeout))),
        resources={"metadata": {"path": str(path.resolve().parent)}},
    )
    kernel_died, aborted = False, None
    start = time.monotonic()
    try:
        client.execute(env=env)
    except _KernelStuck as err:
        aborted = f"the kernel did not respond after the timeout in cell {err.args[0]}; later cells were not run"
    except DeadKernelError:
        kernel_died = True
        aborted = "the kernel died; later cells were not run"
    except CellTimeoutError as err:
        aborted = f"timed out: {err}"
    except Exception as err:  # a broken kernel spec, a failed start, …: report, don't crash a batch
        aborted = f"{type(err).__name__}: {err}"
    duration = time.monotonic() - start
    records = _read_records(record)
    try:
        os.unlink(record)
    except OSError:
        pass

    last: dict = {}
    for rec in records:
        tid = ALIASES.get(rec["task"], rec["task"])
        if tid in TASKS:
            last[tid] = rec
    results = {}
    for task in tasks:
        rec = last.get(task.id)
        if rec is None:
            results[task.id] = {"points": 0, "max_points": task.points, "passed": False, "message": "not run"}
        else:
            passed = bool(rec.get("passed"))
            results[task.id] = {"points": task.points if passed else 0, "max_points": task.points,
                                "passed": passed, "message": str(rec.get("message", ""))}
    report = {
        "notebook": str(path),
        "chapter": chapter,
        "score": sum(r["points"] for r in results.values()),
        "max_score": sum(t.points for t in tasks),
        "tasks": results,
        "cell_errors": client.cell_errors,
        "timed_out": bool(client.timeout_cells),
        "timeout_cell": client.timeout_cells[0] if client.timeout_cells else None,
        "timeout_cells": list(client.timeout_cells),
        "kernel_died": kernel_died,
        "aborted": aborted,
        "timeout": timeout,
        "duration_s": round(duration, 2),
    }
    if report_path is not None:
        _write_json(Path(report_path), report)
    return report


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf8")


def _report_names(paths: list[Path]) -> list[str]:
    """Report file stems: the notebook's stem, prefixed by its folder when two notebooks share a stem."""
    stems = [p.stem for p in paths]
    names = []
    for p in paths:
        if stems.count(p.stem) == 1:
            names.append(p.stem)
        else:
            parent = re.sub(r"[^\w.-]+", "_", p.resolve().parent.name) or "notebook"
            names.append(f"{parent}__{p.stem}")
    seen: dict = {}
    unique = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        unique.append(n if seen[n] == 1 else f"{n}__{seen[n]}")
    return unique


def grade(paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike = "reports", timeout: int = 120,
          kernel_name: str = "python3") -> list[dict]:
    """Grade several notebooks: ``<out_dir>/<notebook stem>.json`` each and, for more than one,
    ``<out_dir>/grades.csv`` (one row per notebook: notebook, score, max_score, one column per task).

    A notebook that cannot be graded at all (unreadable, no chapter in its name) gets a report with its
    error and score 0 instead of stopping the batch. Chapters 01–02 (``capsule-lab grade``).
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("no notebooks to grade")
    out = Path(out_dir)
    reports = []
    for p, name in zip(paths, _report_names(paths)):
        try:
            report = grade_notebook(p, timeout=timeout, kernel_name=kernel_name)
        except Exception as err:  # noqa: BLE001 - one bad file must not stop a class's grading
            report = {"notebook": str(p), "chapter": None, "score": 0, "max_score": 0, "tasks": {},
                      "cell_errors": [], "timed_out": False, "timeout_cell": None, "timeout_cells": [],
                      "kernel_died": False, "aborted": f"{type(err).__name__}: {err}", "timeout": timeout,
                      "duration_s": 0.0}
        report["report"] = str(out / f"{name}.json")
        _write_json(out / f"{name}.json", report)
        reports.append(report)
    if len(reports) > 1:
        columns = sorted({t for r in reports for t in r["tasks"]})
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "grades.csv", "w", newline="", encoding="utf8") as f:
            writer = csv.writer(f)
            writer.writerow(["notebook", "score", "max_score", *columns])
            for r in reports:
                writer.writerow([r["notebook"], r["score"], r["max_score"],
                                 *[r["tasks"][t]["points"] if t in r["tasks"] else "" for t in columns]])
    return reports
