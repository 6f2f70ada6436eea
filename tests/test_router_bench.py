"""Chapter 08's bench (capsule_lab.studies.bench.runner), its settings (chapter_settings("08")) and `bench routers`."""

import csv
import json
import math
import platform
from pathlib import Path
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from capsule_lab import cli
from capsule_lab.studies import bench as rb
from capsule_lab.studies.bench import records as bench_records, runner as bench_runner
from capsule_lab.models import CapsNet, LadderCapsNet
from capsule_lab.studies.bench.settings import ROUTERS_08
from capsule_lab.course.profiles import chapter_settings
from capsule_lab.evidence.stats import mcnemar_test
from capsule_lab.measures.pruning import global_magnitude_prune, prunable_parameters
from capsule_lab.routing import DynamicRouter
from capsule_lab.training import evaluate, fit

QUICK = chapter_settings("08", "quick")
TINY = replace(QUICK, train_size=96, test_size=64, schedule=replace(QUICK.schedule, epochs=2, batch_size=32),
               rem_rounds=1, timing_repeats=1)


def _epochs(settings, epochs, **changes):
    return replace(settings, schedule=replace(settings.schedule, epochs=epochs), **changes)


@pytest.fixture(scope="module")
def tiny_data():
    return rb.bench_data(TINY)


def test_settings_are_one_backbone_every_router():
    full = chapter_settings("08", "full")
    assert QUICK.routers == full.routers == ROUTERS_08 == tuple(rb.ROUTERS)
    assert full.capsnet.primary_caps == 1152 and full.train_size is None and full.ladder_k == 70
    assert not QUICK.capsnet.decoder and len(QUICK.seeds) >= 3
    with pytest.raises(ValueError, match="rem_rounds"):
        replace(QUICK, rem_rounds=QUICK.schedule.epochs)
    with pytest.raises(ValueError, match="decoder"):
        replace(QUICK, capsnet=replace(QUICK.capsnet, decoder=True))
    with pytest.raises(ValueError, match="ladder_k"):
        replace(QUICK, ladder_k=QUICK.capsnet.primary_caps + 1)


def test_every_router_starts_from_the_same_backbone():
    nets = {name: rb.build_network(name, TINY, seed=3) for name in rb.ROUTERS}
    conv = nets["dynamic r=3"].conv.weight
    for name, net in nets.items():
        assert torch.equal(net.conv.weight, conv), name
        assert torch.equal(net.primary.conv.weight, nets["dynamic r=3"].primary.conv.weight), name
        if isinstance(net, CapsNet):
            assert torch.equal(net.digits.weight, nets["dynamic r=3"].digits.weight), name
    assert isinstance(nets["ladder"], LadderCapsNet) and nets["ladder"].config.k == TINY.ladder_k
    assert not torch.equal(rb.build_network("uniform", TINY, seed=4).conv.weight, conv)
    with pytest.raises(ValueError, match="router must be one of"):
        rb.build_network("em", TINY)
    with pytest.raises(ValueError, match="RouterBenchSettings"):
        rb.build_network("uniform", chapter_settings("07", "quick"))


def test_each_network_offers_its_parse_trees_the_same_way():
    from capsule_lab.models import routed_parse_trees

    g = torch.Generator().manual_seed(0)
    over_j = torch.softmax(torch.randn(4, 6, 3, generator=g), dim=2)
    over_i = torch.softmax(torch.randn(4, 6, 3, generator=g), dim=1)
    c, levels, over, dynamics, routed = routed_parse_trees(over_j, "outputs")
    assert levels == 11 and over == "outputs" and torch.allclose(c, over_j) and dynamics is c
    assert torch.equal(routed, over_j)                          # as the router returned them, for chapter 05's REM
    c = routed_parse_trees(over_i, "inputs").couplings
    expected = over_i / over_i.sum(dim=2, keepdim=True)       # each input's row over the outputs
    assert torch.allclose(c, expected) and torch.allclose(c.sum(dim=2), torch.ones(4, 6))
    c = routed_parse_trees(torch.tensor([[[0.7, -0.2, 0.5]]]), "outputs").couplings   # a bias can go below 0
    assert torch.allclose(c, torch.tensor([[[0.7 / 1.2, 0.0, 0.5 / 1.2]]]))
    ladder, capsnet = rb.build_network("ladder", TINY), rb.build_network("similarity", TINY)
    images = torch.rand(2, 1, 28, 28)
    with torch.no_grad():
        out = ladder(images)
        c, levels, over, dynamics, routed = ladder.parse_trees(out)
        assert levels == 2 and over == "none" and dynamics is None and routed is None
        assert c.shape == (2, ladder.config.primary_caps, 10)
        assert torch.equal(c[:, :, 4], out.code)                                    # the code vector, every class
        assert capsnet.parse_trees(capsnet(images)).normalize_over == "inputs"      # the router says so


