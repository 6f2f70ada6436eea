"""Efficient-CapsNet's self-attention routing (capsule_lab.routing.self_attention), chapter 08."""

import math

import pytest
import torch

from capsule_lab.capsules import margin_loss
from capsule_lab.layers.dense import CapsuleLayer
from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.routing import SelfAttentionRouter, self_attention_routing

F64 = torch.float64


def explicit(votes, bias):
    """The routing written out in float64: the full I×I attention matrix of each (b, j), its row sums, a softmax
    over the outputs by hand, the bias, the weighted sum and (1 - e^-|s|) s/|s|."""
    B, I, J, D = votes.shape
    attention = torch.einsum("bijd,bkjd->bjik", votes, votes) / math.sqrt(D)     # A_j: (B, J, I, I)
    logits = attention.sum(dim=3).transpose(1, 2)                               # row sums: (B, I, J)
    e = torch.exp(logits - logits.max(dim=2, keepdim=True).values)
    c = e / e.sum(dim=2, keepdim=True) + bias
    s = torch.zeros(B, J, D, dtype=F64)
    for i in range(I):
        for j in range(J):
            s[:, j] += c[:, i, j, None] * votes[:, i, j]
    n = s.norm(dim=-1, keepdim=True)
    return (1 - torch.exp(-n)) * s / n, c, logits


def test_equals_the_attention_matrix_written_out():
    g = torch.Generator().manual_seed(0)
    votes = torch.randn(3, 7, 4, 5, generator=g, dtype=F64)
    bias = 0.1 * torch.randn(7, 4, generator=g, dtype=F64)
    routed = self_attention_routing(votes, bias)
    poses, couplings, logits = explicit(votes, bias)
    assert torch.allclose(routed.logits, logits, rtol=0, atol=1e-12)
    assert torch.allclose(routed.couplings, couplings, rtol=0, atol=1e-12)
    assert torch.allclose(routed.poses, poses, rtol=0, atol=1e-12)


def test_a_hand_worked_toy():
    # B=1, I=2, J=2, D=1 (so √D = 1). Votes û_{j|i}:
    #   input 0 votes 1 for output 0 and 2 for output 1;  input 1 votes 3 for output 0 and -1 for output 1.
    # Σ_k û_{0|k} = 1 + 3 = 4,  Σ_k û_{1|k} = 2 - 1 = 1, so the logits b_ij = û_{j|i} · Σ_k û_{j|k} are
    #   b_00 = 1·4 = 4,  b_01 = 2·1 = 2,  b_10 = 3·4 = 12,  b_11 = -1·1 = -1.
    # Softmax over j: c_i0 = 1/(1 + e^{b_i1 - b_i0}):  c_00 = 1/(1 + e^-2),  c_10 = 1/(1 + e^-13).
    # s_0 = c_00·1 + c_10·3,  s_1 = c_01·2 + c_11·(-1);  v = (1 - e^-|s|) s/|s| = sign(s)(1 - e^-|s|).
    votes = torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=F64).reshape(1, 2, 2, 1)
    routed = self_attention_routing(votes)
    assert routed.logits[0].tolist() == [[4.0, 2.0], [12.0, -1.0]]
    c00, c10 = 1 / (1 + math.exp(-2)), 1 / (1 + math.exp(-13))
    expected_c = torch.tensor([[c00, 1 - c00], [c10, 1 - c10]], dtype=F64)
    assert torch.allclose(routed.couplings[0], expected_c, rtol=0, atol=1e-15)
    s0, s1 = c00 * 1 + c10 * 3, (1 - c00) * 2 + (1 - c10) * -1        # s0 ≈ 3.88, s1 ≈ 0.24
    expected_v = [math.copysign(1 - math.exp(-abs(s)), s) for s in (s0, s1)]
    assert torch.allclose(routed.poses[0, :, 0], torch.tensor(expected_v, dtype=F64), rtol=0, atol=1e-15)
    # D = 4 with the same numbers in the first entry: the logits are divided by √4 = 2
    wide = torch.cat([votes, torch.zeros(1, 2, 2, 3, dtype=F64)], dim=3)
    assert self_attention_routing(wide).logits[0].tolist() == [[2.0, 1.0], [6.0, -0.5]]


