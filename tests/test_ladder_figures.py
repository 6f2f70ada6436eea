"""capsule_lab.figures.ladder, capsule_lab.figures.step_times and capsule_lab.widgets.ladder (chapter 06): tiny
seeded L-CapsNets (random init, no training) and hand-made measurements; what is drawn is checked against numbers
computed here."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from capsule_lab.capsules import conv_to_capsules
from capsule_lab.figures import (PAPER_TABLE3, activity_profile_figure, coupling_length_figure, kept_capsule_positions,
                                 ladder_explorer_figure, ladder_explorer_result, plot_kept_capsules,
                                 receptive_field_centres, step_time_figure)
from capsule_lab.measures.activity import activity_profile, most_active_couplings
from capsule_lab.models import CapsNetConfig, LadderCapsNet, LadderCapsNetConfig
from capsule_lab.widgets import LadderExplorer, ladder_explorer

SLIM = LadderCapsNetConfig.slim(k=8)     # 40×40; 9×9 conv, 9×9/2 primary: a 12 × 12 grid of 4 types, n = 576


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def models() -> dict:
    out = {}
    for k in (8, 16):
        torch.manual_seed(k)
        out[k] = LadderCapsNet(LadderCapsNetConfig.slim(k=k))
    return out


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    return torch.rand(3, 1, 40, 40, generator=g), torch.tensor([4, 7, 1])


def width_ok(fig) -> bool:
    return fig.get_size_inches()[0] <= 7.5 + 1e-9


# ---------------------------------------------------------------- Figure 1

def test_coupling_length_figure_draws_lengths_couplings_and_uniform():
    g = torch.Generator().manual_seed(1)
    u = 0.3 * torch.randn(50, 8, generator=g)
    c = torch.softmax(torch.randn(50, 10, generator=g), dim=-1)
    indices, lengths, couplings = most_active_couplings(u, c, 3, top=20)
    fig = coupling_length_figure(lengths, couplings, 3)
    assert isinstance(fig, plt.Figure) and width_ok(fig)
    ax, ax_c = fig.axes[:2]
    heights = [p.get_height() for p in ax.patches]
    assert np.allclose(heights, u.norm(dim=-1).sort(descending=True).values[:20].numpy())
    line = [l for l in ax_c.lines if len(l.get_xdata()) == 20][0]
    assert list(line.get_xdata()) == list(range(1, 21))
    assert np.allclose(line.get_ydata(), c[indices, 3].numpy())
    uniform = [l for l in ax_c.lines if l.get_linestyle() == "--"][0]
    assert np.allclose(uniform.get_ydata(), 0.1)


@pytest.mark.parametrize("lengths, couplings, label, match", [
    (torch.ones(2, 3), torch.ones(2, 3) / 10, 0, "lengths must have shape"),
    (torch.tensor([0.9, 0.5]), torch.tensor([0.1, 0.2, 0.3]), 0, "couplings must have shape"),
    (torch.tensor([0.5, 0.9]), torch.tensor([0.1, 0.2]), 0, "non-increasing"),
    (torch.tensor([0.9, 0.5]), torch.tensor([0.1, 1.5]), 0, r"couplings must be in \[0, 1\]"),
    (torch.tensor([0.9, 0.5]), torch.tensor([0.1, 0.2]), 10, r"label must be a class index in \[0, 10\)"),
])
def test_coupling_length_figure_rejects_bad_input(lengths, couplings, label, match):
    with pytest.raises(ValueError, match=match):
        coupling_length_figure(lengths, couplings, label)


# ---------------------------------------------------------------- Figure 4

def test_activity_profile_figure_one_curve_per_k_and_a_line_at_each_k():
    g = torch.Generator().manual_seed(2)
    profiles = {4: activity_profile(torch.randn(5, 30, 8, generator=g), top=12),
                "CapsNet": activity_profile(0.5 * torch.randn(5, 30, 8, generator=g), top=12)}
    fig = activity_profile_figure(profiles)
    assert width_ok(fig)
    ax = fig.axes[0]
    curves = [l for l in ax.lines if len(l.get_xdata()) == 12]
    assert len(curves) == 2
    assert np.allclose(curves[0].get_ydata(), profiles[4].numpy())
    assert list(curves[1].get_xdata()) == list(range(1, 13))
    marks = [l for l in ax.lines if l.get_linestyle() == "--"]
    assert len(marks) == 1 and np.allclose(marks[0].get_xdata(), 4.5)     # between ranks K and K + 1


@pytest.mark.parametrize("profiles, match", [
    ({}, "non-empty dict"),
    ({50: torch.tensor([0.2, 0.9])}, "non-increasing"),
    ({50: torch.ones(2, 3)}, r"profiles\[50\] must have shape"),
    ({1.5: torch.ones(3)}, "keys must be"),
])
def test_activity_profile_figure_rejects_bad_input(profiles, match):
    with pytest.raises(ValueError, match=match):
        activity_profile_figure(profiles)


# ---------------------------------------------------------------- Table 3

REPORT = {"device": "cpu", "threads": 2, "batch": 100,
          "models": {"ladder K=16": {"median_s": 0.11, "mean_s": 0.12, "stderr_s": 0.01, "parameters": 10},
                     "ladder K=32": {"median_s": 0.13, "mean_s": 0.13, "stderr_s": math.nan, "parameters": 10},
                     "capsnet r=3": {"median_s": 0.25, "mean_s": 0.26, "stderr_s": 0.02, "parameters": 10}}}


def test_step_time_figure_bars_are_the_medians_and_the_paper_panel_is_separate():
    fig = step_time_figure(REPORT, paper=PAPER_TABLE3)
    assert width_ok(fig)
    ours, theirs = fig.axes[:2]
    assert np.allclose([p.get_width() for p in ours.patches], [0.11, 0.13, 0.25])
    assert [t.get_text() for t in ours.get_yticklabels()] == list(REPORT["models"])
    colours = [p.get_facecolor()[:3] for p in ours.patches]
    assert colours[0] == colours[1] != colours[2]                        # ladder and capsnet in two colours
    assert np.allclose([p.get_width() for p in theirs.patches], [v[0] for v in PAPER_TABLE3.values()])
    assert "cpu" in ours.get_title() and "2 threads" in ours.get_title() and "cpu" not in fig._suptitle.get_text()
    single = step_time_figure(REPORT, paper={"ladder K=50": 0.2034, "capsnet r=5": 2.656})
    assert np.allclose([p.get_width() for p in single.axes[1].patches], [0.2034, 2.656])
    assert len(step_time_figure(REPORT).axes) == 1


@pytest.mark.parametrize("report, paper, match", [
    ({"device": "cpu"}, None, "report must be the dict"),
    ({"models": {"a": {"mean_s": 1.0}}}, None, "must be a dict with 'median_s'"),
    ({"models": {"a": {"median_s": -1.0}}}, None, "must be a number >= 0"),
    (REPORT, {"ladder K=50": (0.2, 0.01, 3)}, r"seconds or \(seconds, standard error\)"),
    (REPORT, {}, "paper must be a non-empty dict"),
])
def test_step_time_figure_rejects_bad_input(report, paper, match):
    with pytest.raises(ValueError, match=match):
        step_time_figure(report, paper)


# ---------------------------------------------------------------- the kept capsules on the image

def test_capsule_order_is_row_column_type():
    """The ordering plot_kept_capsules assumes, read off conv_to_capsules (what PrimaryCapsules uses)."""
    x = torch.zeros(1, 4 * 8, 12, 12)
    x[0, 3 * 8:4 * 8, 2, 5] = 1.0                                          # type 3 at row 2, column 5
    assert int(conv_to_capsules(x, 8).norm(dim=-1).argmax()) == 2 * 12 * 4 + 5 * 4 + 3 == 119


def test_receptive_field_centres_accepts_the_ladder_config_and_is_the_true_centre():
    centres = receptive_field_centres(SLIM)
    assert np.allclose(centres, [8 + 2 * m for m in range(12)])            # 4 + 4 + 2 m
    assert np.allclose(receptive_field_centres(CapsNetConfig()), [8, 10, 12, 14, 16, 18])
    torch.manual_seed(0)                                                    # the pixels that reach position (3, 7)
    model = LadderCapsNet(SLIM)
    x = torch.zeros(1, 1, 40, 40, requires_grad=True)
    model.primary.conv(F.relu(model.conv(x) + 10.0))[0, :, 3, 7].sum().backward()
    rows, cols = np.nonzero(x.grad[0, 0].numpy())
    assert (rows.min() + rows.max()) / 2 == centres[3] and (cols.min() + cols.max()) / 2 == centres[7]
    with pytest.raises(ValueError, match="config must be"):
        receptive_field_centres({"image_size": 40})


def test_plot_kept_capsules_puts_markers_at_the_receptive_field_centres():
    # (row, column, type) → index r·48 + c·4 + t; centre of grid position m: 8 + 2 m pixels
    indices = torch.tensor([0, 1, 46, 119, 572])   # (0,0,0), (0,0,1), (0,11,2), (2,5,3), (11,11,0)
    expected = {(8.0, 8.0): 2, (30.0, 8.0): 1, (18.0, 12.0): 1, (30.0, 30.0): 1}    # (x = column, y = row): count
    fig, ax = plt.subplots()
    dots = plot_kept_capsules(ax, torch.rand(1, 40, 40), indices, SLIM)
    offsets = [tuple(map(float, xy)) for xy in dots.get_offsets()]
    assert sorted(offsets) == sorted(expected)
    sizes = dict(zip(offsets, dots.get_sizes()))
    assert sizes[(8.0, 8.0)] > sizes[(30.0, 8.0)] == sizes[(30.0, 30.0)]
    assert [t.get_text() for t in ax.texts] == ["2"]
    rows, cols, counts = kept_capsule_positions(indices, SLIM)
    assert sorted(zip(cols, rows, counts)) == sorted((x, y, n) for (x, y), n in expected.items())


@pytest.mark.parametrize("image, indices, config, match", [
    (torch.rand(40, 40), torch.tensor([576]), SLIM, r"indices must have shape \(K,\), integers in \[0, n\)"),
    (torch.rand(40, 40), torch.tensor([[1, 2]]), SLIM, "indices must have shape"),
    (torch.rand(28, 28), torch.tensor([1]), SLIM, "image must have shape"),
    (torch.rand(40, 40), torch.tensor([1]), "slim", "config must be"),
])
def test_plot_kept_capsules_rejects_bad_input(image, indices, config, match):
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match=match):
        plot_kept_capsules(ax, image, indices, config)


# ---------------------------------------------------------------- the explorer

def direct(model, images, index):
    model.eval()
    with torch.no_grad():
        out = model(images[index:index + 1])
    model.train()
    errors = ((out.regressed[0] - out.selected[0].unsqueeze(0)) ** 2).sum(-1).mean(-1)
    return out, errors


def test_ladder_explorer_figure_and_result_match_a_forward_pass(models, data):
    images, labels = data
    model = models[16]
    fig = ladder_explorer_figure(models, images, labels, 16, 2)
    assert isinstance(fig, plt.Figure) and width_ok(fig) and len(fig.axes) == 4
    assert model.training                                                  # its mode is given back
    out, errors = direct(model, images, 2)
    r = ladder_explorer_result(models, images, labels, 16, 2)
    assert torch.equal(r["indices"], out.indices[0]) and len(r["indices"]) == 16
    assert torch.allclose(r["activities"], out.activities[0])
    assert r["prediction"] == int(out.activities[0].argmax()) and r["label"] == 1
    assert torch.allclose(r["errors"], errors, atol=1e-6)
    assert torch.allclose(torch.exp(-model.config.gamma * r["errors"]), out.activities[0], atol=1e-5)   # eq. 4
    scatter = fig.axes[1].collections[0]
    j = r["prediction"]
    assert np.allclose(scatter.get_offsets(), np.stack([out.selected[0].flatten().numpy(),
                                                        out.regressed[0, j].flatten().numpy()], axis=1), atol=1e-6)
    assert np.allclose([p.get_height() for p in fig.axes[3].patches], out.activities[0].numpy())
    markers = fig.axes[0].collections[0].get_offsets()
    grid = {(8 + 2 * ((i // 4) % 12), 8 + 2 * (i // 48)) for i in out.indices[0].tolist()}
    assert {tuple(map(float, xy)) for xy in markers} == grid


@pytest.mark.parametrize("k, index, images, match", [
    (70, 0, None, r"k must be one of the keys of models, \[8, 16\]"),
    (8, 3, None, r"index must be an integer in \[0, 3\)"),
    (8, 0, torch.rand(3, 1, 28, 28), r"images must have shape \(N, 1, 40, 40\)"),
])
def test_ladder_explorer_figure_rejects_bad_input(models, data, k, index, images, match):
    with pytest.raises(ValueError, match=match):
        ladder_explorer_figure(models, data[0] if images is None else images, data[1], k, index)
    with pytest.raises(ValueError, match="models must be a non-empty dict"):
        ladder_explorer_figure({}, data[0], data[1], 8, 0)


def test_ladder_explorer_widget_builds_without_a_display_and_follows_its_controls(models, data):
    images, labels = data
    explorer = ladder_explorer(models, images, labels)
    assert isinstance(explorer, LadderExplorer)
    assert explorer.k.value == 8 and explorer.index.value == 0
    assert explorer.image.value[:4] == b"\x89PNG" and width_ok(explorer.figure)
    out, errors = direct(models[8], images, 0)
    assert torch.equal(explorer.result["indices"], out.indices[0])
    assert torch.allclose(explorer.result["activities"], out.activities[0])
    assert torch.allclose(explorer.result["errors"], errors, atol=1e-6)
    first = explorer.figure
    explorer.k.value = 16
    assert explorer.figure is not first and len(explorer.result["indices"]) == 16
    assert torch.equal(explorer.result["indices"], direct(models[16], images, 0)[0].indices[0])
    activities = explorer.result["activities"]
    explorer.index.value = 1
    assert explorer.result["index"] == 1 and explorer.result["label"] == 7
    assert not torch.equal(explorer.result["activities"], activities)
    assert torch.allclose(explorer.result["activities"], direct(models[16], images, 1)[0].activities[0])
    assert "predicted" in explorer.numbers.value
    with pytest.raises(ValueError, match="k must be one of the keys"):
        ladder_explorer(models, images, labels, k=32)
