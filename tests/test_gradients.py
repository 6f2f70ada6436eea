"""capsule_lab.measures.gradients against torch.autograd (float64) and hand-worked cases."""

import math

import pytest
import torch

from capsule_lab import squash, squash_exp
from capsule_lab.measures.gradients import (capsnet_gradient_terms, coupling_jacobian, gradient_terms, routing_states,
                                            softmax_jacobian, squash_jacobian, vote_gradient)
from capsule_lab.models import CapsNet, CapsNetConfig, capsnet_loss
from capsule_lab.routing import (DynamicRouter, RouterSpec, ScaledRouter, SimilarityRouter, UniformRouter,
                                 coupling_polarisation, dynamic_routing)

SHAPES = [(1, 2, 2, 2), (2, 5, 3, 4), (3, 4, 6, 3)]


def _inputs(shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    B, I, J, D = shape
    votes = scale * torch.randn(shape, generator=g, dtype=torch.float64)
    prior = torch.randn(I, J, generator=g, dtype=torch.float64)
    grad_poses = torch.randn(B, J, D, generator=g, dtype=torch.float64)
    return votes, prior, grad_poses


def _autograd_vote_grad(votes, prior, grad_poses, K, activation=squash, **options):
    u = votes.clone().requires_grad_(True)
    b = prior.clone().requires_grad_(True)
    poses = dynamic_routing(u, K, b, activation=activation, **options).poses
    return torch.autograd.grad((poses * grad_poses).sum(), (u, b), allow_unused=True, materialize_grads=True)


# ------------------------------------------------------------------------------------ local Jacobians

def test_softmax_jacobian_hand_worked():
    c = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    expected = torch.tensor([[0.25, -0.125, -0.125],
                             [-0.125, 0.1875, -0.0625],
                             [-0.125, -0.0625, 0.1875]], dtype=torch.float64)
    torch.testing.assert_close(softmax_jacobian(c), expected)
    # rows sum to 0 (Σ_j c_j = 1 whatever b), and a one-hot c has a zero Jacobian
    assert softmax_jacobian(torch.tensor([1.0, 0.0, 0.0])).abs().max() == 0


def test_softmax_jacobian_matches_autograd():
    b = torch.randn(4, 5, dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), b)  # (4, 5, 4, 5)
    torch.testing.assert_close(softmax_jacobian(torch.softmax(b, -1)), torch.stack([auto[n, :, n] for n in range(4)]))


@pytest.mark.parametrize("activation", [squash, squash_exp])
def test_squash_jacobian_matches_autograd(activation):
    s = torch.randn(6, 5, dtype=torch.float64) * torch.tensor([[0.05], [0.3], [1.0], [2.0], [5.0], [20.0]])
    auto = torch.autograd.functional.jacobian(activation, s)
    torch.testing.assert_close(squash_jacobian(s, activation), torch.stack([auto[n, :, n] for n in range(6)]))


def test_squash_jacobian_hand_worked_and_at_zero():
    # s = (3, 4): n = 5, squash f = 5/26, n f' = 5(1 − 25)/26² → J = f I + n f' ŝŝᵀ
    s = torch.tensor([3.0, 4.0], dtype=torch.float64)
    unit = s / 5
    expected = (5 / 26) * torch.eye(2, dtype=torch.float64) + (5 * (1 - 25) / 26 ** 2) * torch.outer(unit, unit)
    torch.testing.assert_close(squash_jacobian(s), expected)
    zero = torch.zeros(3, dtype=torch.float64)
    assert squash_jacobian(zero).abs().max() == 0                              # v ≈ ‖s‖ s near 0
    torch.testing.assert_close(squash_jacobian(zero, squash_exp), torch.eye(3, dtype=torch.float64))  # v ≈ s


def test_squash_jacobian_rejects_other_activations_and_bad_input():
    with pytest.raises(ValueError, match="squash"):
        squash_jacobian(torch.randn(3), torch.tanh)
    with pytest.raises(ValueError, match=r"\(\.\.\., D\)"):
        squash_jacobian(torch.tensor(1.0))


