"""capsule_lab.studies.depth (chapter 04's experiment) and scripts/dead_capsule_search.py (what makes capsules die):
the keyword overrides reach the model and the optimiser, the defaults are unchanged, the script's CSV holds what
it measured and resumes, and the committed results agree with themselves."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

import capsule_lab.studies.depth as depth_study
from capsule_lab.studies.depth import DepthRun, _number, hidden_dead_rate, search_results, shipped_runs, train_depth_run
from capsule_lab.measures.capsule_stats import layer_table
from capsule_lab.course.profiles import chapter_settings

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("dead_capsule_search", ROOT / "scripts" / "dead_capsule_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tiny():
    settings = chapter_settings("04", "quick")
    settings = replace(settings, train_size=32, test_size=16, schedule=replace(settings.schedule, epochs=1,
                                                                                batch_size=16))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.rand(32, 1, 28, 28, generator=g), torch.randint(0, 10, (32,), generator=g))
    return settings, data, TensorDataset(*(t[:16] for t in data.tensors))


@pytest.fixture
def calls(monkeypatch):
    """Record what train_depth_run passes to fit (fit still runs)."""
    seen = []
    real = depth_study.fit

    def spy(model, train, test=None, **options):
        seen.append((model, options))
        return real(model, train, test, **options)

    monkeypatch.setattr(depth_study, "fit", spy)
    return seen


def test_default_call_is_adam_without_momentum_and_the_settings_config(calls):
    settings, train, test = _tiny()
    run = train_depth_run(settings, 2, "dynamic", 0, train=train, test=test)
    model, options = calls[0]
    assert (options["optimizer"], options["momentum"]) == ("adam", 0.0)
    assert (options["lr"], options["epochs"], options["batch_size"]) == (settings.schedule.lr, 1, 16)
    assert model.config == replace(settings.config, routing_layers=2, router=settings.config.router)
    assert isinstance(run, DepthRun) and len(run.table) == 3 and run.gradients is None
    assert run.table == layer_table(run.record)


def test_overrides_reach_the_optimiser_and_the_model(calls):
    settings, train, test = _tiny()
    run = train_depth_run(settings, 3, "dynamic", 1, train=train, test=test, track=True, optimizer="sgd",
                            momentum=0.9, config={"squash": "sabour", "prior_std": 2.0, "iterations": 2})
    model, options = calls[0]
    assert (options["optimizer"], options["momentum"]) == ("sgd", 0.9)
    assert (model.config.squash, model.config.router.prior_std, model.config.router.iterations) == ("sabour", 2.0, 2)
    assert all(r.iterations == 2 for r in model.routers())
    assert model.config.routing_layers == 3 and run.model is model
    assert len(run.gradients["norm"]) == 4 and run.gradients["norm"][0].shape == (2, 16)   # 2 steps, 16 capsules


def test_the_settings_optimiser_is_used_unless_overridden(calls):
    settings, train, test = _tiny()
    sgd = dataclasses.replace(settings, schedule=dataclasses.replace(settings.schedule, optimizer="sgd", momentum=0.5))
    train_depth_run(sgd, 1, "uniform", 0, train=train, test=test)
    train_depth_run(sgd, 1, "uniform", 0, train=train, test=test, optimizer="adam", momentum=0.0)
    train_depth_run(settings, 1, "uniform", 0, train=train, test=test)
    assert [(o["optimizer"], o["momentum"]) for _, o in calls] == [("sgd", 0.5), ("adam", 0.0), ("adam", 0.0)]


def test_same_seed_same_run_and_the_optimiser_changes_it():
    settings, train, test = _tiny()
    a = train_depth_run(settings, 2, "dynamic", 3, train=train, test=test)
    b = train_depth_run(settings, 2, "dynamic", 3, train=train, test=test, optimizer="adam")
    c = train_depth_run(settings, 2, "dynamic", 3, train=train, test=test, optimizer="sgd", momentum=0.9)
    for (name, p), (_, q), (_, r) in zip(a.model.named_parameters(), b.model.named_parameters(),
                                         c.model.named_parameters()):
        assert torch.equal(p, q), name
    assert not torch.equal(a.model.layers[0].weight, c.model.layers[0].weight)


def test_a_checkpointed_run_loads_instead_of_training_again(tmp_path):
    """Chapter 04's cells save each run: run again, a finished one loads the same weights without training (its
    recorded seconds are the first run's); a tracked run, whose per-step record a checkpoint does not keep, refuses."""
    settings, train, test = _tiny()
    path = tmp_path / "depth2.pt"
    first = train_depth_run(settings, 2, "uniform", 1, train=train, test=test, checkpoint=path)
    again = train_depth_run(settings, 2, "uniform", 1, train=train, test=test, checkpoint=path)
    assert path.exists() and again.history.seconds == first.history.seconds
    assert all(torch.equal(p, q) for p, q in zip(first.model.parameters(), again.model.parameters()))
    assert again.record.accuracy == first.record.accuracy
    with pytest.raises(ValueError, match="track and checkpoint exclude each other"):
        train_depth_run(settings, 2, "uniform", 1, train=train, test=test, track=True, checkpoint=path)


