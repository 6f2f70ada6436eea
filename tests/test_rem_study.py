"""capsule_lab.studies.rem (chapter 05's experiment): measures checked against computations written here, the
choice of REM's model on hand-built steps, and a tiny study's runs (same start, the sparsity schedule)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from capsule_lab import data
from capsule_lab.studies import rem as rem_study
from capsule_lab.models import CapsNet, CapsNetConfig
from capsule_lab.measures.parse_trees import class_parse_tree, routing_entropy
from capsule_lab.course.profiles import chapter_settings
from capsule_lab.studies.rem import (RoutingMeasure, Step, lowest_loss_step, measure_routing, model_at, rem_study_data,
                                     run_record, run_rem)

TINY = CapsNetConfig.slim(conv_channels=4, primary_types=2, decoder=False)


def _settings(warmup_epochs, rounds, epochs_per_round, **changes):
    """Chapter 05's quick settings with a batch of 16 and the pruning schedule given (the epochs follow)."""
    quick = chapter_settings("05", "quick")
    schedule = replace(quick.schedule, batch_size=16, epochs=warmup_epochs + rounds * epochs_per_round)
    return replace(quick, schedule=schedule, warmup_epochs=warmup_epochs, rounds=rounds,
                   epochs_per_round=epochs_per_round, **changes)


def _data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.rand(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g))


def test_measure_routing_against_the_model_run_by_hand():
    torch.manual_seed(0)
    model, data = CapsNet(TINY), _data(7, 1)
    m = measure_routing(model, data, batch_size=3)
    images, labels = data.tensors
    with torch.no_grad():
        out = model.eval()(images)
    target = torch.nn.functional.one_hot(labels, 10).float()
    loss = (target * torch.relu(0.9 - out.lengths) ** 2
            + 0.5 * (1 - target) * torch.relu(out.lengths - 0.1) ** 2).sum(dim=1).mean()
    assert m.loss == pytest.approx(loss.item(), rel=1e-5)
    assert torch.equal(m.predictions, out.lengths.argmax(dim=1)) and torch.equal(m.labels, labels)
    assert m.accuracy == pytest.approx((out.lengths.argmax(dim=1) == labels).float().mean().item())
    torch.testing.assert_close(m.couplings, out.couplings)
    light = measure_routing(model, data, batch_size=3, keep_couplings=False)
    assert light.couplings is None and light.classes == 10
    assert (light.loss, light.accuracy) == (m.loss, m.accuracy) and torch.equal(light.predictions, m.predictions)
    with pytest.raises(ValueError, match="must be a capsule_lab.models.CapsuleNetwork"):
        measure_routing(torch.nn.Linear(2, 2), data)


def test_entropy_ceiling_is_the_mean_log2_of_the_images_per_class():
    c = torch.full((7, 3, 4), 0.25)
    m = RoutingMeasure(1.0, 0.0, c, torch.tensor([0, 0, 0, 0, 2, 2, 3]), torch.zeros(7, dtype=torch.long))
    assert m.images_per_class() == {0: 4, 2: 2, 3: 1}
    assert m.entropy_ceiling() == pytest.approx((2 + 1 + 0) / 3)
    assert m.entropy() == 0.0 and m.keys() == {0: 1, 2: 1, 3: 1}         # one coupling pattern: one key each


def _step(epoch, overall, val_loss):
    return Step(epoch, {"overall": overall}, val_loss, None, {})


def test_q_is_the_dense_step_with_the_lowest_validation_loss_as_app_b2():
    steps = [_step(1, 0.0, 0.50), _step(2, 0.0, 0.40), _step(3, 0.0, 0.38), _step(4, 0.0, 0.41), _step(5, 0.0, 0.38)]
    assert lowest_loss_step(steps) == 2                    # 0.38 first at epoch 3 (index 2); a tie keeps the first
    assert lowest_loss_step(steps[:2]) == 1
    with pytest.raises(ValueError, match="non-empty list of Step"):
        lowest_loss_step([])


