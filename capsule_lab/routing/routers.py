"""Sabour's routers: dynamic routing and its variants as :class:`~capsule_lab.routing.Router` modules.

Taught in chapter 02. Each is an ``nn.Module`` called as ``router(votes, activations=None) → RoutingResult``
(the input activations are ignored: in Sabour's routing a vote's length plays their part); what it needs
(iterations, options) it takes at construction, and every dynamic router runs the one loop,
:func:`~capsule_lab.routing.dynamic_routing`, with its options:

- :class:`DynamicRouter` — Sabour et al.'s Algorithm 1, with explicit options: ``prior_logits`` (fixed, or an
  ``nn.Parameter``: Mitterreiter et al.'s learned priors, chapter 04), ``detach_votes``, ``detach_couplings``,
  ``activation`` (the squash), ``agreement_scale`` and ``pose_bias`` (REM's learned bias b_j added to every
  weighted sum before the squash, chapter 05);
- :class:`DetachedRouter` — the same with the couplings constant in the backward pass (chapter 03);
- :class:`ScaledRouter` — the logit update scaled, ``b ← b + scale · ⟨û, v⟩`` (the routing explorer);
- :class:`UniformRouter` — no routing, c_ij = 1/J (chapters 03 and 04's baseline).

A fully-connected layer can run dynamic routing without forming the votes
(:func:`~capsule_lab.routing.vote_free_routing`, chapter 02's "Routing without votes"):
:meth:`DynamicRouter.route_weights` gives that form where its options allow it, and
:class:`~capsule_lab.layers.dense.CapsuleLayer` uses it when told to.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

from .._checks import check_bool, check_tensor
from ..capsules import squash
from .procedure import dynamic_routing, uniform_routing
from .registry import register_router
from .router import Router, RoutingResult, check_iterations, check_votes
from .vote_free import vote_free_routing

__all__ = ["DynamicRouter", "DetachedRouter", "ScaledRouter", "UniformRouter"]


def _check_activation(activation) -> Callable:
    if not callable(activation):
        raise ValueError(f"activation must be a function of s (B, J, D), got {activation!r}")
    return activation


def _pose_bias(pose_bias) -> Optional[nn.Parameter]:
    """REM's learned bias b_j ``(J, D)`` as a parameter (its initial value given as a tensor), or None."""
    if pose_bias is None:
        return None
    check_tensor(pose_bias, "pose_bias", "(J, D)", ndim=2, nonempty=True, floating=True)
    return pose_bias if isinstance(pose_bias, nn.Parameter) else nn.Parameter(pose_bias.detach().clone())


def _biased(activation: Callable, bias: Optional[torch.Tensor]) -> Callable:
    """``activation`` applied to ``s + b`` (REM's pose bias), made at call time so a copied router uses its own b."""
    return activation if bias is None else (lambda s: activation(s + bias))


def _name(fn) -> str:
    return getattr(fn, "__name__", repr(fn))


def _spec_bias(layer, spec) -> Optional[torch.Tensor]:
    """The initial pose bias ``(J, D)`` a spec asks for (its ``pose_bias`` everywhere), or None."""
    return None if spec.pose_bias is None else torch.full((layer.outputs, layer.dim), float(spec.pose_bias))


def _squashed_sum(activation: Callable, bias: Optional[torch.Tensor], votes: torch.Tensor,
                  couplings: torch.Tensor) -> RoutingResult:
    """``v_j = activation(Σ_i c_ij û_{j|i} + b_j)`` and its lengths: the last step of Sabour's routers."""
    check_votes(votes)
    poses = _biased(activation, bias)(torch.einsum("bij,bijd->bjd", couplings.to(votes.dtype), votes))
    return RoutingResult(poses, poses.norm(dim=-1), couplings, torch.zeros_like(couplings))


