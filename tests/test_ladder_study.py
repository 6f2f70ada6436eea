"""Chapter 06's experiment (capsule_lab.studies.ladder) and its settings (chapter_settings("06"))."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from capsule_lab.data.sources import load_mnist
from capsule_lab.studies.ladder import (TrainedNetwork, activity_profiles, coupling_profile, ladder_study_data,
                                        matched_class_dim, primary_capsules, run_ladder_study, shipped_ladder_runs,
                                        train_network)
from capsule_lab.models import CapsNet, CapsNetConfig, LadderCapsNet, LadderCapsNetConfig
from capsule_lab.studies.ladder import LadderSettings
from capsule_lab.course.profiles import chapter_settings
from capsule_lab.training import evaluate

pytestmark = pytest.mark.xdist_group("ladder_study")


@pytest.fixture(scope="module")
def tiny():
    settings = chapter_settings("06", "quick")
    settings = replace(settings, train_size=96, test_size=40,
                       schedule=replace(settings.schedule, epochs=1, batch_size=32))
    return settings, ladder_study_data(settings)


def test_the_settings_are_the_papers_in_the_full_profile_and_matched_in_both():
    full, quick = chapter_settings("06", "full"), chapter_settings("06", "quick")
    assert isinstance(full, LadderSettings) and isinstance(quick, LadderSettings)
    assert full.ladder == LadderCapsNetConfig.paper(k=70) and full.ks == (50, 70, 100)      # Table 2, 9×9 kernels
    assert full.ladder.primary_caps == 4608 and full.train_size is None and full.test_size == 10000
    assert (full.schedule.lr, full.bench) == (1e-3, "full")                                          # §4: Adam from 0.001
    for s in (full, quick):
        assert s.capsnet.router.iterations == 3 and not s.capsnet.decoder
        assert s.capsnet.primary_caps == s.ladder.primary_caps and s.capsnet.image_size == 40
        assert s.ladder.k in s.ks and len(s.ks) == 3
        assert s.matched == replace(s.capsnet, class_dim=s.matched.class_dim)


def _capsnet_parameters(c: CapsNetConfig) -> int:
    """A CapsNet's parameters counted by hand: conv weights and biases, primary conv weights and biases, W_ij."""
    conv = c.in_channels * c.conv_channels * c.conv_kernel ** 2 + c.conv_channels
    primary_out = c.primary_types * c.primary_dim
    primary = c.conv_channels * primary_out * c.primary_kernel ** 2 + primary_out
    return conv + primary + c.primary_caps * c.classes * c.class_dim * c.primary_dim


@pytest.mark.parametrize("profile, dim", [("quick", 57), ("full", 193)])
def test_the_matched_capsnet_has_the_main_ladders_parameters_within_one_percent(profile, dim):
    s = chapter_settings("06", profile)
    with torch.device("meta"):
        ladder = sum(p.numel() for p in LadderCapsNet(s.ladder).parameters())
        assert _capsnet_parameters(s.matched) == sum(p.numel() for p in CapsNet(s.matched).parameters())
    # the settings' D is the closest, found here by the hand count over every D
    best = min(range(1, 400), key=lambda D: abs(_capsnet_parameters(replace(s.capsnet, class_dim=D)) - ladder))
    assert s.matched.class_dim == dim == best == matched_class_dim(s.ladder, s.capsnet)
    assert abs(_capsnet_parameters(s.matched) / ladder - 1) < 0.01
    assert _capsnet_parameters(s.capsnet) < ladder / 3                       # the CapsNet the paper compares with
    with pytest.raises(ValueError, match="LadderCapsNetConfig and capsnet a CapsNetConfig"):
        matched_class_dim(s.capsnet, s.ladder)


def test_settings_refuse_a_sweep_without_the_main_k_or_an_unmatched_capsnet():
    quick = chapter_settings("06", "quick")
    with pytest.raises(ValueError, match="ks must contain the main network's k = 32"):
        replace(quick, ks=(16, 64))
    with pytest.raises(ValueError, match="matched; conv_channels differ"):
        replace(quick, capsnet=CapsNetConfig.slim(image_size=40))          # 64 conv channels: same 576 capsules
    with pytest.raises(ValueError, match="matched; primary_types differ"):
        replace(quick, capsnet=CapsNetConfig.slim(image_size=40, conv_channels=32, primary_types=8))
    assert quick.ladder_config(16).k == 16 and quick.ladder_config(16).primary_caps == 576
    with pytest.raises(ValueError, match="another class dimension only; router differ"):
        replace(quick, matched=replace(quick.matched, router=replace(quick.capsnet.router, iterations=1)))
    with pytest.raises(ValueError, match="matched CapsNet must have the ladder's conv"):
        replace(quick, matched=replace(quick.matched, primary_types=8))


