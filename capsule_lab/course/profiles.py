"""Profiles: one code path, three sizes.

``quick`` is the code on a small real subset with a slim network, sized so a chapter runs in about a minute on a
2-core CPU. ``gpu`` is sized to a Colab session: each chapter trains the paper's network on the full dataset (where
the chapter's point needs it) for as few epochs as keep its live training within 15 minutes on a T4, Colab's free
GPU, and reads the multi-seed evidence from the shipped records as ``quick`` does (:mod:`capsule_lab.course.session`
estimates the time). ``full`` is the paper's setting (the full dataset, the paper's network, epochs, schedule and
seeds; hours to days on one GPU, or a job array on a cluster). ``gpu`` is chosen when CUDA is available, ``quick``
otherwise; ``CAPSULE_LAB_PROFILE=quick|gpu|full`` overrides. All three use mixed precision on a GPU where asked.

Every chapter's setup cell calls :func:`setup`, which picks the profile and device and seeds everything.
A chapter whose experiment differs from chapter 02's training run (other sizes, seeds, depths) reads its
settings with :func:`chapter_settings` — one frozen dataclass per chapter, a quick and a full entry each.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from .._checks import check_one_of
from ..models import CapsNetConfig
from ..studies import depth as depth_study
from ..studies import gradients as gradient_study
from ..studies import ladder as ladder_study
from ..studies import learned_routing as learned_routing_study
from ..studies import rem as rem_study
from ..studies.bench import settings as bench_settings
from ..training import Schedule, precision

__all__ = ["Profile", "PROFILES", "profile_name", "get_profile", "cpu_threads", "seed_everything", "setup",
           "CHAPTER_SETTINGS", "chapter_settings"]


@dataclass(frozen=True)
class Profile:
    """What a chapter trains, and how. Chapter 02 explains each field; ``schedule`` is how :func:`fit` trains
    (:class:`~capsule_lab.training.Schedule`: epochs, batch, Adam's learning rate and its decay per epoch, shifts)."""

    name: str
    data_source: str        # "offline" = the 8k/2k real npm digits, "torchvision" = the full 60k/10k
    train_size: int | None  # None: the whole training set
    schedule: Schedule
    capsnet: CapsNetConfig = field(default_factory=CapsNetConfig.sabour)
    amp: bool = False       # mixed precision, used only on CUDA
    device: str = "cpu"

    def describe(self) -> str:
        c, t = self.capsnet, self.schedule
        size = "all" if self.train_size is None else f"{self.train_size:,}"
        return (f"profile {self.name} on {self.device}: {size} training images ({self.data_source}), "
                f"{t.epochs} epochs, batch {t.batch_size}, CapsNet {c.conv_channels} conv channels, "
                f"{c.primary_caps} primary capsules, r={c.router.iterations}"
                + (f", {precision(self.device, True)}" if self.amp and self.device.startswith("cuda") else ""))


PROFILES = {
    # GPU: Sabour's network, data and schedule for 10 epochs instead of 50 (~8 min of training on a T4 estimated,
    # course.session.session_estimate; the paper's 99.75 % comes from a much longer training).
    "gpu": Profile("gpu", data_source="torchvision", train_size=None,
                   schedule=Schedule(epochs=10, batch_size=128, lr=1e-3, lr_decay=0.9, max_shift=2),
                   capsnet=CapsNetConfig.sabour(), amp=True),
    # Sabour et al.: 60k MNIST, shifts of up to 2 px, Adam 1e-3 with exponential decay; we use 0.9 per
    # epoch for 50 epochs (Sabour give no epoch count; Gu & Tresp's supplement trains 100).
    "full": Profile("full", data_source="torchvision", train_size=None,
                    schedule=Schedule(epochs=50, batch_size=128, lr=1e-3, lr_decay=0.9, max_shift=2),
                    capsnet=CapsNetConfig.sabour(), amp=True),
    # Quick: the slim network (144 primary capsules) and a 3× larger learning rate than Sabour's, so that
    # 3 epochs on the 8k offline digits reach ~97.7 % on the 2k held-out ones at ~9 s per epoch on 2 CPU cores
    # (lr 1e-3 reached 94.9-96.8 % in 3 epochs).
    "quick": Profile("quick", data_source="offline", train_size=8000,
                     schedule=Schedule(epochs=3, batch_size=128, lr=3e-3, lr_decay=0.9, max_shift=0),
                     capsnet=CapsNetConfig.slim()),
}


#: Every chapter's settings under each profile, each study's own (``SETTINGS`` of its module).
CHAPTER_SETTINGS = {"03": gradient_study.SETTINGS, "04": depth_study.SETTINGS, "05": rem_study.SETTINGS,
                    "06": ladder_study.SETTINGS, "07": learned_routing_study.SETTINGS, "08": bench_settings.SETTINGS}


def chapter_settings(chapter: str, profile: "Profile | str | None" = None):
    """The settings of ``chapter``'s experiment (``"03"`` … ``"08"``) under ``profile`` (a :class:`Profile`, its
    name, or None for :func:`profile_name`'s choice). Chapters 03–08.
    """
    if chapter not in CHAPTER_SETTINGS:
        raise ValueError(f"chapter must be one of {sorted(CHAPTER_SETTINGS)}, got {chapter!r}")
    name = profile.name if isinstance(profile, Profile) else profile_name(profile)
    return CHAPTER_SETTINGS[chapter][name]


def profile_name(name: str | None = None) -> str:
    """``name``, else ``$CAPSULE_LAB_PROFILE``, else ``gpu`` with CUDA and ``quick`` without. Chapter 02."""
    name = name or os.environ.get("CAPSULE_LAB_PROFILE") or ("gpu" if torch.cuda.is_available() else "quick")
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}: expected one of {sorted(PROFILES)}")
    return name


