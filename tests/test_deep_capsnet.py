"""capsule_lab.models.DeepCapsNet (chapter 04): shapes, the router spec (dynamic from learned priors, or uniform),
learned priors held by each layer's router, squash_exp, training; the options of the dead-capsule search (squash,
prior_std) and Theorem 2 under SGD and Adam."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.utils.data import TensorDataset

from capsule_lab import margin_loss, squash, squash_exp
from capsule_lab.layers.dense import CapsuleLayer
from capsule_lab.layers.votes import capsule_votes
from capsule_lab.models import DeepCapsNet, DeepCapsNetConfig
from capsule_lab.models.deep_capsnet import SQUASHES
from capsule_lab.routing import DynamicRouter, RouterSpec, UniformRouter, dynamic_routing
from capsule_lab.training import evaluate, fit


def small(routing="dynamic", iterations=3, prior_std=0.0, **changes):
    router = (RouterSpec("uniform") if routing == "uniform"
              else RouterSpec(iterations=iterations, learned_priors=True, prior_std=prior_std))
    return DeepCapsNetConfig.quick(conv_channels=(4,), router=router, **changes)


def one_layer(in_caps, in_dim, out_caps, out_dim, routing="dynamic", iterations=3, squash="exp", prior_std=0.0):
    """A routing layer of a DeepCapsNet: the network's router spec built for the layer, then its W."""
    spec = small(routing=routing, iterations=iterations, prior_std=prior_std).router
    router = spec.build(in_caps, out_caps, out_dim, activation=SQUASHES[squash])
    return CapsuleLayer(in_caps, in_dim, out_caps, out_dim, router=router, init_std=1.0, vote_free=False)


def test_paper_configuration():
    c = DeepCapsNetConfig.paper()
    assert c.layer_sizes == (16, 16, 16, 16, 10)          # Tables 1/2: layers 1–4 of 16 capsules, 10 classes
    assert (c.capsule_dim, c.routing_layers, c.router.iterations, c.router.kind) == (8, 4, 3, "dynamic")
    assert c.router.learned_priors and c.decoder


@pytest.mark.parametrize("depth", [1, 2, 4])
@pytest.mark.parametrize("routing", ["dynamic", "uniform"])
def test_forward_shapes(depth, routing):
    torch.manual_seed(0)
    model = DeepCapsNet(small(routing_layers=depth, routing=routing))
    out = model(torch.rand(3, 1, 28, 28))
    assert out.lengths.shape == (3, 10) and out.poses.shape == (3, 10, 8)
    assert [tuple(u.shape) for u in out.capsules] == [(3, 16, 8)] * depth + [(3, 10, 8)]
    assert [tuple(c.shape) for c in out.couplings] == [(3, 16, 16)] * (depth - 1) + [(3, 16, 10)]
    for c in out.couplings:
        assert torch.allclose(c.sum(dim=-1), torch.ones(c.shape[:2]), atol=1e-5)
    for u in out.capsules:
        assert (u.norm(dim=-1) < 1).all()
    assert torch.allclose(out.lengths, out.capsules[-1].norm(dim=-1))
    assert out.reconstruction is None


def test_uniform_switch_gives_constant_couplings_and_no_priors():
    model = DeepCapsNet(small(routing="uniform"))
    out = model(torch.rand(2, 1, 28, 28))
    assert all(torch.allclose(c, torch.full_like(c, 1 / c.shape[-1])) for c in out.couplings)
    assert not any("prior" in name for name, _ in model.named_parameters())
    assert all(isinstance(r, UniformRouter) for r in model.routers())


