"""The generic procedure and the learned routers (``capsule_lab.routing.generic``, ``.similarity``,
``.connectionist``; chapter 07): the generic procedure against dynamic_routing, the closed form against numerical
minimisation of the objective, the kernel and the activation by hand, the LSTM router against a loop over the
pairs, couplings normalised over the named axis, gradchecks through both routers, CapsNet and DeepCapsNet with each
router trained one step, and bad input."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from torch.func import functional_call

from capsule_lab import routing as lr
from capsule_lab.capsules import capsule_lengths, margin_loss
from capsule_lab.layers.dense import CapsuleLayer
from capsule_lab.layers.votes import normalized_votes
from capsule_lab.models import CapsNet, CapsNetConfig, DeepCapsNet, DeepCapsNetConfig, capsnet_loss
from capsule_lab.routing import (ConnectionistRouter, SimilarityRouter, closed_form_couplings, closed_form_logits,
                                 dynamic_routing, dynamic_routing_generic, gaussian_mixture_kernel, generic_routing,
                                 kernel_matrix, similarity_activation, similarity_objective, similarity_routing,
                                 weighted_mean_pose)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_votes(B=2, I=5, J=3, D=4, seed=0, scale=0.5):
    return torch.randn(B, I, J, D, generator=gen(seed), dtype=torch.float64) * scale


def random_activations(B=2, I=5, seed=1):
    return torch.rand(B, I, generator=gen(seed), dtype=torch.float64) * 0.9 + 0.05


# ------------------------------------------------------------------------------------------------- votes

def test_normalized_votes_against_a_loop_and_scale_invariance():
    u = torch.randn(2, 3, 4, generator=gen(0), dtype=torch.float64)
    w = torch.randn(3, 2, 5, 4, generator=gen(1), dtype=torch.float64)
    v = normalized_votes(u, w)
    assert v.shape == (2, 3, 2, 5)
    for b in range(2):
        for i in range(3):
            for j in range(2):
                expected = w[i, j] @ u[b, i] / (math.sqrt(float((w[i, j] ** 2).sum())) + 1e-6)
                assert torch.allclose(v[b, i, j], expected, atol=1e-14)
    scaled = w * torch.linspace(0.1, 10.0, 6, dtype=torch.float64).view(3, 2, 1, 1)
    assert torch.allclose(normalized_votes(u, scaled), v, atol=1e-6)
    assert (v.norm(dim=-1) <= u.norm(dim=-1)[:, :, None] + 1e-12).all()


# ----------------------------------------------------------------- the generic procedure, dynamic routing

@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 5, 3, 4), (3, 7, 10, 16), (1, 12, 2, 8)])
@pytest.mark.parametrize("r", [1, 2, 3, 5])
def test_dynamic_routing_in_the_framework_equals_dynamic_routing(shape, r):
    votes = random_votes(*shape, seed=r) * 2
    expected = dynamic_routing(votes, r)
    got = dynamic_routing_generic(votes, r)
    assert torch.allclose(got.poses, expected.poses, atol=1e-12, rtol=0)
    assert torch.allclose(got.couplings, expected.couplings, atol=1e-12, rtol=0)
    assert torch.allclose(got.logits, expected.logits, atol=1e-12, rtol=0)
    assert torch.allclose(got.activations, expected.poses.norm(dim=-1), atol=1e-9)    # smoothed norm
    # written out: T = r - 1 compatibility updates, normalised over the outputs
    direct = generic_routing(votes, None, lr.dynamic_compatibility, lr.length_activation, r - 1,
                             normalize_over="outputs", pose_fn=lr.squashed_sum_pose)
    assert torch.equal(direct.poses, got.poses)


def test_the_inputs_convention_gives_another_routing():
    votes = random_votes(seed=3)
    faria = generic_routing(votes, None, lr.dynamic_compatibility, lr.length_activation, 2,
                            normalize_over="inputs", pose_fn=lr.squashed_sum_pose)
    sabour = dynamic_routing_generic(votes, 3)
    assert torch.allclose(faria.couplings.sum(dim=1), torch.ones(2, 3, dtype=torch.float64))
    assert not torch.allclose(faria.poses, sabour.poses)


def test_history_has_one_step_per_pose_and_ends_at_the_result():
    votes, a = random_votes(seed=4), random_activations()
    res = similarity_routing(votes, a, 0.2, 0.1, torch.tensor([0.3, 1.0], dtype=torch.float64),
                             torch.zeros(2, dtype=torch.float64), torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64),
                             iterations=3, history=True)
    assert len(res.history) == 4
    assert torch.equal(res.history[-1].poses, res.poses) and torch.equal(res.history[-1].couplings, res.couplings)
    first = res.history[0]
    assert torch.allclose(first.couplings, torch.full_like(first.couplings, 1 / 5))       # c⁰ uniform over i
    assert torch.allclose(first.poses, votes.mean(dim=1))                                 # μ⁰ = mean of votes
    for before, after in zip(res.history, res.history[1:]):                               # eq. 12 each step
        k = kernel_matrix(votes, before.poses, torch.tensor([0.3, 1.0], dtype=torch.float64),
                          torch.zeros(2, dtype=torch.float64))
        assert torch.allclose(after.couplings, closed_form_couplings(k, a, 0.2, 0.1), atol=1e-13)
        assert torch.allclose(after.poses, weighted_mean_pose(after.couplings, votes), atol=1e-13)


def test_iterations_zero_is_the_uniform_start_and_state_is_handed_through():
    votes = random_votes(seed=5)
    seen = []

    def compatibility(state, logits, couplings, v, poses, a):
        seen.append(state)
        return logits + 1.0, state + 1

    def activation(state, couplings, v, poses, a):
        seen.append(("activation", state))
        return poses.norm(dim=-1)

    res = generic_routing(votes, None, compatibility, activation, 3, state=10)
    assert seen == [10, 11, 12, ("activation", 13)] and res.state == 13
    res0 = generic_routing(votes, None, compatibility, activation, 0)
    assert torch.allclose(res0.couplings, torch.full((2, 5, 3), 0.2, dtype=torch.float64))


# ------------------------------------------------------------------------------------ similarity routing

def test_kernel_mixture_by_hand():
    x = torch.tensor([0.0, 0.0], dtype=torch.float64)
    y = torch.tensor([1.0, 1.0], dtype=torch.float64)
    ell = torch.tensor([0.5, 2.0], dtype=torch.float64)
    w = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64)            # softmax → (1/4, 3/4)
    expected = 0.25 * math.exp(-2.0 / (2 * 0.25)) + 0.75 * math.exp(-2.0 / (2 * 4.0))
    assert gaussian_mixture_kernel(x, y, ell, w).item() == pytest.approx(expected, abs=1e-15)
    assert gaussian_mixture_kernel(x, x, ell, w).item() == pytest.approx(1.0)
    # broadcasting: two points against one
    pts = torch.stack([x, y])
    assert gaussian_mixture_kernel(pts, x, ell, w).tolist() == pytest.approx([1.0, expected])


def test_similarity_activation_by_hand():
    c = torch.tensor([[[0.25], [0.75]]], dtype=torch.float64)
    k = torch.tensor([[[0.5], [0.9]]], dtype=torch.float64)
    a = torch.tensor([[0.2, 0.8]], dtype=torch.float64)
    theta = torch.tensor([2.0, -1.0, -0.5], dtype=torch.float64)                # |θ3| = 0.5
    z = 2.0 * (0.25 * 0.5 + 0.75 * 0.9) + 0.5 * (0.25 * math.log(0.2) + 0.75 * math.log(0.8)) - 1.0
    assert similarity_activation(c, k, a, theta).item() == pytest.approx(1 / (1 + math.exp(-z)), abs=1e-15)


def test_closed_form_logits_by_hand():
    k = torch.tensor([[[0.5], [0.9]]], dtype=torch.float64)
    a = torch.tensor([[0.2, 0.8]], dtype=torch.float64)
    r = closed_form_logits(k, a, 0.3, 0.1)
    assert r[0, :, 0].tolist() == pytest.approx([0.25 * math.log(0.2) + 0.5 / 0.4, 0.25 * math.log(0.8) + 0.9 / 0.4])


def minimise_numerically(k, a, lam1, lam2, steps=200):
    """Minimise Σ_{b,j} F(c_{·j}) over c = softmax_i(z) with L-BFGS, float64."""
    z = torch.zeros_like(k, requires_grad=True)
    opt = torch.optim.LBFGS([z], lr=1, max_iter=steps, tolerance_grad=1e-14, tolerance_change=1e-16,
                            history_size=50, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = similarity_objective(torch.softmax(z, dim=1), k, a, lam1, lam2).sum()
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    return torch.softmax(z.detach(), dim=1)


@pytest.mark.parametrize("lam1, lam2", [(0.5, 0.5), (0.1, 1.0), (1.0, 0.0), (0.0, 0.3), (0.2, 0.05)])
def test_closed_form_minimises_the_objective(lam1, lam2):
    k = torch.rand(2, 6, 3, generator=gen(7), dtype=torch.float64)
    a = random_activations(2, 6, seed=8)
    closed = closed_form_couplings(k, a, lam1, lam2)
    numeric = minimise_numerically(k, a, lam1, lam2)
    assert (closed - numeric).abs().max().item() < 1e-6
    assert torch.allclose(closed.sum(dim=1), torch.ones(2, 3, dtype=torch.float64))
    # and nothing nearby is lower (F is convex: the closed form is the minimum)
    best = similarity_objective(closed, k, a, lam1, lam2)
    for seed in range(5):
        z = closed.log() + 0.05 * torch.randn(closed.shape, generator=gen(seed), dtype=torch.float64)
        assert (similarity_objective(torch.softmax(z, dim=1), k, a, lam1, lam2) >= best - 1e-12).all()


def test_objective_by_hand():
    c = torch.tensor([[[0.25], [0.75]]], dtype=torch.float64)
    k = torch.tensor([[[0.5], [0.9]]], dtype=torch.float64)
    a = torch.tensor([[0.2, 0.8]], dtype=torch.float64)
    kl_u = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    kl_a = 0.25 * math.log(0.25 / 0.2) + 0.75 * math.log(0.75 / 0.8)
    expected = -(0.25 * 0.5 + 0.75 * 0.9) + 0.3 * kl_u + 0.7 * kl_a
    assert similarity_objective(c, k, a, 0.3, 0.7).item() == pytest.approx(expected, abs=1e-14)


def test_lambda_limits():
    k = torch.rand(1, 4, 2, generator=gen(9), dtype=torch.float64)
    a = random_activations(1, 4, seed=10)
    # λ2 = 0: a softmax of k / λ1, activations play no part
    assert torch.allclose(closed_form_couplings(k, a, 0.5, 0.0), torch.softmax(k / 0.5, dim=1))
    # λ1 = 0: c ∝ a · exp(k / λ2)
    expected = a[:, :, None] * torch.exp(k / 0.3)
    assert torch.allclose(closed_form_couplings(k, a, 0.0, 0.3), expected / expected.sum(dim=1, keepdim=True))
    # large λ1: uniform
    assert torch.allclose(closed_form_couplings(k, a, 1e9, 0.0), torch.full_like(k, 0.25))


# ------------------------------------------------------------------------------------ normalisation axes

def routers(D):
    torch.manual_seed(0)
    yield "similarity", lambda over: SimilarityRouter(kernels=3, normalize_over=over).double()
    yield "connectionist", lambda over: ConnectionistRouter(D, hidden=4, compatibility_hidden=(5,),
                                                            activation_hidden=(5,), normalize_over=over).double()


@pytest.mark.parametrize("over, axis", [("inputs", 1), ("outputs", 2)])
def test_couplings_sum_to_one_over_the_named_axis(over, axis):
    votes, a = random_votes(seed=11), random_activations()
    for name, make in routers(4):
        res = make(over)(votes, a, history=True)
        for step in res.history:
            sums = step.couplings.sum(dim=axis)
            assert torch.allclose(sums, torch.ones_like(sums)), (name, over)
        assert res.activations.shape == (2, 3) and ((res.activations > 0) & (res.activations < 1)).all()
    res = similarity_routing(votes, a, 0.1, 0.1, torch.ones(1).double(), torch.zeros(1).double(),
                             torch.tensor([1.0, 0.0, 1.0]).double(), normalize_over=over)
    sums = res.couplings.sum(dim=axis)
    assert torch.allclose(sums, torch.ones_like(sums))


# ------------------------------------------------------------------------------------ connectionist router

@pytest.mark.parametrize("combine", ["mean", "sum"])
def test_connectionist_router_against_a_loop_over_pairs(combine):
    torch.manual_seed(1)
    router = ConnectionistRouter(2, hidden=3, compatibility_hidden=(4,), activation_hidden=(4, 4),
                                 iterations=2, combine=combine).double()
    votes, a = random_votes(1, 3, 2, 2, seed=12), random_activations(1, 3, seed=13)
    res = router(votes, a)
    I, J, T = 3, 2, 2
    h = [[torch.zeros(1, 3, dtype=torch.float64) for _ in range(J)] for _ in range(I)]
    cell = [[torch.zeros(1, 3, dtype=torch.float64) for _ in range(J)] for _ in range(I)]
    c = torch.full((I, J), 1 / I, dtype=torch.float64)
    mu = [sum(c[i, j] * votes[0, i, j] for i in range(I)) for j in range(J)]
    for _ in range(T):
        r = torch.zeros(I, J, dtype=torch.float64)
        for i in range(I):
            for j in range(J):
                x = torch.cat([mu[j], a[0, i:i + 1], votes[0, i, j], c[i, j:j + 1]])[None]
                h[i][j], cell[i][j] = router.cell(x, (h[i][j], cell[i][j]))
                r[i, j] = router.compatibility_net(h[i][j])[0, 0]
        c = torch.softmax(r, dim=0)
        mu = [sum(c[i, j] * votes[0, i, j] for i in range(I)) for j in range(J)]
    scale = 1 / I if combine == "mean" else 1.0
    act = [router.activation_net(scale * sum(cell[i][j] for i in range(I)))[0, 0] for j in range(J)]
    assert torch.allclose(res.couplings[0], c, atol=1e-13)
    assert torch.allclose(res.poses[0], torch.stack(mu), atol=1e-13)
    assert torch.allclose(res.activations[0], torch.stack(act), atol=1e-13)
    assert res.state[0].shape == res.state[1].shape == (1, 3, 2, 3)


def test_table2_defaults():
    router = ConnectionistRouter(16)
    assert router.hidden == 16 and router.cell.input_size == 34
    assert [m.out_features for m in router.compatibility_net if isinstance(m, torch.nn.Linear)] == [64, 64, 1]
    assert [m.out_features for m in router.activation_net if isinstance(m, torch.nn.Linear)] == [124, 124, 1]
    assert lr.TABLE2["class_caps"] == ((64, 64), (124, 124), 16) and lr.KERNELS["class_caps"] == 10
    assert SimilarityRouter().mixing_logits.shape == (10,)


# ------------------------------------------------------------------------------------------- gradcheck

def layer_function(router, u, weight):
    """What a capsule layer with Faria's votes does with the router, as a function of u, W and its parameters."""
    names = [n for n, _ in router.named_parameters()]

    def f(u, weight, *params):
        out = functional_call(router, dict(zip(names, params)), (normalized_votes(u, weight), capsule_lengths(u)))
        return out.poses, out.couplings, out.activations

    return f, [p.detach().clone().requires_grad_(True) for _, p in router.named_parameters()]


