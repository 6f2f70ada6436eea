"""capsule_lab.grading: the exercise checks of chapters 01–02 and the notebook grader.

Fast tests call ``check`` directly: every task passes with the reference and with the solution
notebook's own function, and fails (with the right hint) on plausible wrong answers. Tests marked
``notebook`` execute notebooks in fresh kernels (a few seconds each); session fixtures grade each
notebook once: the solutions score full marks, the generated exercises score zero without crashing, a
planted wrong answer loses exactly its task's points, a hanging cell times out and still gets a report,
and the graded files are never modified.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

import capsule_lab
from capsule_lab import grading
from capsule_lab.grading import TASKS, check, grade, grade_notebook

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
NOTEBOOKS = ["01_capsules.ipynb", "02_dynamic_routing.ipynb", "03_routing_gradients.ipynb", "04_dead_capsules.ipynb"]
FUNCTION_OF_TASK = {
    "01.squash": ("01_capsules.ipynb", "squash"),
    "01.margin_loss": ("01_capsules.ipynb", "margin_loss"),
    "01.primary_capsules": ("01_capsules.ipynb", "primary_capsules"),
    "02.couplings": ("02_dynamic_routing.ipynb", "couplings"),
    "02.routing_step": ("02_dynamic_routing.ipynb", "routing_step"),
    "02.dynamic_routing": ("02_dynamic_routing.ipynb", "dynamic_routing"),
    "03.softmax_jacobian": ("03_routing_gradients.ipynb", "softmax_jacobian"),
    "03.constant_coupling_gradient": ("03_routing_gradients.ipynb", "term1"),
    "03.detached_routing": ("03_routing_gradients.ipynb", "routing"),
    "04.dyr": ("04_dead_capsules.ipynb", "dyr"),
    "04.dead_capsules": ("04_dead_capsules.ipynb", "dead_capsules"),
    "04.active_rate": ("04_dead_capsules.ipynb", "active_rate"),
}
POINTS = {"01.squash": 1, "01.margin_loss": 1, "01.primary_capsules": 1,
          "02.couplings": 1, "02.routing_step": 2, "02.dynamic_routing": 2,
          "03.softmax_jacobian": 1, "03.constant_coupling_gradient": 2, "03.detached_routing": 2,
          "04.dyr": 2, "04.dead_capsules": 1, "04.active_rate": 1}


def solution_functions(name: str) -> dict:
    """Execute the ``def`` cells of a master notebook and return their namespace."""
    nb = nbformat.read(SOLUTIONS / name, as_version=4)
    namespace = {"torch": torch, "squash": capsule_lab.squash}
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.lstrip().startswith("def "):
            exec(compile(cell.source, name, "exec"), namespace)
    return namespace


def fingerprint(path: Path) -> tuple:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


# ---------------------------------------------------------------- the registry

def test_registry_has_the_tasks_and_points():
    assert {tid: t.points for tid, t in TASKS.items()} == POINTS
    for task in TASKS.values():
        assert task.title and task.hint and task.cases()
        assert task.chapter in {"01", "02", "03", "04"}
        assert any(c.args for c in task.cases())


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        check("03.nothing", lambda x: x)
    for tid in TASKS:
        assert tid in str(err.value)


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_reference_passes(task_id, capsys):
    result = check(task_id, TASKS[task_id].reference)
    assert result.passed and result.points == result.max_points == POINTS[task_id]
    assert capsys.readouterr().out == f"✔ {task_id} passed ({POINTS[task_id]}/{POINTS[task_id]} points)\n"


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_solution_notebook_function_passes(task_id):
    notebook, name = FUNCTION_OF_TASK[task_id]
    result = check(task_id, solution_functions(notebook)[name], verbose=False)
    assert result.passed, result.message


def test_solutions_are_written_in_plain_torch():
    """Solving an exercise by calling the library's own function would teach nothing."""
    bodies = {}
    for name in NOTEBOOKS:
        nb = nbformat.read(SOLUTIONS / name, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code" and cell.source.startswith("def "):
                fn = cell.source.split("(", 1)[0][len("def "):]
                bodies[fn] = cell.source.split("# BEGIN SOLUTION", 1)[1]
    assert set(bodies) == {fn for _, fn in FUNCTION_OF_TASK.values()}
    for fn, body in bodies.items():
        for forbidden in ("capsule_lab", "conv_to_capsules", "margin_loss(", "routing_step(", "dynamic_routing(",
                          "agreement("):
            assert forbidden not in body, f"{fn} calls {forbidden}"
    assert "softmax(" not in bodies["couplings"], "couplings: the softmax is the exercise"


def test_each_solution_notebook_checks_all_its_tasks():
    for name in NOTEBOOKS:
        nb = nbformat.read(SOLUTIONS / name, as_version=4)
        sources = [c.source for c in nb.cells if c.cell_type == "code"]
        for task in grading.tasks_for_chapter(name[:2]):
            assert any(f'check("{task.id}", ' in s for s in sources), f"{name} never checks {task.id}"
        assert any("from capsule_lab.grading import check" in s for s in sources)


# ---------------------------------------------------------------- wrong answers fail

def _squash_without_factor(s, dim=-1):
    n2 = (s * s).sum(dim=dim, keepdim=True)
    return s / (1 + n2)


def _squash_nan_at_zero(s, dim=-1):
    n2 = (s * s).sum(dim=dim, keepdim=True)
    return n2 / (1 + n2) * s / n2.sqrt()


def _squash_nan_gradient_at_zero(s, dim=-1):
    n2 = (s * s).sum(dim=dim, keepdim=True)
    norm = n2.sqrt()
    return torch.where(norm > 0, n2 / (1 + n2) * s / norm, torch.zeros_like(s))


def _margin_mean_over_classes(lengths, labels):
    T = F.one_hot(labels, lengths.shape[1]).to(lengths.dtype)
    loss = T * F.relu(0.9 - lengths) ** 2 + 0.5 * (1 - T) * F.relu(lengths - 0.1) ** 2
    return loss.mean()


def _margin_without_clamp(lengths, labels):
    T = F.one_hot(labels, lengths.shape[1]).to(lengths.dtype)
    return (T * (0.9 - lengths) ** 2 + 0.5 * (1 - T) * (lengths - 0.1) ** 2).sum(1).mean()


def _primary_spatial_neighbours(conv_out, capsule_dim):
    return conv_out.reshape(conv_out.shape[0], -1, capsule_dim)


def _primary_type_first(conv_out, capsule_dim):
    B, CD, H, W = conv_out.shape
    return conv_out.reshape(B, CD // capsule_dim, capsule_dim, H * W).transpose(2, 3).reshape(B, -1, capsule_dim)


def _couplings_over_inputs(logits):
    return torch.softmax(logits, dim=1)


def _couplings_unstable(logits):
    e = torch.exp(logits)
    return e / e.sum(dim=-1, keepdim=True)


def _step(votes, logits, detach=False, update=True, over_inputs=False):
    c = torch.softmax(logits, dim=1 if over_inputs else -1)
    v = capsule_lab.squash((c.unsqueeze(-1) * votes).sum(1))
    agreement = (votes * v.unsqueeze(1)).sum(-1)
    if detach:
        agreement = agreement.detach()
    return v, (logits + agreement) if update else logits


def _routing(votes, iterations, detach=False, update=True, over_inputs=False, extra=0):
    logits = torch.zeros(votes.shape[:3], dtype=votes.dtype)
    for _ in range(iterations + extra):
        v, new = _step(votes, logits, detach=detach, update=update, over_inputs=over_inputs)
        logits = new
    return v


def _routing_no_grad(votes, iterations):
    with torch.no_grad():
        return _routing(votes, iterations)


WRONG = [
    ("01.squash", _squash_without_factor, "‖s‖²"),
    ("01.squash", _squash_nan_at_zero, "ε"),
    ("01.squash", _squash_nan_gradient_at_zero, "gradient"),
    ("01.squash", lambda s, dim=-1: capsule_lab.squash(s), "`dim`"),
    ("01.margin_loss", _margin_mean_over_classes, "sum the loss over the classes"),
    ("01.margin_loss", _margin_without_clamp, "max(0, ·)"),
    ("01.primary_capsules", _primary_spatial_neighbours, "neighbouring *positions*"),
    ("01.primary_capsules", _primary_type_first, "wrong order"),
    ("02.couplings", _couplings_over_inputs, "normalised over the input capsules"),
    ("02.couplings", _couplings_unstable, "overflow"),
    ("02.routing_step", lambda u, b: _step(u, b, detach=True), "detach"),
    ("02.routing_step", lambda u, b: _step(u, b, update=False), "logits unchanged"),
    ("02.routing_step", lambda u, b: _step(u, b, over_inputs=True), "softmax over the output capsules"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, detach=True), "detach"),
    ("02.dynamic_routing", _routing_no_grad, "no gradient"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, update=False), "uniform routing"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, over_inputs=True), "softmax over the output capsules"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, extra=1), "one routing iteration too many"),
]


