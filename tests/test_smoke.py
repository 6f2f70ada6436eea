"""capsule_lab.course.smoke and ``capsule-lab smoke``: the full profile's networks, at the papers' size, on a CPU.

One smoke run of chapters 02–08 (batch 2, the chapters' own sources, no download) is shared by the module. The
expected networks are written out here from the settings, and the parameter counts either worked out by hand
(Sabour's CapsNet) or taken from freshly built networks, so that a smoke run that skips a network or builds
another one fails. Where torchvision's MNIST files are not on disk (as in the offline course machine), the
MNIST of every chapter is the offline one and the results must say so.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from capsule_lab import cli
from capsule_lab.data.sources import DataSourceError, load_fashion_mnist, load_mnist
from capsule_lab.studies.learned_routing import build_model
from capsule_lab.models import CapsNet, ConvCapsNet, DeepCapsNet, LadderCapsNet
from capsule_lab.course.profiles import PROFILES, chapter_settings
from capsule_lab.studies.bench.entries import build_network
from capsule_lab.routing import RouterSpec
from capsule_lab.course.smoke import STUDIES, SmokeResult, format_result, smoke, smoke_chapter

pytestmark = [pytest.mark.xdist_group("smoke"), pytest.mark.slow]      # every network at paper size: ~35 s

CH03, CH04, CH05, CH06, CH07, CH08 = (chapter_settings(ch, "full") for ch in ("03", "04", "05", "06", "07", "08"))


def on_disk(loader) -> bool:
    """Whether torchvision's files of a dataset are on disk (the smoke run never downloads)."""
    try:
        loader(False, source="torchvision", download=False)
        return True
    except (DataSourceError, RuntimeError, OSError):
        return False


MNIST_ON_DISK, FASHION_ON_DISK = on_disk(load_mnist), on_disk(load_fashion_mnist)


def sabour_parameters(c) -> int:
    """Sabour's CapsNet counted by hand: conv, primary conv, W_ij, decoder (weights and biases)."""
    conv = c.conv_channels * c.in_channels * c.conv_kernel ** 2 + c.conv_channels
    primary_out = c.primary_types * c.primary_dim
    primary = primary_out * c.conv_channels * c.primary_kernel ** 2 + primary_out
    grid = ((c.image_size - c.conv_kernel + 1) - c.primary_kernel) // c.primary_stride + 1
    digits = grid * grid * c.primary_types * c.classes * c.class_dim * c.primary_dim
    widths = (c.classes * c.class_dim, *c.decoder_hidden, c.image_size ** 2)
    decoder = sum(a * b + b for a, b in zip(widths, widths[1:])) if c.decoder else 0
    bias = c.classes * c.class_dim if c.router.pose_bias is not None else 0
    return conv + primary + digits + decoder + bias


def expected_networks() -> dict:
    """(chapter, model, dataset) → a factory of the network, written out from the full profile's settings."""
    depth = max(CH04.depths)
    networks = {("02", "CapsNet", "mnist"): lambda: CapsNet(PROFILES["full"].capsnet)}
    for name, router in (("full", RouterSpec()), ("detached", RouterSpec(detach_couplings=True)),
                         ("uniform", RouterSpec("uniform"))):
        networks["03", f"CapsNet {name}", "mnist"] = lambda r=router: CapsNet(replace(CH03.capsnet, router=r))
    for routing, router in (("dynamic", CH04.config.router), ("uniform", RouterSpec("uniform"))):
        networks["04", f"DeepCapsNet depth {depth} {routing}", "mnist"] = (
            lambda r=router: DeepCapsNet(replace(CH04.config, routing_layers=depth, router=r)))
    assert CH05.single_shot
    for dataset in CH05.datasets:
        for name in ("Q (dense)", "REM (pruned)", "SNIP (single shot)"):
            networks["05", name, dataset] = lambda: CapsNet(CH05.capsnet)
    networks["06", f"L-CapsNet K={CH06.ladder.k}", "mnist"] = lambda: LadderCapsNet(CH06.ladder)
    networks["06", "CapsNet r=3", "mnist"] = lambda: CapsNet(CH06.capsnet)
    networks["06", "CapsNet matched", "mnist"] = lambda: CapsNet(CH06.matched)
    for dataset in CH07.datasets:
        for router in CH07.routers:
            networks["07", f"ConvCapsNet {router}", dataset] = lambda r=router: build_model(r, CH07)
    for router in CH08.routers:
        networks["08", f"bench {router}", CH08.dataset] = lambda r=router: build_network(r, CH08)
    return networks


