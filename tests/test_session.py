"""capsule_lab.course.session: the estimate a chapter prints before it trains, and the gpu profile's session budget.

The estimate is checked against a hand count of steps and against the time a real fit takes; the timing must leave
the model, its training and every random state as they were (so a chapter's numbers do not depend on it). The
budget: every chapter's live training in the gpu profile fits 15 minutes on a T4 by the shipped H200 step times
× the stated slowdown, the arithmetic checked by hand on one chapter.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from torch.utils.data import TensorDataset

from capsule_lab.course.profiles import CHAPTER_SETTINGS, PROFILES
from capsule_lab.course.session import (SESSION_BUDGET_S, T4_SLOWDOWN, PlannedRuns, TrainingEstimate,
                                        announce_training, estimate_training, format_duration, session_estimate,
                                        shipped_step_ms, training_plan)
from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.training import fit

CHAPTERS = ["02", "03", "04", "05", "06", "07", "08"]


def tiny_net():
    torch.manual_seed(0)
    return CapsNet(CapsNetConfig.slim(conv_channels=8, decoder=False))


def digits(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.rand(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g))


def test_the_estimate_counts_the_steps_and_touches_nothing():
    model, train = tiny_net(), digits(40)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(123)
    state = torch.get_rng_state()
    estimate = estimate_training(model, train, epochs=3, batch_size=16, runs=2, profile="quick", label="tiny")
    assert torch.equal(torch.get_rng_state(), state)                 # random state as it was
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())   # the model untouched
    assert estimate.steps_per_run == 3 * 3                            # ceil(40 / 16) = 3 batches, 3 epochs
    assert estimate.runs == 2 and estimate.total_s == pytest.approx(2 * 9 * estimate.step_s)
    assert estimate.step_s > 0 and estimate.device == "cpu"


def test_a_fit_after_the_estimate_is_the_fit_without_it():
    """The chapters' numbers must not change because a cell times a step first."""
    results = []
    for announce in (False, True):
        model, train = tiny_net(), digits(32)
        torch.manual_seed(7)
        if announce:
            estimate_training(model, train, epochs=1, batch_size=16)
        history = fit(model, train, None, epochs=1, batch_size=16, lr=1e-3, progress=False, max_shift=1)
        results.append((history.train_loss, torch.randn(3), [p.detach().clone() for p in model.parameters()]))
    (loss_a, rand_a, params_a), (loss_b, rand_b, params_b) = results
    assert loss_a == loss_b and torch.equal(rand_a, rand_b)
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b))


def test_the_estimate_is_close_to_the_time_a_fit_takes():
    """Measured step × steps against a real fit of 10 steps: within a factor 3 on a busy 2-core machine (the fit
    also evaluates nothing and loads nothing here, so the two measure the same work)."""
    model, train = tiny_net(), digits(160)
    estimate = estimate_training(model, train, epochs=1, batch_size=16, repeats=5)
    start = time.perf_counter()
    fit(model, train, None, epochs=1, batch_size=16, lr=1e-3, progress=False)
    took = time.perf_counter() - start
    assert took / 3 < estimate.total_s < took * 3, (estimate.total_s, took)


def test_announce_prints_each_estimate_and_the_total(capsys):
    a = TrainingEstimate("capsnet", 1, 100, 0.5, "cpu", "quick")
    b = TrainingEstimate("uniform", 2, 100, 0.25, "cpu", "quick")
    assert announce_training(a, b) == pytest.approx(100.0)
    out = capsys.readouterr().out.splitlines()
    assert out == ["capsnet: 100 steps × 500 ms a step measured on cpu ≈ 50 s of training (profile quick)",
                   "uniform: 2 runs × 100 steps × 250 ms a step measured on cpu ≈ 50 s of training (profile quick)",
                   "in all ≈ 1.7 min of training on cpu"]
    with pytest.raises(ValueError, match="TrainingEstimate"):
        announce_training()


@pytest.mark.parametrize("bad, message", [
    (dict(epochs=0), "epochs must be an integer >= 1"),
    (dict(batch_size=2.5), "batch_size must be an integer >= 1"),
    (dict(runs=-1), "runs must be an integer >= 1"),
])
def test_estimate_checks_its_arguments(bad, message):
    options = dict(epochs=1, batch_size=8) | bad
    with pytest.raises(ValueError, match=message):
        estimate_training(tiny_net(), digits(8), **options)
    with pytest.raises(ValueError, match="torch.nn.Module"):
        estimate_training("not a model", digits(8), epochs=1, batch_size=8)
    with pytest.raises(ValueError, match=r"model\(\) must return a torch.nn.Module"):
        estimate_training(lambda: "no network", digits(8), epochs=1, batch_size=8)


