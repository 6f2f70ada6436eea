"""Chapter 03's figures (capsule_lab.figures.gradients), its toy
(capsule_lab.measures.gradients.polarised_gradient_terms) and its gradient-terms explorer
(capsule_lab.widgets.gradients).

The graph's gradient-carrying edges are checked against hand-counted cases; the explorer's numbers against
autograd on the same toy (not against capsule_lab.measures.gradients, which computes them). Each figure's alt text is
checked on hand-made inputs whose answer is known (which input has the largest term 2, whether a measure rises).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from capsule_lab import figures, widgets
from capsule_lab.figures.descriptions import description_of
from capsule_lab.figures.style import PALETTE
from capsule_lab.measures.gradients import gradient_toy, polarised_gradient_terms
from capsule_lab.capsules import margin_loss
from capsule_lab.routing import dynamic_routing


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _live(K, constant):
    return {(a, b) for a, b, live in figures.routing_graph_edges(K, constant) if live}


def test_one_iteration_graph_has_only_the_weighted_sum_path():
    assert _live(1, False) == _live(1, True) == {("u", "s1"), ("s1", "v1"), ("v1", "L")}


def test_three_iteration_graph_by_hand():
    edges = figures.routing_graph_edges(3)
    assert len(edges) == 19                                  # 4 per iteration + 3 per logit update + v3 → L
    # b1 is a constant prior: nothing that only depends on it carries gradient to û
    dead = {(a, b) for a, b, live in edges if not live}
    assert dead == {("b1", "c1"), ("c1", "s1"), ("b1", "b2")}
    assert _live(3, True) == {("u", "s3"), ("s3", "v3"), ("v3", "L")}
    with pytest.raises(ValueError, match="iterations"):
        figures.routing_graph_edges(0)


def test_plot_routing_graphs_draws_both_graphs():
    fig = figures.plot_routing_graphs(3)
    top, bottom = fig.axes
    live = PALETTE[1].lower()
    red = lambda ax: sum(1 for p in ax.patches if matplotlib.colors.to_hex(p.get_edgecolor()) == live)  # noqa: E731
    assert (red(top), red(bottom)) == (16, 3)
    # told apart by line style too: the live edges solid, the forward-only ones dashed
    solid = lambda ax: sum(1 for p in ax.patches if p.get_linestyle() in ("-", "solid"))  # noqa: E731
    assert (solid(top), solid(bottom)) == (16, 3)


@pytest.mark.parametrize("K, counts, path", [(1, ("3 of 5", "3 of 5"), "û → s(1) → v(1) → L"),
                                             (3, ("16 of 19", "3 of 19"), "û → s(3) → v(3) → L")])
def test_routing_graphs_alt_text_counts_the_live_edges(K, counts, path):
    d = description_of(figures.plot_routing_graphs(K))
    top, bottom = d.alt.split("Bottom")
    assert f"{counts[0]} edges carry gradient" in top and f"{counts[1]} edges carry gradient" in bottom
    assert f"the path {path}" in bottom
    assert "b(1) → c(1)" in top and "c(1) → s(1)" in top and ("b(1) → b(2)" in top) == (K > 1)
    assert f"K = {K}" in d.caption


def test_plot_gradient_terms_bars_and_checks():
    c = torch.softmax(torch.randn(5, 3), dim=-1)
    t1, t2 = torch.rand(5), torch.rand(5)
    fig = figures.plot_gradient_terms(c, t1, t2, title="x")
    heights = [p.get_height() for p in fig.axes[1].patches]
    np.testing.assert_allclose(heights, np.concatenate([t1.numpy(), t2.numpy()]), rtol=1e-6)
    with pytest.raises(ValueError, match=r"\(I, J\)"):
        figures.plot_gradient_terms(c, t1[:4], t2)


def test_plot_gradient_terms_tells_the_terms_apart_and_describes_them():
    c = torch.tensor([[0.7, 0.2, 0.1], [0.3, 0.3, 0.4], [0.1, 0.1, 0.8], [0.5, 0.25, 0.25], [0.2, 0.6, 0.2]])
    t1 = torch.tensor([1.0, 0.5, 2.0, 0.25, 1.0])
    t2 = torch.tensor([0.5, 1.0, 0.1, 1.0, 0.2])        # larger than term 1 at inputs 1 (2x) and 3 (4x)
    fig = figures.plot_gradient_terms(c, t1, t2, title="hand-made")
    bars = fig.axes[1].patches
    assert {b.get_hatch() for b in bars[:5]} == {None} and {b.get_hatch() for b in bars[5:]} == {"///"}
    alt = description_of(fig).alt
    assert "larger for 2 of the 5 inputs, up to 4 times term 1 (input 3)" in alt
    # each input's largest coupling: 0.7, 0.4, 0.8, 0.5, 0.6
    assert "largest coupling is 0.60 on average (uniform: 0.33), at most 0.80" in alt
    assert "term 1 is tallest at input 2 (2), term 2 at input 1 (1)" in alt
    assert description_of(fig).caption.endswith("hand-made.")
    small = description_of(figures.plot_gradient_terms(c, t1, t1 / 10)).alt
    assert "term 2 is smaller for every input, at most 0.1 times term 1" in small


def test_plot_gradient_history_alt_text_follows_the_records():
    base = dict(uniform_max=0.1, uniform_entropy_bits=3.3219)
    records = [dict(base, ratio=0.1, cosine=1.0, max_coupling=0.10, entropy_bits=3.32),
               dict(base, ratio=0.2, cosine=0.99, max_coupling=0.12, entropy_bits=3.31),
               dict(base, ratio=0.3, cosine=0.995, max_coupling=0.12, entropy_bits=3.30)]
    fig = figures.plot_gradient_history([0, 1, 2], records)
    alt = description_of(fig).alt
    assert "‖term 2‖/‖term 1‖ rises at every epoch, from 0.100 at epoch 0 to 0.300 at epoch 2" in alt
    assert "term 1 goes from 1.0000 at epoch 0 to 0.9950 at epoch 2, between 0.9900 and 1.0000" in alt
    assert "coupling goes from 0.1000 at epoch 0 to 0.1200 at epoch 2" in alt             # flat from epoch 1 to 2
    assert "entropy falls at every epoch, from 3.3200 bits at epoch 0 to 3.3000 bits at epoch 2 (uniform: 3.3219" in alt
    # every series its own marker, the uniform values grey reference lines
    markers = [line.get_marker() for ax in fig.axes for line in ax.lines if line.get_marker() not in ("None", "")]
    assert len(set(markers)) == 4


def test_plot_gradient_history_checks_records():
    record = dict(ratio=0.2, cosine=0.99, max_coupling=0.11, entropy_bits=3.3, uniform_max=0.1,
                  uniform_entropy_bits=3.32)
    fig = figures.plot_gradient_history([0, 1], [record, {**record, "ratio": 0.3}])
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), [0.2, 0.3])
    with pytest.raises(ValueError, match="one record per epoch"):
        figures.plot_gradient_history([0, 1], [record])
    with pytest.raises(ValueError, match="lack"):
        figures.plot_gradient_history([0], [{"ratio": 1.0}])


def _autograd_terms(iterations, polarisation):
    """Both terms on the widget's toy, from autograd: total, and term 1 = the detached-couplings gradient."""
    votes, assignment = gradient_toy()
    prior = polarisation * assignment
    grads = []
    for detach in (False, True):
        u = votes.clone().requires_grad_(True)
        poses = dynamic_routing(u, iterations, prior, detach_couplings=detach).poses
        grads.append(torch.autograd.grad(margin_loss(poses.norm(dim=-1), torch.tensor([0])), u)[0])
    total, term1 = grads
    return term1, total - term1


