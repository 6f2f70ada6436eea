"""capsule_lab.measures.parse_trees (chapter 05): quantised couplings, parse-tree dictionaries and their entropy,
checked on hand-worked cases; global magnitude pruning checked against a sort of |w| written here."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.measures.parse_trees import (class_parse_tree, coupling_saliency, dictionary_entropy, keys_per_class,
                                              parse_tree_dictionary, parse_tree_keys, quantize, routing_entropy)
from capsule_lab.measures.pruning import (global_magnitude_prune, lobster_step, make_pruning_permanent,
                                          prunable_parameters, snip_prune, sparsity)


def test_quantize_by_hand():
    c = torch.tensor([0.0, 0.04, 0.06, 0.5, 0.94, 0.96, 1.0])
    assert quantize(c).tolist() == [0, 0, 1, 5, 9, 10, 10]                   # round(10 c)
    assert quantize(c, levels=3).tolist() == [0, 0, 0, 1, 2, 2, 2]           # round(2 c)
    assert quantize(c.double()).dtype == torch.int64


@pytest.mark.parametrize("c, levels, message", [
    (torch.tensor([0.5, 1.2]), 11, "in \\[0, 1\\]"),
    (torch.tensor([-0.1]), 11, "in \\[0, 1\\]"),
    (torch.tensor([float("nan")]), 11, "in \\[0, 1\\]"),
    (torch.tensor([0.5]), 1, "levels must be an integer >= 2"),
    (torch.tensor([1, 0]), 11, "floating-point"),
    ([0.5], 11, "must be a tensor"),
])
def test_quantize_refuses(c, levels, message):
    with pytest.raises(ValueError, match=message):
        quantize(c, levels)


def _toy():
    """5 images, I = 2 input capsules, J = 2 classes; the couplings of each image's predicted class by hand."""
    c = torch.zeros(5, 2, 2)
    c[:, :, 0] = torch.tensor([[0.9, 0.2], [0.91, 0.18], [0.1, 0.7], [0.5, 0.5], [0.52, 0.47]])
    c[:, :, 1] = 1 - c[:, :, 0]                                        # sums to 1 over the classes j
    predictions = torch.tensor([0, 0, 0, 1, 1])
    return c, predictions


def test_keys_and_dictionary_by_hand():
    c, predictions = _toy()
    # class 0 reads column 0: (0.9, 0.2) → 9-2, (0.91, 0.18) → 9-2, (0.1, 0.7) → 1-7
    # class 1 reads column 1: (0.5, 0.5) → 5-5, (0.48, 0.53) → 5-5
    assert parse_tree_keys(c, predictions) == ["9-2", "9-2", "1-7", "5-5", "5-5"]
    d = parse_tree_dictionary(c, predictions)
    assert d == {0: Counter({"9-2": 2, "1-7": 1}), 1: Counter({"5-5": 2})}
    assert keys_per_class(d) == {0: 2, 1: 1}
    assert parse_tree_dictionary(c, predictions, levels=3) == {0: Counter({"2-0": 2, "0-1": 1}), 1: Counter({"1-1": 2})}


def test_entropy_of_known_distributions():
    c, predictions = _toy()
    h0 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))      # 0.918 bits
    mean, per_class = routing_entropy(c, predictions)
    assert per_class[0] == pytest.approx(h0) and per_class[1] == 0.0
    assert mean == pytest.approx(h0 / 2)
    uniform = {3: Counter({"a": 5, "b": 5, "c": 5, "d": 5})}
    assert dictionary_entropy(uniform) == {3: pytest.approx(2.0)}    # four equally frequent keys: 2 bits
    with pytest.raises(ValueError, match="Counter"):
        dictionary_entropy({0: {"a": 1}})


def test_dictionary_refuses_bad_shapes_and_predictions():
    c, predictions = _toy()
    with pytest.raises(ValueError, match=r"couplings must have shape \(N, I, J\)"):
        routing_entropy(c[0], predictions)
    with pytest.raises(ValueError, match=r"predictions must have shape \(N,\) = \(5,\)"):
        routing_entropy(c, predictions[:4])
    with pytest.raises(ValueError, match=r"class indices in \[0, 2\)"):
        routing_entropy(c, torch.tensor([0, 0, 0, 1, 2]))
    with pytest.raises(ValueError, match="integer class indices"):
        routing_entropy(c, predictions.float())
    with pytest.raises(ValueError, match="at least one image"):
        routing_entropy(c[:0], predictions[:0])


