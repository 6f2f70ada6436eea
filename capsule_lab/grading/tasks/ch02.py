"""The graded exercises of chapter 02 (dynamic routing): ``02.couplings``, ``02.routing_step``
(implementations), ``02.dynamic_routing`` (a bug hunt), ``02.predict_coupling`` (a prediction) and
``02.coupling_sharpness`` (a mini-experiment).

Each task has the course's reference (from :mod:`capsule_lab.routing` and :mod:`capsule_lab.layers`, or a
few lines of plain torch for the prediction and the experiment), the seeded random and edge-case inputs it
is checked on, in named case groups (partial credit), the known wrong answers with their hints and a
general hint pointing to its section of chapter 02. Registered with
:func:`capsule_lab.grading.tasks.registry.register` on import.
"""

from __future__ import annotations

import math

import torch

from ...capsules import squash
from ...layers.votes import capsule_votes
from ...routing import (DynamicRouter, agreement, dynamic_compatibility, dynamic_routing, dynamic_routing_generic,
                        generic_routing, routing_step, vote_free_routing)
from .registry import Case, Task, WrongAnswer, generator, randn, register

_ROUTING = (routing_step, agreement, dynamic_routing, vote_free_routing, capsule_votes,
            DynamicRouter.forward, DynamicRouter.route_weights, generic_routing, dynamic_routing_generic,
            dynamic_compatibility)


def _squash(s):
    n2 = (s * s).sum(dim=-1, keepdim=True)
    return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-16)


# --- 02.couplings -----------------------------------------------------------------------------------

def _ref_couplings(logits):
    return torch.softmax(logits, dim=-1)


def _couplings_cases() -> list:
    g = generator(201)
    large = randn(g, 2, 5, 4, scale=1000.0)
    return [
        Case("random logits (2, 6, 4), float32", (randn(g, 2, 6, 4),), group="float32 and float64"),
        Case("random logits (3, 5, 10), float64", (randn(g, 3, 5, 10, dtype=torch.float64),),
             group="float32 and float64"),
        Case("zero logits (2, 7, 3): uniform couplings, float32", (torch.zeros(2, 7, 3),), group="float32 and float64"),
        Case("logits of ±1000 (2, 5, 4), float32", (large,), group="±1000 logits"),
        Case("logits of ±1500 (2, 5, 4), float64", (large.double() * 1.5,), group="±1000 logits"),
        Case("one input capsule (2, 1, 5), float64", (randn(g, 2, 1, 5, dtype=torch.float64),),
             group="I = 1 or J = 1"),
        Case("one output capsule (2, 4, 1), float32", (randn(g, 2, 4, 1),), group="I = 1 or J = 1"),
    ]


_COUPLINGS_WRONG = (
    WrongAnswer("softmax over inputs", lambda b: torch.softmax(b, dim=1),
                "your couplings sum to 1 over the input capsules i (dim 1): each output would get one unit "
                "of weight whatever the evidence. Each input capsule shares its own unit among the parents j "
                "(chapter 02, the warning on the softmax axis)."),
    WrongAnswer("softmax over everything", lambda b: torch.softmax(b.flatten(1), dim=1).view_as(b),
                "your couplings sum to 1 over the whole (I, J) table of a sample: each input capsule i has "
                "its own unit to share among the parents j."),
    WrongAnswer("dtype slip", lambda b: torch.softmax(b.float(), dim=-1),
                "a dtype slip: float64 logits come back as float32 couplings. Somewhere a float32 tensor enters "
                "(a new tensor or constant made without the input's dtype, or a .float())."),
)


# --- 02.routing_step (vote-free) ---------------------------------------------------------------------

def _ref_routing_step(inputs, weights, logits):
    votes = capsule_votes(inputs, weights)
    step = routing_step(votes, logits)
    return step.poses, logits + agreement(votes, step.poses)