def gradchecked_grads(router, seed):
    """Gradcheck a float64 ``router`` in a 3 → 2 capsule layer with Faria's votes (inputs from ``gen(seed)``,
    weights from ``gen(seed + 1)``), then return the gradients of Σ‖v_j‖ + Σ a_j to its parameters, by name."""
    u = (torch.randn(2, 3, 2, generator=gen(seed), dtype=torch.float64) * 0.5).requires_grad_(True)
    weight = torch.randn(3, 2, 2, 2, generator=gen(seed + 1), dtype=torch.float64).requires_grad_(True)
    f, params = layer_function(router, u, weight)
    assert torch.autograd.gradcheck(f, (u, weight, *params), atol=1e-6)
    poses, _, activations = f(u, weight, *params)
    grads = torch.autograd.grad(poses.norm(dim=-1).sum() + activations.sum(), params)
    return dict(zip([n for n, _ in router.named_parameters()], grads))


def test_gradcheck_similarity_router():
    torch.manual_seed(2)
    router = SimilarityRouter(kernels=2, iterations=2, lam1=0.3, lam2=0.2, theta=(1.5, 0.2, 0.7)).double()
    grads = gradchecked_grads(router, seed=14)
    assert set(grads) == {"raw_lam1", "raw_lam2", "log_length_scales", "mixing_logits", "theta"}
    for name, g in grads.items():
        assert g.abs().sum() > 0, name                    # every parameter gets a gradient


