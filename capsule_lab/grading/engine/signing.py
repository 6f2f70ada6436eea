"""The instructor's key, and the MACs with which the grader signs what it writes: each notebook's report and
each entry of its reference cache (``capsule-lab grade``, ``capsule-lab grade-merge``; every chapter's exercises).

A score is only as good as the file that carries it. A report in the output folder decides whether a notebook is
graded again (a batch resumes from the folder) and what ``grade-merge`` copies; an entry of the reference cache
decides what counts as the right answer. Anyone who can write those folders — a notebook graded without the
sandbox, a student handing in a shard's folder — could otherwise write a report or an answer the grader would
take as its own. So each carries a MAC, an HMAC-SHA256 (Python's ``hmac``) under a key only the instructor holds:

- the key is 32 random bytes (``secrets.token_bytes``), written as hex to :func:`key_path`
  (``$CAPSULE_LAB_GRADER_KEY``, else ``$XDG_CONFIG_HOME/capsule-lab/grader.key``, else
  ``~/.config/capsule-lab/grader.key``) on first use, with mode 0600 in a folder of mode 0700
  (:func:`instructor_key`). A key others may read, or one inside the folder it signs, is refused;
- a report's MAC covers its JSON, keys sorted (:func:`canonical`); :func:`sign` adds it as ``"mac"``,
  :func:`verify` checks it in constant time (``hmac.compare_digest``);
- a cache entry's MAC covers the file's bytes (:func:`mac_bytes`).

Shards graded on several machines need the same key on each (copy the file, keep its mode). A MAC proves who
wrote a file, not that the machine was honest: with ``--no-sandbox`` a notebook's code runs with the instructor's
rights and can read the key (``book/instructors.md``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Iterable

__all__ = ["KEY_ENV", "MAC_FIELD", "key_path", "instructor_key", "existing_key", "canonical", "mac_bytes", "sign",
           "verify"]

#: The environment variable that names the key's file.
KEY_ENV = "CAPSULE_LAB_GRADER_KEY"
#: The field of a signed report that holds its MAC.
MAC_FIELD = "mac"
_KEY_BYTES = 32


def key_path(given: str | os.PathLike | None = None) -> Path:
    """Where the instructor's key lives: ``given`` (``--key``), else ``$CAPSULE_LAB_GRADER_KEY``, else
    ``$XDG_CONFIG_HOME/capsule-lab/grader.key``, else ``~/.config/capsule-lab/grader.key``."""
    if given is not None:
        return Path(given).expanduser()
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base).expanduser() / "capsule-lab" / "grader.key"


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def instructor_key(path: str | os.PathLike | None = None, outside: Iterable[str | os.PathLike] = ()) -> bytes:
    """The instructor's key (32 bytes) read from ``path`` (default :func:`key_path`), created there on first use
    (mode 0600; its folder, when new, 0700).

    Raises ``ValueError`` when the file lies inside one of the folders ``outside`` (the grader's output folder: the
    key would travel with the reports it signs), when group or others may read or write it (``chmod 600`` it),
    or when it does not hold a key (64 hex digits)."""
    path = key_path(path)
    for folder in outside:
        if _inside(path, Path(folder)):
            raise ValueError(f"the grader's key {path} lies inside {folder}, the folder of what it signs: keep it "
                             f"elsewhere (${KEY_ENV} names its file)")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass        # another grader created it meanwhile: read theirs
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_bytes(_KEY_BYTES).hex() + "\n")
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"the grader's key {path} is not a file")
    if info.st_mode & 0o077:
        raise ValueError(f"the grader's key {path} may be read or written by others (mode "
                         f"{stat.S_IMODE(info.st_mode):04o}): run `chmod 600 {path}`")
    text = path.read_text(encoding="ascii", errors="replace").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != _KEY_BYTES:
        raise ValueError(f"{path} does not hold a grader's key ({2 * _KEY_BYTES} hex digits); move it away and a "
                         "new key is made on the next run (reports signed with the old one are then graded again)")
    return key


def existing_key(path: str | os.PathLike | None = None, outside: Iterable[str | os.PathLike] = ()) -> bytes:
    """:func:`instructor_key`, but never made here: ``ValueError`` when there is no key at ``path`` (a merge checks
    reports with the key they were signed with; a new one would refuse them all)."""
    if not key_path(path).is_file():
        raise ValueError(f"no grader's key at {key_path(path)}: merge with the key the shards were graded with (--key)")
    return instructor_key(path, outside)


def canonical(data: dict) -> bytes:
    """The bytes a report's MAC covers: its JSON without ``"mac"``, keys sorted, no spaces, UTF-8 (as read back
    from the file: tuples are lists, keys strings)."""
    plain = json.loads(json.dumps({k: v for k, v in data.items() if k != MAC_FIELD}))
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf8")


def _check_key(key) -> None:
    if not isinstance(key, bytes) or len(key) < 16:
        raise ValueError(f"a grader's key must be bytes (at least 16), got {type(key).__name__}")


def mac_bytes(payload: bytes, key: bytes) -> str:
    """The HMAC-SHA256 of ``payload`` under ``key``, as hex."""
    _check_key(key)
    return hmac.new(key, payload, hashlib.sha256).hexdigest()


def sign(data: dict, key: bytes) -> dict:
    """``data`` with ``"mac"``: the HMAC-SHA256 of :func:`canonical` ``(data)`` under ``key`` (a new dict)."""
    if not isinstance(data, dict):
        raise ValueError(f"only a dict (a report) is signed, got {type(data).__name__}")
    return {**{k: v for k, v in data.items() if k != MAC_FIELD}, MAC_FIELD: mac_bytes(canonical(data), key)}


def verify(data, key: bytes) -> bool:
    """Whether ``data`` (a report read back) carries the MAC :func:`sign` gives it under ``key``."""
    _check_key(key)
    mac = data.get(MAC_FIELD) if isinstance(data, dict) else None
    if not isinstance(mac, str):
        return False
    try:
        want = mac_bytes(canonical(data), key)
    except (TypeError, ValueError):
        return False
    return hmac.compare_digest(mac, want)