def _routing_step_cases() -> list:
    g = generator(202)
    return [
        Case("inputs (2, 6, 4), weights (6, 3, 5, 4), random logits, float32",
             (randn(g, 2, 6, 4), randn(g, 6, 3, 5, 4, scale=0.5), randn(g, 2, 6, 3)), group="float32"),
        Case("inputs (1, 8, 8), weights (8, 5, 6, 8), zero logits, float64",
             (randn(g, 1, 8, 8, dtype=torch.float64), randn(g, 8, 5, 6, 8, dtype=torch.float64, scale=0.3),
              torch.zeros(1, 8, 5, dtype=torch.float64)), group="float64"),
        Case("inputs (3, 4, 3), weights (4, 4, 5, 3), logits of ±30, float64",
             (randn(g, 3, 4, 3, dtype=torch.float64), randn(g, 4, 4, 5, 3, dtype=torch.float64),
              randn(g, 3, 4, 4, dtype=torch.float64, scale=30.0)), group="edge cases"),
        Case("one input and one output capsule: inputs (2, 1, 3), weights (1, 1, 2, 3), float64",
             (randn(g, 2, 1, 3, dtype=torch.float64), randn(g, 1, 1, 2, 3, dtype=torch.float64),
              randn(g, 2, 1, 1, dtype=torch.float64)), group="edge cases"),
    ]


def _step_variant(softmax_dim=-1, update=True, detach=False, squash_s=True, agree_with_s=False):
    def step(u, W, b):
        votes = torch.einsum("ijdk,bik->bijd", W, u)
        s = torch.einsum("bij,bijd->bjd", torch.softmax(b, dim=softmax_dim), votes)
        v = _squash(s) if squash_s else s
        a = torch.einsum("bijd,bjd->bij", votes, s if agree_with_s else v)
        return v, (b + (a.detach() if detach else a)) if update else b
    return step


_ROUTING_STEP_WRONG = (
    WrongAnswer("logits not updated", _step_variant(update=False),
                "your new logits equal the old ones: the agreement of each vote with its output is missing "
                "from b'."),
    WrongAnswer("detached update", _step_variant(detach=True),
                "the values are right but the gradients are not: part of your computation is cut off from "
                "autograd (a .detach(), torch.no_grad() or a .data). Algorithm 1 lets gradients flow through "
                "the update of b."),
    WrongAnswer("softmax over inputs", _step_variant(softmax_dim=1),
                "your couplings sum to 1 over the input capsules i, not over the outputs j (chapter 02, the "
                "warning on the softmax axis)."),
    WrongAnswer("agreement with s", _step_variant(agree_with_s=True),
                "your poses are right but your new logits are not: the agreement is measured with the squashed "
                "output v_j, not with s_j."),
    WrongAnswer("no squash", _step_variant(squash_s=False),
                "your poses are longer than 1: the output capsule is squashed, and the agreement uses it."),
)


# --- 02.dynamic_routing (bug hunt) ------------------------------------------------------------------

def _ref_dynamic_routing(votes, iterations):
    return dynamic_routing(votes, iterations).poses


def _dynamic_cases() -> list:
    g = generator(203)
    return [
        Case("votes (2, 6, 3, 4), r = 3, float32", (randn(g, 2, 6, 3, 4), 3), group="float32"),
        Case("votes (2, 8, 4, 6), r = 1, float32", (randn(g, 2, 8, 4, 6), 1), group="float32"),
        Case("one output capsule: votes (2, 5, 1, 4), r = 3, float32", (randn(g, 2, 5, 1, 4), 3), group="float32"),
        Case("votes (2, 6, 3, 4), r = 2, float64", (randn(g, 2, 6, 3, 4, dtype=torch.float64), 2), group="float64"),
        Case("votes (1, 10, 5, 8), r = 4, float64", (randn(g, 1, 10, 5, 8, dtype=torch.float64), 4), group="float64"),
        Case("long votes (2, 6, 3, 4) (‖û‖ ≈ 6), r = 5, float64",
             (randn(g, 2, 6, 3, 4, dtype=torch.float64, scale=3.0), 5), group="float64"),
    ]


def _routing_variant(softmax_dim=-1, update=True, detach=False, extra=0):
    def route(votes, iterations):
        b = torch.zeros(votes.shape[:3], dtype=votes.dtype)
        for r in range(iterations + extra):
            v = _squash(torch.einsum("bij,bijd->bjd", torch.softmax(b, dim=softmax_dim), votes))
            if update:
                a = torch.einsum("bijd,bjd->bij", votes, v)
                b = b + (a.detach() if detach else a)
        return v
    return route