def test_a_tiny_study_prunes_on_schedule_from_the_same_start():
    settings = _settings(capsnet=TINY, warmup_epochs=1, rounds=2, epochs_per_round=1, amount=0.5, single_shot=True)
    data = (_data(32, 2), _data(8, 3), _data(12, 4))
    run = run_rem("mnist", settings, data, seed=0)
    assert [s.epoch for s in run.dense] == [s.epoch for s in run.pruned] == [1, 2, 3] == \
        [s.epoch for s in run.single_shot]
    assert [s.sparsity["overall"] for s in run.dense] == [0.0, 0.0, 0.0]
    assert [round(s.sparsity["overall"], 3) for s in run.pruned] == [0.0, 0.5, 0.75]
    assert all(round(s.sparsity["overall"], 3) == 0.75 for s in run.single_shot)
    first_dense, first_pruned = run.dense[0].state, run.pruned[0].state
    assert all(torch.equal(first_dense[k], first_pruned[k]) for k in first_dense)    # same start, same epoch 1
    assert run.q is run.dense[lowest_loss_step(run.dense)] and run.rem is run.pruned[-1]
    assert run.q_index == min(range(3), key=lambda k: run.dense[k].val_loss)
    assert run.pruned[0].test.couplings.shape == (12, TINY.primary_caps, 10)


def test_tune_epochs_train_on_after_the_last_round_without_pruning():
    settings = _settings(capsnet=TINY, warmup_epochs=1, rounds=2, epochs_per_round=1, amount=0.5)
    settings = replace(settings, schedule=replace(settings.schedule, epochs=5), tune_epochs=2)
    run = run_rem("mnist", settings, (_data(32, 2), _data(8, 3), _data(12, 4)), seed=0)
    assert [round(s.sparsity["overall"], 3) for s in run.pruned] == [0.0, 0.5, 0.75, 0.75, 0.75]
    assert run.rem is run.pruned[-1] and run.rem.epoch == 5
    with pytest.raises(ValueError, match=r"\+ tune_epochs = 5"):
        replace(settings, schedule=replace(settings.schedule, epochs=4))


def test_study_data_splits_validation_from_training(monkeypatch):
    full = _data(40, 5)
    monkeypatch.setitem(data.DATASETS, "mnist", lambda train, source: full if train else _data(9, 6))
    settings = replace(chapter_settings("05", "quick"), train_size=25, val_size=10, test_size=None)
    train, val, test = rem_study_data("mnist", settings)
    assert len(train) == 25 and len(val) == 10 and len(test) == 9
    assert torch.equal(val.tensors[0], full.tensors[0][:10]) and torch.equal(train.tensors[0], full.tensors[0][10:35])
    with pytest.raises(ValueError, match="dataset must be one of"):
        rem_study_data("cifar", settings)
    with pytest.raises(ValueError, match="val_size must be in"):
        rem_study_data("mnist", replace(settings, val_size=40))
    with pytest.raises(ValueError, match="settings must be a RemSettings"):
        rem_study_data("mnist", chapter_settings("04", "quick"))


def test_expanded_study_data_are_chapter_06_s_canvas(monkeypatch):
    from capsule_lab.studies.rem import rem_affine_data
    full, test_digits = _data(40, 5), _data(9, 6)
    monkeypatch.setitem(data.DATASETS, "mnist", lambda train, source: full if train else test_digits)
    settings = replace(chapter_settings("05", "quick"), train_size=25, val_size=10, test_size=None)
    train, val, test = rem_study_data("expanded", settings)
    placed = data.expanded_mnist(TensorDataset(*[t[:35] for t in full.tensors]), seed=data.TRAIN_PLACEMENT_SEED)
    assert train.tensors[0].shape == (25, 1, 40, 40) and torch.equal(train.tensors[0], placed.tensors[0][10:])
    assert torch.equal(val.tensors[0], placed.tensors[0][:10]) and torch.equal(val.tensors[1], full.tensors[1][:10])
    assert torch.equal(test.tensors[0], data.expanded_mnist(test_digits, seed=data.CLEAN_TEST_SEED).tensors[0])
    affine = rem_affine_data(settings)
    expected = data.affine_expanded_test_set(test_digits, seed=data.AFFINE_TEST_SEED)
    assert torch.equal(affine.tensors[0], expected.tensors[0]) and torch.equal(affine.tensors[1], test_digits.tensors[1])


