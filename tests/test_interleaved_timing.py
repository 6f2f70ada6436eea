"""The timing rule's measurement (capsule_lab.measures.cost.time_interleaved, capsule_lab.studies.bench.timing): steps
of several networks taken in turn, the order rotated each round, the load read before and after, and the records the
verdicts read for a claim about time."""

from __future__ import annotations

import pytest

from capsule_lab.course.profiles import chapter_settings
from capsule_lab.evidence.rules import timing_problems
from capsule_lab.measures.cost import time_interleaved
from capsule_lab.studies.bench.timing import time_routers


def test_rounds_rotate_the_order_and_time_every_function_each_round():
    calls, loads = [], iter([0.25, 0.75])
    timed = time_interleaved({name: (lambda n=name: calls.append(n)) for name in "ABC"}, repeats=4, warmup=1,
                             load=lambda: next(loads))
    assert calls[:3] == list("ABC")                                          # the warm-up round
    assert calls[3:] == list("ABC" "BCA" "CAB" "ABC")                        # no function always first
    assert {name: len(times) for name, times in timed["times"].items()} == {"A": 4, "B": 4, "C": 4}
    assert all(t >= 0 for times in timed["times"].values() for t in times)
    assert timed["load"] == (0.25, 0.75)


@pytest.mark.parametrize("call, message", [
    (lambda: time_interleaved({}), "fns must be a non-empty dict"),
    (lambda: time_interleaved({"a": 1}), "fns must be a non-empty dict"),
    (lambda: time_interleaved({"a": lambda: None}, repeats=0), "repeats must be >= 1"),
])
def test_time_interleaved_checks_its_inputs(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_time_routers_gives_records_the_timing_rule_accepts():
    settings = chapter_settings("08", "quick")
    from capsule_lab.studies.bench.entries import bench_data
    data = bench_data(settings)
    records = time_routers(settings, ("dynamic r=1", "uniform"), seeds=(0,), threads=(1,), steps=10, warmup=1,
                           data=data)
    assert [(r["router"], r["seed"], r["threads"]) for r in records] == [("dynamic r=1", 0, 1), ("uniform", 0, 1)]
    for r in records:
        assert r["timed_steps"] == 10 == len(r["step_times_ms"]) and r["interleaved"] is True
        assert r["train_step_ms"] == sorted(r["step_times_ms"])[4] / 2 + sorted(r["step_times_ms"])[5] / 2
        assert r["batch"] == settings.schedule.batch_size and r["device"] == "cpu" and len(r["load"]) == 2
    assert timing_problems(records) == []
    with pytest.raises(ValueError, match="steps must be >= 10"):
        time_routers(settings, ("dynamic r=1", "uniform"), seeds=(0,), steps=5, data=data)
    with pytest.raises(ValueError, match="names must name two or more networks to interleave"):
        time_routers(settings, ("uniform",), seeds=(0,), data=data)


def test_the_timing_script_writes_its_provenance_and_records(tmp_path):
    import importlib.util
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "scripts" / "router_timing.py"
    spec = importlib.util.spec_from_file_location("router_timing", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "timing.json"
    script.main(["--quick", "--threads", "1", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["provenance"]["command"] == f"python scripts/router_timing.py --quick --threads 1 --out {out}"
    assert report["provenance"]["routers"] == ["ladder", "dynamic r=3"] and report["provenance"]["steps"] == 10
    assert [(r["router"], r["seed"], r["threads"]) for r in report["records"]] == [("ladder", 0, 1),
                                                                                   ("dynamic r=3", 0, 1)]
    assert timing_problems(report["records"]) == []
