"""Tests for ``capsule_lab.routing`` (chapter 02; gradients: chapter 03).

The forward pass is compared with an independent implementation of Sabour et al.'s Algorithm 1 written
below with explicit Python loops over b, i, j (float64 scalars). The gradients of the detach options are
compared with independent torch re-implementations that detach by hand, and the default gradient with
``torch.autograd.gradcheck`` (finite differences).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from capsule_lab.capsules import squash
from capsule_lab.routing import RoutingResult, agreement, dynamic_routing, routing_step, uniform_routing

HYP = settings(max_examples=30, deadline=None)


# ----------------------------------------------------------------------- reference: loops over b, i, j

def _ref_squash(s: list[float]) -> list[float]:
    n2 = sum(x * x for x in s)
    if n2 == 0.0:
        return [0.0] * len(s)
    n = math.sqrt(n2)
    return [n2 / (1.0 + n2) * x / n for x in s]


def ref_dynamic_routing(votes: np.ndarray, iterations: int, prior=None):
    """Sabour et al. (2017), Algorithm 1, one scalar at a time. Returns (poses, couplings, logits) where
    ``logits`` are the b_ij used for the final couplings (no update after the last iteration)."""
    B, I, J, D = votes.shape
    b = np.zeros((B, I, J))
    if prior is not None:
        prior = np.asarray(prior, dtype=np.float64)
        for bb in range(B):
            for i in range(I):
                for j in range(J):
                    b[bb, i, j] = prior[i, j] if prior.ndim == 2 else prior[bb, i, j]
    history = []
    for r in range(iterations):
        c = np.zeros((B, I, J))
        for bb in range(B):
            for i in range(I):
                m = max(b[bb, i, j] for j in range(J))
                e = [math.exp(b[bb, i, j] - m) for j in range(J)]
                z = sum(e)
                for j in range(J):
                    c[bb, i, j] = e[j] / z
        v = np.zeros((B, J, D))
        for bb in range(B):
            for j in range(J):
                s = [0.0] * D
                for i in range(I):
                    for d in range(D):
                        s[d] += c[bb, i, j] * votes[bb, i, j, d]
                v[bb, j] = _ref_squash(s)
        history.append((v.copy(), c.copy(), b.copy()))
        if r < iterations - 1:
            for bb in range(B):
                for i in range(I):
                    for j in range(J):
                        b[bb, i, j] += sum(votes[bb, i, j, d] * v[bb, j, d] for d in range(D))
    return history[-1] + (history,)


def _random_votes(B=2, I=4, J=3, D=3, seed=0, scale=1.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, I, J, D, generator=g, dtype=torch.float64) * scale).to(dtype)


def _close(a, b, tol=1e-10):
    np.testing.assert_allclose(np.asarray(a.detach() if isinstance(a, torch.Tensor) else a),
                               np.asarray(b), rtol=tol, atol=tol)


# ------------------------------------------------------------------------------------------ forward

@pytest.mark.parametrize("iterations", [1, 2, 3, 4, 5])
def test_dynamic_routing_matches_loop_reference(iterations):
    votes = _random_votes(B=2, I=5, J=3, D=4, seed=iterations, scale=2.0)
    res = dynamic_routing(votes, iterations=iterations)
    poses, couplings, logits, _ = ref_dynamic_routing(votes.numpy(), iterations)
    assert isinstance(res, RoutingResult)
    assert res.poses.shape == (2, 3, 4) and res.couplings.shape == (2, 5, 3) and res.logits.shape == (2, 5, 3)
    _close(res.poses, poses)
    _close(res.couplings, couplings)
    _close(res.logits, logits)
    assert res.history == ()


def test_dynamic_routing_one_iteration_by_hand():
    # one input capsule, two outputs, b = 0 → c = (1/2, 1/2).
    # û_1 = (2, 0) → s_1 = (1, 0), ‖s‖² = 1 → v_1 = (1/2, 0);  û_2 = (0, 4) → s_2 = (0, 2) → v_2 = (0, 4/5)
    votes = torch.tensor([[[[2.0, 0.0], [0.0, 4.0]]]], dtype=torch.float64)
    res = dynamic_routing(votes, iterations=1)
    _close(res.couplings, [[[0.5, 0.5]]])
    _close(res.poses, [[[0.5, 0.0], [0.0, 0.8]]])
    # second iteration: b = (⟨(2,0),(1/2,0)⟩, ⟨(0,4),(0,4/5)⟩) = (1, 3.2)
    # c = softmax(1, 3.2) = (1/(1+e^{2.2}), e^{2.2}/(1+e^{2.2}))
    res = dynamic_routing(votes, iterations=2)
    c2 = math.exp(2.2) / (1 + math.exp(2.2))
    _close(res.logits, [[[1.0, 3.2]]])
    _close(res.couplings, [[[1 - c2, c2]]])
    s1, s2 = 2 * (1 - c2), 4 * c2
    _close(res.poses, [[[s1**2 / (1 + s1**2), 0.0], [0.0, s2**2 / (1 + s2**2)]]])


@pytest.mark.parametrize("iterations", [1, 3])
@pytest.mark.parametrize("batched", [False, True], ids=["prior(I,J)", "prior(B,I,J)"])
def test_dynamic_routing_with_prior_logits(iterations, batched):
    votes = _random_votes(B=3, I=4, J=3, D=2, seed=11)
    g = torch.Generator().manual_seed(5)
    prior = torch.randn(*((3, 4, 3) if batched else (4, 3)), generator=g, dtype=torch.float64)
    res = dynamic_routing(votes, iterations=iterations, prior_logits=prior)
    poses, couplings, logits, _ = ref_dynamic_routing(votes.numpy(), iterations, prior.numpy())
    _close(res.poses, poses)
    _close(res.couplings, couplings)
    _close(res.logits, logits)
    # the prior actually matters
    plain = dynamic_routing(votes, iterations=iterations)
    assert not torch.allclose(plain.poses, res.poses)


def test_history_one_entry_per_iteration():
    votes = _random_votes(B=2, I=3, J=4, D=2, seed=3)
    res = dynamic_routing(votes, iterations=4, history=True)
    _, _, _, ref_hist = ref_dynamic_routing(votes.numpy(), 4)
    assert len(res.history) == 4
    for step, (v, c, b) in zip(res.history, ref_hist):
        _close(step.poses, v)
        _close(step.couplings, c)
        _close(step.logits, b)
    last = res.history[-1]
    assert torch.equal(last.poses, res.poses)
    assert torch.equal(last.couplings, res.couplings)
    assert torch.equal(last.logits, res.logits)
    # the same poses as without history
    torch.testing.assert_close(dynamic_routing(votes, iterations=4).poses, res.poses, rtol=0, atol=0)


@HYP
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 5), st.integers(1, 4), st.integers(1, 4),
       st.integers(0, 10_000), st.sampled_from([0.1, 1.0, 5.0]))
def test_couplings_sum_to_one_and_lengths_below_one(B, I, J, D, iterations, seed, scale):
    votes = _random_votes(B, I, J, D, seed=seed, scale=scale)
    res = dynamic_routing(votes, iterations=iterations, history=True)
    for step in res.history:
        torch.testing.assert_close(step.couplings.sum(dim=2), torch.ones(B, I, dtype=torch.float64))
        assert (step.couplings >= 0).all()
    lengths = res.poses.norm(dim=-1)
    assert lengths.shape == (B, J)
    assert (lengths < 1).all()
    # softmax of the returned logits gives the returned couplings
    torch.testing.assert_close(torch.softmax(res.logits, dim=2), res.couplings)


def test_float32_input_stays_float32_and_agrees():
    votes = _random_votes(seed=4)
    r64 = dynamic_routing(votes, iterations=3)
    r32 = dynamic_routing(votes.float(), iterations=3)
    assert r32.poses.dtype == torch.float32 and r32.couplings.dtype == torch.float32
    torch.testing.assert_close(r32.poses.double(), r64.poses, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------ uniform

def test_uniform_routing_hand_computed():
    # B = 1, I = 2, J = 2, D = 2; poses = squash(Σ_i û_{j|i} / J)
    # j = 0: û = (1, 0), (1, 2) → s = (2, 2)/2 = (1, 1), ‖s‖² = 2 → v = 2/3 · (1, 1)/√2 = (√2/3, √2/3)
    # j = 1: û = (0, 3), (0, 1) → s = (0, 4)/2 = (0, 2), ‖s‖² = 4 → v = 4/5 · (0, 1) = (0, 0.8)
    votes = torch.tensor([[[[1.0, 0.0], [0.0, 3.0]],
                           [[1.0, 2.0], [0.0, 1.0]]]], dtype=torch.float64)
    res = uniform_routing(votes)
    r = math.sqrt(2) / 3
    _close(res.poses, [[[r, r], [0.0, 0.8]]])
    _close(res.couplings, [[[0.5, 0.5], [0.5, 0.5]]])
    _close(res.logits, [[[0.0, 0.0], [0.0, 0.0]]])


def test_uniform_routing_is_first_iteration_of_dynamic():
    votes = _random_votes(B=2, I=5, J=4, D=3, seed=8)
    res = uniform_routing(votes)
    torch.testing.assert_close(res.couplings, torch.full((2, 5, 4), 0.25, dtype=torch.float64))
    poses, _, _, _ = ref_dynamic_routing(votes.numpy(), 1)  # b = 0 → c = 1/J
    _close(res.poses, poses)


# --------------------------------------------------------------------------- routing_step + agreement

def test_agreement_is_dot_product():
    votes = _random_votes(B=2, I=3, J=2, D=4, seed=9)
    poses = torch.randn(2, 2, 4, dtype=torch.float64)
    a = agreement(votes, poses)
    assert a.shape == (2, 3, 2)
    for b in range(2):
        for i in range(3):
            for j in range(2):
                expected = sum(float(votes[b, i, j, d]) * float(poses[b, j, d]) for d in range(4))
                assert a[b, i, j].item() == pytest.approx(expected, abs=1e-12)


def test_routing_step_and_agreement_reproduce_iterations():
    votes = _random_votes(B=2, I=4, J=3, D=2, seed=12)
    prior = torch.randn(2, 4, 3, dtype=torch.float64)
    _, _, _, ref_hist = ref_dynamic_routing(votes.numpy(), 3, prior.numpy())
    logits = prior
    for r in range(3):
        step = routing_step(votes, logits)
        v, c, b = ref_hist[r]
        _close(step.poses, v)
        _close(step.couplings, c)
        _close(step.logits, b)
        logits = logits + agreement(votes, step.poses)
    full = dynamic_routing(votes, 3, prior_logits=prior)
    torch.testing.assert_close(step.poses, full.poses)


def test_routing_step_accepts_unbatched_logits_and_activation():
    from capsule_lab.capsules import squash_exp

    votes = _random_votes(B=2, I=3, J=2, D=2, seed=13)
    logits = torch.randn(3, 2, dtype=torch.float64)
    step = routing_step(votes, logits, activation=squash_exp)
    c = torch.softmax(logits, dim=1)
    for b in range(2):
        for j in range(2):
            s = sum(c[i, j] * votes[b, i, j] for i in range(3))
            n = float(s.norm())
            torch.testing.assert_close(step.poses[b, j], (1 - math.exp(-n)) * s / n)


# --------------------------------------------------------------------------------------- gradients

def _torch_routing(votes, iterations, *, detach_votes=False, detach_couplings=False, prior=None):
    """Independent torch version of Algorithm 1 with the detaches done by hand."""
    B, I, J, D = votes.shape
    b = torch.zeros(B, I, J, dtype=votes.dtype) if prior is None else prior.expand(B, I, J)
    for r in range(iterations):
        last = r == iterations - 1
        u = votes if (last or not detach_votes) else votes.detach()
        e = torch.exp(b - b.max(dim=2, keepdim=True).values)
        c = e / e.sum(dim=2, keepdim=True)
        if detach_couplings:
            c = c.detach()
        s = (c.unsqueeze(-1) * u).sum(dim=1)  # (B, J, D)
        n2 = (s * s).sum(-1, keepdim=True)
        v = n2 / (1 + n2) * s / torch.sqrt(n2)
        if not last:
            b = b + (u * v.unsqueeze(1)).sum(-1)
    return v


def _grad(fn, votes, weight):
    x = votes.clone().requires_grad_(True)
    (fn(x) * weight).sum().backward()
    return x.grad


@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_default_gradient_matches_independent_autograd(iterations):
    votes = _random_votes(B=2, I=4, J=3, D=3, seed=20, scale=1.5)
    w = torch.randn(2, 3, 3, dtype=torch.float64)
    g_pkg = _grad(lambda x: dynamic_routing(x, iterations).poses, votes, w)
    g_ref = _grad(lambda x: _torch_routing(x, iterations), votes, w)
    torch.testing.assert_close(g_pkg, g_ref, rtol=1e-9, atol=1e-12)


def _constant_coupling_gradient(couplings, votes, w):
    """∂L/∂û_{j|i} = c_ij ∂L/∂s_j for L = Σ w·squash(s), s_j = Σ_i c_ij û_{j|i} with the couplings held fixed."""
    s = torch.einsum("bij,bijd->bjd", couplings, votes).requires_grad_(True)
    (squash(s) * w).sum().backward()
    return couplings.unsqueeze(-1) * s.grad.unsqueeze(1)


def test_detach_votes_same_forward_last_iteration_gradient():
    votes = _random_votes(B=2, I=4, J=3, D=3, seed=21, scale=1.5)
    w = torch.randn(2, 3, 3, dtype=torch.float64)
    full = dynamic_routing(votes, 3)
    det = dynamic_routing(votes, 3, detach_votes=True)
    torch.testing.assert_close(det.poses, full.poses, rtol=0, atol=0)
    torch.testing.assert_close(det.couplings, full.couplings, rtol=0, atol=0)
    torch.testing.assert_close(det.logits, full.logits, rtol=0, atol=0)
    g_det = _grad(lambda x: dynamic_routing(x, 3, detach_votes=True).poses, votes, w)
    g_ref = _grad(lambda x: _torch_routing(x, 3, detach_votes=True), votes, w)
    torch.testing.assert_close(g_det, g_ref, rtol=1e-9, atol=1e-12)
    # with all votes detached but the last, the logits are constants, so ∂L/∂û_{j|i} = c_ij ∂L/∂s_j: compute that too
    torch.testing.assert_close(g_det, _constant_coupling_gradient(full.couplings, votes, w), rtol=1e-9, atol=1e-12)
    g_full = _grad(lambda x: dynamic_routing(x, 3).poses, votes, w)
    assert not torch.allclose(g_det, g_full, rtol=1e-3, atol=1e-6)


def test_detach_votes_single_iteration_is_full_gradient():
    votes = _random_votes(seed=22)
    w = torch.randn(2, 3, 3, dtype=torch.float64)
    g1 = _grad(lambda x: dynamic_routing(x, 1, detach_votes=True).poses, votes, w)
    g2 = _grad(lambda x: dynamic_routing(x, 1).poses, votes, w)
    torch.testing.assert_close(g1, g2, rtol=0, atol=0)


def test_detach_couplings_gradient():
    votes = _random_votes(B=2, I=4, J=3, D=3, seed=23, scale=1.5)
    w = torch.randn(2, 3, 3, dtype=torch.float64)
    full = dynamic_routing(votes, 3)
    det = dynamic_routing(votes, 3, detach_couplings=True)
    torch.testing.assert_close(det.poses, full.poses, rtol=0, atol=0)
    torch.testing.assert_close(det.couplings, full.couplings, rtol=0, atol=0)
    g_det = _grad(lambda x: dynamic_routing(x, 3, detach_couplings=True).poses, votes, w)
    g_ref = _grad(lambda x: _torch_routing(x, 3, detach_couplings=True), votes, w)
    torch.testing.assert_close(g_det, g_ref, rtol=1e-9, atol=1e-12)
    # constant couplings: s_j = Σ_i c_ij û_{j|i} is linear in the votes, so ∂L/∂û_{j|i} = c_ij ∂L/∂s_j
    torch.testing.assert_close(g_det, _constant_coupling_gradient(full.couplings, votes, w), rtol=1e-9, atol=1e-12)
    g_full = _grad(lambda x: dynamic_routing(x, 3).poses, votes, w)
    assert not torch.allclose(g_det, g_full, rtol=1e-3, atol=1e-6)


def test_detach_couplings_blocks_prior_gradient():
    votes = _random_votes(seed=24).requires_grad_(True)
    prior = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    dynamic_routing(votes, 2, prior_logits=prior, detach_couplings=True).poses.sum().backward()
    assert votes.grad is not None
    assert prior.grad is None or torch.equal(prior.grad, torch.zeros_like(prior))
    prior2 = prior.detach().clone().requires_grad_(True)
    dynamic_routing(votes, 2, prior_logits=prior2).poses.sum().backward()
    assert prior2.grad is not None and prior2.grad.abs().sum() > 0


@pytest.mark.parametrize("iterations", [1, 3])
def test_gradcheck_default_routing(iterations):
    votes = _random_votes(B=1, I=3, J=2, D=2, seed=30).requires_grad_(True)
    prior = torch.randn(3, 2, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v, p: dynamic_routing(v, iterations, prior_logits=p).poses,
                                    (votes, prior), eps=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------- invariance

def test_permuting_input_capsules_leaves_poses_unchanged():
    votes = _random_votes(B=2, I=6, J=3, D=3, seed=40)
    prior = torch.randn(2, 6, 3, dtype=torch.float64)
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(1))
    a = dynamic_routing(votes, 3, prior_logits=prior)
    b = dynamic_routing(votes[:, perm], 3, prior_logits=prior[:, perm])
    torch.testing.assert_close(b.poses, a.poses, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(b.couplings, a.couplings[:, perm], rtol=1e-12, atol=1e-12)
    u = uniform_routing(votes[:, perm])
    torch.testing.assert_close(u.poses, uniform_routing(votes).poses, rtol=1e-12, atol=1e-12)


def test_permuting_output_capsules_permutes_poses():
    votes = _random_votes(B=2, I=4, J=5, D=2, seed=41)
    perm = torch.randperm(5, generator=torch.Generator().manual_seed(2))
    a = dynamic_routing(votes, 3)
    b = dynamic_routing(votes[:, :, perm], 3)
    torch.testing.assert_close(b.poses, a.poses[:, perm], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(b.couplings, a.couplings[:, :, perm], rtol=1e-12, atol=1e-12)


def test_batch_items_are_independent():
    votes = _random_votes(B=3, I=4, J=3, D=2, seed=42)
    whole = dynamic_routing(votes, 3)
    for b in range(3):
        one = dynamic_routing(votes[b:b + 1], 3)
        torch.testing.assert_close(one.poses[0], whole.poses[b], rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------- bad inputs

@pytest.mark.parametrize("router", [dynamic_routing, uniform_routing], ids=["dynamic", "uniform"])
def test_bad_votes(router):
    with pytest.raises(ValueError, match=r"\(B, I, J, D\).*\(2, 3, 4\)"):
        router(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"\(B, I, J, D\)"):
        router(torch.zeros(2, 3, 4, 5, 1))
    with pytest.raises(ValueError, match=r"\(B, I, J, D\)"):
        router(torch.zeros(2, 3, 4, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"\(B, I, J, D\)"):
        router(torch.zeros(2, 0, 4, 5))
    with pytest.raises(ValueError, match=r"\(B, I, J, D\)"):
        router(np.zeros((2, 3, 4, 5)))


def test_bad_iterations_and_prior():
    votes = torch.zeros(2, 3, 4, 5)
    for bad in (0, -1, 2.0, None):
        with pytest.raises(ValueError, match="iterations"):
            dynamic_routing(votes, iterations=bad)
    with pytest.raises(ValueError, match=r"\(B, I, J\) = \(2, 3, 4\) or \(I, J\)"):
        dynamic_routing(votes, prior_logits=torch.zeros(3, 5))
    with pytest.raises(ValueError, match=r"\(B, I, J\)"):
        dynamic_routing(votes, prior_logits=torch.zeros(1, 3, 4, 1))
    with pytest.raises(ValueError, match=r"\(B, I, J\)"):
        dynamic_routing(votes, prior_logits=torch.zeros(5, 3, 4))
    with pytest.raises(ValueError, match=r"\(B, I, J\)"):
        routing_step(votes, torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"\(B, J, D\) = \(2, 4, 5\)"):
        agreement(votes, torch.zeros(2, 5, 4))


def test_iterations_must_be_a_true_integer():
    with pytest.raises(ValueError, match="iterations"):
        dynamic_routing(torch.randn(1, 2, 2, 2), iterations=True)
