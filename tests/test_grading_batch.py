"""capsule_lab.grading.notebooks.batch: grading a class (``capsule-lab grade --jobs N --shard K/N --force``,
``capsule-lab grade-merge``).

A module fixture grades three small chapter-01 notebooks (all five answers; the margin loss averaged over the
classes; only ``squash``) one after the other: the reference every other run is compared with. Two worker
processes give the same reports and CSV; a run stopped by SIGTERM after its first report keeps that report,
leaves no process behind, and the re-run skips it and ends with the reference CSV; a changed notebook is graded
again, and ``force`` chooses everything; shards 1/2 and 2/2 merged give the reference CSV; a notebook that
kills its worker gets a "not graded" report while the rest of the batch is graded. Bad ``--shard`` values and
merges of disagreeing reports fail with clear errors, without a kernel.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from capsule_lab import cli
from capsule_lab.grading.engine.signing import instructor_key, sign
from capsule_lab.grading.notebooks import batch
from capsule_lab.grading.notebooks.batch import grade_batch, grader_fingerprint, parse_shard, shard_of
from capsule_lab.grading.notebooks.folder import read_reports

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "01_capsules.ipynb"
ALL = ("squash", "margin_loss", "primary_capsules", "predict_equal_length", "steps_to_long")
SETTINGS = ["--timeout", "60"]
SCORES = {"ada.ipynb": "5", "bob.ipynb": "4", "cy.ipynb": "1"}


def small_notebook(path: Path, keep=ALL, note: str = "", averaged_loss: bool = False) -> Path:
    """A chapter-01 submission with the solution's functions named in ``keep`` (and a comment ``note``, so
    that notebooks differ); ``averaged_loss``: the margin loss averaged over the classes (a known mistake)."""
    nb = nbformat.read(SOLUTION, as_version=4)
    cells = [new_code_cell(f"# {note or path.stem}\nimport torch")]
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("def ") and cell.source[4:].split("(")[0] in keep:
            source = cell.source
            right = "return (present + absent).sum(dim=1).mean()"
            if averaged_loss and source.startswith("def margin_loss"):
                assert right in source
                source = source.replace(right, "return (present + absent).mean()")
            cells.append(new_code_cell(source))
    nb.cells = cells
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def rows(folder: Path) -> list[dict]:
    with open(folder / "grades.csv", newline="", encoding="utf8") as f:
        return list(csv.DictReader(f))


def outcome(folder: Path) -> dict:
    """What grading decided, per notebook: graded, score and each task's points and status."""
    return {key: (r["graded"], r["score"], {t: (v["points"], v["status"]) for t, v in r["tasks"].items()})
            for key, (_, r) in read_reports(folder).items()}


def left_running(folder: Path) -> list[int]:
    """Processes whose working directory is ``folder`` (kernels and evaluation children run there)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == folder.resolve():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def grade(*args) -> int:
    return cli.main(["grade", *map(str, args), *SETTINGS])


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Three notebooks graded one after the other (--jobs 1): the reference."""
    base = tmp_path_factory.mktemp("batch")
    paths = [small_notebook(base / "class" / "ada.ipynb"),
             small_notebook(base / "class" / "bob.ipynb", averaged_loss=True),
             small_notebook(base / "class" / "cy.ipynb", keep=("squash",))]
    assert grade(*paths, "--out", base / "serial", "--jobs", "1") == 0
    return {"base": base, "paths": paths, "serial": base / "serial",
            "csv": (base / "serial" / "grades.csv").read_text()}


# ---------------------------------------------------------------- without kernels

def test_parse_shard_and_its_errors():
    assert parse_shard("2/8") == (2, 8) and parse_shard(" 1 / 1 ") == (1, 1)
    for text, words in [("0/2", "between 1 and N=2"), ("3/2", "between 1 and N=2"), ("1/0", "at least 1"),
                        ("x", "must be K/N"), ("1/2/3", "must be K/N"), ("-1/2", "must be K/N"), ("", "must be K/N")]:
        with pytest.raises(ValueError, match=words):
            parse_shard(text)


