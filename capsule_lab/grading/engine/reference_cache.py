"""The reference answers of every task, kept on disk: a second ``check`` of a task, or the grading of a second
notebook, compares at once instead of running the reference again. Exercises 01–08.

A task's reference answers (its outputs and gradients on each case, and the weights of the projection whose
gradient is compared) depend only on the task's code, the package's code it calls and torch; so do the outputs of
its known mistakes, which a failed check runs to name the hint. So they are kept in one file per task and part,
``<cache>/references/<task id>-<part>-<key>.pt`` (``reference``, ``wrong1``, ...), whose ``key`` hashes the task id, the
package's version, the sha256 of every source file of the package (:func:`package_fingerprint`: any change to any module
computes them again; a per-task digest of the task's own module would miss a change in a function its reference
calls) and torch's version. ``<cache>`` is ``$CAPSULE_LAB_CACHE``, else ``$XDG_CACHE_HOME/capsule-lab``, else
``~/.cache/capsule-lab``.

The cases themselves (the inputs, seeded) are built again each time: they are cheap, and the file holds no code,
only tensors, read with ``torch.load(weights_only=True)`` and checked field by field
(:func:`~capsule_lab.grading.engine.records.from_record`); a file that does not match its task is ignored and written
again. A cache that cannot be written (a read-only home) only costs the time. While a notebook's functions are
graded, the evaluation process refuses to open anything under ``<cache>`` (:mod:`capsule_lab.grading.engine.child`),
and in the OS sandbox the folder is not there at all: the answers stay with the grader.

**The grader's cache is its own.** ``check`` in a student's kernel keeps ``<cache>/references``, unsigned: feedback
only. The grader (:func:`signed_by`, entered by ``grade_notebook`` and every grading worker with the instructor's key,
:mod:`.signing`) reads and writes ``<cache>/grader`` instead (mode 0700), where every file starts with a line
``capsule-lab-mac <hex>``, the HMAC of the rest under the key; a file without a MAC that verifies is removed and
computed again, so answers written by anyone without the key are never compared against.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Iterator

import torch

import capsule_lab

from .records import from_record, to_record
from .signing import mac_bytes

__all__ = ["CACHE_ENV", "cache_root", "references_dir", "signed_by", "package_fingerprint", "cache_path", "load",
           "save", "load_mistake", "save_mistake"]

#: The environment variable that moves the cache (tests point it at a temporary folder).
CACHE_ENV = "CAPSULE_LAB_CACHE"
_FORMAT = 2


def cache_root() -> Path:
    """``$CAPSULE_LAB_CACHE``, else ``$XDG_CACHE_HOME/capsule-lab``, else ``~/.cache/capsule-lab``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "capsule-lab"


_KEY: list = []     # the grader's key while :func:`signed_by` is active (the innermost last)
_MAC_LINE = b"capsule-lab-mac "


def references_dir() -> Path:
    """The folder of the reference answers, one file per task: ``<cache>/references`` (``check``), or the grader's
    own ``<cache>/grader`` while :func:`signed_by` is active."""
    return cache_root() / ("grader" if _KEY else "references")


@contextlib.contextmanager
def signed_by(key: bytes) -> Iterator[None]:
    """Within the block, this process reads and writes the grader's cache (``<cache>/grader``), every file signed
    with ``key`` (the instructor's, :func:`~capsule_lab.grading.engine.signing.instructor_key`) and read only when
    its MAC verifies (``capsule-lab grade``)."""
    mac_bytes(b"", key)   # checks the key
    _KEY.append(key)
    try:
        yield
    finally:
        _KEY.pop()


