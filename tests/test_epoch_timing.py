"""`capsule-lab smoke --epoch` (capsule_lab.course.epoch_timing): one timed epoch of each chapter's main network, run
here on a CPU at a tiny size; the shipped GPU report's table is checked in test_gpu_epochs.py."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import TensorDataset

import capsule_lab.course.epoch_timing as epoch_timing
from capsule_lab.cli import main
from capsule_lab.course.epoch_timing import chapter_images, epoch_data, epoch_report, main_network, time_epoch
from capsule_lab.course.profiles import PROFILES, chapter_settings
from capsule_lab.course.smoke import CHAPTERS, resolve_source
from capsule_lab.training import fit

needs_fashion = pytest.mark.skipif(resolve_source("fashion", "auto")[0] != "torchvision",
                                   reason="Fashion-MNIST is not on disk (make data)")


def test_chapter_images_puts_the_images_on_the_chapters_canvas():
    images = torch.rand(3, 1, 28, 28)
    data = TensorDataset(images, torch.arange(3))
    assert chapter_images(data, (1, 28, 28)) is data
    wide = chapter_images(data, (1, 40, 40)).tensors[0]
    assert wide.shape == (3, 1, 40, 40)
    assert torch.allclose(wide.sum(dim=(1, 2, 3)), images.sum(dim=(1, 2, 3)))     # every pixel placed, none lost
    with pytest.raises(ValueError, match="no images of shape"):
        chapter_images(data, (3, 28, 28))


@pytest.mark.parametrize("profile", ["quick", "full"])
def test_every_chapter_has_its_main_network(profile):
    names = {chapter: main_network(chapter, profile).name for chapter in CHAPTERS}
    assert names["06"] == f"L-CapsNet K={chapter_settings('06', profile).ladder.k}"   # the chapter's main K
    assert names["08"] == "bench dynamic r=3" and names["03"] == "CapsNet full"
    assert names["04"].startswith("DeepCapsNet depth") and names["04"].endswith(" dynamic")
    assert names["05"] == "Q (dense)" and names["07"].endswith("CapsNet dynamic") and names["02"] == "CapsNet"
    assert main_network("08", profile, routers=["uniform"]).name == "bench uniform"       # any router by its name
    with pytest.raises(ValueError, match="compares no routers"):
        main_network("05", profile, routers=["uniform"])
    with pytest.raises(ValueError, match="chapter"):
        main_network("09", profile)


def test_the_quick_profile_reads_the_chapters_own_digits():
    train, test, data = epoch_data("02", "quick", train_size=40, test_size=20)
    assert data == "mnist (offline)" and len(train) == 40 and len(test) == 20
    with pytest.raises(ValueError, match="train_size must be an integer >= 1"):
        epoch_data("02", "quick", train_size=0)


@needs_fashion
def test_without_mnist_on_disk_fashion_mnist_stands_in_at_the_chapters_shape(monkeypatch):
    real = epoch_timing.resolve_source
    monkeypatch.setattr(epoch_timing, "resolve_source",         # as on a machine with no MNIST of torchvision's
                        lambda dataset, source: ("offline", f"{source} → offline") if dataset == "mnist"
                        else real(dataset, source))
    train, test, data = epoch_data("06", "full", train_size=30, test_size=10)
    assert data.startswith("fashion (torchvision) in place of mnist")
    assert train.tensors[0].shape == (30, 1, 40, 40) and test.tensors[0].shape == (10, 1, 40, 40)
    monkeypatch.setattr(epoch_timing, "resolve_source", lambda dataset, source: ("offline", "auto → offline"))
    with pytest.raises(FileNotFoundError, match="capsule-lab data"):
        epoch_data("02", "full")


def test_one_epoch_is_timed_and_its_accuracy_is_the_trained_networks(monkeypatch):
    epochs = []
    monkeypatch.setattr(epoch_timing, "fit", lambda net, train, test, **kw: epochs.append((len(train), kw)) or
                        fit(net, train, test, **kw))
    r = time_epoch("02", "quick", "cpu", train_size=64, test_size=48, repeats=1)
    assert r.error == "" and r.device == "cpu" and not r.amp and r.peak_memory_gb is None
    assert epochs == [(64, {**PROFILES["quick"].schedule.fit_options(), "epochs": 1,
                            "device": torch.device("cpu"), "amp": False, "seed": 0, "progress": False})]
    assert r.train_images == 64 and r.test_images == 48 and r.step_ms > 0 and r.epoch_s > 0
    assert r.seconds_per_60000 == pytest.approx(r.epoch_s * 60000 / 64, abs=0.01 * 60000 / 64)
    # the accuracy, again by hand: the same seeded network trained the same epoch, its longest class capsule
    network = main_network("02", "quick")
    train, test, _ = epoch_data("02", "quick", train_size=64, test_size=48)
    net = network.build()
    fit(net, train, None, **{**PROFILES["quick"].schedule.fit_options(), "epochs": 1}, seed=0,
        progress=False)
    net.eval()
    with torch.no_grad():
        lengths = net(test.tensors[0]).poses.norm(dim=-1)
    assert r.test_accuracy == round((lengths.argmax(dim=1) == test.tensors[1]).float().mean().item(), 4)


def test_a_failing_chapter_is_reported_and_the_command_says_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(epoch_timing, "epoch_data", lambda *a: (_ for _ in ()).throw(RuntimeError("no disk")))
    r = time_epoch("05", "quick", "cpu", train_size=8, test_size=8, repeats=1)
    assert r.error == "RuntimeError: no disk" and r.epoch_s is None and r.test_accuracy is None
    assert epoch_report([r], "quick")["failed"] == ["05"]
    assert main(["smoke", "--epoch", "--profile", "quick", "--chapters", "05", "--device", "cpu"]) == 1
    assert "failed: 05" in capsys.readouterr().err
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        time_epoch("02", "quick", "cpu", repeats=0)


def test_the_command_prints_the_report_as_json(tmp_path, capsys):
    out = tmp_path / "epochs.json"
    status = main(["smoke", "--epoch", "--profile", "quick", "--chapters", "02", "--train-size", "40",
                   "--test-size", "20", "--repeats", "1", "--device", "cpu", "--out", str(out)])
    printed = capsys.readouterr()
    assert status == 0
    report = json.loads(printed.out)                     # stdout is the JSON alone; progress goes to stderr
    assert report == json.loads(out.read_text())
    assert "02  CapsNet" in printed.err
    assert report["provenance"]["command"].startswith("capsule-lab smoke --epoch --profile quick")
    entry = report["chapters"]["02"]
    assert entry["model"] == "CapsNet" and entry["train_images"] == 40 and 0 <= entry["test_accuracy"] <= 1
