"""Tests for ``capsule_lab.layers`` and ``capsule_lab.models`` (chapter 02).

Votes are checked against an explicit loop of matrix–vector products, parameter counts against a count
done by hand from the layer sizes in Sabour et al. (2017), and the loss against the margin loss and the
sum of squared errors written out here.
"""

from __future__ import annotations

import pytest
import torch

from capsule_lab.capsules import squash
from capsule_lab.layers.dense import CapsuleLayer
from capsule_lab.layers.votes import capsule_votes
from capsule_lab.models import CapsNet, CapsNetConfig, CapsNetOutput, Decoder, capsnet_loss
from capsule_lab.routing import DynamicRouter, Router, RouterSpec, RoutingResult, UniformRouter, dynamic_routing


def _nparams(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ----------------------------------------------------------------------------------------- layers

def test_capsule_votes_equals_loop_of_matvecs():
    g = torch.Generator().manual_seed(0)
    B, I, J, Dout, Din = 2, 3, 4, 5, 2
    u = torch.randn(B, I, Din, generator=g, dtype=torch.float64)
    W = torch.randn(I, J, Dout, Din, generator=g, dtype=torch.float64)
    votes = capsule_votes(u, W)
    assert votes.shape == (B, I, J, Dout)
    for b in range(B):
        for i in range(I):
            for j in range(J):
                for d in range(Dout):
                    expected = sum(W[i, j, d, k].item() * u[b, i, k].item() for k in range(Din))
                    assert votes[b, i, j, d].item() == pytest.approx(expected, abs=1e-12)


def test_capsule_votes_bad_input():
    W = torch.zeros(3, 4, 5, 2)
    with pytest.raises(ValueError, match=r"\(B, I, D_in\) = \(B, 3, 2\)"):
        capsule_votes(torch.zeros(2, 3, 5), W)
    with pytest.raises(ValueError, match=r"\(B, I, D_in\)"):
        capsule_votes(torch.zeros(3, 2), W)
    with pytest.raises(ValueError, match=r"\(I, J, D_out, D_in\)"):
        capsule_votes(torch.zeros(2, 3, 2), torch.zeros(3, 4, 5))


def test_capsule_layer_shapes_and_default_router():
    torch.manual_seed(0)
    layer = CapsuleLayer(in_caps=6, in_dim=4, out_caps=3, out_dim=5).double()
    assert layer.weight.shape == (6, 3, 5, 4)
    u = torch.randn(2, 6, 4, dtype=torch.float64)
    res = layer(u)
    assert isinstance(res, RoutingResult)
    assert res.poses.shape == (2, 3, 5) and res.couplings.shape == (2, 6, 3)
    # default = dynamic routing, 3 iterations, on the explicit votes
    expected = dynamic_routing(capsule_votes(u, layer.weight), iterations=3)
    torch.testing.assert_close(res.poses, expected.poses)
    assert not torch.allclose(res.poses, dynamic_routing(capsule_votes(u, layer.weight), iterations=1).poses)


def test_capsule_layer_router_plug_in():
    torch.manual_seed(1)
    u = torch.randn(2, 5, 3, dtype=torch.float64)
    uni = CapsuleLayer(5, 3, 4, 2, router=UniformRouter()).double()
    res = uni(u)
    torch.testing.assert_close(res.couplings, torch.full((2, 5, 4), 0.25, dtype=torch.float64))
    # uniform: v_j = squash(Σ_i W_ij u_i / J), written with the loop-free but independent formula
    s = torch.einsum("ijdk,bik->bjd", uni.weight, u) / 4
    torch.testing.assert_close(res.poses, squash(s))

    dyn = CapsuleLayer(5, 3, 4, 2, router=DynamicRouter(2, detach_votes=True)).double()
    votes = capsule_votes(u, dyn.weight)
    torch.testing.assert_close(dyn(u).poses, dynamic_routing(votes, 2).poses)

    seen = {}

    class Spy(Router):
        def forward(self, v, activations=None, *, history=False):
            seen["shapes"] = tuple(v.shape), tuple(activations.shape)
            seen["activations"] = activations
            return dynamic_routing(v, 1)

    CapsuleLayer(5, 3, 4, 2, router=Spy())(u.float())
    assert seen["shapes"] == ((2, 5, 4, 2), (2, 5))
    torch.testing.assert_close(seen["activations"], u.float().norm(dim=-1))      # a_i = ‖u_i‖


def test_router_options_pass_through():
    votes = torch.randn(2, 3, 4, 2, dtype=torch.float64, requires_grad=True)
    r = DynamicRouter(2, detach_couplings=True)
    r(votes).poses.sum().backward()
    g1 = votes.grad.clone()
    votes.grad = None
    dynamic_routing(votes, 2, detach_couplings=True).poses.sum().backward()
    torch.testing.assert_close(g1, votes.grad)


def test_router_spec_unknown_kind():
    with pytest.raises(ValueError, match="kind must be one of"):
        RouterSpec("em")


# ----------------------------------------------------------------------------------------- CapsNet

def test_sabour_config_and_parameter_count():
    c = CapsNetConfig.sabour()
    assert c.primary_grid == 6  # 28 − 9 + 1 = 20; (20 − 9)//2 + 1 = 6
    assert c.primary_caps == 1152  # 6·6·32
    torch.manual_seed(0)
    net = CapsNet(c)
    conv = 1 * 256 * 81 + 256                    # 20,992
    primary = 256 * 256 * 81 + 256               # 5,308,672
    W = 1152 * 10 * 16 * 8                       # 1,474,560
    decoder = (160 * 512 + 512) + (512 * 1024 + 1024) + (1024 * 784 + 784)  # 1,411,344
    assert conv + primary + W == 6_804_224
    assert _nparams(net.conv) == conv
    assert _nparams(net.primary) == primary
    assert _nparams(net.digits) == W
    assert _nparams(net.decoder) == decoder
    # Sabour et al. (2017), Table 1: CapsNet has 8.2M parameters, 6.8M without the reconstruction network
    assert _nparams(net) == conv + primary + W + decoder == 8_215_568
    nodec = CapsNet(CapsNetConfig.sabour(decoder=False))
    assert _nparams(nodec) == 6_804_224 and nodec.decoder is None


def test_sabour_forward_shapes():
    torch.manual_seed(0)
    net = CapsNet(CapsNetConfig.sabour())
    with torch.no_grad():
        out = net(torch.rand(2, 1, 28, 28))
    assert out.primary.shape == (2, 1152, 8)
    assert out.couplings.shape == (2, 1152, 10)
    assert out.poses.shape == (2, 10, 16)
    assert out.lengths.shape == (2, 10)
    assert out.reconstruction.shape == (2, 1, 28, 28)


def test_slim_config():
    c = CapsNetConfig.slim()
    assert (c.conv_channels, c.primary_types, c.primary_caps) == (64, 4, 144)  # 6·6·4
    net = CapsNet(c)
    hand = (1 * 64 * 81 + 64) + (64 * 32 * 81 + 32) + 144 * 10 * 16 * 8 + \
        (160 * 512 + 512) + (512 * 1024 + 1024) + (1024 * 784 + 784)
    assert _nparams(net) == hand
    # changes pass through
    assert CapsNetConfig.slim(router=RouterSpec(iterations=1)).router.iterations == 1
    assert CapsNetConfig.slim(router=RouterSpec(iterations=1)).conv_channels == 64


@pytest.fixture(scope="module")
def slim_net():
    torch.manual_seed(0)
    return CapsNet(CapsNetConfig.slim()).double().eval()


def test_slim_forward(slim_net):
    torch.manual_seed(1)
    x = torch.rand(3, 1, 28, 28, dtype=torch.float64)
    with torch.no_grad():
        out = slim_net(x)
    assert isinstance(out, CapsNetOutput)
    assert out.lengths.shape == (3, 10) and out.poses.shape == (3, 10, 16)
    assert out.primary.shape == (3, 144, 8) and out.couplings.shape == (3, 144, 10)
    assert out.reconstruction.shape == (3, 1, 28, 28)
    assert ((out.lengths >= 0) & (out.lengths < 1)).all()
    assert ((out.reconstruction >= 0) & (out.reconstruction <= 1)).all()
    torch.testing.assert_close(out.lengths, out.poses.norm(dim=-1))
    torch.testing.assert_close(out.couplings.sum(-1), torch.ones(3, 144, dtype=torch.float64))
    # the pieces, recomputed step by step
    u = squash(torch.nn.functional.conv2d(torch.relu(slim_net.conv(x)), slim_net.primary.conv.weight,
                                          slim_net.primary.conv.bias, stride=2)
               .view(3, 4, 8, 6, 6).permute(0, 3, 4, 1, 2).reshape(3, 144, 8))
    torch.testing.assert_close(out.primary, u)
    routed = dynamic_routing(capsule_votes(u, slim_net.digits.weight), 3)
    torch.testing.assert_close(out.poses, routed.poses)


def test_decoder_masks_with_target(slim_net):
    torch.manual_seed(2)
    x = torch.rand(2, 1, 28, 28, dtype=torch.float64)
    targets = torch.tensor([3, 7])
    with torch.no_grad():
        out = slim_net(x, targets)
        # independent masking: zero every capsule but the target, flatten, run the MLP
        masked = torch.zeros_like(out.poses)
        masked[0, 3] = out.poses[0, 3]
        masked[1, 7] = out.poses[1, 7]
        torch.testing.assert_close(out.reconstruction, slim_net.decoder.net(masked.flatten(1)).view(2, 1, 28, 28))
        # changing a non-target capsule does not change the reconstruction; changing the target does
        poses = out.poses.clone()
        base = slim_net.decoder(poses, targets)
        poses[0, 5] += 1.0
        poses[1, 3] += 1.0
        torch.testing.assert_close(slim_net.decoder(poses, targets), base, rtol=0, atol=0)
        poses[0, 3] += 1.0
        changed = slim_net.decoder(poses, targets)
        assert not torch.allclose(changed[0], base[0])
        torch.testing.assert_close(changed[1], base[1], rtol=0, atol=0)
        # without targets: the longest capsule is kept
        out_pred = slim_net(x)
        which = out_pred.lengths.argmax(dim=1)
        torch.testing.assert_close(out_pred.reconstruction, slim_net.decoder(out_pred.poses, which))


def test_decoder_bad_input():
    dec = Decoder(10, 16, (32,), 28)
    with pytest.raises(ValueError, match=r"\(B, J, D\)"):
        dec(torch.zeros(2, 160), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"which \(B,\)"):
        dec(torch.zeros(2, 10, 16), torch.tensor([0, 1, 2]))


def test_capsnet_loss_by_hand():
    # lengths (2, 3): sample 0 label 1, sample 1 label 0
    lengths = torch.tensor([[0.2, 0.8, 0.05], [0.5, 0.3, 0.15]])
    # margin: sample 0: k=0: 0.5·(0.2−0.1)² = 0.005; k=1: (0.9−0.8)² = 0.01; k=2: 0      → 0.015
    #         sample 1: k=0: (0.9−0.5)² = 0.16; k=1: 0.5·(0.3−0.1)² = 0.02; k=2: 0.5·0.05² = 0.00125 → 0.18125
    #         mean (0.015 + 0.18125) / 2 = 0.098125
    images = torch.zeros(2, 1, 2, 2)
    recon = torch.tensor([[[[0.5, 0.0], [0.0, 0.0]]], [[[1.0, 1.0], [0.0, 0.5]]]])
    # SSE: sample 0: 0.25; sample 1: 1 + 1 + 0.25 = 2.25; mean 1.25 → 0.0005·1.25 = 0.000625
    out = CapsNetOutput(lengths, torch.zeros(2, 3, 4), torch.zeros(2, 5, 3), torch.zeros(2, 5, 8), recon)
    loss = capsnet_loss(out, images, torch.tensor([1, 0]))
    assert loss.item() == pytest.approx(0.098125 + 0.000625, abs=1e-7)
    assert capsnet_loss(out, images, torch.tensor([1, 0]), reconstruction_weight=0.0).item() == \
        pytest.approx(0.098125, abs=1e-7)
    assert capsnet_loss(out, images, torch.tensor([1, 0]), reconstruction_weight=0.1).item() == \
        pytest.approx(0.098125 + 0.125, abs=1e-6)
    # no decoder: the margin loss alone
    out_nodec = out._replace(reconstruction=None)
    assert capsnet_loss(out_nodec, images, torch.tensor([1, 0])).item() == pytest.approx(0.098125, abs=1e-7)
    with pytest.raises(ValueError, match=r"\(2, 1, 2, 2\)"):
        capsnet_loss(out, torch.zeros(2, 1, 3, 3), torch.tensor([1, 0]))


def test_capsnet_loss_on_model_output(slim_net):
    torch.manual_seed(3)
    x = torch.rand(2, 1, 28, 28, dtype=torch.float64)
    y = torch.tensor([4, 9])
    with torch.no_grad():
        out = slim_net(x, y)
        loss = capsnet_loss(out, x, y).item()
    L = out.lengths
    margin = 0.0
    for b in range(2):
        for k in range(10):
            t = 1.0 if k == y[b] else 0.0
            margin += t * max(0, 0.9 - L[b, k].item()) ** 2 + 0.5 * (1 - t) * max(0, L[b, k].item() - 0.1) ** 2
    sse = ((out.reconstruction - x) ** 2).sum().item()
    assert loss == pytest.approx(margin / 2 + 0.0005 * sse / 2, rel=1e-5)


def test_capsnet_gradients_reach_every_parameter():
    torch.manual_seed(4)
    net = CapsNet(CapsNetConfig.slim(conv_channels=8, primary_types=2, decoder_hidden=(16,)))
    x = torch.rand(2, 1, 28, 28)
    y = torch.tensor([0, 1])
    capsnet_loss(net(x, y), x, y).backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_capsnet_detach_couplings_config_changes_only_the_backward():
    """RouterSpec(detach_couplings=True): same forward, and the class-layer W gradient equals the one of
    routing with constant couplings computed independently on the materialised votes."""
    torch.manual_seed(6)
    small = dict(conv_channels=8, primary_types=2, decoder=False)
    full = CapsNet(CapsNetConfig.slim(**small)).double()
    detached = CapsNet(CapsNetConfig.slim(router=RouterSpec(detach_couplings=True), **small)).double()
    detached.load_state_dict(full.state_dict())
    x = torch.rand(3, 1, 28, 28, dtype=torch.float64)
    a, b = full(x), detached(x)
    torch.testing.assert_close(a.poses, b.poses)
    b.lengths.sum().backward()
    u = b.primary.detach()
    votes = torch.einsum("ijdk,bik->bijd", detached.digits.weight, u)
    with torch.no_grad():
        c = dynamic_routing(votes.detach(), 3).couplings
    poses = squash(torch.einsum("bij,bijd->bjd", c, votes))
    (expected,) = torch.autograd.grad(poses.norm(dim=-1).sum(), detached.digits.weight)
    torch.testing.assert_close(detached.digits.weight.grad, expected)


def test_capsnet_uniform_router_config():
    torch.manual_seed(5)
    net = CapsNet(CapsNetConfig.slim(router=RouterSpec("uniform"), conv_channels=8, primary_types=2, decoder=False))
    with torch.no_grad():
        out = net(torch.rand(2, 1, 28, 28))
    torch.testing.assert_close(out.couplings, torch.full((2, 72, 10), 0.1))
    assert out.reconstruction is None


def test_capsnet_wrong_image_shape():
    net = CapsNet(CapsNetConfig.slim(conv_channels=8, primary_types=2, decoder=False))
    with pytest.raises(ValueError, match=r"\(B, 1, 28, 28\).*\(2, 1, 32, 32\)"):
        net(torch.rand(2, 1, 32, 32))
    with pytest.raises(ValueError, match=r"\(B, 1, 28, 28\)"):
        net(torch.rand(1, 28, 28))
    with pytest.raises(ValueError, match=r"\(B, 1, 28, 28\)"):
        net(torch.rand(2, 3, 28, 28))
    with pytest.raises(ValueError, match="too small"):
        CapsNet(CapsNetConfig.slim(image_size=12))
