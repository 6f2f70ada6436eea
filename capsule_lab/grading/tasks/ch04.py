"""The graded exercises of chapter 04 (dead capsules): ``04.dyr`` (a bug hunt), ``04.dead_capsules``,
``04.active_rate``, ``04.dead_spike`` (a prediction) and ``04.revival`` (a mini-experiment).

Each task has the course's reference (the definitions of Mitterreiter et al., 2023, as in
:mod:`capsule_lab.measures.capsule_stats`; for the prediction and the experiment, written here: the experiment trains a
small
:class:`~capsule_lab.models.DeepCapsNet`), seeded random and edge-case inputs (values exactly at a threshold, a
perfect routing, a static one) in named case groups, known wrong answers with their hints and a general hint
pointing to its section of chapter 04. Letters are the chapter's: image i of k, capsule j of n. Registered with
:func:`capsule_lab.grading.tasks.registry.register` on import.
"""

from __future__ import annotations

import math

import torch

from ...capsules import margin_loss
from ...measures.capsule_stats import (active_mask, activation_stats, dead_mask, routing_dynamics,
                                       routing_dynamics_per_capsule)
from ...models import DeepCapsNet, DeepCapsNetConfig
from .registry import Case, Task, WrongAnswer, generator, randn, register


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
        Case("random couplings (k=20, I=6, n=5), float32", (_couplings(g, 20, 6, 5),), grad="none", group="float32"),
        Case("two targets (k=9, I=2, n=2), float32", (_couplings(g, 9, 2, 2),), grad="none", group="float32"),
        Case("random couplings (k=50, I=16, n=16), float64", (_couplings(g, 50, 16, 16, torch.float64),),
             grad="none", group="float64"),
        Case("sharp couplings (k=30, I=4, n=10), float64",
             (_couplings(g, 30, 4, 10, torch.float64, scale=8.0),), grad="none", group="float64"),
        Case("a perfect routing (k=12, I=3, n=4): dyr = 1, float64", (perfect,), grad="none",
             group="perfect and static routings"),
        Case("a static one-hot routing (k=10, I=3, n=4): dyr = 0, float64", (static,), grad="none",
             group="perfect and static routings"),
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
    n = c.shape[-1]
    return n * c.std(dim=0, correction=0).mean() / math.sqrt((1 - 1 / n) / n)


_DYR_WRONG = (
    WrongAnswer("std over the targets", _dyr_over_targets,
                "your dyr is 1 for a static one-hot routing that sends every image to the same target: you "
                "measured how uneven the couplings are within one image (how polarised), not how much each "
                "coupling changes from image to image."),
    WrongAnswer("ddof 1", _dyr_unbiased,
                "your values are too large by √(k/(k − 1)): the chapter's standard deviation over the k images is "
                "the population one (ddof 0), and torch.std divides by k − 1 unless told otherwise."),
    WrongAnswer("not normalised", _dyr_unnormalised,
                "a perfect routing gets less than 1 from you: compare the spread with that of a perfect routing "
                "(the denominator of the chapter's dyr)."),
    WrongAnswer("dys instead of dyr", _dys,
                "a perfect routing gets n from you: that is dys = n · dyr, the number of targets; the task asks "
                "for the rate dyr."),
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
                "a capsule whose norm σ_j is just at ε₂ comes out wrong: the chapter's standard deviation over "
                "the k images is the population one (ddof 0), and torch.std divides by k − 1 unless told otherwise."),
    WrongAnswer("or", _dead_or,
                "a capsule is dead when its mean norm is ≤ ε₁ *and* its standard deviation is ≤ ε₂."),
    WrongAnswer("strict inequalities", _dead_strict,
                "the paper's test is μ ≤ ε₁ and σ ≤ ε₂ (less than *or equal*)."),
    WrongAnswer("mean only", _dead_mean_only,
                "the standard deviation over the images must be small too (σ ≤ ε₂): a capsule that is "
                "usually off but sometimes strongly on is not dead."),
    WrongAnswer("every image below the mean threshold", _dead_per_image,
                "you tested every single norm against ε₁; the test is on two statistics of each capsule's norm "
                "over the k images, its mean μ_j and its standard deviation σ_j."),
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
                "your number can exceed 1: that is cas, the mean number of active capsules per image, not the "
                "rate car."),
    WrongAnswer("active on any image", _active_any,
                "you counted the capsules that are active on at least one image; car counts, on every image i, "
                "the capsules active on that image, and averages over the k images."),
)