def test_a_record_measures_what_it_says(tiny_data):
    train, test, affine = tiny_data
    record = rb.train_record("rem-pruned", TINY, tiny_data, seed=0, amp=True, memory=False)
    assert record["amp"] is False and record["key"] == rb.record_key("rem-pruned", 0, TINY)   # amp acts on CUDA only
    # the network the record describes, trained again from the same seed, gives the same accuracy by evaluate
    net = rb.build_network("rem-pruned", TINY, 0)
    fit(net, train, None, **TINY.schedule.fit_options(), seed=0, progress=False,
        on_epoch_end=lambda e, m: global_magnitude_prune(m, TINY.rem_amount) if e <= TINY.rem_rounds else None)
    assert record["accuracy"] == pytest.approx(evaluate(net, test), abs=1e-12)
    assert record["affine_accuracy"] == pytest.approx(evaluate(net, affine), abs=1e-12)
    assert len(record["correct"]) == len(test) and record["correct"].count("1") == round(record["accuracy"] * len(test))
    # one round of REM pruned rem_amount of the prunable weights; nothing else is zero
    prunable = sum(getattr(m, a).numel() for m, a in prunable_parameters(net))
    pruned = record["parameters"] - record["nonzero_parameters"]
    assert abs(pruned - TINY.rem_amount * prunable) <= 1
    assert record["router_parameters"] == 0 and record["levels"] == 11 and 0 <= record["dyr"] <= 1.5
    assert record["normalize_over"] == "outputs"
    assert len(record["train_loss"]) == TINY.schedule.epochs and record["step_ms"] > 0
    assert record["peak_memory_mb"] is None
    assert record["train_step_ms"] == pytest.approx(1000 * record["train_seconds"] / (TINY.schedule.epochs * 3))
    assert set(rb.RECORD_FIELDS) <= set(record)


@pytest.mark.slow
@pytest.mark.skipif(platform.system() != "Linux", reason="the CPU measure reads /proc")
def test_peak_memory_grows_with_the_batch_as_activations_do(tiny_data):
    """The LSTM router keeps a state per (image, input, output) for the backward pass, so a training step's peak
    memory is nearly proportional to the batch (measured: 47, 377 and 1,509 MB at batches 8, 64 and 256); a
    measure that missed the step's tensors would not grow 4 times from 8 images to 32."""
    images, labels = tiny_data[0].tensors
    small, large = (bench_records._peak_memory_mb("connectionist", QUICK, 0, images[:b], labels[:b], torch.device("cpu"), None)
                    for b in (8, 32))
    assert small > 20 and 3.5 < large / small < 4.5


def test_ladder_and_learned_routers_report_their_own_parameters(tiny_data):
    small = _epochs(TINY, 1, rem_rounds=0)
    records = {r["router"]: r for r in rb.run_router_bench(small, ("ladder", "similarity", "self-attention"), (0,),
                                                           data=tiny_data, cache=None, memory=False, progress=False)}
    ladder = rb.build_network("ladder", small)
    assert records["ladder"]["router_parameters"] == sum(
        p.numel() for n, p in ladder.named_parameters() if not n.startswith(("conv.", "primary.")))
    assert records["ladder"]["dyr"] is None and records["ladder"]["levels"] == 2
    assert records["similarity"]["router_parameters"] == 25          # λ1, λ2, 10 length scales, 10 weights, θ (3)
    assert (records["similarity"]["normalize_over"], records["ladder"]["normalize_over"]) == ("inputs", "none")
    assert records["self-attention"]["router_parameters"] == small.capsnet.primary_caps * small.capsnet.classes
    assert all(not r["cached"] for r in records.values())