@pytest.mark.parametrize("iterations, polarisation", [(1, 0.0), (3, 0.0), (3, 5.0), (5, 2.0)])
def test_polarised_gradient_terms_match_autograd(iterations, polarisation):
    couplings, grad = polarised_gradient_terms(iterations, polarisation)
    term1, term2 = _autograd_terms(iterations, polarisation)
    torch.testing.assert_close(grad.term1, term1)
    torch.testing.assert_close(grad.term2, term2)
    assert couplings.shape == (8, 4)


def test_polarisation_makes_couplings_one_hot_and_term2_vanish():
    couplings, grad = polarised_gradient_terms(3, 10.0)
    _, assignment = gradient_toy()
    assert (couplings - assignment).abs().max() < 1e-3
    assert grad.term2.norm() < 1e-3 * grad.term1.norm()
    with pytest.raises(ValueError, match="polarisation"):
        polarised_gradient_terms(3, float("nan"))


def test_gradient_terms_explorer_redraws_on_its_sliders():
    explorer = widgets.gradient_terms_explorer()
    assert explorer.summary["term2"] > 0                          # r = 3 without polarisation
    explorer.iterations.value = 1
    assert explorer.summary["term2"] == 0
    explorer.iterations.value, explorer.polarisation.value = 3, 5.0
    term1, term2 = _autograd_terms(3, 5.0)
    assert explorer.summary["ratio"] == pytest.approx((term2.norm() / term1.norm()).item(), rel=1e-9)
    assert "polarisation 5" in explorer.figure._suptitle.get_text()


def test_gradient_terms_figure_is_described_as_the_explorer():
    default = description_of(widgets.gradient_terms_figure())
    assert "explorer at its default settings (r = 3, no added polarisation)" in default.caption
    term1, term2 = _autograd_terms(3, 0.0)
    assert f"‖term 2‖/‖term 1‖ = {(term2.norm() / term1.norm()).item():.3f}" in default.alt
    # every input's term 2 is larger than its term 1 on this toy at r = 3 without polarisation (autograd says so)
    per_input = lambda t: t[0].flatten(1).norm(dim=1)  # noqa: E731
    assert bool((per_input(term2) > per_input(term1)).all())
    assert "term 2 is larger for all 8 inputs" in default.alt
    polarised = description_of(widgets.gradient_terms_figure(3, 5.0))
    assert "r = 3 and polarisation 5" in polarised.caption and "term 2 is smaller for every input" in polarised.alt
