"""Chapter 03's graded tasks (gradients through routing): their points (each task's own known mistakes are tested from the
registry in tests/test_grading.py)."""

from __future__ import annotations

from capsule_lab.grading import tasks_for_chapter

POINTS = {"03.softmax_jacobian": 1, "03.constant_coupling_gradient": 2, "03.detached_routing": 2}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("03")} == POINTS
