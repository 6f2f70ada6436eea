"""capsule_lab.course.checkpoints: a chapter's checkpoints go to $CAPSULE_LAB_CHECKPOINTS, else Google Drive when
Colab has mounted it (simulated here with a folder standing in for /content/drive/MyDrive), else ./checkpoints;
one file per chapter, profile, network and seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsule_lab.course import checkpoints


def test_the_folder_is_the_environments_then_drives_then_local(tmp_path, monkeypatch):
    monkeypatch.delenv("CAPSULE_LAB_CHECKPOINTS", raising=False)
    monkeypatch.setattr(checkpoints, "DRIVE", tmp_path / "drive" / "MyDrive")
    assert checkpoints.checkpoint_dir() == Path("checkpoints")                    # nothing mounted: local
    (tmp_path / "drive" / "MyDrive").mkdir(parents=True)
    assert checkpoints.checkpoint_dir() == tmp_path / "drive" / "MyDrive" / "capsule-lab" / "checkpoints"
    monkeypatch.setenv("CAPSULE_LAB_CHECKPOINTS", str(tmp_path / "mine"))
    assert checkpoints.checkpoint_dir() == tmp_path / "mine"                      # the environment wins


def test_one_file_per_chapter_profile_network_and_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSULE_LAB_CHECKPOINTS", str(tmp_path))
    path = checkpoints.checkpoint_path("02", "capsnet r=3", "full")
    assert path == tmp_path / "02" / "full-capsnet-r-3-seed0.pt"
    assert checkpoints.checkpoint_path("02", "capsnet r=3", "quick") != path      # a quick run never resumes a full one
    assert checkpoints.checkpoint_path("08", "ladder K=70", "full", seed=2).name == "full-ladder-k-70-seed2.pt"
    with pytest.raises(ValueError, match="chapter must be one of"):
        checkpoints.checkpoint_path("01", "capsnet", "full")                    # chapter 01 trains nothing
    with pytest.raises(ValueError, match="network must be a name"):
        checkpoints.checkpoint_path("02", " = ", "full")
    with pytest.raises(ValueError, match="seed must be an integer"):
        checkpoints.checkpoint_path("02", "capsnet", "full", seed=-1)
