"""Routers (``capsule_lab.routing.routers``, chapter 02): ``nn.Module``s with one call signature,
``router(votes, activations=None) → RoutingResult``, chosen explicitly.

A trivial router written here (every input capsule sends its whole vote to output 0) is plugged into
:class:`CapsuleLayer` and :class:`CapsNet` and their outputs compared with the same computation written out
by hand. Each router of the package is compared with the independent loop implementations of
``tests/test_routing.py`` (Algorithm 1 with loops over b, i, j; torch with the detaches done by hand), and
the routing explorer's scaled update with a loop written here. The vote-free form is the layer's choice.
"""

from __future__ import annotations

import pytest
import torch
from test_routing import _random_votes, _torch_routing, ref_dynamic_routing

from capsule_lab.capsules import squash, squash_exp
from capsule_lab.layers.dense import CapsuleLayer
from capsule_lab.layers.votes import capsule_votes
from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.routing import (DetachedRouter, DynamicRouter, Router, RouterSpec, RoutingResult, ScaledRouter,
                                 UniformRouter, dynamic_routing, uniform_routing, vote_free_routing)


class AllToFirst(Router):
    """Every input capsule sends its whole vote to output 0: c_i0 = 1, v_0 = squash(Σ_i û_{0|i}), v_j = 0 else."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, votes, activations=None, *, history=False):
        self.calls += 1
        B, I, J, D = votes.shape
        couplings = torch.zeros(B, I, J, dtype=votes.dtype)
        couplings[:, :, 0] = 1.0
        poses = squash(torch.einsum("bij,bijd->bjd", couplings, votes))
        return RoutingResult(poses, poses.norm(dim=-1), couplings, torch.zeros_like(couplings))


def _all_to_first_by_hand(u, weight):
    """The same, from u (B, I, D_in) and W (I, J, D, D_in), with explicit loops over the samples and capsules."""
    B, I, _ = u.shape
    _, J, D, _ = weight.shape
    poses = torch.zeros(B, J, D, dtype=u.dtype)
    for b in range(B):
        s = torch.zeros(D, dtype=u.dtype)
        for i in range(I):
            s = s + weight[i, 0] @ u[b, i]
        n2 = (s * s).sum()
        poses[b, 0] = n2 / (1 + n2) * s / n2.sqrt()
    return poses


def test_trivial_router_in_capsule_layer():
    torch.manual_seed(0)
    router = AllToFirst()
    layer = CapsuleLayer(5, 3, 4, 2, router=router, init_std=0.5).double()
    u = torch.randn(2, 5, 3, dtype=torch.float64)
    res = layer(u)
    assert router.calls == 1
    torch.testing.assert_close(res.poses, _all_to_first_by_hand(u, layer.weight.detach()))
    assert torch.all(res.couplings[:, :, 0] == 1) and torch.all(res.couplings[:, :, 1:] == 0)


def test_trivial_router_in_capsnet():
    torch.manual_seed(0)
    config = CapsNetConfig.slim(image_size=20, conv_channels=8, primary_types=2, classes=3, class_dim=4,
                                decoder=False)
    router = AllToFirst()
    model = CapsNet(config, router=router).double().eval()
    assert model.digits.router is router and model.router is router and model.routers() == (router,)
    assert model.config.router is None                 # the config says the router was given as a module
    x = torch.rand(2, 1, 20, 20, dtype=torch.float64)
    out = model(x)
    u = model.primary(torch.relu(model.conv(x)))
    expected = _all_to_first_by_hand(u.detach(), model.digits.weight.detach())
    torch.testing.assert_close(out.poses, expected)
    torch.testing.assert_close(out.lengths, expected.norm(dim=-1))
    assert router.calls == 1
    assert torch.all(out.lengths[:, 1:] == 0)


def test_a_router_is_a_module_and_a_plain_function_is_not():
    def one_iteration_average(votes):
        return uniform_routing(votes)

    with pytest.raises(ValueError, match="capsule_lab.routing.Router"):
        CapsuleLayer(4, 2, 3, 2, router=one_iteration_average)

    class Average(Router):
        def forward(self, votes, activations=None, *, history=False):
            return uniform_routing(votes)

    layer = CapsuleLayer(4, 2, 3, 2, router=Average()).double()
    u = torch.randn(2, 4, 2, dtype=torch.float64)
    s = torch.einsum("ijdk,bik->bjd", layer.weight, u) / 3
    torch.testing.assert_close(layer(u).poses, squash(s))
    assert isinstance(layer.router, torch.nn.Module) and "router" in dict(layer.named_children())


# ------------------------------------------------------------------- routers against independent loops

@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_dynamic_router_equals_the_loop_reference(iterations):
    votes = _random_votes(B=2, I=5, J=3, D=4, seed=10 + iterations, scale=2.0)
    res = DynamicRouter(iterations)(votes)
    poses, couplings, logits, _ = ref_dynamic_routing(votes.numpy(), iterations)
    torch.testing.assert_close(res.poses, torch.from_numpy(poses), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(res.couplings, torch.from_numpy(couplings), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(res.logits, torch.from_numpy(logits), rtol=1e-10, atol=1e-10)


def test_dynamic_router_with_priors_equals_the_loop_reference():
    votes = _random_votes(B=2, I=4, J=3, D=3, seed=3)
    prior = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    poses, *_ = ref_dynamic_routing(votes.numpy(), 3, prior.numpy())
    torch.testing.assert_close(DynamicRouter(3, prior_logits=prior)(votes).poses, torch.from_numpy(poses))


@pytest.mark.parametrize("router, options", [
    (DynamicRouter(3), {}),
    (DynamicRouter(3, detach_votes=True), {"detach_votes": True}),
    (DetachedRouter(3), {"detach_couplings": True}),
    (DetachedRouter(2), {"detach_couplings": True}),
])
def test_router_gradients_equal_the_hand_detached_loop(router, options):
    votes = _random_votes(B=2, I=4, J=3, D=3, seed=5).requires_grad_(True)
    weight = torch.randn(2, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    iterations = router.iterations
    (g_router,) = torch.autograd.grad((router(votes).poses * weight).sum(), votes)
    ref = _torch_routing(votes, iterations, **options)
    (g_ref,) = torch.autograd.grad((ref * weight).sum(), votes)
    torch.testing.assert_close(router(votes).poses, ref)
    torch.testing.assert_close(g_router, g_ref)


def test_uniform_router_by_hand():
    votes = _random_votes(B=2, I=4, J=3, D=2, seed=7)
    res = UniformRouter()(votes)
    torch.testing.assert_close(res.poses, squash(votes.sum(dim=1) / 3))
    torch.testing.assert_close(res.couplings, torch.full((2, 4, 3), 1 / 3, dtype=torch.float64))
    torch.testing.assert_close(UniformRouter(squash_exp)(votes).poses, squash_exp(votes.sum(dim=1) / 3))


@pytest.mark.parametrize("scale", [0.0, 0.5, 1.0, 3.0])
def test_scaled_router_equals_a_loop_with_a_scaled_update(scale):
    votes = _random_votes(B=1, I=5, J=3, D=2, seed=9)
    b = torch.zeros(1, 5, 3, dtype=torch.float64)
    for r in range(3):
        c = torch.softmax(b, dim=2)
        v = squash((c.unsqueeze(-1) * votes).sum(dim=1))
        if r < 2:
            b = b + scale * (votes * v.unsqueeze(1)).sum(-1)
    res = ScaledRouter(3, scale)(votes)
    torch.testing.assert_close(res.poses, v)
    torch.testing.assert_close(res.couplings, c)
    if scale == 1.0:  # Algorithm 1 exactly
        assert torch.equal(res.poses, dynamic_routing(votes, 3).poses)


def test_the_vote_free_form_equals_dynamic_routing_on_the_votes():
    g = torch.Generator().manual_seed(4)
    u = torch.randn(2, 6, 3, dtype=torch.float64, generator=g, requires_grad=True)
    W = torch.randn(6, 4, 5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    for options in ({}, {"detach_votes": True}, {"detach_couplings": True}):
        fast = DynamicRouter(3, **options).route_weights(u, W)
        slow = DynamicRouter(3, **options)(capsule_votes(u, W))
        torch.testing.assert_close(fast.poses, slow.poses)
        torch.testing.assert_close(fast.couplings, slow.couplings)
        ga = torch.autograd.grad(fast.poses.square().sum(), (u, W))
        gb = torch.autograd.grad(slow.poses.square().sum(), (u, W))
        for x, y in zip(ga, gb):
            torch.testing.assert_close(x, y)


# --------------------------------------------------------------------------- the explicit choice

def test_a_vote_free_layer_never_forms_the_votes():
    layer = CapsuleLayer(6, 3, 4, 5, router=DynamicRouter(2), init_std=0.3).double()

    def no_votes(u):
        raise AssertionError("the vote-free form must not form the votes")

    layer.votes = no_votes
    u = torch.randn(2, 6, 3, dtype=torch.float64)
    torch.testing.assert_close(layer(u).poses, dynamic_routing(capsule_votes(u, layer.weight), 2).poses)


def test_the_vote_free_form_is_the_routers_and_the_layers_choice():
    u = torch.randn(2, 6, 3, dtype=torch.float64)
    W = torch.randn(6, 4, 5, 3, dtype=torch.float64)
    assert DynamicRouter(2, detach_couplings=True).route_weights(u, W) is not None
    assert ScaledRouter(2, 2.0).route_weights(u, W) is None                   # a scaled update has none
    assert DynamicRouter(2, pose_bias=torch.zeros(4, 5)).route_weights(u, W) is None
    assert UniformRouter().route_weights(u, W) is None
    assert AllToFirst().route_weights(u, W) is None                            # the base class's default
    calls = []
    router = DynamicRouter(2)
    router.route_weights = lambda *a: calls.append(a) or vote_free_routing(*a, 2)
    CapsuleLayer(6, 3, 4, 5, router=router, vote_free=False).double()(u)       # told not to: the votes
    assert calls == []
    CapsuleLayer(6, 3, 4, 5, router=router, votes="normalized").double()(u)    # normalised votes: no fused form
    assert calls == []
    CapsuleLayer(6, 3, 4, 5, router=router).double()(u)
    assert len(calls) == 1


def test_capsnet_builds_its_router_from_the_config_spec():
    model = CapsNet(CapsNetConfig.slim(router=RouterSpec(detach_votes=True)))
    router = model.router
    assert isinstance(router, DynamicRouter)
    assert (router.iterations, router.detach_votes, router.detach_couplings) == (3, True, False)
    assert isinstance(CapsNet(CapsNetConfig.slim(router=RouterSpec("uniform"))).router, UniformRouter)
    assert model.config.router == RouterSpec(detach_votes=True)


def test_router_options_are_named():
    assert DetachedRouter(2).options == {"detach_couplings": True}
    assert DynamicRouter(2).options == {}
    assert ScaledRouter(2, 3.0).options == {"agreement_scale": 3.0}
    assert "iterations=2, detach_couplings=True" in repr(DetachedRouter(2))


def test_router_construction_checks():
    with pytest.raises(ValueError, match="iterations"):
        DynamicRouter(0)
    with pytest.raises(TypeError):
        DynamicRouter(3, detach=True)
    with pytest.raises(ValueError, match="detach_votes"):
        DynamicRouter(3, detach_votes=1)
    with pytest.raises(ValueError, match=r"\(B, I, J, D\)"):
        DynamicRouter(3)(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="agreement_scale"):
        ScaledRouter(3, float("nan"))
    with pytest.raises(ValueError, match="prior_logits"):
        DynamicRouter(3, prior_logits=torch.zeros(3))
    with pytest.raises(ValueError, match="pose_bias"):
        DynamicRouter(3, pose_bias=torch.zeros(3))


# ------------------------------------------------------------------------------------------ grading

@pytest.mark.parametrize("task_id", ["02.routing_step", "02.dynamic_routing", "03.detached_routing"])
def test_every_router_is_refused_while_a_routing_task_is_graded(task_id):
    from capsule_lab.grading import TASKS
    from capsule_lab.grading.engine.refusal import AnswerRefused, refused

    votes = _random_votes(B=1, I=3, J=2, D=4)
    u, W = torch.randn(1, 3, 2, dtype=torch.float64), torch.randn(3, 2, 4, 2, dtype=torch.float64)
    calls = [lambda: DynamicRouter(3)(votes), lambda: DetachedRouter(3)(votes), lambda: ScaledRouter(3, 2.0)(votes),
             lambda: DynamicRouter(3).route_weights(u, W),
             lambda: CapsuleLayer(3, 2, 2, 4).double()(u), lambda: CapsuleLayer(3, 2, 2, 4, vote_free=False).double()(u)]
    with refused(TASKS[task_id].refused):
        for call in calls:
            with pytest.raises(AnswerRefused):
                call()
    for call in calls:  # and afterwards they work again
        assert call().poses.shape == (1, 2, 4)


def test_a_router_must_define_forward():
    class NoForward(Router):
        pass

    with pytest.raises(TypeError, match="abstract.*forward"):
        NoForward()