def test_settings_reach_the_paper_s_sparsity():
    full = chapter_settings("05", "full")
    assert full.capsnet.router.pose_bias == 0.1 and full.capsnet.init_std == 0.1 and not full.capsnet.decoder
    assert full.final_sparsity > 0.855                     # the paper's MNIST model is 85.5 % sparse
    quick = chapter_settings("05", "quick")
    assert math.isclose(quick.final_sparsity, 0.875) and quick.schedule.epochs == 4


def test_model_at_restores_a_pruned_step():
    settings = _settings(capsnet=TINY, warmup_epochs=1, rounds=1, epochs_per_round=1, amount=0.5)
    data = (_data(32, 2), _data(8, 3), _data(6, 4))
    run = run_rem("mnist", settings, data, seed=1)
    for step in (run.dense[-1], run.pruned[-1]):
        model = model_at(step, TINY)
        again = measure_routing(model, data[2])
        torch.testing.assert_close(again.couplings, step.test.couplings)
        assert again.accuracy == step.test.accuracy
    assert float((model_at(run.pruned[-1], TINY).digits.weight == 0).float().mean()) > 0.3
    with pytest.raises(ValueError, match="step must be"):
        model_at(run, TINY)


def test_a_measure_without_its_couplings_answers_from_its_summary():
    g = torch.Generator().manual_seed(7)
    c = torch.softmax(3 * torch.randn(40, 6, 4, generator=g), dim=-1)
    predictions = torch.randint(0, 3, (40,), generator=g)                  # class 3 never predicted
    m = RoutingMeasure(0.5, 0.1, c, predictions, predictions.clone())
    full = {k: (m.entropy(k), m.keys(k), m.class_entropy(k)) for k in (3, 11)}
    trees = [m.class_tree(j, 11) for j in range(4)]
    mean, per_class = routing_entropy(c, predictions, 11)                     # the package's own path
    assert full[11][0] == pytest.approx(mean) and full[11][2] == pytest.approx(per_class)
    torch.testing.assert_close(trees[0], class_parse_tree(c, predictions, 0, 11))
    assert torch.equal(trees[3], torch.zeros(6, dtype=torch.float64))
    m.drop_couplings(levels=(3, 11))
    assert m.couplings is None and m.classes == 4
    assert {k: (m.entropy(k), m.keys(k), m.class_entropy(k)) for k in (3, 11)} == full
    assert all(torch.equal(m.class_tree(j, 11), trees[j]) for j in range(4))
    with pytest.raises(ValueError, match="couplings were dropped"):
        m.entropy(6)
    with pytest.raises(ValueError, match="label must be a class index"):
        m.class_tree(4)


def test_a_long_run_keeps_only_the_last_steps_and_q_s_model():
    settings = _settings(capsnet=TINY, warmup_epochs=1, rounds=2, epochs_per_round=1, amount=0.5,
                         keep_every_step=False)
    data = (_data(32, 2), _data(8, 3), _data(12, 4))
    run = run_rem("mnist", settings, data, seed=0)
    kept = {"dense": [s.state is not None for s in run.dense], "pruned": [s.state is not None for s in run.pruned]}
    assert kept["pruned"] == [False, False, True]
    assert kept["dense"][-1] and kept["dense"][run.q_index] and sum(kept["dense"]) == len({2, run.q_index})
    assert all(s.test.couplings is None for s, k in zip(run.pruned, kept["pruned"]) if not k)
    assert [round(s.test.entropy(settings.levels), 6) >= 0 for s in run.pruned] == [True] * 3    # still answers
    with pytest.raises(ValueError, match="were dropped"):
        model_at(run.pruned[0], TINY)