def test_per_channel_similarity_routing_is_one_routing_per_output():
    """λ1, λ2 (J,) and θ (3, J): output j routes as a one-output routing with its own λ1_j, λ2_j, θ_j would."""
    votes, a = random_votes(seed=21), random_activations(seed=22)
    lam1 = torch.tensor([0.05, 0.3, 1.0], dtype=torch.float64)
    lam2 = torch.tensor([0.2, 0.01, 0.5], dtype=torch.float64)
    theta = torch.tensor([[10.0, 2.0, -1.0], [-5.0, 0.0, 1.0], [1.0, 0.5, 2.0]], dtype=torch.float64)
    scales, mixing = torch.tensor([0.3, 1.0], dtype=torch.float64), torch.tensor([0.1, -0.2], dtype=torch.float64)
    out = similarity_routing(votes, a, lam1, lam2, scales, mixing, theta, iterations=3)
    for j in range(3):
        one = similarity_routing(votes[:, :, j:j + 1], a, float(lam1[j]), float(lam2[j]), scales, mixing,
                                 theta[:, j], iterations=3)
        assert torch.allclose(out.couplings[..., j], one.couplings[..., 0], rtol=0, atol=1e-12)
        assert torch.allclose(out.poses[:, j], one.poses[:, 0], rtol=0, atol=1e-12)
        assert torch.allclose(out.activations[:, j], one.activations[:, 0], rtol=0, atol=1e-12)
    assert not torch.allclose(out.couplings[..., 0], similarity_routing(
        votes, a, 0.3, 0.01, scales, mixing, theta[:, 1], iterations=3).couplings[..., 0])   # the λs matter
    objective = similarity_objective(out.couplings, torch.rand(2, 5, 3, dtype=torch.float64), a, lam1, lam2)
    assert objective.shape == (2, 3)