@pytest.mark.parametrize("task_id, fn, hint", WRONG, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_its_hint(task_id, fn, hint, capsys):
    result = check(task_id, fn)
    assert not result.passed and result.points == 0 and result.max_points == POINTS[task_id]
    assert hint in result.message, result.message
    line = capsys.readouterr().out
    assert line.startswith(f"✘ {task_id} failed: ") and " on case '" in line and " — hint: " in line


def test_routing_step_must_return_a_pair():
    result = check("02.routing_step", lambda u, b: _step(u, b)[0], verbose=False)
    assert not result.passed and "expected a tuple (poses, new_logits)" in result.message


def test_dtype_must_be_kept():
    result = check("02.couplings", lambda b: torch.softmax(b.double(), dim=-1), verbose=False)
    assert not result.passed and "dtype" in result.message


# ---------------------------------------------------------------- unfinished and crashing answers

def _stub_ellipsis(s, dim=-1):
    ...


def _stub_raise(s, dim=-1):
    raise NotImplementedError("write your solution here")


@pytest.mark.parametrize("fn", [_stub_ellipsis, _stub_raise, lambda s, dim=-1: None, None, ...])
def test_unfinished_answers_are_not_implemented(fn, capsys):
    result = check("01.squash", fn)
    assert (result.passed, result.points, result.max_points) == (False, 0, 1)
    assert result.message.startswith("not implemented yet")
    assert capsys.readouterr().out.startswith("✘ 01.squash failed: not implemented yet — hint: ")


def test_an_exception_is_a_failure_with_its_text():
    def broken(lengths, labels):
        raise KeyError("no such class")

    result = check("01.margin_loss", broken, verbose=False)
    assert not result.passed and "KeyError" in result.message and "no such class" in result.message


def test_sys_exit_in_a_student_function_is_a_failure():
    def leaves(logits):
        raise SystemExit(3)

    result = check("02.couplings", leaves, verbose=False)
    assert not result.passed and "SystemExit" in result.message


def test_check_does_not_touch_the_global_rng():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check("02.dynamic_routing", TASKS["02.dynamic_routing"].reference, verbose=False)
    assert torch.equal(torch.rand(3), expected)


def test_record_file_gets_one_json_line_per_check(tmp_path, monkeypatch):
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv(grading.RECORD_ENV, str(record))
    check("01.squash", TASKS["01.squash"].reference, verbose=False)
    check("02.couplings", _couplings_over_inputs, verbose=False)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(r["task"], r["passed"], r["points"], r["max_points"]) for r in lines] == [
        ("01.squash", True, 1, 1), ("02.couplings", False, 0, 1)]
    assert "hint" in lines[1]["message"]


