"""A fully-connected capsule layer: it forms the votes, a router routes them.

Taught in chapter 02. Every input capsule i makes a vote for every output capsule j through its own
transformation matrix W_ij (the part that learns part–whole geometry). Forming the votes is the layer's job, in
one of two forms (:data:`~capsule_lab.layers.votes.VOTES`):

    plain        û_{j|i} = W_ij u_i                            Sabour et al. (:func:`capsule_votes`)
    normalized   v_ij    = W_ij u_i / (‖W_ij‖_F + 10⁻⁶)        Faria's eq. 1 (:func:`normalized_votes`)

W is ``(I, J, D_out, D_in)``. The layer hands the votes ``(B, I, J, D_out)`` and the input activations a_i = ‖u_i‖
``(B, I)`` to its router — any :class:`~capsule_lab.routing.Router`, called as ``router(votes, activations)`` —
and returns the router's :class:`~capsule_lab.routing.RoutingResult`. Its outputs are vector capsules, whose
length is their activation: a router that computes the activations apart from the poses (Faria's, which say so
with ``activations_are_lengths = False``) has each pose scaled to length a_j, ``a_j μ_j / ‖μ_j‖``, so that a model
that reads class lengths as scores (chapter 02's CapsNet) or chains layers by lengths works with every router.

With ``vote_free=True`` (the default) the layer asks its router for the vote-free form of the routing
(:meth:`~capsule_lab.routing.Router.route_weights`, chapter 02's "Routing without votes"): dynamic routing
computed from u and W without forming the B·I·J·D votes, the same result. Routers that have none route the votes, as
does a router a forward hook watches (:attr:`~capsule_lab.routing.router.Router.hooked`: quantised inference, a probe).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from .._checks import check_nonnegative, check_one_of, check_positive_int
from ..capsules import capsule_lengths
from ..routing import DynamicRouter, Router, RoutingResult
from .votes import VOTES, capsule_votes, normalized_votes

__all__ = ["check_router", "CapsuleLayer"]


def check_router(router, name: str = "router") -> Router:
    """``router`` if it is a :class:`~capsule_lab.routing.Router`, else ``ValueError``. Chapter 02."""
    if not isinstance(router, Router):
        raise ValueError(f"{name} must be a capsule_lab.routing.Router (an nn.Module called as "
                         f"router(votes, activations=None) → RoutingResult), got {type(router).__name__}")
    return router


class CapsuleLayer(nn.Module):
    """Fully-connected capsules: ``(B, I, D_in)`` → votes → router → :class:`~capsule_lab.routing.RoutingResult`
    (poses ``(B, J, D_out)`` of length a_j).

    Args:
        in_caps, in_dim: number I and dimension D_in of the input capsules.
        out_caps, out_dim: number J and dimension D_out of the output capsules.
        router: a :class:`~capsule_lab.routing.Router`; default ``DynamicRouter(3)``.
        init_std: standard deviation of the normal initialisation of W.
        votes: ``"plain"`` (W u, Sabour) or ``"normalized"`` (Faria's eq. 1), :data:`~capsule_lab.layers.votes.VOTES`.
        vote_free: run the router's vote-free form where it has one (plain votes only): the same result, without
            materialising the votes. Set it to False to run the readable routing on the votes.

    ``forward(u, activations=None)``: ``activations`` ``(B, I)`` are the input activations handed to the router
    (None: the capsules' lengths, :func:`~capsule_lab.capsules.capsule_lengths`).

    Chapter 02.
    """

    def __init__(self, in_caps: int, in_dim: int, out_caps: int, out_dim: int, router: Optional[Router] = None,
                 init_std: float = 0.01, votes: str = "plain", vote_free: bool = True):
        super().__init__()
        for value, name in ((in_caps, "in_caps"), (in_dim, "in_dim"), (out_caps, "out_caps"), (out_dim, "out_dim")):
            check_positive_int(value, name)
        check_nonnegative(init_std, "init_std")
        self.vote_form = check_one_of(votes, VOTES, "votes")
        self.vote_free = vote_free
        self.in_caps, self.in_dim, self.out_caps, self.out_dim = in_caps, in_dim, out_caps, out_dim
        self.weight = nn.Parameter(torch.randn(in_caps, out_caps, out_dim, in_dim) * init_std)
        self.router = check_router(router) if router is not None else DynamicRouter(3)

    def votes(self, u: torch.Tensor) -> torch.Tensor:
        """The votes ``(B, I, J, D_out)`` in the layer's form (:func:`capsule_votes` or :func:`normalized_votes`)."""
        return capsule_votes(u, self.weight) if self.vote_form == "plain" else normalized_votes(u, self.weight)

    def forward(self, u: torch.Tensor, activations: Optional[torch.Tensor] = None) -> RoutingResult:
        if self.vote_free and self.vote_form == "plain" and not self.router.hooked:
            fused = self.router.route_weights(u, self.weight)
            if fused is not None:
                return fused
        votes = self.votes(u)
        routed = self.router(votes, capsule_lengths(u) if activations is None else activations)
        if not self.router.activations_are_lengths:     # a vector capsule's length is its activation
            poses = routed.activations[..., None] * routed.poses / capsule_lengths(routed.poses)[..., None]
            routed = routed._replace(poses=poses)
        return routed

    def extra_repr(self) -> str:
        return f"{self.in_caps}x{self.in_dim} -> {self.out_caps}x{self.out_dim}, votes={self.vote_form!r}"