# ------------------------------------------------------------------ the verdict table (REM_CLAIMS)

def test_entropy_at_accuracy_interpolates_between_epochs_by_hand():
    from capsule_lab.studies.rem import entropy_at_accuracy
    points = [(0.9, 4.0), (0.8, 2.0), (0.95, 5.0)]                                   # any order
    assert entropy_at_accuracy(points, 0.85) == pytest.approx(3.0)
    assert entropy_at_accuracy(points, 0.925) == pytest.approx(4.5)
    assert entropy_at_accuracy(points, 0.95) == 5.0
    with pytest.raises(ValueError, match=r"outside the steps' accuracies \[0.8000, 0.9500\]"):
        entropy_at_accuracy(points, 0.7)
    with pytest.raises(ValueError, match="non-empty list of \\(accuracy, entropy\\) pairs"):
        entropy_at_accuracy([], 0.8)


def test_claim_records_and_verdicts_of_tiny_runs():
    from _scipy_verdicts import scipy_outcomes

    from capsule_lab.studies.rem_claims import REM_CLAIMS, rem_claim_records, rem_verdicts
    settings = _settings(capsnet=TINY, warmup_epochs=1, rounds=2, epochs_per_round=1, amount=0.5)
    data = (_data(32, 2), _data(8, 3), _data(12, 4))
    runs = {("mnist", seed): run_rem("mnist", settings, data, seed=seed) for seed in (0, 1)}
    records = {(r["router"], r["seed"]): r for r in rem_claim_records(runs)}
    for seed, run in ((s, runs["mnist", s]) for s in (0, 1)):
        q, rem = records["Q, mnist", seed], records["REM, mnist", seed]
        assert q["accuracy"] == run.q.quantized.accuracy == q["correct"].count("1") / 12
        assert rem["entropy"] == run.rem.quantized.entropy(11)
        assert rem["entropy_ceiling"] == run.rem.quantized.entropy_ceiling()
        keys = run.q.quantized.keys(11)
        assert q["keys"] == pytest.approx(sum(keys.values()) / len(keys))
        assert len(q["train_accuracy"]) == 3 and len(rem["train_accuracy"]) == 3
        assert all(0 <= a <= 1 for a in q["train_accuracy"])
    rows = rem_verdicts(runs)
    assert [r.claim for r in rows] == [c for c in REM_CLAIMS if c.a.endswith("mnist") and c.measure != "on_object"]
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(list(records.values()), [r.claim for r in rows],
                                                               setting={"cluttered_images": (False, "")})
    one = rem_verdicts({("mnist", 0): runs["mnist", 0]})
    assert all(r.verdict.outcome == "not testable" and "one seed (0)" in r.verdict.reason for r in one)
    if one[1].mcnemar_left_out:                   # a network at chance: its images say nothing about a trained one
        assert one[1].mcnemar is None and "collapsed (seed 0" in one[1].verdict.reason
    else:
        assert one[1].mcnemar is not None and one[1].mcnemar.strata == 1   # the images still answer for one seed
    as_records = rem_verdicts([run_record(r) for r in runs.values()])             # the shipped form answers the same
    assert [(r.claim, r.verdict.outcome) for r in as_records] == [(r.claim, r.verdict.outcome) for r in rows]


