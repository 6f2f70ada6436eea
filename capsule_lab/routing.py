"""Routing: how lower capsules send their votes to higher capsules.

Taught in chapter 02 (``chapters/02_dynamic_routing.ipynb``); the gradients through it in chapter 03.

Shapes (the course's conventions):
    votes     û_{j|i}   (B, I, J, D)   batch, input capsules, output capsules, output dimension
    logits    b_ij      (B, I, J)
    couplings c_ij      (B, I, J)      for dynamic routing Σ_j c_ij = 1 (softmax over the *outputs*)
    poses     v_j       (B, J, D)

Dynamic routing (Sabour et al., 2017, Algorithm 1), for r iterations:

    c_ij = softmax_j(b_ij)                   (eq. 3)
    s_j  = Σ_i c_ij û_{j|i}                  (eq. 2)
    v_j  = squash(s_j)                       (eq. 1)
    b_ij ← b_ij + ⟨û_{j|i}, v_j⟩             (agreement)

Nothing is detached by default: gradients flow through the couplings into the votes exactly as the
algorithm is written. The two common shortcuts are explicit keywords: ``detach_votes`` (votes are
constants in all but the last iteration, as many implementations do) and ``detach_couplings`` (the
couplings are constants in the backward pass, chapter 03's "detached" network).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch

from .capsules import squash

__all__ = [
    "RoutingResult",
    "check_votes",
    "agreement",
    "routing_step",
    "dynamic_routing",
    "uniform_routing",
    "vote_free_routing",
]


class RoutingResult(NamedTuple):
    """What a router returns.

    poses: ``(B, J, D)`` output capsules v_j.
    couplings: ``(B, I, J)`` the coupling coefficients that produced ``poses``.
    logits: ``(B, I, J)`` the logits b_ij whose softmax over j gives ``couplings``.
    history: one :class:`RoutingResult` per iteration (empty unless asked for with ``history=True``).
    """

    poses: torch.Tensor
    couplings: torch.Tensor
    logits: torch.Tensor
    history: tuple = ()


def check_votes(votes) -> None:
    """Raise ``ValueError`` unless ``votes`` is a floating tensor of shape ``(B, I, J, D)``."""
    if not isinstance(votes, torch.Tensor) or votes.dim() != 4 or not votes.is_floating_point():
        got = tuple(votes.shape) if isinstance(votes, torch.Tensor) else type(votes).__name__
        raise ValueError(f"votes must be a floating tensor of shape (B, I, J, D), got {got}")
    if 0 in votes.shape:
        raise ValueError(f"votes must have shape (B, I, J, D) with no empty dimension, got {tuple(votes.shape)}")


def _check_iterations(iterations) -> None:
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")


def _check_logits(logits: torch.Tensor, B: int, I: int, J: int, like: torch.Tensor, name: str) -> torch.Tensor:
    """Logits of shape (B, I, J) or (I, J), in ``like``'s dtype, expanded to (B, I, J)."""
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) not in {(B, I, J), (I, J)}:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"{name} must have shape (B, I, J) = ({B}, {I}, {J}) or (I, J), got {got}")
    return logits.to(like.dtype).expand(B, I, J)


def agreement(votes: torch.Tensor, poses: torch.Tensor) -> torch.Tensor:
    """The agreement ``a_ij = ⟨û_{j|i}, v_j⟩`` between each vote and the output it voted for: ``(B, I, J)``.

    Chapter 02.
    """
    check_votes(votes)
    B, _, J, D = votes.shape
    if not isinstance(poses, torch.Tensor) or tuple(poses.shape) != (B, J, D):
        got = tuple(poses.shape) if isinstance(poses, torch.Tensor) else type(poses).__name__
        raise ValueError(f"poses must have shape (B, J, D) = ({B}, {J}, {D}), got {got}")
    return torch.einsum("bijd,bjd->bij", votes, poses)


def routing_step(
    votes: torch.Tensor,
    logits: torch.Tensor,
    activation: Callable[[torch.Tensor], torch.Tensor] = squash,
) -> RoutingResult:
    """One iteration of dynamic routing, without the logit update: c = softmax_j(b), s = Σ_i c û, v = squash(s).

    Returns a :class:`RoutingResult` whose ``logits`` are the ones given. The next iteration's logits
    are ``logits + agreement(votes, result.poses)``.

    Chapter 02 (routing iteration by iteration).
    """
    check_votes(votes)
    logits = _check_logits(logits, *votes.shape[:3], votes, "logits")
    couplings = torch.softmax(logits, dim=2)
    poses = activation(torch.einsum("bij,bijd->bjd", couplings, votes))
    return RoutingResult(poses, couplings, logits)


