"""capsule_lab.models.conv_capsnet (chapter 07): Faria's convolutional capsule network (Table 1). The parameter count
against the paper's 86K (Table 1 summed by hand), the grids, a convolutional capsule layer against a loop over
output positions, the class layer's own W per input, the default routers (Sabour's, from the config's router spec)
against dynamic_routing, the routers of Table 2, gradients into every part with each router kind, and bad input."""

from __future__ import annotations

import pytest
import torch

from capsule_lab.models import ClassCapsuleLayer, ConvCapsNet, ConvCapsNetConfig, ConvCapsuleLayer, paper_routers
from capsule_lab.routing import ConnectionistRouter, DynamicRouter, RouterSpec, SimilarityRouter, dynamic_routing


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------------ sizes

def table1_count(in_channels, classes, class_inputs, A=64, B=8, C=16, D=16):
    """Table 1 by hand: conv 5×5 (+ bias), BatchNorm (γ, β), two 1×1 convs (+ bias), the 4×4 W's."""
    conv = A * in_channels * 5 * 5 + A
    batch_norm = 2 * A
    primary = (A * B * 16 + B * 16) + (A * B + B)
    caps1 = 3 * 3 * B * C * 4 * 4
    caps2 = 3 * 3 * C * D * 4 * 4
    class_caps = class_inputs * classes * 4 * 4
    return conv + batch_norm + primary + caps1 + caps2 + class_caps


def test_parameter_count_is_the_papers_86k_on_smallnorb_and_the_hand_sum_on_mnist():
    norb = ConvCapsNet(ConvCapsNetConfig.paper(image_size=32, in_channels=1, classes=5))
    # 1664 + 128 + 8320 + 520 + 18432 + 36864 + 20480: "86K parameters, excluding ... the routing procedures"
    assert table1_count(1, 5, 4 * 4 * 16) == 86_408
    assert norb.parameter_counts() == {"backbone": 86_408, "routers": 0}
    assert sum(p.numel() for p in norb.parameters()) == 86_408          # dynamic routers have no parameters
    mnist = ConvCapsNet(ConvCapsNetConfig.paper(), paper_routers("similarity"))
    assert mnist.parameter_counts()["backbone"] == table1_count(1, 10, 3 * 3 * 16) == 88_968
    routers = sum(p.numel() for r in mnist.routers() for p in r.parameters())
    assert mnist.parameter_counts()["routers"] == routers == sum(p.numel() for p in mnist.routing_parameters())
    # λ1, λ2, θ per capsule type (16) in the conv layers, one set in the class layer; ℓ and w of Q = 4, 4, 10
    assert routers == 2 * 16 * (1 + 1 + 3) + (1 + 1 + 3) + 2 * 4 * 2 + 10 * 2 == 201
    assert sum(p.numel() for p in mnist.parameters()) == 88_968 + routers


