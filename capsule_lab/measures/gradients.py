"""Gradients through dynamic routing, derived by hand: the two terms of ∂L/∂û and the coupling Jacobian.

Taught in chapter 03 (``chapters/03_routing_gradients.ipynb``), after Gu & Tresp's supplement (Appx. A).
Per sample, with K routing iterations t = 1..K (the notation of :mod:`capsule_lab.routing`):

    c^(t)_ij = softmax_j(b^(t)_ij)      s^(t)_j = Σ_i c^(t)_ij û_{j|i}      v^(t)_j = g(s^(t)_j)
    b^(t+1)_ij = b^(t)_ij + ⟨û_{j|i}, v^(t)_j⟩                               (b^(1) = the priors, or 0)

The loss sees only v^(K). Its gradient w.r.t. a vote splits into two terms (supplement, eq. 1):

    ∂L/∂û_{m|i} =  c^(K)_im · ∂L/∂s^(K)_m                                      term 1: couplings held constant
                 + Σ_{i',j} ⟨∂L/∂s^(K)_j, û_{j|i'}⟩ · ∂c^(K)_{i'j}/∂û_{m|i}       term 2: through the couplings

with ∂L/∂s = (∂v/∂s)ᵀ ∂L/∂v (the squash Jacobian, :func:`squash_jacobian`). The supplement writes term 2
with i' = i only; the couplings of *every* input capsule depend on û_{m|i} through the poses v^(t), so
the full sum runs over i' too. Term 1 is exactly what autograd returns when the couplings are detached
(``dynamic_routing(..., detach_couplings=True)``, the supplement's Fig. 3).

Nothing here uses autograd: :func:`vote_gradient` runs the reverse-mode recursion through the unrolled
iterations by hand, :func:`coupling_jacobian` the forward-mode one (eq. 3, unrolled), and the tests
compare both with ``torch.autograd``.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

from .._checks import check_tensor
from ..capsules import margin_loss, squash, squash_exp
from ..models import CapsNetOutput, capsnet_loss
from ..routing import check_votes, coupling_polarisation, dynamic_routing, softmax_backward
from ..training import eval_mode

__all__ = ["softmax_jacobian", "squash_jacobian", "RoutingStates", "routing_states", "VoteGradient", "vote_gradient",
           "coupling_jacobian", "gradient_terms", "capsnet_gradient_terms", "gradient_toy", "polarised_gradient_terms"]


def softmax_jacobian(c: torch.Tensor) -> torch.Tensor:
    """The Jacobian of c = softmax(b) over the last dim: ``∂c_j/∂b_k = c_j (δ_jk − c_k)``, shape ``(..., J, J)``.

    Its diagonal c_j(1 − c_j) and off-diagonal −c_j c_k both vanish as c polarises to 0/1 — the reason
    the second gradient term fades (supplement, eq. 3). Chapter 03.
    """
    if not isinstance(c, torch.Tensor) or c.dim() < 1 or not c.is_floating_point():
        raise ValueError(f"c must be a floating tensor of shape (..., J), got {getattr(c, 'shape', type(c).__name__)}")
    return torch.diag_embed(c) - c.unsqueeze(-1) * c.unsqueeze(-2)


def _radial(activation, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For v = f(n)·s with n = ‖s‖: return f(n) and n·f'(n)."""
    if activation is squash:        # f = n / (1 + n²)
        return n / (1 + n * n), n * (1 - n * n) / (1 + n * n) ** 2
    if activation is squash_exp:    # f = (1 − e^{−n}) / n,  n f' = e^{−n} − f
        f = torch.where(n > 0, -torch.expm1(-n) / n.clamp_min(1e-30), torch.ones_like(n))
        return f, torch.exp(-n) - f
    raise ValueError("activation must be capsule_lab.squash or capsule_lab.squash_exp")


def squash_jacobian(s: torch.Tensor, activation=squash) -> torch.Tensor:
    """The Jacobian ∂v/∂s of a squash at s, over the last dim: ``(..., D)`` → ``(..., D, D)``.

    Both squashes have the form v = f(‖s‖) s, so with n = ‖s‖ and ŝ = s/n

        ∂v/∂s = f(n) I + n f'(n) ŝ ŝᵀ        squash: f = n/(1+n²);  squash_exp: f = (1 − e^{−n})/n.

    The matrix is symmetric. Chapter 03.
    """
    if not isinstance(s, torch.Tensor) or s.dim() < 1 or not s.is_floating_point():
        raise ValueError(f"s must be a floating tensor of shape (..., D), got {getattr(s, 'shape', type(s).__name__)}")
    n = s.norm(dim=-1, keepdim=True)
    f, nf = _radial(activation, n)
    unit = s / n.clamp_min(1e-30)
    eye = torch.eye(s.shape[-1], dtype=s.dtype, device=s.device)
    return f.unsqueeze(-1) * eye + nf.unsqueeze(-1) * unit.unsqueeze(-1) * unit.unsqueeze(-2)


