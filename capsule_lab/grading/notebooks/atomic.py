"""Writing the grader's files atomically (``capsule-lab grade``, ``grade-merge``; every chapter's exercises).

Every file the grader writes into its output folder — a notebook's JSON report, ``grades.csv``, ``written.md`` —
goes through :func:`write_atomic`: a uniquely named temporary file in the same folder, then a rename, so that a
reader (or a second grader writing the same folder, a shard) never sees half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic", "write_json"]


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a uniquely named temporary file in the same folder and a rename, so
    a reader (or a second grader writing the same folder) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf8", newline="") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 → what open() would have given
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` as indented JSON (UTF-8, a newline at the end), atomically (:func:`write_atomic`)."""
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
