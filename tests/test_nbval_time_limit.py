"""The nbval time-limit plugin (tests/nbval_time_limit.py): a notebook that runs too long fails loudly, by name,
and a cell that hangs is stopped by the per-cell timeout, so neither can eat CI's time silently."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def notebook(path: Path, sources: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s, execution_count=i + 1) for i, s in enumerate(sources)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def run_nbval(path: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "-p", "tests.nbval_time_limit",
         "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--rootdir", str(path.parent), *options, str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=180)


@pytest.mark.xdist_group("kernels")
def test_a_notebook_over_its_limit_fails_its_remaining_cells_by_name(tmp_path):
    path = notebook(tmp_path / "slow.ipynb", ["import time; time.sleep(3)", "x = 1", "y = 2"])
    result = run_nbval(path, "--notebook-time-limit=1")
    out = result.stdout
    assert result.returncode == 1, out
    assert "1 passed, 2 errors" in out, out                 # the cells after the limit are not run
    assert "slow.ipynb has run" in out and "over its limit of 1 s" in out, out
    assert "slowest cell so far: Cell 0" in out, out
    assert "notebook times" in out and "slow.ipynb" in out.split("notebook times")[1]


@pytest.mark.xdist_group("kernels")
def test_within_the_limit_nothing_changes(tmp_path):
    path = notebook(tmp_path / "fast.ipynb", ["x = 1", "print(x)"])
    result = run_nbval(path, "--notebook-time-limit=120")
    assert result.returncode == 0, result.stdout
    assert "2 passed" in result.stdout


@pytest.mark.xdist_group("kernels")
def test_a_hanging_cell_is_stopped_by_the_cell_timeout_and_named(tmp_path):
    path = notebook(tmp_path / "hang.ipynb", ["import time\nwhile True:\n    time.sleep(0.1)", "print('after')"])
    result = run_nbval(path, "--nbval-cell-timeout=2", "--notebook-time-limit=120")
    assert result.returncode == 1, result.stdout
    assert "Timeout of 2 seconds exceeded" in result.stdout, result.stdout
    assert "hang.ipynb::Cell 0" in result.stdout