def test_bad_overrides_are_refused():
    settings, train, test = _tiny()
    for config in ({"router": "uniform"}, {"routing_layers": 2}, {"nope": 1}, [("squash", "exp")]):
        with pytest.raises(ValueError, match="config must be a dict of DeepCapsNetConfig changes"):
            train_depth_run(settings, 1, "dynamic", 0, train=train, test=test, config=config)
    with pytest.raises(ValueError, match="squash must be one of"):
        train_depth_run(settings, 1, "dynamic", 0, train=train, test=test, config={"squash": "tanh"})
    with pytest.raises(ValueError, match="optimizer must be one of"):
        train_depth_run(settings, 1, "dynamic", 0, train=train, test=test, optimizer="lbfgs")
    with pytest.raises(ValueError, match="settings must be a DepthStudySettings"):
        train_depth_run({"lr": 1}, 1, "dynamic", 0, train=train, test=test)


# ------------------------------------------------------------------------------------------ the search script

def test_quick_search_writes_measured_rows_and_resumes(tmp_path, capsys):
    script = _script()
    path = tmp_path / "search.csv"
    script.main(["run", "--quick", "--csv", str(path)])
    rows = list(csv.DictReader(path.open()))
    assert [(r["label"], r["depth"]) for r in rows] == [("smoke", "1"), ("smoke", "2"), ("smoke sgd", "2")]
    assert tuple(rows[0]) == script.COLUMNS
    for r in rows:
        depth = int(r["depth"])
        assert 0.0 <= float(r["accuracy"]) <= 1.0 and r["torch"] == torch.__version__
        assert all(r[f"cdr_{l}"] != "" for l in range(1, depth + 2)) and r[f"cdr_{depth + 2}"] == ""
        for l in range(1, depth + 2):
            capsules = 10 if l == depth + 1 else 16
            assert float(r[f"cdr_{l}"]) == pytest.approx(float(r[f"cds_{l}"]) / capsules, rel=1e-5)
    assert rows[2]["optimizer"] == "sgd" and float(rows[2]["momentum"]) == 0.9
    capsys.readouterr()
    script.main(["run", "--quick", "--csv", str(path)])                       # everything is there: nothing runs
    assert capsys.readouterr().out == "" and len(list(csv.DictReader(path.open()))) == 3


def test_plot_draws_a_figure_for_the_text_column(tmp_path):
    from PIL import Image
    script = _script()
    path, png = tmp_path / "search.csv", tmp_path / "search.png"
    script.main(["run", "--quick", "--csv", str(path)])
    rows = list(csv.DictReader(path.open()))
    for r in rows:                                                 # the plot leaves out the smoke test's grid
        r["grid"] = "test"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, script.COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    script.main(["plot", "--csv", str(path), "--out", str(png), "--labels", "smoke"])
    width, height = Image.open(png).size
    assert width <= 750 and height > 100


def test_committed_results_are_consistent():
    script = _script()
    rows = script.read_rows(script.CSV_PATH)
    assert rows and len({script.run_key(r) for r in rows}) == len(rows)          # one row per run
    for r in rows:
        depth = int(r["depth"])
        hidden = [float(r[f"cds_{l}"]) for l in range(2, depth + 1)]
        assert float(r["hidden_cds"]) == pytest.approx(sum(hidden))                   # the CSV keeps 6 digits
        assert float(r["hidden_cdr"]) == pytest.approx(sum(hidden) / (16 * len(hidden)) if hidden else 0.0, rel=1e-5)
        assert 0.0 <= float(r["accuracy"]) <= 1.0 and float(r["seconds"]) > 0
    assert search_results() == [{k: _number(v) for k, v in r.items()} for r in rows]   # what the chapter reads
    blob = shipped_runs()
    assert {"command", "seeds", "depths", "torch", "machine", "seconds"} <= set(blob["provenance"])
    assert script.JSON_PATH.stat().st_size < 1_000_000
    assert len(blob["runs"]) == 2 * len(blob["provenance"]["depths"]) * len(blob["provenance"]["seeds"])
    for run in blob["runs"]:
        assert len(run["table"]) == run["depth"] + 1
        assert all(row["cdr"] == pytest.approx(row["cds"] / row["capsules"]) for row in run["table"])
    history = blob["capsule_history"]
    for capsule in ("dying", "living"):
        assert len({len(history[capsule][k]) for k in ("norm", "activation", "weight")}) == 1


def test_hidden_dead_rate_counts_only_the_hidden_layers():
    table = [{"cds": 3, "capsules": 16}, {"cds": 4, "capsules": 16}, {"cds": 2, "capsules": 16},
             {"cds": 5, "capsules": 10}]                                   # primary, two hidden, class capsules
    assert hidden_dead_rate(table) == (4 + 2) / 32
    assert hidden_dead_rate(table[:1] + table[-1:]) == 0.0                 # one routing layer: no hidden layer