def package_fingerprint() -> dict:
    """``{"version", "digest"}``: the package's version and the sha256 of every source file of ``capsule_lab``
    (relative path and bytes). It keys the reference cache and a grading report's grader."""
    root = Path(capsule_lab.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return {"version": capsule_lab.__version__, "digest": digest.hexdigest()}


_FINGERPRINT: list = []     # the package's fingerprint, taken once per process (the first cache access)


def _key(task_id: str) -> str:
    if not _FINGERPRINT:
        _FINGERPRINT.append(package_fingerprint())
    fingerprint = _FINGERPRINT[0]
    text = "\0".join([str(_FORMAT), task_id, fingerprint["version"], fingerprint["digest"], torch.__version__])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def cache_path(task, part: str = "reference") -> Path:
    """Where ``part`` of ``task``'s answers is kept, for this package and this torch: ``"reference"`` (the reference's
    answers) or ``"wrong<k>"`` (the outputs of the task's k-th known mistake, which name the hint)."""
    if not (part == "reference" or (part.startswith("wrong") and part[5:].isdigit())):
        raise ValueError(f"part must be 'reference' or 'wrong<k>', got {part!r}")
    return references_dir() / f"{task.id}-{part}-{_key(task.id)}.pt"


def _read(task, part: str) -> dict | None:
    """The kept file of ``part`` of ``task`` as checked plain data, or None (a damaged or foreign file is removed)."""
    path = cache_path(task, part)
    if not path.is_file():
        return None
    try:
        raw = path.read_bytes()
        if _KEY:        # the grader's cache: the first line is the MAC of the rest
            line, _, raw = raw.partition(b"\n")
            if not line.startswith(_MAC_LINE) or line[len(_MAC_LINE):].decode("ascii") != mac_bytes(raw, _KEY[-1]):
                raise ValueError("not signed with the grader's key")
        data = torch.load(io.BytesIO(raw), weights_only=True)
        if not isinstance(data, dict) or (data.get("format"), data.get("task"), data.get("part")) != (
                _FORMAT, task.id, part):
            raise ValueError("another task's file")
        return data
    except Exception:  # a damaged or foreign file: compute again
        path.unlink(missing_ok=True)
        return None


def _write(task, part: str, data: dict) -> Path | None:
    """Write ``data`` atomically as ``part`` of ``task`` and remove that part's files of other keys (an older package
    or torch); None when the cache cannot be written."""
    path = cache_path(task, part)
    data = {"format": _FORMAT, "task": task.id, "part": part, **data}
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700 if _KEY else 0o777)
        buffer = io.BytesIO()
        torch.save(data, buffer)
        raw = buffer.getvalue()
        if _KEY:
            raw = _MAC_LINE + mac_bytes(raw, _KEY[-1]).encode("ascii") + b"\n" + raw
        handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{task.id}-", suffix=".tmp")
        with os.fdopen(handle, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
        for old in path.parent.glob(f"{task.id}-{part}-*.pt"):     # kept for an older package or torch
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        return None
    return path


def load(task, cases: list) -> list | None:
    """The kept reference answers of ``task`` on ``cases`` (its :class:`~capsule_lab.grading.tasks.registry.Case` list),
    as ``[(weights, want)]`` in case order, or None when there are none for this package and torch, or the file
    does not match the task (then it is removed)."""
    data = _read(task, "reference")
    if data is None:
        return None
    try:
        entries = data["cases"]
        if not isinstance(entries, list) or [e.get("name") for e in entries] != [c.name for c in cases]:
            raise ValueError("other cases")
        out = []
        for entry in entries:
            weights = entry["weights"]
            if weights is not None and not (isinstance(weights, list)
                                            and all(type(w) is torch.Tensor for w in weights)):
                raise ValueError("malformed weights")
            out.append((weights, from_record(entry["want"], task)))
        return out
    except Exception:
        cache_path(task).unlink(missing_ok=True)
        return None


def save(task, expected: list) -> Path | None:
    """Keep the reference answers of ``task`` (``expected``: its :class:`~capsule_lab.grading.engine.running.Expected`
    list), written atomically, and remove the task's files of other keys (an older package or torch); returns the
    file, or None when the cache cannot be written."""
    return _write(task, "reference", {"cases": [{"name": e.case.name, "weights": e.weights,
                                                 "want": to_record(e.want)} for e in expected]})


def load_mistake(task, index: int, case_name: str):
    """The kept outputs of ``task.wrong_answers[index]`` on the case ``case_name`` (an evaluation, as
    :func:`~capsule_lab.grading.engine.records.from_record` gives it), or None when they were never kept."""
    data = _read(task, f"wrong{index}")
    if data is None or not isinstance(data.get("cases"), dict) or case_name not in data["cases"]:
        return None
    try:
        return from_record(data["cases"][case_name], task)
    except ValueError:
        cache_path(task, f"wrong{index}").unlink(missing_ok=True)
        return None


def save_mistake(task, index: int, case_name: str, evaluation) -> Path | None:
    """Keep the outputs of ``task.wrong_answers[index]`` on the case ``case_name`` beside those already kept."""
    data = _read(task, f"wrong{index}")
    cases = dict(data["cases"]) if data is not None and isinstance(data.get("cases"), dict) else {}
    cases[case_name] = to_record(evaluation)
    return _write(task, f"wrong{index}", {"cases": cases})
