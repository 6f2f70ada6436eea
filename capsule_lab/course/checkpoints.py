"""Where a chapter's training cells keep their checkpoints, so that a run survives a disconnect.

Colab cuts a session after a few hours (sooner on a free GPU) and wipes its disk. :func:`capsule_lab.training.fit`
with ``checkpoint=`` saves a run's whole state after every epoch and resumes from it when started again; this module
says *where*: ``$CAPSULE_LAB_CHECKPOINTS`` when set, else ``capsule-lab/checkpoints`` in Google Drive when Drive is
mounted (at ``/content/drive``, as ``google.colab.drive.mount`` mounts it: it outlives the session), else a local
``checkpoints/`` folder. One file per chapter, profile and network, so that a quick run never resumes a full one.
Chapters 02–08.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .._checks import check_one_of
from .smoke import CHAPTERS

__all__ = ["DRIVE", "checkpoint_dir", "checkpoint_path"]

#: Google Drive's own folder when Colab has mounted Drive (``from google.colab import drive;
#: drive.mount("/content/drive")``).
DRIVE = Path("/content/drive/MyDrive")


def checkpoint_dir() -> Path:
    """The folder checkpoints go to: ``$CAPSULE_LAB_CHECKPOINTS``, else ``<Drive>/capsule-lab/checkpoints`` when Google
    Drive is mounted (:data:`DRIVE` exists), else ``./checkpoints``. Not created here (``fit`` creates it when it first
    saves). Chapters 02–08."""
    chosen = os.environ.get("CAPSULE_LAB_CHECKPOINTS")
    if chosen:
        return Path(chosen).expanduser()
    if DRIVE.is_dir():
        return DRIVE / "capsule-lab" / "checkpoints"
    return Path("checkpoints")


def checkpoint_path(chapter: str, network: str, profile: str, seed: int = 0) -> Path:
    """The checkpoint file of one training run of a chapter: ``<checkpoint_dir()>/<chapter>/<profile>-<network>-seed
    <seed>.pt``, the network's name made safe for a file name (``"capsnet r=3"`` → ``capsnet-r-3``). Pass it to
    :func:`capsule_lab.training.fit` as ``checkpoint=``. Chapters 02–08."""
    check_one_of(chapter, CHAPTERS, "chapter")          # the chapters that train a network
    for name, value in (("network", network), ("profile", profile)):
        if not isinstance(value, str) or not re.search(r"[A-Za-z0-9]", value):
            raise ValueError(f"{name} must be a name with a letter or digit in it, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", network).strip("-").lower()
    return checkpoint_dir() / chapter / f"{profile}-{slug}-seed{seed}.pt"
