"""scripts/longer_run.merge_reports: the parts of one longer run (chapters 06 and 07), split by seeds over
processes, become one report, whatever the nesting of the runs; parts of different runs are refused."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def script(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPTS))
    spec.loader.exec_module(module)
    return module


def routing_report(seeds, seconds, command, lr=0.003):
    runs = {d: {r: {str(s): {"accuracy": 0.5 + s / 100, "at": f"{d}/{r}/{s}"} for s in seeds}
                for r in ("dynamic", "similarity")} for d in ("mnist", "fashion")}
    return {"provenance": {"command": command, "settings": {"lr": lr}, "seeds": list(seeds), "seconds": seconds,
                           "torch": "2.14.1", "machine": "x86_64", "threads": 1, "date": f"2026-11-2{seeds[0]}"},
            "runs": runs}


def test_routing_parts_merge_by_dataset_router_and_seed(tmp_path):
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "out.json"
    a.write_text(json.dumps(routing_report((0, 1, 2), 3000.0, "first")))
    b.write_text(json.dumps(routing_report((3, 4), 2000.0, "second")))
    script("routing_longer_run").main(["--merge", str(b), str(a), "--out", str(out)])
    merged = json.loads(out.read_text())
    assert list(merged["runs"]) == ["mnist", "fashion"]
    for dataset, routers in merged["runs"].items():
        assert list(routers) == ["dynamic", "similarity"]
        for router, seeds in routers.items():
            assert list(seeds) == ["0", "1", "2", "3", "4"]                 # sorted as numbers, not by part
            assert [run["at"] for run in seeds.values()] == [f"{dataset}/{router}/{s}" for s in range(5)]
    p = merged["provenance"]
    assert p["command"] == "second && first" and p["seeds"] == [0, 1, 2, 3, 4]
    assert p["seconds"] == 5000.0 and p["parts"] == [2000.0, 3000.0] and p["date"] == "2026-11-23"


def test_ladder_parts_merge_one_level_deep(tmp_path):
    parts = []
    for seeds in ((0, 10), (2,)):
        report = routing_report(seeds, 10.0, "x")
        report["runs"] = {"K=16": {str(s): {"seed": s} for s in seeds}}
        parts.append(tmp_path / f"{seeds[0]}.json")
        parts[-1].write_text(json.dumps(report))
    script("longer_run").merge_reports(parts, tmp_path / "out.json")
    assert list(json.loads((tmp_path / "out.json").read_text())["runs"]["K=16"]) == ["0", "2", "10"]


def test_parts_of_different_runs_or_the_same_seed_are_refused(tmp_path):
    merge = script("longer_run").merge_reports
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(routing_report((0,), 1.0, "a")))
    b.write_text(json.dumps(routing_report((1,), 1.0, "b", lr=0.001)))
    with pytest.raises(SystemExit, match="differ in settings"):
        merge([a, b], tmp_path / "out.json", levels=2)
    b.write_text(json.dumps(routing_report((0, 1), 1.0, "b")))
    with pytest.raises(SystemExit, match="mnist, dynamic, seed 0 is in two reports"):
        merge([a, b], tmp_path / "out.json", levels=2)
    with pytest.raises(SystemExit, match="two or more"):
        merge([a], tmp_path / "out.json", levels=2)
    with pytest.raises(ValueError, match="levels must be at least 1"):
        merge([a, b], tmp_path / "out.json", levels=0)
    assert not (tmp_path / "out.json").exists()


def test_the_seeds_are_those_the_runs_hold(tmp_path):
    """A part stopped after some of its seeds (its provenance names them all) gives only the seeds it ran."""
    stopped = routing_report((0, 1), 10.0, "--seeds 0 1 2")
    stopped["provenance"]["seeds"] = [0, 1, 2]
    parts = [tmp_path / "a.json", tmp_path / "c.json"]
    parts[0].write_text(json.dumps(stopped))
    parts[1].write_text(json.dumps(routing_report((2,), 5.0, "--seeds 2")))
    script("longer_run").merge_reports(parts, tmp_path / "out.json", levels=2)
    merged = json.loads((tmp_path / "out.json").read_text())
    assert merged["provenance"]["seeds"] == [0, 1, 2] and list(merged["runs"]["mnist"]["dynamic"]) == ["0", "1", "2"]


class _Stop(Exception):
    """Raised where a script would start loading data, with that call's arguments (the settings among them)."""


@pytest.mark.parametrize("name, loader, default", [("ladder_longer_run", "ladder_study_data", 0.8),
                                                    ("routing_longer_run", "routing_study_data", 0.8),
                                                    ("rem_longer_run", "rem_study_data", None),
                                                    ("router_bench_longer_run", "bench_data", None)])
def test_every_longer_run_trains_with_the_decay_its_command_names(monkeypatch, name, loader, default):
    """``--lr-decay`` reaches the schedule the script trains with (the ladder script once ignored it); without it,
    the script's own decay (0.8 for chapters 06 and 07) or the quick profile's."""
    module = script(name)

    def stop(*args, **kwargs):
        raise _Stop(*args)

    monkeypatch.setattr(module, loader, stop)
    decays = []
    for argv in (["--lr-decay", "0.55"], []):
        with pytest.raises(_Stop) as caught:
            module.main(argv + ["--threads", "1"] + (["--datasets", "fashion"] if name == "rem_longer_run" else []))
        (settings,) = [a for a in caught.value.args if hasattr(a, "schedule")]
        decays.append(settings.schedule.lr_decay)
    assert decays[0] == 0.55
    assert decays[1] == (default if default is not None else 0.9), decays