def test_grids_and_output_shapes():
    assert ConvCapsNetConfig.paper().grids == (12, 5, 3)
    assert ConvCapsNetConfig.paper(32, 1, 5).grids == (14, 6, 4)
    assert ConvCapsNetConfig.paper(32, 1, 5).class_inputs == 256 and ConvCapsNetConfig.paper().primary_caps == 1152
    for config, (g0, g1, g2) in ((ConvCapsNetConfig.slim(), (12, 5, 3)),
                                 (ConvCapsNetConfig.slim(image_size=32, in_channels=2, classes=5), (14, 6, 4))):
        torch.manual_seed(0)
        out = ConvCapsNet(config)(torch.rand(2, config.in_channels, config.image_size, config.image_size))
        K = config.classes
        assert out.activations.shape == (2, K) and out.poses.shape == (2, K, 16) and out.scores is out.activations
        assert out.couplings.shape == (2, g2 * g2 * 8, K) and not hasattr(out, "reconstruction")
        assert out.primary.shape == (2, g0 * g0 * 4, 16) and out.primary_activations.shape == (2, g0 * g0 * 4)
        assert [tuple(c.shape) for c in out.layer_couplings] == [(2, g1, g1, 9 * 4, 8), (2, g2, g2, 9 * 8, 8),
                                                                 (2, g2 * g2 * 8, K)]
        assert [tuple(a.shape) for a in out.layer_activations] == [(2, g1, g1, 8), (2, g2, g2, 8)]
        # dynamic routing: couplings sum to 1 over the outputs, activations are the pose lengths
        torch.testing.assert_close(out.couplings.sum(-1), torch.ones(2, g2 * g2 * 8))
        torch.testing.assert_close(out.activations, out.poses.norm(dim=-1), atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------------------------- the layers by hand

def test_conv_capsule_layer_equals_a_loop_over_positions():
    torch.manual_seed(0)
    T, J, K, S = 3, 4, 3, 2
    router = SimilarityRouter(kernels=4, iterations=2).double()
    layer = ConvCapsuleLayer(T, J, K, S, router, init_std=0.5).double()
    poses = torch.randn(2, 7, 9, T, 16, generator=gen(1), dtype=torch.float64) * 0.3
    activations = torch.rand(2, 7, 9, T, generator=gen(2), dtype=torch.float64)
    out = layer(poses, activations)
    H1, W1 = (7 - K) // S + 1, (9 - K) // S + 1
    assert out.poses.shape == (2, H1, W1, J, 16) and out.couplings.shape == (2, H1, W1, K * K * T, J)
    W = layer.weight.detach()                                                     # (K, K, T, J, 4, 4)
    for b in range(2):
        for y in range(H1):
            for x in range(W1):
                votes, acts = [], []
                for ky in range(K):
                    for kx in range(K):
                        for t in range(T):
                            P = poses[b, y * S + ky, x * S + kx, t].reshape(4, 4)
                            acts.append(activations[b, y * S + ky, x * S + kx, t])
                            votes.append(torch.stack([
                                (torch.matmul(W[ky, kx, t, j], P) / (torch.linalg.norm(W[ky, kx, t, j]) + 1e-6))
                                .reshape(16) for j in range(J)]))
                expected = router(torch.stack(votes)[None], torch.stack(acts)[None])
                torch.testing.assert_close(out.poses[b, y, x], expected.poses[0], rtol=1e-10, atol=1e-12)
                torch.testing.assert_close(out.activations[b, y, x], expected.activations[0], rtol=1e-10, atol=1e-12)
                torch.testing.assert_close(out.couplings[b, y, x], expected.couplings[0], rtol=1e-10, atol=1e-12)
    # the input activations matter to similarity routing (so the loop above checks they were gathered right)
    other = layer(poses, activations.flip(1))
    assert not torch.allclose(other.activations, out.activations)


def test_class_layer_has_its_own_w_per_input():
    torch.manual_seed(0)
    layer = ClassCapsuleLayer(6, 3, DynamicRouter()).double()
    poses = torch.randn(2, 6, 16, generator=gen(3), dtype=torch.float64)
    before = layer.votes(poses)
    with torch.no_grad():
        layer.weight[4] += torch.randn(3, 4, 4, generator=gen(4), dtype=torch.float64)
    after = layer.votes(poses)
    changed = (after - before).abs().flatten(2).amax(-1).amax(0) > 1e-9      # per input capsule
    assert changed.tolist() == [False, False, False, False, True, False]
    # eq. 1: the vote of input 4 for class 1 is W P / ‖W‖_F, and a scaled W votes the same
    W = layer.weight[4, 1].detach()
    expected = (W @ poses[0, 4].reshape(4, 4)) / (torch.linalg.norm(W) + 1e-6)
    torch.testing.assert_close(after[0, 4, 1], expected.reshape(16))
    with torch.no_grad():
        layer.weight.mul_(7.0)
    torch.testing.assert_close(layer.votes(poses), after, rtol=1e-4, atol=1e-6)   # up to eps = 1e-6


def test_the_default_routers_are_sabours_and_ignore_the_input_activations():
    votes = torch.randn(3, 7, 4, 16, generator=gen(5), dtype=torch.float64) * 0.4
    for r in (1, 2, 3, 5):
        router = paper_routers("dynamic", r)[0]
        ours = router(votes, torch.rand(3, 7, generator=gen(6), dtype=torch.float64))   # ignored
        theirs = dynamic_routing(votes, r)
        torch.testing.assert_close(ours.poses, theirs.poses)
        torch.testing.assert_close(ours.couplings, theirs.couplings)
        torch.testing.assert_close(ours.activations, theirs.poses.norm(dim=-1))
        torch.testing.assert_close(router(votes).poses, ours.poses)
    net = ConvCapsNet(ConvCapsNetConfig.slim())
    assert all(isinstance(r, DynamicRouter) and r.iterations == 3 for r in net.routers())
    assert net.config.router == RouterSpec() and not net.routing_parameters()


def test_paper_routers_have_table2_and_kernel_sizes():
    dynamic = paper_routers("dynamic")
    assert all(isinstance(r, DynamicRouter) and r.iterations == 3 for r in dynamic)
    similarity = paper_routers("similarity", iterations=2)
    assert [r.mixing_logits.shape[0] for r in similarity] == [4, 4, 10]              # Q = 4, 4, 10
    assert [r.iterations for r in similarity] == [2, 2, 2]
    # §4.1: λ1, λ2, θ distinct for each channel of a convolutional routing layer; one set in the class layer
    assert [r.channels for r in similarity] == [16, 16, None]
    assert similarity[0].lam1.shape == (16,) and similarity[1].theta.shape == (3, 16) and similarity[2].lam2.dim() == 0
    assert [r.channels for r in paper_routers("similarity", config=ConvCapsNetConfig.slim())] == [8, 8, None]
    with pytest.raises(ValueError, match="channels=16 but routes to 8 capsule types"):
        ConvCapsNet(ConvCapsNetConfig.slim(), paper_routers("similarity"))
    with pytest.raises(ValueError, match="ConvCapsNetConfig"):
        paper_routers("similarity", config="paper")
    connectionist = paper_routers("connectionist")
    # Table 2: f_c hidden [], [32, 32], [64, 64]; f_a hidden [], [64, 64], [124, 124]; LSTM 16 units
    f_c = [[(16, 1)], [(16, 32), (32, 32), (32, 1)], [(16, 64), (64, 64), (64, 1)]]
    f_a = [[(16, 1)], [(16, 64), (64, 64), (64, 1)], [(16, 124), (124, 124), (124, 1)]]
    for router, c_sizes, a_sizes in zip(connectionist, f_c, f_a):
        assert isinstance(router, ConnectionistRouter) and router.iterations == 3 and router.pose_dim == 16
        assert router.cell.hidden_size == 16 and router.cell.input_size == 2 * 16 + 2
        linear = lambda net: [(m.in_features, m.out_features) for m in net if isinstance(m, torch.nn.Linear)]
        assert linear(router.compatibility_net) == c_sizes and linear(router.activation_net) == a_sizes
        assert isinstance(router.activation_net[-1], torch.nn.Sigmoid)
    with pytest.raises(ValueError, match="dynamic.*similarity.*connectionist"):
        paper_routers("em")
    assert paper_routers(RouterSpec("similarity", iterations=2))[0].iterations == 2


# ------------------------------------------------------------------------------------------- training

@pytest.mark.parametrize("kind", ["dynamic", "similarity", "connectionist"])
def test_gradients_reach_every_part(kind):
    torch.manual_seed(0)
    model = ConvCapsNet(ConvCapsNetConfig.slim(), paper_routers(kind, config=ConvCapsNetConfig.slim()))
    images, targets = torch.rand(2, 1, 28, 28, generator=gen(7)), torch.tensor([3, 7])
    loss = model.loss(model(images), images, targets)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    parts = [model.conv.weight, model.norm.weight, model.primary_poses.weight, model.caps1.weight,
             model.caps2.weight, model.class_caps.weight, *model.routing_parameters()]
    if kind != "dynamic":        # dynamic routing ignores the input activations, so the primary ones get none
        parts.append(model.primary_activations.weight)
    for p in parts:
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
    assert len(model.routing_parameters()) == {"dynamic": 0, "similarity": 3 * 5, "connectionist": 3 * 4 + 2 * 2 + 4 * 6
                                              }[kind]   # LSTM 4 tensors; f_c, f_a 1 or 3 linear layers each


def test_a_training_step_on_cpu_under_autocast():
    torch.manual_seed(0)
    model = ConvCapsNet(ConvCapsNetConfig.slim(), paper_routers("similarity", config=ConvCapsNetConfig.slim()))
    images = torch.rand(2, 1, 28, 28, generator=gen(8))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(images)
    loss = model.loss(out, images, torch.tensor([0, 1]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(model.class_caps.weight.grad).all()


# ------------------------------------------------------------------------------------------ bad input

def test_bad_input_is_refused():
    model = ConvCapsNet(ConvCapsNetConfig.slim())
    with pytest.raises(ValueError, match=r"images must have shape \(B, 1, 28, 28\)"):
        model(torch.rand(2, 1, 32, 32))
    with pytest.raises(ValueError, match=r"images must have shape \(B, 1, 28, 28\)"):
        model(torch.rand(2, 3, 28, 28))
    with pytest.raises(ValueError, match="router must be a kind's name, a RouterSpec, a factory"):
        ConvCapsNet(ConvCapsNetConfig.slim(), [DynamicRouter(), object(), DynamicRouter()])
    with pytest.raises(ValueError, match="pose_dim must be 16"):
        ConvCapsNet(ConvCapsNetConfig.slim(), [DynamicRouter(), DynamicRouter(), ConnectionistRouter(8)])
    with pytest.raises(ValueError, match="router must give 3 routers"):
        ConvCapsNet(ConvCapsNetConfig.slim(), paper_routers("dynamic")[:2])
    with pytest.raises(ValueError, match="too small"):
        ConvCapsNetConfig.paper(image_size=12)
    for changes, match in (({"conv_channels": 0}, "conv_channels"), ({"classes": 1}, "classes"),
                           ({"caps1_stride": 1.5}, "caps1_stride"), ({"init_std": -1.0}, "init_std")):
        with pytest.raises(ValueError, match=match):
            ConvCapsNetConfig.slim(**changes)
    layer = ConvCapsuleLayer(3, 4, 3, 1, DynamicRouter())
    with pytest.raises(ValueError, match="poses must have shape"):
        layer(torch.rand(1, 5, 5, 2, 16), torch.rand(1, 5, 5, 2))
    with pytest.raises(ValueError, match="activations must have shape"):
        layer(torch.rand(1, 5, 5, 3, 16), torch.rand(1, 5, 5, 4))