def dynamic_routing(
    votes: torch.Tensor,
    iterations: int = 3,
    prior_logits: Optional[torch.Tensor] = None,
    *,
    detach_votes: bool = False,
    detach_couplings: bool = False,
    activation: Callable[[torch.Tensor], torch.Tensor] = squash,
    history: bool = False,
) -> RoutingResult:
    """Routing-by-agreement, exactly Sabour et al.'s Algorithm 1.

    Args:
        votes: ``(B, I, J, D)`` predictions û_{j|i} = W_ij u_i.
        iterations: number of routing iterations r ≥ 1 (Sabour: 3).
        prior_logits: initial logits b, ``(B, I, J)`` or ``(I, J)`` (e.g. learned priors); zeros if None.
        detach_votes: use ``votes.detach()`` in every iteration but the last, so that gradients reach the
            votes only through the final weighted sum (a common implementation shortcut, off by default).
        detach_couplings: treat the couplings as constants in the backward pass (chapter 03).
        activation: the squash to apply to s_j (``squash`` or ``squash_exp``).
        history: also return the result of every iteration in ``.history``.

    Returns:
        :class:`RoutingResult` with the final poses, the couplings that produced them and their logits.

    Chapter 02.
    """
    check_votes(votes)
    _check_iterations(iterations)
    B, I, J, _ = votes.shape
    if prior_logits is None:
        logits = votes.new_zeros(B, I, J)
    else:
        logits = _check_logits(prior_logits, B, I, J, votes, "prior_logits")
    steps = []
    for r in range(iterations):
        last = r == iterations - 1
        u = votes.detach() if (detach_votes and not last) else votes
        couplings = torch.softmax(logits, dim=2)
        c = couplings.detach() if detach_couplings else couplings
        poses = activation(torch.einsum("bij,bijd->bjd", c, u))
        steps.append(RoutingResult(poses, couplings, logits))
        if not last:
            logits = logits + torch.einsum("bijd,bjd->bij", u, poses)
    result = steps[-1]
    return result._replace(history=tuple(steps)) if history else result


def uniform_routing(
    votes: torch.Tensor,
    activation: Callable[[torch.Tensor], torch.Tensor] = squash,
) -> RoutingResult:
    """No routing: every input capsule sends its vote to every output with the same weight c_ij = 1/J.

    The baseline that chapters 03 and 04 compare dynamic routing against.

    Chapter 02.
    """
    check_votes(votes)
    B, I, J, _ = votes.shape
    logits = votes.new_zeros(B, I, J)
    couplings = votes.new_full((B, I, J), 1.0 / J)
    poses = activation(votes.sum(dim=1) / J)
    return RoutingResult(poses, couplings, logits)


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


def _softmax_backward(c: torch.Tensor, grad_c: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Gradient w.r.t. the logits of c = softmax over ``dim``, given the gradient w.r.t. c:
    ``c ⊙ (g − ⟨g, c⟩)``, the softmax Jacobian c_j(δ_jk − c_k) applied without forming it."""
    return c * (grad_c - (grad_c * c).sum(dim=dim, keepdim=True))


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
                g_b = g_b + _softmax_backward(c, g_c)
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
    if not isinstance(weight, torch.Tensor) or weight.dim() != 4 or not weight.is_floating_point():
        raise ValueError(f"weight must be a floating tensor of shape (I, J, D, D_in), got "
                         f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}")
    I, J, D, D_in = weight.shape
    if not isinstance(u, torch.Tensor) or u.dim() != 3 or tuple(u.shape[1:]) != (I, D_in) or u.shape[0] == 0:
        got = tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__
        raise ValueError(f"u must have shape (B, I, D_in) = (B, {I}, {D_in}), got {got}")
    if u.dtype != weight.dtype:
        raise ValueError(f"u and weight must have the same dtype, got {u.dtype} and {weight.dtype}")
    _check_iterations(iterations)
    B = u.shape[0]
    if prior_logits is None:
        logits = u.new_zeros(J, B, I)
    else:
        logits = _check_logits(prior_logits, B, I, J, u, "prior_logits").permute(2, 0, 1)
    ut = u.transpose(1, 2).contiguous()                          # (B, D_in, I)
    wk = weight.permute(1, 3, 0, 2).reshape(J, D_in * I, D)      # (J, D_in·I, D)
    poses, couplings, logits = _VoteFreeRouting.apply(
        ut, wk, logits, iterations, detach_votes, detach_couplings, activation)
    return RoutingResult(poses.transpose(0, 1), couplings.permute(1, 2, 0), logits.permute(1, 2, 0))
