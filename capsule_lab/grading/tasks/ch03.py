"""The graded exercises of chapter 03 (gradients through routing): ``03.softmax_jacobian``,
``03.constant_coupling_gradient``, ``03.detached_routing`` (a bug hunt), ``03.term2_exponent`` (a prediction)
and ``03.term2_ratio`` (a mini-experiment).

Each task has the course's reference (from :mod:`capsule_lab.measures.gradients` and :mod:`capsule_lab.routing`, or
written here in plain torch for the prediction and the experiment), the seeded random and edge-case inputs it
is checked on (in named case groups, each worth an equal share of the points), the known wrong answers with
their hints and a general hint pointing to its section of chapter 03. Registered with
:func:`capsule_lab.grading.tasks.registry.register` on import.
"""

from __future__ import annotations

import torch

from ...capsules import squash
from ...measures.gradients import (capsnet_gradient_terms, gradient_terms, polarised_gradient_terms, softmax_jacobian,
                                   squash_jacobian, vote_gradient)
from ...routing import (DynamicRouter, dynamic_routing, dynamic_routing_generic, generic_routing, routing_step,
                        vote_free_routing)
from .registry import Case, Task, WrongAnswer, generator, randn, register


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
                "your off-diagonal entries are 0, but raising b_k also lowers every other c_j (the couplings "
                "always sum to 1): look at the entries with j ≠ k."),
    WrongAnswer("plus sign off the diagonal", lambda c: torch.diag_embed(c * (1 - c)) + (
        c.unsqueeze(-1) * c.unsqueeze(-2) - torch.diag_embed(c * c)),
                "your off-diagonal entries have the wrong sign (the slip of the printed eq. 3 of the "
                "supplement): the rows of the Jacobian must sum to 0, because Σ_j c_j = 1 for every b."),
    WrongAnswer("outer product only", lambda c: -c.unsqueeze(-1) * c.unsqueeze(-2),
                "your diagonal is −c_j², the δ_jk part of c_j(δ_jk − c_k) is missing."),
)


# --- 03.constant_coupling_gradient ------------------------------------------------------------------

def _ref_term1(couplings, sums, grad_poses):
    delta = torch.einsum("bjed,bje->bjd", squash_jacobian(sums), grad_poses)
    return couplings.unsqueeze(-1) * delta.unsqueeze(1)


def _term1_cases() -> list:
    g = generator(302)

    def case(name, B, I, J, D, dtype=torch.float32, scale=1.0, zero=(), group=""):
        c = torch.softmax(randn(g, B, I, J, dtype=dtype), dim=-1)
        s = randn(g, B, J, D, dtype=dtype, scale=scale)
        for b, j in zero:
            s[b, j] = 0.0
        return Case(name, (c, s, randn(g, B, J, D, dtype=dtype)), grad="none", group=group)

    return [
        case("random (B, I, J, D) = (2, 5, 3, 4), float32", 2, 5, 3, 4, group="float32"),
        case("one input capsule (3, 1, 4, 3), float32", 3, 1, 4, 3, group="float32"),
        case("random (1, 8, 10, 16), float64", 1, 8, 10, 16, dtype=torch.float64, group="float64"),
        case("short sums ‖s‖ ≈ 0.1 (2, 4, 3, 2), float64", 2, 4, 3, 2, dtype=torch.float64, scale=0.05,
             group="short and long sums"),
        case("long sums ‖s‖ ≈ 20 (2, 4, 3, 2), float64", 2, 4, 3, 2, dtype=torch.float64, scale=10.0,
             group="short and long sums"),
        case("sums s_j = 0 for some j (2, 4, 3, 4), float32", 2, 4, 3, 4, zero=((0, 1), (1, 0), (1, 2)),
             group="zero sums"),
        case("sums s_j = 0 for some j (2, 3, 5, 8), float64", 2, 3, 5, 8, dtype=torch.float64,
             zero=((0, 0), (0, 4), (1, 3)), group="zero sums"),
    ]


def _through_squash(s, grad_v, sign=1.0):
    """(∂v/∂s)ᵀ ∂L/∂v in plain torch (the wrong answers must not call the functions the task refuses);
    ``sign=-1`` flips the radial term n f'(n) ŝŝᵀ."""
    n = s.norm(dim=-1, keepdim=True)
    unit = s / n.clamp_min(1e-30)
    along = (unit * grad_v).sum(dim=-1, keepdim=True)
    return n / (1 + n ** 2) * grad_v + sign * n * (1 - n ** 2) / (1 + n ** 2) ** 2 * along * unit


