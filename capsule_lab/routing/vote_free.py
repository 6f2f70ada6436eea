"""Routing without votes: dynamic routing for a fully-connected capsule layer computed from (u, W).

Taught in chapter 02 ("Routing without votes"). :func:`vote_free_routing` gives the same result as
:func:`~capsule_lab.routing.procedure.dynamic_routing` on the votes û_{j|i} = W_ij u_i, without forming
them. A :class:`~capsule_lab.routing.DynamicRouter` offers it as its
:meth:`~capsule_lab.routing.DynamicRouter.route_weights`, which a :class:`~capsule_lab.layers.dense.CapsuleLayer` with
``vote_free=True`` runs instead of forming the votes.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from .._checks import check_tensor, shape_error
from ..capsules import squash
from .procedure import softmax_backward
from .router import RoutingResult, check_iterations, check_logits

__all__ = ["vote_free_routing"]


# --- Routing without votes ------------------------------------------------------------------------------
#
# For a fully-connected capsule layer the votes are û_{j|i} = W_ij u_i, and both places dynamic routing
# reads them are contractions that never need û itself:
#
#     s_j            = Σ_i c_ij W_ij u_i = Σ_{k,i} (c_ij u_ik) W_ij[:, k]     a (B × D_in·I) @ (D_in·I × D) matmul
#     ⟨û_{j|i}, v_j⟩ = ⟨u_i, W_ijᵀ v_j⟩                                       a (B × D) @ (D × D_in·I) matmul
#
# one pair of matrix products per output capsule j. Two layout choices make them fast on a CPU:
# the input capsules are stored component-major, uᵀ (B, D_in, I), so that scaling by c_ij and the sum
# over k run along contiguous memory; and the work is done one output capsule at a time, so that the
# (B, D_in·I) intermediates stay in the cache instead of making a round trip to memory.
# The backward pass is written by hand (a custom autograd Function): nothing of size B·I·J·D is formed
# or saved; it keeps the small per-iteration tensors c, s, v and recomputes the products it needs.


def _weighted(weights_j: torch.Tensor, ut: torch.Tensor) -> torch.Tensor:
    """(B, I) weights × uᵀ (B, D_in, I) → (B, D_in·I): the rows that multiply Wk_j."""
    return (weights_j.unsqueeze(1) * ut).view(ut.shape[0], -1)


class _VoteFreeRouting(torch.autograd.Function):
    """Dynamic routing from (uᵀ, Wk) with a hand-written backward. Layouts: uᵀ (B, D_in, I);
    Wk (J, D_in·I, D) with Wk[j, k·I + i, d] = W[i, j, d, k]; logits and couplings (J, B, I); poses (J, B, D)."""

    @staticmethod
    def forward(ctx, ut, wk, logits, iterations, detach_votes, detach_couplings, activation):
        J, B, I = logits.shape
        D_in = ut.shape[1]
        cs, ss, vs = [], [], []
        b = logits
        for t in range(iterations):
            c = torch.softmax(b, dim=0)
            s = torch.stack([_weighted(c[j], ut) @ wk[j] for j in range(J)])             # (J, B, D)
            v = activation(s)
            cs.append(c), ss.append(s), vs.append(v)
            if t < iterations - 1:
                a = torch.stack([((v[j] @ wk[j].T).view(B, D_in, I) * ut).sum(dim=1) for j in range(J)])
                b = b + a.to(b.dtype)
        device = ut.device.type
        ctx.autocast = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device), device)
        ctx.options = (iterations, detach_votes, detach_couplings, activation)
        ctx.save_for_backward(ut, wk, *cs, *ss, *vs)
        return vs[-1], cs[-1], b

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_v, grad_c, grad_b):
        iterations, detach_votes, detach_couplings, activation = ctx.options
        enabled, dtype, device = ctx.autocast
        ut, wk, *rest = ctx.saved_tensors
        cs, ss, vs = rest[:iterations], rest[iterations:2 * iterations], rest[2 * iterations:]
        J, B, I = cs[0].shape
        D_in = ut.shape[1]
        with torch.autocast(device, dtype=dtype, enabled=enabled):
            acc = torch.promote_types(ut.dtype, torch.float32)  # accumulate low-precision grads in fp32
            grad_ut = torch.zeros_like(ut, dtype=acc) if ctx.needs_input_grad[0] else None
            grad_wk = torch.zeros_like(wk, dtype=acc) if ctx.needs_input_grad[1] else None
            g_b = grad_b if grad_b is not None else torch.zeros_like(cs[0])  # ∂L/∂b_{t+1}, then ∂L/∂b_t
            g_v = grad_v if grad_v is not None else torch.zeros_like(vs[-1])
            for t in reversed(range(iterations)):
                c, s, v = cs[t], ss[t], vs[t]
                live = (t == iterations - 1) or not detach_votes  # do the votes carry gradient here?
                if t < iterations - 1:
                    # b_{t+1} = b_t + a_t, a_t[j, b, i] = ⟨u_i, W_ijᵀ v_j⟩: ∂L/∂a_t = ∂L/∂b_{t+1} = g_b.
                    g_v = torch.empty_like(v)
                    for j in range(J):
                        xa = _weighted(g_b[j], ut)
                        g_v[j] = xa @ wk[j]
                        if live and grad_ut is not None:
                            grad_ut.addcmul_(g_b[j].unsqueeze(1), (v[j] @ wk[j].T).view(B, D_in, I))
                        if live and grad_wk is not None:
                            grad_wk[j] += xa.T @ v[j]
                with torch.enable_grad():
                    s_ = s.detach().requires_grad_(True)
                    (g_s,) = torch.autograd.grad(activation(s_), s_, g_v.to(s.dtype))
                # s_t[j] = Σ_i c_ij W_ij u_i.
                g_c = torch.zeros_like(c)
                for j in range(J):
                    zs = (g_s[j] @ wk[j].T).view(B, D_in, I)  # W_ijᵀ ∂L/∂s_j, component-major
                    if not detach_couplings:
                        g_c[j] = (zs * ut).sum(dim=1)
                    if live and grad_ut is not None:
                        grad_ut.addcmul_(c[j].unsqueeze(1), zs)
                    if live and grad_wk is not None:
                        grad_wk[j] += _weighted(c[j], ut).T @ g_s[j]
                if t == iterations - 1 and grad_c is not None:
                    g_c = g_c + grad_c
                g_b = g_b + softmax_backward(c, g_c)
        grad_ut = grad_ut.to(ut.dtype) if grad_ut is not None else None
        grad_wk = grad_wk.to(wk.dtype) if grad_wk is not None else None
        return grad_ut, grad_wk, (g_b if ctx.needs_input_grad[2] else None), None, None, None, None


def vote_free_routing(
    u: torch.Tensor,
    weight: torch.Tensor,
    iterations: int = 3,
    prior_logits: Optional[torch.Tensor] = None,
    *,
    detach_votes: bool = False,
    detach_couplings: bool = False,
    activation: Callable[[torch.Tensor], torch.Tensor] = squash,
) -> RoutingResult:
    """Dynamic routing for a fully-connected capsule layer, computed from (u, W) without forming the votes.

    The same result as ``dynamic_routing(capsule_votes(u, weight), ...)`` — poses, couplings, logits and
    their gradients w.r.t. ``u``, ``weight`` and ``prior_logits`` — but the B·I·J·D tensor of votes is
    never materialised, in the forward or the backward pass: both uses of the votes are matrix products
    per output capsule (see the comment above).

    Args:
        u: ``(B, I, D_in)`` input capsules.
        weight: ``(I, J, D, D_in)`` transformation matrices W_ij.
        iterations, prior_logits, detach_votes, detach_couplings, activation: as in :func:`dynamic_routing`.

    Chapter 02 ("Routing without votes").
    """
    check_tensor(weight, "weight", "(I, J, D, D_in)", ndim=4, floating=True)
    I, J, D, D_in = weight.shape
    u_shape = f"(B, I, D_in) = (B, {I}, {D_in})"
    check_tensor(u, "u", u_shape, sizes=(None, I, D_in))
    if u.shape[0] == 0:
        raise shape_error("u", u_shape, u)
    if u.dtype != weight.dtype:
        raise ValueError(f"u and weight must have the same dtype, got {u.dtype} and {weight.dtype}")
    check_iterations(iterations)
    B = u.shape[0]
    if prior_logits is None:
        logits = u.new_zeros(J, B, I)
    else:
        logits = check_logits(prior_logits, B, I, J, u, "prior_logits").permute(2, 0, 1)
    ut = u.transpose(1, 2).contiguous()                          # (B, D_in, I)
    wk = weight.permute(1, 3, 0, 2).reshape(J, D_in * I, D)      # (J, D_in·I, D)
    poses, couplings, logits = _VoteFreeRouting.apply(
        ut, wk, logits, iterations, detach_votes, detach_couplings, activation)
    poses = poses.transpose(0, 1)
    return RoutingResult(poses, poses.norm(dim=-1), couplings.permute(1, 2, 0), logits.permute(1, 2, 0))
