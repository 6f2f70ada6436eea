"""``check`` in the student's kernel and ``capsule-lab grade`` agree (issue 32): on notebooks with accepted, wrong,
refused and copied answers, every task gets the same points and the same verdict from both, and a task that calls
an earlier task's function is judged on its own (the earlier one replaced by the task's stand-in where the
student's does not pass, in both) — one mistake costs one task."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import nbformat
import pytest

from capsule_lab.grading import check, grade_notebook, tasks_for_chapter
from capsule_lab.grading.engine.child import definitions

ROOT = Path(__file__).resolve().parents[1]


def _copied(fn, name: str) -> str:
    """A student's copy of a package function's source, under another name, with the imports it needs."""
    source = inspect.getsource(fn).replace(f"def {fn.__name__}(", f"def {name}(", 1)
    return f"import torch\nfrom capsule_lab._checks import check_tensor\nfrom capsule_lab.measures.parse_trees import _check_levels\n" \
           f"{source}"


def _variant(chapter: str, replacements: dict) -> nbformat.NotebookNode:
    """The chapter's solutions notebook with the cells defining the named functions replaced."""
    nb = nbformat.read(next((ROOT / "solutions").glob(f"{chapter}_*.ipynb")), as_version=4)
    for name, source in replacements.items():
        (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(f"def {name}(")]
        cell.source = source
    return nb


def _namespace(nb, functions_only: bool = False) -> dict:
    """The notebook's definitions run as the grader's child runs them (a statement that fails is skipped); with
    ``functions_only``, only its imports and functions (no setup cell, no explore cell's names)."""
    namespace: dict = {"__name__": "__main__"}
    for index, module in definitions([c.source if c.cell_type == "code" else None for c in nb.cells]):
        if functions_only and not isinstance(module.body[0], (ast.Import, ast.ImportFrom, ast.FunctionDef)):
            continue
        try:
            exec(compile(module, f"<cell {index}>", "exec"), namespace)
        except Exception:  # noqa: BLE001
            pass
    return namespace


def _checked(nb) -> dict:
    """What ``check`` says of each task when the notebook's definitions are run as in a kernel."""
    namespace = _namespace(nb)
    chapter = nb.metadata["capsule_lab"]["chapter"]
    return {t.id: check(t.id, namespace[t.function], verbose=False) for t in tasks_for_chapter(chapter)}


def _rem_answer():
    from capsule_lab.measures import parse_trees as rem

    return rem


VARIANTS = {
    "05": lambda: {
        # copied from the package's source (with the helpers it calls): refused, by both
        "quantized_keys": _copied(_rem_answer().quantize, "_quantize") + (
            "\ndef quantized_keys(couplings, predictions, levels):\n"
            "    return _quantize(couplings[torch.arange(couplings.shape[0]), :, predictions], levels)\n"),
        # the package's answer called outright: refused
        "global_prune": ("def global_prune(weights, masks, amount):\n"
                         "    from capsule_lab.measures.pruning import global_magnitude_prune\n"
                         "    return global_magnitude_prune(weights, masks, amount)\n"),
    },
    "06": lambda: {
        # wrong (the rows are not squashed); the mini-experiment that calls it is judged with the stand-in
        "regressed_rows": ("def regressed_rows(partial, regression):\n"
                           "    return torch.einsum('bjkde,bje->bjkd', regression, partial)\n"),
    },
}


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.xdist_group("grading-agreement")
@pytest.mark.parametrize("chapter", sorted(VARIANTS))
def test_check_and_grade_agree_on_accepted_wrong_refused_and_copied_answers(chapter, tmp_path):
    nb = _variant(chapter, VARIANTS[chapter]())
    path = tmp_path / f"{chapter}_submission.ipynb"
    nbformat.write(nb, path)
    report = grade_notebook(path, timeout=300)
    checked = _checked(nb)
    assert report["graded"], report["grading_error"]
    for task_id, result in checked.items():
        graded = report["tasks"][task_id]
        assert (graded["points"], graded["passed"]) == (result.points, result.passed), (task_id, graded, result)
        assert (graded["status"] == "refused") == ("AnswerRefused" in result.message), (task_id, graded, result)
        assert ("in place of yours" in graded["message"]) == ("in place of yours" in result.message), task_id
    statuses = {t: r["status"] for t, r in report["tasks"].items()}
    if chapter == "05":
        assert statuses["05.quantize_keys"] == statuses["05.global_prune"] == "refused"
        assert "(called by your `_quantize`)" in report["tasks"]["05.quantize_keys"]["message"]
        # one refused function costs one task: the mini-experiment that calls it is graded with the stand-in
        assert report["tasks"]["05.entropy_vs_iterations"]["passed"]
        assert report["tasks"]["05.entropy_vs_iterations"]["stand_ins"] == ["05.quantize_keys"]
    if chapter == "06":
        assert statuses["06.regression"] == "wrong" and report["tasks"]["06.activity_under_noise"]["passed"]
        assert "`regressed_rows` in place of yours" in report["tasks"]["06.activity_under_noise"]["message"]


def _solutions_namespace(chapter: str) -> dict:
    return _namespace(_variant(chapter, {}), functions_only=True)


