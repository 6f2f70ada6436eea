"""The alt text and captions that chapter 06's and 08's figure functions attach (capsule_lab.figures.ladder,
capsule_lab.figures.step_times and capsule_lab.figures.router_bench): each is written from the data drawn, so on a
small hand-made input it names the right series and numbers, and a different input gives a different text. Also the
styles that tell series apart without colour: markers per curve and router, hatches for the CapsNets' bars, grey
dashed reference lines."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from capsule_lab.figures import (accuracy_time_figure, activity_profile_figure, coupling_length_figure,
                                 ladder_explorer_figure, ladder_explorer_result, measures_figure, step_time_figure)
from capsule_lab.figures.descriptions import check_alt_text, description_of
from capsule_lab.figures.ladder import (activity_profile_description, coupling_length_description,
                                        ladder_explorer_description)
from capsule_lab.figures.step_times import step_time_description
from capsule_lab.figures.router_bench import COLORS, MARKERS, accuracy_time_description, measures_description
from capsule_lab.figures.style import PALETTE, REFERENCE_COLOR
from capsule_lab.models import LadderCapsNet, LadderCapsNetConfig


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def described(fig):
    description = description_of(fig)
    assert description is not None, "the figure function attaches no description"
    check_alt_text(description.alt)
    return description


# ---------------------------------------------------------------- chapter 06

def test_coupling_length_figure_describes_its_lengths_and_couplings():
    lengths = torch.tensor([0.9, 0.8, 0.6, 0.5])
    couplings = torch.tensor([0.30, 0.12, 0.05, 0.08])
    fig = coupling_length_figure(lengths, couplings, 7)
    d = described(fig)
    assert "0.90 at rank 1 and 0.50 at rank 4" in d.alt
    assert "coupling to class 7, between 0.0500 and 0.3000 (highest at rank 1)" in d.alt
    assert "the 2 most active average 0.2100, the other 2 0.0650" in d.alt
    assert "2 of the 4 ranks lie above the uniform coupling 1/J = 0.1" in d.alt
    assert "All 4 ranks lie above" in coupling_length_description(lengths, couplings + 0.2, 7)[0]
    assert "class 7" in d.caption and (d.alt, d.caption) == coupling_length_description(lengths, couplings, 7)
    other = coupling_length_description(lengths, torch.tensor([0.05, 0.12, 0.30, 0.08]), 7)[0]
    assert "highest at rank 3" in other and "1 of the 4" not in other
    # colour-blind-safe styles: circles on the coupling line, the uniform line grey and dashed
    ax_c = fig.axes[1]
    coupling = [line for line in ax_c.lines if len(line.get_xdata()) == 4][0]
    assert coupling.get_marker() == "o"
    uniform = [line for line in ax_c.lines if line.get_linestyle() == "--"][0]
    assert uniform.get_color() == REFERENCE_COLOR


def test_activity_profile_figure_names_each_curve_and_the_lowest():
    profiles = {2: torch.tensor([1.0, 0.9, 0.4, 0.1]), "capsnet": torch.tensor([0.8, 0.7, 0.6, 0.55])}
    fig = activity_profile_figure(profiles)
    d = described(fig)
    assert "K = 2 from 1.00 to 0.10, 0.90 at rank 2, below 0.5 from rank 3" in d.alt
    assert "capsnet from 0.80 to 0.55, never below 0.5" in d.alt
    assert "a dashed vertical line at K = 2" in d.alt
    assert "The lowest at the last rank is K = 2 (0.10)" in d.alt
    swapped = activity_profile_description({2: torch.tensor([1.0, 0.9, 0.8, 0.7]), "capsnet": profiles["capsnet"]})
    assert "The lowest at the last rank is capsnet (0.55)" in swapped[0]
    curves = [line for line in fig.axes[0].lines if len(line.get_xdata()) == 4]
    assert [c.get_marker() for c in curves] == ["o", "s"]                     # a marker per curve as well as a colour
    assert len({c.get_color() for c in curves}) == 2
    named = fig.axes[0].child_axes[0]                                        # the line at K is named on top
    assert [t.get_text() for t in named.get_xticklabels()] == ["K = 2"]
    assert np.allclose(named.get_xticks(), [2.5])


def test_step_time_figure_names_the_fastest_and_the_ratio():
    report = {"device": "cpu", "threads": 2, "batch": 100,
              "models": {"ladder K=16": {"median_s": 0.1}, "ladder K=32": {"median_s": 0.2},
                         "capsnet r=3": {"median_s": 0.3}, "capsnet r=5": {"median_s": 0.5}}}
    fig = step_time_figure(report)
    d = described(fig)
    assert "ladder K=16 0.1 s, ladder K=32 0.2 s, capsnet r=3 0.3 s, capsnet r=5 0.5 s" in d.alt
    assert "The fastest is ladder K=16, the slowest capsnet r=5" in d.alt
    assert "a CapsNet step takes 1.5× to 5.0× an L-CapsNet step" in d.alt         # 0.3 / 0.2 and 0.5 / 0.1
    assert "paper" not in d.alt
    with_paper = described(step_time_figure(report, paper={"ladder K=50": (0.2, 0.01), "capsnet r=3": 1.8}))
    assert ("the paper's Table 3: ladder K=50 0.2 s, capsnet r=3 1.8 s; a CapsNet step takes 9.0× to 9.0×"
            in with_paper.alt)
    assert with_paper.alt == step_time_description(report, {"ladder K=50": (0.2, 0.01), "capsnet r=3": 1.8})[0]
    bars = fig.axes[0].patches
    assert [bool(p.get_hatch()) for p in bars] == [False, False, True, True]    # CapsNets hatched, not only coloured
    paper_fig = step_time_figure(report, paper={"ladder K=50": 0.2, "capsnet r=3": 1.8})
    ours, theirs = paper_fig.axes                    # the machine is named on our panel only, not over the paper's
    assert ours.get_title() == "this course: cpu, 2 threads, batch 100" and "hardware not stated" in theirs.get_title()
    assert paper_fig._suptitle.get_text() == "one training step"


@pytest.fixture(scope="module")
def explorer_inputs():
    torch.manual_seed(3)
    models = {8: LadderCapsNet(LadderCapsNetConfig.slim(k=8))}
    g = torch.Generator().manual_seed(0)
    return models, torch.rand(2, 1, 40, 40, generator=g), torch.tensor([4, 7])


def test_ladder_explorer_figure_describes_the_forward_pass(explorer_inputs):
    models, images, labels = explorer_inputs
    fig = ladder_explorer_figure(models, images, labels, 8, 1)
    d = described(fig)
    r = ladder_explorer_result(models, images, labels, 8, 1)
    activities = r["activities"].numpy()
    j = int(activities.argmax())
    second = int(np.argsort(-activities)[1])
    assert "test image 1, a 7, through the L-CapsNet with K = 8" in d.alt
    assert (f"class {j} is predicted with δ = {activities[j]:.3f}, then class {second} with "
            f"{activities[second]:.3f}") in d.alt
    assert ("the true label 7 is the prediction" if j == 7 else "the true label 7 is not the prediction") in d.alt
    distances = r["distances"].numpy()
    assert f"largest {distances.max():.3g} at row {int(distances.argmax())}" in d.alt
    assert f"the 8 kept primary capsules sit at {len(np.unique(r['indices'].numpy() // 4))} places" in d.alt
    correlation = np.corrcoef(r["selected"].numpy().ravel(), r["regressed"].numpy().ravel())[0, 1]
    assert f"correlation {correlation:.2f}" in d.alt
    assert "K = 8" in d.caption
    assert d.alt == ladder_explorer_description(r, models[8].config)[0]
    predicted = fig.axes[3].patches[j]
    assert predicted.get_hatch() and predicted.get_label() == f"predicted {j}"
    diagonal = [line for line in fig.axes[1].lines if line.get_linestyle() == "--"][0]
    assert diagonal.get_marker() in ("none", "None", None, "")          # a reference line, not a series
    assert diagonal.get_color() == REFERENCE_COLOR
    with pytest.raises(ValueError, match="result must be the dict ladder_explorer_result returns"):
        ladder_explorer_description({"k": 8}, models[8].config)


# ---------------------------------------------------------------- chapter 08

SUMMARY = {
    "fast": {"seeds": 3, "accuracy": (0.970, 0.01, 0.002), "affine_accuracy": (0.80, 0.01, 0.01),
             "train_step_ms": (20.0, 1.0, 0.5), "inference_ms": (5.0, 0.1, 0.1), "dyr": (0.0, 0.0, 0.0),
             "dead_primary": (0.0, 0.0, 0.0)},
    "best": {"seeds": 3, "accuracy": (0.980, 0.01, 0.002), "affine_accuracy": (0.85, 0.01, 0.01),
             "train_step_ms": (50.0, 1.0, 0.5), "inference_ms": (9.0, 0.1, 0.1), "dyr": (0.03, 0.0, 0.0),
             "dead_primary": (0.0, 0.0, 0.0)},
    "slow": {"seeds": 3, "accuracy": (0.978, 0.01, 0.002), "affine_accuracy": (0.70, 0.01, 0.01),
             "train_step_ms": (400.0, 1.0, 0.5), "inference_ms": (90.0, 0.1, 0.1), "dyr": None,
             "dead_primary": (0.0, 0.0, 0.0)},
}


def test_accuracy_time_figure_names_the_most_accurate_and_the_fastest():
    d = described(accuracy_time_figure(SUMMARY))
    assert "Clean (left): the most accurate is best (50 ms) at 98.00 %, the least accurate fast at 97.00 %" in d.alt
    assert "2 of 3 routers lie within half a point of the best" in d.alt          # best and slow, not fast
    assert "Affine (right): the most accurate is best (50 ms) at 85.00 %, the least accurate slow at 70.00 %" in d.alt
    assert "The fastest step is fast's (20 ms, 97.00 % clean), the slowest slow's (400 ms, 97.80 % clean)" in d.alt
    tied = {**SUMMARY, "slow": {**SUMMARY["slow"], "accuracy": (0.980, 0.01, 0.002)}}
    assert "the most accurate are best (50 ms) and slow (400 ms) at 98.00 %" in accuracy_time_description(tied)[0]


def test_accuracy_time_description_says_what_the_zoomed_row_shows():
    d = described(accuracy_time_figure(SUMMARY))
    assert d.alt.startswith("Two rows of two panels")
    assert ("The bottom row zooms on the 2 routers within 0.5 points of the best clean accuracy (best and slow): "
            "97.80–98.00 % clean, 70.00–85.00 % affine, 50–400 ms; a dashed rectangle marks that range in the "
            "top row, where fast is drawn too.") in d.alt
    assert "below, zoomed on the 2 routers within 0.5 points of the best clean accuracy" in d.caption
    # fast within half a point too: every router leads, so no zoom and no sentence about one
    close = {**SUMMARY, "fast": {**SUMMARY["fast"], "accuracy": (0.977, 0.01, 0.002)}}
    alt = described(accuracy_time_figure(close)).alt
    assert alt.startswith("Two panels of test accuracy") and "zooms" not in alt
    assert "zooms" not in accuracy_time_description(SUMMARY, zoom_within=1)[0]      # fast is 1 point behind
    assert "zooms" not in accuracy_time_description(SUMMARY, zoom_within=0.1)[0]    # best alone leads


def test_measures_figure_names_the_extremes_the_missing_and_the_zero_measures():
    measures = ("inference_ms", "dyr", "dead_primary")
    d = described(measures_figure(SUMMARY, measures))
    assert "2 panels, one per measure" in d.alt and "the same 3 routers" in d.alt
    assert "as bars from 0, a 0 written beside a bar of 0 and n/a where a router has no value" in d.alt
    assert "Inference batch (ms): highest slow (90), lowest fast (5)" in d.alt
    assert "Routing dynamics dyr: highest best (0.03), lowest fast (0); none for slow" in d.alt
    assert "Dead primary capsules (%): 0 for every router, so it has no panel" in d.alt
    assert "A note in the grid says that dead primary capsules (%) is 0 for every router" in d.alt
    assert "dead primary capsules (%): 0 for every router, no panel" in d.caption
    assert d.alt == measures_description(SUMMARY, measures)[0]
    accuracies = measures_description(SUMMARY, ("affine_accuracy", "dyr"))[0]
    assert accuracies.startswith("2 panels")
    assert "affine test accuracy (%) as points on an axis fitted to them" in accuracies
    assert "no panel" not in accuracies and "A note" not in accuracies
    with pytest.raises(ValueError, match="measure must be one of"):
        measures_description(SUMMARY, ("speed",))


def test_router_styles_tell_twelve_routers_apart_by_marker_and_by_colour():
    from capsule_lab.figures.router_bench import BENCH_ROUTERS, router_styles
    from capsule_lab.studies.bench.settings import ROUTERS_08

    assert BENCH_ROUTERS == ROUTERS_08                           # the figures' copy of the bench's names
    assert len(set(MARKERS)) == len(MARKERS) == 12
    assert len(set(COLORS)) == len(COLORS) == 12                 # no two routers of the bench share a colour
    styles = router_styles(ROUTERS_08)
    assert len({s["color"] for s in styles.values()}) == 12 and len({s["marker"] for s in styles.values()}) == 12
    assert set(COLORS[:6]) <= set(PALETTE)                      # the course's palette first
