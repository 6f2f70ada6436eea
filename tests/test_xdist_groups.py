"""`make test-unit` runs with `-n 2 --dist loadgroup`: tests marked with one `xdist_group` share a worker, so a
session fixture they share (the book build, the smoke run, a graded folder) runs once. With pytest 9.2 and
pytest-xdist 3.8 the marks were silently ignored (each fixture ran on both workers); pyproject.toml pins pytest
below 9.2 for it, and this test fails if a pair of versions breaks the grouping again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


@pytest.mark.slow
def test_a_group_runs_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent("""
        import os
        import pytest

        pytestmark = pytest.mark.xdist_group("together")

        @pytest.mark.parametrize("k", range(6))
        def test_worker(k):
            with open(os.path.join(os.environ["GROUP_OUT"], str(k)), "w") as f:
                f.write(os.environ["PYTEST_XDIST_WORKER"])
    """))
    (tmp_path / "workers").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["GROUP_OUT"] = str(tmp_path / "workers")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                           "-q", "--basetemp", str(tmp_path / "base"), "test_grouped.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = {(tmp_path / "workers" / f"{k}").read_text() for k in range(6)}
    assert len(workers) == 1, f"one xdist_group ran on workers {sorted(workers)}: --dist loadgroup ignores the marks"
