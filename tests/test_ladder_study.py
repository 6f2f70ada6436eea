"""Chapter 06's experiment (capsule_lab.ladder_study) and its settings (chapter_settings("06"))."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from capsule_lab.data import load_mnist
from capsule_lab.ladder_study import (TrainedNetwork, activity_profiles, ladder_study_data, primary_capsules,
                                      run_ladder_study, shipped_ladder_runs, train_network)
from capsule_lab.models import CapsNet, CapsNetConfig, LadderCapsNet, LadderCapsNetConfig
from capsule_lab.profiles import LadderSettings, chapter_settings
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


def test_settings_refuse_a_sweep_without_the_main_k_or_an_unmatched_capsnet():
    quick = chapter_settings("06", "quick")
    with pytest.raises(ValueError, match="ks must contain the main network's k = 32"):
        replace(quick, ks=(16, 64))
    with pytest.raises(ValueError, match="matched; conv_channels differ"):
        replace(quick, capsnet=CapsNetConfig.slim(image_size=40))          # 64 conv channels: same 576 capsules
    with pytest.raises(ValueError, match="matched; primary_types differ"):
        replace(quick, capsnet=CapsNetConfig.slim(image_size=40, conv_channels=32, primary_types=8))
    assert quick.ladder_config(16).k == 16 and quick.ladder_config(16).primary_caps == 576


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
    assert ladder.affine_drop == pytest.approx(ladder.clean_accuracy - ladder.affine_accuracy)
    assert len(ladder.history.train_loss) == settings.schedule.epochs and ladder.seconds > 0
    # the same seed trains the same network
    again = train_network(settings.ladder_config(16), settings, data, seed=0)
    assert all(torch.equal(ladder.state[k], again.state[k]) for k in ladder.state)
    capsnet = train_network(settings.capsnet, settings, data, seed=0)
    assert capsnet.name == "capsnet r=3" and not capsnet.is_ladder and isinstance(capsnet.model(), CapsNet)


def test_run_ladder_study_trains_every_k_and_the_capsnet(tiny):
    settings, data = tiny
    small = replace(settings, ks=(8, 32), train_size=32, schedule=replace(settings.schedule, epochs=1))
    runs = run_ladder_study(small, data)
    assert list(runs) == ["ladder K=8", "ladder K=32", "capsnet r=3"]
    assert runs["ladder K=8"].config.k == 8 and runs["capsnet r=3"].config == small.capsnet


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
    assert prov["seeds"] == [0, 1, 2, 3, 4] and epochs >= 8 and prov["settings"]["train_size"] == 8000
    settings = replace(chapter_settings("06", "quick"), train_size=prov["settings"]["train_size"])
    names = [f"ladder K={k}" for k in settings.ks] + ["capsnet r=3"]
    assert list(runs) == names
    for name in names:
        make = (lambda: LadderCapsNet(settings.ladder_config(int(name.split("=")[1])))) if name.startswith("ladder") \
            else (lambda: CapsNet(settings.capsnet))
        count = sum(p.numel() for p in make().parameters())
        for seed in map(str, prov["seeds"]):
            run = runs[name][seed]
            assert 0.1 < run["affine_accuracy"] < run["clean_accuracy"] <= 1
            assert run["parameters"] == count and len(run["train_loss"]) == len(run["train_accuracy"]) == epochs
            profile = run["activity_profile"]
            assert len(profile) == settings.profile_top and all(a >= b for a, b in zip(profile, profile[1:]))


# ------------------------------------------------------------------ the verdict table (LADDER_CLAIMS)

def test_middle_share_by_hand():
    from capsule_lab.ladder import middle_share
    assert middle_share([0.95, 0.5, 0.2, 0.05]) == 0.5               # 0.5 and 0.2 lie strictly inside (0.1, 0.9)
    assert middle_share([0.9, 0.1, 0.3]) == pytest.approx(1 / 3)      # the bounds themselves are high or low
    assert middle_share(torch.tensor([0.99, 0.98]), low=0.1, high=0.99) == 0.5
    with pytest.raises(ValueError, match="non-empty 1-D"):
        middle_share([])
    with pytest.raises(ValueError, match="0 <= low < high <= 1"):
        middle_share([0.5], low=0.9, high=0.1)


def test_claim_records_are_the_shipped_runs_numbers():
    import numpy as np
    from capsule_lab.ladder_study import ladder_claim_records
    shipped = shipped_ladder_runs()
    records = ladder_claim_records(shipped)
    assert len(records) == sum(len(seeds) for seeds in shipped["runs"].values())
    for r in records:
        run = shipped["runs"][r["router"]][str(r["seed"])]
        profile = np.array(run["activity_profile"])
        assert r["affine_drop"] == pytest.approx(run["clean_accuracy"] - run["affine_accuracy"])
        assert r["middle_share"] == pytest.approx(np.mean((profile > 0.1) & (profile < 0.9)))
        assert r["accuracy"] == run["clean_accuracy"] and r["train_accuracy"] == run["train_accuracy"]
    stripped = {"runs": {"ladder K=32": {"0": {k: v for k, v in shipped["runs"]["ladder K=32"]["0"].items()
                                               if k != "train_accuracy"}}}}
    with pytest.raises(ValueError, match="no training accuracy"):
        ladder_claim_records(stripped)
    with pytest.raises(ValueError, match="shipped_ladder_runs"):
        ladder_claim_records({"provenance": {}})


def test_the_verdicts_are_scipys_and_the_tables_numbers_are_the_runs():
    from _scipy_verdicts import scipy_outcomes

    from capsule_lab.ladder_study import LADDER_CLAIMS, ladder_claim_records, ladder_verdicts
    shipped = shipped_ladder_runs()
    assert len(shipped["provenance"]["seeds"]) >= 5
    rows = ladder_verdicts(shipped)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(ladder_claim_records(shipped), LADDER_CLAIMS)
    # the parameter ratio the claims' "differs" states is the shipped networks'
    ratio = shipped["runs"]["ladder K=32"]["0"]["parameters"] / shipped["runs"]["capsnet r=3"]["0"]["parameters"]
    assert all(f"{ratio:.1f}×" in c.differs for c in LADDER_CLAIMS if "capsnet r=3" in (c.a, c.b))
