"""The graded exercises of chapter 04 (dead capsules): ``04.dyr``, ``04.dead_capsules``, ``04.active_rate``.

Each task has the course's reference (the definitions of Mitterreiter et al., 2023, as in
:mod:`capsule_lab.diagnostics`), seeded random and edge-case inputs (values exactly at a threshold, a
perfect routing, a static one), known wrong answers with their hints and a general hint pointing to its
section of chapter 04. Registered with :func:`capsule_lab.grading.tasks.register` on import.
"""

from __future__ import annotations

import math

import torch

from ..diagnostics import (active_mask, activation_stats, dead_mask, routing_dynamics,
                           routing_dynamics_per_capsule)
from .tasks import Case, Task, WrongAnswer, generator, randn, register


# --- 04.dyr -----------------------------------------------------------------------------------------

def _ref_dyr(couplings):
    n = couplings.shape[-1]
    std = couplings.std(dim=0, correction=0)                 # (I, n): over the images
    return std.mean(dim=1).mean() / math.sqrt((1 - 1 / n) / n)


def _couplings(g, k, i, n, dtype=torch.float32, scale=2.0):
    return torch.softmax(randn(g, k, i, n, dtype=torch.float64, scale=scale), dim=-1).to(dtype)


def _dyr_cases() -> list:
    g = generator(401)
    n = 4
    perfect = torch.nn.functional.one_hot(torch.arange(12) % n, n).double()
    perfect = torch.stack([perfect, perfect.roll(1, dims=1), perfect.roll(2, dims=1)], dim=1)
    static = torch.nn.functional.one_hot(torch.tensor([0, 2, 1]), n).double().expand(10, 3, n).contiguous()
    return [
        Case("random couplings (K=20, I=6, n=5), float32", (_couplings(g, 20, 6, 5),), grad="none"),
        Case("random couplings (K=50, I=16, n=16), float64", (_couplings(g, 50, 16, 16, torch.float64),),
             grad="none"),
        Case("sharp couplings (K=30, I=4, n=10), float64",
             (_couplings(g, 30, 4, 10, torch.float64, scale=8.0),), grad="none"),
        Case("a perfect routing (K=12, I=3, n=4): dyr = 1, float64", (perfect,), grad="none"),
        Case("a static routing (K=10, I=3, n=4): dyr = 0, float64", (static,), grad="none"),
        Case("two targets (K=9, I=2, n=2), float32", (_couplings(g, 9, 2, 2),), grad="none"),
    ]


def _dyr_unbiased(c):
    n = c.shape[-1]
    return c.std(dim=0).mean() / math.sqrt((1 - 1 / n) / n)


def _dyr_over_targets(c):
    n = c.shape[-1]
    return c.std(dim=2, correction=0).mean() / math.sqrt((1 - 1 / n) / n)


def _dyr_unnormalised(c):
    return c.std(dim=0, correction=0).mean()


def _dys(c):
    return c.shape[-1] * _ref_dyr(c)


_DYR_WRONG = (
    WrongAnswer("ddof 1", _dyr_unbiased,
                "use the population standard deviation over the images (ddof 0: torch.std(..., correction=0) "
                "or unbiased=False); torch.std divides by K − 1 by default."),
    WrongAnswer("std over the targets", _dyr_over_targets,
                "take the standard deviation of each coupling c[:, i, j] over the K images (dim 0), not over "
                "the targets j: dyr measures how much the routing changes from image to image."),
    WrongAnswer("not normalised", _dyr_unnormalised,
                "divide by the standard deviation of a perfect routing, √((1 − 1/n)/n), so that a perfect "
                "routing has dyr = 1."),
    WrongAnswer("dys instead of dyr", _dys,
                "that is dys = n · dyr, the expected number of targets; the task asks for the rate dyr."),
)


# --- 04.dead_capsules -------------------------------------------------------------------------------

def _ref_dead(norms, mean_eps, std_eps):
    return (norms.mean(dim=0) <= mean_eps) & (norms.std(dim=0, correction=0) <= std_eps)


def _norms(g, k, n, dtype=torch.float32):
    return torch.sigmoid(randn(g, k, n, dtype=torch.float64, scale=2.0)).to(dtype)


def _dead_cases() -> list:
    g = generator(402)
    mixed = _norms(g, 40, 8, torch.float64)
    mixed[:, 1] = 0.0                                             # constant zero: dead
    mixed[:, 4] = 0.003 * _norms(g, 40, 1, torch.float64)[:, 0]   # tiny: dead at 0.01
    mixed[:, 6] = 0.9                                             # always on: alive
    # columns: constant at the thresholds; zero; mean 0.25 and std 0.25 exactly; mean 0.2, std 0.1 (ddof 0)
    edge = torch.tensor([[0.25, 0.0, 0.0, 0.3], [0.25, 0.0, 0.5, 0.1]], dtype=torch.float64)
    # columns: mean 0.009 but std 0.027 (not dead); always 0.5 (not dead); always 0 (dead)
    spread = torch.zeros(10, 3)
    spread[0, 0] = 0.09
    spread[:, 1] = 0.5
    return [
        Case("norms at the thresholds (K=2, n=4), thresholds 0.25, 0.25, float64", (edge, 0.25, 0.25), grad="none"),
        Case("a small mean with a larger std, a constant 0.5, a zero (K=10, n=3), thresholds 0.01, 0.01, float32",
             (spread, 0.01, 0.01), grad="none"),
        Case("random norms (K=30, n=6), thresholds 0.3, 0.3, float32", (_norms(g, 30, 6), 0.3, 0.3), grad="none"),
        Case("dead, tiny and always-on capsules (K=40, n=8), thresholds 0.01, 0.01, float64",
             (mixed, 0.01, 0.01), grad="none"),
        Case("one image (K=1, n=5), thresholds 0.1, 0.0, float64", (_norms(g, 1, 5, torch.float64) * 0.15, 0.1, 0.0),
             grad="none"),
    ]