def test_run_record_holds_each_step_vanilla_and_quantised():
    settings = _settings(capsnet=TINY, warmup_epochs=1, rounds=1, epochs_per_round=1, amount=0.5)
    data = (_data(32, 2), _data(8, 3), _data(12, 4))
    run = run_rem("fashion", settings, data, seed=0)
    record = run_record(run)
    assert (record["dataset"], record["seed"], record["q_index"]) == ("fashion", 0, run.q_index)
    for step, numbers in zip(run.pruned, record["pruned"]):
        assert numbers["accuracy"] == step.test.accuracy and numbers["quantized_accuracy"] == step.quantized.accuracy
        assert numbers["sparsity"] == step.sparsity and numbers["epoch"] == step.epoch
        keys = step.quantized.keys(11)
        assert numbers["keys_per_class"] == {str(c): n for c, n in keys.items()}
    assert record["REM"]["epoch"] == 2 and record["Q"]["epoch"] == run.q.epoch
    expected = "".join("1" if p == y else "0" for p, y in zip(run.rem.quantized.predictions.tolist(),
                                                              run.rem.quantized.labels.tolist()))
    assert record["REM"]["correct"] == expected
    json.dumps(record)                                                             # plain numbers: it ships as JSON
    with pytest.raises(ValueError, match="quantised inference with K = 11"):
        run.rem.quantized.entropy(6)


def test_zero_transform_share_counts_emptied_matrices_by_hand():
    from capsule_lab.studies.rem import zero_transform_share
    torch.manual_seed(3)
    model = CapsNet(TINY)
    assert zero_transform_share(model) == 0.0
    w = model.digits.weight                                                       # (I, J, D_out, D_in)
    with torch.no_grad():
        w[0, 0] = 0.0                                                             # one W_ij emptied
        w[1, 2, 0, 0] = 0.0                                                       # one entry only: not empty
    assert zero_transform_share(model) == pytest.approx(1 / (w.shape[0] * w.shape[1]))
    with pytest.raises(ValueError, match="must be a capsule_lab.models.CapsNet"):
        zero_transform_share(torch.nn.Linear(2, 2))


def test_model_extras_measure_what_the_chapter_reads():
    from capsule_lab.studies.rem import model_extras
    from capsule_lab.measures.saliency import coupling_saliency_maps, saliency_on_object
    torch.manual_seed(4)
    model, test = CapsNet(TINY), _data(10, 9)
    extras = model_extras(model, test, levels=(3, 11), saliency_images=6, affine=_data(5, 10))
    q11 = measure_routing(model, test, quantize_levels=11)
    assert extras["levels_sweep"]["11"] == {"accuracy": q11.accuracy, "entropy": q11.entropy(11),
                                            "entropy_ceiling": q11.entropy_ceiling(),
                                            "keys": sum(q11.keys(11).values()) / len(q11.keys(11))}
    images = test.tensors[0][:6]
    maps, _ = coupling_saliency_maps(model, images)
    on = saliency_on_object(maps, images)
    shuffled = saliency_on_object(maps, images.roll(1, dims=0))
    ok = ~(on.isnan() | shuffled.isnan())
    assert extras["on_object_images"] == int(ok.sum())
    assert extras["on_object"] == pytest.approx(on[ok].mean().item())
    assert extras["on_object_shuffled"] == pytest.approx(shuffled[ok].mean().item())
    affine = measure_routing(model, _data(5, 10), quantize_levels=11)
    assert extras["affine_accuracy"] == affine.accuracy and len(extras["affine_correct"]) == 5
    # the couplings to the predicted class, counted in 200 bins of [0, 1]: by hand with numpy
    plain = measure_routing(model, test)
    couplings = np.array([plain.couplings[b, :, plain.predictions[b]].tolist() for b in range(10)]).ravel()
    assert extras["coupling_counts"] == np.histogram(couplings, bins=200, range=(0, 1))[0].tolist()