# ------------------------------------------------------------------ the verdict table (DEPTH_CLAIMS)

def test_run_names():
    from capsule_lab.studies.depth import run_name
    assert run_name("dynamic", 4) == "RBA, 4 routing layers"
    assert run_name("uniform", 6) == "uniform, 6 routing layers"
    assert run_name("dynamic", 4, 2) == "RBA, 4 routing layers, layer 2"
    with pytest.raises(ValueError, match="kind must be one of"):
        run_name("em", 4)


def test_claim_records_are_the_shipped_runs_numbers():
    from capsule_lab.studies.depth import depth_claim_records, run_name
    shipped = shipped_runs()
    records = {(r["router"], r["seed"]): r for r in depth_claim_records(shipped)}
    for run in shipped["runs"]:
        whole = records[run_name(run["routing"], run["depth"]), run["seed"]]
        hidden = run["table"][1:-1]
        assert whole["dead_rate"] == pytest.approx(sum(r["cds"] for r in hidden) / (16 * len(hidden)))
        share = whole["correct"].count("1") / len(whole["correct"])
        assert whole["accuracy"] == run["accuracy"] == pytest.approx(share)
        for row in run["table"] if run["routing"] == "dynamic" else ():
            layer = records[run_name("dynamic", run["depth"], row["layer"]), run["seed"]]
            assert layer["dead_rate"] == row["cdr"] and layer["train_accuracy"] == run["train_accuracy"]
    with pytest.raises(ValueError, match="no training accuracy"):
        depth_claim_records({"runs": [{k: v for k, v in shipped["runs"][0].items() if k != "train_accuracy"}]})


def dying(shipped) -> dict:
    """Chapter 04's setting for the premise, read again from the shipped runs: does any RBA network have a dead
    hidden capsule?"""
    return {"dead_capsules": (any(row["cds"] > 0 for run in shipped["runs"] if run["routing"] == "dynamic"
                                  for row in run["table"][1:-1]), "")}


def test_the_verdicts_are_scipys():
    from _scipy_verdicts import scipy_outcomes

    from capsule_lab.studies.depth import DEPTH_CLAIMS, depth_claim_records, depth_verdicts
    shipped = shipped_runs()
    assert len(shipped["provenance"]["seeds"]) >= 5
    rows = depth_verdicts(shipped)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(depth_claim_records(shipped), DEPTH_CLAIMS,
                                                               setting=dying(shipped))


def test_ship_trains_both_routings_and_keeps_what_the_verdicts_read(tmp_path):
    script = _script()
    out = tmp_path / "runs.json"
    script.main(["ship", "--label", "smoke", "--depths", "2", "--seeds", "0", "1", "--track", "9", "9",
                 "--out", str(out)])
    import json
    blob = json.loads(out.read_text())
    assert [(r["routing"], r["seed"]) for r in blob["runs"]] == [("dynamic", 0), ("dynamic", 1), ("uniform", 0),
                                                                 ("uniform", 1)]
    for run in blob["runs"]:
        assert len(run["train_accuracy"]) == blob["provenance"]["setting"]["epochs"]
        assert run["accuracy"] == pytest.approx(run["correct"].count("1") / len(run["correct"]))


def test_the_longer_run_is_complete_and_its_verdicts_are_scipys():
    from _scipy_verdicts import scipy_outcomes

    from capsule_lab.studies.depth import DEPTH_CLAIMS, depth_claim_records, depth_verdicts
    longer = shipped_runs("dead_capsule_runs_longer.json")
    prov = longer["provenance"]
    assert prov["setting"]["label"] == "longer, 5 iterations" and prov["setting"]["epochs"] == 20
    assert len(prov["seeds"]) >= 5 and set(prov["depths"]) >= {4, 6}
    assert len(longer["runs"]) == 2 * len(prov["depths"]) * len(prov["seeds"])
    assert all(len(run["train_accuracy"]) == 20 for run in longer["runs"])
    rows = depth_verdicts(longer)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(depth_claim_records(longer), DEPTH_CLAIMS,
                                                               setting=dying(longer))
    # the findings: seeds 3 and 4 of RBA with 4 routing layers are collapsed (seed 4 flat at 11.08 %), and
    # McNemar leaves them out; with 6 layers, dead capsules present, the verdicts as before
    by_question = {r.claim.question: r for r in rows}
    four = by_question["with 4 routing layers, is uniform routing more accurate than RBA?"]
    assert four.verdict.outcome == "not testable" and "RBA, 4 routing layers collapsed (seeds 3, 4" in four.verdict.reason
    assert four.mcnemar_left_out == (3, 4) and four.mcnemar.strata == 3
    assert [r.verdict.outcome for r in rows if "6 routing layers" in r.claim.question] == \
        ["supported", "contradicted", "supported"]