def get_profile(name: str | None = None, device: str | None = None) -> Profile:
    """The profile to run (see :func:`profile_name`) on ``device`` (default: CUDA if available). Chapter 02."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return replace(PROFILES[profile_name(name)], device=device)


def seed_everything(seed: int = 0, deterministic: bool = True) -> None:
    """Seed Python, NumPy and torch; with ``deterministic``, ask torch for deterministic algorithms. Chapter 01."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=torch.cuda.is_available())
        torch.backends.cudnn.benchmark = False


def cpu_threads(threads: int | None = None) -> int:
    """CPU threads for a chapter: ``threads``, else ``$OMP_NUM_THREADS``, else 2 (or fewer cores). Chapter 01.

    Two threads is the size the quick profile is timed for; the environment variable lets the tests run a
    chapter with another thread count (a different summation order) to check its tolerance bands.
    """
    if threads is None and os.environ.get("OMP_NUM_THREADS", "").strip():
        value = os.environ["OMP_NUM_THREADS"].strip()
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"OMP_NUM_THREADS must be a positive integer, got {value!r}")
        threads = int(value)
    if threads is None:
        threads = min(2, os.cpu_count() or 1)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    return threads


def setup(seed: int = 0, profile: str | None = None, threads: int | None = None, verbose: bool = True,
          chapter: str | None = None) -> Profile:
    """A chapter's setup: pick the profile and device, seed everything, print what was chosen. Chapter 01.

    On a CPU, torch uses :func:`cpu_threads` threads. A chapter whose experiment trains with its own settings
    (``chapter``: ``"04"`` … ``"08"``, see :func:`chapter_settings`) passes its number, and the line printed names
    those settings instead of describing the profile's own CapsNet and schedule, which that chapter does not train.
    """
    if chapter is not None:
        check_one_of(chapter, [c for c in CHAPTER_SETTINGS if c >= "04"], "chapter")
    prof = get_profile(profile)
    if prof.device == "cpu":
        torch.set_num_threads(cpu_threads(threads))
    seed_everything(seed)
    if verbose and chapter is None:
        print(prof.describe())
    elif verbose:
        print(f"profile {prof.name} on {prof.device}: chapter {chapter} trains with its own networks, data and "
              f"schedule, chapter_settings({chapter!r})"
              + (f", {precision(prof.device, True)}" if prof.amp and prof.device.startswith("cuda") else ""))
    return prof
