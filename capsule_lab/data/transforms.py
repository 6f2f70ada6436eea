"""Transforms of 28×28 digits: random shifts and affNIST-like affine maps, seeded.

Taught in chapter 02 (Sabour's training shifts of up to 2 pixels, :func:`random_shift`) and chapter 04 (the affine
test set, :func:`affine_test_set`: rotations up to 20°, shears up to 45°, scales 0.8–1.2, drawn from a seed by
:func:`affine_parameters` and applied by :func:`apply_affine`), which chapters 05–08 test robustness with.
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from .._checks import check_tensor


def random_shift(images: torch.Tensor, max_shift: int = 2, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image by up to ``max_shift`` pixels in each direction, padding with zeros (Sabour §5).

    images ``(B, C, H, W)``. Chapter 02.
    """
    check_tensor(images, "images", "(B, C, H, W)", ndim=4)
    if not isinstance(max_shift, int) or max_shift < 0:
        raise ValueError(f"max_shift must be a non-negative integer (pixels), got {max_shift!r}")
    if max_shift == 0:
        return images
    B, _, H, W = images.shape
    padded = torch.nn.functional.pad(images, (max_shift,) * 4)
    dy = torch.randint(0, 2 * max_shift + 1, (B,), generator=generator, device="cpu").to(images.device)
    dx = torch.randint(0, 2 * max_shift + 1, (B,), generator=generator, device="cpu").to(images.device)
    rows = (dy[:, None] + torch.arange(H, device=images.device)[None, :])  # (B, H)
    cols = (dx[:, None] + torch.arange(W, device=images.device)[None, :])  # (B, W)
    batch = torch.arange(B, device=images.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()


# ------------------------------------------------------------------------------------------ affNIST-like
# affNIST (Tieleman, 2013) applies a random affine map to each MNIST test digit: rotation within 20°,
# shear within 45°, scaling by 0.8–1.2. We draw the same kinds of maps from a seed and apply them on the
# digit's own 28×28 canvas (affNIST also translates on a 40×40 canvas; our networks are 28×28), so the
# test set can be regenerated anywhere without a download.


def affine_parameters(n: int, seed: int = 0, strength: float = 1.0, max_rotation: float = 20.0,
                      max_shear: float = 45.0, scale: tuple[float, float] = (0.8, 1.2)) -> dict:
    """Draw ``n`` affine maps: rotation and shear angles (degrees) uniform in ±max·strength, horizontal and
    vertical scale uniform in [1 + (lo−1)·strength, 1 + (hi−1)·strength]. ``strength`` in [0, 1] shrinks
    every range toward the identity (0 → no change). Returns tensors ``rotation, shear, scale_x, scale_y``
    of shape ``(n,)``. Chapters 03 and 04.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"strength must lie in [0, 1], got {strength}")
    lo, hi = scale
    if not 0.0 < lo <= 1.0 <= hi:
        raise ValueError(f"scale must be a range (lo, hi) with 0 < lo <= 1 <= hi, got {scale}")
    if max_rotation < 0 or max_shear < 0 or max_shear >= 90:
        raise ValueError(f"need max_rotation >= 0 and 0 <= max_shear < 90 degrees, got {max_rotation}, {max_shear}")
    g = torch.Generator().manual_seed(seed)
    sym = lambda: 2 * torch.rand(n, generator=g, dtype=torch.float64) - 1  # noqa: E731 - uniform in [-1, 1]
    between = lambda: lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)  # noqa: E731
    rotation, shear = max_rotation * strength * sym(), max_shear * strength * sym()
    scale_x, scale_y = 1 + (between() - 1) * strength, 1 + (between() - 1) * strength
    return {"rotation": rotation, "shear": shear, "scale_x": scale_x, "scale_y": scale_y}


def affine_matrices(params: dict) -> torch.Tensor:
    """The 2×2 maps A = R(rotation) · Shear(shear) · diag(scale_x, scale_y) of :func:`affine_parameters`,
    acting on image coordinates (x right, y down, origin at the centre) → ``(n, 2, 2)`` float64. Chapter 03.
    """
    rot, sh = torch.deg2rad(params["rotation"]), torch.deg2rad(params["shear"])
    n = rot.shape[0]
    R = torch.stack([torch.cos(rot), -torch.sin(rot), torch.sin(rot), torch.cos(rot)], dim=1).view(n, 2, 2)
    Sh = torch.stack([torch.ones_like(sh), torch.tan(sh), torch.zeros_like(sh), torch.ones_like(sh)], dim=1).view(n, 2, 2)
    S = torch.diag_embed(torch.stack([params["scale_x"], params["scale_y"]], dim=1))
    return R @ Sh @ S


def affine_transform(images: torch.Tensor, seed: int = 0, strength: float = 1.0, **ranges) -> torch.Tensor:
    """Apply one seeded random affine map per image about the image centre (bilinear, zeros outside).

    images ``(N, C, H, W)``; ``ranges`` go to :func:`affine_parameters` (max_rotation, max_shear, scale).
    The same seed gives the same maps, whatever the machine. Chapters 03 and 04.
    """
    check_tensor(images, "images", "(N, C, H, W)", ndim=4, floating=True)
    return apply_affine(images, affine_matrices(affine_parameters(images.shape[0], seed, strength, **ranges)))


def apply_affine(images: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """Map each image ``(N, C, H, W)`` by its 2×2 matrix ``(N, 2, 2)`` about the centre: the pixel at
    (x, y) (x right, y down, in units of half the image side) moves to A·(x, y). Bilinear, zeros outside.
    Chapter 03.
    """
    check_tensor(images, "images", "(N, C, H, W)", ndim=4, floating=True)
    N = images.shape[0]
    check_tensor(matrices, "matrices", f"(N, 2, 2) = ({N}, 2, 2)", sizes=(N, 2, 2))
    # affine_grid maps output coordinates to input coordinates, in [-1, 1] units: use A⁻¹.
    A = matrices.double()
    theta = torch.cat([torch.linalg.inv(A), torch.zeros(A.shape[0], 2, 1, dtype=A.dtype)], dim=2)
    grid = torch.nn.functional.affine_grid(theta.to(images.dtype), list(images.shape), align_corners=False)
    out = torch.nn.functional.grid_sample(images, grid.to(images.device), mode="bilinear",
                                          padding_mode="zeros", align_corners=False)
    return out.clamp_(0.0, 1.0) if images.min() >= 0 and images.max() <= 1 else out


def affine_test_set(data: TensorDataset, seed: int = 0, strength: float = 1.0, **ranges) -> TensorDataset:
    """A copy of a test set with every image under its own seeded affine map (:func:`affine_transform`: rotation,
    shear and scale of affNIST's kinds and ranges, times ``strength``), same labels. It is not affNIST: the maps act
    on the digit's own 28×28 frame (no 40×40 canvas, no translation), where an enlarged or sheared digit can be cut
    at the edge, so its errors cannot be set beside affNIST's.

    Chapters 03, 04 and 08.
    """
    if not isinstance(data, TensorDataset) or len(data.tensors) < 2:
        raise ValueError("data must be a TensorDataset of (images, labels)")
    images, labels = data.tensors[:2]
    return TensorDataset(affine_transform(images, seed, strength, **ranges), labels)


# ------------------------------------------------------------------------- 40×40: expanded MNIST, affNIST
# Sabour et al. (§6) and Jeong et al. (§5.2) train on the "expanded MNIST": each 28×28 digit placed at a
# random position on a black 40×40 canvas, and test on affNIST, whose digits are 40×40 too. Both are made
# here from the real digits with a seed; the real affNIST files are read where they can be downloaded.