def _term1_nan_at_zero(c, s, gv):
    n = s.norm(dim=-1, keepdim=True)
    unit = s / n
    along = (unit * gv).sum(dim=-1, keepdim=True)
    delta = n / (1 + n ** 2) * gv + n * (1 - n ** 2) / (1 + n ** 2) ** 2 * along * unit
    return c.unsqueeze(-1) * delta.unsqueeze(1)


_TERM1_WRONG = (
    WrongAnswer("squash Jacobian forgotten", lambda c, s, gv: c.unsqueeze(-1) * gv.unsqueeze(1),
                "you passed ∂L/∂v straight to the votes: term 1 needs ∂L/∂s, and between s and v sits the "
                "squash (chapter 03, the squash Jacobian)."),
    WrongAnswer("coupling forgotten",
                lambda c, s, gv: torch.ones_like(c).unsqueeze(-1) * _through_squash(s, gv).unsqueeze(1),
                "every input capsule i gets the same gradient for output m in your answer: how much of the "
                "vote û_{m|i} reaches s_m?"),
    WrongAnswer("plain-norm Jacobian", lambda c, s, gv: c.unsqueeze(-1) * (
        gv * (s.norm(dim=-1, keepdim=True) / (1 + s.norm(dim=-1, keepdim=True) ** 2))).unsqueeze(1),
                "you kept only the f(n) I part of the squash Jacobian: the length of v changes with ‖s‖ too "
                "(the ŝŝᵀ term)."),
    WrongAnswer("sign error in the ŝŝᵀ term",
                lambda c, s, gv: c.unsqueeze(-1) * _through_squash(s, gv, sign=-1.0).unsqueeze(1),
                "the ŝŝᵀ term has the wrong sign: f(n) = n/(1 + n²) grows for n < 1 and shrinks for n > 1, "
                "so n f'(n) changes sign at ‖s‖ = 1 — check your derivative."),
)


# --- 03.detached_routing (bug hunt) -------------------------------------------------------------------

def _ref_detached(votes, iterations):
    return dynamic_routing(votes, iterations, detach_couplings=True).poses


def _detached_cases() -> list:
    g = generator(303)
    return [
        Case("random votes (2, 6, 3, 4), 1 iteration, float32", (randn(g, 2, 6, 3, 4), 1), group="float32"),
        Case("random votes (1, 10, 5, 8), 2 iterations, float32", (randn(g, 1, 10, 5, 8), 2), group="float32"),
        Case("one output capsule (2, 5, 1, 4), 3 iterations, float32", (randn(g, 2, 5, 1, 4), 3), group="float32"),
        Case("random votes (2, 6, 3, 4), 3 iterations, float64", (randn(g, 2, 6, 3, 4, dtype=torch.float64), 3),
             group="float64"),
        Case("long votes (2, 5, 4, 4) (‖û‖ ≈ 6), 5 iterations, float64",
             (randn(g, 2, 5, 4, 4, dtype=torch.float64, scale=3.0), 5), group="long votes"),
    ]


def _plain_routing(votes, iterations, cut=None, dim=-1, extra=0):
    """Sabour's routing in plain torch, with a switch for each known mistake: ``cut`` is what is detached
    (``"couplings"``: right; ``"poses"``: v in the agreement, the bug of the exercise; None: nothing)."""
    b = torch.zeros(votes.shape[:3], dtype=votes.dtype)
    for _ in range(iterations + extra):
        c = torch.softmax(b, dim=dim)
        if cut == "couplings":
            c = c.detach()
        v = squash((c.unsqueeze(-1) * votes).sum(dim=1))
        b = b + (votes * (v.detach() if cut == "poses" else v).unsqueeze(1)).sum(dim=-1)
    return v


def _stand_in_routing(votes, iterations=3, detach=True):
    """03.detached_routing without its answers (:func:`_plain_routing`, the couplings cut when ``detach``): where the
    student's ``routing`` does not pass, 03's mini-experiment runs with this in its place (``Task.stand_in``), so one
    mistake costs one task."""
    return _plain_routing(votes, iterations, cut="couplings" if detach else None)


_DETACHED_WRONG = (
    # (Detaching the votes in all but the last iteration, or the logits, is *not* a wrong answer: with zero
    # priors it gives exactly term 1 too — chapter 03 shows why. Detaching everything is caught by the
    # checker's own "carries no gradient" message.)
    WrongAnswer("poses detached in the agreement", lambda u, r: _plain_routing(u, r, cut="poses"),
                "the poses are right, but a path through the couplings is still open: the logits depend on the "
                "votes in two ways, through v_j and directly (⟨û_{j|i}, v_j⟩ reads û twice; chapter 03, the "
                "equation for ∂B/∂û). Cutting one of them leaves part of term 2 in the gradient."),
    WrongAnswer("nothing detached", lambda u, r: _plain_routing(u, r),
                "the poses are right, but the gradient w.r.t. the votes still contains term 2: with "
                "detach=True the couplings must be constants of the backward pass."),
    WrongAnswer("softmax over the input capsules", lambda u, r: _plain_routing(u, r, cut="couplings", dim=1),
                "your couplings are normalised over the input capsules i: each input capsule distributes "
                "itself over the output capsules j (Σ_j c_ij = 1), so the softmax runs over j."),
    WrongAnswer("one iteration too many", lambda u, r: _plain_routing(u, r, cut="couplings", extra=1),
                "your poses come from one more weighted sum than asked: r iterations compute r weighted sums "
                "(the logits updated after the last one are not used)."),
)