class RoutingStates(NamedTuple):
    """Every iteration's couplings ``(K, B, I, J)``, sums and poses ``(K, B, J, D)`` of one routing run."""

    couplings: torch.Tensor
    sums: torch.Tensor
    poses: torch.Tensor


def _biased(activation, pose_bias):
    return activation if pose_bias is None else (lambda s: activation(s + pose_bias))


def routing_states(votes: torch.Tensor, iterations: int = 3, prior_logits: Optional[torch.Tensor] = None,
                   activation=squash, pose_bias: Optional[torch.Tensor] = None) -> RoutingStates:
    """Run dynamic routing forward (no gradient) and keep c^(t), s^(t), v^(t) of every iteration. With a
    ``pose_bias`` b ``(J, D)`` (REM's, chapter 05) the squash's input is s^(t) = Σ_i c^(t)_ij û_{j|i} + b_j, and the
    sums kept are those. Chapter 03."""
    with torch.no_grad():
        steps = dynamic_routing(votes, iterations, prior_logits, activation=_biased(activation, pose_bias),
                                history=True).history
        couplings = torch.stack([step.couplings for step in steps])
        sums = torch.einsum("tbij,bijd->tbjd", couplings, votes)
        if pose_bias is not None:
            sums = sums + pose_bias.to(sums.dtype)
    return RoutingStates(couplings, sums, torch.stack([step.poses for step in steps]))


class VoteGradient(NamedTuple):
    """∂L/∂û ``(B, I, J, D)`` = ``term1`` + ``term2`` (supplement, eq. 1), and ∂L/∂b^(1) ``(B, I, J)``."""

    total: torch.Tensor
    term1: torch.Tensor
    term2: torch.Tensor
    prior: torch.Tensor


def vote_gradient(votes: torch.Tensor, grad_poses: torch.Tensor, iterations: int = 3,
                  prior_logits: Optional[torch.Tensor] = None, activation=squash,
                  pose_bias: Optional[torch.Tensor] = None) -> VoteGradient:
    """∂L/∂û through K routing iterations, split into the supplement's two terms, computed by hand.

    Args:
        votes: ``(B, I, J, D)``; grad_poses: ∂L/∂v^(K), ``(B, J, D)``.
        iterations, prior_logits, activation: as in :func:`~capsule_lab.routing.dynamic_routing`.
        pose_bias: REM's learned bias b_j ``(J, D)`` added before the squash (a constant here: the squash's
            Jacobian is taken at s + b, and ∂s/∂û is unchanged).

    Term 1 holds the final couplings constant. Term 2 is everything that flows through the couplings:
    the reverse-mode recursion through the unrolled iterations (t = K−1, …, 1), with

        ∂L/∂b^(K)   = softmax'(c^(K))ᵀ γ,   γ_ij = ⟨∂L/∂s^(K)_j, û_{j|i}⟩        (the coupling gradient)
        b^(t+1) = b^(t) + ⟨û, v^(t)⟩:  û gets ∂L/∂b^(t+1)_ij · v^(t)_j, and v^(t) gets Σ_i ∂L/∂b^(t+1)_ij û_{j|i};
        s^(t) = Σ_i c^(t) û:           û gets c^(t)_ij ∂L/∂s^(t)_j, and c^(t) gets ⟨∂L/∂s^(t)_j, û_{j|i}⟩.

    Chapter 03.
    """
    check_votes(votes)
    B, _, J, D = votes.shape
    check_tensor(grad_poses, "grad_poses", f"(B, J, D) = ({B}, {J}, {D})", sizes=(B, J, D))
    if pose_bias is not None:
        check_tensor(pose_bias, "pose_bias", f"(J, D) = ({J}, {D})", sizes=(J, D))
    states = routing_states(votes, iterations, prior_logits, activation, pose_bias)
    K = iterations

    def through_squash(t: int, grad_v: torch.Tensor) -> torch.Tensor:  # ∂L/∂s^(t) = (∂v/∂s)ᵀ ∂L/∂v
        return torch.einsum("bjed,bje->bjd", squash_jacobian(states.sums[t], activation), grad_v)

    def into_logits(t: int, grad_c: torch.Tensor) -> torch.Tensor:      # ∂L/∂b^(t) = softmax'(c^(t))ᵀ ∂L/∂c^(t)
        return softmax_backward(states.couplings[t], grad_c, dim=-1)

    grad_s = through_squash(K - 1, grad_poses)
    term1 = states.couplings[K - 1].unsqueeze(-1) * grad_s.unsqueeze(1)
    grad_b = into_logits(K - 1, torch.einsum("bjd,bijd->bij", grad_s, votes))
    term2 = torch.zeros_like(votes)
    for t in reversed(range(K - 1)):
        term2 += grad_b.unsqueeze(-1) * states.poses[t].unsqueeze(1)             # b^(t+1) ∋ ⟨û, v^(t)⟩, via û
        grad_s = through_squash(t, torch.einsum("bij,bijd->bjd", grad_b, votes))  # ... via v^(t)
        term2 += states.couplings[t].unsqueeze(-1) * grad_s.unsqueeze(1)        # s^(t) = Σ c û, via û
        grad_b = grad_b + into_logits(t, torch.einsum("bjd,bijd->bij", grad_s, votes))  # ... via c^(t)
    return VoteGradient(term1 + term2, term1, term2, grad_b)


