"""Chapter 04's graded tasks (dead capsules): their points (each task's own known mistakes are tested from the
registry in tests/test_grading.py)."""

from __future__ import annotations

from capsule_lab.grading import tasks_for_chapter

POINTS = {"04.dyr": 2, "04.dead_capsules": 1, "04.active_rate": 1}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("04")} == POINTS