# ---------------------------------------------------------------- pruning

def _model():
    torch.manual_seed(0)
    return CapsNet(CapsNetConfig.slim())


def test_the_paper_s_parameters_are_pruned_and_nothing_else():
    model = _model()
    names = {m: n for n, m in model.named_modules()}
    assert [names[m] for m, _ in prunable_parameters(model)] == ["conv", "primary.conv", "digits"]


def test_one_global_threshold_prunes_the_smallest_weights():
    model = _model()
    before = torch.cat([m.weight.detach().abs().flatten() for m, _ in prunable_parameters(model)])
    decoder = [p.detach().clone() for p in model.decoder.parameters()]
    biases = [model.conv.bias.detach().clone(), model.primary.conv.bias.detach().clone()]
    report = global_magnitude_prune(model, 0.3)
    k = round(0.3 * before.numel())
    threshold = before.sort().values[k - 1]                       # the k-th smallest |w|, by an independent sort
    after = torch.cat([m.weight.detach().flatten() for m, _ in prunable_parameters(model)])
    assert int((after == 0).sum()) == k and report["overall"] == pytest.approx(k / before.numel())
    assert bool(((after == 0) == (before <= threshold)).all())   # exactly the smallest ones (no ties here)
    assert set(report) == {"conv.weight", "primary.conv.weight", "digits.weight", "overall"}
    assert all(torch.equal(p, q) for p, q in zip(decoder, model.decoder.parameters()))
    assert torch.equal(biases[0], model.conv.bias) and torch.equal(biases[1], model.primary.conv.bias)
    again = global_magnitude_prune(model, 0.5)                    # half of what is left
    assert again["overall"] == pytest.approx(1 - (1 - k / before.numel()) * 0.5, abs=1e-5)


def test_pruned_weights_stay_zero_while_training_and_after_removing_the_masks():
    model = _model()
    global_magnitude_prune(model, 0.5)
    masks = [m.weight_mask.clone() for m, _ in prunable_parameters(model)]
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.rand(4, 1, 28, 28)
    for _ in range(2):
        optimiser.zero_grad()
        model(x).lengths.sum().backward()
        optimiser.step()
    for (m, _), mask in zip(prunable_parameters(model), masks):
        assert bool((m.weight[mask == 0] == 0).all())
    with torch.no_grad():
        out = model(x).lengths
    make_pruning_permanent(model)
    assert not any(hasattr(m, "weight_mask") for m, _ in prunable_parameters(model))
    with torch.no_grad():
        torch.testing.assert_close(model(x).lengths, out)
    assert sparsity(model)["overall"] == pytest.approx(0.5, abs=1e-5)


def test_pruning_refuses_bad_input():
    with pytest.raises(ValueError, match="amount must be a share in \\[0, 1\\]"):
        global_magnitude_prune(_model(), 1.5)
    with pytest.raises(ValueError, match="no convolution or capsule layer"):
        prunable_parameters(torch.nn.Linear(3, 2))
    with pytest.raises(ValueError, match="torch.nn.Module"):
        prunable_parameters("model")


# ---------------------------------------------------------------- saliency (eq. 16) and LOBSTER

def test_saliency_by_hand():
    # one image, a 1 × 2 grid with O = 2 types: capsules (row, column, type) = (0,0,0), (0,0,1), (0,1,0), (0,1,1)
    capsules = torch.zeros(1, 4, 2)
    capsules[0, :, 0] = torch.tensor([0.5, 1.0, 0.2, 0.0])             # lengths 0.5, 1, 0.2, 0
    couplings = torch.zeros(1, 4, 3)
    couplings[0, :, 2] = torch.tensor([0.8, 0.4, 1.0, 0.9])            # the predicted class is 2
    e = coupling_saliency(capsules, couplings, torch.tensor([2]), grid=(1, 2))
    # position (0, 0): (0.5 · 0.8 + 1 · 0.4) / 2 = 0.4; position (0, 1): (0.2 · 1 + 0 · 0.9) / 2 = 0.1
    torch.testing.assert_close(e, torch.tensor([[[0.4, 0.1]]]))
    up = coupling_saliency(capsules, couplings, torch.tensor([2]), grid=(1, 2), image_size=(4, 8))
    assert up.shape == (1, 4, 8) and up[0, :, 0].allclose(torch.tensor(0.4)) and up[0, :, -1].allclose(torch.tensor(0.1))
    with pytest.raises(ValueError, match="grid must be"):
        coupling_saliency(capsules, couplings, torch.tensor([2]), grid=(3, 1))
    with pytest.raises(ValueError, match=r"capsules must have shape \(B, I, D\)"):
        coupling_saliency(capsules[:, :3], couplings, torch.tensor([2]), grid=(1, 2))


