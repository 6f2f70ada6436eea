"""A fully-connected capsule layer with a pluggable router.

Taught in chapter 02. Every input capsule i makes a vote for every output capsule j through its own
transformation matrix W_ij (the part that learns part–whole geometry):

    û_{j|i} = W_ij u_i          W: (I, J, D_out, D_in)

and a router (dynamic routing, uniform routing, or the routers of later chapters) turns the votes
``(B, I, J, D_out)`` into output poses ``(B, J, D_out)``.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from torch import nn

from .routing import RoutingResult, dynamic_routing, uniform_routing, vote_free_routing

__all__ = ["capsule_votes", "make_router", "CapsuleLayer"]

Router = Callable[[torch.Tensor], RoutingResult]


def capsule_votes(u: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Votes ``û_{j|i} = W_ij u_i``: u ``(B, I, D_in)``, weight ``(I, J, D_out, D_in)`` → ``(B, I, J, D_out)``.

    Chapter 02.
    """
    if not isinstance(weight, torch.Tensor) or weight.dim() != 4:
        raise ValueError(f"weight must have shape (I, J, D_out, D_in), got {getattr(weight, 'shape', weight)}")
    I, _, _, D_in = weight.shape
    if not isinstance(u, torch.Tensor) or u.dim() != 3 or tuple(u.shape[1:]) != (I, D_in):
        got = tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__
        raise ValueError(f"u must have shape (B, I, D_in) = (B, {I}, {D_in}), got {got}")
    return torch.einsum("ijdk,bik->bijd", weight, u)


def make_router(name: str = "dynamic", iterations: int = 3, **options) -> Router:
    """A router by name: ``"dynamic"`` (Sabour's routing with ``iterations`` and ``options``) or ``"uniform"``.

    Chapter 02.
    """
    if name == "dynamic":
        return partial(dynamic_routing, iterations=iterations, **options)
    if name == "uniform":
        return partial(uniform_routing, **options)
    raise ValueError(f"unknown router {name!r}: expected 'dynamic' or 'uniform'")


class CapsuleLayer(nn.Module):
    """Fully-connected capsules: ``(B, I, D_in)`` → votes → router → :class:`RoutingResult` (poses ``(B, J, D_out)``).

    Args:
        in_caps, in_dim: number I and dimension D_in of the input capsules.
        out_caps, out_dim: number J and dimension D_out of the output capsules.
        router: a function ``votes → RoutingResult``; default: dynamic routing with 3 iterations.
        init_std: standard deviation of the normal initialisation of W.
        vote_free: when the router is dynamic routing (as made by :func:`make_router`), compute it with
            :func:`~capsule_lab.routing.vote_free_routing` — same result, without materialising the votes.
            Set it to False to run the readable :func:`~capsule_lab.routing.dynamic_routing` on the votes.

    Chapter 02.
    """

    def __init__(self, in_caps: int, in_dim: int, out_caps: int, out_dim: int,
                 router: Router | None = None, init_std: float = 0.01, vote_free: bool = True):
        super().__init__()
        self.vote_free = vote_free
        self.in_caps, self.in_dim, self.out_caps, self.out_dim = in_caps, in_dim, out_caps, out_dim
        self.weight = nn.Parameter(torch.randn(in_caps, out_caps, out_dim, in_dim) * init_std)
        self.router = router if router is not None else make_router("dynamic", 3)

    def votes(self, u: torch.Tensor) -> torch.Tensor:
        return capsule_votes(u, self.weight)

    def forward(self, u: torch.Tensor) -> RoutingResult:
        r = self.router
        if (self.vote_free and isinstance(r, partial) and r.func is dynamic_routing and not r.args
                and not r.keywords.get("history")):
            return vote_free_routing(u, self.weight, **r.keywords)
        return r(self.votes(u))

    def extra_repr(self) -> str:
        return f"{self.in_caps}x{self.in_dim} -> {self.out_caps}x{self.out_dim}"