def test_the_data_are_the_same_test_digits_twice_and_the_training_digits_placed_at_random(tiny):
    settings, (train, clean, affine) = tiny
    assert train.tensors[0].shape == (96, 1, 40, 40) and clean.tensors[0].shape == (40, 1, 40, 40)
    assert torch.equal(clean.tensors[1], affine.tensors[1])
    test = load_mnist(False, "offline")
    assert torch.equal(clean.tensors[1], test.tensors[1][:40])
    # the clean set holds each test digit unchanged somewhere on the canvas: same ink, same pixels
    assert torch.allclose(clean.tensors[0].sum(dim=(1, 2, 3)), test.tensors[0][:40].sum(dim=(1, 2, 3)))
    assert not torch.equal(clean.tensors[0], affine.tensors[0])
    again = ladder_study_data(settings)
    assert all(torch.equal(a.tensors[0], b.tensors[0]) for a, b in zip((train, clean, affine), again))


def test_train_network_trains_tests_and_keeps_the_weights(tiny):
    settings, data = tiny
    ladder = train_network(settings.ladder_config(16), settings, data, seed=0)
    assert isinstance(ladder, TrainedNetwork) and ladder.name == "ladder K=16" and ladder.is_ladder
    model = ladder.model()
    assert isinstance(model, LadderCapsNet) and not model.training
    assert ladder.parameters == sum(p.numel() for p in LadderCapsNet(settings.ladder_config(16)).parameters())
    assert evaluate(model, data[1]) == ladder.clean_accuracy and evaluate(model, data[2]) == ladder.affine_accuracy
    for correct, accuracy in ((ladder.clean_correct, ladder.clean_accuracy),
                              (ladder.affine_correct, ladder.affine_accuracy)):
        assert len(correct) == 40 and set(correct) <= {"0", "1"} and correct.count("1") / 40 == accuracy
    assert ladder.affine_drop == pytest.approx(ladder.clean_accuracy - ladder.affine_accuracy)
    assert len(ladder.history.train_loss) == settings.schedule.epochs and ladder.seconds > 0
    # the same seed trains the same network
    again = train_network(settings.ladder_config(16), settings, data, seed=0)
    assert all(torch.equal(ladder.state[k], again.state[k]) for k in ladder.state)
    capsnet = train_network(settings.capsnet, settings, data, seed=0)
    assert capsnet.name == "capsnet r=3" and not capsnet.is_ladder and isinstance(capsnet.model(), CapsNet)


def test_tracking_the_test_sets_leaves_training_alone_and_records_each_epochs_accuracy(tiny):
    settings, data = tiny
    two = replace(settings, schedule=replace(settings.schedule, epochs=2))
    plain = train_network(two.ladder_config(16), two, data, seed=0)
    tracked = train_network(two.ladder_config(16), two, data, seed=0, track_test=True)
    assert all(torch.equal(plain.state[k], tracked.state[k]) for k in plain.state)     # the same training
    assert plain.history.test_accuracy == [] and plain.history.epoch_end == [None, None]
    clean, affine = tracked.history.test_accuracy, tracked.history.epoch_end
    assert len(clean) == len(affine) == 2
    # the last epoch's entries are the trained network's accuracies, counted image by image
    assert clean[-1] == tracked.clean_correct.count("1") / 40 and affine[-1] == tracked.affine_correct.count("1") / 40
    with pytest.raises(ValueError, match="track_test must be True or False"):
        train_network(two.ladder_config(16), two, data, track_test="yes")

def test_run_ladder_study_trains_every_k_and_the_capsnet(tiny):
    settings, data = tiny
    small = replace(settings, ks=(8, 32), train_size=32, schedule=replace(settings.schedule, epochs=1))
    runs = run_ladder_study(small, data)
    assert list(runs) == ["ladder K=8", "ladder K=32", "capsnet r=3", "capsnet matched"]
    assert runs["ladder K=8"].config.k == 8 and runs["capsnet r=3"].config == small.capsnet
    assert runs["capsnet matched"].config == small.matched and runs["capsnet matched"].parameters == \
        _capsnet_parameters(small.matched)