def test_lobster_decays_only_weights_the_loss_ignores():
    model = _model()
    w = model.digits.weight
    w.grad = torch.zeros_like(w)
    w.grad.view(-1)[:10] = 5.0                                          # the loss is sensitive to the first ten
    w.grad.view(-1)[10:20] = 0.5
    before = w.detach().clone()
    model.conv.weight.grad = None                                       # no gradient: left alone
    conv = model.conv.weight.detach().clone()
    lobster_step(model, 0.1)
    flat, old = w.detach().view(-1), before.view(-1)
    torch.testing.assert_close(flat[:10], old[:10])                     # relu(1 − 5) = 0
    torch.testing.assert_close(flat[10:20], old[10:20] * (1 - 0.1 * 0.5))
    torch.testing.assert_close(flat[20:], old[20:] * 0.9)               # relu(1 − 0) = 1
    assert torch.equal(model.conv.weight, conv)
    global_magnitude_prune(model, 0.2)                                  # with masks it updates weight_orig
    model.digits.weight_orig.grad = torch.zeros_like(model.digits.weight_orig)
    orig = model.digits.weight_orig.detach().clone()
    lobster_step(model, 0.5)
    torch.testing.assert_close(model.digits.weight_orig, orig * 0.5)
    with pytest.raises(ValueError, match="strength must be a number >= 0"):
        lobster_step(model, -1.0)


def test_lobster_also_decays_the_biases_of_the_pruned_layers_as_the_papers_code_does():
    model = _model()
    bias = model.conv.bias
    bias.grad = torch.tensor([0.0, 2.0] + [0.0] * (bias.numel() - 2))     # the second bias matters to the loss
    before = bias.detach().clone()
    lobster_step(model, 0.1)
    torch.testing.assert_close(bias[1], before[1])
    torch.testing.assert_close(bias[0], before[0] * 0.9)


def test_snip_keeps_the_weights_with_the_largest_connection_sensitivity():
    torch.manual_seed(3)
    model = CapsNet(CapsNetConfig.slim(conv_channels=4, primary_types=2, decoder=False))
    images, labels = torch.rand(5, 1, 28, 28), torch.tensor([0, 1, 2, 3, 4])
    # the sensitivities |w · dL/dw|, by autograd on a copy, with the margin loss written out here
    twin = CapsNet(model.config)
    twin.load_state_dict(model.state_dict())
    lengths = twin(images).lengths
    target = torch.nn.functional.one_hot(labels, 10).float()
    loss = (target * torch.relu(0.9 - lengths) ** 2
            + 0.5 * (1 - target) * torch.relu(lengths - 0.1) ** 2).sum(dim=1).mean()
    loss.backward()
    weights = [twin.conv.weight, twin.primary.conv.weight, twin.digits.weight]
    scores = torch.cat([(w * w.grad).abs().flatten() for w in weights])
    report = snip_prune(model, images, labels, 0.7)
    kept = torch.cat([(w != 0).flatten() for w in (model.conv.weight, model.primary.conv.weight,
                                                   model.digits.weight)])
    k = round(0.7 * scores.numel())
    assert int((~kept).sum()) == k and report["overall"] == pytest.approx(k / scores.numel())
    threshold = scores.sort().values[k - 1]
    assert bool((scores[kept] >= threshold).all()) and bool((scores[~kept] <= threshold).all())
    with pytest.raises(ValueError, match="must not be pruned yet"):
        snip_prune(model, images, labels, 0.5)
    with pytest.raises(ValueError, match="amount must be a share"):
        snip_prune(CapsNet(model.config), images, labels, 1.5)


