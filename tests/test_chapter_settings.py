"""Per-chapter settings (capsule_lab.course.profiles.chapter_settings): one entry per chapter and profile, and the
chapters read them instead of defining their own."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from capsule_lab.models import CapsNetConfig, DeepCapsNetConfig
from capsule_lab.training import Schedule
from capsule_lab.course.profiles import CHAPTER_SETTINGS, PROFILES, Profile, chapter_settings
from capsule_lab.studies.depth import DepthStudySettings
from capsule_lab.studies.gradients import GradientStudySettings

ROOT = Path(__file__).resolve().parents[1]


def test_every_chapter_has_a_quick_and_a_full_entry_of_one_type():
    for chapter, entries in CHAPTER_SETTINGS.items():
        assert set(entries) == set(PROFILES) == {"quick", "gpu", "full"}, chapter
        assert len({type(s) for s in entries.values()}) == 1, chapter


# What a chapter's cells loop over (seeds, depths, Ks, routers, datasets): the gpu profile keeps the quick profile's,
# which the cells and their tables are laid out for; it changes the networks, the data and the schedule.
LAYOUT_FIELDS = {"04": ("seeds", "depths"), "05": ("datasets", "seeds", "single_shot"), "06": ("ks",),
                 "07": ("routers", "datasets"), "08": ("routers", "seeds")}


def test_the_gpu_profile_keeps_the_quick_layout_with_the_papers_networks():
    for chapter, fields in LAYOUT_FIELDS.items():
        gpu, quick = CHAPTER_SETTINGS[chapter]["gpu"], CHAPTER_SETTINGS[chapter]["quick"]
        for name in fields:
            assert len(getattr(gpu, name)) == len(getattr(quick, name)) if name == "ks" else \
                getattr(gpu, name) == getattr(quick, name), (chapter, name)
    full = CHAPTER_SETTINGS
    assert full["03"]["gpu"].capsnet == full["03"]["full"].capsnet == CapsNetConfig.sabour()
    assert full["04"]["gpu"].config == full["04"]["full"].config == DeepCapsNetConfig.paper()
    assert full["05"]["gpu"].capsnet == full["05"]["full"].capsnet
    assert full["06"]["gpu"].ks == full["06"]["full"].ks and full["06"]["gpu"].ladder == full["06"]["full"].ladder
    assert full["07"]["gpu"].capsnet == full["07"]["full"].capsnet
    assert full["08"]["gpu"] is full["08"]["quick"]                   # the shipped CPU records, read as on a CPU
    assert PROFILES["gpu"].capsnet == PROFILES["full"].capsnet and PROFILES["gpu"].data_source == "torchvision"


def test_chapter_settings_by_profile_object_name_and_environment(monkeypatch):
    full = Profile("full", "torchvision", None, Schedule(epochs=1, batch_size=1, lr=1e-3))
    assert chapter_settings("04", full) is CHAPTER_SETTINGS["04"]["full"]
    assert chapter_settings("03", "quick") is CHAPTER_SETTINGS["03"]["quick"]
    monkeypatch.setenv("CAPSULE_LAB_PROFILE", "full")
    assert chapter_settings("04") is CHAPTER_SETTINGS["04"]["full"]


def test_the_settings_are_the_papers_where_the_chapters_say_so():
    full3, full4 = chapter_settings("03", "full"), chapter_settings("04", "full")
    assert isinstance(full3, GradientStudySettings) and full3.capsnet == CapsNetConfig.sabour()
    assert full3.schedule == Schedule(epochs=100, batch_size=128, lr=1e-3, lr_decay=1.0, max_shift=2)   # Gu & Tresp
    assert isinstance(full4, DepthStudySettings) and full4.config == DeepCapsNetConfig.paper()
    assert len(full4.seeds) == 10 and full4.affine_train and 4 in full4.depths            # Mitterreiter et al., Tables 1-2
    quick4 = chapter_settings("04", "quick")
    assert quick4.config.routing_layers == 4 and set(quick4.depths) <= set(full4.depths) | {6, 7, 8}


def test_settings_are_frozen_and_checked():
    with pytest.raises(FrozenInstanceError):
        chapter_settings("04", "quick").schedule = None
    with pytest.raises(ValueError, match="chapter must be one of"):
        chapter_settings("09", "quick")
    with pytest.raises(ValueError, match="unknown profile"):
        chapter_settings("03", "medium")


@pytest.mark.parametrize("chapter", sorted(CHAPTER_SETTINGS))
def test_the_chapter_reads_its_settings_from_the_package(chapter):
    notebook = next((ROOT / "chapters").glob(f"{chapter}_*.ipynb"))
    code = "\n".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code")
    assert f'chapter_settings("{chapter}", profile)' in code
    assert '"quick":' not in code, "a quick/full settings dict defined in the notebook"
