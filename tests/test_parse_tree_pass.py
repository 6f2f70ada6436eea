"""capsule_lab.measures.parse_trees.collect_parse_trees: the one pass that collects a network's parse trees (chapter
05's REM measures and chapter 08's bench read their trees there), checked against the network run by hand on the
whole dataset at once and the couplings renormalised here."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from capsule_lab.measures.parse_trees import collect_parse_trees, quantized_inference
from capsule_lab.models import CapsNet, CapsNetConfig

TINY = CapsNetConfig.slim(conv_channels=4, primary_types=2, decoder=False)


def _data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.rand(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g))


def test_dynamic_routing_trees_are_its_couplings_batch_by_batch_as_in_one_pass():
    torch.manual_seed(0)
    model, data = CapsNet(TINY), _data(7, 1)
    seen = []
    trees = collect_parse_trees(model, data, batch_size=3, dynamics=True,
                                each_batch=lambda x, y, out: seen.append(len(y)))
    with torch.no_grad():
        out = model.eval()(data.tensors[0])
    assert seen == [3, 3, 1]                                        # every batch, in order
    torch.testing.assert_close(trees.couplings, out.couplings)        # Sabour's couplings sum to 1 over the outputs
    torch.testing.assert_close(trees.couplings.sum(dim=2), torch.ones(7, out.couplings.shape[1]))
    assert torch.equal(trees.predictions, out.lengths.argmax(dim=1)) and torch.equal(trees.labels, data.tensors[1])
    assert (trees.levels, trees.normalize_over, trees.classes) == (11, "outputs", 10)
    assert trees.dynamics is not None and trees.dynamics.shape[0] == 7
    assert collect_parse_trees(model, data, batch_size=3).dynamics is None          # only when asked


def test_couplings_over_the_inputs_are_renormalised_over_the_outputs_and_routed_are_kept_as_returned():
    torch.manual_seed(1)
    model, data = CapsNet(TINY, router="similarity"), _data(6, 2)
    trees = collect_parse_trees(model, data, batch_size=4)
    routed = collect_parse_trees(model, data, batch_size=4, keep="routed")
    with torch.no_grad():
        out = model.eval()(data.tensors[0])
    raw = out.couplings
    torch.testing.assert_close(raw.sum(dim=1), torch.ones(6, raw.shape[2]))    # Faria's sum to 1 over the inputs
    torch.testing.assert_close(routed.couplings, raw)
    by_hand = raw.clamp_min(0) / raw.clamp_min(0).sum(dim=2, keepdim=True)
    torch.testing.assert_close(trees.couplings, by_hand)
    assert trees.normalize_over == "inputs"
    none = collect_parse_trees(model, data, batch_size=4, keep=None)
    assert none.couplings is None and torch.equal(none.predictions, trees.predictions)


def test_under_quantised_inference_the_routed_couplings_are_bin_centres():
    torch.manual_seed(2)
    model, data = CapsNet(TINY), _data(5, 3)
    with quantized_inference(model, 6):
        routed = collect_parse_trees(model, data, batch_size=2, keep="routed").couplings
    levels = routed * 5
    torch.testing.assert_close(levels, levels.round(), atol=1e-5, rtol=0)          # c̃ = k / (K − 1)


def test_bad_arguments_are_refused_with_what_was_given():
    model, data = CapsNet(TINY), _data(2, 4)
    with pytest.raises(ValueError, match="keep must be one of"):
        collect_parse_trees(model, data, keep="all")
    with pytest.raises(ValueError, match="must offer parse_trees"):
        collect_parse_trees(torch.nn.Linear(2, 2), data)
    with pytest.raises(ValueError, match="each_batch must be a function"):
        collect_parse_trees(model, data, each_batch=3)
    with pytest.raises(ValueError, match="empty dataset"):
        collect_parse_trees(model, TensorDataset(torch.zeros(0, 1, 28, 28), torch.zeros(0, dtype=torch.long)))
