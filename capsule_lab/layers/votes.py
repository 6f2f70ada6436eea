"""Votes: how the capsules of one layer predict those of the next, formed once for every layer.

Taught in chapter 02 (Sabour's votes) and chapter 07 (Faria's). Every input capsule i votes for every output capsule j
through its own transformation W_ij:

    plain        û_{j|i} = W_ij u_i                                 Sabour et al. (:func:`capsule_votes`)
    normalized   v_ij    = W_ij u_i / (‖W_ij‖_F + ε)                 Faria's eq. 1 (:func:`normalized_votes`)
    matrices     v_ij    = W_ij P_i / (‖W_ij‖_F + ε), P_i 4×4        Faria's eq. 1 (:func:`matrix_votes`)

The two normalised forms share one normalisation (:func:`normalized_weight`) and one ε (:data:`VOTE_EPS`). The layers
(:mod:`~capsule_lab.layers.dense`, :mod:`~capsule_lab.layers.convolutional`) choose a form and hand the votes to their
router.
"""

from __future__ import annotations

import torch

from .._checks import check_nonnegative, check_tensor, shape_error

#: The two forms of votes a capsule layer can form, Sabour's plain W u and Faria's normalised votes.
VOTES = ("plain", "normalized")

#: The ε of Faria's eq. 1, ``‖W_ij‖_F + ε``, in every layer that normalises its votes.
VOTE_EPS = 1e-6


def capsule_votes(u: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Votes ``û_{j|i} = W_ij u_i``: u ``(B, I, D_in)``, weight ``(I, J, D_out, D_in)`` → ``(B, I, J, D_out)``.

    Chapter 02.
    """
    check_tensor(weight, "weight", "(I, J, D_out, D_in)", ndim=4)
    I, _, _, D_in = weight.shape
    check_tensor(u, "u", f"(B, I, D_in) = (B, {I}, {D_in})", sizes=(None, I, D_in))
    return torch.einsum("ijdk,bik->bijd", weight, u)


def normalized_weight(weight: torch.Tensor, eps: float = VOTE_EPS) -> torch.Tensor:
    """Faria's eq. 1 without the input: each transformation divided by its Frobenius norm, ``W_ij / (‖W_ij‖_F +
    eps)``, weight ``(I, J, …, …)`` (a matrix per pair). The one normalisation of every layer that forms normalised
    votes: vector capsules (:func:`normalized_votes`) and 4×4 pose matrices (:func:`matrix_votes`). Chapter 07.
    """
    check_nonnegative(eps, "eps")
    return weight / (torch.linalg.matrix_norm(weight) + eps)[..., None, None]


def normalized_votes(u: torch.Tensor, weight: torch.Tensor, eps: float = VOTE_EPS) -> torch.Tensor:
    """Faria's votes (eq. 1): ``v_ij = W_ij u_i / (‖W_ij‖_F + eps)``, eps = 10⁻⁶.

    u ``(B, I, D_in)``, weight ``(I, J, D, D_in)`` → votes ``(B, I, J, D)``. Multiplying W_ij by any factor
    leaves v_ij unchanged (up to eps), and ``‖v_ij‖ ≤ ‖u_i‖`` (‖W u‖ ≤ ‖W‖_2 ‖u‖ ≤ ‖W‖_F ‖u‖): with squashed input
    capsules every vote lies in the unit ball, and a kernel's length scales mean the same thing in every layer.

    Chapter 07.
    """
    check_tensor(weight, "weight", "(I, J, D, D_in)", ndim=4, nonempty=True, floating=True)
    I, _, _, D_in = weight.shape
    check_tensor(u, "u", f"(B, I, D_in) = (B, {I}, {D_in})", sizes=(None, I, D_in), floating=True)
    return torch.einsum("ijdk,bik->bijd", normalized_weight(weight, eps), u)


#: Every pose is a 4×4 matrix; this is its side.
POSE_SIZE = 4
#: A pose has 4·4 = 16 entries, the ``pose_dim`` a router of this network must route.
POSE_DIM = POSE_SIZE * POSE_SIZE


def matrix_votes(poses: torch.Tensor, weight: torch.Tensor, eps: float = VOTE_EPS) -> torch.Tensor:
    """Eq. 1 with 4×4 pose matrices: ``v_ij = W_ij P_i / (‖W_ij‖_F + eps)``, a matrix product.

    poses ``(..., I, 16)`` (each P_i read row by row as a 4×4 matrix), weight ``(I, J, 4, 4)`` → votes
    ``(..., I, J, 16)`` (each vote flattened row by row). Multiplying W_ij by a factor leaves v_ij unchanged
    (up to eps) and ``‖v_ij‖_F <= ‖P_i‖_F``. Chapter 07.
    """
    check_tensor(weight, "weight", f"(I, J, {POSE_SIZE}, {POSE_SIZE})", ndim=4, nonempty=True, floating=True)
    I, J = weight.shape[:2]
    if weight.shape[2:] != (POSE_SIZE, POSE_SIZE):
        raise shape_error("weight", f"(I, J, {POSE_SIZE}, {POSE_SIZE})", weight)
    check_tensor(poses, "poses", f"(..., I, {POSE_DIM}) with I = {I}", min_ndim=2, floating=True)
    if poses.shape[-2:] != (I, POSE_DIM):
        raise shape_error("poses", f"(..., I, {POSE_DIM}) with I = {I}", poses)
    normalized = normalized_weight(weight, eps)                                           # W_ij / ‖W_ij‖_F
    P = poses.unflatten(-1, (POSE_SIZE, POSE_SIZE))                                      # (..., I, 4, 4)
    votes = torch.einsum("ijab,...ibc->...ijac", normalized, P)                          # (..., I, J, 4, 4)
    return votes.flatten(-2)


# --------------------------------------------------------------------------------------------- layers
