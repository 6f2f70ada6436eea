"""One router seam: every router of the course runs in every capsule layer and network of the package.

Routers × models: dynamic, detached, scaled, uniform, REM's pose-biased, similarity, connectionist and self-attention
routing, and a trivial router written here, each in a :class:`CapsuleLayer`, a :class:`CapsNet`, a
:class:`DeepCapsNet` and a :class:`ConvCapsNet`: the forward pass gives the documented shapes, the loss is finite
and back-propagates, and every parameter the router holds gets a gradient. A router class the package adds without
adding it here fails :func:`test_every_router_of_the_package_is_in_the_seam_test`. Every kind a config can ask for
(:class:`RouterSpec`) is built by every network that holds a config's router.
"""

from __future__ import annotations

import inspect

import pytest
import torch

import capsule_lab.routing as routing
from capsule_lab.capsules import margin_loss, squash
from capsule_lab.layers.dense import CapsuleLayer
from capsule_lab.models import (CapsNet, CapsNetConfig, CapsuleNetwork, ConvCapsNet, ConvCapsNetConfig, DeepCapsNet,
                                DeepCapsNetConfig, paper_routers)
from capsule_lab.routing import (ROUTER_KINDS, ConnectionistRouter, DetachedRouter, DynamicRouter, Router, RouterSpec,
                                 RoutingResult, ScaledRouter, SelfAttentionRouter, SimilarityRouter, UniformRouter)


class HalfAndHalf(Router):
    """A router written in a test: every input sends half its vote to output 0 and spreads the rest evenly."""

    def forward(self, votes, activations=None, *, history=False):
        B, I, J, D = votes.shape
        couplings = torch.full((B, I, J), 0.5 / J, dtype=votes.dtype, device=votes.device)
        couplings[:, :, 0] += 0.5
        poses = squash(torch.einsum("bij,bijd->bjd", couplings, votes))
        return RoutingResult(poses, poses.norm(dim=-1), couplings, torch.log(couplings))


#: Each router as a factory of the layer's (inputs, outputs, pose dimension).
ROUTERS = {
    "dynamic": lambda I, J, D: DynamicRouter(2),
    "detached": lambda I, J, D: DetachedRouter(2),
    "scaled": lambda I, J, D: ScaledRouter(2, 2.0),
    "uniform": lambda I, J, D: UniformRouter(),
    "pose-biased": lambda I, J, D: DynamicRouter(2, pose_bias=torch.full((J, D), 0.1)),
    "similarity": lambda I, J, D: SimilarityRouter(kernels=2, iterations=2),
    "connectionist": lambda I, J, D: ConnectionistRouter(D, hidden=4, compatibility_hidden=(4,),
                                                         activation_hidden=(4,), iterations=2),
    "self-attention": lambda I, J, D: SelfAttentionRouter(I, J),
    "written in a test": lambda I, J, D: HalfAndHalf(),
}


def _capsule_layer(make):
    layer = CapsuleLayer(6, 4, 3, 5, router=make(6, 3, 5), init_std=0.3)
    u = squash(torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(0)))
    out = layer(u)
    assert out.poses.shape == (2, 3, 5) and out.activations.shape == (2, 3) and out.couplings.shape == (2, 6, 3)
    assert torch.allclose(out.poses.norm(dim=-1), out.activations, atol=1e-5)      # vector capsules
    return layer, margin_loss(out.poses.norm(dim=-1), torch.tensor([0, 2]))


def _images(size: int) -> tuple:
    g = torch.Generator().manual_seed(1)
    return torch.rand(2, 1, size, size, generator=g), torch.tensor([0, 2])


def _capsnet(make):
    config = CapsNetConfig.slim(image_size=20, conv_channels=8, primary_types=2, classes=3, class_dim=4)
    net = CapsNet(config, router=make(config.primary_caps, config.classes, config.class_dim))
    x, y = _images(20)
    out = net(x, y)
    assert out.lengths.shape == (2, 3) and out.couplings.shape == (2, config.primary_caps, 3)
    return net, net.loss(out, x, y)


def _deep_capsnet(make):
    config = DeepCapsNetConfig.quick(conv_channels=(8,), capsules=4, capsule_dim=4, classes=3, routing_layers=2)
    sizes = config.layer_sizes
    net = DeepCapsNet(config, router=lambda layer: make(layer.inputs, layer.outputs, layer.dim))
    assert [(layer.in_caps, layer.out_caps) for layer in net.layers] == list(zip(sizes, sizes[1:]))
    x, y = _images(28)
    out = net(x, y)
    assert [tuple(c.shape) for c in out.couplings] == [(2, 4, 4), (2, 4, 3)] and out.lengths.shape == (2, 3)
    return net, net.loss(out, x, y)


def _conv_capsnet(make):
    config = ConvCapsNetConfig.slim(classes=3)
    inputs = (config.caps1_kernel ** 2 * config.primary_types, config.caps2_kernel ** 2 * config.caps1_types,
              config.class_inputs)
    outputs = (config.caps1_types, config.caps2_types, config.classes)
    net = ConvCapsNet(config, [make(i, j, 16) for i, j in zip(inputs, outputs)])
    x, y = _images(28)
    out = net(x, y)
    assert out.activations.shape == (2, 3) and out.couplings.shape == (2, config.class_inputs, 3)
    assert out.layer_couplings[0].shape == (2, 5, 5, inputs[0], outputs[0])
    return net, net.loss(out, x, y)