def test_per_channel_similarity_router_learns_a_lambda_and_theta_per_channel():
    router = SimilarityRouter(kernels=2, iterations=2, lam1=0.3, lam2=0.2, theta=(1.5, 0.2, 0.7), channels=2).double()
    assert router.lam1.shape == (2,) and router.theta.shape == (3, 2)
    assert torch.allclose(router.lam1, torch.full((2,), 0.3, dtype=torch.float64))
    assert torch.allclose(router.theta[:, 1], torch.tensor([1.5, 0.2, 0.7], dtype=torch.float64))
    grads = gradchecked_grads(router, seed=16)
    for name in ("raw_lam1", "raw_lam2", "theta"):                      # every channel's own parameters learn
        assert (grads[name].abs().reshape(-1, 2).sum(0) > 0).all(), name
    with pytest.raises(ValueError, match="J = channels = 2"):
        router(random_votes(J=3))
    with pytest.raises(ValueError, match="one per output"):
        similarity_routing(random_votes(), None, torch.ones(2, dtype=torch.float64), 0.1, torch.ones(1),
                           torch.zeros(1), torch.zeros(3))
    with pytest.raises(ValueError, match="theta"):
        similarity_routing(random_votes(), None, 0.1, 0.1, torch.ones(1), torch.zeros(1), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="channels"):
        SimilarityRouter(channels=0)