def test_layers_compute_squash_exp_of_rba_with_learned_priors():
    """Each layer is eq. (2) + RBA (Algorithm 1) started at the learned priors b, with squash_exp."""
    torch.manual_seed(0)
    model = DeepCapsNet(small())
    with torch.no_grad():
        for layer in model.layers:
            layer.router.prior_logits.normal_()
    x = torch.rand(2, 1, 28, 28)
    out = model(x)
    u = squash_exp(model.backbone(x).view(2, 16, 8))
    assert torch.allclose(out.capsules[0], u, atol=1e-6)
    for l, layer in enumerate(model.layers):
        ref = dynamic_routing(capsule_votes(u, layer.weight), 3, layer.router.prior_logits, activation=squash_exp)
        assert torch.allclose(out.capsules[l + 1], ref.poses, atol=1e-5)
        assert torch.allclose(out.couplings[l], ref.couplings, atol=1e-5)
        u = ref.poses


def test_one_routing_iteration_from_the_priors_is_softmax_of_the_priors():
    layer = one_layer(5, 3, 4, 2, iterations=1)
    prior = layer.router.prior_logits
    assert isinstance(prior, torch.nn.Parameter) and [p for p in layer.router.parameters()] == [prior]
    with torch.no_grad():
        prior.copy_(torch.randn(5, 4))
    out = layer(torch.rand(2, 5, 3))
    assert torch.allclose(out.couplings, torch.softmax(prior, dim=-1).expand(2, 5, 4), atol=1e-6)


def test_priors_and_every_weight_get_gradients():
    torch.manual_seed(0)
    model = DeepCapsNet(small(routing_layers=3))
    x, y = torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    margin_loss(model(x).lengths, y).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_decoder_and_fit_work():
    torch.manual_seed(0)
    model = DeepCapsNet(small(routing_layers=2, decoder=True, decoder_hidden=(16,)))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.rand(40, 1, 28, 28, generator=g), torch.randint(0, 10, (40,), generator=g))
    out = model(data.tensors[0][:3], data.tensors[1][:3])
    assert out.reconstruction.shape == (3, 1, 28, 28)
    history = fit(model, data, data, epochs=1, batch_size=16, progress=False)
    assert len(history.test_accuracy) == 1 and 0.0 <= evaluate(model, data) <= 1.0


def test_input_checks():
    model = DeepCapsNet(small())
    for bad in (torch.rand(2, 28, 28), torch.rand(2, 3, 28, 28), torch.rand(2, 1, 20, 20)):
        with pytest.raises(ValueError, match=r"\(B, 1, 28, 28\)"):
            model(bad)
    with pytest.raises(ValueError, match="router"):
        DeepCapsNetConfig(router="em")
    with pytest.raises(ValueError, match="routing_layers"):
        DeepCapsNetConfig(routing_layers=0)
    with pytest.raises(ValueError, match="router must give 4 routers"):
        DeepCapsNet(small(), router=[DynamicRouter(3)])
    with pytest.raises(ValueError, match="router is one Router module but the network has 4 routing layers"):
        DeepCapsNet(small(), router=DynamicRouter(3))
    with pytest.raises(ValueError, match=r"router must be a capsule_lab.routing.Router"):
        DeepCapsNet(small(routing_layers=1), router=[lambda layer: layer])


# ------------------------------------------------------------------------------------------ search options (chapter 04)


def test_defaults_are_the_papers_squash_and_zero_priors():
    c = DeepCapsNetConfig.quick()
    assert (c.squash, c.router.prior_std) == ("exp", 0.0) and SQUASHES["exp"] is squash_exp
    assert SQUASHES["sabour"] is squash
    layer = one_layer(4, 2, 3, 2)
    assert torch.equal(layer.router.prior_logits, torch.zeros(4, 3))


