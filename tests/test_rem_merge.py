"""scripts/rem_longer_run.py --merge: parts of one REM run that differ only in their seeds become one report."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "rem_longer_run.py"


def script():
    spec = importlib.util.spec_from_file_location("rem_longer_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(seeds, seconds, command, datasets=("fashion",), threads=1):
    settings = {d: {"epochs": 24, "seeds": list(seeds)} for d in datasets}
    return {"provenance": {"command": command, "settings": settings, "seeds": list(seeds), "seconds": seconds,
                           "torch": "2.14.1", "machine": "x86_64", "threads": threads, "date": f"2026-11-2{seeds[0]}"},
            "runs": [{"dataset": d, "seed": s, "Q": {}} for d in datasets for s in seeds]}


def test_parts_merge_into_one_report(tmp_path):
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "out.json"
    a.write_text(json.dumps(report((0, 1, 2), 3000.0, "first", ("fashion", "mnist"))))
    b.write_text(json.dumps(report((3, 4), 2000.0, "second", ("fashion", "mnist"))))
    script().main(["--merge", str(b), str(a), "--out", str(out)])
    merged = json.loads(out.read_text())
    assert [(r["dataset"], r["seed"]) for r in merged["runs"]] == [("fashion", s) for s in range(5)] + \
        [("mnist", s) for s in range(5)]
    p = merged["provenance"]
    assert p["command"] == "second && first" and p["seeds"] == [0, 1, 2, 3, 4] and p["seconds"] == 5000.0
    assert p["parts"] == [2000.0, 3000.0] and p["date"] == "2026-11-23"
    assert p["settings"] == {d: {"epochs": 24, "seeds": [0, 1, 2, 3, 4]} for d in ("fashion", "mnist")}


def test_parts_of_different_runs_are_refused(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(report((0,), 1.0, "a")))
    other = report((1,), 1.0, "b")
    other["provenance"]["settings"]["fashion"]["epochs"] = 12
    b.write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="differ in their settings"):
        script().merge_reports([a, b], tmp_path / "out.json")
    b.write_text(json.dumps(report((1,), 1.0, "b", threads=2)))
    with pytest.raises(SystemExit, match="differ in threads"):
        script().merge_reports([a, b], tmp_path / "out.json")
    b.write_text(json.dumps(report((0,), 1.0, "b")))
    with pytest.raises(SystemExit, match=r"runs in two reports: \[\('fashion', 0\)\]"):
        script().merge_reports([a, b], tmp_path / "out.json")


def test_a_setting_only_some_parts_record_is_kept_and_listed(tmp_path):
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "out.json"
    old = report((0, 1, 2), 3000.0, "first")
    new = report((3, 4), 2000.0, "second")
    new["provenance"]["settings"]["fashion"]["router"] = {"iterations": 3, "options": []}   # a field added since
    old["provenance"]["settings"]["fashion"]["router"] = {"iterations": 3}
    a.write_text(json.dumps(old))
    b.write_text(json.dumps(new))
    script().merge_reports([a, b], out)
    p = json.loads(out.read_text())["provenance"]
    assert p["settings"]["fashion"] == {"epochs": 24, "seeds": [0, 1, 2, 3, 4], "router": {"iterations": 3,
                                                                                           "options": []}}
    assert p["settings_only_in_some_parts"] == {"fashion/router/options": "part 2 of 2"}
    new["provenance"]["settings"]["fashion"]["router"]["iterations"] = 2                   # a value that differs
    b.write_text(json.dumps(new))
    with pytest.raises(SystemExit, match=r"differ in their settings \(besides the seeds\): .* \(fashion/router/it"):
        script().merge_reports([a, b], out)
    other = report((3,), 1.0, "b", datasets=("fashion", "mnist"))
    b.write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="differ in their settings"):
        script().merge_reports([a, b], out)
