"""capsule_lab.layers.ladder (chapter 06): the pruning layer against a sort written here, the code vector of the
paper's Figure 2, eqs. 1–4 against loops, γ from exp(−0.01γ) = 0.95, the loss against its formula, and the
ladder layer's shapes and gradients (gradcheck in float64; the choices the paper leaves open, tested)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call

from capsule_lab.layers import ladder
from capsule_lab.capsules import squash
from capsule_lab.layers.ladder import (EPSILON, GAMMA, CodeMLP, CodeWeights, LadderLayer, PruningLayer,
                                       capsule_activity, code_vector, ladder_activation, ladder_loss, ladder_poses,
                                       propagate, regress, regressed_capsules, solve_gamma, table1_widths,
                                       top_k_capsules)


def reference_top_k(u: torch.Tensor, k: int) -> list[list[int]]:
    """The kept indices per sample: sort by (−length, index), take k, put them in ascending order."""
    lengths = [[math.sqrt(sum(x * x for x in cap)) for cap in sample] for sample in u.tolist()]
    return [sorted(sorted(range(len(a)), key=lambda i: (-a[i], i))[:k]) for a in lengths]


# ----------------------------------------------------------------------------------------- pruning layer

@pytest.mark.parametrize("k", [1, 3, 7, 10])
def test_top_k_against_a_sort(k):
    u = torch.randn(4, 10, 3, generator=torch.Generator().manual_seed(k), dtype=torch.float64)
    selected, code, indices = top_k_capsules(u, k)
    expected = reference_top_k(u, k)
    assert indices.tolist() == expected
    assert selected.shape == (4, k, 3) and code.shape == (4, 10) and indices.shape == (4, k)
    for b, idx in enumerate(expected):
        assert torch.equal(selected[b], u[b, idx])                     # rows in ascending index order
        assert code[b].tolist() == [1.0 if i in idx else 0.0 for i in range(10)]
    assert code.dtype == u.dtype


def test_top_k_with_k_equal_to_n_keeps_everything_in_order():
    u = torch.randn(2, 5, 4)
    selected, code, indices = top_k_capsules(u, 5)
    assert torch.equal(selected, u) and torch.equal(code, torch.ones(2, 5))
    assert indices.tolist() == [list(range(5))] * 2


def test_top_k_ties_keep_the_lower_index():
    # capsules along the axes, so their lengths are exactly the numbers written here
    lengths = [0.5, 0.9, 0.5, 0.9, 0.1, 0.5]
    u = torch.zeros(1, 6, 2)
    for i, a in enumerate(lengths):
        u[0, i, i % 2] = a
    assert capsule_activity(u)[0].tolist() == pytest.approx(lengths)
    assert top_k_capsules(u, 1).indices.tolist() == [[1]]
    assert top_k_capsules(u, 2).indices.tolist() == [[1, 3]]
    assert top_k_capsules(u, 3).indices.tolist() == [[0, 1, 3]]            # 0.5 at 0, 2, 5: index 0 wins
    assert top_k_capsules(u, 4).indices.tolist() == [[0, 1, 2, 3]]
    assert top_k_capsules(u, 5).indices.tolist() == [[0, 1, 2, 3, 5]]
    assert top_k_capsules(u, 3).indices.tolist() == reference_top_k(u, 3)
    equal = torch.ones(1, 6, 2)                                               # all tied: the first k
    assert top_k_capsules(equal, 4).indices.tolist() == [[0, 1, 2, 3]]


def test_code_vector_of_figure_2():
    # n = 6, K = 3, u1, u4, u6 kept → c = (1, 0, 0, 1, 0, 1)
    assert code_vector(torch.tensor([[0, 3, 5]]), 6).tolist() == [[1, 0, 0, 1, 0, 1]]
    assert code_vector(torch.tensor([[5, 0, 3]]), 6, dtype=torch.float64).dtype == torch.float64
    u = torch.zeros(1, 6, 2)
    u[0, [0, 3, 5], 0] = torch.tensor([0.7, 0.8, 0.9])
    assert top_k_capsules(u, 3).code.tolist() == [[1, 0, 0, 1, 0, 1]]


def test_gradient_reaches_only_the_kept_capsules_and_never_the_code():
    u = torch.randn(3, 8, 4, requires_grad=True)
    selected, code, indices = top_k_capsules(u, 3)
    assert not code.requires_grad and not indices.requires_grad
    (selected * torch.randn_like(selected)).sum().backward()
    kept = code.bool()
    assert (u.grad[~kept] == 0).all()
    assert (u.grad[kept].abs().sum(dim=-1) > 0).all()
    assert torch.equal(PruningLayer(3)(u).indices, indices)


@pytest.mark.parametrize("u, k, message", [
    (torch.randn(8, 4), 2, r"u must have shape \(B, n, d\)"),
    (torch.ones(2, 8, 4, dtype=torch.long), 2, "floating-point"),
    (torch.randn(2, 0, 4), 1, "no empty dimension"),
    ([[1.0]], 1, "must be a tensor"),
    (torch.randn(2, 8, 4), 0, r"k must be an integer in \[1, n\] = \[1, 8\]"),
    (torch.randn(2, 8, 4), 9, r"k must be an integer in \[1, n\] = \[1, 8\]"),
    (torch.randn(2, 8, 4), 2.0, "k must be an integer"),
    (torch.randn(2, 8, 4), True, "k must be an integer"),
])
def test_top_k_refuses(u, k, message):
    with pytest.raises(ValueError, match=message):
        top_k_capsules(u, k)


@pytest.mark.parametrize("indices, n, message", [
    (torch.tensor([[0, 0, 1]]), 4, "distinct"),
    (torch.tensor([[0, 4]]), 4, r"in \[0, n\) = \[0, 4\)"),
    (torch.tensor([[-1, 2]]), 4, r"in \[0, n\)"),
    (torch.tensor([[0.0, 1.0]]), 4, "integer tensor"),
    (torch.tensor([0, 1]), 4, r"indices must have shape \(B, K\)"),
    (torch.tensor([[0, 1]]), 0, "n must be an integer >= 1"),
])
def test_code_vector_refuses(indices, n, message):
    with pytest.raises(ValueError, match=message):
        code_vector(indices, n)


# ------------------------------------------------------------------------------------------------- γ

def test_gamma_solves_the_papers_equation():
    gamma = solve_gamma(0.01, 0.95)
    assert gamma == pytest.approx(-math.log(0.95) / 0.01) == pytest.approx(5.129329438755)
    assert math.exp(-0.01 * gamma) == pytest.approx(0.95, abs=1e-15)
    assert solve_gamma() == gamma
    assert GAMMA == 5.12 and round(math.exp(-0.01 * GAMMA), 2) == 0.95            # the paper's rounding
    assert solve_gamma(0.5, 0.5) == pytest.approx(2 * math.log(2))
    assert solve_gamma(0.1, 1.0) == 0.0


@pytest.mark.parametrize("distance, activity", [(0, 0.95), (-0.1, 0.95), (0.01, 0), (0.01, 1.5), (0.01, True)])
def test_gamma_refuses(distance, activity):
    with pytest.raises(ValueError):
        solve_gamma(distance, activity)


# ----------------------------------------------------------------------------------------- eq. 4, by hand

def test_activation_by_hand():
    u_reg = torch.tensor([[0.1, 0.0], [0.0, 0.0]])
    u_k = torch.tensor([[0.0, 0.0], [0.0, 0.2]])
    # squared distances 0.01 and 0.04, mean 0.025: d = exp(−5.12 · 0.025) = exp(−0.128)
    assert ladder_activation(u_reg, u_k).item() == pytest.approx(math.exp(-0.128), rel=1e-6)
    assert ladder_activation(u_reg, u_k, gamma=2.0).item() == pytest.approx(math.exp(-0.05), rel=1e-6)
    assert ladder_activation(u_reg, u_reg).item() == 1.0
    assert ladder_activation(u_reg, u_k, gamma=0).item() == 1.0
    # one row off by 0.1 out of K = 1: mean squared error 0.01 → 0.95 (the paper's calibration)
    assert ladder_activation(torch.tensor([[0.1, 0.0]]), torch.zeros(1, 2)).item() == pytest.approx(
        math.exp(-0.0512), rel=1e-6)


def test_activation_broadcasts_over_leading_dims():
    g = torch.Generator().manual_seed(1)
    u_reg = torch.randn(3, 4, 5, 2, generator=g, dtype=torch.float64)           # (B, J, K, d)
    u_k = torch.randn(3, 5, 2, generator=g, dtype=torch.float64)                # (B, K, d)
    d = ladder_activation(u_reg, u_k.unsqueeze(1), gamma=0.7)
    assert d.shape == (3, 4)
    for b in range(3):
        for j in range(4):
            mse = sum(float(((u_reg[b, j, i] - u_k[b, i]) ** 2).sum()) for i in range(5)) / 5
            assert d[b, j].item() == pytest.approx(math.exp(-0.7 * mse), rel=1e-12)


@pytest.mark.parametrize("u_reg, u_k, gamma, message", [
    (torch.randn(3), torch.randn(3), GAMMA, r"u_reg must have shape \(\.\.\., K, d\)"),
    (torch.randn(2, 3), torch.randn(3, 3), GAMMA, r"u_k must have shape \(\.\.\., K, d\) = \(\.\.\., 2, 3\)"),
    (torch.randn(4, 2, 3), torch.randn(3, 2, 3), GAMMA, "broadcastable"),
    (torch.randn(2, 3), torch.randn(2, 3), -1.0, "gamma must be a number >= 0"),
    (torch.ones(2, 3, dtype=torch.long), torch.randn(2, 3), GAMMA, "floating-point"),
])
def test_activation_refuses(u_reg, u_k, gamma, message):
    with pytest.raises(ValueError, match=message):
        ladder_activation(u_reg, u_k, gamma)


# ------------------------------------------------------------------------------------- eqs. 1–3, by loops

def _toy(B=2, J=3, K=4, d=2, D=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return r(B, K, d), r(B, J, K, d, D), torch.rand(B, J, K, generator=g, dtype=torch.float64), r(B, J, K, d, D)


def test_propagation_against_a_loop():
    u, f, p, _ = _toy()
    s = propagate(u, f, p)
    assert s.shape == (2, 3, 5)
    for b in range(2):
        for j in range(3):
            expected = sum(p[b, j, i] * (u[b, i] @ f[b, j, i]) for i in range(4))     # Σ_i p_{j|i} u_i f_{j|i}
            torch.testing.assert_close(s[b, j], expected, rtol=1e-12, atol=1e-12)


def test_regression_against_a_loop():
    _, _, _, f_reg = _toy()
    s = torch.randn(2, 3, 5, dtype=torch.float64)
    u_hat = regress(s, f_reg)
    assert u_hat.shape == (2, 3, 4, 2)
    for b in range(2):
        for j in range(3):
            for i in range(4):
                torch.testing.assert_close(u_hat[b, j, i], f_reg[b, j, i] @ s[b, j], rtol=1e-12, atol=1e-12)


def test_eq3_squashes_each_row_not_the_matrix():
    _, _, _, f_reg = _toy()
    s = torch.randn(2, 3, 5, dtype=torch.float64)
    u_reg = regressed_capsules(s, f_reg)
    u_hat = regress(s, f_reg)
    for b in range(2):
        for j in range(3):
            for i in range(4):
                r = u_hat[b, j, i]
                n2 = float(r @ r)
                torch.testing.assert_close(u_reg[b, j, i], n2 / (1 + n2) * r / math.sqrt(n2))
    assert (u_reg.norm(dim=-1) < 1).all()
    whole = u_hat[0, 0].flatten()                                          # the matrix as one vector: different
    assert not torch.allclose(u_reg[0, 0].flatten(), squash(whole))


def test_poses_have_the_activity_as_length_and_the_partial_pose_as_direction():
    s = torch.tensor([[[3.0, 4.0], [0.0, 0.0]]])
    d = torch.tensor([[0.5, 0.8]])
    v = ladder_poses(s, d)
    torch.testing.assert_close(v[0, 0], torch.tensor([0.3, 0.4]))
    assert torch.equal(v[0, 1], torch.zeros(2))                          # s = 0: finite, zero


@pytest.mark.parametrize("call, message", [
    (lambda u, f, p, fr: propagate(u[:, :3], f, p), r"selected must have shape \(B, K, d\) = \(2, 4, 2\)"),
    (lambda u, f, p, fr: propagate(u, f, p[:, :2]), r"contributions must have shape \(B, J, K\) = \(2, 3, 4\)"),
    (lambda u, f, p, fr: propagate(u, f[0], p), r"propagation must have shape \(B, J, K, d, D\)"),
    (lambda u, f, p, fr: regress(torch.randn(2, 3, 4, dtype=torch.float64), fr),
     r"partial must have shape \(B, J, D\) = \(2, 3, 5\)"),
    (lambda u, f, p, fr: ladder_poses(torch.randn(2, 3, 5), torch.rand(2, 4)),
     r"activities must have shape \(B, J\) = \(2, 3\)"),
])
def test_equations_refuse_wrong_shapes(call, message):
    with pytest.raises(ValueError, match=message):
        call(*_toy())


# ------------------------------------------------------------------------------------------------ loss

def test_loss_against_its_formula():
    g = torch.Generator().manual_seed(3)
    d = torch.rand(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0, 2, 1, 2])
    code = code_vector(torch.tensor([[0, 2], [1, 4], [0, 1], [3, 4]]), 5, dtype=torch.float64)
    A = torch.rand(4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    loss = ladder_loss(d, targets, code, A)
    expected = 0.0
    for b in range(4):
        for j in range(3):
            a = d[b, j].item()
            expected += (max(0, 0.9 - a) ** 2 if j == targets[b] else 0.5 * max(0, a - 0.1) ** 2) / 4
        expected += EPSILON * sum((code[b, i].item() - A[b, i].item()) ** 2 for i in range(5)) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert ladder_loss(d, targets, code, A, epsilon=0.5).item() == pytest.approx(
        expected + (0.5 - EPSILON) * ((code - A) ** 2).sum().item() / 4, rel=1e-12)
    loss.backward()
    torch.testing.assert_close(A.grad, -2 * EPSILON * (code - A.detach()) / 4)   # ∂/∂A of ε‖c − A‖² / B


@pytest.mark.parametrize("call, message", [
    (lambda d, t, c, a: ladder_loss(d, t, c, a[:, :4]), r"primary_activities must have shape \(B, n\) = \(2, 5\)"),
    (lambda d, t, c, a: ladder_loss(d[:1], t, c, a), r"activities must have shape \(B, J\) = \(2, J\)"),
    (lambda d, t, c, a: ladder_loss(d, t, c[0], a), r"code must have shape \(B, n\)"),
    (lambda d, t, c, a: ladder_loss(d, t, c, a, epsilon=-1), "epsilon must be a number >= 0"),
    (lambda d, t, c, a: ladder_loss(d, torch.tensor([0, 3]), c, a), r"labels must lie in \[0, 3\)"),
])
def test_loss_refuses(call, message):
    with pytest.raises(ValueError, match=message):
        call(torch.rand(2, 3), torch.tensor([0, 1]), torch.zeros(2, 5), torch.rand(2, 5))


# ------------------------------------------------------------------------------------ weight construction

def test_table1_widths():
    assert table1_widths(8, 16, 70) == ((384, 256, 128), (210, 140, 70))
    assert table1_widths(8, 16, 50) == ((384, 256, 128), (150, 100, 50))
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        table1_widths(8, 16, 0)


def test_code_mlp_is_j_separate_networks():
    torch.manual_seed(0)
    net = CodeMLP(6, classes=3, widths=(5, 4), out_features=2, output="sigmoid").double()
    c = code_vector(torch.tensor([[0, 2], [1, 5]]), 6, dtype=torch.float64)
    out = net(c)
    assert out.shape == (2, 3, 2) and (out > 0).all() and (out < 1).all()
    W1, b1 = net.first.weight.view(3, 5, 6), net.first.bias.view(3, 5)
    for j in range(3):                                                        # class j's network by hand
        h = torch.relu(c @ W1[j].T + b1[j])
        h = torch.relu(h @ net.weights[0][j] + net.biases[0][j])
        torch.testing.assert_close(out[:, j], torch.sigmoid(h @ net.weights[1][j] + net.biases[1][j]))
    with torch.no_grad():                                                     # class 0's weights touch only class 0
        net.weights[1][0].add_(1.0)
    changed = net(c)
    assert not torch.allclose(changed[:, 0], out[:, 0]) and torch.equal(changed[:, 1:], out[:, 1:])
    linear = CodeMLP(6, 3, (5,), 2, "linear")
    assert linear(c.float()).shape == (2, 3, 2)
    with pytest.raises(ValueError, match="output must be 'linear' or 'sigmoid'"):
        CodeMLP(6, 3, (5,), 2, "relu")
    with pytest.raises(ValueError, match="widths must be a non-empty tuple"):
        CodeMLP(6, 3, (), 2)
    with pytest.raises(ValueError, match=r"code must have shape \(B, n\) = \(B, 6\)"):
        net(torch.zeros(2, 5, dtype=torch.float64))


def test_code_weights_have_table1_shapes():
    w = CodeWeights(n=20, k=5, in_dim=2, out_dim=3, classes=4)
    (f_widths, p_widths) = table1_widths(2, 3, 5)
    assert w.propagation.widths == f_widths == w.regression.widths and w.contribution.widths == p_widths
    assert w.propagation.output == "linear" == w.regression.output and w.contribution.output == "sigmoid"
    assert w.propagation.weights[-1].shape == (4, f_widths[-1], 5 * 2 * 3)       # 4th layer: K·d·D per class
    f, p, f_reg = w(code_vector(torch.tensor([[0, 3, 5, 7, 19]] * 2), 20))
    assert f.shape == f_reg.shape == (2, 4, 5, 2, 3) and p.shape == (2, 4, 5)
    assert ((p > 0) & (p < 1)).all()
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, n\] = \[1, 20\]"):
        CodeWeights(n=20, k=21, in_dim=2, out_dim=3)


# ------------------------------------------------------------------------------------------- ladder layer

def _layer(seed=0, n=7, k=3, d=2, J=2, D=3):
    torch.manual_seed(seed)
    return LadderLayer(n, k, in_dim=d, classes=J, out_dim=D, widths=(6, 5), contribution_widths=(4,)).double()


def test_ladder_layer_against_the_equations_written_out():
    layer = _layer()
    u = torch.randn(2, 7, 2, dtype=torch.float64)
    selected, code, _ = top_k_capsules(u, 3)
    out = layer(selected, code)
    assert out.activities.shape == (2, 2) and out.poses.shape == (2, 2, 3) and out.partial.shape == (2, 2, 3)
    assert out.regressed.shape == (2, 2, 3, 2) and out.contributions.shape == (2, 2, 3)
    f, p, f_reg = layer.weights(code)
    for b in range(2):
        for j in range(2):
            s = sum(p[b, j, i] * (selected[b, i] @ f[b, j, i]) for i in range(3))                      # eq. 1
            rows = [f_reg[b, j, i] @ s for i in range(3)]                                              # eq. 2
            rows = [r * (r @ r) / (1 + r @ r) / torch.sqrt(r @ r) for r in rows]                       # eq. 3
            mse = sum(((rows[i] - selected[b, i]) ** 2).sum() for i in range(3)) / 3
            d = torch.exp(-GAMMA * mse)                                                                # eq. 4
            torch.testing.assert_close(out.partial[b, j], s)
            torch.testing.assert_close(out.regressed[b, j], torch.stack(rows))
            torch.testing.assert_close(out.activities[b, j], d)
            torch.testing.assert_close(out.poses[b, j], d * s / s.norm())
    assert ((out.activities > 0) & (out.activities <= 1)).all()
    torch.testing.assert_close(out.poses.norm(dim=-1), out.activities)


def test_ladder_layer_gradcheck_float64():
    layer = _layer(seed=1)
    u = torch.randn(2, 7, 2, dtype=torch.float64, requires_grad=True)

    def through_the_layer(u):
        out = layer(*top_k_capsules(u, 3)[:2])
        return out.activities, out.poses

    assert torch.autograd.gradcheck(through_the_layer, (u,), eps=1e-6, atol=1e-6)
    params = dict(layer.named_parameters())
    last = "weights.regression.weights.1"
    code = top_k_capsules(u.detach(), 3)

    def through_a_weight(w):
        return functional_call(layer, {**params, last: w}, (code.selected, code.code)).activities

    assert torch.autograd.gradcheck(through_a_weight, (params[last].detach().clone().requires_grad_(),),
                                    eps=1e-6, atol=1e-6)


def test_every_weight_learns_and_dropped_capsules_learn_only_from_the_code_term():
    layer = _layer(seed=2)
    u = squash(torch.randn(4, 7, 2, dtype=torch.float64)).requires_grad_()
    pruned = top_k_capsules(u, 3)
    out = layer(pruned.selected, pruned.code)
    targets = torch.tensor([0, 1, 1, 0])
    ladder_loss(out.activities, targets, pruned.code, capsule_activity(u), epsilon=0).backward(retain_graph=True)
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    kept = pruned.code.bool()
    assert (u.grad[~kept] == 0).all() and (u.grad[kept].abs().sum(dim=-1) > 0).all()
    u.grad = None
    ladder_loss(out.activities, targets, pruned.code, capsule_activity(u)).backward()
    assert (u.grad[~kept].abs().sum(dim=-1) > 0).all()                   # ε ‖c − A‖² reaches them


def test_the_regression_target_carries_gradient():
    # eq. 4 compares u^reg with U_K without a detach: U_K gets gradient as the target too
    layer = _layer(seed=3)
    selected = squash(torch.randn(2, 3, 2, dtype=torch.float64)).requires_grad_()
    code = code_vector(torch.tensor([[0, 2, 6], [1, 2, 3]]), 7, dtype=torch.float64)
    out = layer(selected, code)
    through_target = torch.autograd.grad(
        ladder_activation(out.regressed.detach(), selected.unsqueeze(1), layer.gamma).sum(), selected)[0]
    assert through_target.abs().sum() > 0
    total = torch.autograd.grad(out.activities.sum(), selected, retain_graph=True)[0]
    through_pose = torch.autograd.grad(
        ladder_activation(out.regressed, selected.detach().unsqueeze(1), layer.gamma).sum(), selected)[0]
    torch.testing.assert_close(total, through_target + through_pose)


def test_ladder_layer_refuses_wrong_shapes():
    layer = _layer()
    code = code_vector(torch.tensor([[0, 1, 2]]), 7, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"selected must have shape \(B, K, d\) = \(1, 3, 2\)"):
        layer(torch.randn(1, 4, 2, dtype=torch.float64), code)
    with pytest.raises(ValueError, match=r"code must have shape \(B, n\) = \(B, 7\)"):
        layer(torch.randn(1, 3, 2, dtype=torch.float64), torch.zeros(1, 6, dtype=torch.float64))
    with pytest.raises(ValueError, match="gamma must be a number >= 0"):
        LadderLayer(7, 3, gamma=-1.0)


def test_public_names_are_exported():
    assert set(ladder.__all__) <= set(dir(ladder))
    assert {"top_k_capsules", "ladder_activation"} <= set(ladder.__all__)


def test_most_active_couplings_by_hand():
    from capsule_lab.measures.activity import most_active_couplings

    u = torch.tensor([[0.3, 0.4], [0.0, 0.1], [0.6, 0.8], [0.5, 0.0], [0.0, 0.5]])    # lengths .5 .1 1 .5 .5
    c = torch.softmax(torch.arange(15.0).view(5, 3) / 7, dim=1)
    indices, lengths, to_label = most_active_couplings(u, c, label=2, top=3)
    assert indices.tolist() == [2, 0, 3]                    # 1.0, then the ties at 0.5 in index order
    torch.testing.assert_close(lengths, torch.tensor([1.0, 0.5, 0.5]))
    torch.testing.assert_close(to_label, c[[2, 0, 3], 2])
    with pytest.raises(ValueError, match="top must be at most"):
        most_active_couplings(u, c, 0, top=6)
    with pytest.raises(ValueError, match="label must be a class index"):
        most_active_couplings(u, c, 3)
    with pytest.raises(ValueError, match="couplings"):
        most_active_couplings(u, c[:4], 0, top=2)


def test_activity_profile_is_the_mean_of_each_image_s_sorted_lengths():
    from capsule_lab.measures.activity import activity_profile

    u = torch.zeros(2, 4, 1)
    u[0, :, 0] = torch.tensor([0.1, 0.9, 0.5, 0.3])           # sorted: .9 .5 .3 .1
    u[1, :, 0] = torch.tensor([-0.7, 0.2, 0.0, 0.4])          # lengths sorted: .7 .4 .2 0
    torch.testing.assert_close(activity_profile(u, top=3), torch.tensor([0.8, 0.45, 0.25]))
    with pytest.raises(ValueError, match="top must be at most"):
        activity_profile(u, top=5)