def test_the_cache_is_read_on_the_second_run(tmp_path, tiny_data):
    small = _epochs(TINY, 1, rem_rounds=0)
    first = rb.run_router_bench(small, ("uniform",), (0, 1), data=tiny_data, cache=tmp_path, memory=False,
                                progress=False)
    assert len(list(tmp_path.glob("*.json"))) == 2 and not any(r["cached"] for r in first)
    again = rb.run_router_bench(small, ("uniform",), (0, 1), cache=tmp_path, memory=False, progress=False)
    assert all(r["cached"] for r in again)
    assert [{**r, "cached": 0} for r in again] == [{**r, "cached": 0} for r in first]
    # the key ignores the list of seeds and routers, and changes with anything that decides a run
    key = rb.record_key("uniform", 0, small)
    assert key == rb.record_key("uniform", 0, replace(small, seeds=(0, 5), routers=("uniform",)))
    faster = replace(small, schedule=replace(small.schedule, lr=small.schedule.lr * 2))
    assert key != rb.record_key("uniform", 0, faster)
    assert key != rb.record_key("uniform", 0, replace(small, capsnet=replace(small.capsnet, conv_channels=8)))
    assert key != rb.record_key("uniform", 1, small) != rb.record_key("dynamic r=3", 0, small)
    # mixed precision on CUDA is another run; amp on a CPU changes nothing, so neither does it change the key
    assert rb.record_key("uniform", 0, small, "cpu", amp=True) == key
    assert rb.record_key("uniform", 0, small, "cuda", amp=True) != rb.record_key("uniform", 0, small, "cuda") != key


def test_a_custom_router_plugs_in_and_is_never_cached(tmp_path, tiny_data):
    small = _epochs(TINY, 1, rem_rounds=0)
    half = rb.BenchEntry(lambda s: DynamicRouter(2))
    records = rb.run_router_bench(small, ("r=2",), (0,), data=tiny_data, cache=tmp_path, custom={"r=2": half},
                                  memory=False, progress=False)
    assert records[0]["router"] == "r=2" and not list(tmp_path.glob("*.json"))
    with pytest.raises(ValueError, match="BenchEntry"):
        rb.run_router_bench(small, ("mine",), (0,), custom={"mine": lambda s: None}, progress=False)
    with pytest.raises(ValueError, match="exactly one"):
        rb.BenchEntry()
    with pytest.raises(ValueError, match="votes"):
        rb.BenchEntry(lambda s: DynamicRouter(2), votes="faria")


def test_results_are_written_as_json_and_csv(tmp_path):
    records = [{"router": "uniform", "seed": s, "accuracy": 0.5 + s / 10, "correct": "0101", "cached": False}
               for s in range(2)]
    json_path, csv_path = rb.write_results(records, tmp_path / "out" / "bench.json")
    assert json.loads(json_path.read_text()) == records
    rows = list(csv.DictReader(csv_path.open()))
    assert [float(r["accuracy"]) for r in rows] == [0.5, 0.6] and "correct" not in rows[0]
    with pytest.raises(ValueError, match="records"):
        rb.write_results("not records", tmp_path / "x.json")


def test_summary_is_mean_sd_and_standard_error():
    values = [0.91, 0.95, 0.9]
    records = [{"router": "a", "accuracy": v, "dyr": None} for v in values] + [{"router": "b", "accuracy": 0.5}]
    summary = rb.summarize_records(records, measures=("accuracy", "dyr"))
    mean, sd, se = summary["a"]["accuracy"]
    assert mean == pytest.approx(np.mean(values)) and sd == pytest.approx(np.std(values, ddof=1))
    assert se == pytest.approx(np.std(values, ddof=1) / math.sqrt(3)) and summary["a"]["seeds"] == 3
    assert summary["a"]["dyr"] is None and summary["b"]["accuracy"] == (0.5, None, None)
    assert list(summary) == ["a", "b"]
    with pytest.raises(ValueError, match="non-empty"):
        rb.summarize_records([])


@pytest.mark.parametrize("a, b", [("1111000011", "1010101011"), ("1" * 40, "0" * 3 + "1" * 37), ("10" * 30, "01" * 30),
                                  ("1" * 9, "1" * 9)])
def test_mcnemar_against_scipy(a, b):
    result = mcnemar_test(a, b)
    only_a = sum(x == "1" and y == "0" for x, y in zip(a, b))
    only_b = sum(x == "0" and y == "1" for x, y in zip(a, b))
    assert (result.a_only, result.b_only) == (only_a, only_b)
    expected = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    assert result.p_value == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="same images"):
        mcnemar_test(a, b + "1")
    with pytest.raises(ValueError, match="0s and 1s"):
        mcnemar_test(a.replace("1", "x"), b)


