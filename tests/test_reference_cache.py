"""capsule_lab.grading.engine.reference_cache: reference answers kept on disk per task, keyed by the package's source
and torch; read back exactly, never from a damaged or foreign file, and closed to the student's graded functions."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch

from capsule_lab.grading import get_task, grade_notebook
from capsule_lab.grading.engine import reference_cache as rc
from capsule_lab.grading.engine.running import expected
from capsule_lab.grading.engine.signing import instructor_key, mac_bytes

ROOT = Path(__file__).resolve().parents[1]
# An implementation with gradients, a prediction (a number, no gradient), an experiment (a number it measures).
TASKS = ("01.squash", "02.predict_coupling", "02.coupling_sharpness")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(rc.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / "references"


def _raise(*args, **kwargs):
    raise AssertionError("the reference ran although its answers were kept")


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all((x is None and y is None) or (x is not None and y is not None and x.dtype == y.dtype
                                                                  and torch.equal(x, y)) for x, y in zip(a, b))


@pytest.mark.parametrize("task_id", TASKS)
def test_answers_are_kept_and_read_back_exactly_without_running_the_reference(cache, task_id):
    task = get_task(task_id)
    computed = expected(task)
    first = expected(task, cached=True)
    path = rc.cache_path(task)
    assert path.is_file() and path.parent == cache
    again = expected(dataclasses.replace(task, reference=_raise), cached=True)   # same id: read from the file
    for want, kept_first, kept in zip(computed, first, again):
        assert kept.case.name == want.case.name
        assert _same(kept.weights, want.weights)
        assert _same(kept.want.outputs, want.want.outputs) and _same(kept.want.grads, want.want.grads)
        assert kept.want.differentiable == want.want.differentiable and kept.want.error is None
        assert _same(kept_first.want.outputs, want.want.outputs)


def test_a_known_mistake_is_kept_too_and_still_names_its_hint(cache, monkeypatch):
    import capsule_lab.grading.engine.checking as checking
    import capsule_lab.grading.engine.judging as judging
    import capsule_lab.grading.engine.running as running

    task = get_task("01.squash")
    wrong = task.wrong_answers[0]

    def mistaken(s, dim=-1):                               # the student's own code, with the first known mistake
        return s / (1 + (s * s).sum(dim=dim, keepdim=True))

    monkeypatch.setattr(judging, "_MISTAKES", {})         # nothing kept from an earlier test in this process
    first = checking._run_checks(task, mistaken)
    assert first[1] == wrong.hint and rc.cache_path(task, "wrong0").is_file()
    monkeypatch.setattr(judging, "_MISTAKES", {})         # a new process: only the file is left
    unrunnable = dataclasses.replace(task, wrong_answers=tuple(dataclasses.replace(w, fn=_raise)
                                                               for w in task.wrong_answers))
    again = judging.verdict(unrunnable, running.expected(unrunnable, cached=True),
                            running.run_student(unrunnable, mistaken, running.expected(unrunnable, cached=True)))
    assert again[2] == wrong.hint
    with pytest.raises(ValueError, match="part must be"):
        rc.cache_path(task, "answers")


def test_the_key_changes_with_torch_and_with_the_package_source(cache, monkeypatch):
    task = get_task("01.squash")
    path = rc.cache_path(task)
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    other_torch = rc.cache_path(task)
    monkeypatch.undo()
    monkeypatch.setenv(rc.CACHE_ENV, str(cache.parent))
    monkeypatch.setattr(rc, "_FINGERPRINT", [{"version": "0.1.0", "digest": "0" * 64}])
    other_source = rc.cache_path(task)
    assert len({path, other_torch, other_source}) == 3
    assert rc.cache_path(get_task("01.margin_loss")) != path


def test_saving_removes_the_files_of_older_keys(cache, monkeypatch):
    task = get_task("01.squash")
    monkeypatch.setattr(rc, "_FINGERPRINT", [{"version": "0.0.9", "digest": "1" * 64}])
    old = rc.save(task, expected(task))
    monkeypatch.undo()
    monkeypatch.setenv(rc.CACHE_ENV, str(cache.parent))
    new = rc.save(task, expected(task))
    assert old != new and new.is_file() and not old.exists()


def test_a_damaged_or_foreign_file_is_ignored_and_written_again(cache):
    task = get_task("01.squash")
    right = expected(task)
    path = rc.cache_path(task)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a torch file")
    got = expected(task, cached=True)
    assert all(_same(g.want.outputs, w.want.outputs) for g, w in zip(got, right))
    assert rc.load(task, task.cases()) is not None, "written again"
    other = get_task("01.margin_loss")
    expected(other, cached=True)
    rc.cache_path(other).replace(path)                       # another task's answers under this task's name
    assert rc.load(task, task.cases()) is None and not path.exists()


def test_a_cache_that_cannot_be_written_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(rc.CACHE_ENV, str(blocker))
    task = get_task("01.squash")
    assert rc.save(task, expected(task)) is None
    assert all(_same(g.want.outputs, w.want.outputs) for g, w in zip(expected(task, cached=True), expected(task)))


KEY = bytes(range(32))


def test_the_grader_keeps_its_own_signed_cache_apart_from_check(cache):
    task = get_task("01.squash")
    right = expected(task)
    student = rc.save(task, right)                           # check's cache: no key
    with rc.signed_by(KEY):
        graders = rc.save(task, right)
        assert graders.parent == cache.parent / "grader" and graders.parent != student.parent
        assert oct(graders.parent.stat().st_mode & 0o777) == oct(0o700)
        raw = graders.read_bytes()
        line, _, payload = raw.partition(b"\n")
        # the MAC line is the HMAC-SHA256 of the rest, computed here independently of the package
        import hashlib
        import hmac
        assert line == b"capsule-lab-mac " + hmac.new(KEY, payload, hashlib.sha256).hexdigest().encode()
        assert torch.load(student, weights_only=True)["cases"][0]["name"] == right[0].case.name
        kept = rc.load(task, task.cases())
        assert kept is not None and all(_same(k[1].outputs, w.want.outputs) for k, w in zip(kept, right))
    with rc.signed_by(bytes(32)):                            # another key: the file does not verify, is removed
        assert rc.load(task, task.cases()) is None and not graders.exists()


def test_answers_poisoned_without_the_key_are_never_compared_against(cache):
    """The issue's cache poisoning: valid cache files with wrong answers under the grader's file name, written by
    code without the instructor's key (unsigned, or signed with a key of its own). The grader ignores them,
    removes them and computes the answers again."""
    task = get_task("01.squash")
    right = expected(task)
    wrong = [dataclasses.replace(e, want=dataclasses.replace(e.want, outputs=tuple(torch.zeros_like(o)
                                                                                  for o in e.want.outputs)))
             for e in right]
    with rc.signed_by(KEY):
        path = rc.cache_path(task)
    with rc.signed_by(bytes(32)):                            # a file as the grader writes it, under another key
        assert rc.save(task, wrong) == path
    forged_with_other_key = path.read_bytes()
    unsigned = forged_with_other_key.partition(b"\n")[2]   # or no MAC line at all
    for forged in (forged_with_other_key, unsigned, b"capsule-lab-mac " + mac_bytes(b"", KEY).encode() + b"\n" + unsigned):
        path.write_bytes(forged)
        with rc.signed_by(KEY):
            got = expected(task, cached=True)
            assert all(_same(g.want.outputs, w.want.outputs) for g, w in zip(got, right))
            assert path.read_bytes() != forged and rc.load(task, task.cases()) is not None   # written again, signed


def test_default_location_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv(rc.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert rc.references_dir() == tmp_path / "capsule-lab" / "references"


CHECK_ONCE = """
from capsule_lab.grading import check
check("{task}", lambda *args: 0.0, verbose=False)
"""


def _check_in_a_new_process(task_id: str, env: dict) -> None:
    subprocess.run([sys.executable, "-c", CHECK_ONCE.format(task=task_id)], env=env, check=True,
                   capture_output=True, text=True, timeout=600)


def _kept_file(folder: Path, task_id: str) -> tuple[Path, list[str], tuple]:
    """The one reference file of ``task_id`` in ``folder``: its path, the names of the cases it holds, and its
    (inode, modification time), which a new save changes (files are replaced atomically)."""
    (path,) = (folder / "references").glob(f"{task_id}-reference-*.pt")
    data = torch.load(path, weights_only=True)
    return path, [e["name"] for e in data["cases"]], (path.stat().st_ino, path.stat().st_mtime_ns)


@pytest.mark.slow
@pytest.mark.parametrize("task_id, kept", [("06.activity_under_noise", 3), ("08.new_router", 1)])
def test_a_second_check_in_a_new_process_reads_the_reference_from_disk(tmp_path, task_id, kept):
    """An experiment runs its reference at the first check (08's trains two networks); a check in a new process reads
    it from the cache, which it therefore does not write again. The drawn seeds are new at every check (no table of
    answers holds them): only the ``kept`` cases of seed 0 are kept."""
    env = dict(os.environ, **{rc.CACHE_ENV: str(tmp_path)}, OMP_NUM_THREADS="1")
    names = [c.name for c in get_task(task_id).cases()]
    _check_in_a_new_process(task_id, env)
    path, held, stamp = _kept_file(tmp_path, task_id)
    assert held == names[:kept] and all(", drawn" not in n and "seed 0" in n for n in held)
    _check_in_a_new_process(task_id, env)
    assert _kept_file(tmp_path, task_id)[1:] == (held, stamp), "the second check computed the reference again"


def test_a_case_without_gradients_runs_the_reference_once():
    """The reference runs once per values-only case (an experiment trains its networks once) and twice per gradient
    case (its outputs shape the projection whose gradient is compared)."""
    for task_id in ("08.new_router", "01.squash"):
        task = get_task(task_id)
        calls = []

        def counted(*args, _ref=task.reference, **kwargs):
            calls.append(1)
            return _ref(*args, **kwargs)

        cases = task.cases()[:1] if task.kind == "experiment" else task.cases()
        if task.kind == "experiment":           # the smallest stand-in for training: the case's inputs, no network
            counted = lambda *args, **kwargs: (calls.append(1), torch.tensor(0.5))[1]   # noqa: E731
        got = expected(dataclasses.replace(task, reference=counted, cases=lambda cases=cases: cases))
        want = sum(1 if c.grad == "none" else 2 for c in cases)
        assert len(calls) == want and len(got) == len(cases), (task_id, len(calls), want)


CACHE_READER = '''\
def squash(s, dim=-1):
    import glob, os
    import torch
    files = glob.glob(os.path.join(os.environ["{env}"], "grader", "01.squash-*.pt"))
    assert files, "no kept answers to read"
    return torch.load(files[0], weights_only=True)
'''


@pytest.mark.notebook
def test_a_graded_function_cannot_read_the_kept_answers(tmp_path, monkeypatch):
    from capsule_lab.grading.engine import evaluation

    monkeypatch.setenv(rc.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(evaluation, "_EXPECTED", {})  # this worker may have prepared 01 already, elsewhere
    nb = nbformat.read(ROOT / "solutions" / "01_capsules.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("def squash(")]
    cell.source = CACHE_READER.format(env=rc.CACHE_ENV)
    path = tmp_path / "01_capsules.ipynb"
    nbformat.write(nb, path)
    start = time.perf_counter()
    # the evaluation's own refusal, without the OS sandbox (inside it the cache is not even mounted:
    # tests/test_grading_sandbox.py)
    report = grade_notebook(path, sandbox=False)
    squash = report["tasks"]["01.squash"]
    with rc.signed_by(instructor_key()):
        assert rc.cache_path(get_task("01.squash")).is_file(), "the grader kept the answers before grading"
    assert squash["status"] == "error" and "refuses to open" in squash["message"], squash
    assert report["tasks"]["01.margin_loss"]["status"] == "passed"
    assert time.perf_counter() - start < 600