def _dead_unbiased(x, a, b):
    return (x.mean(dim=0) <= a) & (x.std(dim=0) <= b)


def _dead_or(x, a, b):
    return (x.mean(dim=0) <= a) | (x.std(dim=0, correction=0) <= b)


def _dead_strict(x, a, b):
    return (x.mean(dim=0) < a) & (x.std(dim=0, correction=0) < b)


def _dead_mean_only(x, a, b):
    return x.mean(dim=0) <= a


def _dead_per_image(x, a, b):
    return (x <= a).all(dim=0)


_DEAD_WRONG = (
    WrongAnswer("ddof 1", _dead_unbiased,
                "use the population standard deviation over the images (ddof 0: correction=0); torch.std "
                "divides by K − 1 by default."),
    WrongAnswer("or", _dead_or,
                "a capsule is dead when its mean norm is ≤ ε₁ *and* its standard deviation is ≤ ε₂."),
    WrongAnswer("strict inequalities", _dead_strict,
                "the paper's test is μ ≤ ε₁ and σ ≤ ε₂ (less than *or equal*)."),
    WrongAnswer("mean only", _dead_mean_only,
                "the standard deviation over the images must be small too (σ ≤ ε₂): a capsule that is "
                "usually off but sometimes strongly on is not dead."),
    WrongAnswer("every image below the mean threshold", _dead_per_image,
                "compare the mean and the standard deviation of each capsule's norm over the images (dim 0) "
                "with ε₁ and ε₂, not every single norm with ε₁."),
)


# --- 04.active_rate ---------------------------------------------------------------------------------

def _ref_active_rate(norms, eps):
    return (norms >= eps).to(norms.dtype).sum(dim=1).mean() / norms.shape[1]


def _active_cases() -> list:
    g = generator(403)
    edge = torch.tensor([[0.1, 0.05, 0.2, 0.1], [0.0, 0.1, 0.1, 0.3]], dtype=torch.float64)
    return [
        Case("random norms (K=25, n=16), ε = 0.5, float32", (_norms(g, 25, 16), 0.5), grad="none"),
        Case("random norms (K=40, n=10), ε = 0.1, float64", (_norms(g, 40, 10, torch.float64), 0.1), grad="none"),
        Case("norms exactly at ε = 0.1 (K=2, n=4), float64", (edge, 0.1), grad="none"),
        Case("all zero (K=5, n=3), ε = 0.1, float32", (torch.zeros(5, 3), 0.1), grad="none"),
        Case("one capsule (K=7, n=1), ε = 0.3, float64", (_norms(g, 7, 1, torch.float64), 0.3), grad="none"),
    ]


def _active_strict(x, eps):
    return (x > eps).to(x.dtype).mean()


def _active_sum(x, eps):
    return (x >= eps).to(x.dtype).sum(dim=1).mean()


def _active_any(x, eps):
    return (x >= eps).any(dim=0).to(x.dtype).mean()


_ACTIVE_WRONG = (
    WrongAnswer("strict inequality", _active_strict,
                "a capsule is active when its norm is ≥ ε (greater than *or equal*)."),
    WrongAnswer("cas instead of car", _active_sum,
                "that is cas, the mean number of active capsules per image; the rate car divides it by n."),
    WrongAnswer("active on any image", _active_any,
                "count, for every image, the capsules active on *that* image, then average over the images; "
                "not the capsules that are active on at least one image."),
)


register(
    Task("04.dyr", "Dynamic routing coefficient", 2, _ref_dyr, _dyr_cases,
         hint="dyr = mean over lower capsules i and targets j of std_k(c[k, i, j]) (over the images, ddof 0), "
              "divided by √((1 − 1/n)/n); return a 0-d tensor (chapter 04, routing dynamics).",
         outputs=("dyr",), wrong_answers=_DYR_WRONG, input_names=("couplings",), function="dyr",
         answers=(routing_dynamics, routing_dynamics_per_capsule)),
    Task("04.dead_capsules", "The dead-capsule mask", 1, _ref_dead, _dead_cases,
         hint="dead_j = (mean_k ‖u_kj‖ ≤ ε₁) and (std_k ‖u_kj‖ ≤ ε₂), over the images (dim 0), std with ddof 0; "
              "return a bool tensor of shape (n,) (chapter 04, capsule activation).",
         outputs=("dead",), wrong_answers=_DEAD_WRONG, input_names=("norms",), function="dead_capsules",
         answers=(dead_mask, activation_stats)),
    Task("04.active_rate", "The rate of active capsules", 1, _ref_active_rate, _active_cases,
         hint="car = (1/k Σ_images Σ_capsules 1[‖u‖ ≥ ε]) / n, a 0-d tensor in the dtype of the norms "
              "(chapter 04, capsule activation).",
         outputs=("car",), wrong_answers=_ACTIVE_WRONG, input_names=("norms",), function="active_rate",
         answers=(active_mask, activation_stats)),
)
