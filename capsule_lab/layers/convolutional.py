"""Convolutional capsule layers (Faria's network, Table 1): every output position routes its receptive field.

Taught in chapter 07. :class:`ConvCapsuleLayer` gathers the K·K·T capsules of every position's receptive field with
``Tensor.unfold`` (no loop over positions), forms their votes with 4×4 pose matrices
(:func:`capsule_lab.layers.votes.matrix_votes`: Faria's eq. 1, with the weights shared over positions) and routes
every position with the layer's router; :class:`ClassCapsuleLayer` routes every capsule of the last grid, each with
its own weights, to the classes. Any router routes them (its ``pose_dim``, if it declares one, must be 16; its
``channels``, if any, the layer's capsule types). The network built from them is
:class:`capsule_lab.models.ConvCapsNet`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .._checks import check_nonnegative, check_positive_int, check_tensor, shape_error
from ..routing import Router, RoutingResult
from .dense import check_router
from .votes import POSE_DIM, POSE_SIZE, matrix_votes


class CapsuleGrid(NamedTuple):
    """One routed capsule layer's output. Chapter 07.

    poses ``(B, H, W, J, 16)`` (the class layer: ``(B, J, 16)``), activations ``(B, H, W, J)`` (``(B, J)``),
    couplings ``(B, H, W, I, J)`` (``(B, I, J)``): each output position's couplings of its I inputs.
    """

    poses: torch.Tensor
    activations: torch.Tensor
    couplings: torch.Tensor


def _check_router(router, name: str, outputs: int) -> Router:
    """``router`` if it is a :class:`~capsule_lab.routing.Router` that routes 16-D poses (if it declares a
    ``pose_dim``) and has one parameter set per output (if it declares ``channels``)."""
    check_router(router, name)
    pose_dim = getattr(router, "pose_dim", POSE_DIM)
    if pose_dim != POSE_DIM:
        raise ValueError(f"{name}'s pose_dim must be {POSE_DIM} (4×4 pose matrices), got {pose_dim!r}")
    channels = getattr(router, "channels", None)
    if channels is not None and channels != outputs:
        raise ValueError(f"{name} has channels={channels} but routes to {outputs} capsule types "
                         f"(paper_routers(kind, config=...) sizes them)")
    return router


def _route(router: Router, votes: torch.Tensor, activations: torch.Tensor) -> RoutingResult:
    """``router(votes, activations)`` on votes ``(N, I, J, 16)``, the shapes of what comes back checked."""
    N, I, J, D = votes.shape
    routed = router(votes, activations)
    for value, name, shape in ((routed.poses, "poses", (N, J, D)), (routed.activations, "activations", (N, J)),
                               (routed.couplings, "couplings", (N, I, J))):
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            raise shape_error(f"the router's {name}", str(shape), value)
    return routed


class ConvCapsuleLayer(nn.Module):
    """A convolutional capsule layer (Table 1's conv capsule layers): every output position routes the K·K·T
    capsules of its receptive field to J capsule types. Chapter 07.

    ``forward(poses, activations)``: poses ``(B, H, W, T, 16)``, activations ``(B, H, W, T)`` →
    :class:`CapsuleGrid` with poses ``(B, H', W', J, 16)``, H' = ⌊(H − K) / S⌋ + 1 (no padding). The weight
    ``(K, K, T, J, 4, 4)`` is shared over positions; input i of a position is (ky, kx, t), row by row.
    ``router``: any :class:`~capsule_lab.routing.Router` (its ``pose_dim``, if any, must be 16).
    """

    def __init__(self, in_types: int, out_types: int, kernel: int, stride: int, router, init_std: float = 0.05):
        super().__init__()
        for value, name in ((in_types, "in_types"), (out_types, "out_types"), (kernel, "kernel"), (stride, "stride")):
            check_positive_int(value, name)
        check_nonnegative(init_std, "init_std")
        self.in_types, self.out_types, self.kernel, self.stride = in_types, out_types, kernel, stride
        self.weight = nn.Parameter(torch.randn(kernel, kernel, in_types, out_types, POSE_SIZE, POSE_SIZE) * init_std)
        self.router = _check_router(router, "router", out_types)

    @property
    def inputs(self) -> int:
        """The number I = K·K·T of input capsules each output position routes."""
        return self.kernel * self.kernel * self.in_types

    def _check(self, poses, activations) -> None:
        T, D = self.in_types, POSE_DIM
        check_tensor(poses, "poses", f"(B, H, W, T, {D}) with T = {T}", sizes=(None, None, None, T, D), floating=True)
        B, H, W = poses.shape[:3]
        if H < self.kernel or W < self.kernel:
            raise shape_error("poses", f"(B, H, W, {T}, {D}) with H, W >= kernel = {self.kernel}", poses)
        check_tensor(activations, "activations", f"(B, H, W, T) = ({B}, {H}, {W}, {T})", sizes=(B, H, W, T),
                     floating=True)

    def patches(self, poses: torch.Tensor, activations: torch.Tensor) -> tuple:
        """Each output position's receptive field: poses ``(B, H', W', I, 16)`` and activations
        ``(B, H', W', I)``, input i = (ky, kx, t) row by row (``Tensor.unfold``, views until the reshape)."""
        self._check(poses, activations)
        K, S = self.kernel, self.stride
        p = poses.unfold(1, K, S).unfold(2, K, S)             # (B, H', W', T, 16, ky, kx)
        a = activations.unfold(1, K, S).unfold(2, K, S)       # (B, H', W', T, ky, kx)
        B, H1, W1 = p.shape[:3]
        p = p.permute(0, 1, 2, 5, 6, 3, 4).reshape(B, H1, W1, self.inputs, POSE_DIM)
        a = a.permute(0, 1, 2, 4, 5, 3).reshape(B, H1, W1, self.inputs)
        return p, a

    def votes(self, poses: torch.Tensor, activations: torch.Tensor) -> tuple:
        """The votes ``(B, H', W', I, J, 16)`` of every receptive field (:func:`matrix_votes`, W shared over
        positions) and the input activations ``(B, H', W', I)``."""
        p, a = self.patches(poses, activations)
        weight = self.weight.reshape(self.inputs, self.out_types, POSE_SIZE, POSE_SIZE)   # i = (ky, kx, t)
        return matrix_votes(p, weight), a

    def forward(self, poses: torch.Tensor, activations: torch.Tensor) -> CapsuleGrid:
        votes, a = self.votes(poses, activations)
        B, H1, W1, I, J, D = votes.shape
        # every output position is one routing problem: N = B·H'·W' of them, each I inputs → J outputs
        routed = _route(self.router, votes.reshape(B * H1 * W1, I, J, D), a.reshape(B * H1 * W1, I))
        return CapsuleGrid(routed.poses.reshape(B, H1, W1, J, D), routed.activations.reshape(B, H1, W1, J),
                           routed.couplings.reshape(B, H1, W1, I, J))

    def extra_repr(self) -> str:
        return f"{self.in_types} -> {self.out_types} types, kernel={self.kernel}, stride={self.stride}"


class ClassCapsuleLayer(nn.Module):
    """The class capsule layer (Table 1's "flatten, O=classes"): I input capsules, each with its own
    W_ij ``(I, J, 4, 4)``, routed to J class capsules. Chapter 07.

    ``forward(poses, activations)``: poses ``(B, I, 16)``, activations ``(B, I)`` → :class:`CapsuleGrid` with
    poses ``(B, J, 16)``, activations ``(B, J)`` and couplings ``(B, I, J)``.
    """

    def __init__(self, in_caps: int, classes: int, router, init_std: float = 0.05):
        super().__init__()
        check_positive_int(in_caps, "in_caps")
        check_positive_int(classes, "classes")
        check_nonnegative(init_std, "init_std")
        self.in_caps, self.classes = in_caps, classes
        self.weight = nn.Parameter(torch.randn(in_caps, classes, POSE_SIZE, POSE_SIZE) * init_std)
        self.router = _check_router(router, "router", classes)

    def votes(self, poses: torch.Tensor) -> torch.Tensor:
        """The votes ``(B, I, J, 16)`` (:func:`matrix_votes`, one W_ij per input capsule)."""
        return matrix_votes(poses, self.weight)

    def forward(self, poses: torch.Tensor, activations: torch.Tensor) -> CapsuleGrid:
        I = self.in_caps
        check_tensor(poses, "poses", f"(B, I, {POSE_DIM}) with I = {I}", sizes=(None, I, POSE_DIM), floating=True)
        check_tensor(activations, "activations", f"(B, I) = ({poses.shape[0]}, {I})", sizes=(poses.shape[0], I),
                     floating=True)
        routed = _route(self.router, self.votes(poses), activations)
        return CapsuleGrid(routed.poses, routed.activations, routed.couplings)

    def extra_repr(self) -> str:
        return f"{self.in_caps} -> {self.classes}"


# ---------------------------------------------------------------------------------------------- model