# --- 03.term2_exponent (prediction) -------------------------------------------------------------------

def _ref_term2_exponent():
    # For votes of scale σ → 0 with Sabour's squash (f(n) = n/(1+n²) ≈ n): v ≈ ‖s‖s ~ σ², ∂v/∂s ~ σ, so
    # δ ~ σ and term 1 = c δ ~ σ; γ = ⟨δ, û⟩ ~ σ², ∂B/∂û = [i'=i] v + (∂v/∂s)ᵀ û/J ~ σ², the softmax
    # Jacobian ~ 1 (uniform couplings): term 2 ~ σ⁴, the ratio ~ σ³.
    return 3.0


_EXPONENT_WRONG = (
    WrongAnswer("2", lambda: 2.0,
                "that is the exponent of a squash that is linear near 0 (like the exponential squash of "
                "chapter 04). Sabour's squash is not: how long is v for a short s (chapter 01), and how large "
                "is ∂v/∂s there?"),
    WrongAnswer("0", lambda: 0.0,
                "exponent 0 says both terms shrink at the same rate. Count the factors of the votes in each "
                "term: term 2 has γ = ⟨δ, û⟩ and ∂B/∂û on top of δ."),
    WrongAnswer("1", lambda: 1.0,
                "count every factor of term 2 against term 1: γ = ⟨δ, û⟩ and ∂B/∂û each bring powers of σ, "
                "and v and ∂v/∂s of Sabour's squash bring more than one each."),
)


# --- 03.term2_ratio (mini-experiment) ---------------------------------------------------------------

def _ratio_votes(scale, seed):
    g = torch.Generator().manual_seed(seed)
    votes = scale * torch.randn(2, 8, 4, 8, generator=g, dtype=torch.float64)
    grad_poses = torch.randn(2, 4, 8, generator=g, dtype=torch.float64)
    return votes, grad_poses


def _ratio_gradients(scale, iterations, seed, cuts=("couplings", None), loss="projection"):
    """Autograd's gradient w.r.t. the votes for each routing in ``cuts`` (see :func:`_plain_routing`)."""
    votes, grad_poses = _ratio_votes(scale, seed)
    out = []
    for cut in cuts:
        u = votes.clone().requires_grad_(True)
        v = _plain_routing(u, iterations, cut=cut)
        L = (v * grad_poses).sum() if loss == "projection" else v.norm(dim=-1).sum()
        out.append(torch.autograd.grad(L, u)[0])
    return out


def _ref_term2_ratio(scale, iterations=3, seed=0):
    term1, total = _ratio_gradients(scale, iterations, seed)
    return float((total - term1).norm() / term1.norm())


def _ratio_cases() -> list:
    return [
        Case("σ = 0.01, 3 iterations, seed 0", (0.01, 3, 0), grad="none", group="short votes"),
        Case("σ = 0.05, 2 iterations, seed 1", (0.05, 2, 1), grad="none", group="short votes"),
        Case("σ = 1, 3 iterations, seed 2", (1.0, 3, 2), grad="none", group="unit votes"),
        Case("σ = 1, 1 iteration, seed 4: no term 2", (1.0, 1, 4), grad="none", group="unit votes"),
        Case("σ = 3, 5 iterations, seed 3", (3.0, 5, 3), grad="none", group="long votes"),
    ]


def _ratio_total(scale, iterations=3, seed=0):
    term1, total = _ratio_gradients(scale, iterations, seed)
    return float(total.norm() / term1.norm())


def _ratio_unfixed_routing(scale, iterations=3, seed=0):
    cut_poses, total = _ratio_gradients(scale, iterations, seed, cuts=("poses", None))
    return float((total - cut_poses).norm() / cut_poses.norm())


def _ratio_length_loss(scale, iterations=3, seed=0):
    term1, total = _ratio_gradients(scale, iterations, seed, loss="lengths")
    return float((total - term1).norm() / term1.norm())


