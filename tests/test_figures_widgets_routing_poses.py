"""Chapter 02's figures (capsule_lab.figures.routing, .capsnet) and widgets (capsule_lab.widgets.routing, .poses).

Figures: the axes and titles match the inputs; bad inputs raise ValueError. Widgets: they can be
built without a display and redraw when a slider moves; the numbers they draw are checked against
an independent computation (a plain-Python Algorithm 1 written here, and capsule_lab.routing).
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from capsule_lab import figures, widgets
from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.routing import ScaledRouter, dynamic_routing
from capsule_lab.training import History


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def reference_routing(votes, iterations, scale=1.0):
    """Algorithm 1 for one sample with plain Python loops: votes[i][j] is a list of D floats."""
    I, J, D = len(votes), len(votes[0]), len(votes[0][0])
    b = [[0.0] * J for _ in range(I)]
    for r in range(iterations):
        c = []
        for i in range(I):
            e = [math.exp(b[i][j]) for j in range(J)]
            c.append([x / sum(e) for x in e])
        v = []
        for j in range(J):
            s = [sum(c[i][j] * votes[i][j][d] for i in range(I)) for d in range(D)]
            n2 = sum(x * x for x in s)
            v.append([n2 / (1 + n2) * x / math.sqrt(n2) for x in s])
        if r < iterations - 1:
            for i in range(I):
                for j in range(J):
                    b[i][j] += scale * sum(votes[i][j][d] * v[j][d] for d in range(D))
    return np.array(c), np.array(v)


def bar_heights(fig) -> np.ndarray:
    """The coupling bars drawn by figures.draw_coupling_bars, as an (I, J) array."""
    ax = fig.axes[1]
    heights = np.array([p.get_height() for p in ax.patches])
    I = len(ax.get_xticks())
    return heights.reshape(-1, I).T


# ---------------------------------------------------------------- figures

def test_plot_couplings_one_panel_per_iteration():
    result = dynamic_routing(widgets.toy_votes(), 3, history=True)
    fig = figures.plot_couplings([h.couplings for h in result.history], title="toy")
    panels = [ax for ax in fig.axes if ax.get_title().startswith("iteration")]
    assert [ax.get_title() for ax in panels] == ["iteration 1", "iteration 2", "iteration 3"]
    assert len(fig.axes) == 4  # + colour bar
    assert fig._suptitle.get_text() == "toy"
    for h, ax in zip(result.history, panels):
        np.testing.assert_allclose(ax.images[0].get_array(), h.couplings[0].numpy(), atol=1e-7)
    # also a stacked (R, I, J) tensor
    fig2 = figures.plot_couplings(torch.stack([h.couplings[0] for h in result.history]))
    assert len(fig2.axes) == 4


@pytest.mark.parametrize("bad", [
    [],                                   # no iterations
    torch.rand(4, 3),                     # no iteration dimension
    [torch.rand(4, 3), torch.rand(5, 3)],  # shapes differ
    [torch.full((2, 2), 1.5)],            # not couplings
    [torch.full((2, 2), float("nan"))],
    "couplings",
])
def test_plot_couplings_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        figures.plot_couplings(bad)


def test_plot_couplings_rejects_wrong_labels():
    with pytest.raises(ValueError):
        figures.plot_couplings([torch.full((3, 2), 0.5)], input_labels=["a", "b"])


def test_plot_toy_routing_draws_every_iteration():
    votes = widgets.toy_votes()
    result = dynamic_routing(votes, 4, history=True)
    fig = figures.plot_toy_routing(votes[0], [h.couplings for h in result.history], [h.poses for h in result.history])
    assert [ax.get_title() for ax in fig.axes] == [f"iteration {r}" for r in range(1, 5)]
    # one arrow per vote (I·J) and per output (J) in each panel
    I, J = votes.shape[1:3]
    for ax in fig.axes:
        arrows = [t for t in ax.texts if getattr(t, "arrow_patch", None) is not None]
        assert len(arrows) == I * J + J


def test_plot_toy_routing_rejects_bad_input():
    votes = widgets.toy_votes()[0]
    c, v = torch.full((1, 5, 2), 0.5), torch.zeros(1, 2, 2)
    with pytest.raises(ValueError):
        figures.plot_toy_routing(torch.rand(5, 2, 3), c, v)        # 3-D votes
    with pytest.raises(ValueError):
        figures.plot_toy_routing(votes, c, torch.zeros(2, 2, 2))   # R differs
    with pytest.raises(ValueError):
        figures.plot_toy_routing(votes, torch.full((1, 4, 2), 0.5), v)  # I differs


def test_plot_history():
    h = History(epoch=[1, 2, 3], train_loss=[0.3, 0.1, 0.05], train_accuracy=[0.8, 0.9, 0.95],
                test_accuracy=[0.85, 0.92, 0.96], lr=[1e-3] * 3, seconds=[1.0] * 3)
    fig = figures.plot_history(h)
    assert [ax.get_title() for ax in fig.axes] == ["training loss", "accuracy (%)"]
    np.testing.assert_allclose(fig.axes[1].lines[1].get_ydata(), [85, 92, 96])
    assert len(figures.plot_history(h.to_dict()).axes) == 2
    with pytest.raises(ValueError):
        figures.plot_history(History())
    with pytest.raises(ValueError):
        figures.plot_history({"epoch": [1, 2], "train_loss": [0.1], "train_accuracy": [0.5, 0.6]})
    with pytest.raises(ValueError):
        figures.plot_history([0.1, 0.2])


def test_plot_reconstructions():
    x, y = torch.rand(5, 1, 28, 28), torch.rand(5, 28, 28)
    fig = figures.plot_reconstructions(x, y, labels=torch.arange(5), predictions=[0, 1, 2, 3, 5])
    assert len(fig.axes) == 10
    assert fig.axes[0].get_title() == "label 0" and fig.axes[9].get_title() == "decoded 5"
    np.testing.assert_allclose(fig.axes[5].images[0].get_array(), y[0].numpy())
    with pytest.raises(ValueError):
        figures.plot_reconstructions(x, torch.rand(4, 28, 28))
    with pytest.raises(ValueError):
        figures.plot_reconstructions(torch.rand(28, 28), torch.rand(28, 28))
    with pytest.raises(ValueError):
        figures.plot_reconstructions(x, y, labels=[1, 2])


def test_plot_pose_sweep():
    sweep = torch.rand(3, 11, 28, 28)
    fig = figures.plot_pose_sweep(sweep, widgets.SABOUR_PERTURBATIONS, dims=[0, 5, 15])
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()][::10] == ["-0.25", "+0.25"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["dim 0", "dim 5", "dim 15"]
    montage = ax.images[0].get_array()
    assert montage.shape == (3 * 29 - 1, 11 * 29 - 1)
    np.testing.assert_allclose(montage[29:29 + 28, 2 * 29:2 * 29 + 28], sweep[1, 2].numpy(), rtol=1e-6)
    with pytest.raises(ValueError):
        figures.plot_pose_sweep(sweep, [0.0, 0.1])           # P differs
    with pytest.raises(ValueError):
        figures.plot_pose_sweep(torch.rand(11, 28, 28), widgets.SABOUR_PERTURBATIONS)
    with pytest.raises(ValueError):
        figures.plot_pose_sweep(sweep, widgets.SABOUR_PERTURBATIONS, dims=[0, 1])


# ---------------------------------------------------------------- routing explorer

def test_scaled_router_is_dynamic_routing_at_scale_one():
    votes = torch.randn(3, 7, 4, 5)
    for r in (1, 2, 3, 6):
        a, b = ScaledRouter(r, 1.0)(votes), dynamic_routing(votes, r)
        torch.testing.assert_close(a.couplings, b.couplings)
        torch.testing.assert_close(a.poses, b.poses)


def test_scaled_router_matches_plain_python():
    votes = widgets.toy_votes()
    for scale in (0.0, 2.5):
        c, v = reference_routing(votes[0].tolist(), 4, scale)
        result = ScaledRouter(4, scale)(votes)
        np.testing.assert_allclose(result.couplings[0].numpy(), c, atol=1e-6)
        np.testing.assert_allclose(result.poses[0].numpy(), v, atol=1e-6)
    with pytest.raises(ValueError):
        ScaledRouter(0)
    with pytest.raises(ValueError):
        ScaledRouter(3)(votes[0])
    with pytest.raises(ValueError):
        ScaledRouter(3, float("inf"))(votes)


def test_routing_explorer_figure_draws_the_couplings():
    votes = widgets.toy_votes()
    fig = widgets.routing_explorer_figure()
    assert len(fig.axes) == 2
    c, _ = reference_routing(votes[0].tolist(), 3)
    np.testing.assert_allclose(bar_heights(fig), c, atol=1e-6)
    with pytest.raises(ValueError):
        widgets.routing_explorer_figure(torch.rand(1, 4, 2, 3))  # votes must be 2-D


def test_routing_explorer_responds_to_its_sliders():
    w = widgets.routing_explorer()
    assert (w.iterations.min, w.iterations.max, w.iterations.value) == (1, 6, 3)
    assert w.scale.value == 1.0
    votes = widgets.toy_votes()
    for r in (1, 5, 2):
        w.iterations.value = r
        expected = dynamic_routing(votes, r).couplings[0].numpy()
        np.testing.assert_allclose(w.result.couplings[0].numpy(), expected, atol=1e-6)
        np.testing.assert_allclose(bar_heights(w.figure), expected, atol=1e-6)
    w.iterations.value = 1  # one iteration: the couplings are still uniform
    np.testing.assert_allclose(bar_heights(w.figure), 0.5)
    w.iterations.value = 3
    w.scale.value = 3.0
    c, _ = reference_routing(votes[0].tolist(), 3, 3.0)
    np.testing.assert_allclose(bar_heights(w.figure), c, atol=1e-6)
    assert "λ = 3" in w.figure._suptitle.get_text()


def test_routing_explorer_accepts_other_votes():
    votes = torch.randn(6, 3, 2)
    w = widgets.routing_explorer(votes)
    w.iterations.value = 2
    np.testing.assert_allclose(bar_heights(w.figure), dynamic_routing(votes[None], 2).couplings[0].numpy(),
                               atol=1e-6)
    with pytest.raises(ValueError):
        widgets.routing_explorer(torch.randn(2, 6, 3, 2))  # one sample only


# ---------------------------------------------------------------- pose explorer

@pytest.fixture(scope="module")
def tiny_capsnet():
    torch.manual_seed(0)
    config = CapsNetConfig.slim(conv_channels=8, primary_types=2, decoder_hidden=(16, 32))
    return CapsNet(config).eval()


def test_pose_sweep_perturbs_one_dimension_of_the_winner(tiny_capsnet):
    image = torch.rand(1, 1, 28, 28)
    sweep, winner = widgets.pose_sweep(tiny_capsnet, image, dims=[2, 7], perturbations=[-0.25, 0.0, 0.25])
    assert sweep.shape == (2, 3, 28, 28)
    with torch.no_grad():
        out = tiny_capsnet(image)
        assert winner == int(out.lengths.argmax())
        poses = out.poses.clone()
        poses[0, winner, 7] += 0.25
        expected = tiny_capsnet.decoder(poses, torch.tensor([winner]))[0, 0]
        plain = tiny_capsnet.decoder(out.poses, torch.tensor([winner]))[0, 0]
    torch.testing.assert_close(sweep[1, 2], expected)
    torch.testing.assert_close(sweep[0, 1], plain)
    with pytest.raises(ValueError):
        widgets.pose_sweep(tiny_capsnet, image, dims=[16])
    with pytest.raises(ValueError):
        widgets.pose_sweep(tiny_capsnet, torch.rand(2, 1, 28, 28))


def test_pose_explorer_figure(tiny_capsnet):
    image = torch.rand(28, 28)
    fig = widgets.pose_explorer_figure(tiny_capsnet, image)
    (ax,) = fig.axes
    assert len(ax.get_yticks()) == 16 and len(ax.get_xticks()) == 11
    sweep, winner = widgets.pose_sweep(tiny_capsnet, image)
    np.testing.assert_allclose(ax.images[0].get_array()[:28, :28], sweep[0, 0].numpy(), rtol=1e-6)
    assert f"class {winner}" in ax.get_title()


def test_pose_explorer_responds_to_its_sliders(tiny_capsnet):
    image = torch.rand(1, 1, 28, 28)
    w = widgets.pose_explorer(tiny_capsnet, image)
    assert (w.dim.min, w.dim.max) == (0, 15)
    assert (w.delta.min, w.delta.max) == (-0.25, 0.25)
    sweep, _ = widgets.pose_sweep(tiny_capsnet, image, dims=[0, 9], perturbations=[0.25, -0.1])
    torch.testing.assert_close(w.reconstruction, sweep[0, 0])
    w.dim.value = 9
    w.delta.value = -0.1
    torch.testing.assert_close(w.reconstruction, sweep[1, 1])
    np.testing.assert_allclose(w.figure.axes[2].images[0].get_array(), sweep[1, 1].numpy(), rtol=1e-5)
    assert w.figure.axes[2].get_title() == "dim 9 -0.10"


def test_pose_explorer_needs_a_decoder():
    model = CapsNet(CapsNetConfig.slim(conv_channels=8, primary_types=2, decoder=False))
    with pytest.raises(ValueError):
        widgets.pose_explorer(model, torch.rand(1, 1, 28, 28))