def test_coupling_profile_is_the_per_image_figure_1_averaged(tiny):
    from capsule_lab.measures.activity import most_active_couplings
    settings, data = tiny
    torch.manual_seed(1)
    net = CapsNet(settings.capsnet).eval()
    images = data[1].tensors[0][:9]
    lengths, couplings = coupling_profile(net, images, label=3, top=20, batch_size=4)
    per_image = []
    for image in images:                                         # one image at a time, the chapter's §1 function
        with torch.no_grad():
            out = net(image[None])
        per_image.append(most_active_couplings(out.primary[0], out.couplings[0], 3, top=20)[1:])
    assert torch.allclose(lengths, torch.stack([l for l, _ in per_image]).mean(0), atol=1e-6)
    assert torch.allclose(couplings, torch.stack([c for _, c in per_image]).mean(0), atol=1e-6)
    assert all(a >= b for a, b in zip(lengths.tolist(), lengths[1:].tolist()))
    with pytest.raises(ValueError, match="must be a CapsNet"):
        coupling_profile(LadderCapsNet(settings.ladder), images, 0)
    with pytest.raises(ValueError, match="at most the number of primary capsules 576"):
        coupling_profile(net, images, 0, top=577)
    with pytest.raises(ValueError, match="label must be a class index"):
        coupling_profile(net, images, 10)


def test_bad_input_is_refused(tiny):
    settings, data = tiny
    with pytest.raises(ValueError, match="LadderSettings"):
        ladder_study_data(chapter_settings("05", "quick"))
    with pytest.raises(ValueError, match="LadderCapsNetConfig or a CapsNetConfig"):
        train_network("K=32", settings, data)
    with pytest.raises(ValueError, match="tuple of ladder_study_data"):
        train_network(settings.ladder, settings, data[:2])
    with pytest.raises(ValueError, match="LadderCapsNet or a CapsNet"):
        primary_capsules(torch.nn.Linear(2, 2), data[1].tensors[0])
    with pytest.raises(ValueError, match="digit must be a class index"):
        activity_profiles({}, data[0], digit=10)


def test_primary_capsules_and_the_activity_profile_against_a_forward_written_here(tiny):
    settings, data = tiny
    torch.manual_seed(3)
    config = settings.ladder_config(16)
    net = LadderCapsNet(config).eval()
    images, labels = data[0].tensors
    with torch.no_grad():
        t = net.primary.conv(F.relu(net.conv(images)))                            # (N, 4·8, 12, 12)
        N = t.shape[0]
        t = t.view(N, 4, 8, 12, 12).permute(0, 3, 4, 1, 2).reshape(N, -1, 8)      # capsules (row, column, type)
        norm2 = (t * t).sum(-1, keepdim=True)
        u = norm2 / (1 + norm2) * t / norm2.sqrt()                                # squash
    caps = primary_capsules(net, images, batch_size=7)
    assert caps.shape == (96, 576, 8) and torch.allclose(caps, u, atol=1e-6)
    run = TrainedNetwork("ladder K=16", config, None, 0.0, 0.0, 0, 0.0, net.state_dict())
    zeros = labels == 0
    lengths = u[zeros].norm(dim=-1)
    expected = torch.stack([torch.tensor(sorted(row.tolist(), reverse=True)[:20]) for row in lengths]).mean(0)
    profile = activity_profiles({"a": run}, data[0], digit=0, top=20)["a"]
    assert profile.shape == (20,) and torch.allclose(profile, expected, atol=1e-5)


