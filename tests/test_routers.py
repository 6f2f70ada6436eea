"""Routers (``capsule_lab.routing.routers``, chapter 02): one call signature, chosen explicitly.

A trivial router written here (every input capsule sends its whole vote to output 0) is plugged into
:class:`CapsuleLayer` and :class:`CapsNet` and their outputs compared with the same computation written out
by hand. Each router of the package is compared with the independent loop implementations of
``tests/test_routing.py`` (Algorithm 1 with loops over b, i, j; torch with the detaches done by hand), and
the routing explorer's scaled update with a loop written here.
"""

from __future__ import annotations

import pytest
import torch
from test_routing import _random_votes, _torch_routing, ref_dynamic_routing

from capsule_lab.capsules import squash, squash_exp
from capsule_lab.layers import CapsuleLayer, capsule_votes, make_router
from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.routing import (DetachedRouter, DynamicRouter, Router, RoutingResult, ScaledRouter,
                                 UniformRouter, VoteFreeRouter, dynamic_routing, uniform_routing)


class AllToFirst(Router):
    """Every input capsule sends its whole vote to output 0: c_i0 = 1, v_0 = squash(Σ_i û_{0|i}), v_j = 0 else."""

    def __init__(self):
        self.calls = 0

    def __call__(self, votes):
        self.calls += 1
        B, I, J, D = votes.shape
        couplings = torch.zeros(B, I, J, dtype=votes.dtype)
        couplings[:, :, 0] = 1.0
        poses = squash(torch.einsum("bij,bijd->bjd", couplings, votes))
        return RoutingResult(poses, couplings, torch.zeros_like(couplings))


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
    assert model.digits.router is router
    x = torch.rand(2, 1, 20, 20, dtype=torch.float64)
    out = model(x)
    u = model.primary(torch.relu(model.conv(x)))
    expected = _all_to_first_by_hand(u.detach(), model.digits.weight.detach())
    torch.testing.assert_close(out.poses, expected)
    torch.testing.assert_close(out.lengths, expected.norm(dim=-1))
    assert router.calls == 1
    assert torch.all(out.lengths[:, 1:] == 0)


def test_a_plain_function_is_still_a_router():
    seen = []

    def one_iteration_average(votes):
        seen.append(votes.shape)
        return uniform_routing(votes)

    layer = CapsuleLayer(4, 2, 3, 2, router=one_iteration_average).double()
    u = torch.randn(2, 4, 2, dtype=torch.float64)
    s = torch.einsum("ijdk,bik->bjd", layer.weight, u) / 3
    torch.testing.assert_close(layer(u).poses, squash(s))
    assert seen == [(2, 4, 3, 2)]


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
    (make_router("detached", 2), {"detach_couplings": True}),
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


def test_vote_free_router_equals_dynamic_routing_on_the_votes():
    g = torch.Generator().manual_seed(4)
    u = torch.randn(2, 6, 3, dtype=torch.float64, generator=g, requires_grad=True)
    W = torch.randn(6, 4, 5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    for options in ({}, {"detach_votes": True}, {"detach_couplings": True}):
        fast = VoteFreeRouter(3, **options)(u, W)
        slow = DynamicRouter(3, **options)(capsule_votes(u, W))
        torch.testing.assert_close(fast.poses, slow.poses)
        torch.testing.assert_close(fast.couplings, slow.couplings)
        ga = torch.autograd.grad(fast.poses.square().sum(), (u, W))
        gb = torch.autograd.grad(slow.poses.square().sum(), (u, W))
        for x, y in zip(ga, gb):
            torch.testing.assert_close(x, y)


# --------------------------------------------------------------------------- the explicit choice

def test_capsule_layer_calls_a_vote_free_router_with_u_and_weight():
    layer = CapsuleLayer(6, 3, 4, 5, router=VoteFreeRouter(2), init_std=0.3).double()

    def no_votes(u):
        raise AssertionError("a vote-free router must not see the votes")

    layer.votes = no_votes
    u = torch.randn(2, 6, 3, dtype=torch.float64)
    torch.testing.assert_close(layer(u).poses, dynamic_routing(capsule_votes(u, layer.weight), 2).poses)


def test_capsnet_config_chooses_the_vote_free_router():
    model = CapsNet(CapsNetConfig.slim(detach_votes=True))
    router = model.digits.router
    assert isinstance(router, VoteFreeRouter) and router.takes_weights
    assert (router.iterations, router.options["detach_votes"], router.options["detach_couplings"]) == (3, True, False)
    assert isinstance(CapsNet(CapsNetConfig.slim(routing="uniform")).digits.router, UniformRouter)


def test_vote_free_form_is_declared_by_the_router():
    assert isinstance(DynamicRouter(2, detach_couplings=True).vote_free_form(), VoteFreeRouter)
    assert DynamicRouter(2, history=True).vote_free_form() is None
    assert ScaledRouter(2, 2.0).vote_free_form() is None
    assert UniformRouter().vote_free_form() is None
    assert not DynamicRouter.takes_weights and VoteFreeRouter.takes_weights


def test_make_router_returns_router_objects():
    assert isinstance(make_router("dynamic", 2), DynamicRouter)
    assert isinstance(make_router("uniform"), UniformRouter)
    assert isinstance(make_router("vote_free", 2), VoteFreeRouter)
    assert make_router("detached", 2).options == {"detach_couplings": True}


def test_router_construction_checks():
    with pytest.raises(ValueError, match="iterations"):
        DynamicRouter(0)
    with pytest.raises(ValueError, match="unknown option"):
        DynamicRouter(3, detach=True)
    with pytest.raises(ValueError, match="unknown option"):
        VoteFreeRouter(3, history=True)
    with pytest.raises(ValueError, match=r"\(B, I, J, D\)"):
        DynamicRouter(3)(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="agreement_scale"):
        ScaledRouter(3, float("nan"))(torch.zeros(1, 2, 2, 2))


# ------------------------------------------------------------------------------------------ grading

@pytest.mark.parametrize("task_id", ["02.routing_step", "02.dynamic_routing", "03.detached_routing"])
def test_every_router_is_refused_while_a_routing_task_is_graded(task_id):
    from capsule_lab.grading import TASKS
    from capsule_lab.grading.lock import AnswerRefused, refused

    votes = _random_votes(B=1, I=3, J=2, D=4)
    u, W = torch.randn(1, 3, 2, dtype=torch.float64), torch.randn(3, 2, 4, 2, dtype=torch.float64)
    calls = [lambda: DynamicRouter(3)(votes), lambda: DetachedRouter(3)(votes), lambda: ScaledRouter(3, 2.0)(votes),
             lambda: make_router("dynamic")(votes), lambda: VoteFreeRouter(3)(u, W),
             lambda: CapsuleLayer(3, 2, 2, 4).double()(u), lambda: CapsuleLayer(3, 2, 2, 4, vote_free=False).double()(u)]
    with refused(TASKS[task_id].refused):
        for call in calls:
            with pytest.raises(AnswerRefused):
                call()
    for call in calls:  # and afterwards they work again
        assert call().poses.shape == (1, 2, 4)


def test_a_router_must_define_its_call():
    class NoCall(Router):
        pass

    with pytest.raises(TypeError, match="abstract"):
        NoCall()
    assert AllToFirst().vote_free_form() is None          # the base class's default: no vote-free form
