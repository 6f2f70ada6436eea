"""Chapter 05's figures (capsule_lab.figures.pruning, .dictionary, .parse_trees, .saliency, .geometry) and
capsule_lab.widgets.rem: hand-built measures, steps and runs (no training), handed to the figures as the plain data
capsule_lab.studies.rem makes of them (epoch_curve, class_trees, pruning_explorer_run); what is drawn is checked
against counts and entropies computed here."""

from __future__ import annotations

import math
from collections import Counter

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.collections import LineCollection, PathCollection  # noqa: E402

from capsule_lab.figures.descriptions import description_of
from capsule_lab.figures.style import REFERENCE_COLOR
from capsule_lab.figures import (class_couplings, coupling_histogram_figure, entropy_accuracy_figure,
                                 entropy_vs_levels_figure, keys_per_class_figure, parse_tree_graph,
                                 parse_tree_graph_figure, plot_backtracked_image, pruning_curve_figure,
                                 pruning_explorer_figure, receptive_field_centres, saliency_figure, step_summary)
from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.studies.rem import RemRun, RoutingMeasure, Step
from capsule_lab.studies.rem_pictures import class_trees, epoch_curve, pruning_explorer_run
from capsule_lab.widgets import pruning_explorer

GRID = (3, 3, 2)                         # H, W, O: 18 primary capsules
J = 3
SMALL = CapsNetConfig.slim(image_size=9, conv_channels=4, conv_kernel=3, primary_kernel=3, primary_types=2,
                           primary_dim=4, classes=J, class_dim=4, decoder=False)      # a 3 × 3 primary grid


def make_measure(seed: int, sharpness: float = 2.0, n: int = 40) -> RoutingMeasure:
    gen = torch.Generator().manual_seed(seed)
    couplings = torch.softmax(sharpness * torch.randn(n, 18, J, generator=gen), dim=-1)
    predictions = torch.randint(0, J, (n,), generator=gen)
    labels = torch.where(torch.rand(n, generator=gen) < 0.8, predictions, (predictions + 1) % J)
    return RoutingMeasure(accuracy=(predictions == labels).float().mean().item(), loss=0.2, couplings=couplings,
                          predictions=predictions, labels=labels)


def make_run() -> RemRun:
    dense = [Step(e, {"overall": 0.0}, 0.3, make_measure(e, 1.0), {}) for e in range(1, 6)]
    pruned = [Step(e, {"overall": 1 - 0.8 ** max(0, e - 2)}, 0.3, make_measure(10 + e, 1.0 + e), {})
              for e in range(1, 6)]
    return RemRun("mnist", 0, dense=dense, pruned=pruned, q_index=0, seconds=1.0)


def hand_entropy(measure: RoutingMeasure, levels: int = 11) -> tuple[float, float]:
    """(mean over predicted classes of the key entropy in bits, mean keys per class), with plain loops."""
    per_class = {}
    for n in range(measure.couplings.shape[0]):
        j = int(measure.predictions[n])
        key = tuple(round(float(c) * (levels - 1)) for c in measure.couplings[n, :, j])
        per_class.setdefault(j, Counter())[key] += 1
    entropies = []
    for counter in per_class.values():
        total = sum(counter.values())
        entropies.append(-sum(k / total * math.log2(k / total) for k in counter.values()))
    return sum(entropies) / len(entropies), sum(len(c) for c in per_class.values()) / len(per_class)


def hand_mean_coupling(measure: RoutingMeasure, label: int, levels: int = 11) -> np.ndarray:
    rows = [[round(float(c) * (levels - 1)) / (levels - 1) for c in measure.couplings[n, :, label]]
            for n in range(measure.couplings.shape[0]) if int(measure.predictions[n]) == label]
    return np.mean(rows, axis=0)


# ---------------------------------------------------------------- Figure 8, entropy against accuracy