def test_the_shipped_longer_run_is_complete_and_consistent():
    report = shipped_ladder_runs()
    prov, runs = report["provenance"], report["runs"]
    epochs = prov["settings"]["schedule"]["epochs"]
    assert prov["seeds"] == list(range(len(prov["seeds"]))) and len(prov["seeds"]) >= 3
    assert epochs >= 15 and prov["settings"]["train_size"] == 8000
    settings = replace(chapter_settings("06", "quick"), train_size=prov["settings"]["train_size"])
    assert prov["settings"]["ladder"]["widths"] == list(settings.ladder.widths)        # today's networks
    assert prov["settings"]["matched"]["class_dim"] == settings.matched.class_dim
    names = [f"ladder K={k}" for k in settings.ks] + ["capsnet r=3", "capsnet matched"]
    assert list(runs) == names
    for name in names:
        config = (settings.ladder_config(int(name.split("=")[1])) if name.startswith("ladder")
                  else settings.capsnet if name == "capsnet r=3" else settings.matched)
        with torch.device("meta"):
            count = sum(p.numel() for p in (LadderCapsNet if name.startswith("ladder") else CapsNet)(config).parameters())
        for seed in map(str, prov["seeds"]):
            run = runs[name][seed]
            assert 0.1 < run["affine_accuracy"] < run["clean_accuracy"] <= 1
            for correct, accuracy in ((run["clean_correct"], run["clean_accuracy"]),
                                      (run["affine_correct"], run["affine_accuracy"])):
                assert len(correct) == 2000 and correct.count("1") / 2000 == pytest.approx(accuracy, abs=1e-7)
            assert run["parameters"] == count and len(run["train_loss"]) == len(run["train_accuracy"]) == epochs
            profile = run["activity_profile"]
            assert len(profile) == settings.profile_top and all(a >= b for a, b in zip(profile, profile[1:]))
            assert 0 < run["step_seconds"] < 5 and (run["device"], run["threads"]) == ("cpu", 1)
            if name.startswith("capsnet"):
                lengths, couplings = run["coupling_lengths"], run["couplings"]
                assert len(lengths) == len(couplings) == settings.coupling_top
                assert all(a >= b for a, b in zip(lengths, lengths[1:])) and all(0 < c < 1 for c in couplings)
            else:
                assert "couplings" not in run


# ------------------------------------------------------------------ the verdict table (LADDER_CLAIMS)

def test_activity_drop_by_hand_and_against_a_loop():
    from capsule_lab.measures.activity import activity_drop
    # three images of four capsules, lengths set by hand: a clean split after rank 2, a slow fall, all on
    lengths = torch.tensor([[0.99, 0.95, 0.02, 0.01], [0.8, 0.6, 0.4, 0.2], [0.97, 0.96, 0.95, 0.99]])
    u = torch.stack([lengths, torch.zeros_like(lengths)], dim=-1)       # (3, 4, 2): length = the first coordinate
    drop = activity_drop(u)
    assert drop["drop_rank"].tolist() == [2, 2, 4]         # the last image never falls below 0.5: n, no split
    assert drop["middling"].tolist() == [0, 4, 0]          # the slow fall is all middling; on/off has none
    g = torch.Generator().manual_seed(0)
    u = torch.randn(5, 30, 8, generator=g) * 0.2
    drop = activity_drop(u, low=0.2, high=0.7, threshold=0.45)
    for b in range(5):                                     # a loop over each image's sorted lengths
        sorted_lengths = sorted((float(torch.linalg.vector_norm(c)) for c in u[b]), reverse=True)
        assert drop["drop_rank"][b] == next((r for r, a in enumerate(sorted_lengths) if a < 0.45), 30)
        assert drop["middling"][b] == sum(0.2 < a < 0.7 for a in sorted_lengths)
    with pytest.raises(ValueError, match="0 <= low < threshold < high <= 1"):
        activity_drop(u, low=0.5, threshold=0.4)


def test_study_networks_start_as_train_network_starts_them_and_time_by_the_rule():
    from capsule_lab.evidence.rules import timing_problems
    from capsule_lab.studies.ladder import study_network, time_ladder_steps
    settings = chapter_settings("06", "quick")
    for name, config in (("ladder K=16", settings.ladder_config(16)), ("capsnet matched", settings.matched)):
        torch.manual_seed(3)
        by_hand = config.network()                        # what train_network does before it trains
        built = study_network(name, settings, seed=3)
        assert all(torch.equal(a, b) for a, b in zip(by_hand.state_dict().values(), built.state_dict().values()))
    with pytest.raises(ValueError, match="name must be one of"):
        study_network("capsnet r=5", settings)
    g = torch.Generator().manual_seed(0)
    train = torch.utils.data.TensorDataset(torch.rand(120, 1, 40, 40, generator=g), torch.randint(0, 10, (120,)))
    records = time_ladder_steps(settings, ("ladder K=16", "capsnet r=3"), seeds=(0,), threads=(1,), steps=10,
                                warmup=1, data=(train, None, None))
    assert [(r["router"], r["batch"], r["timed_steps"]) for r in records] == [("ladder K=16", 100, 10),
                                                                             ("capsnet r=3", 100, 10)]
    assert timing_problems(records) == []