def test_shipped_records_cover_the_quick_bench():
    """The chapter reads these: one per router and seed of the quick settings, under today's keys."""
    records = rb.run_router_bench(QUICK, cache=rb.SHIPPED_CACHE, device="cpu", progress=False)
    assert all(r["cached"] for r in records), "some shipped records are missing: run `capsule-lab bench routers`"
    assert [(r["router"], r["seed"]) for r in records] == [(n, s) for n in QUICK.routers for s in QUICK.seeds]
    assert all(len(r["correct"]) == QUICK.test_size == r["test_size"] for r in records)


def test_cli_bench_routers_writes_records_and_reads_its_cache(tmp_path, monkeypatch, capsys):
    import capsule_lab.course.profiles as profiles

    small = _epochs(TINY, 1, rem_rounds=0)
    monkeypatch.setattr(profiles, "chapter_settings", lambda chapter, profile=None: small)
    argv = ["bench", "routers", "--routers", "uniform", "--seeds", "1", "--no-memory", "--out",
            str(tmp_path / "b.json"), "--cache", str(tmp_path / "cache")]
    assert cli.main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["trained"] == 1 and (tmp_path / "b.csv").exists()
    assert cli.main(argv) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["read"] == 1 and second["trained"] == 0
    assert second["means"]["uniform"]["accuracy"] == first["means"]["uniform"]["accuracy"]
    assert cli.main(["bench", "routers", "--seeds", "0"]) == 2 and "--seeds" in capsys.readouterr().err


def test_cli_bench_routers_trains_as_the_chapter_does(tmp_path, monkeypatch, capsys):
    """The command runs the profile's precision on the chosen device (mixed on CUDA in the full profile, as chapter
    08 does), so the chapter and the command share their cached records."""
    calls = []

    def fake_bench(settings, routers, seeds, **kwargs):
        calls.append(kwargs)
        return [{"router": "uniform", "seed": 0, "accuracy": 0.5, "cached": False}]

    monkeypatch.setattr(bench_runner, "run_router_bench", fake_bench)
    for profile, device in (("full", "cuda"), ("quick", "cuda"), ("full", "cpu")):
        argv = ["bench", "routers", "--profile", profile, "--device", device, "--out", str(tmp_path / "b.json")]
        assert cli.main(argv) == 0
    capsys.readouterr()
    assert [(c["device"], c["amp"]) for c in calls] == [("cuda", True), ("cuda", False), ("cpu", True)]
    assert [bench_records._mixed(c["device"], c["amp"]) for c in calls] == [True, False, False]


def test_figures_draw_the_summary():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from capsule_lab.figures import accuracy_time_figure, measures_figure, plot_accuracy_time, plot_measure

    summary = {"a": {"seeds": 3, "accuracy": (0.9, 0.01, 0.006), "affine_accuracy": (0.8, 0.02, 0.01),
                     "train_step_ms": (40.0, 2.0, 1.0), "dyr": (0.03, 0.01, 0.005)},
               "b": {"seeds": 3, "accuracy": (0.95, 0.01, 0.006), "affine_accuracy": (0.7, 0.02, 0.01),
                     "train_step_ms": (400.0, 2.0, 1.0), "dyr": None}}
    fig, ax = plt.subplots()
    plot_measure(ax, summary, "accuracy")
    assert [round(p.get_width(), 6) for p in ax.patches] == [90.0, 95.0]            # percent
    plot_measure(ax2 := fig.add_subplot(2, 1, 2), summary, "dyr")
    assert [p.get_width() for p in ax2.patches] == [0.03, 0] and any(t.get_text() == " n/a" for t in ax2.texts)
    fig, ax = plt.subplots()
    plot_accuracy_time(ax, summary, "affine_accuracy")
    points = [c.lines[0].get_xydata()[0].tolist() for c in ax.containers]             # each router's (x, y)
    assert [[40.0, 80.0], [400.0, 70.0]] == [[round(x, 6), round(y, 6)] for x, y in points]
    assert ax.get_xscale() == "log"
    assert [m.get_marker() for c in ax.containers for m in c.lines[:1]] == ["o", "s"]     # a marker per router
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all(t.replace(".", "").isdigit() for t in labels), labels     # plain numbers, no 2×10¹
    assert not [t.get_text() for t in ax.xaxis.get_minorticklabels() if t.get_text()]
    figure = accuracy_time_figure(summary)
    assert figure.get_figwidth() <= 7.5
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["a", "b"]
    bars = plt.subplots()[1]
    plot_measure(bars, {"a": {"seeds": 3, "dead_class": (0.0, 0.0, 0.0)}}, "dead_class")
    assert bars.get_xlim() == (0.0, 1.0)                                                 # all zero: an axis from 0
    assert len([a for a in measures_figure(summary, ("accuracy", "dyr"), columns=2).axes if a.get_visible()]) == 2
    with pytest.raises(ValueError, match="measure must be one of"):
        plot_measure(ax, summary, "speed")
    with pytest.raises(ValueError, match="summary must be"):
        accuracy_time_figure({})
    plt.close("all")