def coupling_jacobian(votes: torch.Tensor, iterations: int = 3, prior_logits: Optional[torch.Tensor] = None,
                      activation=squash, pose_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The Jacobian of the final couplings w.r.t. the votes, by unrolling the iterations (supplement, eq. 3).

    Returns ``(B, I, J, I, J, D)``: entry ``[b, i', j, i, m, :]`` is ∂c^(K)_{i'j}/∂û_{m|i}. Forward mode,
    iteration by iteration, starting from ∂c^(1)/∂û = 0:

        ∂s^(t)_j   = c^(t)_ij δ_jm I + Σ_{i'} û_{j|i'} ⊗ ∂c^(t)_{i'j}          (w.r.t. û_{m|i})
        ∂v^(t)_j   = (∂v/∂s)(s^(t)_j) ∂s^(t)_j
        ∂b^(t+1)_{i'j} = ∂b^(t)_{i'j} + δ_{i'i} δ_jm v^(t)_j + û_{j|i'}ᵀ ∂v^(t)_j
        ∂c^(t+1)_{i'j} = Σ_k c^(t+1)_{i'j} (δ_jk − c^(t+1)_{i'k}) ∂b^(t+1)_{i'k}     (eq. 3)

    Its size grows as (I·J)²·D per sample: for teaching-sized layers only. ``pose_bias`` as in
    :func:`vote_gradient`. Chapter 03.
    """
    check_votes(votes)
    states = routing_states(votes, iterations, prior_logits, activation, pose_bias)
    B, I, J, D = votes.shape
    eye_i, eye_j, eye_d = (torch.eye(n, dtype=votes.dtype, device=votes.device) for n in (I, J, D))
    dc = votes.new_zeros(B, I, J, I, J, D)   # ∂c^(t)_{i'j} / ∂û_{m|i}[d]: [b, i', j, i, m, d]
    db = torch.zeros_like(dc)
    for t in range(iterations - 1):
        c, s, v = states.couplings[t], states.sums[t], states.poses[t]
        ds = (torch.einsum("bij,jm,ed->bjeimd", c, eye_j, eye_d)
              + torch.einsum("bpje,bpjimd->bjeimd", votes, dc))
        dv = torch.einsum("bjfe,bjeimd->bjfimd", squash_jacobian(s, activation), ds)
        db = db + (torch.einsum("pi,jm,bjd->bpjimd", eye_i, eye_j, v)
                   + torch.einsum("bpjf,bjfimd->bpjimd", votes, dv))
        dc = torch.einsum("bpjk,bpkimd->bpjimd", softmax_jacobian(states.couplings[t + 1]), db)
    return dc


def gradient_terms(grad: VoteGradient) -> dict:
    """Summaries of a :class:`VoteGradient`: the Frobenius norms of the two terms over the whole batch,
    their ratio ‖term 2‖/‖term 1‖, and the cosine between the total gradient and term 1 (1 = term 1 alone
    points the same way as the true gradient, as the supplement's eqs. 4–5 claim). Chapter 03.
    """
    t1, t2, total = grad.term1.double(), grad.term2.double(), grad.total.double()
    n1, n2 = t1.norm().item(), t2.norm().item()
    cosine = (total.flatten() @ t1.flatten() / (total.norm() * t1.norm()).clamp_min(1e-300)).item()
    return {"term1": n1, "term2": n2, "ratio": n2 / n1 if n1 > 0 else math.inf, "cosine": cosine}


def _routing_of(router) -> tuple:
    """``(iterations, prior_logits, activation, pose_bias, term 2 in the gradient)`` of the Sabour router a network
    routes with (:meth:`~capsule_lab.routing.Router.sabour_form`; uniform routing is one iteration from zero logits)."""
    form = router.sabour_form()
    if form is None:
        raise ValueError(f"capsnet_gradient_terms needs a CapsNet routed by Sabour's routing (a DynamicRouter with an "
                         f"unscaled update, its detached variant, or a UniformRouter), got {router!r}")
    return form


def capsnet_gradient_terms(model, images: torch.Tensor, labels: torch.Tensor, loss_fn=None) -> dict:
    """Measure the two gradient terms at a :class:`~capsule_lab.models.CapsNet`'s class layer on one batch.

    The routing is read from the network's own router (``model.router``), never from its config: its iterations,
    its prior logits, its squash and its pose bias (REM's). The class layer's votes are materialised and routed
    that way, ∂L/∂v^(K) is taken from the model's own loss (margin + reconstruction, through the decoder), and
    :func:`vote_gradient` splits ∂L/∂û. Uniform routing is one iteration from zero logits: its term 2 is zero. A
    router that detaches its couplings (or its votes) passes term 1 alone, so term 2 is zero in the gradient it
    trains with, and is reported so. Returns :func:`gradient_terms`, ``iterations`` (the r measured) and
    :func:`~capsule_lab.routing.coupling_polarisation` of the final couplings. The model is left in the mode it was
    in. Chapter 03.
    """
    iterations, prior, activation, bias, term2 = _routing_of(getattr(model, "router", None))
    if images.dim() != 4 or labels.shape != images.shape[:1]:
        raise ValueError(f"images must be (B, C, H, W) and labels (B,), got {tuple(images.shape)}, {tuple(labels.shape)}")
    loss_fn = loss_fn or capsnet_loss
    with eval_mode(model):
        with torch.no_grad():
            u = model(images).primary
            votes = model.digits.votes(u)
            states = routing_states(votes, iterations, prior, activation, bias)
        poses = states.poses[-1].clone().requires_grad_(True)
        with torch.enable_grad():
            reconstruction = model.decoder(poses, labels) if model.decoder is not None else None
            out = CapsNetOutput(poses.norm(dim=-1), poses, states.couplings[-1], u, reconstruction)
            (grad_poses,) = torch.autograd.grad(loss_fn(out, images, labels), poses)
        grad = vote_gradient(votes, grad_poses, iterations, prior, activation, bias)
    if not term2:
        grad = VoteGradient(grad.term1, grad.term1, torch.zeros_like(grad.term2), grad.prior)
    return {**gradient_terms(grad), "iterations": iterations, **coupling_polarisation(states.couplings[-1])}


def gradient_toy(seed: int = 0, inputs: int = 8, outputs: int = 4, dim: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Chapter 03's toy layer: seeded random votes ``(1, I, J, D)`` (float64) and a fixed assignment of
    each input capsule to one output, one-hot ``(I, J)`` (input i → output i mod J). Chapter 03.
    """
    g = torch.Generator().manual_seed(seed)
    votes = 0.5 * torch.randn(1, inputs, outputs, dim, generator=g, dtype=torch.float64)
    assignment = torch.nn.functional.one_hot(torch.arange(inputs) % outputs, outputs).double()
    return votes, assignment


def polarised_gradient_terms(iterations: int = 3, polarisation: float = 0.0, seed: int = 0):
    """The two gradient terms on :func:`gradient_toy` when the couplings are pushed toward one-hot.

    The prior logits are ``polarisation × assignment``: 0 leaves routing as Sabour's (uniform start),
    a large value makes every c_i· nearly one-hot whatever the votes. The loss is the margin loss with
    target class 0. Returns ``(couplings (I, J), VoteGradient)`` for the one sample. Chapter 03.
    """
    if isinstance(polarisation, bool) or not isinstance(polarisation, (int, float)) or not math.isfinite(polarisation):
        raise ValueError(f"polarisation must be a finite number, got {polarisation!r}")
    votes, assignment = gradient_toy(seed)
    prior = polarisation * assignment
    routed = dynamic_routing(votes, iterations, prior)
    poses = routed.poses.detach().requires_grad_(True)
    (grad_poses,) = torch.autograd.grad(margin_loss(poses.norm(dim=-1), torch.tensor([0])), poses)
    return routed.couplings[0], vote_gradient(votes, grad_poses, iterations, prior)