_DYNAMIC_WRONG = (
    WrongAnswer("softmax over inputs", _routing_variant(softmax_dim=1),
                "your couplings sum to 1 over the input capsules i, so each output capsule gets exactly one "
                "unit of weight and s_j is an average of its votes (chapter 02, the warning on the softmax "
                "axis). Find which axis of *these* logits holds the outputs j."),
    WrongAnswer("one iteration too many", _routing_variant(extra=1),
                "your poses are those of r + 1 iterations: `iterations` counts softmax–sum–squash steps, the "
                "first one with b = 0."),
    WrongAnswer("one iteration too few", _routing_variant(extra=-1),
                "your poses are those of r − 1 iterations: `iterations` counts softmax–sum–squash steps, the "
                "first one with b = 0."),
    WrongAnswer("no update", _routing_variant(update=False),
                "your poses are those of uniform routing, whatever r: the logits never change between "
                "iterations."),
    WrongAnswer("detached update", _routing_variant(detach=True),
                "the values are right but the gradients are not: part of the loop is cut off from autograd "
                "(a .detach(), torch.no_grad() or a .data). Algorithm 1 lets gradients flow through every "
                "iteration."),
)


# --- 02.predict_coupling (prediction) ---------------------------------------------------------------

def _ref_predict_coupling():
    # iteration 1, c = 1/2: s_0 = 4 · ½ · (1, 0) = (2, 0), ‖v_0‖ = 4/5; s_1 = 4 · ½ · (0, ½) = (0, 1), ‖v_1‖ = ½
    a0 = 1.0 * 0.8        # ⟨û_0|i, v_0⟩
    a1 = 0.5 * 0.5        # ⟨û_1|i, v_1⟩
    return math.exp(a0) / (math.exp(a0) + math.exp(a1))


_OTHER_OUTPUT = 1 - _ref_predict_coupling()   # (a constant: the reference refuses to run while a student's answer does)


def _sigmoid(x):
    return 1 / (1 + math.exp(-x))


_PREDICT_WRONG = (
    WrongAnswer("uniform", lambda: 0.5,
                "0.5 is the coupling that iteration 1 uses (b = 0); the question is the coupling after the "
                "first update of b."),
    WrongAnswer("no squash", lambda: _sigmoid(2.0 - 0.5),
                "you measured the agreement with s_j; it is measured with v_j = squash(s_j), whose length is "
                "‖s‖²/(1+‖s‖²)."),
    WrongAnswer("softmax over inputs", lambda: 0.25,
                "0.25 = 1/I is a softmax over the four input capsules; each input shares its unit among the "
                "two outputs."),
    WrongAnswer("the other output", lambda: _OTHER_OUTPUT,
                "that is the coupling to output 1; the question asks for output 0."),
    WrongAnswer("output 1 forgotten", lambda: _sigmoid(0.8),
                "both logits of an input grow: its vote for output 1 agrees with v_1 too."),
)


# --- 02.coupling_sharpness (mini-experiment) --------------------------------------------------------

def _sharpness(vote_length, seed, iterations=3, extra_update=False, softmax_dim=-1, max_dim=-1, normalise=True):
    g = torch.Generator().manual_seed(seed)
    votes = torch.randn(4, 64, 10, 16, generator=g, dtype=torch.float64)
    votes = votes / votes.norm(dim=-1, keepdim=True) * vote_length if normalise else votes * vote_length
    b = torch.zeros(4, 64, 10, dtype=torch.float64)
    for _ in range(iterations):
        c = torch.softmax(b, dim=softmax_dim)
        v = _squash(torch.einsum("bij,bijd->bjd", c, votes))
        b = b + torch.einsum("bijd,bjd->bij", votes, v)
    if extra_update:
        c = torch.softmax(b, dim=softmax_dim)
    return float(c.max(dim=max_dim).values.mean())


def _ref_coupling_sharpness(vote_length, seed=0):
    return _sharpness(vote_length, seed)


def _sharpness_cases() -> list:
    return [Case(f"vote length {name}, seed {seed}", (x, seed), grad="none", group=f"vote length {name}")
            for x, name, seed in ((0.2, "0.2", 11), (1.0, "1", 12), (5.0, "5", 13))]


