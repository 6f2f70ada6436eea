"""Capsules: pose vectors, the two squash non-linearities, the margin loss and primary capsules.

Taught in chapter 01 (``chapters/01_capsules.ipynb``).

A capsule is a group of neurons whose activity vector ``u`` encodes an entity: its *length* is the
probability that the entity is present, its *orientation* the entity's pose (Sabour et al., 2017).
Lengths must lie in [0, 1), so every capsule output goes through a squash:

    squash(s)     = ‖s‖² / (1 + ‖s‖²) · s / ‖s‖          (Sabour et al., eq. 1)
    squash_exp(s) = (1 − e^{−‖s‖}) · s / ‖s‖              (Efficient-CapsNet; Mitterreiter et al.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_tensor

__all__ = ["squash", "squash_exp", "capsule_lengths", "margin_loss", "conv_to_capsules", "PrimaryCapsules"]

# ‖s‖ is computed as sqrt(‖s‖² + EPS²): the same value to float precision for any real capsule, and
# a finite value and gradient at s = 0, where the plain norm has an undefined derivative.
_EPS = 1e-8


def _check_dim(x: torch.Tensor, dim: int) -> None:
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for a tensor of shape {tuple(x.shape)}")


def _safe_norm(s: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (‖s‖², ‖s‖) along ``dim`` (kept), the norm smoothed so that it is differentiable at 0."""
    sq = (s * s).sum(dim=dim, keepdim=True)
    return sq, torch.sqrt(sq + _EPS * _EPS)


