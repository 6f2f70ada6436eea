"""vote_free_routing (routing from (u, W) without forming the votes) against the readable dynamic_routing on
the materialised votes: values and gradients for every option, gradcheck in float64, and input checks."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from capsule_lab import squash, squash_exp
from capsule_lab.layers.votes import capsule_votes
from capsule_lab.routing import dynamic_routing, vote_free_routing


def both(u, W, prior, **options):
    ref = dynamic_routing(capsule_votes(u, W), prior_logits=prior, **options)
    new = vote_free_routing(u, W, prior_logits=prior, **options)
    return ref, new


def grads(result, inputs, cotangents):
    loss = sum((t * g).sum() for t, g in zip(result[:3], cotangents) if t.requires_grad)
    return torch.autograd.grad(loss, inputs, allow_unused=True)


@pytest.mark.parametrize(
    "iterations,detach_votes,detach_couplings,prior,activation",
    list(itertools.product([1, 2, 3, 5], [False, True], [False, True], [None, "IJ", "BIJ"], [squash, squash_exp])),
)
def test_values_and_gradients_equal_the_materialised_routing(iterations, detach_votes, detach_couplings, prior,
                                                             activation):
    g = torch.Generator().manual_seed(iterations)
    B, I, J, D, D_in = 3, 5, 4, 3, 2
    u = torch.randn(B, I, D_in, generator=g, dtype=torch.float64, requires_grad=True)
    W = torch.randn(I, J, D, D_in, generator=g, dtype=torch.float64, requires_grad=True)
    b0 = None
    if prior is not None:
        shape = (I, J) if prior == "IJ" else (B, I, J)
        b0 = torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)
    ref, new = both(u, W, b0, iterations=iterations, detach_votes=detach_votes,
                    detach_couplings=detach_couplings, activation=activation)
    for a, b in zip(ref[:3], new[:3]):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    inputs = (u, W) if b0 is None else (u, W, b0)
    cot = [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in ref[:3]]
    for a, b in zip(grads(ref, inputs, cot), grads(new, inputs, cot)):
        if a is None:
            assert b is None or b.abs().max() == 0
        else:
            torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("iterations", [1, 3])
def test_gradcheck(iterations):
    g = torch.Generator().manual_seed(0)
    u = torch.randn(2, 4, 2, generator=g, dtype=torch.float64, requires_grad=True)
    W = torch.randn(4, 3, 3, 2, generator=g, dtype=torch.float64, requires_grad=True)
    b0 = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)

    def f(u, W, b0):
        r = vote_free_routing(u, W, iterations, b0)
        return r.poses, r.couplings, r.logits

    assert torch.autograd.gradcheck(f, (u, W, b0))


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 4), I=st.integers(1, 12), J=st.integers(1, 6), D=st.integers(1, 5), D_in=st.integers(1, 5),
       iterations=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_float32_within_1e_5_relative(B, I, J, D, D_in, iterations, seed):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, I, D_in, generator=g, requires_grad=True)
    W = (torch.randn(I, J, D, D_in, generator=g) * 0.5).requires_grad_()
    ref, new = both(u, W, None, iterations=iterations)
    for a, b in zip(ref[:3], new[:3]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    ga = torch.autograd.grad(ref.poses.sum(), (u, W))
    gb = torch.autograd.grad(new.poses.sum(), (u, W))
    for a, b in zip(ga, gb):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_runs_under_cpu_autocast_close_to_fp32():
    """The GPU path (autocast) exercised on the CPU with bfloat16: same shapes, close values, fp32 grads."""
    g = torch.Generator().manual_seed(1)
    u = torch.randn(4, 6, 3, generator=g, requires_grad=True)
    W = (torch.randn(6, 5, 4, 3, generator=g) * 0.3).requires_grad_()
    exact = vote_free_routing(u, W, 3).poses
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = vote_free_routing(u, W, 3)
    low.poses.float().sum().backward()
    assert low.poses.shape == exact.shape
    torch.testing.assert_close(low.poses.float(), exact, rtol=0.05, atol=0.02)
    assert u.grad.dtype == torch.float32 and W.grad.dtype == torch.float32
    assert torch.isfinite(u.grad).all() and torch.isfinite(W.grad).all()


def test_bad_inputs_name_the_expected_shape():
    u, W = torch.randn(2, 4, 3), torch.randn(4, 5, 6, 3)
    with pytest.raises(ValueError, match=r"\(I, J, D, D_in\)"):
        vote_free_routing(u, W[0])
    with pytest.raises(ValueError, match=r"\(B, I, D_in\) = \(B, 4, 3\)"):
        vote_free_routing(torch.randn(2, 5, 3), W)
    with pytest.raises(ValueError, match="iterations"):
        vote_free_routing(u, W, 0)
    with pytest.raises(ValueError, match="prior_logits"):
        vote_free_routing(u, W, 2, torch.zeros(3, 5))
    with pytest.raises(ValueError, match="dtype"):
        vote_free_routing(u.double(), W)


def test_capsule_layer_uses_the_vote_free_form_by_default():
    from capsule_lab.layers.dense import CapsuleLayer
    from capsule_lab.routing import DynamicRouter, UniformRouter

    torch.manual_seed(0)
    fast = CapsuleLayer(6, 3, 4, 5, router=DynamicRouter(3, detach_votes=True), init_std=0.3).double()
    slow = CapsuleLayer(6, 3, 4, 5, router=DynamicRouter(3, detach_votes=True), vote_free=False).double()
    slow.load_state_dict(fast.state_dict())

    def no_votes(u):
        raise AssertionError("the vote-free layer must not form the votes")

    fast.votes = no_votes
    u = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    a, b = fast(u), slow(u)
    torch.testing.assert_close(a.poses, b.poses)
    torch.testing.assert_close(a.couplings, b.couplings)
    ga = torch.autograd.grad(a.poses.square().sum(), (u, fast.weight))
    gb = torch.autograd.grad(b.poses.square().sum(), (u, slow.weight))
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y)
    # a router that is not plain dynamic routing goes through the votes
    uniform = CapsuleLayer(6, 3, 4, 5, router=UniformRouter())
    uniform.votes = no_votes
    with pytest.raises(AssertionError, match="must not form"):
        uniform(u.float())