# Session scope: under pytest-xdist a worker may run other modules' tests between these, which would tear a
# module-scoped fixture down and run the smoke twice (CI measured 18 s each time).
@pytest.fixture(scope="session")
def results() -> list:
    return smoke(profile="full", device="cpu", batch_size=2, source=None)


def by_key(results) -> dict:
    return {(r.chapter, r.model, r.dataset): r for r in results}


def replaced(results) -> str:
    """Which datasets were replaced, for the assertion messages."""
    lines = sorted({f"{r.chapter} {r.dataset}: {r.replaced}" for r in results if r.replaced})
    return "replaced datasets: " + ("; ".join(lines) if lines else "none")


def test_every_chapter_and_every_full_profile_network_ran(results):
    note = replaced(results)
    assert [r.chapter for r in results] == sorted(r.chapter for r in results), note
    assert {r.chapter for r in results} == {"02", "03", "04", "05", "06", "07", "08"}, note
    assert set(by_key(results)) == set(expected_networks()), note
    assert len(results) == len(expected_networks()), note
    failed = [format_result(r) for r in results if not r.ok]
    assert not failed, f"{failed}; {note}"
    for r in results:
        assert isinstance(r, SmokeResult)
        assert r.device == "cpu" and r.batch == 2 and not r.amp, r
        assert len(r.losses) == 2 and all(math.isfinite(v) and v > 0 for v in r.losses), (r, note)
        assert 0 <= r.accuracy <= 1 and r.seconds > 0, r


def test_parameter_counts_are_the_papers_and_those_of_fresh_networks(results):
    found = by_key(results)
    sabour = sabour_parameters(PROFILES["full"].capsnet)
    assert sabour == 8_215_568                                     # Sabour et al.'s 8.2M, with the decoder
    assert found["02", "CapsNet", "mnist"].parameters == sabour
    assert found["03", "CapsNet full", "mnist"].parameters == sabour
    assert found["05", "Q (dense)", "mnist"].parameters == sabour_parameters(CH05.capsnet)
    assert found["06", "CapsNet r=3", "mnist"].parameters == sabour_parameters(CH06.capsnet)
    assert found["06", "CapsNet matched", "mnist"].parameters == sabour_parameters(CH06.matched)
    assert found["08", "bench dynamic r=3", "mnist"].parameters == sabour_parameters(CH08.capsnet)
    for key, make in expected_networks().items():
        with torch.device("meta"):                                  # counts without the weights
            net = make() if key[0] not in ("07", "08") else None    # learned routers check their values
        if key[0] == "08":
            net = make()
        elif net is None:
            net = make()
            assert isinstance(net, ConvCapsNet), key
            counts = net.parameter_counts()
            assert counts["backbone"] == 88_968, key                # the paper's network on 28×28 digits
            assert found[key].parameters - counts["routers"] == 88_968, key
        assert found[key].parameters == sum(p.numel() for p in net.parameters()), key