def test_claim_records_are_the_shipped_runs_numbers():
    import numpy as np
    from capsule_lab.studies.ladder import FIT_MATCHED, ladder_claim_records
    shipped = shipped_ladder_runs()
    k = shipped["provenance"]["settings"]["ladder"]["k"]
    records = ladder_claim_records(shipped)
    networks = [r for r in records if r["router"] in shipped["runs"]]
    assert len(networks) == sum(len(seeds) for seeds in shipped["runs"].values())
    n = shipped["provenance"]["settings"]["ladder"]["primary_types"] * 12 ** 2    # 40×40 → 32×32 → a 12×12 grid per type
    for r in networks:
        run = shipped["runs"][r["router"]][str(r["seed"])]
        drops, middling = np.array(run["drop_rank"]), np.array(run["middling"])
        assert len(drops) == len(middling) > 500                         # one per training image of digit 0
        assert r["middling"] == pytest.approx(np.mean(middling / n))
        split = np.mean((drops > 0) & (drops < n))
        assert r["split"] == pytest.approx(split) and r["drop_rank"] in drops
        assert np.sum(drops < r["drop_rank"]) <= len(drops) / 2 <= np.sum(drops <= r["drop_rank"])     # the median
        assert ("middling" in r.get("untestable_for", {})) == (split <= 0.5)
        assert r["accuracy"] == run["clean_accuracy"] and r["train_accuracy"] == run["train_accuracy"]
        assert r["correct"] == run["clean_correct"] and r["train_step_ms"] == pytest.approx(1000 * run["step_seconds"])
    # the CapsNet read where its training accuracy first reaches the L-CapsNet's last, counted by hand
    matched = [r for r in records if r["router"] == FIT_MATCHED]
    assert len(matched) == len(shipped["runs"]["capsnet r=3"])
    for r in matched:
        capsnet, ladder = (shipped["runs"][name][str(r["seed"])] for name in ("capsnet r=3", f"ladder K={k}"))
        epoch = len(capsnet["train_accuracy"])
        for e, accuracy in enumerate(capsnet["train_accuracy"], start=1):
            if accuracy >= ladder["train_accuracy"][-1]:
                epoch = e
                break
        assert r["epoch"] == epoch and r["ladder_fit"] == ladder["train_accuracy"][-1]
        assert r["accuracy"] == capsnet["clean_by_epoch"][epoch - 1]
        assert r["affine_accuracy"] == capsnet["affine_by_epoch"][epoch - 1]
        assert r["fit"] >= r["ladder_fit"] or epoch == len(capsnet["train_accuracy"])
    groups = [r for r in records if r["router"] not in shipped["runs"] and r["router"] != FIT_MATCHED]
    assert {r["router"] for r in groups} == {"capsnet r=3 top-K", "capsnet r=3 rest", "capsnet matched top-K",
                                             "capsnet matched rest"}
    for r in groups:
        name, group = r["router"].rsplit(" ", 1)
        couplings = np.array(shipped["runs"][name][str(r["seed"])]["couplings"])
        assert r["coupling"] == pytest.approx((couplings[:k] if group == "top-K" else couplings[k:]).mean())
    stripped = {"provenance": shipped["provenance"], "runs": {"ladder K=32": {"0": {
        key: v for key, v in shipped["runs"]["ladder K=32"]["0"].items() if key != "step_seconds"}}}}
    with pytest.raises(ValueError, match=r"no step_seconds: rerun `python scripts/ladder_longer_run.py` in a clone of "
                                         r"the repository .*a pip install ships the records, not the scripts"):
        ladder_claim_records(stripped)
    with pytest.raises(ValueError, match="shipped_ladder_runs"):
        ladder_claim_records({"provenance": {}})