# --- 04.dead_spike (prediction) ----------------------------------------------------------------------

_SPIKE_IMAGES, _SPIKE_EPS = 1000, 0.01


def _ref_dead_spike():
    # norm x on one image of k, 0 on the others: μ = x/k ≤ ε₁ ⇔ x ≤ k ε₁ = 10; σ = x √((1/k)(1 − 1/k)) ≤ ε₂
    # ⇔ x ≤ ε₂ / √((1/k)(1 − 1/k)) ≈ 0.316: the standard deviation decides.
    p = 1 / _SPIKE_IMAGES
    return _SPIKE_EPS / math.sqrt(p * (1 - p))


_SPIKE_WRONG = (
    WrongAnswer("mean only", lambda: _SPIKE_IMAGES * _SPIKE_EPS,
                "at that norm the mean μ_j is just at ε₁, but a capsule is dead only when its standard "
                "deviation σ_j is small too: which of the two conditions fails first as x grows?"),
    WrongAnswer("the activity threshold", lambda: 0.1,
                "ε = 0.1 is the threshold of an *active* capsule on one image (car); the dead test is on the "
                "mean and the standard deviation of the norm over all k images."),
    WrongAnswer("every norm below ε₁", lambda: _SPIKE_EPS,
                "the dead test does not ask every single norm to be at most ε₁: it asks μ_j ≤ ε₁ and σ_j ≤ ε₂ over "
                "the k images."),
)


# --- 04.revival (mini-experiment) -------------------------------------------------------------------

_REVIVAL_STEPS, _REVIVAL_IMAGES = 10, 32