def test_couplings_sum_to_one_over_the_outputs_then_take_the_bias():
    g = torch.Generator().manual_seed(1)
    votes = torch.randn(2, 6, 3, 4, generator=g, dtype=F64)
    plain = self_attention_routing(votes)
    zero = self_attention_routing(votes, torch.zeros(6, 3, dtype=F64))
    assert torch.allclose(plain.couplings.sum(dim=2), torch.ones(2, 6, dtype=F64), rtol=0, atol=1e-15)
    assert torch.equal(zero.couplings, plain.couplings) and torch.equal(zero.poses, plain.poses)
    bias = torch.randn(6, 3, generator=g, dtype=F64)
    biased = self_attention_routing(votes, bias)
    assert torch.equal(biased.logits, plain.logits)                     # the bias comes after the softmax
    assert torch.allclose(biased.couplings, torch.softmax(plain.logits, dim=2) + bias, rtol=0, atol=1e-15)
    assert torch.allclose(biased.couplings.sum(dim=2), 1 + bias.sum(dim=1), rtol=0, atol=1e-14)
    s = torch.einsum("bij,bijd->bjd", biased.couplings, votes)
    n = s.norm(dim=-1, keepdim=True)
    assert torch.allclose(biased.poses, (1 - torch.exp(-n)) * s / n, rtol=0, atol=1e-14)


def test_gradients_through_votes_and_bias():
    g = torch.Generator().manual_seed(2)
    votes = torch.randn(2, 4, 3, 3, generator=g, dtype=F64, requires_grad=True)
    bias = (0.1 * torch.randn(4, 3, generator=g, dtype=F64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda v, b: self_attention_routing(v, b)[:2], (votes, bias))
    router = SelfAttentionRouter(4, 3).double()
    router(votes).poses.sum().backward()
    assert router.bias.grad is not None and router.bias.grad.abs().max() > 0


def test_permuting_the_inputs_permutes_the_couplings_only():
    g = torch.Generator().manual_seed(3)
    votes, bias = torch.randn(2, 5, 3, 4, generator=g, dtype=F64), torch.randn(5, 3, generator=g, dtype=F64)
    order = torch.tensor([3, 0, 4, 1, 2])
    a, b = self_attention_routing(votes, bias), self_attention_routing(votes[:, order], bias[order])
    assert torch.allclose(a.poses, b.poses, rtol=0, atol=1e-12)
    assert torch.allclose(a.couplings[:, order], b.couplings, rtol=0, atol=1e-12)
    assert torch.allclose(a.logits[:, order], b.logits, rtol=0, atol=1e-12)


def test_the_router_trains_its_bias_in_a_capsule_layer():
    torch.manual_seed(0)
    router = SelfAttentionRouter(6, 3)
    layer = CapsuleLayer(6, 8, 3, 4, router=router)
    assert layer.router is router and router.route_weights(torch.zeros(1, 6, 8), layer.weight) is None
    assert any(p is router.bias for p in layer.parameters())
    u = torch.randn(2, 6, 8)
    routed = layer(u)
    assert routed.poses.shape == (2, 3, 4) and routed.couplings.shape == routed.logits.shape == (2, 6, 3)
    reference = self_attention_routing(layer.votes(u), router.bias)
    assert torch.allclose(routed.poses, reference.poses)


def test_the_router_trains_its_bias_inside_a_capsnet():
    torch.manual_seed(0)
    config = CapsNetConfig.slim(decoder=False)
    assert (config.primary_caps, config.classes) == (144, 10)
    router = SelfAttentionRouter(144, 10)
    assert torch.equal(router.bias, torch.zeros(144, 10))
    net = CapsNet(config, router=router)
    assert any(p is router.bias for p in net.parameters())
    images, labels = torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    out = net(images)
    assert out.lengths.shape == (4, 10) and out.poses.shape == (4, 10, config.class_dim)
    assert out.couplings.shape == (4, 144, 10)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    margin_loss(out.lengths, labels).backward()
    assert router.bias.grad is not None and router.bias.grad.abs().max() > 0
    optimizer.step()
    assert router.bias.abs().max() > 0


def test_bad_inputs_are_refused():
    votes = torch.randn(2, 3, 4, 5)
    with pytest.raises(ValueError, match=r"\(B, I, J, D\)"):
        self_attention_routing(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"\(I, J\) = \(3, 4\)"):
        self_attention_routing(votes, torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"\(I, J\) = \(3, 4\)"):
        self_attention_routing(votes, torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="floating"):
        self_attention_routing(votes, torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="activation"):
        self_attention_routing(votes, activation="squash")
    with pytest.raises(ValueError, match="activation"):
        SelfAttentionRouter(3, 4, activation=None)
    with pytest.raises(ValueError, match=r"\(I, J\) = \(3, 4\)"):
        SelfAttentionRouter(3, 4)(torch.randn(2, 4, 3, 5))
    with pytest.raises(ValueError, match=r"\(B, I, J, D\)"):
        SelfAttentionRouter(3, 4)(torch.randn(3, 4, 5))
    with pytest.raises(ValueError, match="inputs"):
        SelfAttentionRouter(0, 4)
