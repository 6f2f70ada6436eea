"""Chapter 04's figures and per-layer table (capsule_lab.figures.dead_capsules, capsule_lab.figures.depth): what each
figure's alt text says is checked on small hand-made inputs whose answer is known (the shortest capsule, the setting
that kills every capsule, the median of the seeds, the layer that falls lowest), so that a wrong description fails;
and series differ in marker or line style as well as colour. Chapter 03's figures are checked in
tests/test_figures_widgets_gradients.py."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from capsule_lab.measures.capsule_stats import CapsuleRecord
from capsule_lab.figures.descriptions import description_of
from capsule_lab.figures.dead_capsules import (LAYER_STATISTICS, capsule_gradients_figure, dead_rate_search_figure,
                                               explorer_routings, layer_statistics_table, parse_tree_explorer_figure,
                                               parse_tree_figure, parse_tree_summary)
from capsule_lab.figures.depth import activation_correlation_figure, depth_figure
from capsule_lab.evidence.tables import Table


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _summary():
    """Three layers of 3, 3 and 2 capsules over 8 images; capsule 1 of layer 2 is dead; known couplings."""
    k = 8
    norms = [torch.full((k, 3), 0.5), torch.tensor([[0.4, 0.0, 0.2]]).repeat(k, 1), torch.full((k, 2), 0.3)]
    c0 = torch.tensor([[0.9, 0.05, 0.05], [1 / 3, 1 / 3, 1 / 3], [0.2, 0.3, 0.5]]).repeat(k, 1, 1)
    c1 = torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.7, 0.3]]).repeat(k, 1, 1)
    c1[::2, 2] = torch.tensor([0.6, 0.4])                     # varies over the images: std 0.05
    labels = torch.zeros(k, dtype=torch.long)
    return parse_tree_summary(CapsuleRecord(norms, [c0, c1], labels, labels))


def test_parse_tree_figure_alt_text_gives_the_numbers_it_draws():
    s = _summary()
    d = description_of(parse_tree_figure(s, title="hand-made"))
    assert "3 capsule layers of 3, 3 and 2 capsules" in d.alt
    assert "mean capsule norm per layer is 0.50, 0.20 and 0.30" in d.alt
    assert "largest mean coupling per routing layer is 0.900 and 0.650 (uniform: 0.333 and 0.500)" in d.alt
    assert "vary by 0.000 and 0.017 on average, by 0.050 at most" in d.alt
    assert "1 capsule dead, marked by crosses: 1 in layer 2." in d.alt
    assert d.caption.endswith("hand-made.")
    explorer = description_of(parse_tree_explorer_figure({(2, "uniform"): s}, 2, "uniform"))
    assert explorer.alt.startswith("The network with 2 routing layers and uniform routing, test accuracy 100.0 %.")
    assert "explorer as it opens, at 2 routing layers with uniform routing" in explorer.caption


def test_parse_tree_explorer_names_the_routings_as_the_caller_says():
    s = _summary()
    summaries = {(2, "dynamic"): s, (2, "uniform"): s, (3, "dynamic"): s}
    names, labels = explorer_routings(summaries, names={"dynamic": "RBA"}, labels={"dynamic": "RBA"})
    assert names == {"dynamic": "RBA", "uniform": "uniform routing"}
    assert labels == {"dynamic": "RBA", "uniform": "uniform"}
    d = description_of(parse_tree_explorer_figure(summaries, 2, "uniform", names={"dynamic": "RBA"},
                                                  labels={"dynamic": "RBA", "uniform": "uniform"}))
    assert d.alt.startswith("The network with 2 routing layers and uniform routing,")
    assert d.caption.endswith("the number of routing layers and the routing (RBA or uniform).")
    d = description_of(parse_tree_explorer_figure(summaries, 3, names={"dynamic": "routing by agreement"}))
    assert d.alt.startswith("The network with 3 routing layers and routing by agreement,")   # the first routing
    assert d.caption.endswith("(dynamic or uniform).")
    with pytest.raises(ValueError, match="names must be a dict"):
        explorer_routings(summaries, names={"dynamic": 3})
    with pytest.raises(ValueError, match="no network for depth=3, routing='uniform'"):
        parse_tree_explorer_figure(summaries, 3, "uniform")


def test_layer_statistics_table_is_a_table_of_the_layer_rows():
    s = _summary()
    table = layer_statistics_table(s.table, caption="hand-made", statistics=("alive", "dyr", "cdr"))
    assert isinstance(table, Table) and table.columns == ("layer", "alive", "dyr", "cdr")
    assert table.column("alive") == (3, 2, 2) and table.column("cdr") == tuple(r["cdr"] for r in s.table)
    assert table.texts()[-1] == ["3", "2", "–", "0.00"]                    # no routing from the class layer
    assert "<caption>hand-made</caption>" in table._repr_html_()
    assert layer_statistics_table(s.table).columns == ("layer",) + LAYER_STATISTICS
    with pytest.raises(ValueError, match="statistics"):
        layer_statistics_table(s.table, statistics=("dyr", "accuracy"))
    with pytest.raises(ValueError, match="layer_table rows"):
        layer_statistics_table([])


def _curve(norm, activation, weight):
    return {"norm": norm, "activation": activation, "weight": weight}


def test_capsule_gradients_figure_names_the_starved_capsule():
    curves = {"capsule 0 (dies)": _curve([0.1, 0.4, 0.01, 0.002], [0.1, 0.1, 0.05, 0.04], [0.1, 0.2, 1e-3, 1e-4]),
              "capsule 1 (lives)": _curve([0.1, 0.9, 1.0, 1.0], [0.1, 0.1, 0.05, 0.05], [0.1, 0.3, 0.2, 0.1])}
    fig = capsule_gradients_figure(curves, log_steps=True, title="hand-made")
    d = description_of(fig)
    assert "over 4 training steps (logarithmic step axis)" in d.alt
    assert "The length of capsule 0 (dies) peaks at 0.4 at step 2 and ends at 0.002." in d.alt
    assert ("the shortest capsule, capsule 0 (dies), has length 0.002 and ‖∂L/∂W‖ 0.0001, 1,000 times below the "
            "longest, capsule 1 (lives), with length 1 and ‖∂L/∂W‖ 0.1") in d.alt
    assert "their ‖∂L/∂u‖ are 0.04 and 0.05" in d.alt
    # the two capsules differ in marker and line style, not only in colour
    first, second = fig.axes[0].lines
    assert first.get_marker() != second.get_marker() and first.get_linestyle() != second.get_linestyle()
    assert fig.axes[-1].get_xscale() == "log"
    with pytest.raises(ValueError, match="one value per step|length"):
        capsule_gradients_figure({"a": _curve([0.1, 0.2], [0.1], [0.1, 0.2])})


def test_dead_rate_search_figure_sorts_the_settings_by_what_they_kill():
    rates = {"baseline": [0.0, 0.0, 0.0], "squash": [1.0, 1.0, 1.0], "sharp": [0.1, 0.5, 0.0],
             "prior": [0.2, 0.0, 0.0], "slow": [0.0, 0.0, 0.0]}
    accuracy = {"baseline": 90.0, "squash": 9.9, "sharp": 40.0, "prior": 95.0, "slow": 60.0}
    fig = dead_rate_search_figure(rates, accuracy, reference=(0.63, "paper, layer 4 (0.63)"), title="hand-made")
    alt = description_of(fig).alt
    assert 'Every capsule of these layers is dead with "squash" (9.9 % accurate).' in alt
    assert 'Capsules die in 2 more settings (largest rate, accuracy): "sharp" 0.50, 40 %; "prior" 0.20, 95 %.' in alt
    assert "None die in the other 2, whose accuracy ranges from 60 to 90 %." in alt
    assert "A dashed line at 0.63 marks the reference, paper, layer 4 (0.63)." in alt
    bars = fig.axes[0].patches
    assert len({b.get_hatch() for b in bars}) == 3                         # each layer its own hatching
    with pytest.raises(ValueError, match="same settings"):
        dead_rate_search_figure(rates, {"baseline": 90.0})


def test_depth_figure_gives_medians_and_the_seeds_range():
    panels = [dict(label="test accuracy (%)", fmt=".1f",
                   values={"RBA": [[10.0, 12.0, 95.0], [90.0, 94.0, 96.0]],
                           "uniform": [[98.0] * 3, [97.0, 98.0, 99.0]]}),
              dict(label="dead rate", values={"RBA": [[0.3, 0.1, 0.2], [0.1, 0.1, 0.1]], "uniform": [[0.0] * 3] * 2},
                   reference=(3, 0.42, "paper"))]
    fig = depth_figure([2, 3], panels, title="hand-made")
    alt = description_of(fig).alt
    assert "Two panels against the number of routing layers, 2 to 3, 3 seeds per point" in alt
    assert "Test accuracy (%): RBA 12.0, 94.0 (medians; single seeds from 10.0 to 96.0)" in alt
    assert "uniform 98.0 at every depth (medians; single seeds from 97.0 to 99.0)" in alt
    assert "Dead rate: RBA 0.20, 0.10 (medians" in alt and "uniform 0.00 at every depth in every seed" in alt
    assert "; paper 0.42 at 3 layers." in alt
    one = description_of(depth_figure([1, 2, 3], [dict(label="accuracy", fmt=".0f",
                                                       values={"RBA": [80, 10, 70], "uniform": [88, 89, 90]})])).alt
    assert "one network per point" in one and "Accuracy: RBA 80, 10, 70; uniform 88, 89, 90." in one
    with pytest.raises(ValueError, match="per depth"):
        depth_figure([1, 2], [dict(label="x", values={"RBA": [1.0]})])


def test_activation_correlation_figure_says_which_layer_falls_lowest():
    strengths = [0.0, 0.5, 1.0]
    values = [[1.0, 0.99, 0.98], [1.0, 0.95, 0.90], [1.0, 0.97, 0.97]]
    fig = activation_correlation_figure(strengths, values, labels=["layer 1", "layer 2", "class capsules"])
    alt = description_of(fig).alt
    assert "The correlation falls at every step of the strength for layer 1 and layer 2, not for the others" in alt
    assert "from 1.000 for every layer at strength 0 to layer 1 0.980, layer 2 0.900, class capsules 0.970" in alt
    assert "where layer 1 is highest and layer 2 lowest" in alt
    markers = {line.get_marker() for line in fig.axes[0].lines}
    assert len(markers) == 3
    falling = description_of(activation_correlation_figure(strengths, values[:2])).alt
    assert falling.split(": from")[0].endswith("Every layer's correlation falls at every step of the strength")
    with pytest.raises(ValueError, match="increasing"):
        activation_correlation_figure([0.0, 0.0], values)
