"""Chapter 03's figures (capsule_lab.figures.gradients), its toy (capsule_lab.gradients.polarised_gradient_terms)
and its gradient-terms explorer (capsule_lab.widgets.gradients).

The graph's gradient-carrying edges are checked against hand-counted cases; the explorer's numbers against
autograd on the same toy (not against capsule_lab.gradients, which computes them).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from capsule_lab import figures, widgets  # noqa: E402
from capsule_lab.gradients import gradient_toy, polarised_gradient_terms  # noqa: E402
from capsule_lab.capsules import margin_loss  # noqa: E402
from capsule_lab.routing import dynamic_routing  # noqa: E402


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
    red = lambda ax: sum(1 for p in ax.patches if matplotlib.colors.to_hex(p.get_edgecolor()) == "#d62728")  # noqa: E731
    assert (red(top), red(bottom)) == (16, 3)


def test_plot_gradient_terms_bars_and_checks():
    c = torch.softmax(torch.randn(5, 3), dim=-1)
    t1, t2 = torch.rand(5), torch.rand(5)
    fig = figures.plot_gradient_terms(c, t1, t2, title="x")
    heights = [p.get_height() for p in fig.axes[1].patches]
    np.testing.assert_allclose(heights, np.concatenate([t1.numpy(), t2.numpy()]), rtol=1e-6)
    with pytest.raises(ValueError, match=r"\(I, J\)"):
        figures.plot_gradient_terms(c, t1[:4], t2)


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