def test_absent_torchvision_datasets_are_replaced_by_the_offline_ones_and_named(results):
    note = replaced(results)
    for r in results:
        on_disk_ = MNIST_ON_DISK if r.dataset == "mnist" else FASHION_ON_DISK
        asked = "torchvision" if r.chapter in ("02", "03") else "auto"
        if on_disk_:
            assert (r.source, r.replaced) == ("torchvision", ""), (r, note)
        else:
            assert (r.source, r.replaced) == ("offline", f"{asked} → offline"), (r, note)
    if not MNIST_ON_DISK:
        assert "02 mnist: torchvision → offline" in note and "07 mnist: auto → offline" in note, note


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="chapter must be one of"):
        smoke_chapter("01")
    with pytest.raises(ValueError, match="chapter must be one of"):
        smoke(chapters=["02", "09"])
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        smoke_chapter("02", batch_size=0)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        smoke(batch_size=1.5)
    with pytest.raises(ValueError, match="profile must be one of"):
        smoke_chapter("02", profile="paper")
    with pytest.raises(ValueError, match="source must be"):
        smoke_chapter("02", source="internet")
    with pytest.raises(ValueError, match="device must be"):
        smoke_chapter("02", device="tpu")


def test_the_command_prints_one_line_per_network(capsys):
    assert cli.main(["smoke", "--chapters", "02", "--device", "cpu", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("02  CapsNet"))
    assert "8,215,568 parameters" in line and "losses" in line and "accuracy" in line, out
    if not MNIST_ON_DISK:
        assert "[data offline (replaced: torchvision → offline)]" in line, out
    assert "1 network(s) in" in out and "0 failed" in out, out

    assert cli.main(["smoke", "--profile", "quick", "--chapters", "02", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "[data offline]" in out, out                              # the quick profile's own source

    assert cli.main(["smoke", "--chapters", "01"]) == 2
    assert "chapter must be one of" in capsys.readouterr().err


def test_the_command_fails_when_a_network_fails(monkeypatch, capsys):
    import capsule_lab.course.smoke as smoke_module

    def broken(*args, **kwargs):
        raise RuntimeError("shapes do not fit")

    monkeypatch.setattr(smoke_module, "_run_model", broken)
    assert cli.main(["smoke", "--profile", "quick", "--chapters", "02", "--device", "cpu"]) == 1
    captured = capsys.readouterr()
    assert "FAILED: RuntimeError: shapes do not fit" in captured.out
    assert "failed: 02 CapsNet (mnist)" in captured.err


def test_the_setup_pages_table_is_the_settings_and_the_smoke_runs_networks(results):
    """book/setup.md lists every chapter's full profile: its schedule is the settings', its parameter counts are
    the networks the smoke run built."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "book" / "setup.md").read_text(encoding="utf8")
    # the full profile's section only (the gpu profile's and the cluster's tables also have a row per chapter)
    text = text.split("## The full profile, chapter by chapter", 1)[1].split("\n#", 1)[0]
    rows = {cells[0]: cells for cells in (
        [c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
        if re.match(r"\| 0[2-8] \|", line))}
    assert sorted(rows) == ["02", "03", "04", "05", "06", "07", "08"]
    schedules = {chapter: study.settings("full").schedule for chapter, study in STUDIES.items()}
    schedules = {chapter: (None if chapter == "05" else t.epochs, t.batch_size, t.lr, t.lr_decay)
                 for chapter, t in schedules.items()}
    assert schedules["02"][:3] == (50, 128, 1e-3) and schedules["03"][:3] == (100, 128, 1e-3)
    for chapter, (epochs, batch, lr, decay) in schedules.items():
        training = rows[chapter][3]
        if epochs is not None:
            assert f"{epochs} epochs" in training, (chapter, training)
        assert f"batch {batch}," in training, (chapter, training)
        assert float(re.search(r"Adam ([0-9.e-]+) ", training).group(1)) == lr, (chapter, training)
        assert float(re.search(r"×([0-9.]+) per epoch", training).group(1)) == decay, (chapter, training)
    assert (f"{CH05.warmup_epochs} dense epochs then {CH05.rounds} prunings of {100 * CH05.amount:.0f} % with "
            f"{CH05.epochs_per_round} epochs each") in rows["05"][3]
    for chapter, cells in rows.items():
        shown = {int(n.replace(",", "")) for n in re.findall(r"\d{1,3}(?:,\d{3})+", cells[1])}
        built = {r.parameters for r in results if r.chapter == chapter}
        assert shown <= built and max(built) in shown, (chapter, shown, built)