def test_no_record_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(grading.RECORD_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    check("01.squash", TASKS["01.squash"].reference, verbose=False)
    assert not list(tmp_path.iterdir())


def test_chapter_of_notebook():
    assert grading.chapter_of_notebook("exercises/01_capsules.ipynb") == "01"
    assert grading.chapter_of_notebook("Copy of 02_dynamic_routing.ipynb") == "02"
    with pytest.raises(ValueError):
        grading.chapter_of_notebook("homework.ipynb")


def test_grade_notebook_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError):
        grade_notebook(tmp_path / "01_missing.ipynb")
    nb = tmp_path / "01_x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), nb)
    with pytest.raises(ValueError):
        grade_notebook(nb, timeout=0)


# ---------------------------------------------------------------- grading notebooks (kernels)

def _grade_all(folder: Path, out: Path) -> dict:
    """Grade every notebook of ``folder`` once (via grade(), so the CSV is written too); fingerprints around it."""
    paths = [folder / n for n in NOTEBOOKS]
    before = [fingerprint(p) for p in paths]
    reports = grade(paths, out_dir=out, timeout=120)
    return {"reports": reports, "out": out, "before": before, "after": [fingerprint(p) for p in paths]}


@pytest.fixture(scope="session")
def solution_reports(tmp_path_factory):
    return _grade_all(SOLUTIONS, tmp_path_factory.mktemp("solution-reports"))


@pytest.fixture(scope="session")
def exercise_reports(tmp_path_factory):
    return _grade_all(EXERCISES, tmp_path_factory.mktemp("exercise-reports"))