def test_shards_are_disjoint_and_cover_the_sorted_paths():
    paths = [f"s/{name}.ipynb" for name in ("zoe", "ada", "Bob", "cy", "eve", "dan", "al")]
    for n in range(1, 9):
        shards = [shard_of(paths, k, n) for k in range(1, n + 1)]
        flat = [p for s in shards for p in s]
        assert sorted(map(str, flat)) == sorted(paths) and len(flat) == len(paths)
        assert all(len(s) in (len(paths) // n, -(-len(paths) // n)) for s in shards)
    assert [p.name for p in shard_of(paths, 2, 3)] == ["ada.ipynb", "dan.ipynb"]  # of Bob ada al cy dan eve zoe
    with pytest.raises(ValueError):
        shard_of(paths, 0, 3)


def test_bad_shard_and_jobs_values_are_clear_errors(tmp_path, capsys):
    nb = small_notebook(tmp_path / "ada.ipynb")
    for args, words in [(["--shard", "3/2"], "--shard K/N: the shard K must be between 1 and N=2"),
                        (["--shard", "0/4"], "shards count from 1"), (["--shard", "two"], "--shard must be K/N"),
                        (["--shard", "1/0"], "N must be at least 1"), (["--jobs", "0"], "--jobs must be")]:
        assert cli.main(["grade", str(nb), "--out", str(tmp_path / "out"), *args]) == 2
        assert words in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):
        cli.main(["grade", "--help"])
    text = capsys.readouterr().out
    assert all(flag in text for flag in ("--jobs", "--shard", "--force", "grade-merge"))


def test_the_command_passes_its_flags_to_the_batch(tmp_path, monkeypatch, capsys):
    calls = []

    def fake(paths, out, **kwargs):
        calls.append((paths, out, kwargs))
        kwargs["on_start"]([], ["x.ipynb", "y.ipynb"])          # the batch says what it skips before it grades
        return batch.Batch([], [], ["x.ipynb", "y.ipynb"])

    monkeypatch.setattr(batch, "grade_batch", fake)
    nb = small_notebook(tmp_path / "ada.ipynb")
    assert cli.main(["grade", str(nb), "--out", str(tmp_path / "o"), "--jobs", "3", "--shard", "2/5", "--force",
                     "--timeout", "9", "--task-timeout", "4", "--chapter", "01"]) == 0
    (paths, out, kwargs), = calls
    assert paths == [str(nb)] and out == str(tmp_path / "o")
    assert {k: kwargs[k] for k in ("jobs", "shard", "force", "timeout", "task_timeout", "chapter")} == {
        "jobs": 3, "shard": (2, 5), "force": True, "timeout": 9, "task_timeout": 4, "chapter": "01"}
    printed = capsys.readouterr().out
    assert "nothing to grade; skipped 2 already graded" in printed and printed.count("already graded") == 1
    assert cli.main(["grade", str(nb)]) == 0 and calls[-1][2]["jobs"] == batch.default_jobs() >= 1
    assert calls[-1][2]["force"] is False and calls[-1][2]["shard"] is None


# ---------------------------------------------------------------- kernels: workers, resuming, shards

@pytest.mark.notebook
@pytest.mark.xdist_group("grading-batch")
def test_two_workers_give_the_same_reports_and_csv(graded, capsys):
    assert [(Path(r["notebook"]).name, r["score"]) for r in rows(graded["serial"])] == list(SCORES.items())
    for key, (_, report) in read_reports(graded["serial"]).items():  # what a resume compares
        assert report["sha256"] == hashlib.sha256(Path(key).read_bytes()).hexdigest()
        assert report["grader"] == grader_fingerprint() and report["settings"]["timeout"] == 60
    out = graded["base"] / "parallel"
    assert grade(*graded["paths"], "--out", out, "--jobs", "2") == 0
    assert "3 notebook(s), 2 at a time" in capsys.readouterr().out
    assert (out / "grades.csv").read_text() == graded["csv"]
    assert outcome(out) == outcome(graded["serial"])
    assert sorted(p.name for p in out.iterdir()) == ["ada.json", "bob.json", "cy.json", "grades.csv"]


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-batch")
def test_an_interrupted_batch_keeps_its_reports_and_resumes(graded, capsys):
    out = graded["base"] / "interrupted"
    proc = subprocess.Popen([sys.executable, "-m", "capsule_lab.cli", "grade", *map(str, graded["paths"]),
                             "--out", str(out), "--jobs", "1", *SETTINGS], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(out.glob("*.json")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # as a scheduler's time limit would
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted after" in stderr and "run the same command again" in stderr
    written = sorted(p.name for p in out.glob("*.json"))
    assert 1 <= len(written) < 3 and "ada.json" in written  # a report on disk before the batch ended
    assert [Path(r["notebook"]).stem + ".json" for r in rows(out)] == written
    time.sleep(0.5)
    assert left_running(graded["base"] / "class") == [], "the interrupted run left a kernel or child running"

    assert grade(*graded["paths"], "--out", out, "--jobs", "2") == 0
    printed = capsys.readouterr().out
    assert f"skipped {len(written)} already graded" in printed
    assert f"grading {3 - len(written)} notebook(s)" in printed
    assert (out / "grades.csv").read_text() == graded["csv"]
    assert outcome(out) == outcome(graded["serial"])


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-batch")
def test_shards_merged_equal_the_whole_batch(graded, capsys):
    base = graded["base"]
    for k in (1, 2):
        assert grade(*graded["paths"], "--out", base / f"shard{k}", "--shard", f"{k}/2", "--jobs", "1") == 0
        assert f"shard {k}/2: grading" in capsys.readouterr().out
    assert sorted(p.name for p in (base / "shard1").glob("*.json")) == ["ada.json", "cy.json"]
    assert sorted(p.name for p in (base / "shard2").glob("*.json")) == ["bob.json"]
    assert cli.main(["grade-merge", str(base / "shard1"), str(base / "shard2"), "--out", str(base / "merged")]) == 0
    assert (base / "merged" / "grades.csv").read_text() == graded["csv"]
    assert outcome(base / "merged") == outcome(graded["serial"])
    # merging into one of the shards' folders makes that folder whole (and resumable)
    assert cli.main(["grade-merge", str(base / "shard1"), str(base / "shard2"), "--out", str(base / "shard2")]) == 0
    assert (base / "shard2" / "grades.csv").read_text() == graded["csv"]
    assert grade(*graded["paths"], "--out", base / "shard2") == 0
    assert "skipped 3 already graded" in capsys.readouterr().out


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-batch")
def test_merge_refuses_disagreeing_duplicates_and_mixed_graders(graded, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(graded["serial"], a)
    shutil.copytree(graded["serial"], b)
    assert cli.main(["grade-merge", str(a), str(b), "--out", str(tmp_path / "same")]) == 0  # duplicates that agree
    assert (tmp_path / "same" / "grades.csv").read_text() == graded["csv"]
    bob = json.loads((b / "bob.json").read_text())
    # edited by hand, unsigned: refused and named (exit 1), the other folder's bob taken
    (b / "bob.json").write_text(json.dumps(dict(bob, sha256="0" * 64)))
    assert cli.main(["grade-merge", str(a), str(b), "--out", str(tmp_path / "unsigned")]) == 1
    assert "refused 1 report(s)" in capsys.readouterr().err
    assert (tmp_path / "unsigned" / "grades.csv").read_text() == graded["csv"]
    # as another grading with the same key would write them: the disagreement itself is refused (exit 2)
    key = instructor_key()
    (b / "bob.json").write_text(json.dumps(sign(dict(bob, sha256="0" * 64), key)))
    assert cli.main(["grade-merge", str(a), str(b), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "graded with different contents" in err and "bob.ipynb" in err and "000000000000" in err
    assert not (tmp_path / "m").exists()
    (b / "bob.json").write_text(json.dumps(sign(dict(bob, grader={"version": "0.0.1", "digest": "old"}), key)))
    assert cli.main(["grade-merge", str(a), str(b), "--out", str(tmp_path / "m")]) == 2
    assert "different graders" in capsys.readouterr().err
    assert cli.main(["grade-merge", str(tmp_path / "nowhere"), "--out", str(tmp_path / "m")]) == 2
    assert "not found" in capsys.readouterr().err


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-batch")
def test_changed_content_is_graded_again_and_force_grades_all(tmp_path, capsys):
    nb = small_notebook(tmp_path / "solo" / "cy.ipynb", keep=("squash",))
    out = tmp_path / "out"
    assert grade(nb, "--out", out) == 0
    first = json.loads((out / "cy.json").read_text())
    assert first["score"] == 1 and first["sha256"] == hashlib.sha256(nb.read_bytes()).hexdigest()
    capsys.readouterr()

    assert grade(nb, "--out", f"{out}/") == 0                               # --out ends in a slash
    printed = capsys.readouterr().out
    assert "nothing to grade; skipped 1 already graded" in printed and "01.squash" not in printed
    assert f"reports written to {out}/\n" in printed and "//" not in printed
    assert printed.count("already graded") == 1                          # said once, with why (issue 48)
    assert json.loads((out / "cy.json").read_text()) == first

    small_notebook(nb, keep=("squash", "margin_loss"), note="resubmitted")  # the student adds an answer
    assert grade(nb, "--out", out) == 0
    assert "skipped" not in capsys.readouterr().out
    second = json.loads((out / "cy.json").read_text())
    assert second["score"] == 2 and second["sha256"] == hashlib.sha256(nb.read_bytes()).hexdigest() != first["sha256"]
    assert [r["score"] for r in rows(out)] == ["2"]

    # what a batch will grade is decided before it starts: all of it with force
    seen = {}

    def stop(todo, skipped):
        seen.update(todo=todo, skipped=skipped)
        raise KeyboardInterrupt

    for force, todo, skipped in [(False, [], [str(nb)]), (True, [str(nb)], [])]:
        with pytest.raises(KeyboardInterrupt):
            grade_batch([nb], out, jobs=1, force=force, on_start=stop, timeout=60)
        assert seen == {"todo": todo, "skipped": skipped}


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-batch")
def test_a_dead_worker_costs_only_its_notebook(tmp_path, capsys):
    folder = tmp_path / "dying"
    killer = small_notebook(folder / "01_killer.ipynb", keep=("squash",))
    nb = nbformat.read(killer, as_version=4)
    nb.cells.insert(1, new_code_cell("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)  # the worker"))
    nbformat.write(nb, killer)
    paths = [killer, small_notebook(folder / "ada.ipynb"), small_notebook(folder / "bob.ipynb", averaged_loss=True)]
    out = tmp_path / "out"
    # without the OS sandbox: inside it the kernel cannot reach the worker (its own PID namespace), and the batch's
    # handling of a worker that dies anyway (out of memory, a bug) is what this tests
    assert grade(*paths, "--out", out, "--jobs", "2", "--no-sandbox") == 1  # one notebook could not be graded
    captured = capsys.readouterr()
    assert "could not be graded" in captured.err and "01_killer.ipynb" in captured.err
    got = {Path(r["notebook"]).name: (r["graded"], r["score"], r["grading_error"]) for r in rows(out)}
    assert got["ada.ipynb"] == ("yes", "5", "") and got["bob.ipynb"] == ("yes", "4", "")
    assert got["01_killer.ipynb"][:2] == ("no", "") and "the notebook's code ended its grading process" in got["01_killer.ipynb"][2]
    time.sleep(0.5)
    assert left_running(folder) == [], "the dead worker's kernel was left running"


@pytest.mark.notebook
def test_the_gradebook_of_a_graded_class_has_each_students_score(graded, tmp_path, capsys):
    """Issue 48: the real grader's reports of the class (ada 5, bob 4, cy 1 of chapter 01's 5) through
    `capsule-lab gradebook`: one row per student named by the file name, the scores of grades.csv as the totals, the
    same columns as for a folder of any other chapters, and Moodle's import."""
    out = tmp_path / "reports"
    shutil.copytree(graded["serial"], out)
    assert cli.main(["gradebook", str(out), "--student", r"file:^(\w+)\.ipynb$", "--chapters", "01", "02",
                     "--export", "moodle"]) == 0
    with open(out / "gradebook.csv", newline="", encoding="utf8") as f:
        book = {r["student"]: r for r in csv.DictReader(f)}
    assert {s: r["01 total"] for s, r in book.items()} == {Path(n).stem: v for n, v in SCORES.items()}
    assert all(r["02 total"] == "" and r["status"] == "02: not submitted" for r in book.values())
    assert book["cy"]["01.margin_loss"] == "0" and book["bob"]["01.squash"] == "1"
    with open(out / "moodle.csv", newline="", encoding="utf8") as f:
        assert [r["capsule-lab 01 (5 points)"] for r in csv.DictReader(f)] == ["5", "4", "1"]
    printed = capsys.readouterr().out
    assert "3 student(s), 3 notebook(s)" in printed and "hand-scored points: 0 entered" in printed
