"""The graded exercises of chapter 03 (gradients through routing): ``03.softmax_jacobian``,
``03.constant_coupling_gradient``, ``03.detached_routing``.

Each task has the course's reference (from :mod:`capsule_lab.gradients` and :mod:`capsule_lab.routing`),
the seeded random and edge-case inputs it is checked on, the known wrong answers with their hints and a
general hint pointing to its section of chapter 03. Registered with
:func:`capsule_lab.grading.tasks.register` on import.
"""

from __future__ import annotations

import torch

from ..capsules import squash
from ..gradients import softmax_jacobian, squash_jacobian, vote_gradient
from ..routing import DynamicRouter, VoteFreeRouter, dynamic_routing, routing_step, vote_free_routing
from .tasks import Case, Task, WrongAnswer, generator, randn, register


# --- 03.softmax_jacobian ----------------------------------------------------------------------------

def _softmax_jacobian_cases() -> list:
    g = generator(301)
    couplings = lambda *shape, dtype=torch.float32, scale=1.0: torch.softmax(  # noqa: E731
        randn(g, *shape, dtype=dtype, scale=scale), dim=-1)
    return [
        Case("random couplings (2, 5, 4), float32", (couplings(2, 5, 4),)),
        Case("random couplings (3, 6, 10), float64", (couplings(3, 6, 10, dtype=torch.float64),)),
        Case("uniform couplings (2, 3, 5), float64", (torch.full((2, 3, 5), 0.2, dtype=torch.float64),)),
        Case("nearly one-hot couplings (2, 4, 3), float64", (couplings(2, 4, 3, dtype=torch.float64, scale=20.0),)),
        Case("a single coupling vector (6,), float32", (couplings(6),)),
        Case("one output capsule (2, 4, 1), float32: c = 1", (torch.ones(2, 4, 1),)),
    ]


_SOFTMAX_JACOBIAN_WRONG = (
    WrongAnswer("diagonal only", lambda c: torch.diag_embed(c * (1 - c)),
                "you kept only the diagonal c_j(1 − c_j). Raising b_k also lowers every other c_j: the "
                "off-diagonal entries are −c_j c_k."),
    WrongAnswer("plus sign off the diagonal", lambda c: torch.diag_embed(c * (1 - c)) + (
        c.unsqueeze(-1) * c.unsqueeze(-2) - torch.diag_embed(c * c)),
                "the off-diagonal entries are −c_j c_k, not +c_j c_k (the printed eq. 3 of the supplement has "
                "this slip): the rows must sum to 0 because Σ_j c_j = 1 for every b."),
    WrongAnswer("outer product only", lambda c: -c.unsqueeze(-1) * c.unsqueeze(-2),
                "∂c_j/∂b_k = c_j (δ_jk − c_k): you dropped the δ_jk c_j part (add diag(c))."),
)


# --- 03.constant_coupling_gradient ------------------------------------------------------------------

def _ref_term1(couplings, sums, grad_poses):
    delta = torch.einsum("bjed,bje->bjd", squash_jacobian(sums), grad_poses)
    return couplings.unsqueeze(-1) * delta.unsqueeze(1)


def _term1_cases() -> list:
    g = generator(302)

    def case(name, B, I, J, D, dtype=torch.float32, scale=1.0):
        c = torch.softmax(randn(g, B, I, J, dtype=dtype), dim=-1)
        return Case(name, (c, randn(g, B, J, D, dtype=dtype, scale=scale), randn(g, B, J, D, dtype=dtype)), grad="none")

    return [
        case("random (B, I, J, D) = (2, 5, 3, 4), float32", 2, 5, 3, 4),
        case("random (1, 8, 10, 16), float64", 1, 8, 10, 16, dtype=torch.float64),
        case("short sums ‖s‖ ≈ 0.1 (2, 4, 3, 2), float64", 2, 4, 3, 2, dtype=torch.float64, scale=0.05),
        case("long sums ‖s‖ ≈ 20 (2, 4, 3, 2), float64", 2, 4, 3, 2, dtype=torch.float64, scale=10.0),
        case("one input capsule (3, 1, 4, 3), float32", 3, 1, 4, 3),
    ]


def _through_squash(s, grad_v):
    """(∂v/∂s)ᵀ ∂L/∂v in plain torch (the wrong answers must not call the functions the task refuses)."""
    n = s.norm(dim=-1, keepdim=True)
    unit = s / n.clamp_min(1e-30)
    along = (unit * grad_v).sum(dim=-1, keepdim=True)
    return n / (1 + n ** 2) * grad_v + n * (1 - n ** 2) / (1 + n ** 2) ** 2 * along * unit


