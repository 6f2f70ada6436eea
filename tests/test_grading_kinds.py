"""The three kinds of graded task (issue 14: implementation or bug hunt, prediction, mini-experiment) and
partial credit by case group, on tasks written here (registered for the test, then removed)."""

from __future__ import annotations

import re

import pytest
import torch

from capsule_lab.grading import check
from capsule_lab.grading.engine.judging import credit, earned_points
from capsule_lab.grading.engine.running import expected, run_student
from capsule_lab.grading.tasks import TASKS, Case, Task, register


def _double(x):
    return 2 * x


def _cases():
    g = torch.Generator().manual_seed(0)
    x32 = torch.randn(5, generator=g)
    return [Case("float32 a", (x32,), group="float32"), Case("float32 b", (x32 + 1,), group="float32"),
            Case("float64", (x32.double(),), group="float64"),
            Case("zeros", (torch.zeros(3),), group="zero vectors")]


def _prediction():
    return 0.25          # the reference prediction: e.g. 1/J for J = 4 after one iteration from zero logits


def _experiment(seed=0):
    g = torch.Generator().manual_seed(seed)
    return float(torch.rand(10_000, generator=g).mean())


@pytest.fixture
def tasks():
    made = [
        Task("99.double", "double", 3, _double, _cases, hint="multiply by two", function="double", answers=()),
        Task("99.predict", "predict", 1, _prediction, lambda: [Case("prediction", (), grad="none")],
             hint="one iteration from zero logits: a softmax of equal numbers", function="predict",
             returns_number=True, atol=0.02, rtol=0.0, kind="prediction"),
        Task("99.experiment", "experiment", 2, _experiment, lambda: [Case("seed 3", (3,), grad="none")],
             hint="the mean of uniform numbers", function="experiment", returns_number=True, atol=0.01, rtol=0.0),
    ]
    register(*made)
    yield {t.id: t for t in made}
    for t in made:
        TASKS.pop(t.id)


def test_partial_credit_is_shared_equally_among_the_case_groups(tasks):
    assert tasks["99.double"].groups() == ["float32", "float64", "zero vectors"]
    assert check("99.double", lambda x: x + x, verbose=False).points == 3

    def float32_only(x):                     # a dtype slip: float64 inputs come back as float32
        return (2 * x).float()

    result = check("99.double", float32_only, verbose=False)
    assert not result.passed and result.points == 2 and "float64" in result.message
    assert "partly passed (2/3 points)" in result.line()

    def wrong_on_one_float32_case(x):         # one case of a group fails: the whole group is lost
        return 2 * x if x.dtype == torch.float64 or float(x.abs().sum()) == 0 or float(x.mean()) > 0.5 else 3 * x

    cases = expected(tasks["99.double"])
    fraction, failed = credit(tasks["99.double"], cases, run_student(tasks["99.double"], wrong_on_one_float32_case, cases))
    assert failed == ["float32"] and fraction == pytest.approx(2 / 3)
    assert earned_points(tasks["99.double"], 2 / 3) == 2 and earned_points(tasks["99.double"], 0.5) == 1.5


def test_every_case_runs_when_credit_is_partial_even_after_an_error(tasks):
    def fails_on_float64(x):
        if x.dtype == torch.float64:
            raise RuntimeError("no doubles")
        return 2 * x

    result = check("99.double", fails_on_float64, verbose=False)
    assert result.points == 2 and "raised RuntimeError: no doubles" in result.message


def test_an_answer_that_calls_the_reference_earns_nothing(tasks):
    result = check("99.double", lambda x: _double(x), verbose=False)
    assert result.points == 0 and "raised AnswerRefused" in result.message
    assert "write double yourself" in result.message


def test_a_prediction_is_a_number_within_the_stated_band(tasks):
    assert check("99.predict", lambda: 0.26, verbose=False).passed          # 0.01 from 0.25, band 0.02
    assert check("99.predict", lambda: torch.tensor(0.24), verbose=False).passed
    late = check("99.predict", lambda: 0.3, verbose=False)
    assert not late.passed and "0.3 is outside the accepted band (±0.02 around the measured value" in late.message
    assert "0.25" not in late.message, "a check never shows the number a prediction is compared with"
    assert "softmax of equal numbers" in late.message
    assert "should be a number" in check("99.predict", lambda: "a quarter", verbose=False).message
    assert "not implemented" in check("99.predict", lambda: ..., verbose=False).message


def test_a_mini_experiment_is_compared_with_the_reference_run_within_its_band(tasks):
    def same_experiment(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.rand(10_000, generator=g).mean()

    assert check("99.experiment", same_experiment, verbose=False).passed
    assert not check("99.experiment", lambda seed: 0.6, verbose=False).passed


def test_a_tolerance_must_be_a_nonnegative_number():
    with pytest.raises(ValueError, match="atol must be a number >= 0"):
        register(Task("98.bad", "bad", 1, _prediction, lambda: [], hint="", function="bad", atol=-1.0))
    assert "98.bad" not in TASKS


def test_a_task_kind_is_one_of_the_four():
    with pytest.raises(ValueError, match="kind must be one of"):
        register(Task("98.bad", "bad", 1, _prediction, lambda: [], hint="", function="bad", kind="quiz"))
    assert "98.bad" not in TASKS


@pytest.mark.parametrize("task_id", [t.id for t in TASKS.values() if t.kind == "prediction" and t.id[:2] != "99"])
def test_a_wrong_prediction_is_never_told_the_number(task_id):
    """Every chapter's prediction: a guess outside its band gets "outside the band" and the reasoning hint, and
    neither the message nor the hint shows the value the guess is compared with (at 3 or 4 significant digits)."""
    task = TASKS[task_id]
    (case,) = expected(task)
    value = float(case.want.outputs[0])
    band = (task.atol or 0.0) + (task.rtol or 0.0) * abs(value)
    guess = value + 10 * band + 1.0
    result = check(task_id, lambda *args: guess, verbose=False)
    assert not result.passed and "outside the accepted band" in result.message
    problem, hint = result.message.split(" — hint: ")
    shown = {f"{value:.3g}", f"{value:.4g}", f"{value:.3f}"}

    def found(text, forms):
        return [s for s in forms if re.search(rf"(?<![\d.]){re.escape(s)}(?![\d])", text)]

    assert not found(problem, shown), (problem, shown)
    # the hint may name the task's parameters (a small integer such as K = 6), never the value to a few digits
    assert not found(hint, {s for s in shown if len(s.replace(".", "").lstrip("0")) >= 3}), (hint, shown)
