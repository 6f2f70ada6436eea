"""Shared pytest set-up for tests/ (kept minimal on purpose).

Tests always use the quick profile unless the caller asks otherwise, so that a machine with a GPU does not
silently switch notebooks and grading runs to the papers' full settings.

``make test-fast`` leaves out the marks ``notebook``, ``book`` and ``slow``. A test parametrized over a task
whose reference trains a network (:data:`SLOW_TASKS`: 10–40 s a case on one thread) is marked ``slow`` here, so
the registry-wide tests stay in the inner loop for every other task, and all of that task's tests share one
xdist worker (``make test`` runs ``--dist loadgroup``), where its reference answers are computed once.
"""

import os
import tempfile

import pytest

os.environ.setdefault("CAPSULE_LAB_PROFILE", "quick")
# Reference answers kept on disk (capsule_lab.grading.engine.reference_cache) go to a folder of this test process, not
# the user's cache: every test run computes them afresh, and the kernels and children it starts inherit the folder.
os.environ.setdefault("CAPSULE_LAB_CACHE", tempfile.mkdtemp(prefix="capsule-lab-test-cache-"))
# the instructor's key the grader signs with: made on first use in a folder of the tests' own, never ~/.config
os.environ.setdefault("CAPSULE_LAB_GRADER_KEY", os.path.join(tempfile.mkdtemp(prefix="capsule-lab-test-key-"),
                                                             "grader.key"))

#: The tasks whose reference answer trains networks (chapter 04's revival runs, chapter 08's bench of a router).
SLOW_TASKS = frozenset({"04.revival", "08.new_router"})


@pytest.hookimpl(tryfirst=True)     # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        task = params.get("task_id")
        if task in SLOW_TASKS and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.slow)
            # one worker runs all of a slow task's tests, so that check() trains its reference once for them
            # (grading.engine.checking keeps a task's reference answers for the process), not once per worker and test
            item.add_marker(pytest.mark.xdist_group(f"task-{task}"))


#: The draw the tests give check's drawn seeds (grading.engine.checking.fresh_draw: new at every call otherwise).
CHECK_DRAW = 2026


@pytest.fixture
def check_draw(monkeypatch):
    """Fix the seeds ``check`` draws for an experiment's cases (:func:`~capsule_lab.grading.tasks.registry.case_seed`)
    and return ``cases(task)``: the task's cases as check then runs them, so a test can compute their answers."""
    from capsule_lab.grading.engine import checking
    from capsule_lab.grading.tasks.registry import drawn

    monkeypatch.setattr(checking, "fresh_draw", lambda: CHECK_DRAW)

    def cases(task):
        with drawn(CHECK_DRAW):
            return task.cases()
    return cases