_SHARPNESS_WRONG = (
    WrongAnswer("after the last update", lambda x, seed=0: _sharpness(x, seed, extra_update=True),
                "your couplings are one update too sharp: report the couplings that produced the last poses "
                "v⁽³⁾, not a softmax of the logits updated after them."),
    WrongAnswer("two iterations", lambda x, seed=0: _sharpness(x, seed, iterations=2),
                "your couplings are those of iteration 2: r = 3 iterations, the third one's couplings."),
    WrongAnswer("softmax over inputs", lambda x, seed=0: _sharpness(x, seed, softmax_dim=1),
                "your couplings are far below 1/J = 0.1: they sum to 1 over the 64 input capsules, not over "
                "the 10 outputs."),
    WrongAnswer("max over inputs", lambda x, seed=0: _sharpness(x, seed, max_dim=1),
                "you took the largest coupling over the input capsules i; the question is each input's "
                "largest coupling over the outputs j, averaged over the inputs and the batch."),
    WrongAnswer("votes not rescaled", lambda x, seed=0: _sharpness(x, seed, normalise=False),
                "your votes are about 4 times too long: a standard normal vector in 16-D has length about 4; "
                "rescale each vote to length `vote_length`."),
)


register(
    Task("02.couplings", "Coupling coefficients", 1, _ref_couplings, _couplings_cases,
         hint="c_ij sums to 1 over the output capsules j, for every sample b and input capsule i, and keeps the "
              "logits' dtype (chapter 02, §1 parts vote for wholes, the softmax of the logits).",
         outputs=("couplings",), wrong_answers=_COUPLINGS_WRONG,
         nonfinite_hint="nan or inf at large logits: exp(1000) overflows. A softmax does not change when the "
                        "same number is subtracted from all the logits of one input capsule.",
         input_names=("logits",), function="couplings"),
    Task("02.routing_step", "One routing iteration from the inputs and the weights", 2, _ref_routing_step,
         _routing_step_cases,
         hint="one iteration of Algorithm 1 where the votes are W_ij u_i (chapter 02, eq. routing-votes, and "
              "§7 routing without votes, for contracting with W_ij directly): couplings, weighted sum, squash, and the new "
              "logits b + agreement; nothing detached.",
         outputs=("poses", "new_logits"), wrong_answers=_ROUTING_STEP_WRONG,
         nonfinite_hint="nan or inf: check the softmax at large logits and the squash at s = 0.",
         input_names=("inputs", "weights", "logits"), function="routing_step", answers=_ROUTING,
         allowed=("capsule_lab.capsules.squash",)),
    Task("02.dynamic_routing", "Dynamic routing (bug hunt)", 2, _ref_dynamic_routing, _dynamic_cases,
         hint="Algorithm 1 (chapter 02, §1 parts vote for wholes): b = 0, then r times softmax over the outputs, "
              "weighted sum, squash, agreement; the poses of the last iteration, nothing detached.",
         outputs=("poses",), wrong_answers=_DYNAMIC_WRONG,
         nonfinite_hint="nan or inf: check the softmax at large logits and the squash at s = 0.",
         input_names=("votes",), function="dynamic_routing", answers=_ROUTING, kind="bug hunt",
         place_hint="the wrong line is inside the loop, before the weighted sum.",
         planted=(("c = torch.softmax(logits, dim=-1)", "a line inside the loop, before the weighted sum"),),
         allowed=("capsule_lab.capsules.squash",)),
    Task("02.predict_coupling", "Prediction: a coupling after one update", 1, _ref_predict_coupling,
         lambda: [Case("your prediction", (), grad="none")],
         hint="route the four votes by hand for one iteration as chapter 02 does in §2 routing by hand on a toy: uniform "
              "couplings, s_j, v_j = squash(s_j), the agreements, then the softmax of the new logits.",
         outputs=("coupling",), wrong_answers=_PREDICT_WRONG, function="predict_coupling",
         kind="prediction", returns_number=True, atol=0.01, rtol=0.0),
    Task("02.coupling_sharpness", "Mini-experiment: how sharp routing gets on random votes", 1,
         _ref_coupling_sharpness, _sharpness_cases,
         hint="votes (4, 64, 10, 16) drawn in float64 from the seed and rescaled to length vote_length; r = 3 "
              "iterations from b = 0; the mean over samples and inputs of max_j c_ij of the third "
              "iteration's couplings (chapter 02, §6 what changes with 1, 3, 5 iterations, measures the same on a trained network).",
         outputs=("mean max coupling",), wrong_answers=_SHARPNESS_WRONG, function="mean_max_coupling",
         kind="experiment", returns_number=True, atol=5e-5, rtol=0.0, answers=_ROUTING, allowed=("capsule_lab.capsules.squash",)),
)
