"""One registry of routers (capsule_lab.routing.registry): a kind registered once is built by every seam from what
the layer knows; a spec says only what its kind reads; every router's last step (``combine_votes``, what quantised
inference runs again) is the step its own routing takes."""

from __future__ import annotations

import pytest
import torch

from capsule_lab import squash, squash_exp
from capsule_lab.models import CapsNet, CapsNetConfig, DeepCapsNet, DeepCapsNetConfig, layer_routers
from capsule_lab.routing import (ConnectionistRouter, DynamicRouter, LayerInfo, Router, RouterSpec, RoutingResult,
                                 SelfAttentionRouter, SimilarityRouter, UniformRouter, import_router, register_router,
                                 router_kind, router_kinds, unregister_router)


class Halves(Router):
    """Half of every vote to output 0, the rest spread evenly; its width a registered option."""

    def __init__(self, activation=squash, share: float = 0.5):
        super().__init__()
        self.activation, self.share = activation, share

    @classmethod
    def from_layer(cls, layer, spec):
        return cls(**layer.squash_options(), share=spec.option("share"))

    def forward(self, votes, activations=None, *, history=False):
        B, I, J, _ = votes.shape
        c = torch.full((B, I, J), (1 - self.share) / J, dtype=votes.dtype)
        c[:, :, 0] += self.share
        return self.combine_votes(votes, c)


@pytest.fixture
def halves():
    register_router("halves", Halves, options={"share": 0.5}, summary="a test's router")
    yield
    unregister_router("halves")


def _votes(B=3, I=5, J=4, D=6, seed=0):
    return torch.randn(B, I, J, D, generator=torch.Generator().manual_seed(seed))


def test_a_registered_kind_is_built_with_its_options_and_the_layers_squash(halves):
    assert router_kinds()[:5] == ("dynamic", "uniform", "similarity", "connectionist", "self-attention")
    assert "halves" in router_kinds() and router_kind("halves").summary == "a test's router"
    layer = LayerInfo(5, 4, 6, activation=squash_exp)
    router = RouterSpec("halves", options={"share": 0.8})(layer)
    assert isinstance(router, Halves) and router.share == 0.8 and router.activation is squash_exp
    assert RouterSpec("halves").option("share") == 0.5                       # the registered default
    assert RouterSpec("halves", options={"share": 0.8}) == RouterSpec("halves", options=(("share", 0.8),))
    out = router(_votes())
    by_hand = squash_exp(torch.einsum("bij,bijd->bjd", torch.full((3, 5, 4), 0.05) + torch.tensor([0.8, 0, 0, 0]),
                                      _votes()))
    torch.testing.assert_close(out.poses, by_hand)


def test_a_spec_refuses_what_its_kind_does_not_read(halves):
    with pytest.raises(ValueError, match="temperature do\\(es\\) not apply to a 'halves' router"):
        RouterSpec("halves", options={"temperature": 2})
    with pytest.raises(ValueError, match="kernels do\\(es\\) not apply"):
        RouterSpec("halves", kernels=4)
    with pytest.raises(ValueError, match="share do\\(es\\) not apply to a 'dynamic' router"):
        RouterSpec("dynamic", options={"share": 0.2})
    with pytest.raises(ValueError, match="kind must be one of"):
        RouterSpec("nobody")
    with pytest.raises(ValueError, match="iterations must be an integer >= 1"):
        RouterSpec("dynamic", iterations=0)
    with pytest.raises(ValueError, match="has no option 'width'"):
        RouterSpec("halves").option("width")


def test_registering_twice_and_bad_builders():
    register_router("twice", Halves)
    try:
        register_router("twice", Halves)                                        # the same again: a module re-imported
        with pytest.raises(ValueError, match="registered already"):
            register_router("twice", UniformRouter)
        register_router("twice", UniformRouter, replace=True)
        assert router_kind("twice").build == UniformRouter.from_layer
    finally:
        unregister_router("twice")
    with pytest.raises(ValueError, match="Router subclass or a function"):
        register_router("bad", int)
    with pytest.raises(ValueError, match="must not name 'kind', 'iterations'"):
        register_router("bad", Halves, options={"iterations": 3})
    with pytest.raises(ValueError, match="must return a capsule_lab.routing.Router"):
        register_router("not a router", lambda layer, spec: torch.nn.Linear(2, 2))
        try:
            RouterSpec("not a router")(LayerInfo(2, 2, 2))
        finally:
            unregister_router("not a router")