def test_measure_routing_under_quantised_inference_is_the_model_run_quantised():
    from capsule_lab.measures.parse_trees import quantized_inference
    torch.manual_seed(1)
    model, data = CapsNet(TINY), _data(9, 7)
    plain = measure_routing(model, data, batch_size=4)
    quantised = measure_routing(model, data, batch_size=4, quantize_levels=6)
    with quantized_inference(model, 6), torch.no_grad():
        out = model.eval()(data.tensors[0])
    assert torch.equal(quantised.predictions, out.lengths.argmax(dim=1))
    torch.testing.assert_close(quantised.couplings, out.couplings)
    assert not model.digits.router.hooked                                    # unhooked
    # the couplings' levels are those of ordinary inference: only the last weighted sum changed. (K = 11 here: an
    # untrained network's couplings sit at 1/J = 0.1, exactly on a bin edge for K = 6, where the vote-free and the
    # vote-forming forward passes, equal to 1e-7, can round apart.)
    from capsule_lab.measures.parse_trees import quantize
    eleven = measure_routing(model, data, batch_size=4, quantize_levels=11)
    assert torch.equal(quantize(eleven.couplings, 11), quantize(plain.couplings, 11))


def test_accuracy_by_levels_and_the_lowest_k_that_keeps_the_accuracy():
    from capsule_lab.studies.rem import accuracy_by_levels, lowest_levels
    torch.manual_seed(2)
    model, data = CapsNet(TINY), _data(10, 8)
    by_k = accuracy_by_levels(model, data, levels=(3, 11), batch_size=4)
    assert list(by_k) == [3, 11]
    assert by_k[11] == measure_routing(model, data, batch_size=4, quantize_levels=11).accuracy
    # by hand: reference 0.90, tolerance 0.01 -> the smallest K at 0.89 or above
    assert lowest_levels({2: 0.50, 6: 0.895, 11: 0.90, 21: 0.91}, reference=0.90, tolerance=0.01) == 6
    assert lowest_levels({2: 0.50, 6: 0.88}, reference=0.90, tolerance=0.01) is None
    assert lowest_levels({11: 0.90, 3: 0.95}, reference=0.90, tolerance=0.0) == 3           # not the order given
    with pytest.raises(ValueError, match="non-empty dict"):
        lowest_levels({}, 0.9, 0.01)
    with pytest.raises(ValueError, match="tolerance must be a number in"):
        lowest_levels({11: 0.9}, 0.9, -0.1)
    with pytest.raises(ValueError, match="at least one number"):
        accuracy_by_levels(model, data, levels=())


def test_every_step_is_also_measured_under_quantised_inference():
    settings = _settings(capsnet=TINY, warmup_epochs=1, rounds=1, epochs_per_round=1, amount=0.5)
    data = (_data(32, 2), _data(8, 3), _data(12, 4))
    run = run_rem("mnist", settings, data, seed=0)
    for step in run.dense + run.pruned:
        again = measure_routing(model_at(step, TINY), data[2], quantize_levels=settings.levels)
        assert step.quantized.accuracy == again.accuracy
        assert torch.equal(step.quantized.predictions, again.predictions)
        torch.testing.assert_close(step.quantized.couplings, again.couplings)
    step = run.dense[0]
    step.drop((settings.levels,))
    assert step.quantized.couplings is None and step.test.couplings is None and step.state is None


# ------------------------------------------------------------------ the shipped longer run (scripts/rem_longer_run.py)