MODELS = {"CapsuleLayer": _capsule_layer, "CapsNet": _capsnet, "DeepCapsNet": _deep_capsnet,
          "ConvCapsNet": _conv_capsnet}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("router", list(ROUTERS))
def test_every_router_runs_in_every_model(router, model):
    torch.manual_seed(0)
    module, loss = MODELS[model](ROUTERS[router])
    assert torch.isfinite(loss)
    loss.backward()
    routers = [m for m in module.modules() if isinstance(m, Router)]
    assert routers and all(isinstance(r, type(ROUTERS[router](2, 2, 2))) for r in routers)
    for r in routers:
        for name, p in r.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), f"{router}'s {name} got no gradient"


def test_every_router_of_the_package_is_in_the_seam_test():
    package = {cls for _, cls in inspect.getmembers(routing, inspect.isclass) if issubclass(cls, Router)} - {Router}
    tested = {type(make(2, 2, 2)) for make in ROUTERS.values()}
    assert package <= tested, sorted(c.__name__ for c in package - tested)


def test_a_network_family_must_define_its_loss_and_parse_trees():
    class NoParseTrees(CapsuleNetwork):
        def loss(self, out, images, targets):
            return out.sum()

    class NoLoss(CapsuleNetwork):
        def parse_trees(self, out):
            return None

    for family, missing in ((NoParseTrees, "parse_trees"), (NoLoss, "loss")):
        with pytest.raises(TypeError, match=f"abstract.*{missing}"):
            family()


@pytest.mark.parametrize("kind", ROUTER_KINDS)
def test_every_kind_of_spec_builds_in_every_network_with_a_config(kind):
    torch.manual_seed(0)
    spec = RouterSpec(kind, iterations=2)
    capsnet = CapsNet(CapsNetConfig.slim(image_size=20, conv_channels=8, primary_types=2, classes=3, router=spec))
    deep = DeepCapsNet(DeepCapsNetConfig.quick(conv_channels=(8,), capsules=4, capsule_dim=4, classes=3,
                                               routing_layers=2, router=spec))
    conv = ConvCapsNet(ConvCapsNetConfig.slim(classes=3, router=spec))
    for net, size in ((capsnet, 20), (deep, 28), (conv, 28)):
        x, y = _images(size)
        assert torch.isfinite(net.loss(net(x, y), x, y))
        assert all(type(r) is type(net.routers()[0]) for r in net.routers())
        assert net.config.router == spec
    assert [type(r) for r in conv.routers()] == [type(r) for r in paper_routers(spec, config=conv.config)]


def test_a_router_given_as_a_module_empties_the_configs_spec():
    config = CapsNetConfig.slim(decoder=False)
    net = CapsNet(config, router=SimilarityRouter())
    assert net.config.router is None and isinstance(net.router, SimilarityRouter)
    with pytest.raises(ValueError, match="config.router is None"):
        CapsNet(net.config)
    deep = DeepCapsNet(DeepCapsNetConfig.quick(routing_layers=1), router=[UniformRouter()])
    assert deep.config.router is None
    conv = ConvCapsNet(ConvCapsNetConfig.slim(), paper_routers("uniform", config=ConvCapsNetConfig.slim()))
    assert conv.config.router is None
    for network in (deep, conv):
        with pytest.raises(ValueError, match="config.router is None .*: pass router="):
            type(network)(network.config)
    with pytest.raises(ValueError, match="config must be a ConvCapsNetConfig, got CapsNetConfig"):
        ConvCapsNet(config)


@pytest.mark.parametrize("config", [CapsNetConfig, DeepCapsNetConfig, ConvCapsNetConfig])
def test_a_config_holds_a_router_spec_or_none(config):
    assert config(router="uniform").router == RouterSpec("uniform")        # a kind's name is read as its spec
    with pytest.raises(ValueError, match="kind must be one of"):
        config(router="em")
    with pytest.raises(ValueError, match="got DynamicRouter"):
        config(router=DynamicRouter())
    assert config(router=None).router is None and config(router=RouterSpec("uniform")).router.kind == "uniform"


def test_router_spec_checks():
    with pytest.raises(ValueError, match="kind"):
        RouterSpec("em")
    with pytest.raises(ValueError, match="iterations"):
        RouterSpec("dynamic", iterations=0)
    RouterSpec("similarity", iterations=0)                      # T = 0 is one pose, no update: allowed
    with pytest.raises(ValueError, match="do\\(es\\) not apply"):
        RouterSpec("uniform", detach_couplings=True)
    with pytest.raises(ValueError, match="prior_std"):
        RouterSpec("dynamic", prior_std=1.0)
    with pytest.raises(ValueError, match="pose_bias"):
        RouterSpec(pose_bias="0.1")
    assert CapsNetConfig.slim(router="dynamic").router == RouterSpec("dynamic")      # a kind's name: its spec
    with pytest.raises(ValueError, match="router must be a capsule_lab.routing.RouterSpec"):
        CapsNetConfig.slim(router=3)
