"""Chapter 03's settings: the three networks it trains side by side — full routing, detached couplings, uniform
routing — and how.

Taught in chapter 03, whose notebook trains the three and measures the two gradient terms
(:mod:`capsule_lab.measures.gradients`) over training. :class:`GradientStudySettings` is the run; :data:`SETTINGS`
holds the quick profile's (3 epochs on 3,000 digits) and the full profile's (Gu & Tresp's supplement: Sabour's
network, 100 epochs at a constant learning rate), read with :func:`capsule_lab.course.profiles.chapter_settings`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models import CapsNetConfig
from ..training import Schedule

__all__ = ["GradientStudySettings", "SETTINGS"]


@dataclass(frozen=True)
class GradientStudySettings:
    """Chapter 03's training runs (full, detached-coupling and uniform routing, gradients measured per epoch).

    The full entry is Gu & Tresp's supplement: Sabour's network, 100 epochs at a constant learning rate.
    """

    capsnet: CapsNetConfig
    train_size: int | None      # None: the whole training set
    schedule: Schedule


#: Chapter 03's settings in each profile (``chapter_settings("03", profile)``).
#: Quick: 3 epochs on 3k digits keep the three runs of chapter 03 under a minute on 2 CPU cores.
SETTINGS = {
    "quick": GradientStudySettings(CapsNetConfig.slim(), train_size=3000,
                                   schedule=Schedule(epochs=3, batch_size=128, lr=3e-3, lr_decay=0.9)),
    # GPU (the default on a GPU): Sabour's network and the full profile's schedule on all 60k digits for 5 epochs, so
    # the three runs fit a Colab session on a T4 (course.session.session_estimate; book/setup.md). The end of a long
    # training, where Gu and Tresp's assumption is stated, stays the full profile's (100 epochs).
    "gpu": GradientStudySettings(CapsNetConfig.sabour(), train_size=None,
                                 schedule=Schedule(epochs=5, batch_size=128, lr=1e-3, lr_decay=1.0, max_shift=2)),
    "full": GradientStudySettings(CapsNetConfig.sabour(), train_size=None,
                                  schedule=Schedule(epochs=100, batch_size=128, lr=1e-3, lr_decay=1.0,
                                                    max_shift=2)),
}
