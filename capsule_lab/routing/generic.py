"""The generic routing procedure (Faria's Algorithm 1): a router is a compatibility and an activation function.

Taught in chapter 07 (``chapters/07_learned_routing.ipynb``), after Faria, "Learning to compute inner consensus".
Given votes v ``(B, I, J, D)``, input activations a ``(B, I)``, a compatibility function, an activation function
and a state s (s⁰ = ``state``, ``None`` at first):

    r⁰ = 0 (or initial_logits);   c⁰ = normalise(r⁰);   μ⁰_j = pose(c⁰, v)
    for t = 1 … T:
        (r^t, s^t) = compatibility(s^{t−1}, r^{t−1}, c^{t−1}, v, μ^{t−1}, a)
        c^t        = normalise(r^t)
        μ^t_j      = pose(c^t, v)
    a_j = activation(s^T, c^T, v, μ^T, a)

``normalise`` is a softmax over the inputs i for each output j (``normalize_over="inputs"``, Σ_i c_ij = 1, the
paper's: each output capsule is a cluster that spreads one unit of attention over the votes it receives) or over
the outputs j for each input i (``"outputs"``, Σ_j c_ij = 1, Sabour's: each part has one unit of vote to share
among the wholes it may belong to). The default pose is the coupling-weighted mean
``μ_j = Σ_i c_ij v_ij / Σ_i c_ij`` (:func:`weighted_mean_pose`; with Σ_i c_ij = 1, the weighted sum).

**Sabour's dynamic routing is one instance.** T counts the compatibility updates: T iterations compute T + 1
poses. Sabour's r iterations compute r poses and r − 1 logit updates, so they are T = r − 1 here
(:func:`dynamic_routing_generic`), with

    compatibility: r_ij ← r_ij + ⟨v_ij, μ_j⟩   (:func:`dynamic_compatibility`)
    pose:          μ_j = squash(Σ_i c_ij v_ij)  (:func:`squashed_sum_pose`)
    activation:    a_j = ‖μ_j‖                  (:func:`length_activation`)
    normalise:     softmax over the outputs j

and it equals :func:`capsule_lab.routing.dynamic_routing`, the readable loop chapter 02 teaches
(``tests/test_learned_routers.py``). Similarity routing (:mod:`~capsule_lab.routing.similarity`) and
connectionist routing (:mod:`~capsule_lab.routing.connectionist`) are the two other instances of the course.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from .._checks import check_tensor, shape_error
from ..capsules import capsule_lengths, squash
from .router import RoutingResult, check_activations, check_iterations, check_logits, check_normalize_over, check_votes

__all__ = ["normalize_couplings", "weighted_mean_pose", "generic_routing", "dynamic_compatibility",
           "squashed_sum_pose", "length_activation", "dynamic_routing_generic"]


def _check_couplings_and_votes(couplings, votes, name: str = "couplings") -> None:
    check_votes(votes)
    check_tensor(couplings, name, f"(B, I, J) = {tuple(votes.shape[:3])}", sizes=tuple(votes.shape[:3]))


def normalize_couplings(logits: torch.Tensor, normalize_over: str = "inputs") -> torch.Tensor:
    """Couplings from logits ``(B, I, J)``: softmax over the inputs i (``"inputs"``, Σ_i c_ij = 1, Faria) or over
    the outputs j (``"outputs"``, Σ_j c_ij = 1, Sabour). Chapter 07.
    """
    check_tensor(logits, "logits", "(B, I, J)", ndim=3, nonempty=True, floating=True)
    return torch.softmax(logits, dim=check_normalize_over(normalize_over))


def weighted_mean_pose(couplings: torch.Tensor, votes: torch.Tensor) -> torch.Tensor:
    """The default pose of Algorithm 1: ``μ_j = Σ_i c_ij v_ij / Σ_i c_ij`` ``(B, J, D)``.

    With couplings normalised over the inputs (Σ_i c_ij = 1) this is the weighted sum, a convex combination of
    the votes. Chapter 07.
    """
    _check_couplings_and_votes(couplings, votes)
    weight = couplings / couplings.sum(dim=1, keepdim=True).clamp_min(torch.finfo(couplings.dtype).tiny)
    return torch.einsum("bij,bijd->bjd", weight, votes)


def generic_routing(
    votes: torch.Tensor,
    activations: Optional[torch.Tensor],
    compatibility: Callable,
    activation: Callable,
    iterations: int = 3,
    *,
    normalize_over: str = "inputs",
    pose_fn: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
    state: Any = None,
    initial_logits: Optional[torch.Tensor] = None,
    history: bool = False,
) -> RoutingResult:
    """The generic routing procedure (Faria's Algorithm 1, see the module docstring).

    Args:
        votes: ``(B, I, J, D)`` the votes v_ij.
        activations: ``(B, I)`` the input activations a_i ≥ 0; ``None``: all ones (a router that ignores them).
        compatibility: ``compatibility(state, logits, couplings, votes, poses, activations) → (logits, state)``
            the new compatibilities r ``(B, I, J)`` from the previous ones, the current couplings c
            ``(B, I, J)``, the votes, the current poses μ ``(B, J, D)`` and the input activations ``(B, I)``.
        activation: ``activation(state, couplings, votes, poses, activations) → (B, J)``, the output
            activations, called once after the last iteration.
        iterations: T ≥ 0, the number of compatibility updates (the paper: 3). T iterations compute T + 1
            poses; Sabour's r iterations are T = r − 1 (:func:`dynamic_routing_generic`).
        normalize_over: ``"inputs"`` — softmax over i, Σ_i c_ij = 1 (Faria's convention, the default) — or
            ``"outputs"`` — softmax over j, Σ_j c_ij = 1 (Sabour's).
        pose_fn: ``pose_fn(couplings, votes) → (B, J, D)``; default :func:`weighted_mean_pose`.
        state: the initial state s⁰ handed to the first compatibility call (``None``: the function makes its own).
        initial_logits: r⁰ ``(B, I, J)`` or ``(I, J)``; zeros (uniform couplings) if None.
        history: also return (μ^t, a, c^t, r^t) for every t = 0 … T in ``.history`` (the activations of every
            entry are the final ones: Algorithm 1 computes them once).

    Returns:
        :class:`~capsule_lab.routing.RoutingResult` (poses, activations, couplings, logits, history, state).

    Chapter 07.
    """
    check_votes(votes)
    B, I, J, D = votes.shape
    activations = check_activations(activations, votes)
    for fn, name in ((compatibility, "compatibility"), (activation, "activation")):
        if not callable(fn):
            raise ValueError(f"{name} must be a function, got {fn!r}")
    if pose_fn is None:
        pose_fn = weighted_mean_pose
    elif not callable(pose_fn):
        raise ValueError(f"pose_fn must be a function (couplings, votes) → poses (B, J, D), got {pose_fn!r}")
    check_iterations(iterations, minimum=0)
    dim = check_normalize_over(normalize_over)
    logits = (votes.new_zeros(B, I, J) if initial_logits is None
              else check_logits(initial_logits, B, I, J, votes, "initial_logits"))

    def pose(c):
        mu = pose_fn(c, votes)
        if not isinstance(mu, torch.Tensor) or tuple(mu.shape) != (B, J, D):
            raise shape_error("pose_fn's poses", f"(B, J, D) = ({B}, {J}, {D})", mu)
        return mu

    couplings = torch.softmax(logits, dim=dim)
    poses = pose(couplings)
    steps = [(poses, couplings, logits)]
    for _ in range(iterations):
        out = compatibility(state, logits, couplings, votes, poses, activations)
        if not isinstance(out, tuple) or len(out) != 2:
            raise ValueError("compatibility must return a pair (logits (B, I, J), state)")
        logits, state = out
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (B, I, J):
            raise shape_error("compatibility's logits", f"(B, I, J) = ({B}, {I}, {J})", logits)
        couplings = torch.softmax(logits, dim=dim)
        poses = pose(couplings)
        if history:
            steps.append((poses, couplings, logits))
    out_activations = activation(state, couplings, votes, poses, activations)
    if not isinstance(out_activations, torch.Tensor) or tuple(out_activations.shape) != (B, J):
        raise shape_error("activation's output", f"(B, J) = ({B}, {J})", out_activations)
    trace = tuple(RoutingResult(mu, out_activations, c, r) for mu, c, r in steps) if history else ()
    return RoutingResult(poses, out_activations, couplings, logits, trace, state)


# ----------------------------------------------------------------- dynamic routing in the framework

def dynamic_compatibility(state, logits, couplings, votes, poses, activations):
    """Sabour's logit update as a compatibility function: ``r_ij ← r_ij + ⟨v_ij, μ_j⟩`` (state unchanged).

    Chapter 07 (dynamic routing expressed in the generic procedure).
    """
    _check_couplings_and_votes(logits, votes, "logits")
    return logits + torch.einsum("bijd,bjd->bij", votes, poses), state


def squashed_sum_pose(couplings: torch.Tensor, votes: torch.Tensor) -> torch.Tensor:
    """Sabour's pose as a pose function: ``μ_j = squash(Σ_i c_ij v_ij)`` ``(B, J, D)``. Chapter 07."""
    _check_couplings_and_votes(couplings, votes)
    return squash(torch.einsum("bij,bijd->bjd", couplings, votes))


def length_activation(state, couplings, votes, poses, activations) -> torch.Tensor:
    """Sabour's activation as an activation function: the length of the squashed pose, ``a_j = ‖μ_j‖``.

    Chapter 07.
    """
    check_tensor(poses, "poses", "(B, J, D)", ndim=3, nonempty=True)
    return capsule_lengths(poses)


def dynamic_routing_generic(votes: torch.Tensor, iterations: int = 3, *, history: bool = False) -> RoutingResult:
    """Sabour's dynamic routing with ``iterations`` = r iterations, run by :func:`generic_routing`.

    r iterations of Algorithm 1 (Sabour) are r − 1 compatibility updates (T = r − 1) with
    :func:`dynamic_compatibility`, :func:`squashed_sum_pose`, :func:`length_activation`, couplings normalised
    over the outputs. Poses, couplings and logits equal :func:`capsule_lab.routing.dynamic_routing`'s.
    Chapter 07.
    """
    check_iterations(iterations)
    return generic_routing(votes, None, dynamic_compatibility, length_activation, iterations - 1,
                           normalize_over="outputs", pose_fn=squashed_sum_pose, history=history)
