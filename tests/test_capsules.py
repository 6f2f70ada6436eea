"""Unit and property tests for ``capsule_lab.capsules`` (chapter 01).

Every expected value is computed independently of the package: by hand (the numbers are written out),
with plain Python/NumPy loops, or from the definitions in Sabour et al. (2017).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from capsule_lab import PrimaryCapsules, conv_to_capsules, margin_loss, squash, squash_exp

HYP = settings(max_examples=40, deadline=None)


def _t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


# ----------------------------------------------------------------------------------------------- squash

def test_squash_hand_value_3_4():
    # s = (3, 4): ‖s‖ = 5, ‖s‖² = 25 → length 25/26, direction (3/5, 4/5) = (0.6, 0.8).
    v = squash(_t([3.0, 4.0]))
    expected = [25 / 26 * 0.6, 25 / 26 * 0.8]
    torch.testing.assert_close(v, _t(expected), rtol=1e-12, atol=1e-12)
    assert v.norm().item() == pytest.approx(25 / 26, abs=1e-12)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_squash_unit_vector_has_length_one_half(axis):
    # ‖s‖ = 1 → ‖s‖²/(1+‖s‖²) = 1/2, and the direction stays the axis.
    s = torch.zeros(3, dtype=torch.float64)
    s[axis] = 1.0
    expected = torch.zeros(3, dtype=torch.float64)
    expected[axis] = 0.5
    torch.testing.assert_close(squash(s), expected, rtol=1e-12, atol=1e-12)
    # negative direction too
    torch.testing.assert_close(squash(-s), -expected, rtol=1e-12, atol=1e-12)


def test_squash_small_vector_length_is_quadratic():
    # ‖s‖ = 0.01 → length 1e-4 / (1 + 1e-4) ≈ 0.99990001e-4
    v = squash(_t([0.0, 0.01]))
    assert v[1].item() == pytest.approx(1e-4 / (1 + 1e-4), rel=1e-9)
    assert v[0].item() == 0.0


def test_squash_exp_hand_values():
    # ‖s‖ = ln 2 → length 1 − e^{−ln 2} = 1 − 1/2 = 0.5, along s.
    ln2 = math.log(2.0)
    v = squash_exp(_t([ln2, 0.0]))
    torch.testing.assert_close(v, _t([0.5, 0.0]), rtol=1e-12, atol=1e-12)
    # s = (3, 4), ‖s‖ = 5 → length 1 − e^{−5}, direction (0.6, 0.8)
    v = squash_exp(_t([3.0, 4.0]))
    L = 1 - math.exp(-5.0)
    torch.testing.assert_close(v, _t([0.6 * L, 0.8 * L]), rtol=1e-12, atol=1e-12)
    # ‖s‖ = ln 4 along −y → length 3/4
    v = squash_exp(_t([0.0, -math.log(4.0)]))
    torch.testing.assert_close(v, _t([0.0, -0.75]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", [squash, squash_exp], ids=["squash", "squash_exp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_finite_value_and_gradient_at_zero(fn, dtype):
    s = torch.zeros(4, 5, dtype=dtype, requires_grad=True)
    v = fn(s)
    assert torch.isfinite(v).all()
    assert torch.equal(v.detach(), torch.zeros_like(v))
    (v * torch.arange(1.0, 21.0, dtype=dtype).view(4, 5)).sum().backward()
    assert s.grad is not None and torch.isfinite(s.grad).all()
    # a mixed batch: one zero capsule must not poison the others
    s2 = torch.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=dtype, requires_grad=True)
    fn(s2).sum().backward()
    assert torch.isfinite(s2.grad).all()


def test_squash_jacobian_at_zero_is_zero():
    # squash(s) ≈ ‖s‖ s near 0, so its Jacobian at 0 is the zero matrix.
    J = torch.autograd.functional.jacobian(squash, torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(J, torch.zeros(3, 3, dtype=torch.float64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_squash_exp_jacobian_at_zero_is_identity(dtype):
    # squash_exp(s) = (1 − e^{−‖s‖}) s/‖s‖ ≈ s near 0: Jacobian I (the reason it is used for deep nets).
    J = torch.autograd.functional.jacobian(squash_exp, torch.zeros(3, dtype=dtype))
    torch.testing.assert_close(J, torch.eye(3, dtype=dtype), atol=1e-5, rtol=0)


def _np_norms(s: np.ndarray) -> np.ndarray:
    return np.sqrt((s.astype(np.float64) ** 2).sum(axis=-1))


vectors = st.integers(1, 8).flatmap(
    lambda d: arrays(np.float64, (3, d), elements=st.floats(-50, 50, allow_nan=False, allow_subnormal=False))
)


@HYP
@given(vectors)
def test_squash_lengths_below_one_and_direction_kept(s):
    v = squash(torch.from_numpy(s)).numpy()
    n = _np_norms(s)
    lengths = _np_norms(v)
    assert (lengths < 1).all()
    # length is exactly ‖s‖²/(1+‖s‖²)
    np.testing.assert_allclose(lengths, n**2 / (1 + n**2), rtol=1e-9, atol=1e-12)
    for k in range(len(n)):
        if n[k] > 1e-3:
            cos = float(v[k] @ s[k]) / (lengths[k] * n[k])
            assert cos == pytest.approx(1.0, abs=1e-9)


small_vectors = st.integers(1, 8).flatmap(
    lambda d: arrays(np.float64, (3, d), elements=st.floats(-8, 8, allow_nan=False, allow_subnormal=False))
)


@HYP
@given(small_vectors)
def test_squash_exp_lengths_below_one_and_direction_kept(s):
    v = squash_exp(torch.from_numpy(s)).numpy()
    n = _np_norms(s)
    lengths = _np_norms(v)
    assert (lengths < 1).all()
    np.testing.assert_allclose(lengths, 1 - np.exp(-n), rtol=1e-7, atol=1e-12)
    for k in range(len(n)):
        if n[k] > 1e-3:
            cos = float(v[k] @ s[k]) / (lengths[k] * n[k])
            assert cos == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("fn", [squash, squash_exp], ids=["squash", "squash_exp"])
def test_dim_argument_on_a_non_last_dimension(fn):
    # capsules along dim 1 of a (B, D, N) tensor: each column s[b, :, n] is one capsule
    torch.manual_seed(0)
    s = torch.randn(2, 3, 5, dtype=torch.float64)
    out = fn(s, dim=1)
    assert out.shape == s.shape
    for b in range(2):
        for n in range(5):
            torch.testing.assert_close(out[b, :, n], fn(s[b, :, n].clone()), rtol=1e-12, atol=1e-12)
    # and on dim 0 with the hand value (3, 4) → 25/26·(0.6, 0.8) (squash only)
    if fn is squash:
        col = squash(_t([[3.0, 0.0], [4.0, 1.0]]), dim=0)
        torch.testing.assert_close(col, _t([[25 / 26 * 0.6, 0.0], [25 / 26 * 0.8, 0.5]]), rtol=1e-12, atol=1e-12)
    # dim=-2 is the same as dim=1 here
    torch.testing.assert_close(fn(s, dim=-2), out)


@pytest.mark.parametrize("fn", [squash, squash_exp], ids=["squash", "squash_exp"])
def test_squash_rejects_bad_input(fn):
    with pytest.raises(ValueError, match=r"\(\.\.\., D\)"):
        fn(torch.tensor([1, 2, 3]))  # integer dtype
    with pytest.raises(ValueError, match=r"\(\.\.\., D\)"):
        fn(torch.tensor(1.0))  # 0-d
    with pytest.raises(ValueError, match=r"\(\.\.\., D\)"):
        fn([1.0, 2.0])  # not a tensor


# ------------------------------------------------------------------------------------------ margin loss

HAND_LENGTHS = [[0.95, 0.30, 0.05],
                [0.60, 0.20, 0.70]]
HAND_LABELS = [0, 2]


def test_margin_loss_hand_worked():
    # L_k = T_k max(0, 0.9 − ‖v_k‖)² + 0.5 (1 − T_k) max(0, ‖v_k‖ − 0.1)²
    # sample 0, label 0: k=0: max(0, 0.9 − 0.95)² = 0
    #                    k=1: 0.5 · (0.30 − 0.1)² = 0.5 · 0.04 = 0.02
    #                    k=2: 0.05 < 0.1 → 0                          sum 0.02
    # sample 1, label 2: k=0: 0.5 · (0.60 − 0.1)² = 0.5 · 0.25 = 0.125
    #                    k=1: 0.5 · (0.20 − 0.1)² = 0.5 · 0.01 = 0.005
    #                    k=2: (0.9 − 0.70)² = 0.04                    sum 0.17
    # mean over the batch: (0.02 + 0.17) / 2 = 0.095
    loss = margin_loss(_t(HAND_LENGTHS), torch.tensor(HAND_LABELS))
    assert loss.item() == pytest.approx(0.095, abs=1e-12)
    assert loss.dim() == 0


def test_margin_loss_hyperparameters_respected():
    # m⁺ = 0.8, m⁻ = 0.2, λ = 1:
    # sample 0: k=0: 0.8 − 0.95 < 0 → 0; k=1: (0.30 − 0.2)² = 0.01; k=2: 0          sum 0.01
    # sample 1: k=0: (0.60 − 0.2)² = 0.16; k=1: 0.20 − 0.2 = 0 → 0; k=2: (0.8 − 0.7)² = 0.01   sum 0.17
    # mean: 0.09
    loss = margin_loss(_t(HAND_LENGTHS), torch.tensor(HAND_LABELS), m_pos=0.8, m_neg=0.2, lam=1.0)
    assert loss.item() == pytest.approx(0.09, abs=1e-12)
    # λ = 0 leaves only the present-class terms: (0 + 0.04) / 2 = 0.02
    loss = margin_loss(_t(HAND_LENGTHS), torch.tensor(HAND_LABELS), lam=0.0)
    assert loss.item() == pytest.approx(0.02, abs=1e-12)
    # m⁺ = 1: present terms (1 − 0.95)² = 0.0025 and (1 − 0.7)² = 0.09; absent as in the default case
    # sample 0: 0.0025 + 0.02 = 0.0225; sample 1: 0.09 + 0.13 = 0.22 → mean 0.12125
    loss = margin_loss(_t(HAND_LENGTHS), torch.tensor(HAND_LABELS), m_pos=1.0)
    assert loss.item() == pytest.approx(0.12125, abs=1e-12)


def _margin_loop(lengths, T, m_pos=0.9, m_neg=0.1, lam=0.5):
    B, J = len(lengths), len(lengths[0])
    total = 0.0
    for b in range(B):
        for k in range(J):
            x = float(lengths[b][k])
            t = float(T[b][k])
            total += t * max(0.0, m_pos - x) ** 2 + lam * (1 - t) * max(0.0, x - m_neg) ** 2
    return total / B


@HYP
@given(
    st.integers(1, 6).flatmap(lambda B: st.integers(2, 6).flatmap(lambda J: st.tuples(
        arrays(np.float64, (B, J), elements=st.floats(0, 0.999)),
        arrays(np.int64, (B,), elements=st.integers(0, J - 1)),
    ))),
    st.floats(0.5, 1.0), st.floats(0.0, 0.4), st.floats(0.0, 1.0),
)
def test_margin_loss_matches_loop_and_one_hot(data, m_pos, m_neg, lam):
    lengths, labels = data
    B, J = lengths.shape
    onehot = np.zeros((B, J))
    onehot[np.arange(B), labels] = 1
    expected = _margin_loop(lengths, onehot, m_pos, m_neg, lam)
    L = torch.from_numpy(lengths)
    got_int = margin_loss(L, torch.from_numpy(labels), m_pos=m_pos, m_neg=m_neg, lam=lam).item()
    got_hot = margin_loss(L, torch.from_numpy(onehot), m_pos=m_pos, m_neg=m_neg, lam=lam).item()
    got_hot_int = margin_loss(L, torch.from_numpy(onehot).long(), m_pos=m_pos, m_neg=m_neg, lam=lam).item()
    assert got_int == pytest.approx(expected, abs=1e-12)
    assert got_hot == pytest.approx(expected, abs=1e-12)
    assert got_hot_int == pytest.approx(expected, abs=1e-12)


def test_margin_loss_multi_hot_targets():
    # two present classes in sample 0: k=0 and k=2 (lengths 0.95, 0.05)
    # k=0: 0; k=1: 0.5·0.2² = 0.02; k=2: (0.9 − 0.05)² = 0.7225 → 0.7425; sample 1 as before 0.17
    T = _t([[1, 0, 1], [0, 0, 1]])
    loss = margin_loss(_t(HAND_LENGTHS), T)
    assert loss.item() == pytest.approx((0.7425 + 0.17) / 2, abs=1e-12)


def test_margin_loss_zero_when_confident_and_right():
    lengths = _t([[0.9, 0.1, 0.0, 0.05], [0.0, 0.1, 0.99, 0.1], [0.02, 0.95, 0.1, 0.0]])
    labels = torch.tensor([0, 2, 1])
    assert margin_loss(lengths, labels).item() == 0.0
    # just past either margin makes it positive
    bumped = lengths.clone()
    bumped[0, 1] = 0.11
    assert margin_loss(bumped, labels).item() == pytest.approx(0.5 * 0.01**2 / 3, abs=1e-15)
    bumped = lengths.clone()
    bumped[1, 2] = 0.89
    assert margin_loss(bumped, labels).item() == pytest.approx(0.01**2 / 3, abs=1e-15)


def test_margin_loss_gradient_by_hand():
    # d/dx of (0.9 − x)² at x = 0.7 is −2·0.2 = −0.4; of 0.5 (x − 0.1)² at x = 0.6 is 0.5 (1/B = 1/2 scaling)
    L = _t(HAND_LENGTHS).requires_grad_(True)
    margin_loss(L, torch.tensor(HAND_LABELS)).backward()
    expected = _t([[0.0, 0.2, 0.0], [0.5, 0.1, -0.4]]) / 2
    torch.testing.assert_close(L.grad, expected, rtol=1e-12, atol=1e-12)


def test_margin_loss_rejects_bad_input():
    L = torch.rand(4, 3)
    with pytest.raises(ValueError, match=r"\(B, J\)"):
        margin_loss(torch.rand(4), torch.tensor([0, 1, 2, 0]))
    with pytest.raises(ValueError, match=r"\(B, J\)"):
        margin_loss(torch.rand(4, 3, 2), torch.tensor([0, 1, 2, 0]))
    with pytest.raises(ValueError, match=r"\(B,\)"):
        margin_loss(L, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        margin_loss(L, torch.tensor([0, 1, 3, 0]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        margin_loss(L, torch.tensor([0, -1, 2, 0]))
    with pytest.raises(ValueError, match=r"\(B, J\)"):
        margin_loss(L, torch.tensor([0.0, 1.0, 2.0, 0.0]))  # float labels
    with pytest.raises(ValueError, match=r"\(B, J\)"):
        margin_loss(L, torch.zeros(4, 2))
    with pytest.raises(ValueError, match=r"\(B,\) or \(B, J\)"):
        margin_loss(L, torch.zeros(4, 3, 1))
    with pytest.raises(ValueError):
        margin_loss(L, [0, 1, 2, 0])


# ------------------------------------------------------------------------------------- primary capsules

def test_conv_to_capsules_groups_channels_at_one_position():
    # Each entry encodes (batch, channel, row, col) so every capsule component is traceable.
    B, C, D, H, W = 2, 3, 4, 3, 5  # H ≠ W catches a transposed grid
    x = torch.zeros(B, C * D, H, W, dtype=torch.float64)
    for b in range(B):
        for ch in range(C * D):
            for h in range(H):
                for w in range(W):
                    x[b, ch, h, w] = b * 1_000_000 + ch * 10_000 + h * 100 + w
    caps = conv_to_capsules(x, D)
    assert caps.shape == (B, H * W * C, D)
    for b in range(B):
        for h in range(H):
            for w in range(W):
                for c in range(C):
                    idx = (h * W + w) * C + c  # ordered by (row, column, type)
                    expected = [b * 1_000_000 + (c * D + d) * 10_000 + h * 100 + w for d in range(D)]
                    assert caps[b, idx].tolist() == expected, (b, h, w, c)
    # the reshape bug this guards against gives something else:
    assert not torch.equal(caps, x.reshape(B, -1, D))


def test_conv_to_capsules_rejects_bad_input():
    with pytest.raises(ValueError, match=r"\(B, C\*D, H, W\)"):
        conv_to_capsules(torch.zeros(2, 8, 3), 4)
    with pytest.raises(ValueError, match=r"\(B, C\*D, H, W\)"):
        conv_to_capsules(torch.zeros(2, 8, 3, 3, 1), 4)
    with pytest.raises(ValueError, match=r"\(B, C\*D, H, W\).*divisible"):
        conv_to_capsules(torch.zeros(2, 10, 3, 3), 4)
    with pytest.raises(ValueError, match=r"\(B, C\*D, H, W\)"):
        conv_to_capsules(torch.zeros(2, 8, 3, 3), 0)
    with pytest.raises(ValueError, match=r"\(B, C\*D, H, W\)"):
        conv_to_capsules(torch.zeros(2, 8, 3, 3, dtype=torch.long), 4)


def test_primary_capsules_sabour_shapes():
    torch.manual_seed(0)
    layer = PrimaryCapsules(256, types=32, dim=8, kernel_size=9, stride=2)
    assert layer.grid(20, 20) == (6, 6)  # (20 − 9) // 2 + 1 = 6
    x = torch.randn(2, 256, 20, 20)
    with torch.no_grad():
        u = layer(x)
    assert u.shape == (2, 1152, 8)  # 6·6·32 = 1152
    lengths = u.norm(dim=-1)
    assert (lengths < 1).all() and (lengths >= 0).all()


def test_primary_capsules_is_conv_then_regroup_then_squash():
    # independent: F.conv2d with the layer's weights, then an explicit loop over (h, w, type)
    torch.manual_seed(1)
    types, dim = 3, 2
    layer = PrimaryCapsules(4, types=types, dim=dim, kernel_size=3, stride=2).double()
    x = torch.randn(2, 4, 7, 9, dtype=torch.float64)
    with torch.no_grad():
        u = layer(x)
        y = torch.nn.functional.conv2d(x, layer.conv.weight, layer.conv.bias, stride=2)
    Hp, Wp = layer.grid(7, 9)
    assert (Hp, Wp) == (3, 4) == tuple(y.shape[2:])
    assert u.shape == (2, Hp * Wp * types, dim)
    for b in range(2):
        k = 0
        for h in range(Hp):
            for w in range(Wp):
                for c in range(types):
                    s = y[b, c * dim:(c + 1) * dim, h, w]
                    n2 = float((s * s).sum())
                    expected = s * (n2 / (1 + n2)) / math.sqrt(n2)
                    torch.testing.assert_close(u[b, k], expected, rtol=1e-10, atol=1e-12)
                    k += 1


def test_primary_capsules_squash_fn_plugs_in():
    torch.manual_seed(2)
    layer = PrimaryCapsules(2, types=2, dim=3, kernel_size=3, stride=1, squash_fn=squash_exp).double()
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    with torch.no_grad():
        s = conv_to_capsules(layer.conv(x), 3)
        torch.testing.assert_close(layer(x), squash_exp(s))


def test_primary_capsules_rejects_bad_input():
    layer = PrimaryCapsules(256, types=32, dim=8)
    with pytest.raises(ValueError, match=r"\(B, 256, H, W\).*\(2, 128, 20, 20\)"):
        layer(torch.zeros(2, 128, 20, 20))
    with pytest.raises(ValueError, match=r"\(B, 256, H, W\)"):
        layer(torch.zeros(256, 20, 20))


@pytest.mark.parametrize("fn", [squash, squash_exp])
def test_squash_rejects_a_dim_out_of_range(fn):
    with pytest.raises(ValueError, match="dim=3"):
        fn(torch.ones(2, 3), dim=3)