def test_pruning_curve_draws_entropy_accuracy_and_sparsity():
    run = make_run()
    fig = pruning_curve_figure(epoch_curve(run.pruned), dense=epoch_curve(run.dense),
                               paper={"entropy": 4.31, "accuracy": 0.996})
    ax, ax_acc = fig.axes[:2]
    solid = [l for l in ax.lines if l.get_linestyle() == "-"]
    dashed = [l for l in ax.lines if l.get_linestyle() == "--"]
    assert list(solid[0].get_xdata()) == [1, 2, 3, 4, 5]
    assert np.allclose(solid[0].get_ydata(), [hand_entropy(s.test)[0] for s in run.pruned])
    assert np.allclose(dashed[0].get_ydata(), [hand_entropy(s.test)[0] for s in run.dense])
    acc_solid = [l for l in ax_acc.lines if l.get_linestyle() == "-"][0]
    assert np.allclose(acc_solid.get_ydata(), [100 * s.test.accuracy for s in run.pruned])
    dotted = [l for l in ax.lines + ax_acc.lines if l.get_linestyle() == ":"]
    assert sorted(l.get_ydata()[0] for l in dotted) == pytest.approx([4.31, 99.6])
    top = ax.child_axes[0]
    labels = [t.get_text() for t in top.get_xticklabels()]
    assert labels == [f"{100 * s.sparsity['overall']:.0f}" for s in run.pruned]
    assert "sparsity" in top.get_xlabel() and "entropy" in ax.get_ylabel() and "%" in ax_acc.get_ylabel()
    plt.close(fig)


def test_entropy_accuracy_figure_one_point_per_step():
    run = make_run()
    fig = entropy_accuracy_figure({"Q": epoch_curve(run.dense, 6), "REM": epoch_curve(run.pruned, 6)})
    lines = fig.axes[0].lines
    assert [l.get_label() for l in lines] == ["Q", "REM"]
    assert np.allclose(lines[1].get_xdata(), [100 * s.test.accuracy for s in run.pruned])
    assert np.allclose(lines[1].get_ydata(), [hand_entropy(s.test, 6)[0] for s in run.pruned])
    plt.close(fig)


def test_epoch_curves_are_plain_numbers_and_checked():
    run = make_run()
    curve = epoch_curve(run.pruned)
    assert curve["epoch"] == [1, 2, 3, 4, 5] and curve["levels"] == 11
    assert curve["entropy"] == pytest.approx([hand_entropy(s.test)[0] for s in run.pruned], abs=1e-12)
    assert curve["sparsity"] == [s.sparsity["overall"] for s in run.pruned]
    with pytest.raises(ValueError, match="curves must share one number of levels K"):
        entropy_accuracy_figure({"Q": epoch_curve(run.dense, 6), "REM": curve})
    with pytest.raises(ValueError, match="dense must be at the curve's number of levels K = 11, got 6"):
        pruning_curve_figure(curve, dense=epoch_curve(run.dense, 6))
    with pytest.raises(ValueError, match=r"curve\['accuracy'\] must be shares in \[0, 1\]"):
        pruning_curve_figure(dict(curve, accuracy=[99.0] * 5))
    with pytest.raises(ValueError, match=r"curve\['sparsity'\] must have shape \(E,\) = \(5,\)"):
        pruning_curve_figure(dict(curve, sparsity=[0.0]))
    with pytest.raises(ValueError, match=r"curve\['epoch'\] must be whole numbers"):
        pruning_curve_figure(dict(curve, epoch=[0.5, 1, 2, 3, 4]))
    assert not plt.get_fignums()                                       # refused before a figure is drawn


# ---------------------------------------------------------------- Figure 7 and Figure 9

