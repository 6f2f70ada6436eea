"""Similarity routing (Faria, §4.1): routing as clustering, with a learned kernel and a closed-form update.

Taught in chapter 07 (``chapters/07_learned_routing.ipynb``). For each output j, with a kernel k and
k_ij = k(μ_j, v_ij), the couplings of output j's column minimise (Σ_i c_ij = 1, c_ij ≥ 0):

    F(c_{·j}) = Σ_i c_ij (−k_ij) + λ1 KL(c_{·j} ‖ uniform) + λ2 KL(c_{·j} ‖ a)            (eq. 2-3)
            = Σ_i c_ij (−k_ij) + λ1 Σ_i c_ij log(I c_ij) + λ2 Σ_i c_ij log(c_ij / a_i)

(:func:`similarity_objective`). With a Lagrange multiplier γ for Σ_i c_ij = 1, the gradient is zero when

    −k_ij + λ1 (log c_ij + 1 + log I) + λ2 (log c_ij + 1 − log a_i) + γ = 0
    ⇔ (λ1 + λ2) log c_ij = k_ij + λ2 log a_i + const(j)

so, after normalising over i (the constant goes into the normalisation):

    c_ij = a_i^{λ2/(λ1+λ2)} exp(k_ij / (λ1+λ2)) / Σ_i' a_i'^{λ2/(λ1+λ2)} exp(k_i'j / (λ1+λ2))     (eq. 11)

:func:`closed_form_logits` gives the logits ``λ2/(λ1+λ2) · log a_i + k_ij/(λ1+λ2)`` and
:func:`closed_form_couplings` their softmax over i (the compatibility function is eq. 12: these logits). F is
strictly convex in c for λ1 + λ2 > 0, so this is the minimiser (checked against numerical minimisation in the
tests). λ1 pulls c toward uniform (softer clusters), λ2 toward the input activations. The kernel is a mixture of Q
Gaussians with softmax mixing weights (eq. 15, :func:`gaussian_mixture_kernel`):

    k(x, y) = Σ_q softmax(w)_q exp(−‖x − y‖² / (2 ℓ_q²))

and the output activation (eq. 13, :func:`similarity_activation`) is:

    a_j = σ(θ1 Σ_i c_ij k_ij + |θ3| Σ_i c_ij log a_i + θ2).

:func:`similarity_routing` runs them in the generic procedure (:func:`~capsule_lab.routing.generic_routing`) with
the weighted-mean pose. :class:`SimilarityRouter` learns λ1, λ2, ℓ, w and θ (the paper: Q = 4 in the hidden
capsule layers, Q = 10 in the class layer, :data:`KERNELS`). In a convolutional routing layer the paper makes λ1,
λ2 and θ distinct for each output channel (capsule type) j, with one kernel for the layer:
``SimilarityRouter(channels=J)`` holds λ1, λ2 ``(J,)`` and θ ``(3, J)``, and output j routes with its own. (With
couplings normalised over the inputs, each output j is its own clustering problem, so this is J independent
routings sharing a kernel.)

**Where the paper is silent, this module chooses:**

- *Initial couplings*: uniform (r⁰ = 0, so c⁰ = 1/I over the inputs), as the public code does.
- *μ*: the coupling-weighted mean Σ_i c_ij v_ij / Σ_i c_ij, nothing more (no squash, no unit length): with
  Σ_i c_ij = 1 it is a convex combination of the votes and stays in the unit ball. The paper alternates μ for
  fixed c (eq. 4) and c for fixed μ (eq. 11); for a Gaussian kernel the μ that exactly minimises F for fixed c
  would also weight each vote by its kernel value (a fixed point, not a closed form); Algorithm 1 and the public
  code use the plain weighted mean, and so does this module.
- *KL(c ‖ a)* uses the activations as given (not renormalised to sum to 1): renormalising changes F by the
  constant λ2 log Σ_i a_i and not the minimiser.
- *log a_i* is ``log max(a_i, 10⁻⁶)`` (:data:`ACTIVATION_FLOOR`), so a silent capsule (a_i = 0) gets a large
  negative but finite logit instead of −∞.
- *λ parametrisation*: λ = softplus(ρ) ≥ 0, ℓ_q = exp(log ℓ_q) > 0, mixing weights softmax(w), θ free (θ3 enters
  as ``|θ3|`` as the paper writes). Initial values: λ1 = λ2 = 0.1 (so 1/(λ1+λ2) = 5 and a vote at distance 0 is
  e⁵ times more compatible than a far one), ℓ_q log-spaced over [0.1, 1] (the votes lie in the unit ball), w = 0
  (equal mixing), θ = (10, −5, 1): the agreement Σ_i c_ij k_ij lies in (0, 1], and θ1 = 10, θ2 = −5 map it onto
  σ(−5) … σ(5), past the margin loss's 0.1 and 0.9 (logits ∓2.2), centred at agreement 0.5. With θ = (1, 0, 1)
  a_j can only move within σ(−∞ … 1) and Adam moves the scalars slowly: one epoch of a slim CapsNet on 4000
  offline digits (batch 64, Adam 3e-3, seed 0) reached 13 % test accuracy with θ = (1, 0, 1) and 83 % with
  (10, −5, 1).
- *Outputs convention*: available (``normalize_over="outputs"``) for comparison; the closed form is then applied
  with a softmax over j, which no longer minimises F (whose constraint is Σ_i c_ij = 1).
- *Parameters per layer*: each router object has its own parameters, so each layer learns its own routing; §4.1
  says the kernel parameters are "shared across layers" in its experiments (the sentence is ambiguous): pass the
  same router object to several layers to share them.

Shapes: votes ``(B, I, J, D)``, activations ``(B, I)``, kernel values k and couplings c ``(B, I, J)``, poses
``(B, J, D)``.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_nonnegative, check_positive_int, check_tensor, describe, shape_error
from .generic import generic_routing, weighted_mean_pose
from .registry import register_router
from .router import Router, RoutingResult, check_activations, check_normalize_over, check_votes

__all__ = ["ACTIVATION_FLOOR", "KERNELS", "gaussian_mixture_kernel", "kernel_matrix", "similarity_objective",
           "closed_form_logits", "closed_form_couplings", "similarity_activation", "similarity_routing",
           "SimilarityRouter"]

#: The floor under the input activations before their log is taken, so that a silent capsule gets a finite log.
ACTIVATION_FLOOR = 1e-6
#: Q, the number of Gaussian kernels in the mixture per layer of the paper's network (§5).
KERNELS = {"conv_caps_1": 4, "conv_caps_2": 4, "class_caps": 10}


# ------------------------------------------------------------------------------------------------ checks

def _check_lambdas(lam1, lam2, outputs: Optional[int] = None) -> tuple:
    """λ1, λ2 ≥ 0 with λ1 + λ2 > 0: numbers, 0-d tensors (learned ones) or ``(J,)`` tensors, one per output j
    (``outputs`` = J, when known)."""
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
    total = torch.as_tensor(lam1).detach().double() + torch.as_tensor(lam2).detach().double()
    if not bool((total > 0).all()):
        raise ValueError(f"lam1 + lam2 must be > 0 (the closed form divides by it), got {total.tolist()}")
    return lam1, lam2


def _check_theta(theta, outputs: Optional[int] = None) -> None:
    shape = "(3,) = (θ1, θ2, θ3) or (3, J), one column per output" + (f", J = {outputs}" if outputs else "")
    check_tensor(theta, "theta", shape, min_ndim=1, floating=True)
    if theta.shape[0] != 3 or theta.dim() > 2 or (theta.dim() == 2 and outputs is not None
                                                  and theta.shape[1] != outputs):
        raise shape_error("theta", shape, theta)


def _check_kernel_parameters(length_scales, mixing_logits) -> None:
    check_tensor(length_scales, "length_scales", "(Q,)", ndim=1, nonempty=True, floating=True)
    Q = length_scales.shape[0]
    check_tensor(mixing_logits, "mixing_logits", f"(Q,) = ({Q},)", sizes=(Q,), floating=True)
    if not bool((length_scales.detach() > 0).all()):
        raise ValueError("length_scales must all be > 0")


def _check_kernel_and_activations(kernel, activations) -> None:
    check_tensor(kernel, "kernel", "(B, I, J)", ndim=3, nonempty=True, floating=True)
    B, I, _ = kernel.shape
    check_tensor(activations, "activations", f"(B, I) = ({B}, {I})", sizes=(B, I), floating=True)
    if bool((activations < 0).any()):
        raise ValueError("activations must be >= 0 (capsule lengths)")


def _log_activations(activations: torch.Tensor) -> torch.Tensor:
    return torch.log(activations.clamp_min(ACTIVATION_FLOOR))


# ------------------------------------------------------------------------------------------------ kernel

def gaussian_mixture_kernel(x: torch.Tensor, y: torch.Tensor, length_scales: torch.Tensor,
                            mixing_logits: torch.Tensor) -> torch.Tensor:
    """The kernel of eq. 15: ``k(x, y) = Σ_q softmax(w)_q exp(−‖x − y‖² / (2 ℓ_q²))``.

    x, y ``(..., D)`` (broadcast against each other), length_scales ℓ ``(Q,)`` > 0, mixing_logits w ``(Q,)`` →
    ``(...)``. k(x, x) = 1 and 0 < k ≤ 1. Chapter 07.
    """
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.dim() < 1 or y.dim() < 1:
        raise ValueError(f"x and y must be tensors of shape (..., D), got {describe(x)} and {describe(y)}")
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"x and y must have the same last dimension D, got {tuple(x.shape)} and {tuple(y.shape)}")
    _check_kernel_parameters(length_scales, mixing_logits)
    sq = ((x - y) ** 2).sum(dim=-1, keepdim=True)                                 # (..., 1)
    weights = torch.softmax(mixing_logits, dim=0)
    return (weights * torch.exp(-sq / (2 * length_scales ** 2))).sum(dim=-1)


def kernel_matrix(votes: torch.Tensor, poses: torch.Tensor, length_scales: torch.Tensor,
                  mixing_logits: torch.Tensor) -> torch.Tensor:
    """``k_ij = k(μ_j, v_ij)`` for every vote: votes ``(B, I, J, D)``, poses ``(B, J, D)`` → ``(B, I, J)``.

    Chapter 07.
    """
    check_votes(votes)
    B, _, J, D = votes.shape
    check_tensor(poses, "poses", f"(B, J, D) = ({B}, {J}, {D})", sizes=(B, J, D))
    return gaussian_mixture_kernel(poses[:, None], votes, length_scales, mixing_logits)


# ----------------------------------------------------------------------------- objective and closed form

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
    agreement = (couplings * kernel).sum(dim=1)
    support = (couplings * _log_activations(activations)[:, :, None]).sum(dim=1)
    return torch.sigmoid(theta[0] * agreement + theta[2].abs() * support + theta[1])


# ------------------------------------------------------------------------------------------------ routing

def similarity_routing(votes: torch.Tensor, activations: Optional[torch.Tensor], lam1, lam2,
                       length_scales: torch.Tensor, mixing_logits: torch.Tensor, theta: torch.Tensor,
                       iterations: int = 3, *, normalize_over: str = "inputs",
                       initial_logits: Optional[torch.Tensor] = None, history: bool = False) -> RoutingResult:
    """Similarity routing (§4.1) with given parameters, run by :func:`~capsule_lab.routing.generic_routing`.

    Compatibility: the closed form (:func:`closed_form_logits` of the kernel values :func:`kernel_matrix` at the
    current poses); activation: :func:`similarity_activation` at the final poses; pose: the weighted mean. λ1, λ2
    ≥ 0 (λ1 + λ2 > 0), length_scales ``(Q,)``, mixing_logits ``(Q,)``, theta ``(3,)``: numbers or tensors (learned
    ones keep their gradient). λ1, λ2 ``(J,)`` and theta ``(3, J)`` give each output j its own (a convolutional
    layer's channels, §4.1). Returns a :class:`~capsule_lab.routing.RoutingResult`. Chapter 07.
    """
    check_votes(votes)
    _check_lambdas(lam1, lam2, votes.shape[2])
    _check_kernel_parameters(length_scales, mixing_logits)
    _check_theta(theta, votes.shape[2])

    def compatibility(state, logits, couplings, v, poses, a):
        return closed_form_logits(kernel_matrix(v, poses, length_scales, mixing_logits), a, lam1, lam2), state

    def activation(state, couplings, v, poses, a):
        return similarity_activation(couplings, kernel_matrix(v, poses, length_scales, mixing_logits), a, theta)

    return generic_routing(votes, activations, compatibility, activation, iterations,
                           normalize_over=normalize_over, initial_logits=initial_logits, history=history)


def _softplus_inverse(y: float) -> torch.Tensor:
    """x with softplus(x) = y > 0: log(exp(y) − 1), computed stably."""
    y = torch.tensor(y, dtype=torch.float64)
    return y + torch.log(-torch.expm1(-y))


class SimilarityRouter(Router):
    """Similarity routing (§4.1) with learned λ1, λ2, length scales, mixing weights and θ.

    ``router(votes, activations=None, *, history=False)`` → :class:`~capsule_lab.routing.RoutingResult` from
    :func:`similarity_routing` with the current parameters: poses μ_j (weighted means of the votes) and
    activations a_j (eq. 13) apart, so a layer of vector capsules scales each pose to its activation.

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

    activations_are_lengths = False

    def __init__(self, kernels: int = 10, iterations: int = 3, lam1: float = 0.1, lam2: float = 0.1,
                 length_scales: Optional[Sequence[float]] = None, theta: Sequence[float] = (10.0, -5.0, 1.0),
                 normalize_over: str = "inputs", channels: Optional[int] = None):
        super().__init__()
        check_positive_int(iterations, "iterations", minimum=0)
        check_normalize_over(normalize_over)
        check_positive_int(kernels, "kernels")
        if channels is not None:
            check_positive_int(channels, "channels")
        self.iterations, self.normalize_over, self.channels = iterations, normalize_over, channels
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

    def forward(self, votes: torch.Tensor, activations: Optional[torch.Tensor] = None, *,
                history: bool = False) -> RoutingResult:
        """Route ``votes`` ``(B, I, J, D)`` with input ``activations`` ``(B, I)`` (``None``: ones)."""
        check_votes(votes)
        if self.channels is not None and votes.shape[2] != self.channels:
            raise shape_error("votes", f"(B, I, J, D) with J = channels = {self.channels}", votes)
        return similarity_routing(votes, activations, self.lam1, self.lam2, self.length_scales,
                                  self.mixing_logits, self.theta, self.iterations,
                                  normalize_over=self.normalize_over, history=history)

    @classmethod
    def from_layer(cls, layer, spec) -> "SimilarityRouter":
        """The router of a ``"similarity"`` :class:`~capsule_lab.routing.RouterSpec`: Q = its kernels, T = its
        iterations; in a convolutional layer λ1, λ2 and θ per output type ("distinct for each channel", §4.1)."""
        return cls(kernels=spec.kernels, iterations=spec.iterations,
                   channels=layer.outputs if layer.convolutional else None)

    def combine_votes(self, votes: torch.Tensor, couplings: torch.Tensor, activations: Optional[torch.Tensor] = None,
                state=None) -> RoutingResult:
        """The last step of Algorithm 1 with this router: the weighted mean μ_j of the votes and the activation of
        eq. 13 (:func:`similarity_activation`) at it."""
        check_votes(votes)
        activations = check_activations(activations, votes)
        poses = weighted_mean_pose(couplings, votes)
        kernel = kernel_matrix(votes, poses, self.length_scales, self.mixing_logits)
        return RoutingResult(poses, similarity_activation(couplings, kernel, activations, self.theta), couplings,
                             torch.zeros_like(couplings))

    def extra_repr(self) -> str:
        return f"kernels={self.mixing_logits.shape[0]}, iterations={self.iterations}, " \
               f"normalize_over={self.normalize_over!r}, channels={self.channels}"


register_router("similarity", SimilarityRouter, iterations=0, options={"kernels": 10},
                summary="Faria's similarity routing, routing as clustering (chapter 07)")