def _revival_run(optimizer, scale, seed, write=True, read=True, swapped=False, growth=False):
    """Train a small DeepCapsNet whose capsule 0 of layer 2 was shrunk by ``scale``; its mean length after."""
    torch.manual_seed(seed)
    net = DeepCapsNet(DeepCapsNetConfig(conv_channels=(8, 16), routing_layers=2))
    with torch.no_grad():
        w0, w1 = net.layers[0].weight, net.layers[1].weight        # (I, J, d, d_in)
        if swapped:
            w0[0] *= scale
            w1[:, 0] *= scale
        else:
            if write:
                w0[:, 0] *= scale                                  # the matrices that write capsule 0 of layer 2
            if read:
                w1[0] *= scale                                     # the matrices that read it
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(_REVIVAL_IMAGES, 1, 28, 28, generator=g)
    labels = torch.arange(_REVIVAL_IMAGES) % 10
    with torch.no_grad():
        before = net(images).capsules[1][:, 0].norm(dim=-1).mean().item()
    if optimizer == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(_REVIVAL_STEPS):
        loss = margin_loss(net(images).lengths, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = net(images).capsules[1][:, 0].norm(dim=-1).mean().item()
    return after / before if growth else after


def _ref_revival(optimizer, scale, seed=0):
    return _revival_run(optimizer, scale, seed)


def _revival_cases() -> list:
    return [
        Case("SGD, scale 1e-3, seed 0", ("sgd", 1e-3, 0), grad="none", group="SGD, almost dead"),
        Case("Adam, scale 1e-3, seed 0", ("adam", 1e-3, 0), grad="none", group="Adam, almost dead"),
        Case("Adam, scale 0, seed 1", ("adam", 0.0, 1), grad="none", group="dead"),
        Case("SGD, scale 0, seed 1", ("sgd", 0.0, 1), grad="none", group="dead"),
    ]


_REVIVAL_WRONG = (
    WrongAnswer("only the writing matrices shrunk", lambda o, s, seed=0: _revival_run(o, s, seed, read=False),
                "Theorem 2 has two sides: shrink the matrices that write the capsule *and* those that read it "
                "(otherwise the capsule still gets a gradient through the matrices that read it)."),
    WrongAnswer("reading and writing swapped", lambda o, s, seed=0: _revival_run(o, s, seed, swapped=True),
                "the capsule you measure was not the one you shrank: a routing layer's W has shape "
                "(I, J, d, d_in), lower capsule first, upper capsule second."),
    WrongAnswer("growth factor", lambda o, s, seed=0: _revival_run(o, s, seed, growth=True),
                "return the capsule's mean length after training, not its growth factor."),
)


register(
    Task("04.dyr", "Bug hunt: the dynamic routing coefficient", 2, _ref_dyr, _dyr_cases,
         hint="dyr compares, for every coupling, its spread over the k images with that of a perfect routing; "
              "a routing that never changes has dyr = 0, a perfect one 1 (chapter 04, §3 the paper's measurements, routing dynamics).",
         outputs=("dyr",), wrong_answers=_DYR_WRONG, input_names=("couplings",), function="dyr", kind="bug hunt",
         place_hint="the wrong line measures the spread: print its shape.",
         planted=(("spread = couplings.std(dim=-1, correction=0)", "the line that measures the spread"),),
         answers=(routing_dynamics, routing_dynamics_per_capsule)),
    Task("04.dead_capsules", "The dead-capsule mask", 1, _ref_dead, _dead_cases,
         hint="capsule j is dead when the mean μ_j and the standard deviation σ_j (ddof 0) of its norm over the k "
              "images are both at most their thresholds; return a bool tensor of shape (n,) (chapter 04, §3 the paper's measurements).",
         outputs=("dead",), wrong_answers=_DEAD_WRONG, input_names=("norms",), function="dead_capsules",
         answers=(dead_mask, activation_stats)),
    Task("04.active_rate", "The rate of active capsules", 1, _ref_active_rate, _active_cases,
         hint="car = cas / n, with cas the mean over the k images of the number of capsules whose norm is at "
              "least ε; a 0-d tensor in the dtype of the norms (chapter 04, §3 the paper's measurements).",
         outputs=("car",), wrong_answers=_ACTIVE_WRONG, input_names=("norms",), function="active_rate",
         answers=(active_mask, activation_stats)),
    Task("04.dead_spike", "Prediction: a capsule that fires once in a thousand images", 1, _ref_dead_spike,
         lambda: [Case("your prediction", (), grad="none")],
         hint="write μ_j and σ_j (ddof 0) of a norm that is x on one image of k = 1000 and 0 on the others, and "
              "solve each dead condition for x (chapter 04, §3 the paper's measurements).",
         outputs=("largest dead norm",), wrong_answers=_SPIKE_WRONG, function="predict_dead_spike",
         kind="prediction", returns_number=True, atol=0.005, rtol=0.0),
    Task("04.revival", "Mini-experiment: does an almost dead capsule come back, with SGD and with Adam?", 2,
         _ref_revival, _revival_cases,
         hint="follow the task's recipe step by step: seed, network, shrink capsule 0 of layer 2 (the matrices that "
              "write it and those that read it), images, optimiser, 10 steps, then the capsule's mean length "
              "(chapter 04, §2 two theorems about the gradient).",
         outputs=("mean length after training",), wrong_answers=_REVIVAL_WRONG, function="revival",
         kind="experiment", returns_number=True, rtol=0.02, atol=1e-9,
         allowed=("capsule_lab.models.DeepCapsNet", "capsule_lab.models.DeepCapsNetConfig",
                  "capsule_lab.capsules.margin_loss")),
)