def _script():
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("rem_longer_run",
                                                  Path(__file__).resolve().parents[1] / "scripts" / "rem_longer_run.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_longer_run_script_s_schedule_reaches_the_paper_s_sparsity_range():
    script = _script()
    args = type("Args", (), {"quick": False, "train_size": 30000, "test_size": 10000, "epochs": 24, "seeds": [0, 1, 2],
                             "threads": 1, "lr_decay": None})()
    quick = chapter_settings("05", "quick")
    for dataset in ("fashion", "mnist", "expanded"):
        s = script.settings_for(dataset, args)
        assert (s.warmup_epochs, s.rounds, s.epochs_per_round, s.tune_epochs, s.amount) == (4, 8, 2, 4, 0.2)
        assert 0.807 <= s.final_sparsity <= 0.873 and s.schedule.epochs == 24 and s.seeds == (0, 1, 2)
        assert s.schedule.lr == quick.schedule.lr and s.schedule.lr_decay == quick.schedule.lr_decay
        assert s.capsnet.image_size == (40 if dataset == "expanded" else 28) and s.test_size is None
    assert script.settings_for("fashion", args).train_size == 30000 and script.settings_for("mnist", args).train_size is None


def test_the_shipped_longer_run_is_complete_and_consistent():
    from _scipy_verdicts import scipy_outcomes

    from capsule_lab.studies.rem_claims import rem_claim_records, rem_verdicts
    from capsule_lab.studies.rem import shipped_rem_runs
    runs = shipped_rem_runs("rem_runs_fashion.json")["runs"] + shipped_rem_runs("rem_runs.json")["runs"]
    assert sorted((r["dataset"], r["seed"]) for r in runs) == sorted(
        (d, s) for d in ("fashion", "mnist", "expanded") for s in (0, 1, 2, 3, 4))
    tests = {"fashion": 10000, "mnist": 2000, "expanded": 2000}
    quick = chapter_settings("05", "quick").capsnet                      # one coupling per primary capsule and image
    capsules = {"fashion": quick.primary_caps, "mnist": quick.primary_caps,
                "expanded": replace(quick, image_size=40).primary_caps}
    for r in runs:
        dense, pruned = r["dense"], r["pruned"]
        assert [s["epoch"] for s in dense] == [s["epoch"] for s in pruned] == list(range(1, 25))
        assert all(s["sparsity"]["overall"] == 0 for s in dense)
        assert all(s["sparsity"]["overall"] == pytest.approx(1 - 0.8 ** 8, abs=1e-4) for s in pruned[-5:])  # tuned
        assert r["q_index"] == min(range(24), key=lambda k: (dense[k]["val_loss"], k))       # App. B.2
        assert r["Q"]["epoch"] == dense[r["q_index"]]["epoch"] and r["REM"]["epoch"] == 24
        for name in ("Q", "REM"):
            model = r[name]
            assert len(model["correct"]) == tests[r["dataset"]]
            assert model["quantized_accuracy"] == pytest.approx(model["correct"].count("1") / tests[r["dataset"]])
            assert model["levels_sweep"]["11"]["accuracy"] == pytest.approx(model["quantized_accuracy"])
            assert model["entropy"] <= model["entropy_ceiling"] + 1e-9
            assert 0 <= model["on_object"] <= 1 and 0 <= model["on_object_shuffled"] <= 1
            assert ("affine_accuracy" in model) == (r["dataset"] == "expanded")
            if r["seed"] >= 3:                    # seeds 3 and 4 also counted the couplings (for the histogram)
                counts = model["coupling_counts"]
                assert len(counts) == 200 and sum(counts) == tests[r["dataset"]] * capsules[r["dataset"]]
    records = rem_claim_records(runs)
    rows = rem_verdicts(runs)
    assert {r.claim.a.rsplit(", ", 1)[1] for r in rows} == {"fashion", "mnist", "expanded"}
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(records, [r.claim for r in rows],
                                                               setting={"cluttered_images": (False, "")})
    by_question = {r.claim.question: r.verdict for r in rows}
    for name in ("MNIST", "Fashion-MNIST"):                   # saliency: both reasons, the premise and the null
        why = by_question[f"{name}: is a larger share of REM's eq. 16 saliency on the object's pixels than of "
                          f"Q's?"].reason
        assert why.startswith("premise absent") and "neither network clears the shuffled-pair maps' share" in why
    assert by_question["MNIST: does REM have fewer parse trees (keys) per class than Q?"].outcome == "not testable"
    affine = by_question["trained on expanded MNIST: is REM's entropy on the affine test digits lower than Q's?"]
    assert affine.tested                                      # Table 2's entropy is affNIST's: not saturated there


# ------------------------------------------------------------------ a run cut and resumed (checkpoint=)

class _Cut(Exception):
    """A disconnect, simulated: raised while a run measures an epoch, before that epoch's checkpoint is written."""


def _cut_after(monkeypatch, calls):
    """Make the ``calls``-th measurement of an epoch (``sparsity``, once per epoch and run: the dense run's epochs,
    then the pruned run's, then the single-shot run's) raise :class:`_Cut`; None: never."""
    seen = {"n": 0}

    def counted(net):
        seen["n"] += 1
        if calls is not None and seen["n"] == calls:
            raise _Cut(seen["n"])
        return sparsity(net)

    from capsule_lab.measures.pruning import sparsity
    monkeypatch.setattr(rem_study, "sparsity", counted)
    return seen


def _without_seconds(record):
    return {k: v for k, v in record.items() if k != "seconds"}


@pytest.mark.parametrize("cut_at", [2, 5, 9])          # in the dense run, the pruned run, the single-shot run
def test_a_rem_run_cut_and_resumed_equals_one_never_cut(tmp_path, monkeypatch, cut_at):
    settings = _settings(capsnet=TINY, warmup_epochs=1, rounds=2, epochs_per_round=1, amount=0.5,
                         keep_every_step=False, single_shot=True)
    data = (_data(32, 2), _data(8, 3), _data(12, 4))
    straight = run_rem("mnist", settings, data, seed=0)
    path = tmp_path / "mnist.pt"
    _cut_after(monkeypatch, cut_at)
    with pytest.raises(_Cut):
        run_rem("mnist", settings, data, seed=0, checkpoint=path)
    files = rem_study.rem_checkpoints(path)
    assert [f.name for f in files.values()] == ["mnist-dense.pt", "mnist-pruned.pt", "mnist-single-shot.pt"]
    seen = _cut_after(monkeypatch, None)
    resumed = run_rem("mnist", settings, data, seed=0, checkpoint=path)
    assert seen["n"] == 9 - (cut_at - 1)                   # only the epochs not yet saved were trained again
    assert _without_seconds(run_record(resumed, settings.levels)) == _without_seconds(run_record(straight, settings.levels))
    for name in ("dense", "pruned", "single_shot"):
        for a, b in zip(getattr(straight, name), getattr(resumed, name)):
            assert (a.state is None) == (b.state is None), (name, a.epoch)
            if a.state is not None:                        # the weights bit for bit, the couplings measured again
                assert all(torch.equal(a.state[k], b.state[k]) for k in a.state), (name, a.epoch)
                assert torch.equal(a.test.couplings, b.test.couplings)
                assert torch.equal(a.quantized.couplings, b.quantized.couplings)
            else:
                assert b.test.couplings is None and b.test.entropy(settings.levels) == a.test.entropy(settings.levels)
    for name in ("dense", "pruned"):            # the file keeps the kept steps' weights, and at most the two
        saved = torch.load(files[name], weights_only=True)["history"]["epoch_end"]    # restored ones dropped since
        in_memory = [s.state is not None for s in getattr(resumed, name)]
        on_disk = [r["state"] is not None for r in saved]
        assert all(on_disk[k] for k, kept in enumerate(in_memory) if kept) and sum(on_disk) <= sum(in_memory) + 2
    whole = run_rem("mnist", settings, data, seed=0, checkpoint=tmp_path / "whole.pt")    # never cut: exactly
    saved = torch.load(rem_study.rem_checkpoints(tmp_path / "whole.pt")["dense"], weights_only=True)
    assert [r["state"] is not None for r in saved["history"]["epoch_end"]] == [s.state is not None for s in whole.dense]
    _cut_after(monkeypatch, 1)                              # a finished run loads: nothing is measured again
    again = run_rem("mnist", settings, data, seed=0, checkpoint=path)
    assert _without_seconds(run_record(again, settings.levels)) == _without_seconds(run_record(straight, settings.levels))