@pytest.mark.parametrize("routing", ["dynamic", "uniform"])
def test_squash_option_on_a_hand_case(routing):
    """One input capsule u = (3, 4), W = identity, one output: s = u, so the output is g(s) with ‖s‖ = 5."""
    expected = {"sabour": torch.tensor([0.6, 0.8]) * 25 / 26,                 # ‖s‖²/(1 + ‖s‖²) · s/‖s‖
                "exp": torch.tensor([0.6, 0.8]) * (1 - math.exp(-5.0))}       # (1 − e^{−‖s‖}) · s/‖s‖
    for name, value in expected.items():
        layer = one_layer(1, 2, 1, 2, routing=routing, squash=name)
        with torch.no_grad():
            layer.weight.copy_(torch.eye(2).view(1, 1, 2, 2))
        out = layer(torch.tensor([[[3.0, 4.0]]]))
        assert torch.allclose(out.poses[0, 0], value, atol=1e-6), name


def test_sabour_network_uses_squash_everywhere():
    torch.manual_seed(0)
    model = DeepCapsNet(small(squash="sabour", routing_layers=2))
    x = torch.rand(2, 1, 28, 28)
    out = model(x)
    u = squash(model.backbone(x).view(2, 16, 8))
    assert torch.allclose(out.capsules[0], u, atol=1e-6)
    for l, layer in enumerate(model.layers):
        u = dynamic_routing(capsule_votes(u, layer.weight), 3, layer.router.prior_logits, activation=squash).poses
        assert torch.allclose(out.capsules[l + 1], u, atol=1e-5)


def test_prior_std_draws_normal_priors_and_zero_draws_nothing():
    torch.manual_seed(0)
    layer = one_layer(64, 2, 64, 2, prior_std=3.0)
    prior = layer.router.prior_logits
    assert abs(prior.std().item() - 3.0) < 0.1 and abs(prior.mean().item()) < 0.1
    # prior_std = 0 consumes no random numbers: the default network's weights are unchanged by the option
    torch.manual_seed(5)
    a = DeepCapsNet(small())
    torch.manual_seed(5)
    b = DeepCapsNet(small(prior_std=0.0, squash="exp"))
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), name


def test_search_options_are_checked():
    with pytest.raises(ValueError, match=r"squash must be one of \['exp', 'sabour'\], got 'tanh'"):
        DeepCapsNetConfig(squash="tanh")
    with pytest.raises(ValueError, match="prior_std must be a number >= 0"):
        RouterSpec(learned_priors=True, prior_std=-1.0)
    with pytest.raises(ValueError, match="init_std must be a number >= 0"):
        DeepCapsNetConfig(init_std=-0.5)
    with pytest.raises(ValueError, match="prior_std must be 0 without learned priors"):
        RouterSpec("uniform", prior_std=1.0)
    with pytest.raises(ValueError, match="prior_std must be 0 without learned priors"):
        RouterSpec(learned_priors=False, prior_std=1.0)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_zeroed_capsule_stays_dead_while_the_network_trains(optimizer):
    """Theorem 2: zero the matrices that write capsule 0 of layer 2 and those that read it; every gradient that
    could revive it is exactly zero, so neither SGD (w ← w − lr·0) nor Adam moves them, and the capsule stays 0."""
    torch.manual_seed(0)
    model = DeepCapsNet(small(routing_layers=3))
    with torch.no_grad():
        model.layers[0].weight[:, 0] = 0.0                 # W_(0,i) for every i: writes capsule 0 of layer 2
        model.layers[1].weight[0] = 0.0                    # W_(j,0) for every j: reads it
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.rand(48, 1, 28, 28, generator=g), torch.randint(0, 10, (48,), generator=g))
    before = copy.deepcopy(model.state_dict())
    options = dict(optimizer="sgd", lr=0.5, momentum=0.9) if optimizer == "sgd" else dict(lr=0.01)
    fit(model, data, epochs=2, batch_size=16, progress=False, **options)
    assert (model.layers[0].weight[:, 0] == 0).all() and (model.layers[1].weight[0] == 0).all()
    assert not torch.equal(model.layers[0].weight[:, 1], before["layers.0.weight"][:, 1])   # others moved
    with torch.no_grad():
        assert (model(data.tensors[0]).capsules[1][:, 0] == 0).all()
