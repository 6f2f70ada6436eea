"""Shared by tests/test_tasks_NN.py: a wrong answer fails its task with its own hint — except in a bug hunt, whose
check names the symptom only (the case, expected against got), never the mistake or its fix."""

from __future__ import annotations

from capsule_lab.grading import TASKS, check
from capsule_lab.grading.engine.judging import BUG_HUNT_HINT


def assert_fails_with_hint(task_id: str, fn, hint: str, capsys) -> None:
    """``fn`` fails ``task_id`` (no more than partial credit), and the message names the mistake's ``hint``; in a bug
    hunt, the message gives the symptom and does not contain ``hint``."""
    result = check(task_id, fn)
    assert not result.passed and result.points < result.max_points == TASKS[task_id].points
    if TASKS[task_id].kind == "bug hunt":
        problem = result.message.split(" — hint: ")[0]
        assert not [w.label for w in TASKS[task_id].wrong_answers if w.hint in result.message], result.message
        assert BUG_HUNT_HINT in result.message or "nan or inf" in problem or "dtype" in problem \
            or "shape" in problem or "gradient" in problem, result.message
    else:
        assert hint in result.message, result.message
    line = capsys.readouterr().out
    assert line.startswith(f"✘ {task_id} ") and " on case '" in line and " — hint: " in line