# ------------------------------------------------------------------------------ the two gradient terms

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("iterations", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("activation", [squash, squash_exp])
def test_vote_gradient_total_and_prior_match_autograd(shape, iterations, activation):
    votes, prior, grad_poses = _inputs(shape, seed=iterations)
    auto_votes, auto_prior = _autograd_vote_grad(votes, prior, grad_poses, iterations, activation)
    g = vote_gradient(votes, grad_poses, iterations, prior, activation)
    torch.testing.assert_close(g.total, auto_votes, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(g.prior.sum(dim=0), auto_prior, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("iterations", [1, 3, 5])
def test_term1_is_the_detached_coupling_gradient(shape, iterations):
    """Term 1 = what autograd gives when the couplings are constants (the supplement's Fig. 3 graph)."""
    votes, prior, grad_poses = _inputs(shape, seed=10 + iterations)
    detached, _ = _autograd_vote_grad(votes, prior, grad_poses, iterations, detach_couplings=True)
    g = vote_gradient(votes, grad_poses, iterations, prior)
    torch.testing.assert_close(g.term1, detached, rtol=1e-10, atol=1e-12)


def test_one_iteration_has_no_second_term_without_priors_depending_on_votes():
    votes, prior, grad_poses = _inputs((2, 4, 3, 2), seed=3)
    g = vote_gradient(votes, grad_poses, 1, prior)
    assert g.term2.abs().max() == 0
    # and with one iteration the couplings are softmax(prior): term 1 = c_im ∂L/∂s_m by hand
    c = torch.softmax(prior, dim=1)
    s = torch.einsum("ij,bijd->bjd", c, votes)
    grad_s = torch.einsum("bjed,bje->bjd", squash_jacobian(s), grad_poses)
    torch.testing.assert_close(g.term1, c[None, :, :, None] * grad_s[:, None])


@pytest.mark.parametrize("iterations", [2, 3, 4])
def test_coupling_jacobian_matches_autograd(iterations):
    votes, prior, _ = _inputs((2, 4, 3, 3), seed=20 + iterations)
    auto = torch.autograd.functional.jacobian(lambda v: dynamic_routing(v, iterations, prior).couplings, votes)
    expected = torch.stack([auto[n, :, :, n] for n in range(2)])          # (B, I, J, I, J, D)
    torch.testing.assert_close(coupling_jacobian(votes, iterations, prior), expected, rtol=1e-10, atol=1e-12)


def test_coupling_jacobian_of_first_iteration_is_zero_and_rows_sum_to_zero():
    votes, prior, _ = _inputs((1, 3, 4, 2), seed=5)
    assert coupling_jacobian(votes, 1, prior).abs().max() == 0
    jac = coupling_jacobian(votes, 3, prior)
    assert jac.sum(dim=2).abs().max() < 1e-12          # Σ_j c_ij = 1 for any votes


@pytest.mark.parametrize("iterations", [2, 3, 5])
def test_term2_equals_coupling_gradient_times_coupling_jacobian(iterations):
    """Two independent routes to term 2: reverse mode (vote_gradient) and forward mode (eq. 3 unrolled)."""
    votes, prior, grad_poses = _inputs((2, 3, 3, 2), seed=30 + iterations)
    g = vote_gradient(votes, grad_poses, iterations, prior)
    states = routing_states(votes, iterations, prior)
    grad_s = torch.einsum("bjed,bje->bjd", squash_jacobian(states.sums[-1]), grad_poses)
    gamma = torch.einsum("bjd,bijd->bij", grad_s, votes)           # ∂L/∂c^(K) with the votes held fixed
    term2 = torch.einsum("bpj,bpjimd->bimd", gamma, coupling_jacobian(votes, iterations, prior))
    torch.testing.assert_close(g.term2, term2, rtol=1e-10, atol=1e-12)


def test_term2_vanishes_as_the_couplings_polarise():
    """Strong priors make c nearly one-hot; softmax' ≈ 0 then kills term 2 (supplement, eqs. 3-4)."""
    votes, prior, grad_poses = _inputs((2, 6, 4, 3), seed=7)
    one_hot = torch.nn.functional.one_hot(torch.arange(6) % 4, 4).double()
    ratios = [gradient_terms(vote_gradient(votes, grad_poses, 3, scale * one_hot))["ratio"] for scale in (0, 5, 20)]
    assert ratios[0] > 0.05 and ratios[1] < ratios[0] and ratios[2] < 1e-5


def test_vote_gradient_input_checks():
    votes, prior, grad_poses = _inputs((2, 3, 3, 2), seed=0)
    with pytest.raises(ValueError, match=r"grad_poses must have shape \(B, J, D\) = \(2, 3, 2\)"):
        vote_gradient(votes, grad_poses[:, :2], 3)
    with pytest.raises(ValueError, match=r"\(B, I, J, D\)"):
        vote_gradient(votes[0], grad_poses, 3)
    with pytest.raises(ValueError, match="iterations"):
        vote_gradient(votes, grad_poses, 0)
    with pytest.raises(ValueError, match="prior_logits"):
        coupling_jacobian(votes, 2, prior[:2])


# ------------------------------------------------------------------------------------- summaries

def test_coupling_polarisation_uniform_and_one_hot():
    uniform = torch.full((2, 5, 4), 0.25)
    p = coupling_polarisation(uniform)
    assert p["max_coupling"] == pytest.approx(0.25) and p["entropy_bits"] == pytest.approx(2.0)
    one_hot = torch.nn.functional.one_hot(torch.arange(10) % 4, 4).float().view(2, 5, 4)
    p = coupling_polarisation(one_hot)
    assert p["max_coupling"] == pytest.approx(1.0) and p["entropy_bits"] == pytest.approx(0.0)
    half = torch.tensor([[[0.5, 0.5, 0.0, 0.0]]])
    assert coupling_polarisation(half)["entropy_bits"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"\(B, I, J\)"):
        coupling_polarisation(uniform[0])


def test_gradient_terms_hand_worked():
    from capsule_lab.measures.gradients import VoteGradient
    t1 = torch.zeros(1, 1, 1, 2, dtype=torch.float64)
    t1[..., 0] = 3.0
    t2 = torch.zeros_like(t1)
    t2[..., 1] = 4.0
    s = gradient_terms(VoteGradient(t1 + t2, t1, t2, torch.zeros(1, 1, 1)))
    assert s["term1"] == 3 and s["term2"] == 4 and s["ratio"] == pytest.approx(4 / 3)
    assert s["cosine"] == pytest.approx(3 / 5)


ROUTINGS = {                     # router spec → the iterations the network routes with, and whether term 2 trains it
    "dynamic r=3": (RouterSpec(), 3, True),
    "dynamic r=5": (RouterSpec(iterations=5), 5, True),
    "uniform": (RouterSpec("uniform"), 1, True),
    "pose-biased": (RouterSpec(pose_bias=0.1), 3, True),
    "detached": (RouterSpec(detach_couplings=True), 3, False),
}


@pytest.mark.parametrize("routing", list(ROUTINGS))
def test_capsnet_gradient_terms_measure_each_network_as_it_routes(routing):
    """The terms are read from the network's own router: compared with autograd through that router on the
    materialised votes (the total) and through the same router with its couplings held constant (term 1)."""
    spec, iterations, trains_term2 = ROUTINGS[routing]
    torch.manual_seed(0)
    config = CapsNetConfig.slim(image_size=20, conv_channels=8, conv_kernel=5, primary_types=2, primary_kernel=5,
                                decoder_hidden=(16,), router=spec)
    model = CapsNet(config).double()
    if routing == "pose-biased":
        with torch.no_grad():
            model.router.pose_bias.copy_(0.3 * torch.randn(10, 16, dtype=torch.float64))
    x = torch.rand(4, 1, 20, 20, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 3])
    got = capsnet_gradient_terms(model, x, y)
    assert got["iterations"] == iterations

    router = model.router
    held = (router if isinstance(router, UniformRouter) else
            DynamicRouter(router.iterations, detach_couplings=True, pose_bias=router.pose_bias))
    with torch.no_grad():
        u = model.primary(torch.relu(model.conv(x)))
    grads = []
    for route in (router, held):
        votes = model.digits.votes(u).detach().requires_grad_(True)
        routed = route(votes)
        out = type(model(x))(routed.poses.norm(dim=-1), routed.poses, routed.couplings, u,
                              model.decoder(routed.poses, y))
        grads.append(torch.autograd.grad(capsnet_loss(out, x, y), votes)[0])
    total, term1 = grads
    assert got["term1"] == pytest.approx(term1.norm().item(), rel=1e-9)
    assert got["term2"] == pytest.approx((total - term1).norm().item(), rel=1e-9, abs=1e-30)
    assert (got["term2"] > 0) == (trains_term2 and routing != "uniform")
    assert got["cosine"] == pytest.approx((total.flatten() @ term1.flatten() / total.norm() / term1.norm()).item())
    assert 1 / 10 <= got["max_coupling"] <= 1 and 0 <= got["entropy_bits"] <= math.log2(10)
    assert model.training


def test_capsnet_gradient_terms_needs_sabours_routing():
    for router in (SimilarityRouter(), ScaledRouter(3, 2.0)):
        model = CapsNet(CapsNetConfig.slim(decoder=False), router=router)
        with pytest.raises(ValueError, match="Sabour's routing"):
            capsnet_gradient_terms(model, torch.rand(2, 1, 28, 28), torch.tensor([0, 1]))