def test_a_task_is_checked_on_its_own_function_with_the_stand_in_for_an_earlier_one_that_fails():
    namespace = _solutions_namespace("05")
    experiment = namespace["parse_tree_entropy"]
    right = check("05.entropy_vs_iterations", experiment, verbose=False)
    assert right.passed and "in place of yours" not in right.message
    exec("def quantized_keys(couplings, predictions, levels):\n"        # K + 1 levels: fails task 1
         "    return torch.round(couplings[torch.arange(couplings.shape[0]), :, predictions] * levels).long()\n",
         namespace)
    wrong_keys = namespace["quantized_keys"]
    assert not check("05.quantize_keys", wrong_keys, verbose=False).passed
    result = check("05.entropy_vs_iterations", experiment, verbose=False)
    assert result.passed and result.points == 2
    assert "the course's `quantized_keys` in place of yours, which does not pass 05.quantize_keys" in result.message
    assert namespace["quantized_keys"] is wrong_keys                   # the student's own is put back
    del namespace["class_entropy"]                                     # missing: the stand-in takes its place too
    result = check("05.entropy_vs_iterations", experiment, verbose=False)
    assert result.passed and "`quantized_keys` and `class_entropy` in place of yours" in result.message
    assert "class_entropy" not in namespace


def test_a_refusal_names_the_function_that_made_the_call():
    namespace = _solutions_namespace("05")
    exec("def _level(c, k):\n    from capsule_lab.measures.parse_trees import quantize\n    return quantize(c, k)\n"
         "def quantized_keys(couplings, predictions, levels):\n"
         "    return _level(couplings[torch.arange(couplings.shape[0]), :, predictions], levels)\n", namespace)
    result = check("05.quantize_keys", namespace["quantized_keys"], verbose=False)
    assert not result.passed and "AnswerRefused" in result.message and "(called by your `_level`)" in result.message
    assert "write _level yourself" in result.message


@pytest.mark.parametrize("bad, message", [
    (dict(uses=("05.unknown",)), "must be an earlier task of chapter 05 with a stand_in"),
    (dict(uses=("06.regression",)), "must be an earlier task of chapter 05 with a stand_in"),
    (dict(uses=("05.global_prune",)), "with a stand_in"),                   # 05.global_prune has none
])
def test_uses_names_earlier_tasks_of_the_chapter_that_have_a_stand_in(bad, message):
    from dataclasses import replace

    from capsule_lab.grading import TASKS
    from capsule_lab.grading.tasks import register

    task = replace(TASKS["05.entropy_vs_iterations"], id="05.another_experiment", **bad)
    with pytest.raises(ValueError, match=message):
        register(task)
    assert "05.another_experiment" not in TASKS


def test_every_stand_in_passes_its_own_task():
    """A stand-in is a second implementation, not the reference: it must give the reference's answers."""
    from capsule_lab.grading import TASKS
    from capsule_lab.grading.engine.judging import verdict
    from capsule_lab.grading.engine.running import expected, run_student

    stand_ins = [t for t in TASKS.values() if t.stand_in is not None]
    assert {t.id for t in stand_ins} >= {"05.quantize_keys", "05.class_entropy", "06.regression"}
    for task in stand_ins:
        assert task.stand_in not in task.refused
        cases = expected(task)
        assert verdict(task, cases, run_student(task, task.stand_in, cases, refuse=False))[0] == "passed", task.id


def test_in_the_graders_kernel_a_check_cell_runs_nothing(monkeypatch, capsys):
    """`capsule-lab grade` runs the notebook for its outputs and errors with GRADING_KERNEL_ENV set: a check cell
    there calls nothing (the grade comes from the grader's own evaluation), so 08's check does not train twice."""
    from capsule_lab.grading.engine.checking import GRADING_KERNEL_ENV

    def must_not_run(*args, **kwargs):
        raise AssertionError("check ran the function in the grader's kernel")

    monkeypatch.setenv(GRADING_KERNEL_ENV, "1")
    result = check("08.new_router", must_not_run)
    assert not result.passed and result.points == 0 and "not checked in the grader's kernel" in result.message
    assert capsys.readouterr().out.startswith("– 08.new_router not checked while the notebook is graded")
    with pytest.raises(ValueError):
        check("08.nothing", must_not_run)                    # an unknown id still says so


def test_grade_sets_the_flag_for_the_kernel_only(monkeypatch, tmp_path):
    from capsule_lab.grading.engine.checking import GRADING_KERNEL_ENV
    from capsule_lab.grading.notebooks import report

    seen = {}

    def fake_run(nb, folder, timeout, kernel_name, env, *limits):
        seen["kernel"] = env.get(GRADING_KERNEL_ENV)
        return {"cell_errors": [], "timeout_cells": [], "limit_cells": [], "kernel_restarts": [],
                "kernel_died": False, "aborted": None, "kernel_error": None}

    def fake_score(chapter, sources, folder, tasks, task_timeout, env, *limits):
        seen["evaluation"] = env.get(GRADING_KERNEL_ENV)
        return {"tasks": {t.id: {"points": 0, "max_points": t.points, "status": "error", "passed": False,
                                 "message": "", "hint": ""} for t in tasks},
                "definition_errors": [], "grading_error": None, "evaluations": 0}

    monkeypatch.setattr(report, "run_notebook", fake_run)
    monkeypatch.setattr(report, "score_functions", fake_score)
    path = tmp_path / "01_capsules.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    report.grade_notebook(path, timeout=10)
    assert seen == {"kernel": "1", "evaluation": None}