def test_entropy_vs_levels_draws_the_inputs_and_the_ceiling():
    levels = [2, 6, 11, 21]
    entropies = {"Q": [1.0, 3.0, 5.5, 6.0], "REM": [0.5, 1.5, 2.5, 3.0]}
    fig = entropy_vs_levels_figure(levels, entropies, ceiling=math.log2(100), accuracies={"Q": [0.99] * 4,
                                                                                           "REM": [0.995] * 4})
    ax, ax_acc = fig.axes
    for line, name in zip(ax.lines, entropies):
        assert list(line.get_xdata()) == levels and list(line.get_ydata()) == entropies[name]
    assert ax.lines[2].get_ydata()[0] == pytest.approx(math.log2(100)) and ax.lines[2].get_linestyle() == ":"
    assert ax.lines[2].get_color() == REFERENCE_COLOR                   # a reference line: grey, dotted
    # every model has its own marker and line style, in both panels
    assert len({(l.get_marker(), l.get_linestyle()) for l in ax.lines[:2]}) == 2
    assert [(l.get_marker(), l.get_color()) for l in ax_acc.lines] == [(l.get_marker(), l.get_color())
                                                                        for l in ax.lines[:2]]
    assert np.allclose(ax_acc.lines[1].get_ydata(), [99.5] * 4)
    plt.close(fig)
    with pytest.raises(ValueError, match=r"entropies\['Q'\] must have shape \(K,\) = \(4,\)"):
        entropy_vs_levels_figure(levels, {"Q": [1.0, 2.0]})
    with pytest.raises(ValueError, match="levels must be a non-empty list of integers >= 2"):
        entropy_vs_levels_figure([1, 2], {"Q": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"accuracies\['Q'\] must be shares in \[0, 1\]"):
        entropy_vs_levels_figure(levels, entropies, accuracies={"Q": [99.0] * 4})


def test_keys_per_class_bars_are_the_keys():
    keys = {"Q": {0: 12, 1: 30, 2: 7}, "REM": {0: 3, 2: 4}}           # REM never predicted class 1
    fig = keys_per_class_figure(keys, class_names=["zero", "one", "two"])
    ax = fig.axes[0]
    heights = [[bar.get_height() for bar in container] for container in ax.containers]
    assert heights == [[12, 30, 7], [3, 0, 4]]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["zero", "one", "two"]
    plt.close(fig)
    with pytest.raises(ValueError, match="keys must be a non-empty dict"):
        keys_per_class_figure({})
    with pytest.raises(ValueError, match=r"keys\['Q'\] must map classes to numbers of keys"):
        keys_per_class_figure({"Q": {0: -1}})
    with pytest.raises(ValueError, match="class_names must be a list"):
        keys_per_class_figure(keys, class_names=["zero"])


# ---------------------------------------------------------------- the parse tree of a class

def test_parse_tree_graph_edges_are_the_couplings_above_the_threshold():
    m = make_measure(7)
    expected = hand_mean_coupling(m, 1)
    means, n = class_couplings(class_trees(m), 1)
    assert n == int((m.predictions == 1).sum()) and np.allclose(means, expected, atol=1e-12)
    for threshold, count in ((None, int((expected > 1 / J).sum())), (0.5, int((expected > 0.5).sum()))):
        fig, ax = plt.subplots()
        nodes = parse_tree_graph(ax, class_trees(m), 1, GRID, threshold=threshold)
        edges = [c for c in ax.collections if isinstance(c, LineCollection)]
        assert count > 0 and len(edges[0].get_segments()) == count
        assert np.allclose(nodes.get_array(), expected)
        assert f"{count} of 18 edges" in ax.get_title()
        plt.close(fig)


def test_parse_tree_graph_hand_built_case():
    # every image predicted as class 0; capsule 4 always couples with 1, the others with 0.05 (quantised: 0.1)
    c = torch.full((6, 18, J), 0.05)
    c[:, 4, 0] = 1.0
    m = RoutingMeasure(1.0, 0.0, c, torch.zeros(6, dtype=torch.long), torch.zeros(6, dtype=torch.long))
    fig, ax = plt.subplots()
    parse_tree_graph(ax, class_trees(m), 0, GRID)
    (edges,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    (segment,) = edges.get_segments()
    # capsule 4 = (row 0, column 2, type 0): in the grid's cell (column 2, row 0), the first of two types
    assert segment[1][0] == pytest.approx(2 - 0.35 / 2) and segment[1][1] == pytest.approx(0.0)
    plt.close(fig)
    fig, ax = plt.subplots()
    parse_tree_graph(ax, class_trees(m), 2, GRID)                     # no image predicted as class 2
    assert not [c for c in ax.collections if isinstance(c, LineCollection)] and "(0 images)" in ax.get_title()
    plt.close(fig)


def test_receptive_field_centres_match_the_gradient_of_the_network():
    assert receptive_field_centres(CapsNetConfig()).tolist() == [8, 10, 12, 14, 16, 18]
    torch.manual_seed(0)
    model = CapsNet(SMALL)
    centres = receptive_field_centres(SMALL)
    for m in range(SMALL.primary_grid):
        x = torch.rand(1, 1, 9, 9, requires_grad=True)
        model.primary.conv(torch.relu(model.conv(x)))[0, :, m, m].sum().backward()
        rows = torch.nonzero(x.grad[0, 0].abs().sum(dim=1)).flatten()
        assert centres[m] == pytest.approx((rows.min() + rows.max()).item() / 2)


def test_backtracked_image_marks_the_summed_coupling_at_each_receptive_field():
    m = make_measure(8)
    images = torch.rand(40, 1, 9, 9, generator=torch.Generator().manual_seed(0))
    fig, ax = plt.subplots()
    dots = plot_backtracked_image(ax, images, class_trees(m), 2, GRID, config=SMALL)
    summed = hand_mean_coupling(m, 2).reshape(3, 3, 2).sum(axis=-1)
    assert np.allclose(dots.get_array(), summed.ravel())
    centres = receptive_field_centres(SMALL)
    assert np.allclose(dots.get_offsets(), [(centres[c], centres[r]) for r in range(3) for c in range(3)])
    chosen = (m.predictions == 2).numpy()
    assert np.allclose(ax.images[0].get_array(), images[chosen, 0].numpy().mean(axis=0))
    plt.close(fig)
    with pytest.raises(ValueError, match="vmax must be a number > 0"):
        plot_backtracked_image(ax, images, class_trees(m), 2, GRID, config=SMALL, vmax=0)
    with pytest.raises(ValueError, match=r"config must give the primary grid \(H, W\) = \(3, 3\)"):
        plot_backtracked_image(ax, images, class_trees(m), 2, GRID)    # the default 9 × 9 kernels don't fit 9 px


def test_parse_tree_graph_figure_rows_and_checks():
    measures = {"Q": make_measure(1, 1.0), "REM": make_measure(2, 4.0)}
    images = torch.rand(40, 1, 9, 9)
    trees = {name: class_trees(m) for name, m in measures.items()}
    fig = parse_tree_graph_figure(trees, 0, GRID, images=images, config=SMALL)
    graphs = [ax for ax in fig.axes if ax.get_title().startswith(("Q:", "REM:"))]
    assert len(graphs) == 2 and len([ax for ax in fig.axes if ax.images]) == 2
    for ax, m in zip(graphs, measures.values()):
        count = int((hand_mean_coupling(m, 0) > 1 / J).sum())
        assert f"{count} of 18 edges" in ax.get_title()
    # the dots on the images share one colour scale: up to the largest summed coupling of either model
    dots = [c for ax in fig.axes if ax.images for c in ax.collections if isinstance(c, PathCollection)]
    shared = max(hand_mean_coupling(m, 0).reshape(3, 3, 2).sum(axis=-1).max() for m in measures.values())
    assert len(dots) == 2 and all(d.get_clim() == pytest.approx((0, shared)) for d in dots)
    plt.close(fig)
    m = measures["Q"]
    with pytest.raises(ValueError, match=r"grid must be \(H, W, O\)"):
        parse_tree_graph_figure(trees, 0, (3, 3, 3))
    with pytest.raises(ValueError, match=r"label must be a class index in \[0, 3\)"):
        class_couplings(trees["Q"], 3)
    with pytest.raises(ValueError, match=r"trees must be a dict \{'levels': K, 'trees': \(J, I\)"):
        class_couplings(m, 0)                                          # a study's object, not its plain data
    with pytest.raises(ValueError, match=r"trees\['trees'\] must have shape \(J, I\)"):
        class_couplings(dict(trees["Q"], trees=np.ones(18)), 0)
    with pytest.raises(ValueError, match=r"trees\['predictions'\] must have shape \(N,\), classes in \[0, J\)"):
        class_couplings(dict(trees["Q"], predictions=np.full(40, 3)), 0)
    with pytest.raises(ValueError, match=r"images must have shape \(N, 1, S, S\) with N = 40"):
        parse_tree_graph_figure(trees, 0, GRID, images=images[:5], config=SMALL)
    with pytest.raises(ValueError, match=r"threshold must be a share in \[0, 1\]"):
        parse_tree_graph_figure(trees, 0, GRID, threshold=2.0)
    with pytest.raises(ValueError, match="trees must be a non-empty dict"):
        parse_tree_graph_figure({}, 0, GRID)


# ---------------------------------------------------------------- saliency maps

def test_saliency_figure_shows_each_map_over_each_image():
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(3, 1, 8, 8, generator=gen)
    maps = {"eq. 16": torch.rand(3, 8, 8, generator=gen), "Grad-CAM": torch.zeros(3, 8, 8)}
    fig = saliency_figure(images, maps, predictions=torch.tensor([4, 1, 7]))
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 9
    assert [ax.get_title() for ax in panels[:3]] == ["image", "eq. 16", "Grad-CAM"]
    overlay = panels[4].images[1].get_array()                          # image 1, eq. 16, scaled to [0, 1]
    a = maps["eq. 16"][1].numpy()
    assert np.allclose(overlay, (a - a.min()) / (a.max() - a.min()))
    assert np.allclose(panels[5].images[1].get_array(), 0.0)          # a constant map shows as 0
    assert panels[3].get_ylabel() == "predicted 1"
    plt.close(fig)
    with pytest.raises(ValueError, match=r"maps\['x'\] must have shape \(B, H, W\) = \(3, 8, 8\)"):
        saliency_figure(images, {"x": torch.rand(3, 4, 4)})
    with pytest.raises(ValueError, match=r"predictions must have shape \(B,\) = \(3,\)"):
        saliency_figure(images, maps, predictions=torch.tensor([1]))


# ---------------------------------------------------------------- the pruning explorer

def test_step_summary_and_pruning_explorer_figure():
    run = make_run()
    plain = pruning_explorer_run(run)
    numbers = step_summary(plain["pruned"][2])
    entropy, keys = hand_entropy(run.pruned[2].test)
    assert numbers["epoch"] == 3 and numbers["sparsity"] == pytest.approx(0.2)
    assert numbers["entropy"] == pytest.approx(entropy, abs=1e-12) and numbers["mean_keys"] == pytest.approx(keys)
    assert set(numbers) == {"epoch", "sparsity", "accuracy", "entropy", "mean_keys"}
    fig = pruning_explorer_figure(plain, 3, 1, GRID)
    text = "\n".join(t.get_text() for ax in fig.axes for t in ax.texts)
    s = step_summary(plain["pruned"][3])
    q = step_summary(plain["dense"][3])
    assert "epoch 4\n" in text and "(REM's model)" not in text and f"sparsity {100 * s['sparsity']:.1f} %" in text
    assert f"entropy {s['entropy']:.2f} bits (K = 11)" in text and f"entropy {q['entropy']:.2f} bits" in text
    plt.close(fig)
    with pytest.raises(ValueError, match=r"step must be an index into run\['pruned'\], in \[0, 5\)"):
        pruning_explorer_figure(plain, 5, 1, GRID)
    with pytest.raises(ValueError, match="run must be a dict"):
        pruning_explorer_figure(run, 0, 1, GRID)                        # a study's object, not its plain data
    with pytest.raises(ValueError, match="step must be a dict with the keys"):
        step_summary(run.pruned[0])
    with pytest.raises(ValueError, match=r"images must have shape \(N, 1, S, S\) with N = 40"):
        pruning_explorer_figure(plain, 0, 1, GRID, images=torch.rand(5, 1, 9, 9))
    with pytest.raises(ValueError, match="curve must be a dict"):
        pruning_curve_figure(run.pruned)
    with pytest.raises(ValueError, match="steps must be a non-empty list of capsule_lab.studies.rem.Step"):
        epoch_curve([])


def test_pruning_explorer_slider_changes_the_shown_step():
    run = make_run()
    images = torch.rand(40, 1, 9, 9)
    widget = pruning_explorer(pruning_explorer_run(run), GRID, images=images, label=2, config=SMALL)
    assert widget.step.value == len(run.pruned) - 1 and widget.image.value[:4] == b"\x89PNG"
    assert widget.step.options[0][0] == "epoch 1 · sparsity 0 %"
    first = dict(widget.summary)
    assert first["epoch"] == 5 and f"entropy {first['entropy']:.2f} bits" in widget.numbers.value
    widget.step.value = 0
    second = widget.summary
    entropy, keys = hand_entropy(run.pruned[0].test)
    assert second["epoch"] == 1 and second["entropy"] == pytest.approx(entropy, abs=1e-12)
    assert second["entropy"] != first["entropy"] and f"entropy {entropy:.2f} bits" in widget.numbers.value
    assert f"accuracy {100 * run.pruned[0].test.accuracy:.2f} %" in widget.numbers.value
    widget.label.value = 0
    graph = widget.figure.axes[0]
    assert graph.get_title().startswith(f"class 0 ({int((run.pruned[0].test.predictions == 0).sum())} images)")
    with pytest.raises(ValueError, match=r"label must be a class index in \[0, 3\)"):
        pruning_explorer(pruning_explorer_run(run), GRID, label=3)
    default = pruning_explorer(pruning_explorer_run(run), GRID)         # the class REM's model predicts most
    counts = torch.bincount(run.rem.test.predictions, minlength=J)
    assert default.label.value == int(counts.argmax())


# ---------------------------------------------------------------- alt text and captions written from the data

def words(fig) -> tuple[str, str]:
    """The alt text and the caption a figure function attached."""
    described = description_of(fig)
    assert described is not None, "the figure function attaches no description"
    plt.close(fig)
    return described.alt, described.caption


def flat_measure(n: int = 12) -> RoutingMeasure:
    """Every image couples every capsule with 1/J to every class: one key per class, entropy 0."""
    predictions = torch.arange(n) % J
    return RoutingMeasure(accuracy=1.0, loss=0.1, couplings=torch.full((n, 18, J), 1 / J), predictions=predictions,
                          labels=predictions)


def change(first: float, last: float) -> str:
    return "rises" if last > first + 0.05 else "falls" if last < first - 0.05 else "stays level"


def test_pruning_curve_description_gives_each_runs_first_and_last_numbers():
    run = make_run()
    alt, caption = words(pruning_curve_figure(epoch_curve(run.pruned), dense=epoch_curve(run.dense),
                                              paper={"entropy": 4.31, "accuracy": 0.996},
                                              title="mnist: while REM prunes"))
    for name, steps in (("REM (solid)", run.pruned), ("Q (dashed)", run.dense)):
        h0, h1 = hand_entropy(steps[0].test)[0], hand_entropy(steps[-1].test)[0]
        a0, a1 = 100 * steps[0].test.accuracy, 100 * steps[-1].test.accuracy
        assert (f"{name}: entropy {change(h0, h1)} from {h0:.2f} to {h1:.2f} bits, accuracy {change(a0, a1)} from "
                f"{a0:.1f} % to {a1:.1f} %") in alt
    assert f"from 0 % to {100 * (1 - 0.8 ** 3):.1f} %" in alt              # the sparsity of epochs 1 and 5
    assert "the paper's REM at 4.31 bits and 99.60 %" in alt and caption == "mnist: while REM prunes"
    # a run that ends where it began stays level; without a dense run nothing is said about Q
    alt, _ = words(pruning_curve_figure(epoch_curve([run.pruned[2], run.pruned[2]])))
    assert "entropy stays level" in alt and "Q (dashed)" not in alt and "paper" not in alt


def test_entropy_accuracy_description_names_the_run_that_ends_lowest():
    run = make_run()
    flat = [Step(e, {"overall": 0.0}, 0.3, flat_measure(), {}) for e in (1, 2)]
    alt, caption = words(entropy_accuracy_figure({name: epoch_curve(steps, 6) for name, steps in
                                                  (("Q", run.dense), ("REM", run.pruned), ("flat", flat))}))
    assert "flat ends with the lowest entropy" in alt and caption.startswith("Entropy against test accuracy")
    h0, h1 = hand_entropy(run.pruned[0].test, 6)[0], hand_entropy(run.pruned[-1].test, 6)[0]
    assert (f"REM from {100 * run.pruned[0].test.accuracy:.1f} % and {h0:.2f} bits (epoch 1) to "
            f"{100 * run.pruned[-1].test.accuracy:.1f} % and {h1:.2f} bits (epoch 5)") in alt
    rose = sum(hand_entropy(s[-1].test, 6)[0] > hand_entropy(s[0].test, 6)[0] for s in (run.dense, run.pruned))
    assert f"higher at the last epoch than at the first in {rose} of 3 runs" in alt
    # every run has its own marker and line style
    fig = entropy_accuracy_figure({"Q": epoch_curve(run.dense), "REM": epoch_curve(run.pruned),
                                   "flat": epoch_curve(flat)})
    assert len({(l.get_marker(), l.get_linestyle()) for l in fig.axes[0].lines}) == 3
    plt.close(fig)


def test_entropy_vs_levels_description_reads_the_curves():
    levels = [2, 6, 11, 21]
    alt, caption = words(entropy_vs_levels_figure(
        levels, {"Q": [1.0, 6.0, 5.5, 6.6], "REM": [0.5, 1.5, 2.5, 3.0]}, ceiling=math.log2(100),
        accuracies={"Q": [0.5, 0.9, 0.99, 0.995], "REM": [0.4, 0.98, 0.99, 0.985]}))
    assert "Q's is lowest at K = 2 (1.00 bits), highest at K = 21 (6.60), not monotonic (its largest fall from " \
           "K = 6 to 11)" in alt
    assert "REM's is lowest at K = 2 (0.50 bits), highest at K = 21 (3.00), never falling as K grows" in alt
    assert "REM is at or below Q at 4 of 4 K" in alt
    assert "quarter bit of the 6.64-bit ceiling (dotted): Q at K = 21." in alt
    assert "Q's from K = 11 on (99.5 % at best, 50.0 % at K = 2)" in alt and "REM's from K = 6 on" in alt
    assert caption == "Entropy and test accuracy against the number of quantisation levels K"
    alt, caption = words(entropy_vs_levels_figure(levels, {"Q": [3.0, 2.0, 2.0, 1.0], "REM": [2.0, 2.5, 1.0, 0.5]}))
    assert "never rising as K grows" in alt and "REM is at or below Q at 3 of 4 K" in alt
    assert "ceiling" not in alt and "right" not in alt and "accuracy" not in caption
    alt, _ = words(entropy_vs_levels_figure(levels + [51], {"Q": [7.4, 7.5, 7.45, 7.4, 7.6]}, ceiling=7.64))
    assert "Within a quarter bit of the 7.64-bit ceiling (dotted): Q at 5 of 5 K." in alt


def test_keys_per_class_description_and_hatches():
    keys = {"Q": {0: 12, 1: 30, 2: 7}, "REM": {0: 3, 2: 4}}
    fig = keys_per_class_figure(keys, class_names=["zero", "one", "two"], title="mnist: keys")
    first, second = fig.axes[0].containers
    assert first.patches[0].get_hatch() in (None, "") and second.patches[0].get_hatch() == "//"
    assert first.patches[0].get_facecolor() != second.patches[0].get_facecolor()
    alt, caption = words(fig)
    assert "Q has 16.3 keys per class on average, most for one (30), fewest for two (7)" in alt
    assert "REM has 2.3 keys per class on average, most for two (4), fewest for one (0)" in alt
    assert "REM has fewer keys than Q in 3 of 3 classes" in alt and caption == "mnist: keys"
    alt, _ = words(keys_per_class_figure({"Q": {0: 2, 1: 5}, "REM": {0: 2, 1: 9}}))
    assert "REM has fewer keys than Q in 0 of 2 classes" in alt


def test_coupling_histogram_figure_draws_the_couplings_and_the_edges_it_names():
    couplings = {("mnist", "Q"): np.linspace(0.08, 0.12, 1001), ("mnist", "REM"): np.linspace(0.09, 0.11, 1001),
                 ("fashion", "Q"): np.linspace(0.07, 0.13, 1001)}
    fig = coupling_histogram_figure(couplings, levels=(6, 11), title="couplings, seed 0")
    left, right = fig.axes
    steps = [p for p in left.patches]
    assert len(steps) == 2 and steps[0].get_linestyle()[1] is None           # Q solid, REM dashed
    assert steps[1].get_linestyle()[1] is not None and steps[0].get_edgecolor() != steps[1].get_edgecolor()
    edges = sorted(round(l.get_xdata()[0], 4) for l in left.lines)
    assert edges == [0.05, 0.1, 0.15, 0.25]                                # K = 11 below 0.3, and K = 6's 0.1
    assert len(right.patches) == 1 and "fashion" in right.get_title()
    alt, caption = words(fig)
    assert "[0.080, 0.120] for mnist Q" in alt and "[0.090, 0.110] for mnist REM" in alt
    assert "Between 0.071 and 0.129 lie 1 edge of K = 6 (0.1); no edge of K = 11." in alt
    assert caption == "couplings, seed 0"
    with pytest.raises(ValueError, match=r"couplings must be a non-empty dict \{\(panel, model\)"):
        coupling_histogram_figure({"Q": np.ones(3)})
    with pytest.raises(ValueError, match=r"couplings\[\('a', 'Q'\)\] must be a non-empty 1-D array"):
        coupling_histogram_figure({("a", "Q"): np.full(3, 2.0)})
    with pytest.raises(ValueError, match="levels must be a list of 1 to 3"):
        coupling_histogram_figure(couplings, levels=(3, 5, 7, 9))


def test_coupling_histogram_figure_from_counts_matches_the_couplings_it_counted():
    rng = np.random.default_rng(0)
    raw = {("fashion", "Q"): rng.beta(2, 14, 5000), ("fashion", "REM"): rng.beta(1, 3, 5000)}
    counts = {key: np.histogram(a, bins=200, range=(0, 1))[0] for key, a in raw.items()}
    fig = coupling_histogram_figure(counts, levels=(11,), upper=1.0, counted=True, title="the longer run")
    (ax,) = fig.axes
    heights = [p.get_path().vertices[:, 1].max() for p in ax.patches]       # each bin's share of the pairs
    assert heights == pytest.approx([counts["fashion", "Q"].max() / 5000, counts["fashion", "REM"].max() / 5000])
    assert ax.get_ylabel() == "share of capsule–image pairs" and ax.get_title() == "fashion"
    alt, caption = words(fig)
    for key, a in raw.items():                   # the band, read to a bin's width (0.005), holds the raw quantiles
        low, high = np.quantile(a, [0.01, 0.99])
        said = alt.split(f"for fashion {key[1]}")[0].rsplit("[", 1)[1].rstrip("] ").split(", ")
        assert float(said[0]) <= low < float(said[0]) + 0.005 + 1e-9
        assert float(said[1]) - 0.005 - 1e-9 <= high <= float(said[1])
    assert caption == "the longer run"
    one = np.zeros(200)
    one[20] = 7                                  # every coupling in [0.100, 0.105)
    alt, _ = words(coupling_histogram_figure({("a", "Q"): one}, levels=(11,), upper=0.5, counted=True))
    assert "[0.100, 0.105] for a Q" in alt
    with pytest.raises(ValueError, match=r"must be non-negative counts in equal bins of \[0, 1\], not all zero"):
        coupling_histogram_figure({("a", "Q"): np.zeros(200)}, counted=True)


def test_parse_tree_graph_figure_description_names_the_strongest_capsule():
    c = torch.full((6, 18, J), 0.05)
    c[:, 4, 0] = 1.0                                                   # capsule 4: row 0, column 2, type 0
    q = RoutingMeasure(1.0, 0.0, c, torch.zeros(6, dtype=torch.long), torch.zeros(6, dtype=torch.long))
    c = torch.full((6, 18, J), 0.05)
    c[:, 13, 0] = 0.8                                                  # capsule 13: row 2, column 0, type 1
    rem = RoutingMeasure(1.0, 0.0, c, torch.zeros(6, dtype=torch.long), torch.zeros(6, dtype=torch.long))
    alt, caption = words(parse_tree_graph_figure({"Q": class_trees(q), "REM": class_trees(rem)}, 0, GRID,
                                                 images=torch.rand(6, 1, 9, 9), config=SMALL))
    assert "Q: 1 of 18 edges (6 images), the strongest coupling 1.00 at row 0, column 2, the largest summed coupling " \
           "on the image at row 0, column 2" in alt
    assert "REM: 1 of 18 edges (6 images), the strongest coupling 0.80 at row 2, column 0" in alt
    assert "above 0.333" in alt and caption == "Parse tree of class 0, backtracked from the predicted class"
    alt, _ = words(parse_tree_graph_figure({"Q": class_trees(q)}, 1, GRID))
    assert "Q: no image predicted as class 1, so no edge" in alt and "mean image" not in alt


def test_saliency_figure_description_says_which_map_is_on_the_object():
    images = torch.zeros(1, 1, 8, 8)
    images[0, 0, :3, :3] = 1.0                                         # the object: 9 of 64 pixels
    rows, cols = torch.meshgrid(torch.arange(8.0), torch.arange(8.0), indexing="ij")
    on = torch.exp(-((rows - 1) ** 2 + (cols - 1) ** 2))[None]         # peaks on the object
    off = torch.exp(-((rows - 6) ** 2 + (cols - 6) ** 2))[None]        # peaks far from it
    alt, caption = words(saliency_figure(images, {"on": on, "off": off, "flat": torch.ones(1, 8, 8)},
                                         predictions=torch.tensor([7])))

    def share(m):                                                      # of the map scaled to [0, 1]
        scaled = (m - m.min()) / (m.max() - m.min())
        return float(scaled[0, :3, :3].sum() / scaled.sum())

    assert f"on: {100 * share(on):.0f} % of its mass on the object, its brightest pixel there in 1 of 1 images" in alt
    assert f"off: {100 * share(off):.0f} % of its mass on the object, its brightest pixel there in 0 of 1 images" in alt
    assert "flat: constant on every image" in alt and "cover 14 % of the images" in alt and "(predicted 7)" in alt
    assert caption == "on, off and flat over 1 images"


def test_pruning_explorer_figure_description_is_the_box_and_the_tree():
    run = make_run()
    plain = pruning_explorer_run(run)
    alt, caption = words(pruning_explorer_figure(plain, 4, 1, GRID))
    s, q = step_summary(plain["pruned"][4]), step_summary(plain["dense"][4])
    edges = int((hand_mean_coupling(run.pruned[4].test, 1) > 1 / J).sum())
    assert f"at epoch 5 (REM's model), {100 * s['sparsity']:.1f} % sparse" in alt
    assert f"Parse tree of class 1: {edges} of 18 edges" in alt
    assert (f"accuracy {100 * s['accuracy']:.2f} %, entropy {s['entropy']:.2f} bits (K = 11), "
            f"{s['mean_keys']:.1f} keys per class; Q at the same epoch: accuracy {100 * q['accuracy']:.2f} %") in alt
    assert caption == "The pruned run of mnist, seed 0, at epoch 5 (REM's model): the parse tree of class 1"
    _, caption = words(pruning_explorer_figure(plain, 1, 2, GRID))
    assert caption == "The pruned run of mnist, seed 0, at epoch 2: the parse tree of class 2"
