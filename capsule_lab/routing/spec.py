"""A router spec: the routing a network's config asks for, by kind and options, built into a router when the
network is built.

Taught in chapter 02 (the CapsNet's config) and used by every network config of the package
(:class:`~capsule_lab.models.CapsNetConfig`, :class:`~capsule_lab.models.DeepCapsNetConfig`,
:class:`~capsule_lab.models.ConvCapsNetConfig`). A config is a frozen description, so it holds a
:class:`RouterSpec`, not a router; the network builds the router from it (:meth:`RouterSpec.build`) with its layer's
sizes. From then on the built router is the truth: whatever needs to know how a network routes (its gradients, the
bench's records, the parse-tree entropy) reads ``model``'s routers, never the config.

The kinds (:data:`ROUTER_KINDS`) and the options that apply to each:

- ``"dynamic"``: :class:`~capsule_lab.routing.DynamicRouter` (Sabour), ``iterations`` = r; ``detach_votes``,
  ``detach_couplings``, ``pose_bias`` (REM's), ``learned_priors`` and ``prior_std`` (Mitterreiter et al.'s);
- ``"uniform"``: :class:`~capsule_lab.routing.UniformRouter`, c_ij = 1/J; ``pose_bias``;
- ``"similarity"``: :class:`~capsule_lab.routing.SimilarityRouter` (Faria), ``iterations`` = T; ``kernels``;
- ``"connectionist"``: :class:`~capsule_lab.routing.ConnectionistRouter` (Faria), ``iterations`` = T;
  ``lstm_hidden``;
- ``"self-attention"``: :class:`~capsule_lab.routing.SelfAttentionRouter` (Mazzia et al.); no option.

An option given to a kind it does not apply to is an error, so a spec never says something its router ignores.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Optional

import torch
from torch import nn

from .._checks import check_bool, check_nonnegative, check_one_of, check_positive_int
from .connectionist import ConnectionistRouter
from .router import Router
from .routers import DynamicRouter, UniformRouter
from .self_attention import SelfAttentionRouter
from .similarity import SimilarityRouter

__all__ = ["ROUTER_KINDS", "RouterSpec", "check_router_spec"]

#: The kinds of router a :class:`RouterSpec` can ask for.
ROUTER_KINDS = ("dynamic", "uniform", "similarity", "connectionist", "self-attention")

#: The options of a spec that apply to each kind (``iterations`` applies to the iterative ones).
_OPTIONS = {
    "dynamic": {"iterations", "detach_votes", "detach_couplings", "pose_bias", "learned_priors", "prior_std"},
    "uniform": {"pose_bias"},
    "similarity": {"iterations", "kernels"},
    "connectionist": {"iterations", "lstm_hidden"},
    "self-attention": set(),
}


@dataclass(frozen=True)
class RouterSpec:
    """The routing a config asks for: a kind (:data:`ROUTER_KINDS`) and the options that apply to it.

    ``iterations``: Sabour's r ≥ 1 for ``dynamic``, Algorithm 1's T ≥ 0 for ``similarity`` and ``connectionist``.
    ``detach_votes``, ``detach_couplings``: :func:`~capsule_lab.routing.dynamic_routing`'s options (chapter 03's
    detached network has ``detach_couplings=True``). ``pose_bias``: REM's learned bias b_j added to every weighted
    sum before the squash, initialised to this value (chapter 05). ``learned_priors``: Mitterreiter et al.'s learned
    routing priors b ``(I, J)``, zeros at first or drawn from N(0, ``prior_std``²) (chapter 04). ``kernels``: Q, the
    similarity router's Gaussian kernels; ``lstm_hidden``: the connectionist router's LSTM size (chapter 07).

    Chapter 02.
    """

    kind: str = "dynamic"
    iterations: int = 3
    detach_votes: bool = False
    detach_couplings: bool = False
    pose_bias: Optional[float] = None
    learned_priors: bool = False
    prior_std: float = 0.0
    kernels: int = 10
    lstm_hidden: int = 16

    def __post_init__(self):
        check_one_of(self.kind, ROUTER_KINDS, "kind")
        check_positive_int(self.iterations, "iterations", minimum=1 if self.kind == "dynamic" else 0)
        for name in ("detach_votes", "detach_couplings", "learned_priors"):
            check_bool(getattr(self, name), name)
        if self.pose_bias is not None and (isinstance(self.pose_bias, bool)
                                           or not isinstance(self.pose_bias, (int, float))):
            raise ValueError(f"pose_bias must be a number or None, got {self.pose_bias!r}")
        check_nonnegative(self.prior_std, "prior_std")
        check_positive_int(self.kernels, "kernels")
        check_positive_int(self.lstm_hidden, "lstm_hidden")
        if self.prior_std > 0 and not self.learned_priors:
            raise ValueError(f"prior_std must be 0 without learned priors (learned_priors=True), "
                             f"got {self.prior_std!r}")
        unused = [f.name for f in fields(self) if f.name not in ("kind", "iterations")
                  and f.name not in _OPTIONS[self.kind] and getattr(self, f.name) != f.default]
        if unused:
            raise ValueError(f"{', '.join(unused)} do(es) not apply to a {self.kind!r} router "
                             f"(its options: {sorted(_OPTIONS[self.kind] - {'iterations'}) or 'none'})")

    def build(self, inputs: int, outputs: int, dim: int,
              activation: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> Router:
        """The router this spec asks for, for a layer routing ``inputs`` capsules to ``outputs`` capsules of dimension
        ``dim``. ``activation``: the network's squash for the routers that squash (dynamic, uniform, self-attention;
        None: each router's own default). A router with parameters draws them here (the connectionist router's
        LSTM, the priors with ``prior_std`` > 0), so build it where the network's initialisation expects it.
        """
        for value, name in ((inputs, "inputs"), (outputs, "outputs"), (dim, "dim")):
            check_positive_int(value, name)
        squash = {} if activation is None else {"activation": activation}
        if self.kind == "dynamic":
            priors = None
            if self.learned_priors:
                priors = nn.Parameter(torch.zeros(inputs, outputs))
                if self.prior_std > 0:
                    with torch.no_grad():                 # drawn only when asked: prior_std = 0 draws nothing
                        priors.normal_(0.0, self.prior_std)
            return DynamicRouter(self.iterations, prior_logits=priors, detach_votes=self.detach_votes,
                                 detach_couplings=self.detach_couplings, pose_bias=self._bias(outputs, dim), **squash)
        if self.kind == "uniform":
            return UniformRouter(pose_bias=self._bias(outputs, dim), **squash)
        if self.kind == "similarity":
            return SimilarityRouter(kernels=self.kernels, iterations=self.iterations)
        if self.kind == "connectionist":
            return ConnectionistRouter(dim, hidden=self.lstm_hidden, iterations=self.iterations)
        return SelfAttentionRouter(inputs, outputs, **squash)

    def _bias(self, outputs: int, dim: int) -> Optional[torch.Tensor]:
        return None if self.pose_bias is None else torch.full((outputs, dim), float(self.pose_bias))


def check_router_spec(spec, name: str = "router") -> Optional[RouterSpec]:
    """``spec`` if it is a :class:`RouterSpec` or None (a config whose network was given router modules), else
    ``ValueError``: what every network config checks its ``router`` with. Chapter 02."""
    if spec is not None and not isinstance(spec, RouterSpec):
        raise ValueError(f"{name} must be a capsule_lab.routing.RouterSpec or None, got {type(spec).__name__}")
    return spec