class DynamicRouter(Router):
    """Dynamic routing (Sabour et al., Algorithm 1) with ``iterations`` iterations and explicit options.

    Args:
        iterations: r ≥ 1 (Sabour: 3).
        prior_logits: the initial logits b, ``(I, J)`` or ``(B, I, J)``: a tensor (fixed, a buffer) or an
            ``nn.Parameter`` (learned with the network: Mitterreiter et al.'s routing priors, chapter 04); None: 0.
        detach_votes, detach_couplings, activation, agreement_scale: as in
            :func:`~capsule_lab.routing.dynamic_routing`.
        pose_bias: the initial value ``(J, D)`` of a learned bias b_j added to every weighted sum before the squash,
            ``v_j = squash(Σ_i c_ij û_{j|i} + b_j)``, in every iteration — the REM paper's MNIST model (chapter 05).

    Quantised inference (the REM paper's §3.1.2, :func:`capsule_lab.measures.parse_trees.quantized_inference`) runs
    :meth:`combine_votes`, the last step, again with the last iteration's couplings replaced by their bin centres.

    ``router(votes, activations=None, *, history=False)`` → :class:`~capsule_lab.routing.RoutingResult`, the
    activations ‖v_j‖; the input activations are ignored. :meth:`route_weights` is the vote-free form.

    Chapter 02.
    """

    def __init__(self, iterations: int = 3, *, prior_logits: Optional[torch.Tensor] = None,
                 detach_votes: bool = False, detach_couplings: bool = False,
                 activation: Callable[[torch.Tensor], torch.Tensor] = squash, agreement_scale: float = 1.0,
                 pose_bias: Optional[torch.Tensor] = None):
        super().__init__()
        check_iterations(iterations)
        if (isinstance(agreement_scale, bool) or not isinstance(agreement_scale, (int, float))
                or not math.isfinite(agreement_scale)):
            raise ValueError(f"agreement_scale must be a finite number, got {agreement_scale!r}")
        check_bool(detach_votes, "detach_votes")
        check_bool(detach_couplings, "detach_couplings")
        self.iterations, self.agreement_scale = iterations, agreement_scale
        self.detach_votes, self.detach_couplings = detach_votes, detach_couplings
        self.activation = _check_activation(activation)
        if prior_logits is not None:
            check_tensor(prior_logits, "prior_logits", "(I, J) or (B, I, J)", floating=True)
            if prior_logits.dim() not in (2, 3):
                raise ValueError(f"prior_logits must have shape (I, J) or (B, I, J), got {tuple(prior_logits.shape)}")
        if isinstance(prior_logits, nn.Parameter):
            self.prior_logits = prior_logits
        else:
            self.register_buffer("prior_logits", prior_logits)
        self.pose_bias = _pose_bias(pose_bias)

    @classmethod
    def from_layer(cls, layer, spec) -> "DynamicRouter":
        """The router of a ``"dynamic"`` :class:`~capsule_lab.routing.RouterSpec` for a layer: r = its iterations,
        its options, learned priors ``(I, J)`` (zeros, or drawn from N(0, prior_std²) here), its pose bias ``(J, D)``
        and the network's squash."""
        priors = None
        if spec.learned_priors:
            priors = nn.Parameter(torch.zeros(layer.inputs, layer.outputs))
            if spec.prior_std > 0:
                with torch.no_grad():                     # drawn only when asked: prior_std = 0 draws nothing
                    priors.normal_(0.0, spec.prior_std)
        return cls(spec.iterations, prior_logits=priors, detach_votes=spec.detach_votes,
                   detach_couplings=spec.detach_couplings, pose_bias=_spec_bias(layer, spec), **layer.squash_options())

    @property
    def options(self) -> dict:
        """The options that differ from Algorithm 1's defaults, by name (``prior_logits`` and ``pose_bias`` by
        their presence)."""
        out = {}
        for name, default in (("detach_votes", False), ("detach_couplings", False), ("activation", squash),
                              ("agreement_scale", 1.0)):
            if getattr(self, name) != default:
                out[name] = getattr(self, name)
        for name in ("prior_logits", "pose_bias"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def forward(self, votes: torch.Tensor, activations: Optional[torch.Tensor] = None, *,
                history: bool = False) -> RoutingResult:
        return dynamic_routing(votes, self.iterations, self.prior_logits, detach_votes=self.detach_votes,
                               detach_couplings=self.detach_couplings,
                               activation=_biased(self.activation, self.pose_bias), history=history,
                               agreement_scale=self.agreement_scale)

    def sabour_form(self) -> Optional[tuple]:
        """Algorithm 1 with r = its iterations from its prior logits (None with a scaled update, which Algorithm 1's
        gradient does not have); term 2 unless its couplings or votes are detached."""
        if self.agreement_scale != 1:
            return None
        return (self.iterations, self.prior_logits, self.activation, self.pose_bias,
                not (self.detach_couplings or self.detach_votes))

    def combine_votes(self, votes: torch.Tensor, couplings: torch.Tensor, activations: Optional[torch.Tensor] = None,
                state=None) -> RoutingResult:
        """The last step of Algorithm 1: ``v_j = squash(Σ_i c_ij û_{j|i} + b_j)`` (b_j the pose bias, if any)."""
        return _squashed_sum(self.activation, self.pose_bias, votes, couplings)

    def route_weights(self, u: torch.Tensor, weight: torch.Tensor) -> Optional[RoutingResult]:
        """:func:`~capsule_lab.routing.vote_free_routing` with this router's options (the same result as routing
        the votes ``W_ij u_i``, without forming them), or None with a scaled update or a pose bias (whose gradient
        the vote-free backward does not compute)."""
        if self.agreement_scale != 1 or self.pose_bias is not None:
            return None
        return vote_free_routing(u, weight, self.iterations, self.prior_logits, detach_votes=self.detach_votes,
                                 detach_couplings=self.detach_couplings, activation=self.activation)

    def extra_repr(self) -> str:
        options = "".join(f", {k}={_name(v) if k == 'activation' else v!r}" for k, v in self.options.items()
                          if k not in ("prior_logits", "pose_bias"))
        shapes = "".join(f", {k}={tuple(v.shape)}" for k, v in (("prior_logits", self.prior_logits),
                                                                  ("pose_bias", self.pose_bias)) if v is not None)
        return f"iterations={self.iterations}{options}{shapes}"


class DetachedRouter(DynamicRouter):
    """Dynamic routing whose couplings are constants in the backward pass (``detach_couplings=True``).

    The forward pass equals :class:`DynamicRouter`'s; the gradient w.r.t. the votes is term 1 only.

    Chapter 03.
    """

    def __init__(self, iterations: int = 3, **options):
        DynamicRouter.__init__(self, iterations, **{**options, "detach_couplings": True})


class ScaledRouter(DynamicRouter):
    """Dynamic routing whose logit update is scaled: ``b_ij ← b_ij + scale · ⟨û_{j|i}, v_j⟩``.

    ``scale = 1`` is Algorithm 1; larger acts like a lower softmax temperature; 0 keeps the couplings at
    their start. Chapter 02 (the routing explorer).
    """

    def __init__(self, iterations: int = 3, scale: float = 1.0, **options):
        DynamicRouter.__init__(self, iterations, **{**options, "agreement_scale": scale})


class UniformRouter(Router):
    """No routing: ``router(votes)`` is :func:`~capsule_lab.routing.uniform_routing` (c_ij = 1/J), the squash
    ``activation``, optionally applied to ``s_j + b_j`` with a learned ``pose_bias`` ``(J, D)`` (as
    :class:`DynamicRouter`'s).

    Chapter 02 (the baseline of chapters 03 and 04).
    """

    def __init__(self, activation: Callable[[torch.Tensor], torch.Tensor] = squash,
                 pose_bias: Optional[torch.Tensor] = None):
        super().__init__()
        self.activation = _check_activation(activation)
        self.pose_bias = _pose_bias(pose_bias)

    def forward(self, votes: torch.Tensor, activations: Optional[torch.Tensor] = None, *,
                history: bool = False) -> RoutingResult:
        result = uniform_routing(votes, _biased(self.activation, self.pose_bias))
        return result._replace(history=(result,)) if history else result

    def sabour_form(self) -> Optional[tuple]:
        """One iteration of Algorithm 1 from zero logits (c = 1/J): nothing flows through the couplings."""
        return 1, None, self.activation, self.pose_bias, True

    @classmethod
    def from_layer(cls, layer, spec) -> "UniformRouter":
        """The router of a ``"uniform"`` :class:`~capsule_lab.routing.RouterSpec`: its pose bias, the network's
        squash."""
        return cls(pose_bias=_spec_bias(layer, spec), **layer.squash_options())

    def combine_votes(self, votes: torch.Tensor, couplings: torch.Tensor, activations: Optional[torch.Tensor] = None,
                state=None) -> RoutingResult:
        """``v_j = squash(Σ_i c_ij û_{j|i} + b_j)``, as :class:`DynamicRouter`'s."""
        return _squashed_sum(self.activation, self.pose_bias, votes, couplings)

    def extra_repr(self) -> str:
        out = "" if self.activation is squash else f"activation={_name(self.activation)}"
        return out + ("" if self.pose_bias is None else f"{', ' if out else ''}pose_bias={tuple(self.pose_bias.shape)}")


register_router("dynamic", DynamicRouter, iterations=1,
                options={"detach_votes": False, "detach_couplings": False, "pose_bias": None, "learned_priors": False,
                         "prior_std": 0.0},
                summary="Sabour et al.'s dynamic routing (chapter 02)")
register_router("uniform", UniformRouter, options={"pose_bias": None}, summary="no routing, c_ij = 1/J (chapter 02)")