def test_the_verdicts_are_scipys_and_the_tables_numbers_are_the_runs():
    from _scipy_verdicts import scipy_outcomes

    from capsule_lab.studies.ladder import (FIT_MATCHED, LADDER_CLAIMS, ladder_claim_records, ladder_verdicts,
                                            shipped_ladder_timing)
    shipped = shipped_ladder_runs()
    assert len(shipped["provenance"]["seeds"]) >= 3
    timing = shipped_ladder_timing()["records"]
    rows = ladder_verdicts(shipped, timing=timing)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(ladder_claim_records(shipped) + timing, LADDER_CLAIMS)
    assert [r.verdict.outcome for r in ladder_verdicts()] == [r.verdict.outcome for r in rows]  # the shipped pair
    untimed = next(r for r in ladder_verdicts(shipped, timing=[]) if r.claim.measure == "train_step_ms")
    assert untimed.verdict.reason.startswith("the timing rule is not met")
    # the parameter ratio and the matched dimension the claims' "differs" state are the shipped networks'
    runs = shipped["runs"]
    ratio = runs["ladder K=32"]["0"]["parameters"] / runs["capsnet r=3"]["0"]["parameters"]
    assert all(f"{ratio:.1f}×" in c.differs for c in LADDER_CLAIMS if "capsnet r=3" in (c.a, c.b))
    matched = runs["capsnet matched"]["0"]["parameters"] / runs["ladder K=32"]["0"]["parameters"]
    assert abs(matched - 1) < 0.01
    dim = f"dimension {shipped['provenance']['settings']['matched']['class_dim']} against 16"
    assert all(dim in c.differs and "within 1 %" in c.differs for c in LADDER_CLAIMS if "capsnet matched" in (c.a, c.b))
    # every claim is the paper's, and every network a claim names is in the run
    assert all(c.quoted for c in LADDER_CLAIMS if c.origin == "paper")
    # the course's rows are the fit-matched reading of the paper's accuracy rows, and say so
    course = [c for c in LADDER_CLAIMS if c.origin == "course"]
    assert len(course) == 2 and all(FIT_MATCHED in (c.a, c.b) and "earlier epoch" in c.differs for c in course)


def _script():
    import importlib.util
    import sys
    from pathlib import Path
    scripts = Path(__file__).resolve().parents[1] / "scripts"
    sys.path.insert(0, str(scripts))
    spec = importlib.util.spec_from_file_location("ladder_longer_run", scripts / "ladder_longer_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_run_is_the_scripts_schedule_on_the_quick_networks():
    script = _script()
    prov = shipped_ladder_runs()["provenance"]
    quick = chapter_settings("06", "quick")
    schedule = prov["settings"]["schedule"]
    assert schedule["lr_decay"] == script.LR_DECAY and schedule["lr"] == quick.schedule.lr
    assert schedule["batch_size"] == quick.schedule.batch_size and prov["settings"]["ks"] == list(quick.ks)


def test_merging_the_parts_of_a_run_split_by_seeds(tmp_path):
    import json
    script = _script()
    base = {"settings": {"a": 1}, "torch": "t", "machine": "m", "threads": 1}
    parts = []
    for k, (seeds, seconds) in enumerate((([0, 1], 100.0), ([2], 60.0))):
        runs = {"net": {str(s): {"clean_accuracy": s / 10} for s in seeds}}
        report = {"provenance": dict(base, command=f"part {k}", seeds=seeds, seconds=seconds,
                                     date=f"2026-01-0{k + 1}"), "runs": runs}
        parts.append(tmp_path / f"{k}.json")
        parts[-1].write_text(json.dumps(report))
    out = tmp_path / "merged.json"
    script.main(["--merge", str(parts[1]), str(parts[0]), "--out", str(out)])
    merged = json.loads(out.read_text())
    assert merged["provenance"]["seeds"] == [0, 1, 2] and merged["provenance"]["seconds"] == 160.0
    assert merged["provenance"]["parts"] == [60.0, 100.0] and merged["provenance"]["command"] == "part 1 && part 0"
    assert list(merged["runs"]["net"]) == ["0", "1", "2"] and merged["runs"]["net"]["2"]["clean_accuracy"] == 0.2
    with pytest.raises(SystemExit, match="two reports"):
        script.main(["--merge", str(parts[0]), str(parts[0]), "--out", str(out)])
    other = json.loads(parts[1].read_text())
    other["provenance"]["threads"] = 2
    parts[1].write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="differ in threads"):
        script.main(["--merge", str(parts[0]), str(parts[1]), "--out", str(out)])
