"""capsule_lab.figures.learned_routing and capsule_lab.widgets.learned_routing (chapter 07): similarity routing of
one output capsule's 2-D votes; the couplings are checked against the closed form (eq. 11) written out here."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from capsule_lab.figures import (DEFAULT_PAIRS, MAX_FIGURE_WIDTH, plot_similarity_routing, similarity_clusters,
                                 similarity_grid_figure, clustered_votes)
from capsule_lab.figures.descriptions import description_of
from capsule_lab.figures.learned_routing import similarity_routing_words
from capsule_lab.routing import similarity_objective
from capsule_lab.widgets import (SimilarityRoutingExplorer, similarity_routing_explorer,
                                 similarity_routing_explorer_figure, similarity_routing_result)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def width_ok(fig) -> bool:
    return fig.get_size_inches()[0] <= MAX_FIGURE_WIDTH + 1e-9


def closed_form(votes, activations, pose, lam1, lam2, scale):
    """c_i ∝ a_i^{λ2/(λ1+λ2)} exp(k_i/(λ1+λ2)), k_i = exp(−‖μ − v_i‖² / (2ℓ²)), written out."""
    v, a, mu = (torch.as_tensor(x, dtype=torch.float64) for x in (votes, activations, pose))
    k = torch.exp(-((v - mu) ** 2).sum(dim=1) / (2 * scale ** 2))
    w = a ** (lam2 / (lam1 + lam2)) * torch.exp(k / (lam1 + lam2))
    return (w / w.sum()).numpy(), k


def test_clustered_votes_is_seeded_and_in_the_unit_disc():
    v, a = clustered_votes()
    assert v.shape == (26, 2) and a.shape == (26,) and v.dtype == a.dtype == torch.float64
    assert torch.equal(v, clustered_votes(0)[0]) and not torch.equal(v, clustered_votes(1)[0])
    assert bool((v.norm(dim=1) <= 1 + 1e-12).all()) and bool(((a > 0) & (a <= 1)).all())
    assert float(a[:12].max()) < 0.3 and float(a[12:18].min()) > 0.7          # silent big, active small cluster
    assert clustered_votes(sizes=(3, 2), outliers=0)[0].shape == (5, 2)


@pytest.mark.parametrize("lam1, lam2, scale, T", [(0.05, 0.0, 0.2, 3), (0.0, 0.2, 0.2, 3), (1.0, 1.0, 0.3, 5),
                                                  (0.3, 0.7, 0.5, 1)])
def test_similarity_clusters_is_the_closed_form_then_the_weighted_mean(lam1, lam2, scale, T):
    v, a = clustered_votes()
    r = similarity_clusters(v, a, lam1, lam2, scale, T)
    assert r.couplings.shape == (26,) and r.pose.shape == (2,) and r.trajectory.shape == (T + 1, 2)
    assert abs(r.couplings.sum() - 1) < 1e-12 and r.couplings.min() > 0
    assert np.allclose(r.trajectory[0], v.numpy().mean(axis=0))                # μ⁰: uniform couplings
    expected, _ = closed_form(v, a, r.trajectory[-2], lam1, lam2, scale)       # c^T from μ^{T-1}
    assert np.allclose(r.couplings, expected, atol=1e-12)
    assert np.allclose(r.pose, expected @ v.numpy(), atol=1e-12)               # μ^T = Σ c_i v_i
    assert np.allclose(r.trajectory[-1], r.pose)
    c = torch.as_tensor(v.numpy()[:, 0] * 0 + 1 / 26)
    previous = torch.as_tensor(r.trajectory[0])
    for t in range(1, T + 1):                                                  # the whole path, step by step
        c, _ = closed_form(v, a, previous, lam1, lam2, scale)
        previous = torch.as_tensor(c) @ v
        assert np.allclose(r.trajectory[t], previous.numpy(), atol=1e-12)


def test_lambda2_large_follows_the_activations_and_lambda1_large_is_uniform():
    v, a = clustered_votes()
    follow = similarity_clusters(v, a, 0.01, 1e4, 0.2, 3).couplings
    assert np.allclose(follow, (a / a.sum()).numpy(), atol=1e-5)
    spread = similarity_clusters(v, a, 1e4, 0.01, 0.2, 3).couplings
    assert np.allclose(spread, 1 / 26, atol=1e-5)
    sharp = similarity_clusters(v, a, 0.05, 0.0, 0.2, 3).couplings             # the kernel decides: far sharper
    assert sharp.max() > 4 * spread.max()


def test_the_default_toy_shows_what_the_lambdas_do():
    v, a = clustered_votes()
    big, active = v[:12].mean(dim=0).numpy(), v[12:18].mean(dim=0).numpy()
    kernel_only = similarity_clusters(v, a, 0.05, 0.0, 0.2, 3)
    with_activations = similarity_clusters(v, a, 0.0, 0.2, 0.2, 3)
    assert np.linalg.norm(kernel_only.pose - big) < 0.1                       # the largest, silent cluster
    assert np.linalg.norm(with_activations.pose - active) < 0.15              # the active one
    assert with_activations.couplings[12:18].sum() > 0.5 > with_activations.couplings[:12].sum()


def test_similarity_grid_figure_draws_one_panel_per_pair():
    v, a = clustered_votes()
    fig = similarity_grid_figure()
    assert isinstance(fig, plt.Figure) and width_ok(fig)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == len(DEFAULT_PAIRS) == 4
    for ax, (lam1, lam2) in zip(visible, DEFAULT_PAIRS):
        r = similarity_clusters(v, a, lam1, lam2, 0.2, 3)
        dots = ax.collections[1]
        assert np.allclose(dots.get_offsets(), v.numpy()) and np.allclose(dots.get_array(), r.couplings)
        assert f"λ1 = {lam1:g}, λ2 = {lam2:g}" in ax.get_title()
    three = similarity_grid_figure(v, a, pairs=((0.1, 0.0), (1.0, 0.0), (0.1, 1.0)), length_scale=0.3)
    assert width_ok(three) and sum(ax.get_visible() for ax in three.axes) == 3


def test_plot_similarity_routing_draws_the_pose_and_its_path():
    v, a = clustered_votes()
    r = similarity_clusters(v, a, 0.0, 0.2, 0.2, 3)
    fig, ax = plt.subplots()
    dots = plot_similarity_routing(ax, v, a, r.couplings, r.pose, r.trajectory, "t", length_scale=0.2)
    assert np.allclose(dots.get_sizes(), 8 + 900 * r.couplings)
    path = ax.lines[0]
    assert np.allclose(np.stack([path.get_xdata(), path.get_ydata()], axis=1), r.trajectory)
    assert np.allclose([ax.lines[-1].get_xdata()[0], ax.lines[-1].get_ydata()[0]], r.pose)
    ring = ax.collections[0]
    assert np.allclose(ring.get_linewidths(), 0.3 + 2.2 * a.numpy())


V, A = clustered_votes()


@pytest.mark.parametrize("call, match", [
    (lambda: similarity_clusters(V[:, :1], A, 0.1, 0.1), r"votes must have shape \(I, 2\)"),
    (lambda: similarity_clusters(V, A[:5], 0.1, 0.1), r"activations must have shape \(I,\) = \(26,\)"),
    (lambda: similarity_clusters(V, A + 1, 0.1, 0.1), r"activations must be in \[0, 1\]"),
    (lambda: similarity_clusters(V, A, 0.0, 0.0), "lam1 \\+ lam2 must be finite and > 0"),
    (lambda: similarity_clusters(V, A, -1.0, 0.5), "lam1 must be a number >= 0"),
    (lambda: similarity_clusters(V, A, 0.1, 0.1, 0.0), "length_scale must be a finite number > 0"),
    (lambda: similarity_clusters(V, A, 0.1, 0.1, 0.2, 0), "iterations must be an integer >= 1"),
    (lambda: similarity_clusters("votes", A, 0.1, 0.1), "votes must be numeric"),
    (lambda: similarity_grid_figure(V, None), "give both votes"),
    (lambda: similarity_grid_figure(pairs=((0.1,),)), r"pairs must hold \(lam1, lam2\) pairs"),
    (lambda: similarity_grid_figure(pairs=()), "pairs must be a sequence of 1 to 6"),
    (lambda: plot_similarity_routing(plt.subplots()[1], V, A, torch.ones(26), torch.zeros(2)), "sum to 1"),
    (lambda: plot_similarity_routing(plt.subplots()[1], V, A, torch.ones(26) / 26, torch.zeros(3)),
     r"pose must have shape \(2,\)"),
    (lambda: clustered_votes(sizes=(1, 2, 3, 4)), "sizes must hold 1 to 3"),
    (lambda: similarity_routing_explorer(lam1=0.3), "lam1 must be one of the slider's values"),
    (lambda: similarity_routing_explorer(iterations=11), r"iterations must be an integer in \[1, 10\]"),
])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_explorer_builds_without_a_display_and_follows_its_sliders():
    v, a = clustered_votes()
    explorer = similarity_routing_explorer()
    assert isinstance(explorer, SimilarityRoutingExplorer)
    assert (explorer.lam1.value, explorer.lam2.value, explorer.length_scale.value, explorer.iterations.value) == \
        (0.0, 0.2, 0.2, 3)
    assert explorer.image.value[:4] == b"\x89PNG" and width_ok(explorer.figure)

    def matches(lam1, lam2, scale, T):
        direct = similarity_clusters(v, a, lam1, lam2, scale, T)
        r = explorer.result
        assert np.allclose(r["couplings"], direct.couplings) and np.allclose(r["pose"], direct.pose)
        assert np.allclose(r["trajectory"], direct.trajectory)
        _, k = closed_form(v, a, direct.trajectory[-2], lam1, lam2, scale)
        objective = similarity_objective(torch.as_tensor(direct.couplings)[None, :, None], k[None, :, None],
                                         a[None], lam1, lam2)
        assert r["objective"] == pytest.approx(float(objective[0, 0]), abs=1e-10)
        uniform = similarity_objective(torch.full((1, 26, 1), 1 / 26, dtype=torch.float64), k[None, :, None],
                                       a[None], lam1, lam2)
        assert r["objective"] <= float(uniform[0, 0]) + 1e-12                    # the couplings minimise F

    matches(0.0, 0.2, 0.2, 3)
    first, couplings = explorer.figure, explorer.result["couplings"]
    explorer.lam1.value = 10.0
    assert explorer.figure is not first and not np.allclose(explorer.result["couplings"], couplings)
    matches(10.0, 0.2, 0.2, 3)
    explorer.lam2.value = 0.5
    explorer.length_scale.value = 0.5
    explorer.iterations.value = 6
    matches(10.0, 0.5, 0.5, 6)
    assert explorer.result["trajectory"].shape == (7, 2) and "objective F" in explorer.numbers.value
    explorer.lam1.value = 0.0
    kept = explorer.result
    explorer.lam2.value = 0.0                                                    # no closed form: state kept
    assert explorer.result is kept and "must be > 0" in explorer.numbers.value
    assert similarity_routing_result(v, a, 0.0, 0.2)["objective"] == pytest.approx(
        similarity_routing_explorer().result["objective"])


def test_explorer_figure_is_the_default_state():
    v, a = clustered_votes()
    fig = similarity_routing_explorer_figure()
    assert isinstance(fig, plt.Figure) and width_ok(fig) and len(fig.axes) == 1
    r = similarity_clusters(v, a, 0.0, 0.2, 0.2, 3)
    assert np.allclose(fig.axes[0].collections[1].get_array(), r.couplings)
    other = similarity_routing_explorer_figure(v[:10], a[:10], lam1=1.0, lam2=0.0, length_scale=0.5, iterations=2)
    assert np.allclose(other.axes[0].collections[1].get_offsets(), v[:10].numpy())


# ---------------------------------------------------------------- alt text and captions written from the data

def test_similarity_routing_words_names_the_cluster_the_pose_settled_on():
    votes, acts = [[0.0, 0.0], [0.1, 0.0], [1.0, 0.0]], [0.9, 0.7, 0.1]
    text = similarity_routing_words(votes, acts, [0.5, 0.3, 0.2], [0.05, 0.0], 0.2)
    assert text == "largest coupling 0.50; pose at (0.05, 0.00), among 2 votes within ℓ (mean activation 0.80)"
    text = similarity_routing_words(votes, acts, [0.1, 0.1, 0.8], [0.95, -0.001], 0.2)
    assert text == "largest coupling 0.80; pose at (0.95, 0.00), among 1 vote within ℓ (mean activation 0.10)"
    assert similarity_routing_words(votes, acts, [0.4, 0.3, 0.3], [0.5, 0.5], 0.2).endswith("no vote within ℓ")
    with pytest.raises(ValueError, match=r"couplings must have shape \(I,\) = \(3,\)"):
        similarity_routing_words(votes, acts, [0.5, 0.5], [0.0, 0.0], 0.2)
    with pytest.raises(ValueError, match="length_scale must be a finite number > 0"):
        similarity_routing_words(votes, acts, [0.5, 0.3, 0.2], [0.0, 0.0], 0.0)


def test_similarity_grid_figure_description_follows_each_panel():
    v, a = clustered_votes()
    described = description_of(similarity_grid_figure())
    for lam1, lam2 in DEFAULT_PAIRS:
        r = similarity_clusters(v, a, lam1, lam2, 0.2, 3)
        near = int((np.linalg.norm(v.numpy() - r.pose, axis=1) <= 0.2).sum())      # votes within ℓ of the pose
        panel = described.alt.split(f"λ1 = {lam1:g}, λ2 = {lam2:g}: ")[1].split("; λ1")[0]
        assert panel.startswith(f"largest coupling {r.couplings.max():.2f};")
        assert (f"among {near} vote" in panel) if near else panel.rstrip(".").endswith("no vote within ℓ")
    # the kernel alone settles on the silent cluster, λ2 on the active one: the alt text says which
    silent = similarity_routing_words(v, a, *similarity_clusters(v, a, 0.05, 0.0, 0.2, 3)[:2], 0.2)
    active = similarity_routing_words(v, a, *similarity_clusters(v, a, 0.0, 0.2, 0.2, 3)[:2], 0.2)
    assert silent in described.alt and active in described.alt
    assert float(silent.split("mean activation ")[1][:4]) < 0.2 < 0.8 < float(active.split("mean activation ")[1][:4])
    assert described.caption == "Similarity routing of one output capsule for 4 pairs (λ1, λ2), ℓ = 0.2, T = 3"


def test_explorer_figure_description_is_its_state_and_says_when_it_is_the_default():
    v, a = clustered_votes()
    described = description_of(similarity_routing_explorer_figure(v, a))
    r = similarity_routing_result(v, a, 0.0, 0.2)
    assert described.caption.startswith("The similarity-routing explorer at its default settings (λ1 = 0, λ2 = 0.2")
    assert f"the objective F = {r['objective']:.4f}" in described.alt
    assert f"Largest coupling {r['couplings'].max():.2f}; pose at ({r['pose'][0]:.2f}, {r['pose'][1]:.2f})" in \
        described.alt
    other = description_of(similarity_routing_explorer_figure(v, a, lam1=1.0, lam2=0.0, length_scale=0.5))
    assert other.caption == "The similarity-routing explorer's picture at λ1 = 1, λ2 = 0, ℓ = 0.5, T = 3"
    assert other.alt != described.alt
