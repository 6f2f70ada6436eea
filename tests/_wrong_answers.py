"""Shared by tests/test_tasks_NN.py: a wrong answer fails its task with its own hint."""

from __future__ import annotations

from capsule_lab.grading import TASKS, check


def assert_fails_with_hint(task_id: str, fn, hint: str, capsys) -> None:
    """``fn`` fails ``task_id`` (no more than partial credit), and the message names the mistake's ``hint``."""
    result = check(task_id, fn)
    assert not result.passed and result.points < result.max_points == TASKS[task_id].points
    assert hint in result.message, result.message
    line = capsys.readouterr().out
    assert line.startswith(f"✘ {task_id} ") and " on case '" in line and " — hint: " in line
