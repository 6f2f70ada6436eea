"""capsule_lab.measures.capsule_stats (chapter 04): the paper's metrics on hand-built cases and against plain loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from capsule_lab.measures.capsule_stats import (GradientTracker, activation_correlation, activation_stats, active_mask,
                                                collect_capsules, dead_mask, layer_table, perfect_routing_std,
                                                routing_dynamics, routing_dynamics_per_capsule, mean_and_sd)
from capsule_lab.models import DeepCapsNet, DeepCapsNetConfig


# ---------------------------------------------------------------- independent loop implementations

def loop_activation_stats(norms, eps, eps1, eps2):
    k, n = len(norms), len(norms[0])
    cns = sum(sum(row) for row in norms) / k
    cas = sum(sum(1 for x in row if x >= eps) for row in norms) / k
    cds = 0
    for j in range(n):
        col = [norms[i][j] for i in range(k)]
        mu = sum(col) / k
        sigma = math.sqrt(sum((x - mu) ** 2 for x in col) / k)
        cds += int(mu <= eps1 and sigma <= eps2)
    return {"cns": cns, "cnm": cns / n, "cas": cas, "car": cas / n, "cds": cds, "cdr": cds / n}


def loop_routing_dynamics(c):
    k, I, n = len(c), len(c[0]), len(c[0][0])
    pr = math.sqrt((1 - 1 / n) / n)
    dyrs = []
    for i in range(I):
        total = 0.0
        for j in range(n):
            col = [c[s][i][j] for s in range(k)]
            mu = sum(col) / k
            total += math.sqrt(sum((x - mu) ** 2 for x in col) / k) / pr
        dyrs.append(total / n)
    dyr = sum(dyrs) / I
    return {"dyr": dyr, "dys": n * dyr}


# ---------------------------------------------------------------- activation statistics

def test_constant_zero_capsule_is_dead_and_always_on_capsule_is_active():
    k = 20
    g = torch.Generator().manual_seed(0)
    norms = torch.stack([torch.zeros(k),                      # constant zero: dead
                         torch.full((k,), 0.9),                # always on
                         0.05 + 0.9 * torch.rand(k, generator=g)], dim=1)
    assert dead_mask(norms).tolist() == [True, False, False]
    active = active_mask(norms)
    assert active[:, 1].all() and not active[:, 0].any()
    stats = activation_stats(norms, active_eps=0.1, dead_mean_eps=0.01, dead_std_eps=0.01)
    assert stats["cds"] == 1 and stats["cdr"] == pytest.approx(1 / 3)
    assert stats["cnm"] == pytest.approx(stats["cns"] / 3)


def test_hand_worked_activation_stats():
    # 2 images, 3 capsules: the worked example of chapter 04's exercise
    norms = torch.tensor([[0.0, 0.5, 0.02],
                          [0.0, 0.1, 0.00]])
    s = activation_stats(norms, active_eps=0.1, dead_mean_eps=0.01, dead_std_eps=0.01)
    assert s["cns"] == pytest.approx((0.52 + 0.1) / 2)
    assert s["cas"] == pytest.approx((1 + 1) / 2)           # 0.5 and 0.1 are active (≥ ε), 0.02 is not
    assert s["car"] == pytest.approx(1 / 3)
    # capsule 3: mean 0.01 ≤ ε₁ and std 0.01 ≤ ε₂ → dead; capsule 1 dead; capsule 2 alive
    assert s["cds"] == 2


def test_dead_needs_both_mean_and_std_below_their_thresholds():
    # mean 0.005 but std 0.005 → dead at ε₂ = 0.01, alive at ε₂ = 0.001 (ddof 0: values 0, 0.01)
    norms = torch.tensor([[0.0], [0.01]])
    assert dead_mask(norms, 0.01, 0.01).item()
    assert not dead_mask(norms, 0.01, 0.001).item()
    assert not dead_mask(norms, 0.001, 0.01).item()


@pytest.mark.parametrize("seed", range(4))
def test_activation_stats_match_a_loop(seed):
    g = torch.Generator().manual_seed(seed)
    norms = torch.rand(30, 7, generator=g, dtype=torch.float64) ** 3
    norms[:, 2] *= 0.01
    eps, eps1, eps2 = 0.1, 0.02, 0.02
    mine = activation_stats(norms, eps, eps1, eps2)
    ref = loop_activation_stats(norms.tolist(), eps, eps1, eps2)
    for key in ref:
        assert mine[key] == pytest.approx(ref[key], rel=1e-12, abs=1e-12), key
    assert set(mine) == {"cns", "cnm", "cas", "car", "cds", "cdr"}


def test_activation_stats_accepts_numpy_and_checks_shapes():
    a = np.abs(np.random.default_rng(0).normal(size=(5, 4)))
    assert activation_stats(a)["cns"] == pytest.approx(a.sum(axis=1).mean())
    for bad in (torch.rand(5), torch.rand(2, 3, 4), torch.rand(0, 3), "x", torch.ones(2, 2, dtype=torch.bool)):
        with pytest.raises(ValueError, match=r"\(K images, n capsules\)"):
            activation_stats(bad)
    with pytest.raises(ValueError):
        activation_stats(torch.rand(3, 3), active_eps=-1)
    with pytest.raises(ValueError, match="finite"):
        activation_stats(torch.tensor([[float("nan")]]))


# ---------------------------------------------------------------- routing dynamics

@pytest.mark.parametrize("n", [2, 3, 10, 16])
def test_perfect_routing_has_dyr_one(n):
    k = 5 * n
    targets = torch.arange(k) % n                                  # every target equally often
    c = torch.nn.functional.one_hot(targets, n).double()           # (K, n), one target per image
    couplings = torch.stack([c, c.roll(1, dims=1)], dim=1)         # two lower capsules, both perfect
    out = routing_dynamics(couplings)
    assert out["dyr"] == pytest.approx(1.0, abs=1e-12)
    assert out["dys"] == pytest.approx(float(n), abs=1e-12)


def test_static_and_uniform_routing_have_dyr_zero():
    k, I, n = 12, 3, 5
    static = torch.nn.functional.one_hot(torch.tensor([0, 3, 1]), n).double().expand(k, I, n)
    assert routing_dynamics(static)["dyr"] == 0.0
    assert routing_dynamics(torch.full((k, I, n), 1 / n))["dys"] == 0.0


def test_half_dynamic_capsule():
    # capsule 0 routes perfectly among 4 targets, capsule 1 always to target 2: layer dyr = (1 + 0) / 2
    k, n = 8, 4
    perfect = torch.nn.functional.one_hot(torch.arange(k) % n, n).double()
    fixed = torch.nn.functional.one_hot(torch.full((k,), 2), n).double()
    c = torch.stack([perfect, fixed], dim=1)
    assert routing_dynamics_per_capsule(c).tolist() == pytest.approx([1.0, 0.0])
    assert routing_dynamics(c) == pytest.approx({"dyr": 0.5, "dys": 2.0})
    assert routing_dynamics(c, sources=torch.tensor([True, False]))["dyr"] == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(4))
def test_routing_dynamics_match_a_loop(seed):
    g = torch.Generator().manual_seed(seed)
    c = torch.softmax(3 * torch.randn(25, 6, 5, generator=g, dtype=torch.float64), dim=2)
    mine, ref = routing_dynamics(c), loop_routing_dynamics(c.tolist())
    assert mine["dyr"] == pytest.approx(ref["dyr"], rel=1e-12)
    assert mine["dys"] == pytest.approx(ref["dys"], rel=1e-12)


def test_alive_targets_reading():
    # targets 3 and 4 are never used (dead): restricted to 3 targets, the routing is perfect
    k = 9
    c = torch.zeros(k, 1, 5, dtype=torch.float64)
    c[torch.arange(k), 0, torch.arange(k) % 3] = 1.0
    alive = torch.tensor([True, True, True, False, False])
    assert routing_dynamics(c, targets=alive) == pytest.approx({"dyr": 1.0, "dys": 3.0})
    full = routing_dynamics(c)
    expected = 3 * math.sqrt((1 / 3) * (2 / 3)) / 5 / perfect_routing_std(5)
    assert full["dyr"] == pytest.approx(expected)


def test_routing_dynamics_checks_inputs():
    for bad in (torch.rand(4, 3), torch.rand(4, 3, 2, 1), torch.rand(0, 3, 2)):
        with pytest.raises(ValueError, match=r"\(K images, I, n\)"):
            routing_dynamics(bad)
    with pytest.raises(ValueError, match="n >= 2"):
        routing_dynamics(torch.ones(4, 3, 1))
    with pytest.raises(ValueError, match="bool mask"):
        routing_dynamics(torch.rand(4, 3, 2), targets=torch.ones(3, dtype=torch.bool))
    assert perfect_routing_std(2) == 0.5


# ---------------------------------------------------------------- Figure 4

def test_activation_correlation():
    a = torch.rand(10, 4, dtype=torch.float64) + 0.1
    assert activation_correlation(a, a) == pytest.approx(1.0)
    assert activation_correlation(a, 3 * a) == pytest.approx(1.0)       # a scale does not matter
    b = a.clone()
    b[:, 0] = 0.0
    loop = np.mean([float(a[:, j] @ b[:, j]) / max(float(a[:, j].norm() * b[:, j].norm()), 1e-12) for j in range(4)])
    assert activation_correlation(a, b) == pytest.approx(loop)
    with pytest.raises(ValueError, match="same shape"):
        activation_correlation(a, a[:5])


# ---------------------------------------------------------------- on a network

@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = DeepCapsNetConfig.quick(conv_channels=(4,), routing_layers=3, capsules=6, capsule_dim=4)
    model = DeepCapsNet(config)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.rand(23, 1, 28, 28, generator=g), torch.randint(0, 10, (23,), generator=g))
    return model, data


def test_collect_capsules_and_layer_table(tiny):
    model, data = tiny
    record = collect_capsules(model, data, batch_size=10)
    assert [tuple(n.shape) for n in record.norms] == [(23, 6), (23, 6), (23, 6), (23, 10)]
    assert [tuple(c.shape) for c in record.couplings] == [(23, 6, 6), (23, 6, 6), (23, 6, 10)]
    with torch.no_grad():
        out = model(data.tensors[0])
    assert torch.allclose(record.norms[2], out.capsules[2].norm(dim=-1), atol=1e-6)
    assert torch.allclose(record.couplings[1], out.couplings[1], atol=1e-6)
    assert 0.0 <= record.accuracy <= 1.0
    rows = layer_table(record)
    assert [r["layer"] for r in rows] == [1, 2, 3, 4] and rows[-1]["dyr"] is None
    assert rows[0]["cnm"] == pytest.approx(activation_stats(record.norms[0])["cnm"])
    assert rows[1]["dys"] == pytest.approx(routing_dynamics(record.couplings[1])["dys"])
    assert rows[2]["alive"] == 6 - rows[2]["cds"]


def test_gradient_tracker_matches_autograd(tiny):
    model, data = tiny
    x, y = data.tensors
    from capsule_lab.capsules import margin_loss
    with GradientTracker(model) as tracker:
        for _ in range(2):
            model.zero_grad()
            out = model(x)
            for u in out.capsules:
                u.retain_grad()
            margin_loss(out.lengths, y).backward()
        with torch.no_grad():
            model(x)                                   # not recorded: no backward pass
    h = tracker.history()
    assert [a.shape for a in h["activation"]] == [(2, 6), (2, 6), (2, 6), (2, 10)]
    assert [w.shape for w in h["weight"]] == [(2, 6), (2, 6), (2, 6)]
    for l, u in enumerate(out.capsules):
        expected = u.grad.norm(dim=-1).mean(dim=0)
        assert np.allclose(h["activation"][l][-1], expected.numpy(), rtol=1e-5, atol=1e-9)
        assert np.allclose(h["norm"][l][-1], u.detach().norm(dim=-1).mean(dim=0).numpy(), rtol=1e-5)
    for l, layer in enumerate(model.layers):
        expected = torch.stack([layer.weight.grad[i].norm() for i in range(layer.weight.shape[0])])
        assert np.allclose(h["weight"][l][-1], expected.numpy(), rtol=1e-5, atol=1e-9)
    # the hooks are gone
    model.zero_grad()
    margin_loss(model(x).lengths, y).backward()
    assert len(tracker.history()["weight"][0]) == 2


def test_theorem_2_weight_gradient_of_a_dead_capsule_vanishes():
    """Theorem 2: ∂L/∂W_(j,i) = ∂L/∂û_(i,j) u_iᵀ, so a zero capsule gets a zero W-gradient."""
    torch.manual_seed(0)
    model = DeepCapsNet(DeepCapsNetConfig.quick(conv_channels=(4,), routing_layers=2, capsules=5, capsule_dim=3))
    x = torch.rand(6, 1, 28, 28)
    u = model.primary(x).detach()
    u[:, 2] = 0.0                                                   # a dead primary capsule
    layer = model.layers[0]
    layer.zero_grad()
    layer(u).poses.norm(dim=-1).sum().backward()
    assert layer.weight.grad[2].abs().max().item() == 0.0
    assert layer.weight.grad[1].abs().max().item() > 0.0


def test_mean_and_sd_is_the_population_spread():
    assert mean_and_sd([1.0, 3.0, None]) == (2.0, 1.0)                  # ddof 0: sd of (1, 3) is 1
    assert all(math.isnan(v) for v in mean_and_sd([]))


def test_tracker_needs_a_deep_capsnet():
    with pytest.raises(ValueError, match="layers"):
        GradientTracker(torch.nn.Linear(2, 2))


# ---------------------------------------------------------------- the parse tree (capsule_lab.figures.parse_tree,
# capsule_lab.widgets.parse_tree)

def test_parse_tree_summary_figure_and_widget(tiny):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    from capsule_lab.figures import (format_layer_table, parse_tree_explorer_figure, parse_tree_figure,
                                     parse_tree_summary)
    from capsule_lab.widgets import parse_tree_explorer

    model, data = tiny
    record = collect_capsules(model, data)
    s = parse_tree_summary(record)
    assert np.allclose(s.norm_mean[1], record.norms[1].double().mean(0).numpy())
    assert np.allclose(s.norm_std[2], record.norms[2].double().std(0, correction=0).numpy())
    assert np.allclose(s.coupling_mean[0], record.couplings[0].double().mean(0).numpy())
    assert [d.shape for d in s.dead] == [(6,), (6,), (6,), (10,)]
    fig = parse_tree_figure(s, title="t")
    (edges,) = [c for c in fig.axes[0].collections if isinstance(c, LineCollection)]
    # every mean coupling above 5% of the largest is one edge
    scale = max(c.max() for c in s.coupling_mean)
    assert len(edges.get_segments()) == sum(int((c / scale > 0.05).sum()) for c in s.coupling_mean)
    plt.close(fig)
    text = format_layer_table(s.table)
    assert text.count("\n") == len(s.table) and "dys" in text
    summaries = {(3, "dynamic"): s}
    widget = parse_tree_explorer(summaries)
    assert widget.summary is s and widget.image.value[:4] == b"\x89PNG" and "cdr" in widget.table.value
    plt.close(parse_tree_explorer_figure(summaries, 3, "dynamic"))
    with pytest.raises(ValueError, match="no network"):
        parse_tree_explorer_figure(summaries, 2, "uniform")
    with pytest.raises(ValueError, match="CapsuleRecord"):
        parse_tree_summary({"norms": []})


def test_dead_capsules_are_marked_in_the_picture():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from capsule_lab.measures.capsule_stats import CapsuleRecord
    from capsule_lab.figures import parse_tree_summary, plot_parse_tree

    k = 8
    norms = [torch.rand(k, 3) + 0.2, torch.rand(k, 3) * torch.tensor([1.0, 0.0, 1.0]), torch.rand(k, 2) + 0.2]
    couplings = [torch.softmax(torch.randn(k, 3, 3), -1), torch.softmax(torch.randn(k, 3, 2), -1)]
    s = parse_tree_summary(CapsuleRecord(norms, couplings, torch.zeros(k, dtype=torch.long),
                                         torch.zeros(k, dtype=torch.long)))
    assert s.dead[1].tolist() == [False, True, False] and s.table[1]["cds"] == 1
    fig, ax = plt.subplots()
    plot_parse_tree(ax, s)
    from matplotlib.collections import PathCollection
    crosses = [c for c in ax.collections if isinstance(c, PathCollection) and c.get_offsets().shape[0] == 1]
    assert len(crosses) == 1 and tuple(crosses[0].get_offsets()[0]) == (1.0, 1.0)
    plt.close(fig)
