"""A pytest plugin for the nbval runs: every notebook gets a time limit, and the run ends with each one's time.

Loaded by the Makefile with ``-p tests.nbval_time_limit --notebook-time-limit=SECONDS``. A cell that hangs is
stopped by nbval's own ``--nbval-cell-timeout`` (it interrupts the kernel and fails that cell by name); this
plugin bounds the slow drift that a per-cell limit cannot see: once a notebook has run longer than its limit,
each of its remaining cells fails at once, naming the notebook, its time so far and its slowest cell. So a
stalled or crawling notebook costs at most its limit, never CI's 90 minutes, and says where it stalled. Under
pytest-xdist (``-n 2 --dist loadfile``: each notebook on one worker) the limits hold per worker and the summary
comes from the controller.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

_started: dict[str, float] = {}
_cell_seconds: dict[str, dict[str, float]] = defaultdict(dict)


def pytest_addoption(parser):
    parser.addoption("--notebook-time-limit", type=float, default=None, metavar="SECONDS",
                     help="fail a notebook's remaining cells once it has run this long (nbval runs)")


def _notebook(item) -> str | None:
    parent = getattr(item, "parent", None)
    if parent is None or not str(getattr(parent, "path", "")).endswith(".ipynb"):
        return None
    return parent.nodeid


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    notebook = _notebook(item)
    limit = item.config.getoption("--notebook-time-limit")
    if notebook is None or limit is None:
        return
    now = time.monotonic()
    started = _started.setdefault(notebook, now)
    if now - started > limit:
        cells = _cell_seconds[notebook]
        slowest = max(cells, key=cells.get) if cells else "none"
        pytest.fail(f"{notebook} has run {now - started:.0f} s, over its limit of {limit:.0f} s "
                    f"(slowest cell so far: {slowest}, {cells.get(slowest, 0):.0f} s); "
                    "its remaining cells are not run", pytrace=False)


def pytest_runtest_logreport(report):
    """Each cell's time, from its report: called in the process that ran the cell and, under pytest-xdist, again
    in the controller, so the summary below lists every notebook whichever worker ran it."""
    notebook, _, cell = report.nodeid.partition("::")
    if report.when == "call" and notebook.endswith(".ipynb"):
        _cell_seconds[notebook][cell] = report.duration


def pytest_terminal_summary(terminalreporter):
    if not _cell_seconds:
        return
    terminalreporter.section("notebook times")
    for notebook, cells in _cell_seconds.items():
        slowest = max(cells, key=cells.get)
        terminalreporter.write_line(f"{sum(cells.values()):7.1f} s  {notebook}  "
                                    f"(slowest: {slowest}, {cells[slowest]:.1f} s)")