_TERM1_WRONG = (
    WrongAnswer("squash Jacobian forgotten", lambda c, s, gv: c.unsqueeze(-1) * gv.unsqueeze(1),
                "term 1 is c_im · ∂L/∂s_m, and ∂L/∂s = (∂v/∂s)ᵀ ∂L/∂v: pass ∂L/∂v back through the squash "
                "(chapter 03, eq. of the squash Jacobian)."),
    WrongAnswer("coupling forgotten",
                lambda c, s, gv: torch.ones_like(c).unsqueeze(-1) * _through_squash(s, gv).unsqueeze(1),
                "s_m = Σ_i c_im û_{m|i}, so the vote û_{m|i} reaches s_m multiplied by c_im: scale by the coupling."),
    WrongAnswer("plain-norm Jacobian", lambda c, s, gv: c.unsqueeze(-1) * (
        gv * (s.norm(dim=-1, keepdim=True) / (1 + s.norm(dim=-1, keepdim=True) ** 2))).unsqueeze(1),
                "you kept only f(‖s‖) I of the squash Jacobian f I + n f'(n) ŝŝᵀ: the length of v changes with "
                "‖s‖ too."),
)


# --- 03.detached_routing ----------------------------------------------------------------------------

def _ref_detached(votes, iterations):
    return dynamic_routing(votes, iterations, detach_couplings=True).poses


def _detached_cases() -> list:
    g = generator(303)
    return [
        Case("random votes (2, 6, 3, 4), 1 iteration, float32", (randn(g, 2, 6, 3, 4), 1)),
        Case("random votes (2, 6, 3, 4), 3 iterations, float64", (randn(g, 2, 6, 3, 4, dtype=torch.float64), 3)),
        Case("random votes (1, 10, 5, 8), 2 iterations, float32", (randn(g, 1, 10, 5, 8), 2)),
        Case("long votes (2, 5, 4, 4) (‖û‖ ≈ 6), 5 iterations, float64",
             (randn(g, 2, 5, 4, 4, dtype=torch.float64, scale=3.0), 5)),
        Case("one output capsule (2, 5, 1, 4), 3 iterations, float32", (randn(g, 2, 5, 1, 4), 3)),
    ]


def _full_routing(votes, iterations):
    b = torch.zeros(votes.shape[:3], dtype=votes.dtype)
    for _ in range(iterations):
        v = squash(torch.einsum("bij,bijd->bjd", torch.softmax(b, dim=-1), votes))
        b = b + torch.einsum("bijd,bjd->bij", votes, v)
    return v


_DETACHED_WRONG = (
    # (Detaching the votes in all but the last iteration is *not* a wrong answer: with zero priors it gives
    # exactly the same vote gradient, term 1 — chapter 03 shows why. Detaching everything is caught by the
    # checker's own "carries no gradient" message.)
    WrongAnswer("nothing detached", _full_routing,
                "the poses are right but the gradients flow through the couplings: use c.detach() in the "
                "weighted sum s_j = Σ_i c_ij û_{j|i} (the couplings are constants in the backward pass)."),
)


register(
    Task("03.softmax_jacobian", "The softmax Jacobian of the couplings", 1, softmax_jacobian,
         _softmax_jacobian_cases,
         hint="∂c_j/∂b_k = c_j (δ_jk − c_k) over the last dimension: diag(c) − c cᵀ, shape (..., J, J) "
              "(chapter 03, section 3).",
         outputs=("jacobian",), wrong_answers=_SOFTMAX_JACOBIAN_WRONG, input_names=("couplings",),
         function="softmax_jacobian"),
    Task("03.constant_coupling_gradient", "The constant-coupling gradient (term 1)", 2, _ref_term1, _term1_cases,
         hint="term 1 of ∂L/∂û_{m|i} is c_im (∂v/∂s)(s_m)ᵀ ∂L/∂v_m, shape (B, I, J, D); the squash Jacobian is "
              "f(n) I + n f'(n) ŝŝᵀ with f(n) = n/(1 + n²) (chapter 03, section 2).",
         outputs=("term1",), wrong_answers=_TERM1_WRONG,
         nonfinite_hint="compute ŝ = s/‖s‖ and f(n) without dividing by zero.",
         input_names=("couplings", "sums", "grad_poses"), function="term1",
         answers=(squash_jacobian, vote_gradient)),
    Task("03.detached_routing", "Dynamic routing with detached couplings", 2, _ref_detached, _detached_cases,
         hint="Sabour's routing, but the weighted sum uses c.detach(): same poses, and the gradient w.r.t. the "
              "votes is term 1 only (chapter 03, sections 1 and 5).",
         outputs=("poses",), wrong_answers=_DETACHED_WRONG,
         nonfinite_hint="compute the softmax stably (torch.softmax) and the squash with ε inside the square root.",
         input_names=("votes",), function="routing",
         answers=(dynamic_routing, vote_free_routing, routing_step, DynamicRouter.__call__, VoteFreeRouter.__call__)),
)
