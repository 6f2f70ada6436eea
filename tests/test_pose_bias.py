"""A learned bias added to every weighted sum before the squash (CapsuleLayer(pose_bias=...),
CapsNetConfig.pose_bias): the REM paper's MNIST model (chapter 05). Checked against Algorithm 1 with the bias,
written here as a plain loop, and with autograd for the bias's gradient."""

from __future__ import annotations

import pytest
import torch

from capsule_lab import squash
from capsule_lab.layers import CapsuleLayer, capsule_votes, make_router
from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.routing import UniformRouter, VoteFreeRouter


def routing_with_bias(votes, bias, iterations):
    """Algorithm 1 with s_j + b_j before the squash, by hand."""
    b = torch.zeros(votes.shape[:3], dtype=votes.dtype)
    for r in range(iterations):
        c = torch.softmax(b, dim=2)
        v = squash((c.unsqueeze(-1) * votes).sum(dim=1) + bias)
        if r < iterations - 1:
            b = b + (votes * v.unsqueeze(1)).sum(dim=-1)
    return v, c


def _layer(**kwargs):
    torch.manual_seed(0)
    return CapsuleLayer(6, 4, 3, 5, init_std=0.5, **kwargs)


def test_the_bias_enters_every_iteration_before_the_squash():
    layer = _layer(pose_bias=0.1)
    with torch.no_grad():
        layer.bias.copy_(torch.randn(3, 5) * 0.3)
    u = torch.randn(2, 6, 4, dtype=torch.float64)
    layer.double()
    result = layer(u)
    v, c = routing_with_bias(capsule_votes(u, layer.weight), layer.bias, 3)
    torch.testing.assert_close(result.poses, v)
    torch.testing.assert_close(result.couplings, c)


def test_a_zero_bias_changes_nothing_and_the_bias_learns():
    plain, biased = _layer(), _layer(pose_bias=0.0)
    u = torch.randn(2, 6, 4)
    torch.testing.assert_close(biased(u).poses, plain(u).poses)
    biased(u).poses.norm(dim=-1).sum().backward()
    assert biased.bias.grad is not None and biased.bias.grad.abs().sum() > 0
    bias = biased.bias.detach().clone().requires_grad_(True)
    v, _ = routing_with_bias(capsule_votes(u, biased.weight.detach()), bias, 3)
    (expected,) = torch.autograd.grad(v.norm(dim=-1).sum(), bias)
    torch.testing.assert_close(biased.bias.grad, expected)


def test_uniform_routing_with_a_bias():
    layer = _layer(router=UniformRouter(), pose_bias=0.2)
    u = torch.randn(2, 6, 4)
    votes = capsule_votes(u, layer.weight)
    torch.testing.assert_close(layer(u).poses, squash(votes.sum(dim=1) / 3 + 0.2))      # c_ij = 1/J, J = 3


def test_the_capsnet_option_and_its_default():
    assert CapsNetConfig().pose_bias is None
    plain = CapsNet(CapsNetConfig.slim(decoder=False))
    assert plain.digits.bias is None and isinstance(plain.digits.router, VoteFreeRouter)
    model = CapsNet(CapsNetConfig.slim(decoder=False, pose_bias=0.1))
    assert torch.equal(model.digits.bias, torch.full((10, 16), 0.1))
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in plain.parameters()) + 160
    assert model(torch.rand(2, 1, 28, 28)).lengths.shape == (2, 10)


def test_a_bias_needs_a_router_on_the_votes():
    with pytest.raises(ValueError, match="pose_bias needs a router on the votes"):
        _layer(router=make_router("vote_free", 3), pose_bias=0.1)
    with pytest.raises(ValueError, match="pose_bias must be a number or None"):
        _layer(pose_bias="0.1")
