"""Sabour's routing procedure, written once as the readable loop chapter 02 teaches.

Taught in chapter 02 (``chapters/02_dynamic_routing.ipynb``); the gradients through it in chapter 03.

Shapes (the course's conventions):
    votes       û_{j|i}   (B, I, J, D)   batch, input capsules, output capsules, output dimension
    logits      b_ij      (B, I, J)
    couplings   c_ij      (B, I, J)      for dynamic routing Σ_j c_ij = 1 (softmax over the *outputs*)
    poses       v_j       (B, J, D)
    activations ‖v_j‖     (B, J)

Dynamic routing (Sabour et al., 2017, Algorithm 1), for r iterations:

    c_ij = softmax_j(b_ij)                   (eq. 3)
    s_j  = Σ_i c_ij û_{j|i}                  (eq. 2)
    v_j  = squash(s_j)                       (eq. 1)
    b_ij ← b_ij + ⟨û_{j|i}, v_j⟩             (agreement)

Nothing is detached by default: gradients flow through the couplings into the votes exactly as the
algorithm is written. The two common shortcuts are explicit keywords: ``detach_votes`` (votes are
constants in all but the last iteration, as many implementations do) and ``detach_couplings`` (the
couplings are constants in the backward pass, chapter 03's "detached" network). The routing
explorer's variant (chapter 02) scales the logit update, ``b_ij ← b_ij + scale · ⟨û_{j|i}, v_j⟩``
(``agreement_scale``). The routers of :mod:`capsule_lab.routing.routers` run this loop; it is also one
instance of the general procedure, Faria's Algorithm 1 (:func:`capsule_lab.routing.dynamic_routing_generic`),
and the tests hold the two equal.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from .._checks import check_positive_int, check_tensor
from ..capsules import squash
from .router import RoutingResult, check_iterations, check_logits, check_votes

__all__ = ["agreement", "softmax_backward", "bin_centres", "routing_step", "dynamic_routing", "uniform_routing"]


def agreement(votes: torch.Tensor, poses: torch.Tensor) -> torch.Tensor:
    """The agreement ``a_ij = ⟨û_{j|i}, v_j⟩`` between each vote and the output it voted for: ``(B, I, J)``.

    Chapter 02.
    """
    check_votes(votes)
    B, _, J, D = votes.shape
    check_tensor(poses, "poses", f"(B, J, D) = ({B}, {J}, {D})", sizes=(B, J, D))
    return torch.einsum("bijd,bjd->bij", votes, poses)


def check_quantize_levels(levels) -> Optional[int]:
    """None, or a number of quantisation levels K ≥ 2; else ``ValueError``. Chapter 05."""
    return None if levels is None else check_positive_int(levels, "quantize_levels", minimum=2)


def bin_centres(couplings: torch.Tensor, levels: int) -> torch.Tensor:
    """Each coupling replaced by the centre of its bin among ``levels`` uniform bins centred on 0, 1/(K − 1), …, 1:
    ``round(c · (K − 1)) / (K − 1)`` — the value of :func:`capsule_lab.measures.parse_trees.quantize`'s index. The REM
    paper's quantised inference routes with these (§3.1.2). Ties go to the even index (``torch.round``); the paper's
    code (``torch.bucketize`` on the bin edges) sends a tie down, which differs only on a bin edge exactly. Chapter 05.
    """
    levels = check_positive_int(levels, "levels", minimum=2)
    return torch.round(couplings * (levels - 1)) / (levels - 1)


def routing_step(
    votes: torch.Tensor,
    logits: torch.Tensor,
    activation: Callable[[torch.Tensor], torch.Tensor] = squash,
    *,
    detach_couplings: bool = False,
    quantize_levels: Optional[int] = None,
) -> RoutingResult:
    """One iteration of dynamic routing, without the logit update: c = softmax_j(b), s = Σ_i c û, v = squash(s).

    Returns a :class:`~capsule_lab.routing.RoutingResult` (activations ‖v_j‖) whose ``logits`` are the ones given
    (expanded to ``(B, I, J)``). The next iteration's logits are ``logits + agreement(votes, result.poses)``.
    ``detach_couplings``: the weighted sum uses ``c.detach()`` (the returned couplings are not detached). logits
    ``(B, I, J)`` or ``(I, J)``. ``quantize_levels`` K: the couplings are replaced by their :func:`bin_centres`
    before the weighted sum, and those are the couplings returned (they no longer sum to 1 over j).

    Chapter 02 (routing iteration by iteration); the quantised step, chapter 05.
    """
    check_votes(votes)
    logits = check_logits(logits, *votes.shape[:3], votes, "logits")
    couplings = torch.softmax(logits, dim=2)
    if check_quantize_levels(quantize_levels) is not None:
        couplings = bin_centres(couplings, quantize_levels)
    c = couplings.detach() if detach_couplings else couplings
    poses = activation(torch.einsum("bij,bijd->bjd", c, votes))
    return RoutingResult(poses, poses.norm(dim=-1), couplings, logits)


def dynamic_routing(
    votes: torch.Tensor,
    iterations: int = 3,
    prior_logits: Optional[torch.Tensor] = None,
    *,
    detach_votes: bool = False,
    detach_couplings: bool = False,
    activation: Callable[[torch.Tensor], torch.Tensor] = squash,
    history: bool = False,
    agreement_scale: float = 1.0,
    quantize_levels: Optional[int] = None,
) -> RoutingResult:
    """Routing-by-agreement, exactly Sabour et al.'s Algorithm 1: the one routing procedure of the package.

    A loop over :func:`routing_step`; between two steps the logits take the agreement
    (:func:`agreement`). Every option is an explicit keyword; the defaults are Algorithm 1.

    Args:
        votes: ``(B, I, J, D)`` predictions û_{j|i} = W_ij u_i.
        iterations: number of routing iterations r ≥ 1 (Sabour: 3).
        prior_logits: initial logits b, ``(B, I, J)`` or ``(I, J)`` (e.g. learned priors); zeros if None.
        detach_votes: use ``votes.detach()`` in every iteration but the last, so that gradients reach the
            votes only through the final weighted sum (a common implementation shortcut, off by default).
        detach_couplings: treat the couplings as constants in the backward pass (chapter 03).
        activation: the squash to apply to s_j (``squash`` or ``squash_exp``).
        history: also return the result of every iteration in ``.history``.
        agreement_scale: the logit update is ``b ← b + agreement_scale · ⟨û_{j|i}, v_j⟩`` (1: Algorithm 1;
            larger: couplings polarise faster; 0: they stay at the softmax of the prior; the routing explorer).
        quantize_levels: K, for the REM paper's quantised inference (§3.1.2, chapter 05): the last iteration routes
            with its couplings replaced by their :func:`bin_centres` among K levels (the earlier iterations, and so
            the logits, are unchanged); None (default): Algorithm 1. Rounding has no gradient: an evaluation option.

    Returns:
        :class:`~capsule_lab.routing.RoutingResult` with the final poses, their lengths as activations, the
        couplings that produced them and their logits.

    Chapter 02.
    """
    check_votes(votes)
    check_iterations(iterations)
    check_quantize_levels(quantize_levels)
    if (isinstance(agreement_scale, bool) or not isinstance(agreement_scale, (int, float))
            or not math.isfinite(agreement_scale)):
        raise ValueError(f"agreement_scale must be a finite number, got {agreement_scale!r}")
    B, I, J, _ = votes.shape
    if prior_logits is None:
        logits = votes.new_zeros(B, I, J)
    else:
        logits = check_logits(prior_logits, B, I, J, votes, "prior_logits")
    steps = []
    for r in range(iterations):
        last = r == iterations - 1
        u = votes.detach() if (detach_votes and not last) else votes
        step = routing_step(u, logits, activation, detach_couplings=detach_couplings,
                            quantize_levels=quantize_levels if last else None)
        steps.append(step)
        if not last:
            a = agreement(u, step.poses)
            logits = logits + (a if agreement_scale == 1 else agreement_scale * a)
    result = steps[-1]
    return result._replace(history=tuple(steps)) if history else result


def uniform_routing(
    votes: torch.Tensor,
    activation: Callable[[torch.Tensor], torch.Tensor] = squash,
) -> RoutingResult:
    """No routing: every input capsule sends its vote to every output with the same weight c_ij = 1/J.

    The baseline that chapters 03 and 04 compare dynamic routing against.

    Chapter 02.
    """
    check_votes(votes)
    B, I, J, _ = votes.shape
    logits = votes.new_zeros(B, I, J)
    couplings = votes.new_full((B, I, J), 1.0 / J)
    poses = activation(votes.sum(dim=1) / J)
    return RoutingResult(poses, poses.norm(dim=-1), couplings, logits)


def softmax_backward(c: torch.Tensor, grad_c: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Gradient w.r.t. the logits of c = softmax over ``dim``, given the gradient w.r.t. c:
    ``c ⊙ (g − ⟨g, c⟩)``, the softmax Jacobian c_j(δ_jk − c_k) applied without forming it.

    Chapters 02 (the vote-free backward) and 03.
    """
    return c * (grad_c - (grad_c * c).sum(dim=dim, keepdim=True))
