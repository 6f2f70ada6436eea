"""A fully-connected capsule layer with a pluggable router.

Taught in chapter 02. Every input capsule i makes a vote for every output capsule j through its own
transformation matrix W_ij (the part that learns part–whole geometry):

    û_{j|i} = W_ij u_i          W: (I, J, D_out, D_in)

and a router (dynamic routing, uniform routing, or the routers of later chapters) turns the votes
``(B, I, J, D_out)`` into output poses ``(B, J, D_out)``. A router is an object (or a function) called as
``router(votes)``; one whose class declares ``takes_weights = True`` (the
:class:`~capsule_lab.routing.VoteFreeRouter`) is called as ``router(u, weight)`` and never sees the votes.
"""

from __future__ import annotations

from typing import Callable, Union

import torch
from torch import nn

from ._checks import check_tensor
from .capsules import squash
from .routing import DetachedRouter, DynamicRouter, Router, RoutingResult, UniformRouter, VoteFreeRouter

__all__ = ["capsule_votes", "make_router", "CapsuleLayer", "ROUTER_NAMES"]

RouterLike = Union[Router, Callable[[torch.Tensor], RoutingResult]]

#: the names :func:`make_router` knows
ROUTER_NAMES = ("dynamic", "detached", "vote_free", "uniform")


def capsule_votes(u: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Votes ``û_{j|i} = W_ij u_i``: u ``(B, I, D_in)``, weight ``(I, J, D_out, D_in)`` → ``(B, I, J, D_out)``.

    Chapter 02.
    """
    check_tensor(weight, "weight", "(I, J, D_out, D_in)", ndim=4)
    I, _, _, D_in = weight.shape
    check_tensor(u, "u", f"(B, I, D_in) = (B, {I}, {D_in})", sizes=(None, I, D_in))
    return torch.einsum("ijdk,bik->bijd", weight, u)


def make_router(name: str = "dynamic", iterations: int = 3, **options) -> Router:
    """A router object by name, ``iterations`` and ``options``.

    ``"dynamic"`` → :class:`~capsule_lab.routing.DynamicRouter` (Sabour's routing; ``options`` are
    :func:`~capsule_lab.routing.dynamic_routing`'s keywords), ``"detached"`` →
    :class:`~capsule_lab.routing.DetachedRouter`, ``"vote_free"`` → :class:`~capsule_lab.routing.VoteFreeRouter`
    (called with ``(u, weight)``), ``"uniform"`` → :class:`~capsule_lab.routing.UniformRouter` (``iterations``
    ignored; option ``activation``). Anything else raises ``ValueError``.

    Chapter 02.
    """
    if name == "dynamic":
        return DynamicRouter(iterations, **options)
    if name == "detached":
        return DetachedRouter(iterations, **options)
    if name == "vote_free":
        return VoteFreeRouter(iterations, **options)
    if name == "uniform":
        return UniformRouter(**options)
    raise ValueError(f"unknown router {name!r}: expected one of {', '.join(map(repr, ROUTER_NAMES))}")


class CapsuleLayer(nn.Module):
    """Fully-connected capsules: ``(B, I, D_in)`` → votes → router → :class:`RoutingResult` (poses ``(B, J, D_out)``).

    Args:
        in_caps, in_dim: number I and dimension D_in of the input capsules.
        out_caps, out_dim: number J and dimension D_out of the output capsules.
        router: a router object (:mod:`capsule_lab.routing.routers`) or a function ``votes → RoutingResult``;
            default: ``DynamicRouter(3)``. A router whose class declares ``takes_weights = True``
            (:class:`~capsule_lab.routing.VoteFreeRouter`) is called as ``router(u, weight)``.
        init_std: standard deviation of the normal initialisation of W.
        vote_free: when the router declares an equivalent vote-free form (``router.vote_free_form()``, as
            :class:`~capsule_lab.routing.DynamicRouter` does), run that form — same result, without
            materialising the votes. Set it to False to run the readable routing on the votes.
        pose_bias: if given, a learned bias ``b_j`` per output capsule (``(J, D_out)``, initialised to this
            value) added to every weighted sum before the squash, ``v_j = squash(Σ_i c_ij û_{j|i} + b_j)``, in
            every routing iteration — the REM paper's MNIST model (0.1, chapter 05). It needs a router on the
            votes (:class:`~capsule_lab.routing.DynamicRouter` and its variants, or
            :class:`~capsule_lab.routing.UniformRouter`); the vote-free form is then not used.

    Chapter 02.
    """

    def __init__(self, in_caps: int, in_dim: int, out_caps: int, out_dim: int,
                 router: RouterLike | None = None, init_std: float = 0.01, vote_free: bool = True,
                 pose_bias: float | None = None):
        super().__init__()
        self.vote_free = vote_free
        self.in_caps, self.in_dim, self.out_caps, self.out_dim = in_caps, in_dim, out_caps, out_dim
        self.weight = nn.Parameter(torch.randn(in_caps, out_caps, out_dim, in_dim) * init_std)
        self.router = router if router is not None else DynamicRouter(3)
        self.bias = None
        if pose_bias is not None:
            if isinstance(pose_bias, bool) or not isinstance(pose_bias, (int, float)):
                raise ValueError(f"pose_bias must be a number or None, got {pose_bias!r}")
            if not isinstance(self.router, (DynamicRouter, UniformRouter)):
                raise ValueError("pose_bias needs a router on the votes (DynamicRouter or UniformRouter), "
                                 f"got {self.router!r}")
            self.bias = nn.Parameter(torch.full((out_caps, out_dim), float(pose_bias)))

    def votes(self, u: torch.Tensor) -> torch.Tensor:
        return capsule_votes(u, self.weight)

    def routed_by(self) -> RouterLike:
        """The router ``forward`` runs: ``self.router``, or its vote-free form when ``vote_free``."""
        router = self.router
        if self.bias is not None:
            return self._biased(router)
        if self.vote_free and not getattr(router, "takes_weights", False):
            form = router.vote_free_form() if isinstance(router, Router) else None
            if form is not None:
                return form
        return router

    def _biased(self, router: Router) -> Router:
        """``router`` with its squash applied to ``s_j + b_j`` (the vote-free form has no gradient for b)."""
        if isinstance(router, UniformRouter):
            activation = router.activation
            return UniformRouter(lambda s: activation(s + self.bias))
        activation = router.options.get("activation", squash)
        return DynamicRouter(router.iterations, **{**router.options, "activation": lambda s: activation(s + self.bias)})

    def forward(self, u: torch.Tensor) -> RoutingResult:
        router = self.routed_by()
        if getattr(router, "takes_weights", False):
            return router(u, self.weight)
        return router(self.votes(u))

    def extra_repr(self) -> str:
        return f"{self.in_caps}x{self.in_dim} -> {self.out_caps}x{self.out_dim}"
