"""capsule_lab.training.eval_mode (re-exported by capsule_lab.training): eval inside, the previous mode after."""

import pytest
import torch
from torch import nn

from capsule_lab.training import eval_mode
from capsule_lab.training import eval_mode as from_training


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))


@pytest.mark.parametrize("training", [True, False])
def test_eval_inside_previous_mode_after(training):
    m = model().train(training)
    with eval_mode(m) as inside:
        assert inside is m
        assert not m.training and not any(sub.training for sub in m.modules())
    assert m.training is training and all(sub.training is training for sub in m.modules())


@pytest.mark.parametrize("training", [True, False])
def test_mode_restored_after_an_exception(training):
    m = model().train(training)
    with pytest.raises(RuntimeError, match="boom"):
        with eval_mode(m):
            raise RuntimeError("boom")
    assert m.training is training


def test_nested():
    m = model().train()
    with eval_mode(m):
        with eval_mode(m):
            assert not m.training
        assert not m.training
    assert m.training


def test_dropout_is_off_inside():
    m = model().train()
    x = torch.ones(4, 2)
    with eval_mode(m):
        assert torch.equal(m(x), m(x))


def test_refuses_a_non_module():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        with eval_mode(object()):
            pass


def test_training_reexports_it():
    assert from_training is eval_mode
