"""capsule_lab.grading: the exercise checks of chapters 01–07 and the notebook grader.

Fast tests call ``check`` directly: every task passes with the solution notebook's own function and with
the reference (judged apart from the lock), the reference itself is refused while it is the student's
answer, and plausible wrong answers fail with the right hint. Tests marked ``notebook`` execute
notebooks in fresh kernels (a few seconds each); session fixtures grade each notebook once: the solutions
score full marks, the generated exercises score zero without crashing, a planted wrong answer loses
exactly its task's points, and the graded files are never modified. The attacks on the grader are in
``test_grading_attacks.py``.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import nbformat
import pytest
import torch

import capsule_lab
import capsule_lab.layers.dense
from capsule_lab import grading
from capsule_lab.grading import STATUSES, TASKS, check, grade, grade_notebook
from capsule_lab.grading.engine.judging import BUG_HUNT_HINT, verdict
from capsule_lab.grading.engine.refusal import AnswerRefused, refuse_for_good, refused
from capsule_lab.grading.engine.running import expected, run_student
from capsule_lab.grading.notebooks.written import item_id
from capsule_lab.grading.tasks.questions import QUESTIONS, questions_for_chapter

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
NOTEBOOKS = ["01_capsules.ipynb", "02_dynamic_routing.ipynb", "03_routing_gradients.ipynb", "04_dead_capsules.ipynb",
             "05_rem.ipynb", "06_ladder.ipynb", "07_learned_routing.ipynb", "08_routing_bench.ipynb"]
# The notebook of each task's chapter and the name of the student's function, from the registry; each
# chapter's own tests (tests/test_tasks_NN.py) fix its tasks, points and known wrong answers.
FUNCTION_OF_TASK = {t.id: (next(n for n in NOTEBOOKS if n.startswith(t.chapter)), t.function) for t in TASKS.values()}
POINTS = {t.id: t.points for t in TASKS.values()}


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

def test_registry_tasks_are_complete():
    for task in TASKS.values():
        assert task.title and task.hint and task.cases() and task.function
        assert task.chapter in {n[:2] for n in NOTEBOOKS}
        assert any(c.args for c in task.cases()) or task.returns_number
        assert task.reference in task.refused


def test_one_spelling_of_every_task_id():
    """The docs, notebooks and package name each task by its registered id only (no aliases); a written question's
    id (capsule_lab.grading.tasks.questions) is registered too."""
    assert not hasattr(grading, "ALIASES")
    import re

    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "book").glob("*.md")),
             *sorted(SOLUTIONS.glob("*.ipynb")), *sorted(EXERCISES.glob("*.ipynb")),
             *sorted((ROOT / "capsule_lab").rglob("*.py"))]
    for path in files:
        for tid in re.findall(r"[\"'`](0\d\.[a-z_]+)[\"'`]", path.read_text(encoding="utf8")):
            assert tid in TASKS or tid in QUESTIONS, f"{path.name} names the task {tid!r}, which is not registered"


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        check("03.nothing", lambda x: x)
    for tid in TASKS:
        assert tid in str(err.value)


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_reference_passes_when_judged(task_id):
    task = TASKS[task_id]
    cases = expected(task)
    assert verdict(task, cases, run_student(task, task.reference, cases, refuse=False)) == ("passed", None, "")


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_the_answer_is_refused_as_the_students_answer(task_id, capsys):
    task = TASKS[task_id]
    for answer in task.refused:
        result = check(task_id, lambda *args, **kwargs: answer(*args, **kwargs))
        assert not result.passed and result.points == 0
        assert "this task asks for your own implementation" in result.message
    assert capsys.readouterr().out.startswith(f"✘ {task_id} failed: raised AnswerRefused")
    cases = expected(task)  # and afterwards the answers work again
    assert verdict(task, cases, run_student(task, task.reference, cases, refuse=False))[0] == "passed"


def test_refusal_reaches_every_alias_and_is_undone():
    from capsule_lab.routing import dynamic_routing as aliased

    votes = torch.randn(1, 3, 2, 4)
    with refused([capsule_lab.routing.dynamic_routing, capsule_lab.capsules.squash]):
        for call in (lambda: aliased(votes), lambda: capsule_lab.routing.dynamic_routing(votes),
                     lambda: capsule_lab.squash(votes), lambda: capsule_lab.routing.DynamicRouter()(votes)):
            with pytest.raises(AnswerRefused, match="asks for your own implementation"):
                call()
    assert aliased(votes).poses.shape == (1, 2, 4) and capsule_lab.squash(votes).shape == votes.shape


def test_refusal_rejects_what_it_cannot_refuse():
    with pytest.raises(ValueError):
        with refused([torch.softmax]):
            pass
    with pytest.raises(ValueError):
        refuse_for_good([len])


def test_statuses():
    assert STATUSES == ("passed", "wrong", "error", "timeout", "not found", "refused", "memory limit", "cpu limit")


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
    expected_draw = torch.rand(3)
    torch.manual_seed(0)
    check("02.dynamic_routing", solution_functions("02_dynamic_routing.ipynb")["dynamic_routing"], verbose=False)
    assert torch.equal(torch.rand(3), expected_draw)


def test_check_writes_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSULE_LAB_GRADE_RECORD", str(tmp_path / "record.jsonl"))
    monkeypatch.chdir(tmp_path)
    check("01.squash", solution_functions("01_capsules.ipynb")["squash"], verbose=False)
    assert not list(tmp_path.iterdir())


def test_chapter_of_notebook(tmp_path):
    assert grading.chapter_of_notebook(EXERCISES / "01_capsules.ipynb") == "01"
    assert grading.chapter_of_notebook("Copy of 02_dynamic_routing.ipynb") == "02"
    with pytest.raises(ValueError):
        grading.chapter_of_notebook("homework.ipynb")
    # the metadata wins over the name: a renamed submission keeps its chapter
    renamed = tmp_path / "alice_01_final.ipynb"
    shutil.copy(EXERCISES / "03_routing_gradients.ipynb", renamed)
    assert grading.chapter_of_notebook(renamed) == "03"
    for name in NOTEBOOKS:
        for folder in (SOLUTIONS, EXERCISES):
            nb = nbformat.read(folder / name, as_version=4)
            assert nb.metadata["capsule_lab"]["chapter"] == name[:2]


def test_grade_notebook_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError):
        grade_notebook(tmp_path / "01_missing.ipynb")
    nb = tmp_path / "01_x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), nb)
    with pytest.raises(ValueError):
        grade_notebook(nb, timeout=0)
    with pytest.raises(ValueError):
        grade_notebook(nb, task_timeout=-1)
    with pytest.raises(ValueError, match="no graded tasks"):
        grade_notebook(nb, chapter="99")
    bad = tmp_path / "01_bad.ipynb"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read"):
        grade_notebook(bad)


def test_grade_reports_an_ungradable_notebook_and_goes_on(tmp_path):
    """No chapter in the name or the metadata: a report with graded false, a CSV row without a score, no kernel
    started."""
    nb = tmp_path / "alice.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), nb)
    (report,) = grade([nb], out_dir=tmp_path / "out")
    assert report["graded"] is False and "cannot tell the chapter" in report["grading_error"]
    with open(tmp_path / "out" / "grades.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["graded"] == "no" and row["score"] == row["max_score"] == ""
    assert "cannot tell the chapter" in row["grading_error"]


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


# Each fixture is used by exactly one test, so that under pytest-xdist every notebook is still graded once. The
# solutions and the exercises share one worker ("grading-references", with chapter 08's planted bug): the grader
# computes every chapter's reference answers once per process (grading.engine.evaluation.prepare), chapter 08's by
# training, so one worker computes them once for all three gradings.

@pytest.mark.notebook
@pytest.mark.xdist_group("grading-references")
def test_solutions_score_full_marks_and_reports_are_written(solution_reports):
    out = solution_reports["out"]
    for report, name in zip(solution_reports["reports"], NOTEBOOKS):
        assert report["max_score"] == sum(p for t, p in POINTS.items() if t.startswith(name[:2]))
        assert report["score"] == report["max_score"], report
        assert all(t["passed"] and t["status"] == "passed" and t["hint"] == "" for t in report["tasks"].values())
        assert report["graded"] and report["grading_error"] is None
        # explore cells that call the package's answers fail in the evaluation process: reported, harmless
        # (and in the sandbox, chapter 08's bench cell that starts a process is refused: reported, harmless)
        assert all(e["error"].startswith(("AnswerRefused", "NameError", "PermissionError: the grader does not let"))
                   for e in report["definition_errors"])
        assert report["cell_errors"] == [] and not report["timed_out"] and report["aborted"] is None
        assert report["timeout_cell"] is None and not report["kernel_died"]
        on_disk = json.loads((out / f"{Path(name).stem}.json").read_text())
        assert on_disk["score"] == report["score"] and on_disk["tasks"] == report["tasks"]
        assert on_disk["notebook"].endswith(name)
        # the written answers (model answers here) are recorded with their rubrics, never scored
        assert set(report["written"]) == {q.id for q in questions_for_chapter(name[:2])}
        assert all(w["status"] == "answered" and w["points"] is None and w["rubric"] for w in report["written"].values())
    written = (out / "written.md").read_text()
    for q in QUESTIONS.values():
        assert f"## {item_id(q.id)} — {q.title}" in written and q.rubric[0] in written
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [Path(r["notebook"]).name for r in rows] == NOTEBOOKS
    assert list(rows[0]) == ["notebook", "chapter", "graded", "score", "max_score", *POINTS, "task_timeouts",
                             "task_errors", "task_limits", "cell_timeouts", "cell_errors", "cell_limits", "sandbox",
                             "grading_error", "flags"]
    assert {r["sandbox"] for r in rows} == {"bubblewrap"}                   # graded in the OS sandbox
    assert {r["flags"] for r in rows if r["cell_errors"] == "0"} == {""}    # a flag only beside cell errors
    assert [r["chapter"] for r in rows] == ["01", "02", "03", "04", "05", "06", "07", "08"] and {r["graded"] for r in rows} == {"yes"}
    assert [r["score"] for r in rows] == [str(sum(p for t, p in POINTS.items() if t.startswith(n[:2]))) for n in NOTEBOOKS]
    assert rows[0]["01.squash"] == "1" and rows[0]["02.routing_step"] == ""
    assert rows[1]["02.routing_step"] == "2"
    assert solution_reports["before"] == solution_reports["after"], "grading modified a notebook"


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-references")
def test_untouched_exercises_score_zero(exercise_reports):
    for report, name in zip(exercise_reports["reports"], NOTEBOOKS):
        assert report["score"] == 0 and report["max_score"] > 0
        assert set(report["tasks"]) == {t for t in POINTS if t.startswith(name[:2])}
        for task_id, task in report["tasks"].items():
            assert task["points"] == 0 and not task["passed"] and task["hint"]
            if TASKS[task_id].kind == "bug hunt":      # the given code runs, and fails with its symptom only
                assert task["status"] == "wrong" and task["hint"] == BUG_HUNT_HINT
                assert "expected" in task["message"] and "got" in task["message"]
                assert not any(w.hint in task["message"] for w in TASKS[task_id].wrong_answers)
            else:
                assert task["status"] == "error" and task["message"].startswith("not implemented yet")
        assert {w["status"] for w in report["written"].values()} <= {"empty"}  # the placeholder is no answer
        # the explore cells call the unfinished functions: reported, not fatal; or a bug hunt's given function,
        # whose second bug may raise (07's float32 c⁰ meets float64 votes)
        cells = nbformat.read(EXERCISES / name, as_version=4).cells
        hunted = [TASKS[t].function for t in report["tasks"] if TASKS[t].kind == "bug hunt"]
        assert report["cell_errors"] and all(
            e["ename"] == "NotImplementedError" or any(f"{f}(" in cells[e["cell"]].source for f in hunted)
            for e in report["cell_errors"]), report["cell_errors"]
        assert not report["timed_out"] and report["aborted"] is None
    assert exercise_reports["before"] == exercise_reports["after"], "grading modified a notebook"


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-planted")
def test_a_planted_wrong_answer_loses_exactly_its_points(planted_report):
    report = planted_report["report"]
    assert report["score"] == report["max_score"] - POINTS["02.routing_step"]
    assert not report["tasks"]["02.routing_step"]["passed"]
    assert report["tasks"]["02.routing_step"]["status"] == "wrong"
    assert "detach" in report["tasks"]["02.routing_step"]["hint"]
    assert report["tasks"]["02.couplings"]["passed"] and report["tasks"]["02.dynamic_routing"]["passed"]
    assert planted_report["before"] == planted_report["after"], "grading modified the notebook"


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_every_known_wrong_answer_fails_with_its_own_hint(task_id):
    for wrong in TASKS[task_id].wrong_answers:
        result = check(task_id, wrong.fn, verbose=False)
        assert not result.passed and result.points == 0, wrong.label
        if not result.message.startswith("raised "):  # a wrong answer that crashes gets the crash and the general hint
            assert wrong.hint in result.message, wrong.label


def test_a_second_check_of_a_task_reuses_its_reference_answers(monkeypatch):
    import capsule_lab.grading.engine.checking as checking

    calls = []
    real = checking.expected
    monkeypatch.setattr(checking, "expected", lambda task, cached=False: calls.append(task.id) or real(task, cached))
    monkeypatch.setattr(checking, "_CHECKED", {})
    task = TASKS["01.squash"]
    assert check("01.squash", task.wrong_answers[0].fn, verbose=False).passed is False
    assert check("01.squash", lambda s, dim=-1: task.reference(s, dim), verbose=False).passed is False  # refused
    assert calls == ["01.squash"]                      # the reference ran once, for both checks
    # a task object that is not the registry's (a test's, a reloaded registry's) gets its own answers
    kept = checking._checked_cases(task)
    assert calls == ["01.squash"]
    assert checking._checked_cases(dataclasses.replace(task)) is not kept and calls == ["01.squash"] * 2


def test_a_wrong_dtype_is_advised_only_where_the_inputs_have_the_expected_one():
    """"keep the input's dtype" only where it is true: an integer result (05's keys from float couplings and int64
    predictions) or a result from Python numbers (08.summary) gets the expected dtype and no advice."""
    from capsule_lab.grading.engine.judging import _mismatch
    keys, couplings = torch.zeros(3, dtype=torch.int64), torch.rand(3)
    assert (_mismatch("keys", keys.float(), keys, inputs=(couplings, keys)) ==
            "keys has dtype torch.float32, expected torch.int64")
    assert (_mismatch("mean", torch.zeros((), dtype=torch.float32), torch.zeros((), dtype=torch.float64),
                      inputs=(0.5, 1.5)) == "mean has dtype torch.float32, expected torch.float64")
    assert (_mismatch("poses", couplings.double(), couplings, inputs=(couplings, keys)) ==
            "poses has dtype torch.float64, expected torch.float32 (keep the input's dtype)")
    mixed = (couplings, couplings.double())                           # inputs of two dtypes: no advice either way
    assert _mismatch("poses", couplings.double(), couplings, inputs=mixed).endswith("expected torch.float32")


@pytest.mark.parametrize("chapter", ["05", "06", "07", "08"])
def test_the_notebook_says_which_points_the_instructor_scores(chapter):
    """Exercises 05-08 state the points the instructor scores by hand beside the checked ones, as the registry has
    them: each prediction's reasoning and the written question, and that a report counts them as answered."""
    import re
    points = [q.points for q in questions_for_chapter(chapter)]
    for folder in ("exercises", "solutions"):
        path = next((Path(__file__).resolve().parents[1] / folder).glob(f"{chapter}_*.ipynb"))
        intro = " ".join(nbformat.read(path, as_version=4).cells[0].source.split())
        stated = re.search(r"\*\*Scored by hand\.\*\* (\d+) more points.*?prediction \((\d+)\) and the written "
                           r"question at the end \((\d+)\)", intro)
        assert stated, f"{path.name}: the intro does not say what the instructor scores"
        assert int(stated.group(1)) == sum(points) and sorted(map(int, stated.groups()[1:])) == sorted(points)
        assert "counts them as answered or not" in intro


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-references")
def test_the_gradebook_of_every_solution_and_blank_exercise(solution_reports, exercise_reports, planted_report,
                                                            tmp_path, capsys):
    """Issue 48's loop on the real grader's reports of 17 notebooks, every chapter's solution and blank exercise (two
    students, named by their folders) and the planted wrong answer's 02 (a third, with a partial score and one
    chapter): written.csv made, filled in by the test (the solutions' answers full points, the blank ones 0), merged
    and exported. Each chapter's total is recomputed here from the reports' task points and the points given; the
    Canvas and Moodle files carry those totals."""
    import csv

    from capsule_lab import cli
    from capsule_lab.grading.engine.signing import instructor_key, sign

    out = tmp_path / "class"
    out.mkdir()
    reports = {}
    for graded in (solution_reports, exercise_reports):
        for path in sorted(graded["out"].glob("*.json")):
            report = json.loads(path.read_text(encoding="utf8"))
            who = Path(report["notebook"]).parent.name
            shutil.copy(path, out / f"{who}_{path.name}")
            reports[who, report["chapter"]] = report
    planted = planted_report["report"]                   # graded without a report file: signed here as grade does
    (out / "planted_02.json").write_text(json.dumps(sign(planted, instructor_key())), encoding="utf8")
    partial = Path(planted["notebook"]).parent.name
    reports[partial, "02"] = planted
    assert 0 < planted["score"] < planted["max_score"]
    assert len(reports) == 17 and {w for w, _ in reports} == {"solutions", "exercises", partial}
    assert cli.main(["gradebook", str(out), "--student", "folder"]) == 0
    with open(out / "written.csv", newline="", encoding="utf8") as f:
        written = list(csv.DictReader(f))
    hand_items = {item_id(q.id) for q in QUESTIONS.values()}    # every prediction's reasoning and written question
    assert {(r["student"], r["item"]) for r in written} <= {(w, i) for w in ("solutions", "exercises")
                                                            for i in hand_items}
    assert {r["item"] for r in written if r["student"] == "solutions"} == hand_items
    for r in written:
        r["points"] = r["max_points"] if r["student"] == "solutions" else "0"
    with open(out / "written.csv", "w", newline="", encoding="utf8") as f:
        writer = csv.DictWriter(f, fieldnames=list(written[0]))
        writer.writeheader()
        writer.writerows(written)
    given = {(r["student"], r["item"].split(".")[0]): 0.0 for r in written}
    for r in written:
        given[r["student"], r["item"].split(".")[0]] += float(r["points"])
    capsys.readouterr()
    for platform in ("canvas", "moodle"):
        assert cli.main(["gradebook", str(out), "--student", "folder", "--export", platform]) == 0
    assert f"hand-scored points: {len(written)} entered" in capsys.readouterr().out
    with open(out / "gradebook.csv", newline="", encoding="utf8") as f:
        book = {r["student"]: r for r in csv.DictReader(f)}
    for (who, chapter), report in reports.items():
        checked = sum(t["points"] for t in report["tasks"].values())
        hand_max = sum(q.points for q in QUESTIONS.values() if q.id.startswith(chapter + "."))
        total = checked + given.get((who, chapter), 0.0)
        assert float(book[who][f"{chapter} checked"]) == checked == report["score"], (who, chapter)
        assert float(book[who][f"{chapter} total"]) == total, (who, chapter)
        assert float(book[who][f"{chapter} max"]) == report["max_score"] + hand_max
    assert all(float(book["solutions"][f"{c:02d} total"]) == float(book["solutions"][f"{c:02d} max"])
               for c in range(1, 9))
    assert all(float(book["exercises"][f"{c:02d} total"]) == 0 for c in range(1, 9))
    assert book["solutions"]["status"] == book["exercises"]["status"] == "complete"
    assert book[partial]["02 total"] == str(planted["score"]) and book[partial]["01 total"] == ""
    assert "01: not submitted" in book[partial]["status"]
    with open(out / "moodle.csv", newline="", encoding="utf8") as f:
        moodle = {r["username"]: r for r in csv.DictReader(f)}
    with open(out / "canvas.csv", newline="", encoding="utf8") as f:
        canvas = {row[3]: row for row in list(csv.reader(f))[2:]}
    for who in ("solutions", "exercises", partial):
        totals = [book[who][f"{c:02d} total"] for c in range(1, 9)]
        assert [v for k, v in moodle[who].items() if k != "username"] == totals
        assert canvas[who][5:] == totals