@pytest.fixture(scope="session")
def planted_report(tmp_path_factory):
    """02 with one wrong answer planted: routing_step detaches the agreement (values right, gradients wrong)."""
    folder = tmp_path_factory.mktemp("planted")
    path = folder / "02_dynamic_routing.ipynb"
    nb = nbformat.read(SOLUTIONS / "02_dynamic_routing.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("def routing_step")]
    assert "return v, logits + agreement\n" in cell.source
    cell.source = cell.source.replace("return v, logits + agreement\n", "return v, logits + agreement.detach()\n")
    nbformat.write(nb, path)
    before = fingerprint(path)
    report = grade_notebook(path, timeout=120)
    return {"report": report, "before": before, "after": fingerprint(path)}


HANG_TIMEOUT = 5


@pytest.fixture(scope="session")
def hanging_report(tmp_path_factory):
    """01 with a hanging cell after the first check: it must time out, and the later checks still run."""
    folder = tmp_path_factory.mktemp("hanging")
    path = folder / "01_capsules.ipynb"
    nb = nbformat.read(SOLUTIONS / "01_capsules.ipynb", as_version=4)
    first_check = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.startswith("check("))
    nb.cells.insert(first_check + 1, nbformat.v4.new_code_cell("import time\ntime.sleep(1000)"))
    nbformat.write(nb, path)
    before = fingerprint(path)
    report = grade_notebook(path, timeout=HANG_TIMEOUT)
    return {"report": report, "hang_cell": first_check + 1, "before": before, "after": fingerprint(path)}


# Each fixture is used by exactly one test, so that under pytest-xdist every notebook is still graded once.

@pytest.mark.notebook
def test_solutions_score_full_marks_and_reports_are_written(solution_reports):
    out = solution_reports["out"]
    for report, name in zip(solution_reports["reports"], NOTEBOOKS):
        assert report["max_score"] == sum(p for t, p in POINTS.items() if t.startswith(name[:2]))
        assert report["score"] == report["max_score"], report
        assert all(t["passed"] for t in report["tasks"].values())
        assert report["cell_errors"] == [] and not report["timed_out"] and report["aborted"] is None
        assert report["timeout_cell"] is None and not report["kernel_died"]
        on_disk = json.loads((out / f"{Path(name).stem}.json").read_text())
        assert on_disk["score"] == report["score"] and on_disk["tasks"] == report["tasks"]
        assert on_disk["notebook"].endswith(name)
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [Path(r["notebook"]).name for r in rows] == NOTEBOOKS
    assert set(rows[0]) == {"notebook", "score", "max_score", *POINTS}
    assert [r["score"] for r in rows] == ["3", "5", "5", "4"]
    assert rows[0]["01.squash"] == "1" and rows[0]["02.routing_step"] == ""
    assert rows[1]["02.routing_step"] == "2"
    assert solution_reports["before"] == solution_reports["after"], "grading modified a notebook"


@pytest.mark.notebook
def test_untouched_exercises_score_zero(exercise_reports):
    for report, name in zip(exercise_reports["reports"], NOTEBOOKS):
        assert report["score"] == 0 and report["max_score"] > 0
        assert set(report["tasks"]) == {t for t in POINTS if t.startswith(name[:2])}
        for task in report["tasks"].values():
            assert task["points"] == 0 and not task["passed"]
            assert task["message"].startswith("not implemented yet")
        # the explore cells call the unfinished functions: reported, not fatal
        assert report["cell_errors"] and all(e["ename"] == "NotImplementedError" for e in report["cell_errors"])
        assert not report["timed_out"] and report["aborted"] is None
    assert exercise_reports["before"] == exercise_reports["after"], "grading modified a notebook"


@pytest.mark.notebook
def test_a_planted_wrong_answer_loses_exactly_its_points(planted_report):
    report = planted_report["report"]
    assert report["score"] == report["max_score"] - POINTS["02.routing_step"]
    assert not report["tasks"]["02.routing_step"]["passed"]
    assert "detach" in report["tasks"]["02.routing_step"]["message"]
    assert report["tasks"]["02.couplings"]["passed"] and report["tasks"]["02.dynamic_routing"]["passed"]
    assert planted_report["before"] == planted_report["after"], "grading modified the notebook"


@pytest.mark.notebook
def test_a_hanging_cell_times_out_and_grading_goes_on(hanging_report):
    report = hanging_report["report"]
    assert report["timed_out"] is True
    assert report["timeout_cell"] == hanging_report["hang_cell"]
    assert report["timeout_cells"] == [hanging_report["hang_cell"]]
    assert report["aborted"] is None
    # the checks before and after the hanging cell were all recorded
    assert report["score"] == report["max_score"] == 3
    assert report["duration_s"] < 120
    assert hanging_report["before"] == hanging_report["after"], "grading modified the notebook"


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_every_known_wrong_answer_fails_with_its_own_hint(task_id):
    for wrong in TASKS[task_id].wrong_answers:
        result = check(task_id, wrong.fn, verbose=False)
        assert not result.passed and result.points == 0, wrong.label
        if not result.message.startswith("raised "):  # a wrong answer that crashes gets the crash and the general hint
            assert wrong.hint in result.message, wrong.label