def test_layer_info_and_the_network_seam_check_what_they_are_given():
    for bad, match in ((dict(inputs=0), "inputs must be an integer >= 1"), (dict(index=2, layers=2), "index must be"),
                       (dict(activation=3), "activation must be a function")):
        with pytest.raises(ValueError, match=match):
            LayerInfo(**{"inputs": 2, "outputs": 2, "dim": 2, **bad})
    layers = [LayerInfo(4, 4, 2, index=0, layers=2), LayerInfo(4, 3, 2, index=1, layers=2)]
    with pytest.raises(ValueError, match="router is one Router module but the network has 2 routing layers"):
        layer_routers(DynamicRouter(), layers)
    with pytest.raises(ValueError, match="router must give 2 routers"):
        layer_routers([DynamicRouter()], layers)
    make = layer_routers(["uniform", lambda layer: DynamicRouter(layer.index + 1)], layers)
    assert isinstance(make(0), UniformRouter) and make(1).iterations == 2       # built when asked, each its own
    config = DeepCapsNetConfig.quick(conv_channels=(4,), capsules=3, capsule_dim=2, routing_layers=2, squash="sabour")
    assert [(l.inputs, l.outputs, l.index, l.activation) for l in config.router_layers()] == [
        (3, 3, 0, squash), (3, 10, 1, squash)]
    net = DeepCapsNet(config, router=("uniform", "dynamic"))
    assert net.config.router == (RouterSpec("uniform"), RouterSpec("dynamic"))       # the config says how it routes
    assert CapsNet(CapsNetConfig.slim(decoder=False), router=UniformRouter()).config.router is None


def test_a_router_from_a_module_reference(tmp_path, monkeypatch):
    (tmp_path / "far_router.py").write_text("from capsule_lab.routing import UniformRouter\n"
                                            "class Far(UniformRouter):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert import_router("far_router:Far") == "far_router:Far"
        assert type(RouterSpec("far_router:Far")(LayerInfo(2, 2, 2))).__name__ == "Far"
        assert router_kind("far_router:Far").summary == "Far from far_router"
    finally:
        unregister_router("far_router:Far")
    assert type(RouterSpec("far_router:Far").build(2, 2, 2)).__name__ == "Far"  # imported again by the reference
    unregister_router("far_router:Far")
    with pytest.raises(ValueError, match="cannot import the module 'no_such_module'"):
        import_router("no_such_module:X")
    with pytest.raises(ValueError, match="has no attribute 'Missing'"):
        import_router("far_router:Missing")
    with pytest.raises(ValueError, match="must be 'module:Name'"):
        import_router("far_router")


ROUTERS = {
    "dynamic": lambda I, J, D: DynamicRouter(3),
    "pose-biased": lambda I, J, D: DynamicRouter(2, pose_bias=torch.full((J, D), 0.3)),
    "uniform": lambda I, J, D: UniformRouter(pose_bias=torch.full((J, D), -0.2)),
    "similarity": lambda I, J, D: SimilarityRouter(kernels=3, iterations=2),
    "connectionist": lambda I, J, D: ConnectionistRouter(D, hidden=4, compatibility_hidden=(4,),
                                                         activation_hidden=(4,), iterations=2),
    "self-attention": lambda I, J, D: SelfAttentionRouter(I, J),
    "a test's": lambda I, J, D: Halves(share=0.3),
}


@pytest.mark.parametrize("name", list(ROUTERS))
def test_each_routers_last_step_is_the_step_its_routing_takes(name):
    """``combine_votes`` on a router's own final couplings (and state) gives back its own output: so quantised
    inference, which runs it on the quantised couplings, changes nothing but the couplings."""
    torch.manual_seed(0)
    votes = _votes(2, 5, 4, 6, seed=1) * 0.3
    activations = torch.rand(2, 5, generator=torch.Generator().manual_seed(2))
    router = ROUTERS[name](5, 4, 6)
    with torch.no_grad():
        out = router(votes, activations)
        again = router.combine_votes(votes, out.couplings, activations, out.state)
    assert isinstance(again, RoutingResult)
    torch.testing.assert_close(again.poses, out.poses, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(again.activations, out.activations, rtol=1e-6, atol=1e-7)
