"""The alt text and captions that chapter 02's figure functions attach (capsule_lab.figures.routing, .capsnet,
capsule_lab.widgets.routing, .poses) say what the figure's data show: each test draws a small hand-made input
whose answer is known (which output each input couples to, which curve rises, which digit is misread, which
pose dimension matters) and checks that the description names it. Also: the series are told apart by more than
colour (line styles, hatches).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from capsule_lab import figures, widgets
from capsule_lab.figures.descriptions import check_alt_text, description_of
from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.routing import dynamic_routing
from capsule_lab.training import History


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def described(fig):
    d = description_of(fig)
    assert d is not None, "the figure function attaches a description"
    check_alt_text(d.alt)
    assert d.caption.strip() and d.caption != d.alt
    return d


# Couplings of 3 inputs to 2 outputs in 2 iterations: uniform, then input 0 → output 1 and inputs 1, 2 → output 0.
UNIFORM = [[0.5, 0.5]] * 3
DECIDED = [[0.2, 0.8], [0.9, 0.1], [0.7, 0.3]]


def test_plot_couplings_names_where_each_input_sends_its_vote():
    d = described(figures.plot_couplings([UNIFORM, DECIDED]))
    assert "3 input capsules" in d.alt and "2 output capsules" in d.alt
    assert "In iteration 1 every coupling is 0.50" in d.alt
    assert "By iteration 2 inputs i=1 and i=2 send most of their vote to j=0 (0.90, 0.70) and input i=0 to j=1 " \
           "(0.80)." in d.alt
    assert d.caption == "Couplings of 3 input capsules to 2 output capsules, routing iterations 1 to 2"


def test_plot_couplings_summarises_many_inputs():
    c = torch.full((20, 4), 0.1)
    c[:, 0] = 0.7                                  # every input's largest coupling is 0.7
    d = described(figures.plot_couplings([torch.full((20, 4), 0.25), c]))
    assert "the largest coupling of an input is 0.70 on average (uniform: 0.25)" in d.alt


def test_plot_toy_routing_names_the_assignment_and_the_lengths():
    votes = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.1], [-1.0, 0.0]], [[0.0, -1.0], [0.0, 1.0]]])
    poses = [torch.tensor([[0.5, 0.0], [0.0, 0.3]]), torch.tensor([[0.2, 0.0], [0.0, 0.6]])]
    d = described(figures.plot_toy_routing(votes, [UNIFORM, DECIDED], poses))
    assert "(v0 has length 0.50 and v1 has length 0.30)" in d.alt
    assert "inputs 1 and 2 send most of their vote to v0 (0.90, 0.70) and input 0 to v1 (0.80)" in d.alt
    one = described(figures.plot_toy_routing(votes, [DECIDED[::-1]], poses[:1]))
    assert ("In its one iteration inputs 0 and 1 send most of their vote to v0 (0.70, 0.90) and input 2 to v1 (0.80); "
            "v0 has length 0.50 and v1 has length 0.30.") in one.alt
    assert "the length of v0 falls from 0.50 to 0.20 and v1 grows from 0.30 to 0.60" in d.alt


def test_plot_routing_state_names_the_lengths_and_the_assignment():
    votes = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.1], [-1.0, 0.0]], [[0.0, -1.0], [0.0, 1.0]]])
    poses = torch.tensor([[0.6, 0.8], [0.0, -0.25]])            # lengths 1.00 and 0.25
    d = described(figures.plot_routing_state(votes, DECIDED, poses, output_labels=["face", "house"]))
    assert "face of length 1.00 and house of length 0.25" in d.alt
    assert "inputs 1 and 2 send most of their vote to face (0.90, 0.70) and input 0 to house (0.80)" in d.alt


def test_routing_state_and_explorer_describe_the_routing_they_draw():
    votes = widgets.toy_votes()
    c = dynamic_routing(votes, 3).couplings[0].numpy()
    fig = widgets.routing_explorer_figure()
    d = described(fig)
    assert d.caption.startswith("The routing explorer at its default settings")
    assert "sliders" in d.caption
    assert d.alt.startswith("The routing explorer after r = 3 iterations, agreement scale λ = 1.")
    # inputs 0-2 couple to v0, inputs 3-4 to v1, with the couplings the bars show
    assert (f"inputs 0, 1 and 2 send most of their vote to v0 ({c[0, 0]:.2f}, {c[1, 0]:.2f}, {c[2, 0]:.2f}) "
            f"and inputs 3 and 4 to v1 ({c[3, 1]:.2f}, {c[4, 1]:.2f})") in d.alt
    one = described(widgets.routing_explorer_figure(iterations=1, scale=2.0))
    assert "every coupling is 0.50" in one.alt
    assert one.caption.startswith("The routing explorer at r = 1 iteration, agreement scale λ = 2 (defaults")


def test_output_capsules_differ_by_more_than_colour():
    fig = widgets.routing_explorer_figure()
    toy, bars = fig.axes
    legend = toy.get_legend().get_lines()
    assert len({line.get_linestyle() for line in legend}) == 2
    assert {t.get_text() for t in toy.texts} >= {"v0", "v1"}       # outputs labelled at their tips
    hatches = {p.get_hatch() or "" for p in bars.patches}
    assert len(hatches) == 2


def test_plot_history_says_how_each_curve_runs():
    h = History(epoch=[1, 2, 3], train_loss=[0.3, 0.1, 0.05], train_accuracy=[0.8, 0.9, 0.95],
                test_accuracy=[0.9, 0.97, 0.96], lr=[1e-3] * 3, seconds=[1.0] * 3)
    fig = figures.plot_history(h)
    d = described(fig)
    assert "the training loss falls every epoch, from 0.3 to 0.05" in d.alt
    assert "the training accuracy, measured during each epoch, rises every epoch, from 80.00 to 95.00" in d.alt
    assert "the held-out test accuracy goes from 90.00 to 96.00, highest 97.00 after epoch 2" in d.alt
    train, test = fig.axes[1].lines
    assert (train.get_marker(), train.get_linestyle()) != (test.get_marker(), test.get_linestyle())


def test_plot_reconstructions_names_the_misread_digit_and_the_error():
    x = torch.zeros(3, 28, 28)
    y = x.clone()
    y[1] += 0.5                                     # the 5 in position 2 is reconstructed worst: error 0.25
    d = described(figures.plot_reconstructions(x, y, labels=[3, 5, 8], predictions=[3, 6, 8]))
    assert "labelled 3, 5, 8" in d.alt and "predicted class, 3, 6, 8" in d.alt
    assert "2 of 3 predictions are correct; the 5 in position 2 is read as a 6" in d.alt
    assert "Mean squared error per pixel 0.083, from 0.000 for the 3 in position 1 to 0.250 for the 5 in position 2" \
        in d.alt
    right = described(figures.plot_reconstructions(x, x, labels=[3, 5, 8], predictions=[3, 5, 8]))
    assert "All 3 predictions are correct" in right.alt


def test_plot_pose_sweep_names_the_dimensions_that_matter():
    sweep = torch.zeros(5, 3, 28, 28)
    sweep[2, -1] = 1.0                              # dim 7 changes every pixel
    sweep[4, -1, :14] = 1.0                         # dim 9 half of them
    sweep[0, -1, :7] = 0.5                          # dim 1 an eighth
    sweep[3, -1, :1] = 0.28                         # dim 8 barely; dim 2 not at all
    d = described(figures.plot_pose_sweep(sweep, [-0.25, 0.0, 0.25], dims=[1, 2, 7, 8, 9]))
    assert "5 rows, one per pose dimension (dim 1, dim 2, dim 7, dim 8 and dim 9), by 3 columns" in d.alt
    assert "most along dim 7, dim 9 and dim 1 (1.000, 0.500, 0.125) and least along dim 2 (0.000)" in d.alt


def test_pose_explorer_figure_says_where_the_widget_starts():
    torch.manual_seed(0)
    model = CapsNet(CapsNetConfig.slim(conv_channels=8, primary_types=2, decoder_hidden=(16, 32))).eval()
    image = torch.rand(28, 28)
    _, winner = widgets.pose_sweep(model, image)
    d = described(widgets.pose_explorer_figure(model, image))
    assert d.alt.startswith(f"The winning capsule is of class {winner}.")
    assert "The widget opens at dim 0 with +0.25 added: row 1, column 11 of the grid." in d.alt
    assert "slider" in d.caption and f"class {winner}" in d.caption
    other = described(widgets.pose_explorer_figure(model, image, dims=[3, 0], perturbations=[0.25, -0.25]))
    assert "row 2, column 1" in other.alt
    none = described(widgets.pose_explorer_figure(model, image, dims=[3], perturbations=[0.1]))
    assert "widget opens" not in none.alt