def test_gradcheck_connectionist_router():
    torch.manual_seed(3)
    router = ConnectionistRouter(2, hidden=3, compatibility_hidden=(3,), activation_hidden=(3,),
                                 iterations=2).double()
    grads = gradchecked_grads(router, seed=16)
    for name, g in grads.items():
        if name.endswith("bias_hh") or name.endswith("bias_ih") or "weight" in name:
            assert g.abs().sum() > 0, name


def test_gradcheck_through_the_closed_form_in_lambda():
    k = torch.rand(1, 4, 2, generator=gen(18), dtype=torch.float64)
    a = random_activations(1, 4, seed=19)
    lam = torch.tensor([0.3, 0.2], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda l: closed_form_couplings(k, a, l[0], l[1]), (lam,))


# -------------------------------------------------------------------------------------- in the models

def tiny_capsnet(router):
    torch.manual_seed(4)
    config = CapsNetConfig.slim(conv_channels=8, primary_types=2, decoder=False, votes="normalized")
    return CapsNet(config, router=router)


@pytest.mark.parametrize("make", [lambda: SimilarityRouter(kernels=4),
                                  lambda: ConnectionistRouter(16, compatibility_hidden=(8,), activation_hidden=(8,))],
                         ids=["similarity", "connectionist"])
def test_capsnet_with_a_learned_router_trains_one_step(make):
    router = make()
    model = tiny_capsnet(router)
    assert any(p is q for p in model.parameters() for q in router.parameters())  # the router's parameters train
    x = torch.rand(4, 1, 28, 28, generator=gen(20))
    y = torch.tensor([0, 3, 7, 9])
    out = model(x)
    assert out.lengths.shape == (4, 10) and ((out.lengths > 0) & (out.lengths < 1)).all()
    assert out.couplings.shape == (4, 72, 10)
    assert torch.allclose(out.couplings.sum(dim=1), torch.ones(4, 10), atol=1e-5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss = capsnet_loss(model(x, y), x, y)
    assert torch.isfinite(loss)
    opt.zero_grad()
    loss.backward()
    opt.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert "digits.weight" in changed and any(n.startswith("digits.router.") for n in changed)
    assert torch.isfinite(capsnet_loss(model(x, y), x, y))


def test_deep_capsnet_with_learned_routers_trains_one_step():
    torch.manual_seed(6)
    config = DeepCapsNetConfig.quick(conv_channels=(4,), routing_layers=2, capsules=5, capsule_dim=4)

    def make(layer):
        if layer.index == 0:
            return SimilarityRouter(kernels=4)
        return ConnectionistRouter(4, hidden=4, compatibility_hidden=(8,), activation_hidden=())  # no dead ReLU

    model = DeepCapsNet(replace(config, votes="normalized"), router=make)
    assert not any("prior" in n for n, _ in model.named_parameters())
    x, y = torch.rand(3, 1, 28, 28, generator=gen(21)), torch.tensor([1, 2, 3])
    out = model(x)
    assert [tuple(c.shape) for c in out.couplings] == [(3, 5, 5), (3, 5, 10)]
    for c in out.couplings:
        assert torch.allclose(c.sum(dim=1), torch.ones(c.shape[0], c.shape[2]), atol=1e-5)
    assert ((out.lengths > 0) & (out.lengths < 1)).all()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = margin_loss(out.lengths, y)
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any(n.startswith("layers.0.router.") for n in changed)
    assert any(n.startswith("layers.1.router.cell") for n in changed)
    with pytest.raises(ValueError, match="router must give 2 routers"):
        DeepCapsNet(config, router=[SimilarityRouter()])


def test_a_vector_capsule_layers_lengths_are_a_learned_routers_activations():
    torch.manual_seed(5)
    for router in (SimilarityRouter(kernels=2), ConnectionistRouter(4, hidden=4, compatibility_hidden=(),
                                                                    activation_hidden=())):
        layer = CapsuleLayer(6, 3, 2, 4, router, init_std=0.05, votes="normalized")
        u = torch.randn(3, 6, 3) * 0.3
        out = layer(u)
        routed = router(layer.votes(u), u.norm(dim=-1))
        assert out.poses.shape == (3, 2, 4)
        assert torch.allclose(out.poses.norm(dim=-1), routed.activations, atol=1e-6)
        cos = torch.nn.functional.cosine_similarity(out.poses, routed.poses, dim=-1)
        assert torch.allclose(cos, torch.ones(3, 2), atol=1e-5)
        # chains: a second layer reads the first one's lengths as its activations
        second = CapsuleLayer(2, 4, 3, 4, SimilarityRouter(kernels=2), votes="normalized")
        assert second(out.poses).poses.shape == (3, 3, 4)


# ------------------------------------------------------------------------------------------- bad input

def test_bad_input_raises_value_error():
    votes, a = random_votes(), random_activations()
    ell, w, theta = torch.ones(2).double(), torch.zeros(2).double(), torch.tensor([1.0, 0.0, 1.0]).double()
    compat, act = lr.dynamic_compatibility, lr.length_activation
    cases = [
        (lambda: generic_routing(votes[0], a, compat, act), "votes must have shape"),
        (lambda: generic_routing(votes, a[:, :3], compat, act), "activations must have shape"),
        (lambda: generic_routing(votes, -a, compat, act), ">= 0"),
        (lambda: generic_routing(votes, a, compat, act, normalize_over="rows"), "normalize_over"),
        (lambda: generic_routing(votes, a, compat, act, iterations=-1), "iterations must be an integer >= 0"),
        (lambda: generic_routing(votes, a, "nope", act), "compatibility must be a function"),
        (lambda: generic_routing(votes, a, lambda s, r, c, v, m, x: (r[:, :2], s), act), "compatibility's logits"),
        (lambda: generic_routing(votes, a, compat, lambda s, c, v, m, x: m), "activation's output"),
        (lambda: generic_routing(votes, a, compat, act, initial_logits=torch.zeros(3, 3)), "initial_logits"),
        (lambda: closed_form_couplings(torch.rand(1, 2, 2), torch.rand(1, 2), 0.0, 0.0), "lam1 \\+ lam2 must be > 0"),
        (lambda: closed_form_couplings(torch.rand(1, 2, 2), torch.rand(1, 2), -1.0, 1.0), "lam1 must be a number"),
        (lambda: closed_form_couplings(torch.rand(1, 2, 2), torch.rand(1, 3), 1.0, 1.0), "activations must have"),
        (lambda: gaussian_mixture_kernel(votes, votes, -ell, w), "length_scales must all be > 0"),
        (lambda: gaussian_mixture_kernel(votes, votes, ell, torch.zeros(3)), "mixing_logits must have shape"),
        (lambda: gaussian_mixture_kernel(votes, votes[..., :2], ell, w), "same last dimension"),
        (lambda: similarity_routing(votes, a, 0.1, 0.1, ell, w, theta[:2]), "theta must have shape"),
        (lambda: similarity_objective(torch.rand(1, 2, 3), torch.rand(1, 2, 2), torch.rand(1, 2), 1, 1),
         "couplings must have shape"),
        (lambda: normalized_votes(torch.randn(2, 4, 3), torch.randn(3, 2, 5, 3)), "u must have shape"),
        (lambda: ConnectionistRouter(3)(votes, a), "pose_dim"),
        (lambda: ConnectionistRouter(0), "pose_dim must be an integer >= 1"),
        (lambda: ConnectionistRouter(2, combine="max"), "combine must be"),
        (lambda: SimilarityRouter(lam1=0.0), "lam1 must be a number > 0"),
        (lambda: SimilarityRouter(kernels=2, length_scales=[1.0]), "length_scales must be 2 numbers"),
        (lambda: SimilarityRouter(normalize_over="j"), "normalize_over"),
        (lambda: CapsuleLayer(4, 3, 2, 8, ConnectionistRouter(4), votes="normalized")(torch.randn(2, 4, 3)),
         "pose_dim"),
        (lambda: CapsuleLayer(4, 3, 2, 8, torch.nn.Linear(2, 2)), "capsule_lab.routing.Router"),
        (lambda: CapsuleLayer(4, 3, 2, 8, votes="normalized")(torch.randn(2, 5, 3)), "u must have shape"),
        (lambda: CapsuleLayer(4, 3, 2, 8, votes="faria"), "votes must be one of"),
        (lambda: dynamic_routing_generic(votes, 0), "iterations must be an integer >= 1"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
