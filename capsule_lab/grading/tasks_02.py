"""The graded exercises of chapter 02 (dynamic routing): ``02.couplings``, ``02.routing_step``,
``02.dynamic_routing``.

Each task has the course's reference (from :mod:`capsule_lab.routing`), the seeded random and edge-case
inputs it is checked on, the known wrong answers with their hints and a general hint pointing to its
section of chapter 02. Registered with :func:`capsule_lab.grading.tasks.register` on import.
"""

from __future__ import annotations

import torch

from ..capsules import squash
from ..routing import DynamicRouter, VoteFreeRouter, agreement, dynamic_routing, routing_step, vote_free_routing
from .tasks import Case, Task, WrongAnswer, generator, randn, register


# --- 02.couplings -----------------------------------------------------------------------------------

def _ref_couplings(logits):
    return torch.softmax(logits, dim=-1)


def _couplings_cases() -> list:
    g = generator(201)
    large = randn(g, 2, 5, 4, scale=1000.0)
    return [
        Case("random logits (2, 6, 4), float32", (randn(g, 2, 6, 4),)),
        Case("random logits (3, 5, 10), float64", (randn(g, 3, 5, 10, dtype=torch.float64),)),
        Case("zero logits (2, 7, 3): uniform couplings, float32", (torch.zeros(2, 7, 3),)),
        Case("large logits (±1000) (2, 5, 4), float32", (large,)),
        Case("large logits (±1000) (2, 5, 4), float64", (large.double() * 1.5,)),
        Case("one input capsule (2, 1, 5), float64", (randn(g, 2, 1, 5, dtype=torch.float64),)),
        Case("one output capsule (2, 4, 1), float32", (randn(g, 2, 4, 1),)),
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
    g = generator(202)
    return [
        Case("random votes (2, 6, 3, 4) and logits, float32", (randn(g, 2, 6, 3, 4), randn(g, 2, 6, 3))),
        Case("random votes (1, 8, 5, 8), zero logits, float64",
             (randn(g, 1, 8, 5, 8, dtype=torch.float64), torch.zeros(1, 8, 5, dtype=torch.float64))),
        Case("random votes (3, 4, 4, 6), large logits (±30), float64",
             (randn(g, 3, 4, 4, 6, dtype=torch.float64), randn(g, 3, 4, 4, dtype=torch.float64, scale=30.0))),
        Case("long votes (2, 5, 3, 4) (‖û‖ ≈ 10), float32", (randn(g, 2, 5, 3, 4, scale=5.0), randn(g, 2, 5, 3))),
        Case("one input and one output capsule (2, 1, 1, 3), float64",
             (randn(g, 2, 1, 1, 3, dtype=torch.float64), randn(g, 2, 1, 1, dtype=torch.float64))),
    ]


def _step_softmax_inputs(u, b):
    v = squash(torch.einsum("bij,bijd->bjd", torch.softmax(b, dim=1), u))
    return v, b + torch.einsum("bijd,bjd->bij", u, v)


def _step_poses(u, b):
    return squash(torch.einsum("bij,bijd->bjd", torch.softmax(b, dim=-1), u))


def _step_no_update(u, b):
    return _step_poses(u, b), b


def _step_detached(u, b):
    v = _step_poses(u, b)
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
    g = generator(203)
    return [
        Case("random votes (2, 6, 3, 4), 1 iteration, float32", (randn(g, 2, 6, 3, 4), 1)),
        Case("random votes (2, 6, 3, 4), 2 iterations, float64", (randn(g, 2, 6, 3, 4, dtype=torch.float64), 2)),
        Case("random votes (2, 8, 4, 6), 3 iterations, float32", (randn(g, 2, 8, 4, 6), 3)),
        Case("random votes (1, 10, 5, 8), 4 iterations, float64",
             (randn(g, 1, 10, 5, 8, dtype=torch.float64), 4)),
        Case("long votes (2, 6, 3, 4) (‖û‖ ≈ 6), 5 iterations, float64",
             (randn(g, 2, 6, 3, 4, dtype=torch.float64, scale=3.0), 5)),
        Case("one output capsule (2, 5, 1, 4), 3 iterations, float32", (randn(g, 2, 5, 1, 4), 3)),
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


register(
    Task("02.couplings", "Coupling coefficients", 1, _ref_couplings, _couplings_cases,
         hint="c_ij = exp(b_ij) / Σ_k exp(b_ik): a softmax over the output capsules (last dimension), computed "
              "stably (subtract the maximum over j first, or use torch.softmax) (chapter 02, routing by hand).",
         outputs=("couplings",), wrong_answers=_COUPLINGS_WRONG,
         nonfinite_hint="large logits overflow exp(): subtract max_j b_ij before exponentiating (the softmax "
                        "does not change), or use torch.softmax(b, dim=-1).",
         input_names=("logits",), function="couplings"),
    Task("02.routing_step", "One routing iteration", 2, _ref_routing_step, _routing_step_cases,
         hint="c = softmax_j(b); s_j = Σ_i c_ij û_{j|i}; v_j = squash(s_j); return (v, b + ⟨û_{j|i}, v_j⟩) with "
              "nothing detached (chapter 02, routing iteration by iteration).",
         outputs=("poses", "new_logits"), wrong_answers=_ROUTING_STEP_WRONG,
         nonfinite_hint="compute the softmax stably (torch.softmax) and the squash with ε inside the square root.",
         input_names=("votes", "logits"), function="routing_step",
         answers=(routing_step, agreement, dynamic_routing, vote_free_routing,
                  DynamicRouter.__call__, VoteFreeRouter.__call__)),
    Task("02.dynamic_routing", "Dynamic routing", 2, _ref_dynamic_routing, _dynamic_cases,
         hint="start from b = 0; repeat `iterations` times: c = softmax_j(b), v = squash(Σ_i c û), b ← b + ⟨û, v⟩; "
              "return the last v, shape (B, J, D), nothing detached (chapter 02, the vectorised routing).",
         outputs=("poses",), wrong_answers=_DYNAMIC_WRONG,
         nonfinite_hint="compute the softmax stably (torch.softmax) and the squash with ε inside the square root.",
         input_names=("votes",), function="dynamic_routing",
         answers=(dynamic_routing, vote_free_routing, routing_step, agreement,
                  DynamicRouter.__call__, VoteFreeRouter.__call__)),
)