def squash(s: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sabour's squash: shrink a vector's length into [0, 1) and keep its direction.

    ``v = ‖s‖²/(1 + ‖s‖²) · s/‖s‖``. Short vectors shrink to almost zero (length ≈ ‖s‖²), long
    vectors to a length just below 1. Finite, with a finite gradient, at ``s = 0``.

    Args:
        s: tensor of any shape ``(..., D, ...)``; the capsule dimension is ``dim``.
        dim: the dimension that holds a capsule's components.

    Chapter 01.
    """
    check_tensor(s, "s", "(..., D)", min_ndim=1, floating=True)
    _check_dim(s, dim)
    sq, norm = _safe_norm(s, dim)
    return (sq / (1.0 + sq)) * (s / norm)


def squash_exp(s: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The exponential squash of Efficient-CapsNet and Mitterreiter et al.: ``(1 − e^{−‖s‖}) · s/‖s‖``.

    Near zero its length grows like ‖s‖ (not ‖s‖²), so small capsules are not crushed as hard as by
    :func:`squash`. Finite, with a finite gradient, at ``s = 0``.

    Chapter 01 (used by the deep networks of chapter 04).
    """
    check_tensor(s, "s", "(..., D)", min_ndim=1, floating=True)
    _check_dim(s, dim)
    _, norm = _safe_norm(s, dim)
    # -expm1(-x) = 1 - e^{-x} without the cancellation that makes it 0 for tiny x in float32.
    return -torch.expm1(-norm) * (s / norm)


def capsule_lengths(u: torch.Tensor) -> torch.Tensor:
    """The lengths ‖u‖ of capsules ``u`` ``(..., D)`` → ``(...)``, computed as ``sqrt(‖u‖² + 10⁻¹⁶)``: the same
    value to float precision for any real capsule, and a finite gradient at u = 0.

    A capsule's length is its activation (the probability that its entity is present, Sabour et al.): the input
    activations a_i that a capsule layer hands its router, and the output activations of a layer of vector capsules.

    Chapter 01 (the learned routers of chapter 07 read them as their input activations).
    """
    check_tensor(u, "u", "(..., D)", min_ndim=1, nonempty=True, floating=True)
    return torch.sqrt((u * u).sum(dim=-1) + 1e-16)


def margin_loss(
    lengths: torch.Tensor,
    targets: torch.Tensor,
    m_pos: float = 0.9,
    m_neg: float = 0.1,
    lam: float = 0.5,
) -> torch.Tensor:
    """Sabour's margin loss, summed over classes and averaged over the batch.

    ``L_k = T_k · max(0, m⁺ − ‖v_k‖)² + λ (1 − T_k) · max(0, ‖v_k‖ − m⁻)²`` (Sabour et al., eq. 4).

    Args:
        lengths: ``(B, J)`` capsule lengths ‖v_k‖.
        targets: ``(B,)`` integer labels in ``[0, J)`` or ``(B, J)`` 0/1 (multi-hot) targets T.
        m_pos, m_neg, lam: the margins m⁺, m⁻ and the down-weighting λ of absent classes.

    Chapter 01.
    """
    check_tensor(lengths, "lengths", "(B, J)", ndim=2, floating=True)
    B, J = lengths.shape
    if not isinstance(targets, torch.Tensor):
        raise ValueError("targets must be a tensor of shape (B,) (labels) or (B, J) (0/1)")
    if targets.dim() == 1:
        if targets.shape[0] != B:
            raise ValueError(f"targets must have shape (B,) = ({B},), got {tuple(targets.shape)}")
        if targets.is_floating_point():
            raise ValueError("integer labels of shape (B,) expected; 0/1 targets must have shape (B, J)")
        if B and (targets.min() < 0 or targets.max() >= J):
            raise ValueError(f"labels must lie in [0, {J}), got range [{targets.min()}, {targets.max()}]")
        T = F.one_hot(targets.long(), J).to(lengths.dtype)
    elif targets.dim() == 2:
        if tuple(targets.shape) != (B, J):
            raise ValueError(f"targets must have shape (B, J) = ({B}, {J}), got {tuple(targets.shape)}")
        T = targets.to(lengths.dtype)
    else:
        raise ValueError(f"targets must have shape (B,) or (B, J), got {tuple(targets.shape)}")
    present = T * F.relu(m_pos - lengths) ** 2
    absent = lam * (1.0 - T) * F.relu(lengths - m_neg) ** 2
    return (present + absent).sum(dim=1).mean()


def conv_to_capsules(x: torch.Tensor, capsule_dim: int) -> torch.Tensor:
    """Regroup a convolution's output into capsules: one capsule = ``capsule_dim`` channels at one position.

    The conv output ``(B, C·D, H, W)`` has its channels ordered as C capsule types of D channels each.
    The result is ``(B, H·W·C, D)``, capsules ordered by (row, column, type). Capsule ``(h, w, c)`` is
    ``x[b, c·D:(c+1)·D, h, w]`` — the D channels of type c at one position, never D neighbouring
    positions of one channel (a common reshape bug: ``x.view(B, -1, D)`` without the permute).

    Chapter 01.
    """
    check_tensor(x, "x", "(B, C*D, H, W)", ndim=4, floating=True)
    if capsule_dim < 1 or x.shape[1] % capsule_dim:
        raise ValueError(
            f"x must have shape (B, C*D, H, W) with C*D divisible by D = {capsule_dim}, got {tuple(x.shape)}"
        )
    B, CD, H, W = x.shape
    C = CD // capsule_dim
    x = x.view(B, C, capsule_dim, H, W).permute(0, 3, 4, 1, 2)  # (B, H, W, C, D)
    return x.reshape(B, H * W * C, capsule_dim)


class PrimaryCapsules(nn.Module):
    """The primary-capsule layer: a convolution whose output channels are read as capsules, then squashed.

    Sabour's layer is ``PrimaryCapsules(256, types=32, dim=8, kernel_size=9, stride=2)``: on a 20×20×256
    feature map it gives 6·6·32 = 1152 capsules of dimension 8.

    Input ``(B, in_channels, H, W)`` → output ``(B, H'·W'·types, dim)``.

    Chapter 01.
    """

    def __init__(self, in_channels: int, types: int = 32, dim: int = 8, kernel_size: int = 9, stride: int = 2,
                 squash_fn=squash):
        super().__init__()
        self.types, self.dim, self.squash_fn = types, dim, squash_fn
        self.conv = nn.Conv2d(in_channels, types * dim, kernel_size, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.conv.in_channels:
            raise ValueError(
                f"PrimaryCapsules expects (B, {self.conv.in_channels}, H, W), got {tuple(x.shape)}"
            )
        return self.squash_fn(conv_to_capsules(self.conv(x), self.dim))

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """The (H', W') grid of capsule positions for an input feature map of the given size."""
        k, s = self.conv.kernel_size[0], self.conv.stride[0]
        return (height - k) // s + 1, (width - k) // s + 1
