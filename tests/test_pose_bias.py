"""A learned bias added to every weighted sum before the squash (``DynamicRouter(pose_bias=...)``,
``RouterSpec(pose_bias=...)``): the REM paper's MNIST model (chapter 05), a router's parameter. Checked against
Algorithm 1 with the bias, written here as a plain loop, and with autograd for the bias's gradient."""

from __future__ import annotations

import pytest
import torch

from capsule_lab import squash
from capsule_lab.layers.dense import CapsuleLayer
from capsule_lab.layers.votes import capsule_votes
from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.routing import DynamicRouter, RouterSpec, UniformRouter


def routing_with_bias(votes, bias, iterations):
    """Algorithm 1 with s_j + b_j before the squash, by hand."""
    b = torch.zeros(votes.shape[:3], dtype=votes.dtype)
    for r in range(iterations):
        c = torch.softmax(b, dim=2)
        v = squash((c.unsqueeze(-1) * votes).sum(dim=1) + bias)
        if r < iterations - 1:
            b = b + (votes * v.unsqueeze(1)).sum(dim=-1)
    return v, c


def _layer(router=None):
    torch.manual_seed(0)
    return CapsuleLayer(6, 4, 3, 5, init_std=0.5, router=router)


def test_the_bias_enters_every_iteration_before_the_squash():
    layer = _layer(DynamicRouter(3, pose_bias=torch.full((3, 5), 0.1)))
    with torch.no_grad():
        layer.router.pose_bias.copy_(torch.randn(3, 5) * 0.3)
    u = torch.randn(2, 6, 4, dtype=torch.float64)
    layer.double()
    result = layer(u)
    v, c = routing_with_bias(capsule_votes(u, layer.weight), layer.router.pose_bias, 3)
    torch.testing.assert_close(result.poses, v)
    torch.testing.assert_close(result.couplings, c)


def test_a_zero_bias_changes_nothing_and_the_bias_learns():
    plain, biased = _layer(), _layer(DynamicRouter(3, pose_bias=torch.zeros(3, 5)))
    u = torch.randn(2, 6, 4)
    torch.testing.assert_close(biased(u).poses, plain(u).poses)
    biased(u).poses.norm(dim=-1).sum().backward()
    grad = biased.router.pose_bias.grad
    assert grad is not None and grad.abs().sum() > 0
    bias = biased.router.pose_bias.detach().clone().requires_grad_(True)
    v, _ = routing_with_bias(capsule_votes(u, biased.weight.detach()), bias, 3)
    (expected,) = torch.autograd.grad(v.norm(dim=-1).sum(), bias)
    torch.testing.assert_close(grad, expected)


def test_a_copied_router_uses_its_own_bias():
    import copy

    layer = _layer(DynamicRouter(3, pose_bias=torch.zeros(3, 5)))
    twin = copy.deepcopy(layer)
    with torch.no_grad():
        twin.router.pose_bias.fill_(0.5)
    u = torch.randn(2, 6, 4)
    assert not torch.allclose(twin(u).poses, layer(u).poses)


def test_uniform_routing_with_a_bias():
    layer = _layer(UniformRouter(pose_bias=torch.full((3, 5), 0.2)))
    u = torch.randn(2, 6, 4)
    votes = capsule_votes(u, layer.weight)
    torch.testing.assert_close(layer(u).poses, squash(votes.sum(dim=1) / 3 + 0.2))      # c_ij = 1/J, J = 3


def test_the_capsnet_option_and_its_default():
    assert CapsNetConfig().router.pose_bias is None
    plain = CapsNet(CapsNetConfig.slim(decoder=False))
    assert plain.router.pose_bias is None and plain.router.route_weights is not None
    model = CapsNet(CapsNetConfig.slim(decoder=False, router=RouterSpec(pose_bias=0.1)))
    assert torch.equal(model.router.pose_bias, torch.full((10, 16), 0.1))
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in plain.parameters()) + 160
    assert [p.numel() for p in model.routing_parameters()] == [160]
    assert model(torch.rand(2, 1, 28, 28)).lengths.shape == (2, 10)


def test_a_bias_needs_a_matrix_and_routes_on_the_votes():
    with pytest.raises(ValueError, match="pose_bias"):
        DynamicRouter(3, pose_bias=0.1)
    with pytest.raises(ValueError, match="pose_bias must be a number or None"):
        RouterSpec(pose_bias="0.1")
    u, W = torch.randn(2, 6, 4), torch.randn(6, 3, 5, 4)
    assert DynamicRouter(3, pose_bias=torch.zeros(3, 5)).route_weights(u, W) is None   # no vote-free gradient for b
