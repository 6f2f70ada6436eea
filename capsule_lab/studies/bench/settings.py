"""Chapter 08's settings: the bench's backbone, data, schedule and routers, quick and full.

Taught in chapter 08. :class:`RouterBenchSettings` is one run of the bench; :data:`SETTINGS` holds the quick profile's
(the slim CapsNet on 6,000 digits, 3 epochs, 3 seeds) and the full profile's (Sabour's CapsNet on all of MNIST), read
with :func:`capsule_lab.course.profiles.chapter_settings`. :data:`ROUTERS_08` names the bench's routers in the order it
runs and shows them (:data:`capsule_lab.studies.bench.entries.ROUTERS` holds what each is).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...models import CapsNetConfig
from ...training import Schedule

__all__ = ["RouterBenchSettings", "ROUTERS_08", "SETTINGS"]


@dataclass(frozen=True)
class RouterBenchSettings:
    """Chapter 08's bench: every router of the course trained on one backbone, with the same data split, epochs,
    optimiser and initialisation, then measured the same way (:mod:`capsule_lab.studies.bench.runner`).

    ``capsnet`` is the backbone (no decoder): its convolution and primary capsules are shared by every router; the
    routers differ only in how the primary capsules reach the class capsules (the ladder replaces that layer with
    its pruning and ladder layers, ``ladder_k`` kept capsules, K from chapter 06). Adam from ``lr`` decayed by
    ``lr_decay`` per epoch for ``epochs`` epochs, batch ``batch_size``, on the first ``train_size`` training and
    ``test_size`` test images of ``dataset``; one run per seed of ``seeds``. The REM-pruned router is dynamic routing
    (r = 3) whose network loses ``rem_amount`` of its remaining prunable weights (one global magnitude threshold,
    chapter 05) after each of its first ``rem_rounds`` epochs and trains on after the last pruning. ``iterations``
    are the learned routers' T (chapter 07); ``kernels`` and ``lstm_hidden`` their sizes. The affine test set is the
    test images under seeded affine maps of strength ``affine_strength`` (chapter 04's generator). Timing: the median
    of ``timing_repeats`` training steps and inference batches of ``batch_size`` images. ``ladder_widths``: the hidden
    widths of the ladder's networks f, f^reg and p (the slim ladder's), None for the paper's Table 1 layers.
    """

    capsnet: CapsNetConfig
    routers: tuple
    dataset: str
    train_size: int | None      # None: the whole training set
    test_size: int | None       # None: the whole test set
    schedule: Schedule
    seeds: tuple
    ladder_k: int
    rem_amount: float
    rem_rounds: int
    iterations: int = 3
    kernels: int = 10
    lstm_hidden: int = 16
    affine_strength: float = 1.0
    timing_repeats: int = 5
    ladder_widths: tuple | None = (64, 32)

    def __post_init__(self):
        if self.capsnet.decoder:
            raise ValueError("the bench's backbone must have no decoder (decoder=False): only the routing differs")
        if not 0 <= self.rem_rounds < self.schedule.epochs:
            raise ValueError(f"rem_rounds must be in [0, epochs) = [0, {self.schedule.epochs}) so the network trains "
                             f"after its last pruning, got {self.rem_rounds!r}")
        if not 0 < self.ladder_k <= self.capsnet.primary_caps:
            raise ValueError(f"ladder_k must be in [1, {self.capsnet.primary_caps}] (the primary capsules), "
                             f"got {self.ladder_k!r}")


#: Chapter 08's routers, in the order the bench runs and the chapter shows them.
ROUTERS_08 = ("dynamic r=1", "dynamic r=3", "dynamic r=5", "detached", "uniform", "rem-pruned", "ladder",
              "similarity", "connectionist", "self-attention", "dynamic r=3 normed", "ladder matched")


#: Chapter 08's settings in each profile (``chapter_settings("08", profile)``).
#: Quick: the slim CapsNet (144 primary capsules, no decoder) with every router on 6k MNIST digits, 3 epochs,
#: 3 seeds: about 15 minutes on 2 CPU cores (the LSTM router alone half of it), so the chapter reads the
#: records that `capsule-lab bench routers --profile quick --seeds 3` cached, and re-trains one of them live.
SETTINGS = {
    "quick": RouterBenchSettings(CapsNetConfig.slim(decoder=False), ROUTERS_08, dataset="mnist", train_size=6000,
                                 test_size=2000, schedule=Schedule(epochs=3, batch_size=64, lr=3e-3, lr_decay=0.9),
                                 seeds=(0, 1, 2), ladder_k=16, rem_amount=0.5, rem_rounds=2),
    # Full: Sabour's CapsNet (1152 primary capsules, no decoder) on all of MNIST, 30 epochs, batch 128, Adam 1e-3
    # decayed by 0.96 per epoch (ours: one schedule for every router); the ladder keeps K = 70 of the 1152
    # capsules (the ladder paper's Table 3 on 28×28); REM prunes a fifth of what is left after each of the
    # first 10 epochs (89 % sparse) and trains 20 more.
    "full": RouterBenchSettings(CapsNetConfig.sabour(decoder=False), ROUTERS_08, dataset="mnist", train_size=None,
                                test_size=None,
                                schedule=Schedule(epochs=30, batch_size=128, lr=1e-3, lr_decay=0.96),
                                seeds=(0, 1, 2), ladder_k=70, rem_amount=0.2, rem_rounds=10, timing_repeats=20,
                                ladder_widths=None),
}
#: GPU: the quick profile's bench. Its 36 records were trained on a CPU and ship with the package; the chapter reads
#: them and re-trains one of them on the CPU to check it, as in the quick profile (the check compares a record with one
#: made on the same kind of device). Training the bench at the paper's size is the full profile's.
SETTINGS["gpu"] = SETTINGS["quick"]
