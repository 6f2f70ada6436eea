"""Learning the routing: one routing framework, similarity routing and connectionist (LSTM) routing.

Taught in chapter 07 (``chapters/07_learned_routing.ipynb``), after Faria, "Learning to compute inner
consensus". Dynamic routing (chapter 02) fixes by hand how votes agree; here the routing procedure itself has
parameters, learned by backpropagation with the rest of the network.

**Votes** (eq. 1, after Wang & Liu): each vote is divided by the Frobenius norm of its matrix:

    v_ij = W_ij u_i / (‖W_ij‖_F + 10⁻⁶)                                  (:func:`normalized_votes`)

so ‖v_ij‖ ≤ ‖u_i‖ whatever the scale of W (‖W u‖ ≤ ‖W‖_2 ‖u‖ ≤ ‖W‖_F ‖u‖): with squashed input capsules
every vote lies in the unit ball, and a kernel's length scales mean the same thing in every layer.

**The generic routing procedure** (Algorithm 1, :func:`generic_routing`). Given votes v, input activations a
``(B, I)``, a compatibility function, an activation function and a state s (s⁰ = ``state``, ``None`` at
first):

    r⁰ = 0 (or initial_logits);   c⁰ = normalise(r⁰);   μ⁰_j = pose(c⁰, v)
    for t = 1 … T:
        (r^t, s^t) = compatibility(s^{t−1}, r^{t−1}, c^{t−1}, v, μ^{t−1}, a)
        c^t        = normalise(r^t)
        μ^t_j      = pose(c^t, v)
    a_j = activation(s^T, c^T, v, μ^T, a)

The paper (and this module) normalises with a softmax **over the inputs i, for each output j**:
``Σ_i c_ij = 1`` (``normalize_over="inputs"``): each output capsule j is a cluster that distributes one unit
of "attention" over the votes it receives; an input may then be claimed by several outputs at once, or by
none. Sabour's dynamic routing normalises **over the outputs j, for each input i**: ``Σ_j c_ij = 1``
(``normalize_over="outputs"``): each input capsule has one unit of vote to share among the wholes it
may belong to (parts belong to one whole). Both are supported by name; the couplings keep the course's
shape ``(B, I, J)`` either way. The default pose is the coupling-weighted mean
``μ_j = Σ_i c_ij v_ij / Σ_i c_ij`` (:func:`weighted_mean_pose`; with Σ_i c_ij = 1 the weighted sum).

T counts the compatibility updates, as in Algorithm 1: T iterations compute T + 1 poses. Sabour's
dynamic routing with r iterations computes r poses and r − 1 logit updates, so it is T = r − 1 here
(:func:`dynamic_routing_generic`), with:

    compatibility: r_ij ← r_ij + ⟨v_ij, μ_j⟩   (:func:`dynamic_compatibility`)
    pose:          μ_j = squash(Σ_i c_ij v_ij)  (:func:`squashed_sum_pose`)
    activation:    a_j = ‖μ_j‖                  (:func:`length_activation`)
    normalise:     softmax over the outputs j

and equals :func:`capsule_lab.routing.dynamic_routing` (``tests/test_learned_routing.py``).

**Similarity routing** (§4.1). Routing as clustering: for each output j, with a kernel k and
k_ij = k(μ_j, v_ij), minimise over the column c_{·j} (Σ_i c_ij = 1, c_ij ≥ 0):

    F(c_{·j}) = Σ_i c_ij (−k_ij) + λ1 KL(c_{·j} ‖ uniform) + λ2 KL(c_{·j} ‖ a)            (eq. 2-3)
            = Σ_i c_ij (−k_ij) + λ1 Σ_i c_ij log(I c_ij) + λ2 Σ_i c_ij log(c_ij / a_i)

(:func:`similarity_objective`). With a Lagrange multiplier γ for Σ_i c_ij = 1, the gradient is zero when:

    −k_ij + λ1 (log c_ij + 1 + log I) + λ2 (log c_ij + 1 − log a_i) + γ = 0
    ⇔ (λ1 + λ2) log c_ij = k_ij + λ2 log a_i + const(j)

so, after normalising over i (the constant goes into the normalisation):

    c_ij = a_i^{λ2/(λ1+λ2)} exp(k_ij / (λ1+λ2)) / Σ_i' a_i'^{λ2/(λ1+λ2)} exp(k_i'j / (λ1+λ2))     (eq. 11)

:func:`closed_form_logits` gives the logits ``λ2/(λ1+λ2) · log a_i + k_ij/(λ1+λ2)`` and
:func:`closed_form_couplings` their softmax over i (the compatibility function is eq. 12: these logits).
F is strictly convex in c for λ1 + λ2 > 0, so this is the minimiser (checked against numerical
minimisation in the tests). λ1 pulls c toward uniform (softer clusters), λ2 toward the input activations.
The kernel is a mixture of Q Gaussians with softmax mixing weights (eq. 15, :func:`gaussian_mixture_kernel`):

    k(x, y) = Σ_q softmax(w)_q exp(−‖x − y‖² / (2 ℓ_q²))

and the output activation (eq. 13, :func:`similarity_activation`) is:

    a_j = σ(θ1 Σ_i c_ij k_ij + |θ3| Σ_i c_ij log a_i + θ2).

:class:`SimilarityRouter` learns λ1, λ2, ℓ, w and θ (the paper: Q = 4 in the hidden capsule layers, Q = 10
in the class layer, :data:`KERNELS`). In a convolutional routing layer the paper makes λ1, λ2 and θ distinct for
each output channel (capsule type) j, with one kernel for the layer: ``SimilarityRouter(channels=J)`` holds λ1,
λ2 ``(J,)`` and θ ``(3, J)``, and output j routes with its own. (With couplings normalised over the inputs, each
output j is its own clustering problem, so this is J independent routings sharing a kernel.)

**Connectionist routing** (§4.2, :class:`ConnectionistRouter`). One LSTM cell, shared by every pair (i, j),
reads per pair ``x_ij = [μ_j, a_i, v_ij, c_ij]`` (2D + 2 numbers) each iteration; its hidden and cell states
(zero at first) are carried across the iterations. A network f_c of the hidden state gives the logits
``r_ij = f_c(h_ij)`` (softmax over i), and at the end a network f_a of the cell states combined over the inputs
gives ``a_j = σ(f_a(mean_i cell_ij))`` (eq. 14; ``combine="sum"``: Σ_i cell_ij). Sizes: :data:`TABLE2`, the
paper's Table 2.

**Using a router in a network.** A router here is an ``nn.Module`` whose parameters train with the network.
``router.route(votes, activations)`` routes given votes and activations and returns a
:class:`GenericRoutingResult`. Called as ``router(u, weight)`` (it declares ``takes_weights = True``, the
protocol of :class:`~capsule_lab.layers.CapsuleLayer`) it does what a capsule layer needs
(:func:`route_capsules`): the activations a_i = ‖u_i‖, the normalised votes, the routing, and output poses
``a_j μ_j / ‖μ_j‖`` whose lengths are the output activations — so ``CapsNet(config,
router=SimilarityRouter())`` (chapter 02's model, which reads class lengths as scores) trains unchanged, and
:class:`LearnedRoutingLayer` is the same as a stand-alone layer.

**Where the paper is silent, this module chooses:**

- *Initial couplings*: uniform (r⁰ = 0, so c⁰ = 1/I over the inputs, or 1/J over the outputs), as the public
  code does; ``initial_logits`` can start elsewhere (e.g. ``log a_i``, the code's "with prior" variant).
- *μ normalisation*: the pose is the coupling-weighted mean Σ_i c_ij v_ij / Σ_i c_ij, nothing more (no squash,
  no unit length): with Σ_i c_ij = 1 it is a convex combination of the votes and stays in the unit ball.
  The paper alternates μ for fixed c (eq. 4) and c for fixed μ (eq. 11); for a Gaussian kernel the μ that
  exactly minimises F for fixed c would also weight each vote by its kernel value (a fixed point, not a
  closed form); Algorithm 1 and the public code use the plain weighted mean, and so does this module.
- *KL(c ‖ a)* uses the activations as given (not renormalised to sum to 1): renormalising changes F by the
  constant λ2 log Σ_i a_i and not the minimiser.
- *How a_i enters*: a_i = ‖u_i‖ (the input capsule's length); ``log a_i`` is taken as
  ``log max(a_i, 10⁻⁶)`` (:data:`ACTIVATION_FLOOR`), so a silent capsule (a_i = 0) gets a large negative but
  finite logit instead of −∞.
- *λ parametrisation*: λ = softplus(ρ) ≥ 0, ℓ_q = exp(log ℓ_q) > 0, mixing weights softmax(w), θ free (θ3
  enters as ``|θ3|`` as the paper writes). Initial values: λ1 = λ2 = 0.1 (so 1/(λ1+λ2) = 5 and a vote at
  distance 0 is e⁵ times more compatible than a far one), ℓ_q log-spaced over [0.1, 1] (the votes lie in the
  unit ball), w = 0 (equal mixing), θ = (10, −5, 1): the agreement Σ_i c_ij k_ij lies in (0, 1], and
  θ1 = 10, θ2 = −5 map it onto σ(−5) … σ(5), past the margin loss's 0.1 and 0.9 (logits ∓2.2), centred at
  agreement 0.5. With θ = (1, 0, 1) a_j can only move within σ(−∞ … 1) and Adam moves the scalars slowly: one
  epoch of a slim CapsNet on 4000 offline digits (batch 64, Adam 3e-3, seed 0) reached 13 % test accuracy
  with θ = (1, 0, 1) and 83 % with (10, −5, 1).
- *Outputs convention for the learned routers*: available (``normalize_over="outputs"``) for comparison;
  then the closed form is applied with a softmax over j, which no longer minimises F (whose constraint is
  Σ_i c_ij = 1).
- *LSTM input*: the paper's text feeds "the compatibility probabilities" c_ij of the previous iteration
  (c⁰ = uniform at the first), which is what the public code does; the issue's "previous r_ij" would be the
  unnormalised logits, which do not exist before the first iteration. This module feeds c_ij.
- *Table 2*: of its two columns of hidden sizes, the first is the compatibility network f_c (hidden state →
  r_ij), the second the activation network f_a (cell states → a_j): the order the text introduces them in,
  and the public code's ``compatibility_layers=[64, 64], activation_layers=[124, 124]`` for the class layer.
  Hidden layers use ReLU; f_c ends in a linear unit, f_a in a sigmoid.
- *The cell states combined*: averaged over the inputs i by default (``combine="mean"``); the public code
  sums them (``combine="sum"``). The two differ by the factor 1/I, which f_a's first layer could absorb,
  but at PyTorch's default initialisation the sum over I = 144 (slim CapsNet) to 1152 inputs drives the
  output sigmoid into saturation: a slim CapsNet trained on 4000 offline digits (2 epochs, batch 64, Adam
  3e-3, seed 0) reached 10 % test accuracy with the sum (every a_j near 0, margin loss 0.81 = 0.9²) and
  95.6 % with the mean (the same setup: dynamic routing 97.1 %, similarity routing 90.6 %).
- *Output poses in a network*: ``a_j μ_j / ‖μ_j‖`` (a direction from the routing, a length from the
  activation), so models that read lengths as class scores and chain layers by lengths work unchanged.
- *Parameters per layer*: each router object has its own parameters, so each layer learns its own routing;
  §4.1 says the kernel parameters are "shared across layers" in its experiments (the sentence is ambiguous):
  pass the same router object to several layers to share them.

Shapes (B batch, I input capsules, J output capsules, D output dimension, H the LSTM's hidden size):
    votes        (B, I, J, D)
    activations  (B, I) inputs, (B, J) outputs
    logits r     (B, I, J)
    couplings c  (B, I, J)   Σ_i c = 1 ("inputs") or Σ_j c = 1 ("outputs")
    poses μ      (B, J, D)
    kernel k     (B, I, J)
    LSTM state   (h, cell), each (B, I, J, H)
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_nonnegative, check_positive_int, check_tensor, shape_error
from .capsules import squash
from .routing import RoutingResult

__all__ = ["ACTIVATION_FLOOR", "NORMALIZATIONS", "KERNELS", "TABLE2", "GenericRoutingResult", "normalized_votes",
           "capsule_activations", "normalize_couplings", "weighted_mean_pose", "generic_routing",
           "dynamic_compatibility", "squashed_sum_pose", "length_activation", "dynamic_routing_generic",
           "gaussian_mixture_kernel", "kernel_matrix", "similarity_objective", "closed_form_logits",
           "closed_form_couplings", "similarity_activation", "similarity_routing", "route_capsules",
           "SimilarityRouter", "ConnectionistRouter", "LearnedRoutingLayer",
           "GenericDynamicRouter"]

#: The floor under the input activations before their log is taken, so that a silent capsule gets a finite log.
ACTIVATION_FLOOR = 1e-6
#: The softmax axis of the couplings ``(B, I, J)`` for each of the two conventions, by name.
NORMALIZATIONS = {"inputs": 1, "outputs": 2}
#: Q, the number of Gaussian kernels in the mixture per layer of the paper's network (§5).
KERNELS = {"conv_caps_1": 4, "conv_caps_2": 4, "class_caps": 10}
#: The paper's Table 2 per layer of its network, as (hidden sizes of the compatibility network f_c, hidden sizes
#: of the activation network f_a, the LSTM's hidden and cell size).
TABLE2 = {"conv_caps_1": ((), (), 16), "conv_caps_2": ((32, 32), (64, 64), 16),
          "class_caps": ((64, 64), (124, 124), 16)}

_VOTE_EPS = 1e-6


class GenericRoutingResult(NamedTuple):
    """What :func:`generic_routing` (and every router of chapter 07) returns.

    poses: ``(B, J, D)`` the final poses μ_j.
    activations: ``(B, J)`` the output activations a_j from the activation function.
    couplings: ``(B, I, J)`` the couplings that produced ``poses``.
    logits: ``(B, I, J)`` the compatibilities r whose normalisation gives ``couplings``.
    state: the state after the last iteration (``None`` for a stateless router).
    history: one :class:`~capsule_lab.routing.RoutingResult` (μ^t, c^t, r^t) per pose computed, t = 0 … T
    (empty unless asked for with ``history=True``).
    """

    poses: torch.Tensor
    activations: torch.Tensor
    couplings: torch.Tensor
    logits: torch.Tensor
    state: Any = None
    history: tuple = ()


# ------------------------------------------------------------------------------------------------ checks

def _check_votes(votes) -> None:
    check_tensor(votes, "votes", "(B, I, J, D)", ndim=4, nonempty=True, floating=True)


def _check_activations(activations, votes: torch.Tensor, name: str = "activations") -> torch.Tensor:
    B, I = votes.shape[:2]
    check_tensor(activations, name, f"(B, I) = ({B}, {I})", sizes=(B, I), floating=True)
    if bool((activations < 0).any()) or not bool(torch.isfinite(activations).all()):
        raise ValueError(f"{name} must be finite and >= 0 (capsule lengths)")
    return activations.to(votes.dtype)


def _check_normalize_over(normalize_over) -> int:
    if normalize_over not in NORMALIZATIONS:
        raise ValueError(f"normalize_over must be 'inputs' (Σ_i c_ij = 1, Faria) or 'outputs' (Σ_j c_ij = 1, "
                         f"Sabour), got {normalize_over!r}")
    return NORMALIZATIONS[normalize_over]


def _check_lambdas(lam1, lam2, outputs: Optional[int] = None) -> tuple:
    """λ1, λ2 ≥ 0 with λ1 + λ2 > 0: numbers, 0-d tensors (learned ones) or ``(J,)`` tensors, one per output j
    (``outputs`` = J, when known)."""
    out = []
    for value, name in ((lam1, "lam1"), (lam2, "lam2")):
        if isinstance(value, torch.Tensor):
            per_output = value.dim() == 1 and (outputs is None or value.shape[0] == outputs)
            if not value.is_floating_point() or not (value.dim() == 0 or per_output):
                raise shape_error(name, "() or (J,) (one per output), floating" +
                                  (f", J = {outputs}" if outputs is not None else ""), value)
            if not bool((value.detach() >= 0).all()):
                raise ValueError(f"{name} must be >= 0, got {value.detach().tolist()!r}")
        else:
            check_nonnegative(value, name)
        out.append(value)
    total = torch.as_tensor(out[0]).detach().double() + torch.as_tensor(out[1]).detach().double()
    if not bool((total > 0).all()):
        raise ValueError(f"lam1 + lam2 must be > 0 (the closed form divides by it), got {total.tolist()}")
    return tuple(out)


def _check_theta(theta, outputs: Optional[int] = None) -> None:
    check_tensor(theta, "theta", "(3,) = (θ1, θ2, θ3) or (3, J), one column per output", min_ndim=1,
                 floating=True)
    if theta.shape[0] != 3 or theta.dim() > 2 or (theta.dim() == 2 and outputs is not None
                                                  and theta.shape[1] != outputs):
        raise shape_error("theta", "(3,) = (θ1, θ2, θ3) or (3, J), one column per output" +
                          (f", J = {outputs}" if outputs is not None else ""), theta)


def _check_couplings_and_votes(couplings, votes, name: str = "couplings") -> None:
    _check_votes(votes)
    check_tensor(couplings, name, f"(B, I, J) = {tuple(votes.shape[:3])}", sizes=tuple(votes.shape[:3]))


def _norm(x: torch.Tensor) -> torch.Tensor:
    """‖x‖ over the last dimension (kept), as sqrt(‖x‖² + 10⁻¹⁶): finite with a finite gradient at 0."""
    return torch.sqrt((x * x).sum(dim=-1, keepdim=True) + 1e-16)


def _log_activations(activations: torch.Tensor) -> torch.Tensor:
    return torch.log(activations.clamp_min(ACTIVATION_FLOOR))


# ------------------------------------------------------------------------------------------ votes, poses

def normalized_votes(u: torch.Tensor, weight: torch.Tensor, eps: float = _VOTE_EPS) -> torch.Tensor:
    """The paper's votes (eq. 1): ``v_ij = W_ij u_i / (‖W_ij‖_F + eps)``, eps = 10⁻⁶.

    u ``(B, I, D_in)``, weight ``(I, J, D, D_in)`` → votes ``(B, I, J, D)``. Multiplying W_ij by any factor
    leaves v_ij unchanged (up to eps), and ``|v_ij| <= |u_i|``. Chapter 07.
    """
    check_tensor(weight, "weight", "(I, J, D, D_in)", ndim=4, nonempty=True, floating=True)
    I, _, _, D_in = weight.shape
    check_tensor(u, "u", f"(B, I, D_in) = (B, {I}, {D_in})", sizes=(None, I, D_in), floating=True)
    check_nonnegative(eps, "eps")
    frobenius = torch.linalg.matrix_norm(weight)                     # (I, J)
    return torch.einsum("ijdk,bik->bijd", weight / (frobenius + eps)[..., None, None], u)


def capsule_activations(u: torch.Tensor) -> torch.Tensor:
    """The input activations a_i = ``|u_i|``, the capsules' lengths: u ``(B, I, d)`` → ``(B, I)``. Chapter 07.

    The norm is smoothed (``sqrt(|u|^2 + 1e-16)``) so that its gradient is finite at u = 0.
    """
    check_tensor(u, "u", "(B, I, d)", ndim=3, nonempty=True, floating=True)
    return _norm(u).squeeze(-1)


def normalize_couplings(logits: torch.Tensor, normalize_over: str = "inputs") -> torch.Tensor:
    """Couplings from logits ``(B, I, J)``: softmax over the inputs i (``"inputs"``, Σ_i c_ij = 1, Faria) or over
    the outputs j (``"outputs"``, Σ_j c_ij = 1, Sabour). Chapter 07.
    """
    check_tensor(logits, "logits", "(B, I, J)", ndim=3, nonempty=True, floating=True)
    return torch.softmax(logits, dim=_check_normalize_over(normalize_over))


def weighted_mean_pose(couplings: torch.Tensor, votes: torch.Tensor) -> torch.Tensor:
    """The default pose of Algorithm 1: ``μ_j = Σ_i c_ij v_ij / Σ_i c_ij`` ``(B, J, D)``.

    With couplings normalised over the inputs (Σ_i c_ij = 1) this is the weighted sum, a convex combination of
    the votes. Chapter 07.
    """
    _check_couplings_and_votes(couplings, votes)
    weight = couplings / couplings.sum(dim=1, keepdim=True).clamp_min(torch.finfo(couplings.dtype).tiny)
    return torch.einsum("bij,bijd->bjd", weight, votes)


# ------------------------------------------------------------------------------ the generic procedure

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
) -> GenericRoutingResult:
    """The generic routing procedure (Faria's Algorithm 1): a router is a compatibility and an activation function.

    Args:
        votes: ``(B, I, J, D)`` the votes v_ij (e.g. :func:`normalized_votes`).
        activations: ``(B, I)`` the input activations a_i ≥ 0 (e.g. :func:`capsule_activations`); ``None``:
            all ones (a router that ignores them, like dynamic routing).
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
        history: also return (μ^t, c^t, r^t) for every t = 0 … T in ``.history``.

    Returns:
        :class:`GenericRoutingResult` (poses, activations, couplings, logits, state, history).

    Chapter 07.
    """
    _check_votes(votes)
    B, I, J, D = votes.shape
    activations = (votes.new_ones(B, I) if activations is None else _check_activations(activations, votes))
    for fn, name in ((compatibility, "compatibility"), (activation, "activation")):
        if not callable(fn):
            raise ValueError(f"{name} must be a function, got {fn!r}")
    if pose_fn is None:
        pose_fn = weighted_mean_pose
    elif not callable(pose_fn):
        raise ValueError(f"pose_fn must be a function (couplings, votes) → poses (B, J, D), got {pose_fn!r}")
    check_positive_int(iterations, "iterations", minimum=0)
    dim = _check_normalize_over(normalize_over)
    if initial_logits is None:
        logits = votes.new_zeros(B, I, J)
    else:
        if not isinstance(initial_logits, torch.Tensor) or tuple(initial_logits.shape) not in {(B, I, J), (I, J)}:
            raise shape_error("initial_logits", f"(B, I, J) = ({B}, {I}, {J}) or (I, J)", initial_logits)
        logits = initial_logits.to(votes.dtype).expand(B, I, J)

    def pose(c):
        mu = pose_fn(c, votes)
        if not isinstance(mu, torch.Tensor) or tuple(mu.shape) != (B, J, D):
            raise shape_error("pose_fn's poses", f"(B, J, D) = ({B}, {J}, {D})", mu)
        return mu

    couplings = torch.softmax(logits, dim=dim)
    poses = pose(couplings)
    steps = [RoutingResult(poses, couplings, logits)]
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
            steps.append(RoutingResult(poses, couplings, logits))
    out_activations = activation(state, couplings, votes, poses, activations)
    if not isinstance(out_activations, torch.Tensor) or tuple(out_activations.shape) != (B, J):
        raise shape_error("activation's output", f"(B, J) = ({B}, {J})", out_activations)
    return GenericRoutingResult(poses, out_activations, couplings, logits, state, tuple(steps) if history else ())


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
    """Sabour's activation as an activation function: the length of the squashed pose, ``a_j = |μ_j|``.

    Chapter 07.
    """
    check_tensor(poses, "poses", "(B, J, D)", ndim=3, nonempty=True)
    return _norm(poses).squeeze(-1)


def dynamic_routing_generic(votes: torch.Tensor, iterations: int = 3, *, history: bool = False
                            ) -> GenericRoutingResult:
    """Sabour's dynamic routing with ``iterations`` = r iterations, run by :func:`generic_routing`.

    r iterations of Algorithm 1 (Sabour) are r − 1 compatibility updates (T = r − 1) with
    :func:`dynamic_compatibility`, :func:`squashed_sum_pose`, :func:`length_activation`, couplings normalised
    over the outputs. Poses, couplings and logits equal :func:`capsule_lab.routing.dynamic_routing`'s.
    Chapter 07.
    """
    check_positive_int(iterations, "iterations")
    return generic_routing(votes, None, dynamic_compatibility, length_activation, iterations - 1,
                           normalize_over="outputs", pose_fn=squashed_sum_pose, history=history)


# ------------------------------------------------------------------------------------ similarity routing

def _check_kernel_parameters(length_scales, mixing_logits) -> None:
    check_tensor(length_scales, "length_scales", "(Q,)", ndim=1, nonempty=True, floating=True)
    Q = length_scales.shape[0]
    check_tensor(mixing_logits, "mixing_logits", f"(Q,) = ({Q},)", sizes=(Q,), floating=True)
    if not bool((length_scales.detach() > 0).all()):
        raise ValueError("length_scales must all be > 0")


def gaussian_mixture_kernel(x: torch.Tensor, y: torch.Tensor, length_scales: torch.Tensor,
                            mixing_logits: torch.Tensor) -> torch.Tensor:
    """The kernel of eq. 15: ``k(x, y) = Σ_q softmax(w)_q exp(−|x − y|² / (2 ℓ_q²))``.

    x, y ``(..., D)`` (broadcast against each other), length_scales ℓ ``(Q,)`` > 0, mixing_logits w ``(Q,)`` →
    ``(...)``. k(x, x) = 1 and 0 < k ≤ 1. Chapter 07.
    """
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.dim() < 1 or y.dim() < 1:
        raise ValueError(f"x and y must be tensors of shape (..., D), got {_describe(x)} and {_describe(y)}")
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"x and y must have the same last dimension D, got {tuple(x.shape)} and {tuple(y.shape)}")
    _check_kernel_parameters(length_scales, mixing_logits)
    return _kernel(x, y, length_scales, mixing_logits)


def _kernel(x, y, length_scales, mixing_logits):
    sq = ((x - y) ** 2).sum(dim=-1, keepdim=True)                                 # (..., 1)
    weights = torch.softmax(mixing_logits, dim=0)
    return (weights * torch.exp(-sq / (2 * length_scales ** 2))).sum(dim=-1)


def _describe(x) -> str:
    return str(tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__


def kernel_matrix(votes: torch.Tensor, poses: torch.Tensor, length_scales: torch.Tensor,
                  mixing_logits: torch.Tensor) -> torch.Tensor:
    """``k_ij = k(μ_j, v_ij)`` for every vote: votes ``(B, I, J, D)``, poses ``(B, J, D)`` → ``(B, I, J)``.

    Chapter 07.
    """
    _check_votes(votes)
    B, _, J, D = votes.shape
    check_tensor(poses, "poses", f"(B, J, D) = ({B}, {J}, {D})", sizes=(B, J, D))
    return gaussian_mixture_kernel(poses[:, None], votes, length_scales, mixing_logits)


def _check_kernel_and_activations(kernel, activations):
    check_tensor(kernel, "kernel", "(B, I, J)", ndim=3, nonempty=True, floating=True)
    B, I, _ = kernel.shape
    check_tensor(activations, "activations", f"(B, I) = ({B}, {I})", sizes=(B, I), floating=True)
    if bool((activations < 0).any()):
        raise ValueError("activations must be >= 0 (capsule lengths)")


def similarity_objective(couplings: torch.Tensor, kernel: torch.Tensor, activations: torch.Tensor,
                         lam1, lam2) -> torch.Tensor:
    """The clustering objective (eq. 2) for each output j, ``(B, J)``:

        F = Σ_i c_ij (−k_ij) + λ1 Σ_i c_ij log(I c_ij) + λ2 Σ_i c_ij log(c_ij / a_i)
          = Σ_i c_ij (−k_ij) + λ1 KL(c_{·j} ‖ uniform) + λ2 KL(c_{·j} ‖ a)

    couplings and kernel ``(B, I, J)`` (each column c_{·j} a distribution over i), activations ``(B, I)``
    (``log a`` floored at :data:`ACTIVATION_FLOOR`), λ1, λ2 ≥ 0 (numbers, or ``(J,)``: one per output). Terms
    with c_ij = 0 count 0. Its minimiser is :func:`closed_form_couplings`. Chapter 07.
    """
    _check_kernel_and_activations(kernel, activations)
    check_tensor(couplings, "couplings", f"(B, I, J) = {tuple(kernel.shape)}", sizes=tuple(kernel.shape),
                 floating=True)
    lam1, lam2 = _check_lambdas(lam1, lam2, kernel.shape[2])
    I = kernel.shape[1]
    log_c = torch.log(couplings.clamp_min(torch.finfo(couplings.dtype).tiny))
    c_log_c = torch.where(couplings > 0, couplings * log_c, torch.zeros_like(couplings))
    log_a = _log_activations(activations)[:, :, None]
    kl_uniform = (c_log_c + couplings * math.log(I)).sum(dim=1)
    kl_activations = (c_log_c - couplings * log_a).sum(dim=1)
    return -(couplings * kernel).sum(dim=1) + lam1 * kl_uniform + lam2 * kl_activations


def closed_form_logits(kernel: torch.Tensor, activations: torch.Tensor, lam1, lam2) -> torch.Tensor:
    """The compatibility of eq. 12: ``r_ij = λ2/(λ1+λ2) · log a_i + k_ij/(λ1+λ2)`` ``(B, I, J)``.

    kernel ``(B, I, J)``, activations ``(B, I)``, λ1, λ2 ≥ 0 with λ1 + λ2 > 0 (numbers, 0-d tensors, or ``(J,)``
    tensors: one λ per output j). Their softmax over i is the minimiser of :func:`similarity_objective`.
    Chapter 07.
    """
    _check_kernel_and_activations(kernel, activations)
    lam1, lam2 = _check_lambdas(lam1, lam2, kernel.shape[2])
    return _closed_form_logits(kernel, activations, lam1, lam2)


def _closed_form_logits(kernel, activations, lam1, lam2):
    total = lam1 + lam2
    return (lam2 / total) * _log_activations(activations)[:, :, None] + kernel / total


def closed_form_couplings(kernel: torch.Tensor, activations: torch.Tensor, lam1, lam2) -> torch.Tensor:
    """The closed form (eq. 11): ``c_ij ∝ a_i^{λ2/(λ1+λ2)} exp(k_ij/(λ1+λ2))``, normalised over the inputs i.

    ``(B, I, J)``, each column c_{·j} sums to 1: the minimiser of :func:`similarity_objective`. Chapter 07.
    """
    return torch.softmax(closed_form_logits(kernel, activations, lam1, lam2), dim=1)


def similarity_activation(couplings: torch.Tensor, kernel: torch.Tensor, activations: torch.Tensor,
                          theta: torch.Tensor) -> torch.Tensor:
    """The output activation of eq. 13: ``a_j = σ(θ1 Σ_i c_ij k_ij + |θ3| Σ_i c_ij log a_i + θ2)`` ``(B, J)``.

    couplings, kernel ``(B, I, J)``; activations ``(B, I)`` (``log a`` floored at :data:`ACTIVATION_FLOOR`);
    theta ``(3,)`` = (θ1, θ2, θ3), or ``(3, J)``: one (θ1, θ2, θ3) per output j. Chapter 07.
    """
    _check_kernel_and_activations(kernel, activations)
    check_tensor(couplings, "couplings", f"(B, I, J) = {tuple(kernel.shape)}", sizes=tuple(kernel.shape),
                 floating=True)
    _check_theta(theta, kernel.shape[2])
    return _similarity_activation(couplings, kernel, activations, theta)


def _similarity_activation(couplings, kernel, activations, theta):
    agreement = (couplings * kernel).sum(dim=1)
    support = (couplings * _log_activations(activations)[:, :, None]).sum(dim=1)
    return torch.sigmoid(theta[0] * agreement + theta[2].abs() * support + theta[1])


def similarity_routing(votes: torch.Tensor, activations: Optional[torch.Tensor], lam1, lam2,
                       length_scales: torch.Tensor, mixing_logits: torch.Tensor, theta: torch.Tensor,
                       iterations: int = 3, *, normalize_over: str = "inputs",
                       initial_logits: Optional[torch.Tensor] = None, history: bool = False
                       ) -> GenericRoutingResult:
    """Similarity routing (§4.1) with given parameters, run by :func:`generic_routing`.

    Compatibility: the closed form (:func:`closed_form_logits` of the kernel values
    :func:`kernel_matrix` at the current poses); activation: :func:`similarity_activation` at the final
    poses; pose: the weighted mean. λ1, λ2 ≥ 0 (λ1 + λ2 > 0), length_scales ``(Q,)``, mixing_logits
    ``(Q,)``, theta ``(3,)``: numbers or tensors (learned ones keep their gradient). λ1, λ2 ``(J,)`` and theta
    ``(3, J)`` give each output j its own (a convolutional layer's channels, §4.1). Chapter 07.
    """
    _check_votes(votes)
    _check_lambdas(lam1, lam2, votes.shape[2])
    _check_kernel_parameters(length_scales, mixing_logits)
    _check_theta(theta, votes.shape[2])

    def compatibility(state, logits, couplings, v, poses, a):
        return _closed_form_logits(_kernel(poses[:, None], v, length_scales, mixing_logits), a, lam1, lam2), state

    def activation(state, couplings, v, poses, a):
        return _similarity_activation(couplings, _kernel(poses[:, None], v, length_scales, mixing_logits), a, theta)

    return generic_routing(votes, activations, compatibility, activation, iterations,
                           normalize_over=normalize_over, initial_logits=initial_logits, history=history)


# --------------------------------------------------------------------------------- routers in a network

def route_capsules(router, u: torch.Tensor, weight: torch.Tensor) -> RoutingResult:
    """What a capsule layer does with a learned router: a_i = ``|u_i|``, the normalised votes, the routing, and
    output poses ``a_j μ_j / |μ_j|`` whose lengths are the output activations.

    router: an object with ``route(votes, activations) → GenericRoutingResult`` (:class:`SimilarityRouter`,
    :class:`ConnectionistRouter`); u ``(B, I, D_in)``, weight ``(I, J, D, D_in)``. Returns a
    :class:`~capsule_lab.routing.RoutingResult` (poses ``(B, J, D)``, couplings, logits ``(B, I, J)``), what
    :class:`~capsule_lab.layers.CapsuleLayer` and the models expect from a router. Chapter 07.
    """
    if not callable(getattr(router, "route", None)):
        raise ValueError(f"router must have a method route(votes, activations), got {router!r}")
    votes = normalized_votes(u, weight)
    routed = router.route(votes, capsule_activations(u))
    poses = routed.activations[..., None] * routed.poses / _norm(routed.poses)
    return RoutingResult(poses, routed.couplings, routed.logits)


class _LearnedRouter(nn.Module):
    """Shared by the learned routers: ``route(votes, activations)`` and the layer protocol ``router(u, weight)``."""

    #: called as ``router(u, weight)`` by :class:`~capsule_lab.layers.CapsuleLayer`
    takes_weights = True

    def __init__(self, iterations: int, normalize_over: str):
        super().__init__()
        check_positive_int(iterations, "iterations", minimum=0)
        _check_normalize_over(normalize_over)
        self.iterations = iterations
        self.normalize_over = normalize_over

    def forward(self, u: torch.Tensor, weight: torch.Tensor) -> RoutingResult:
        """Route input capsules u ``(B, I, D_in)`` through W ``(I, J, D, D_in)`` (:func:`route_capsules`)."""
        return route_capsules(self, u, weight)


class SimilarityRouter(_LearnedRouter):
    """Similarity routing (§4.1) with learned λ1, λ2, length scales, mixing weights and θ.

    ``route(votes, activations)`` → :class:`GenericRoutingResult` (:func:`similarity_routing` with the
    current parameters); ``router(u, weight)`` → :class:`~capsule_lab.routing.RoutingResult` for a capsule
    layer (:func:`route_capsules`), so ``CapsNet(config, router=SimilarityRouter())`` works.

    Args:
        kernels: Q, the number of Gaussian kernels (the paper: 4 in hidden layers, 10 in the class layer,
            :data:`KERNELS`; default 10, the class layer's).
        iterations: T, the compatibility updates (the paper: 3).
        lam1, lam2: initial λ1, λ2 > 0 (parametrised as softplus of a free parameter).
        length_scales: initial ℓ ``(Q,)`` (default log-spaced over [0.1, 1]); parametrised as exp(log ℓ).
        theta: initial (θ1, θ2, θ3) (default (10, −5, 1), see the module's choices).
        normalize_over: ``"inputs"`` (the paper) or ``"outputs"``.
        channels: None (one λ1, λ2 and θ for every output) or J, the number of outputs it routes to: then each
            output j learns its own λ1, λ2 ``(J,)`` and θ ``(3, J)`` (all starting from the values above), as
            the paper's convolutional routing layers do for each channel; the kernel stays one per router.

    Chapter 07.
    """

    def __init__(self, kernels: int = 10, iterations: int = 3, lam1: float = 0.1, lam2: float = 0.1,
                 length_scales: Optional[Sequence[float]] = None, theta: Sequence[float] = (10.0, -5.0, 1.0),
                 normalize_over: str = "inputs", channels: Optional[int] = None):
        super().__init__(iterations, normalize_over)
        check_positive_int(kernels, "kernels")
        if channels is not None:
            check_positive_int(channels, "channels")
        self.channels = channels
        for value, name in ((lam1, "lam1"), (lam2, "lam2")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a number > 0 (its softplus parameter is finite), got {value!r}")
        if length_scales is None:
            length_scales = torch.logspace(-1, 0, kernels, dtype=torch.float64) if kernels > 1 else [0.5]
        scales = torch.as_tensor(length_scales, dtype=torch.float64).flatten()
        if scales.shape != (kernels,) or not bool((scales > 0).all()):
            raise ValueError(f"length_scales must be {kernels} numbers > 0, got {list(scales.tolist())}")
        theta = torch.as_tensor(theta, dtype=torch.float64).flatten()
        if theta.shape != (3,):
            raise ValueError(f"theta must be 3 numbers (θ1, θ2, θ3), got {theta.tolist()}")
        dtype = torch.get_default_dtype()
        shape = () if channels is None else (channels,)
        self.raw_lam1 = nn.Parameter(_softplus_inverse(float(lam1)).to(dtype).expand(shape).clone())
        self.raw_lam2 = nn.Parameter(_softplus_inverse(float(lam2)).to(dtype).expand(shape).clone())
        self.log_length_scales = nn.Parameter(scales.log().to(dtype))
        self.mixing_logits = nn.Parameter(torch.zeros(kernels, dtype=dtype))
        self.theta = nn.Parameter(theta.to(dtype) if channels is None else theta.to(dtype)[:, None].repeat(1, channels))

    @property
    def lam1(self) -> torch.Tensor:
        """The weight λ1 = softplus(raw_lam1) ≥ 0 of KL(c ‖ uniform), ``()`` or one per channel ``(J,)``."""
        return F.softplus(self.raw_lam1)

    @property
    def lam2(self) -> torch.Tensor:
        """The weight λ2 = softplus(raw_lam2) ≥ 0 of KL(c ‖ a), ``()`` or one per channel ``(J,)``."""
        return F.softplus(self.raw_lam2)

    @property
    def length_scales(self) -> torch.Tensor:
        """The kernels' length scales ℓ = exp(log_length_scales) > 0, shape ``(Q,)``."""
        return self.log_length_scales.exp()

    def kernel(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The learned kernel k(x, y) (:func:`gaussian_mixture_kernel`) at the current parameters."""
        return gaussian_mixture_kernel(x, y, self.length_scales, self.mixing_logits)

    def route(self, votes: torch.Tensor, activations: Optional[torch.Tensor] = None, *, history: bool = False
              ) -> GenericRoutingResult:
        """Route ``votes`` ``(B, I, J, D)`` with input ``activations`` ``(B, I)`` (``None``: ones)."""
        _check_votes(votes)
        if self.channels is not None and votes.shape[2] != self.channels:
            raise shape_error("votes", f"(B, I, J, D) with J = channels = {self.channels}", votes)
        return similarity_routing(votes, activations, self.lam1, self.lam2, self.length_scales,
                                  self.mixing_logits, self.theta, self.iterations,
                                  normalize_over=self.normalize_over, history=history)

    def extra_repr(self) -> str:
        return f"kernels={self.mixing_logits.shape[0]}, iterations={self.iterations}, " \
               f"normalize_over={self.normalize_over!r}, channels={self.channels}"


def _softplus_inverse(y: float) -> torch.Tensor:
    """x with softplus(x) = y > 0: log(exp(y) − 1), computed stably."""
    y = torch.tensor(y, dtype=torch.float64)
    return y + torch.log(-torch.expm1(-y))


def _mlp(sizes: Sequence[int], out_activation: Optional[nn.Module] = None) -> nn.Sequential:
    """Linear layers of the given sizes, ReLU between them, then ``out_activation`` (if any)."""
    layers = []
    for k, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if k < len(sizes) - 2:
            layers.append(nn.ReLU())
    if out_activation is not None:
        layers.append(out_activation)
    return nn.Sequential(*layers)


def _check_hidden(sizes, name: str) -> tuple:
    sizes = tuple(sizes)
    for s in sizes:
        check_positive_int(s, f"{name} entries")
    return sizes


class ConnectionistRouter(_LearnedRouter):
    """Connectionist routing (§4.2): one LSTM cell shared by every pair (i, j), a compatibility network of its
    hidden state and an activation network of its cell states.

    Per iteration and pair, the cell reads ``[μ_j, a_i, v_ij, c_ij]`` (2D + 2 numbers; c_ij the couplings of
    the previous iteration, uniform at the first) and updates (h_ij, cell_ij), zero at first and carried
    across the iterations; ``r_ij = f_c(h_ij)``, c = softmax over i; after the last iteration
    ``a_j = σ(f_a(mean_i cell_ij))`` (eq. 14; the public code's sum with ``combine="sum"``).

    Args:
        pose_dim: D, the dimension of the votes and poses.
        hidden: the LSTM's hidden and cell size (Table 2: 16).
        compatibility_hidden: hidden sizes of f_c (Table 2, class layer: (64, 64); :data:`TABLE2`).
        activation_hidden: hidden sizes of f_a (Table 2, class layer: (124, 124)).
        iterations: T (the paper: 3).
        normalize_over: ``"inputs"`` (the paper) or ``"outputs"``.
        combine: how the cell states of the I inputs are combined for f_a, ``"mean"`` (default) or ``"sum"``
            (the public code; it saturates f_a's sigmoid when I is large, see the module's choices).

    ``route(votes, activations)`` → :class:`GenericRoutingResult` whose ``state`` is (h, cell), each
    ``(B, I, J, H)``; ``router(u, weight)`` → :class:`~capsule_lab.routing.RoutingResult` for a capsule layer.

    Chapter 07.
    """

    def __init__(self, pose_dim: int, hidden: int = 16, compatibility_hidden: Sequence[int] = (64, 64),
                 activation_hidden: Sequence[int] = (124, 124), iterations: int = 3,
                 normalize_over: str = "inputs", combine: str = "mean"):
        super().__init__(iterations, normalize_over)
        check_positive_int(pose_dim, "pose_dim")
        if combine not in ("mean", "sum"):
            raise ValueError(f"combine must be 'mean' or 'sum', got {combine!r}")
        self.combine = combine
        check_positive_int(hidden, "hidden")
        compatibility_hidden = _check_hidden(compatibility_hidden, "compatibility_hidden")
        activation_hidden = _check_hidden(activation_hidden, "activation_hidden")
        self.pose_dim, self.hidden = pose_dim, hidden
        self.cell = nn.LSTMCell(2 * pose_dim + 2, hidden)
        self.compatibility_net = _mlp((hidden, *compatibility_hidden, 1))
        self.activation_net = _mlp((hidden, *activation_hidden, 1), nn.Sigmoid())

    def initial_state(self, votes: torch.Tensor) -> tuple:
        """Zero hidden and cell states ``(B, I, J, H)`` for ``votes`` ``(B, I, J, D)``."""
        zeros = votes.new_zeros(*votes.shape[:3], self.hidden)
        return zeros, zeros

    def compatibility(self, state, logits, couplings, votes, poses, activations):
        """One LSTM step for every pair; returns the new logits ``r_ij = f_c(h_ij)`` and the state (h, cell)."""
        B, I, J, D = votes.shape
        if state is None:
            state = self.initial_state(votes)
        h, cell = state
        x = torch.cat([poses[:, None].expand(B, I, J, D), activations[:, :, None, None].expand(B, I, J, 1),
                       votes, couplings[..., None]], dim=-1)
        h, cell = self.cell(x.reshape(-1, 2 * D + 2), (h.reshape(-1, self.hidden), cell.reshape(-1, self.hidden)))
        h, cell = h.view(B, I, J, self.hidden), cell.view(B, I, J, self.hidden)
        return self.compatibility_net(h).squeeze(-1), (h, cell)

    def activation(self, state, couplings, votes, poses, activations) -> torch.Tensor:
        """``a_j = σ(f_a(mean_i cell_ij))`` (or the sum) ``(B, J)``; zero cell states when no iteration ran."""
        if state is None:
            state = self.initial_state(votes)
        cells = state[1].mean(dim=1) if self.combine == "mean" else state[1].sum(dim=1)
        return self.activation_net(cells).squeeze(-1)

    def route(self, votes: torch.Tensor, activations: Optional[torch.Tensor] = None, *, history: bool = False
              ) -> GenericRoutingResult:
        """Route ``votes`` ``(B, I, J, D)`` with input ``activations`` ``(B, I)`` (``None``: ones)."""
        _check_votes(votes)
        if votes.shape[-1] != self.pose_dim:
            raise shape_error("votes", f"(B, I, J, D) with D = pose_dim = {self.pose_dim}", votes)
        return generic_routing(votes, activations, self.compatibility, self.activation, self.iterations,
                               normalize_over=self.normalize_over, history=history)

    def extra_repr(self) -> str:
        return f"pose_dim={self.pose_dim}, hidden={self.hidden}, iterations={self.iterations}, " \
               f"normalize_over={self.normalize_over!r}, combine={self.combine!r}"


class LearnedRoutingLayer(nn.Module):
    """A fully-connected capsule layer with a learned router: ``(B, I, D_in)`` → a routing result.

    Returns a :class:`~capsule_lab.routing.RoutingResult`, like :class:`~capsule_lab.layers.CapsuleLayer`.
    Holds W ``(I, J, D_out, D_in)``; ``forward(u)`` is :func:`route_capsules`: a_i = ``|u_i|``, the
    normalised votes (eq. 1), the router's routing, poses ``(B, J, D_out)`` of length a_j. ``router``:
    :class:`SimilarityRouter` (default: a new one) or :class:`ConnectionistRouter` (its ``pose_dim`` must be
    ``out_dim``), or anything with ``route(votes, activations)``. ``init_std``: the normal initialisation of
    W (its scale does not change the normalised votes).

    Chapter 07.
    """

    def __init__(self, in_caps: int, in_dim: int, out_caps: int, out_dim: int, router: Optional[nn.Module] = None,
                 init_std: float = 0.05):
        super().__init__()
        for value, name in ((in_caps, "in_caps"), (in_dim, "in_dim"), (out_caps, "out_caps"), (out_dim, "out_dim")):
            check_positive_int(value, name)
        check_nonnegative(init_std, "init_std")
        router = router if router is not None else SimilarityRouter()
        if not callable(getattr(router, "route", None)):
            raise ValueError(f"router must have a method route(votes, activations), got {router!r}")
        if getattr(router, "pose_dim", out_dim) != out_dim:
            raise ValueError(f"the router's pose_dim {router.pose_dim} must equal out_dim {out_dim}")
        self.in_caps, self.in_dim, self.out_caps, self.out_dim = in_caps, in_dim, out_caps, out_dim
        self.weight = nn.Parameter(torch.randn(in_caps, out_caps, out_dim, in_dim) * init_std)
        self.router = router

    def votes(self, u: torch.Tensor) -> torch.Tensor:
        """The normalised votes ``(B, I, J, D_out)`` (:func:`normalized_votes`)."""
        return normalized_votes(u, self.weight)

    def forward(self, u: torch.Tensor) -> RoutingResult:
        return route_capsules(self.router, u, self.weight)

    def extra_repr(self) -> str:
        return f"{self.in_caps}x{self.in_dim} -> {self.out_caps}x{self.out_dim}"


class GenericDynamicRouter(_LearnedRouter):
    """Sabour's dynamic routing with the learned routers' protocol, so that one network can swap it for them.

    ``route(votes, activations)`` → :class:`GenericRoutingResult` from :func:`dynamic_routing_generic`:
    ``iterations`` is Sabour's r ≥ 1 (r poses, r − 1 logit updates ``r_ij ← r_ij + ⟨v_ij, μ_j⟩``), the
    couplings are normalised over the outputs j (``normalize_over="outputs"``), the poses are squashed sums and
    the output activations their lengths ``a_j = |μ_j|``. The input ``activations`` are accepted and
    **ignored**: dynamic routing has no input activations (each input's vote length plays that role).
    ``router(u, weight)`` → :class:`~capsule_lab.routing.RoutingResult` for a capsule layer
    (:func:`route_capsules`; the poses it returns are the squashed μ_j themselves). It has no parameters.

    Chapter 07.
    """

    def __init__(self, iterations: int = 3):
        check_positive_int(iterations, "iterations")
        super().__init__(iterations, "outputs")

    def route(self, votes: torch.Tensor, activations: Optional[torch.Tensor] = None, *, history: bool = False
              ) -> GenericRoutingResult:
        """Route ``votes`` ``(B, I, J, D)`` by dynamic routing with r = ``iterations``; ``activations`` ignored."""
        return dynamic_routing_generic(votes, self.iterations, history=history)

    def extra_repr(self) -> str:
        return f"iterations={self.iterations}, normalize_over={self.normalize_over!r}"
