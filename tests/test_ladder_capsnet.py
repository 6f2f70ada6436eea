"""capsule_lab.models.ladder_capsnet (chapter 06): the paper's configurations (capsule counts of §5.2, Table 1's
widths, parameter counts from a formula written here), the slim one, the forward pass's outputs, the loss,
gradients into every layer, and training with capsule_lab.training.fit."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from capsule_lab.layers.ladder import EPSILON, GAMMA, ladder_loss, table1_widths
from capsule_lab.models import LadderCapsNet, LadderCapsNetConfig, LadderCapsNetOutput, ladder_capsnet_loss
from capsule_lab.models.ladder_capsnet import SLIM_FACTOR
from capsule_lab.training import fit


def parameter_count(c: LadderCapsNetConfig) -> int:
    """Conv, primary conv, and 3 per-class MLPs of the code vector (Table 1), counted by hand."""
    n, K, d, D, J = c.primary_caps, c.k, c.primary_dim, c.class_dim, c.classes
    f_widths, p_widths = table1_widths(d, D, K)
    f_widths, p_widths = c.widths or f_widths, c.contribution_widths or p_widths

    def mlp(widths, out):
        sizes = [n, *widths, out]
        return J * sum(a * b + b for a, b in zip(sizes, sizes[1:]))

    conv = c.in_channels * c.conv_channels * c.conv_kernel ** 2 + c.conv_channels
    primary = c.conv_channels * c.primary_types * d * c.primary_kernel ** 2 + c.primary_types * d
    return conv + primary + 2 * mlp(f_widths, K * d * D) + mlp(p_widths, K)


@pytest.mark.parametrize("changes, capsules", [
    (dict(), 4608),                                   # 40×40, 9×9 kernels: 12·12·32 (§5.2)
    (dict(kernel=15), 1152),                          # 40×40, 15×15 on both layers: 6·6·32
    (dict(image_size=28), 1152),                      # MNIST, Sabour's network
    (dict(image_size=28, kernel=15), 288),            # MNIST, 15×15 primary kernel: 3·3·32
])
def test_paper_configurations_have_the_papers_capsule_counts(changes, capsules):
    c = LadderCapsNetConfig.paper(**changes)
    assert c.primary_caps == capsules
    assert (c.conv_channels, c.primary_types, c.primary_dim, c.class_dim, c.classes) == (256, 32, 8, 16, 10)
    assert c.widths is None and c.contribution_widths is None and c.gamma == GAMMA
    # the paper's n_I = ceil((I − 16)/2) for the 9×9 networks
    if changes.get("kernel", 9) == 9:
        assert c.primary_grid == -(-(c.image_size - 16) // 2)


@pytest.mark.parametrize("k", [50, 70, 100])
def test_paper_k_options(k):
    assert LadderCapsNetConfig.paper(k=k).k == k


def test_paper_network_uses_table1_widths_and_its_parameter_count():
    c = LadderCapsNetConfig.paper(image_size=28, kernel=15, k=50)             # the smallest paper network
    model = LadderCapsNet(c)
    w = model.ladder.weights
    assert w.propagation.widths == (384, 256, 128) == w.regression.widths
    assert w.contribution.widths == (150, 100, 50)
    assert w.propagation.weights[-1].shape == (10, 128, 50 * 8 * 16)
    assert w.contribution.output == "sigmoid" and w.propagation.output == "linear"
    assert sum(p.numel() for p in model.parameters()) == parameter_count(c)
    assert parameter_count(LadderCapsNetConfig.paper()) == 76_595_404               # K = 70, 9×9, 40×40


def test_slim_configuration():
    c = LadderCapsNetConfig.slim()
    assert (c.image_size, c.primary_caps, c.k, c.class_dim) == (40, 576, 32, 16)       # D = 16 as the paper's
    # Table 1's shape at CPU size: every width of the paper divided by one factor, 8
    paper = LadderCapsNetConfig.paper()
    assert SLIM_FACTOR == 8 and c.conv_channels * 8 == paper.conv_channels and c.primary_types * 8 == paper.primary_types
    model = LadderCapsNet(c)
    w = model.ladder.weights
    assert w.propagation.widths == w.regression.widths == (48, 32, 16) == tuple(x // 8 for x in (384, 256, 128))
    assert w.contribution.widths == (96, 64, 32)                                        # (3K, 2K, K) as in Table 1
    assert w.propagation.weights[-1].shape == (10, 16, 32 * 8 * 16)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(c)
    assert LadderCapsNetConfig.slim(k=16).k == 16


@pytest.mark.parametrize("make, message", [
    (lambda: LadderCapsNetConfig.paper(k=60), "k must be one of the paper's"),
    (lambda: LadderCapsNetConfig.paper(kernel=11), "kernel must be the paper's 9 or 15"),
    (lambda: LadderCapsNetConfig.slim(k=577), r"k must be an integer in \[1, primary capsules\] = \[1, 576\]"),
    (lambda: LadderCapsNetConfig.slim(image_size=16), "too small"),
    (lambda: LadderCapsNetConfig.slim(gamma=-1.0), "gamma must be a number >= 0"),
    (lambda: LadderCapsNetConfig.slim(classes=1), "classes must be an integer >= 2"),
])
def test_config_refuses(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def _tiny(**changes) -> LadderCapsNet:
    torch.manual_seed(0)
    return LadderCapsNet(LadderCapsNetConfig.slim(image_size=24, conv_channels=4, primary_types=2, k=5,
                                                  widths=(6,), contribution_widths=(4,), **changes))


def test_forward_outputs():
    model = _tiny()
    c = model.config
    n = c.primary_caps
    x = torch.rand(3, 1, 24, 24)
    out = model(x)
    assert isinstance(out, LadderCapsNetOutput)
    assert out.activities.shape == (3, 10) and out.poses.shape == (3, 10, c.class_dim)
    assert out.indices.shape == (3, 5) and out.code.shape == (3, n)
    assert out.regressed.shape == (3, 10, 5, 8) and out.selected.shape == (3, 5, 8) and out.primary.shape == (3, n, 8)
    assert torch.equal(out.lengths, out.activities)
    torch.testing.assert_close(out.poses.norm(dim=-1), out.activities)
    assert (out.indices.diff(dim=1) > 0).all()                                       # ascending
    assert torch.equal(out.code.sum(dim=1), torch.full((3,), 5.0))
    assert torch.equal(out.selected, out.primary[torch.arange(3)[:, None], out.indices])
    lengths = out.primary.norm(dim=-1)
    assert (lengths.gather(1, out.indices).min(dim=1).values
            >= lengths.masked_fill(out.code.bool(), -1).max(dim=1).values).all()    # the K longest are kept
    assert torch.equal(model(x, torch.tensor([0, 1, 2])).activities, out.activities)   # targets are not used


def test_loss_and_gradients_reach_every_layer():
    model = _tiny()
    x, y = torch.rand(4, 1, 24, 24), torch.tensor([0, 3, 3, 9])
    out = model(x, y)
    loss = ladder_capsnet_loss(out, x, y)
    expected = ladder_loss(out.activities, y, out.code, out.primary.norm(dim=-1), EPSILON)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    with pytest.raises(ValueError, match="LadderCapsNetOutput"):
        ladder_capsnet_loss((out.activities,), x, y)


def test_forward_refuses_wrong_images():
    model = _tiny()
    with pytest.raises(ValueError, match=r"images must have shape \(B, 1, 24, 24\)"):
        model(torch.rand(2, 1, 28, 28))


def test_fit_trains_it():
    model = _tiny()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.rand(32, 1, 24, 24, generator=g), torch.randint(0, 10, (32,), generator=g))
    before = ladder_capsnet_loss(model(data.tensors[0]), None, data.tensors[1]).item()
    history = fit(model, data, data, epochs=3, batch_size=16, lr=1e-2, loss_fn=ladder_capsnet_loss, progress=False)
    assert len(history.train_loss) == 3 and len(history.test_accuracy) == 3
    after = ladder_capsnet_loss(model(data.tensors[0]), None, data.tensors[1]).item()
    assert after < before