def test_class_parse_tree_is_the_mean_quantised_coupling_by_hand():
    c = torch.zeros(4, 3, 2)
    c[:, :, 0] = torch.tensor([[0.91, 0.12, 0.48], [0.79, 0.08, 0.52], [0.3, 0.3, 0.3], [0.5, 0.5, 0.5]])
    c[:, :, 1] = 1 - c[:, :, 0]
    predictions = torch.tensor([0, 0, 1, 0])
    # class 0: images 0, 1, 3 → levels (9, 1, 5), (8, 1, 5), (5, 5, 5) → means (22/3, 7/3, 15/3) / 10
    expected = torch.tensor([22 / 30, 7 / 30, 15 / 30], dtype=torch.float64)
    torch.testing.assert_close(class_parse_tree(c, predictions, 0), expected)
    torch.testing.assert_close(class_parse_tree(c, predictions, 1), torch.tensor([0.7, 0.7, 0.7], dtype=torch.float64))
    with pytest.raises(ValueError, match="no image is predicted as class 1"):
        class_parse_tree(c, torch.zeros(4, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="label must be a class index"):
        class_parse_tree(c, predictions, 2)


# ------------------------------------------------------------------ quantised inference (§3.1.2)

def test_quantised_routing_is_the_last_iteration_with_bin_centres_by_hand():
    from capsule_lab.capsules import squash
    from capsule_lab.routing import bin_centres, dynamic_routing
    torch.manual_seed(3)
    votes = torch.randn(2, 7, 4, 5, dtype=torch.float64)
    plain = dynamic_routing(votes, 3, history=True)
    last_logits = plain.history[-1].logits                       # the iterations before the last are unchanged
    c = torch.softmax(last_logits, dim=2)
    by_hand = torch.round(c * 10) / 10                            # K = 11: centres 0, 0.1, ..., 1
    expected = squash(torch.einsum("bij,bijd->bjd", by_hand, votes))
    quantised = dynamic_routing(votes, 3, quantize_levels=11)
    torch.testing.assert_close(quantised.poses, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(quantised.couplings, by_hand)
    assert torch.equal(quantize(quantised.couplings, 11), quantize(plain.couplings, 11))   # the same levels
    assert not torch.allclose(quantised.poses, plain.poses)
    fine = dynamic_routing(votes, 3, quantize_levels=100001)      # very fine bins: ordinary routing again
    torch.testing.assert_close(fine.poses, plain.poses, rtol=0, atol=1e-4)
    torch.testing.assert_close(bin_centres(torch.tensor([0.04, 0.06, 0.149, 0.97]), 11),
                               torch.tensor([0.0, 0.1, 0.1, 1.0]))
    for bad in (1, 0, 2.5, True):
        with pytest.raises(ValueError, match="quantize_levels must be an integer >= 2"):
            dynamic_routing(votes, 3, quantize_levels=bad)


def test_quantized_inference_hooks_and_unhooks_every_router():
    from capsule_lab.models import CapsNet, CapsNetConfig
    from capsule_lab.measures.parse_trees import quantized_inference
    from capsule_lab.routing import dynamic_routing
    torch.manual_seed(0)
    net = CapsNet(CapsNetConfig.slim(conv_channels=4, primary_types=2, decoder=False)).eval()
    images = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        plain = net(images)
        with quantized_inference(net, 6) as same:
            assert same is net and net.digits.router.hooked              # a hooked router is called on its votes
            quantised = net(images)
        again = net(images)
        u = net.primary(torch.relu(net.conv(images)))
        by_hand = dynamic_routing(net.digits.votes(u), 3, quantize_levels=6)   # the last iteration on bin centres
    assert not net.digits.router.hooked
    torch.testing.assert_close(again.lengths, plain.lengths, rtol=0, atol=0)
    assert not torch.allclose(quantised.lengths, plain.lengths)
    torch.testing.assert_close(quantised.lengths, by_hand.poses.norm(dim=-1), rtol=0, atol=1e-6)
    torch.testing.assert_close(quantised.couplings, by_hand.couplings, rtol=0, atol=0)
    levels = quantised.couplings * 5                               # the couplings returned are on the grid of K = 6
    torch.testing.assert_close(levels, levels.round(), rtol=0, atol=1e-5)
    with pytest.raises(RuntimeError):
        with quantized_inference(net, 11):
            raise RuntimeError("inside")
    assert not net.digits.router.hooked                            # unhooked after an error too
    with pytest.raises(ValueError, match="no router"):
        with quantized_inference(torch.nn.Linear(2, 2), 11):
            pass