def test_the_controls_change_one_thing_each():
    """dynamic r=3 normed is r = 3 on Faria's votes; ladder matched is the ladder with the CapsNet's parameter count,
    the nearest any width (w, w // 2) gives — counted here on real tensors, not on the meta device."""
    from capsule_lab.models import CapsNet

    normed = rb.build_network("dynamic r=3 normed", QUICK, seed=0)
    plain = rb.build_network("dynamic r=3", QUICK, seed=0)
    assert normed.config.votes == "normalized" and plain.config.votes == "plain"
    assert all(torch.equal(a, b) for a, b in zip(normed.parameters(), plain.parameters()))
    capsnet = sum(p.numel() for p in CapsNet(QUICK.capsnet).parameters())
    matched = sum(p.numel() for p in rb.build_network("ladder matched", QUICK, seed=0).parameters())
    ladder = sum(p.numel() for p in rb.build_network("ladder", QUICK, seed=0).parameters())
    assert rb.matched_ladder_widths(QUICK) == (6, 3)
    assert abs(matched - capsnet) / capsnet < 0.03 and ladder > 5 * capsnet
    net = rb.build_network("ladder matched", QUICK, seed=0)
    for w in (5, 7):
        other = LadderCapsNet(replace(net.config, widths=(w, w // 2), contribution_widths=(w, w // 2)))
        assert abs(sum(p.numel() for p in other.parameters()) - capsnet) > abs(matched - capsnet)


def test_the_longer_run_script_trains_the_quick_bench_longer_and_records_its_provenance(tmp_path, monkeypatch):
    """scripts/router_bench_longer_run.py: the quick settings with its epochs, sizes and seeds (REM's rounds kept
    below the epochs), one cache per run, a report that shipped_longer_run can rebuild the settings from."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("router_bench_longer_run",
                                                  Path(__file__).resolve().parents[1] / "scripts"
                                                  / "router_bench_longer_run.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    seen = {}

    def fake_bench(settings, data, cache, device):
        seen.update(settings=settings, cache=cache)
        return [{"router": n, "seed": s, "key": rb.record_key(n, s, settings), "accuracy": 0.9, "affine_accuracy": 0.8,
                 "train_seconds": 1.0, "cached": False} for n in settings.routers for s in settings.seeds]

    monkeypatch.setattr(script, "run_router_bench", fake_bench)
    monkeypatch.setattr(script, "bench_data", lambda settings: None)
    out = tmp_path / "long.json"
    script.main(["--epochs", "4", "--seeds", "0", "1", "--train-size", "100", "--test-size", "50", "--threads", "1",
                 "--out", str(out)])
    settings = seen["settings"]
    assert (settings.schedule.epochs, settings.seeds, settings.train_size, settings.rem_rounds) == (4, (0, 1), 100, 2)
    assert settings.routers == QUICK.routers and settings.capsnet == QUICK.capsnet
    report = json.loads(out.read_text())
    assert report["provenance"]["settings"]["schedule"]["epochs"] == 4 and report["provenance"]["seeds"] == [0, 1]
    assert len(report["runs"]["records"]) == 2 * len(QUICK.routers)
    torch.set_num_threads(1)


def test_longer_run_settings_train_longer_with_the_quick_networks_and_check_the_decay():
    from capsule_lab.studies.bench.runner import SETTINGS, longer_run_settings
    quick = SETTINGS["quick"]
    s = longer_run_settings(4, 600, 200, (0, 1), routers=("uniform",), lr_decay=0.7)
    assert (s.schedule.epochs, s.schedule.lr_decay, s.train_size, s.test_size, s.seeds, s.routers) == (
        4, 0.7, 600, 200, (0, 1), ("uniform",))
    assert s.schedule.lr == quick.schedule.lr and s.rem_rounds == min(quick.rem_rounds, 3)
    assert longer_run_settings(2, 10, 10, (0,)).schedule.lr_decay == quick.schedule.lr_decay
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="lr_decay must be in"):
            longer_run_settings(2, 10, 10, (0,), lr_decay=bad)
