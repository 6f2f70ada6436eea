"""capsule_lab.grading.engine.signing and the signed report folder: the instructor's key (made once, 0600, never in the
folder it signs), the reports' MACs checked against an HMAC computed here, and a resume or a merge that takes only
reports the key signed, naming the others (issue 43, item 4)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import subprocess
import sys

import pytest

from capsule_lab.grading.engine import signing
from capsule_lab.grading.notebooks.folder import merge_reports, read_reports

KEY = bytes(range(32))


def _report(notebook: str, score: int, **extra) -> dict:
    return {"notebook": notebook, "chapter": "01", "graded": True, "score": score, "max_score": 9, "tasks": {},
            "timeout_cells": [], "cell_errors": [], "grading_error": None, "sha256": "ab" * 32,
            "grader": {"version": "1", "digest": "cd" * 32}, **extra}


def _independent_mac(data: dict, key: bytes) -> str:
    body = {k: v for k, v in data.items() if k != "mac"}
    text = json.dumps(json.loads(json.dumps(body)), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hmac.new(key, text.encode("utf8"), hashlib.sha256).hexdigest()


# ---------------------------------------------------------------- the key

def test_the_key_is_made_once_private_and_read_back(tmp_path):
    path = tmp_path / "config" / "capsule-lab" / "grader.key"
    key = signing.instructor_key(path)
    assert len(key) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert signing.instructor_key(path) == key and path.read_text().strip() == key.hex()
    assert signing.instructor_key(tmp_path / "other.key") != key          # random, not derived


def test_the_key_path_follows_the_environment_and_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv(signing.KEY_ENV, str(tmp_path / "k"))
    assert signing.key_path() == tmp_path / "k"
    monkeypatch.delenv(signing.KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert signing.key_path() == tmp_path / "capsule-lab" / "grader.key"


def test_a_key_others_may_read_one_inside_the_output_or_not_a_key_is_refused(tmp_path):
    path = tmp_path / "grader.key"
    signing.instructor_key(path)
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        signing.instructor_key(path)
    os.chmod(path, 0o600)
    with pytest.raises(ValueError, match="inside"):
        signing.instructor_key(path, outside=[tmp_path])
    bad = tmp_path / "bad.key"
    bad.write_text("not hex\n")
    os.chmod(bad, 0o600)
    with pytest.raises(ValueError, match="64 hex digits"):
        signing.instructor_key(bad)


# ---------------------------------------------------------------- MACs

def test_a_signed_report_carries_the_hmac_of_its_canonical_json():
    report = _report("a.ipynb", 7, tasks={"01.squash": {"points": 1, "message": "ü ✔"}}, duration_s=1.25)
    signed = signing.sign(report, KEY)
    assert signed["mac"] == _independent_mac(report, KEY) and "mac" not in report
    assert signing.verify(signed, KEY)
    assert signing.verify(json.loads(json.dumps(signed, indent=2)), KEY)      # as written and read back
    assert signing.sign(signed, KEY) == signed                                 # signing again changes nothing


@pytest.mark.parametrize("change", ["score", "sha256", "mac", "field", "key", "none"])
def test_a_report_changed_in_any_way_or_unsigned_does_not_verify(change):
    signed = signing.sign(_report("a.ipynb", 2), KEY)
    key = KEY
    if change == "score":
        signed["score"] = 9
    elif change == "sha256":
        signed["sha256"] = "ef" * 32
    elif change == "mac":
        signed["mac"] = "0" * 64
    elif change == "field":
        signed["extra"] = True
    elif change == "key":
        key = bytes(32)
    else:
        del signed["mac"]
    assert not signing.verify(signed, key)


def test_bad_keys_and_values_are_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="bytes"):
        signing.sign({}, "a string")
    with pytest.raises(ValueError, match="only a dict"):
        signing.sign([1], KEY)
    assert not signing.verify("not a report", KEY)


# ---------------------------------------------------------------- the folder

def _write(path, data):
    path.write_text(json.dumps(data), encoding="utf8")


def test_a_resume_reads_only_signed_reports_and_names_the_others(tmp_path):
    _write(tmp_path / "a.json", signing.sign(_report("a.ipynb", 2), KEY))
    forged = tmp_path / "a-forged.json"                                # newer, same notebook, unsigned
    _write(forged, _report("a.ipynb", 9))
    os.utime(forged, ns=(2 ** 62, 2 ** 62))
    _write(tmp_path / "b.json", signing.sign(_report("b.ipynb", 9), bytes(32)))   # another key
    found = read_reports(tmp_path, KEY)
    assert set(found) == {"a.ipynb"} and found["a.ipynb"][1]["score"] == 2
    assert found.refused == [forged, tmp_path / "b.json"]
    assert set(read_reports(tmp_path)) == {"a.ipynb", "b.ipynb"}          # without a key: as before
    assert read_reports(tmp_path / "absent", KEY).refused == []


def test_merge_takes_the_shard_that_really_graded_and_names_the_forged_report(tmp_path):
    """The issue's forged report in one shard's folder: the other shard really graded that notebook 0/9."""
    one, two, out = tmp_path / "one", tmp_path / "two", tmp_path / "merged"
    one.mkdir(), two.mkdir()
    _write(one / "x.json", signing.sign(_report("x.ipynb", 0), KEY))
    _write(one / "y.json", signing.sign(_report("y.ipynb", 5), KEY))
    _write(two / "x.json", _report("x.ipynb", 9))                       # forged: no MAC
    refused: list = []
    merged = merge_reports([one, two], out, key=KEY, refused=refused)
    assert [(r["notebook"], r["score"]) for r in merged] == [("x.ipynb", 0), ("y.ipynb", 5)]
    assert refused == [two / "x.json"]
    for name in ("x.json", "y.json"):                                   # the copies are signed again
        copy = json.loads((out / name).read_text())
        assert copy["report"] == str(out / name) and signing.verify(copy, KEY)
    rows = (out / "grades.csv").read_text().splitlines()
    assert rows[1].startswith("x.ipynb,01,yes,0,9") and len(rows) == 3


def test_merge_verifies_with_the_instructor_s_key_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv(signing.KEY_ENV, str(tmp_path / "absent.key"))
    (tmp_path / "one").mkdir()
    with pytest.raises(ValueError, match="no grader's key"):
        merge_reports([tmp_path / "one"], tmp_path / "out")
    key = signing.instructor_key(tmp_path / "absent.key")
    _write(tmp_path / "one" / "x.json", signing.sign(_report("x.ipynb", 3), key))
    _write(tmp_path / "one" / "y.json", _report("y.ipynb", 9))
    assert [r["notebook"] for r in merge_reports([tmp_path / "one"], tmp_path / "out")] == ["x.ipynb"]


def test_grade_merge_command_exits_1_naming_the_refused_report(tmp_path):
    key_file = tmp_path / "grader.key"
    key = signing.instructor_key(key_file)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    _write(one / "x.json", signing.sign(_report("x.ipynb", 0), key))
    _write(two / "x.json", _report("x.ipynb", 9))
    run = subprocess.run([sys.executable, "-m", "capsule_lab.cli", "grade-merge", str(one), str(two), "--out",
                          str(tmp_path / "out"), "--key", str(key_file)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert "refused 1 report(s)" in run.stderr and str(two / "x.json") in run.stderr
    missing = subprocess.run([sys.executable, "-m", "capsule_lab.cli", "grade-merge", str(one), "--out",
                              str(tmp_path / "out2"), "--key", str(tmp_path / "none.key")],
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "no grader's key" in missing.stderr