def test_a_network_built_only_to_be_timed_draws_no_random_number():
    torch.manual_seed(3)
    expected = torch.randn(4)
    torch.manual_seed(3)
    estimate = estimate_training(tiny_net, digits(16), epochs=1, batch_size=8)   # tiny_net seeds and draws weights
    assert torch.equal(torch.randn(4), expected) and estimate.steps_per_run == 2


def test_format_duration():
    assert [format_duration(s) for s in (0, 45, 89.4, 90, 600, 5399, 5400, 7200)] == [
        "0 s", "45 s", "89 s", "1.5 min", "10.0 min", "90.0 min", "1.5 h", "2.0 h"]
    with pytest.raises(ValueError):
        format_duration(-1)


def test_the_plan_counts_what_chapter_04_trains_by_hand():
    """Chapter 04, gpu: depths 1-4 at seed 0 and seed 1 at depth 4 (5 runs per routing) of 50k digits, 2 epochs,
    batch 128 (391 batches), then 4 revivals of 500 digits (4 batches) for 1 epoch."""
    plan = training_plan("04", "gpu")
    assert [(p.network, p.runs, p.steps) for p in plan] == [
        ("DeepCapsNet depth 5 dynamic", 5, 5 * 2 * 391), ("DeepCapsNet depth 5 uniform", 5, 5 * 2 * 391),
        ("DeepCapsNet depth 5 dynamic", 4, 4 * 1 * 4)]


def test_the_session_estimate_is_step_time_times_steps_times_the_slowdown():
    timings = {"device": "Test GPU", "chapters": {"03": {"CapsNet full": (20.0, 128), "CapsNet detached": (10.0, 128),
                                                          "CapsNet uniform": (5.0, 128)}}, "overhead": {"03": 6.0}}
    estimate = session_estimate("03", "gpu", slowdown=2.0, timings=timings)
    steps = 5 * math.ceil(60000 / 128)                                 # 5 epochs of 60k digits, batch 128
    stepping = steps * (20 + 10 + 5) / 1000
    loop = 3 * 5 * 6.0                                                  # 6 s per 60k images: 3 runs of 5 epochs
    assert estimate["steps"] == 3 * steps and estimate["overhead_s"] == pytest.approx(loop)
    assert estimate["timed_s"] == pytest.approx(stepping + loop)
    assert estimate["t4_s"] == pytest.approx(2 * stepping + loop) and estimate["untimed"] == []
    with pytest.raises(ValueError, match="timed at batch 64"):
        session_estimate("03", "gpu", timings={"device": "x", "chapters": {"03": {"CapsNet full": (1.0, 64)}}})


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_fits_a_colab_session_in_the_gpu_profile(chapter):
    """The issue's target: each chapter's live training ≤ 15 minutes on a T4, by the shipped H200 step times ×
    T4_SLOWDOWN, with room for the timings' ±25 % (book/setup.md) — the chapter prints its own measured estimate
    before it trains."""
    estimate = session_estimate(chapter, "gpu")
    assert estimate["untimed"] == []
    assert 1.25 * estimate["t4_s"] <= SESSION_BUDGET_S, (chapter, format_duration(estimate["t4_s"]))
    assert T4_SLOWDOWN >= 1


def test_the_shipped_timings_are_read_as_written(tmp_path):
    report = {"provenance": {"device": "NVIDIA H200"}, "chapters": {
        "02": {"schedule": {"batch_size": 128}, "networks": {"CapsNet": {"step_ms": 17.38}}}}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(report))
    assert shipped_step_ms(path) == {"device": "NVIDIA H200", "chapters": {"02": {"CapsNet": (17.38, 128)}},
                                     "overhead": {}}
    report["chapters"]["02"]["networks"]["CapsNet"].update(epoch_s_from_steps=8.1, epoch={"seconds_per_60000": 8.6})
    path.write_text(json.dumps(report))
    assert shipped_step_ms(path)["overhead"]["02"] == pytest.approx(0.5)        # 8.6 s measured, 8.1 s in steps
    shipped = shipped_step_ms()
    assert shipped["device"] == "NVIDIA H200" and shipped["chapters"]["02"]["CapsNet"] == (17.38, 128)


def test_plan_checks_its_arguments():
    with pytest.raises(ValueError, match="chapter must be one of"):
        training_plan("01")
    with pytest.raises(ValueError, match="profile must be one of"):
        training_plan("02", "huge")
    assert training_plan("08", "gpu") == []                       # chapter 08 reads its bench outside full
    assert PlannedRuns("x", 2, 100, 3, 32).steps == 2 * 3 * 4
    assert set(CHAPTER_SETTINGS["03"]) == set(PROFILES)