_RATIO_WRONG = (
    WrongAnswer("‖total‖ / ‖term 1‖", _ratio_total,
                "your ratio is close to 1 where term 2 is tiny: you compared the size of the whole gradient "
                "with term 1, not the size of term 2."),
    WrongAnswer("the unfixed routing of task 3", _ratio_unfixed_routing,
                "your 'term 1' still carries part of term 2: it comes from the routing of task 3 before its bug "
                "was fixed."),
    WrongAnswer("the loss Σ‖v‖", _ratio_length_loss,
                "the gradients must be those of the loss L = Σ ⟨grad_poses, v⟩ of the task, with grad_poses "
                "drawn after the votes from the same generator."),
    WrongAnswer("both gradients the same", lambda scale, iterations=3, seed=0: 0.0,
                "your ratio is 0 where term 2 is not: both of your gradients are the same (is one routing "
                "detached and the other not?)."),
)


register(
    Task("03.softmax_jacobian", "The softmax Jacobian of the couplings", 1, softmax_jacobian,
         _softmax_jacobian_cases,
         hint="∂c_j/∂b_k = c_j (δ_jk − c_k) over the last dimension, entry [..., j, k], shape (..., J, J) "
              "(chapter 03, §3 the couplings' Jacobian, unrolled).",
         outputs=("jacobian",), wrong_answers=_SOFTMAX_JACOBIAN_WRONG, input_names=("couplings",),
         function="softmax_jacobian"),
    Task("03.constant_coupling_gradient", "The constant-coupling gradient (term 1)", 2, _ref_term1, _term1_cases,
         hint="term 1 of ∂L/∂û_{m|i} is c_im (∂v/∂s)(s_m)ᵀ ∂L/∂v_m, shape (B, I, J, D); the squash Jacobian is "
              "f(n) I + n f'(n) ŝŝᵀ with f(n) = n/(1 + n²) (chapter 03, §2 two terms).",
         outputs=("term1",), wrong_answers=_TERM1_WRONG,
         nonfinite_hint="nan or inf where s = 0: at s = 0 the direction ŝ = s/‖s‖ is 0/0, and the term it "
                        "multiplies is 0 there; compute ŝ without dividing by zero.",
         input_names=("couplings", "sums", "grad_poses"), function="term1",
         answers=(squash_jacobian, vote_gradient)),
    Task("03.detached_routing", "Bug hunt: dynamic routing with detached couplings", 2, _ref_detached,
         _detached_cases,
         hint="with detach=True the forward values are Sabour's and the gradient w.r.t. the votes is term 1 "
              "only: no path from the votes to the loss may pass through the couplings (chapter 03, "
              "§1 routing is a loop and §2 two terms).",
         outputs=("poses",), wrong_answers=_DETACHED_WRONG,
         nonfinite_hint="compute the softmax stably (torch.softmax) and the squash with ε inside the square root.",
         input_names=("votes",), function="routing", kind="bug hunt",
         place_hint="look at which tensors of the loop the backward pass can still reach when detach=True.",
         planted=(("target = v.detach() if detach else v", "the line that decides what detach=True cuts"),),
         answers=(dynamic_routing, vote_free_routing, routing_step, DynamicRouter.forward, DynamicRouter.route_weights,
                  generic_routing, dynamic_routing_generic),
         allowed=("capsule_lab.capsules.squash",), stand_in=_stand_in_routing),
    Task("03.term2_exponent", "Prediction: how term 2 shrinks with the votes", 1, _ref_term2_exponent,
         lambda: [Case("your prediction", (), grad="none")],
         hint="count the powers of σ in each factor of eq. (eq-grad-two-terms) and of ∂B/∂û, for short votes "
              "and Sabour's squash (f(n) = n/(1 + n²) ≈ n).",
         outputs=("exponent",), wrong_answers=_EXPONENT_WRONG, function="predict_exponent", kind="prediction",
         returns_number=True, atol=0.25, rtol=0.0),
    Task("03.term2_ratio", "Mini-experiment: ‖term 2‖/‖term 1‖ against the length of the votes", 2,
         _ref_term2_ratio, _ratio_cases,
         hint="draw the votes and grad_poses as the task says, take autograd's gradient of L = Σ⟨grad_poses, v⟩ "
              "w.r.t. the votes through routing(..., detach=False) (the total) and routing(...) (term 1), and "
              "return ‖total − term 1‖ / ‖term 1‖ (norms over all entries).",
         outputs=("ratio",), wrong_answers=_RATIO_WRONG, function="term2_ratio", kind="experiment",
         returns_number=True, rtol=0.01, atol=1e-9,
         answers=(vote_gradient, gradient_terms, capsnet_gradient_terms, polarised_gradient_terms, dynamic_routing,
                  routing_step), allowed=("capsule_lab.capsules.squash",), uses=("03.detached_routing",)),
)
