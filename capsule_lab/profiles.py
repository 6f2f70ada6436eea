"""Profiles: one code path, two sizes.

``full`` is the paper's setting (the full dataset, the paper's network, epochs and schedule; mixed
precision on a GPU). ``quick`` is the same code on a small real subset with a slim network, sized so a
chapter runs in about a minute on a 2-core CPU. ``full`` is chosen when CUDA is available, ``quick``
otherwise; ``CAPSULE_LAB_PROFILE=quick|full`` overrides.

Every chapter's setup cell calls :func:`setup`, which picks the profile and device and seeds everything.
A chapter whose experiment differs from chapter 02's training run (other sizes, seeds, depths) reads its
settings with :func:`chapter_settings` — one frozen dataclass per chapter, a quick and a full entry each.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch

from ._checks import check_one_of
from .models import PAPER_SIZES, CapsNetConfig, ConvCapsNetConfig, DeepCapsNetConfig, LadderCapsNetConfig
from .models.capsnet import BackboneConfig
from .routing import RouterSpec
from .training import Schedule

__all__ = ["Profile", "PROFILES", "profile_name", "get_profile", "cpu_threads", "seed_everything", "setup",
           "GradientStudySettings", "DepthStudySettings", "RemSettings", "LadderSettings",
           "LearnedRoutingSettings", "RouterBenchSettings", "ROUTERS_07", "VOTES_07", "ROUTERS_08", "CHAPTER_SETTINGS",
           "chapter_settings"]


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
                + (", mixed precision" if self.amp and self.device.startswith("cuda") else ""))


PROFILES = {
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


@dataclass(frozen=True)
class GradientStudySettings:
    """Chapter 03's training runs (full, detached-coupling and uniform routing, gradients measured per epoch).

    The full entry is Gu & Tresp's supplement: Sabour's network, 100 epochs at a constant learning rate.
    """

    capsnet: CapsNetConfig
    train_size: int | None      # None: the whole training set
    schedule: Schedule


@dataclass(frozen=True)
class DepthStudySettings:
    """Chapter 04's experiment: DeepCapsNets over depths × routings × seeds, their capsules measured.

    The full entry is Mitterreiter et al.'s setting for their Tables 1–2: 10 models, affNIST-style training
    data, depths up to 5. ``threads``: CPU threads for these tiny networks (one is faster than two). The schedule's
    optimiser is Adam or SGD (chapter 04 compares them on dying capsules).
    """

    config: DeepCapsNetConfig
    train_size: int | None      # None: the whole training set
    test_size: int
    schedule: Schedule
    seeds: tuple
    depths: tuple
    affine_train: bool
    threads: int = 1


@dataclass(frozen=True)
class RemSettings:
    """Chapter 05's experiment: the same CapsNet trained twice per dataset and seed, once dense (Q: only its
    couplings quantised) and once pruned while it trains (REM), for the same epochs.

    The REM run trains ``warmup_epochs`` dense, then prunes ``amount`` of the remaining prunable weights (one
    global magnitude threshold) every ``epochs_per_round`` epochs, ``rounds`` times, training on after each
    pruning, and then ``tune_epochs`` more with the masks in place; both runs are measured after every epoch.
    The models are chosen as the paper's App. B.2 chooses them: Q's is the dense epoch with the lowest validation
    loss (``val_size`` images are held out of the training set for it; the paper: 10 %), REM's the last epoch.
    The full entry is the paper's MNIST network with its options (its Table 9 model, optimiser and batch); the
    number of epochs and the pruning schedule are ours, the paper does not give them.
    """

    capsnet: CapsNetConfig
    datasets: tuple             # "mnist", "fashion"
    train_size: int | None      # None: the whole training set less the validation images
    val_size: int
    test_size: int | None       # None: the whole test set
    schedule: Schedule          # its epochs are warmup_epochs + rounds · epochs_per_round
    warmup_epochs: int
    rounds: int
    epochs_per_round: int
    amount: float               # share of the still-unpruned weights pruned per round
    seeds: tuple
    levels: int = 11
    threads: int = 2
    single_shot: bool = False   # also train a third run, pruned once at initialisation (SNIP) to REM's sparsity
    keep_every_step: bool = True    # False: only each run's last step and Q's model keep weights and couplings
    tune_epochs: int = 0        # epochs trained after the last round, nothing more pruned

    def __post_init__(self):
        epochs = self.warmup_epochs + self.rounds * self.epochs_per_round + self.tune_epochs
        if self.schedule.epochs != epochs:
            raise ValueError(f"schedule.epochs must be warmup_epochs + rounds · epochs_per_round + tune_epochs = "
                             f"{epochs} (the epochs of every run, dense or pruned), got {self.schedule.epochs}")

    @property
    def final_sparsity(self) -> float:
        """The share of the prunable weights the REM run has pruned after its last round."""
        return 1 - (1 - self.amount) ** self.rounds


@dataclass(frozen=True)
class LadderSettings:
    """Chapter 06's experiment: L-CapsNets with several K, a dynamic-routing CapsNet with the same primary capsules,
    and that CapsNet with as many parameters as the main L-CapsNet, trained on the 40×40 expanded digits and tested
    on expanded (clean) and affine-transformed test digits.

    ``ks`` are the numbers of kept capsules the chapter trains an L-CapsNet for (``ladder`` with its ``k``
    replaced); ``ladder.k`` is the main one. ``capsnet`` must have the same conv and primary capsules (every
    :class:`~capsule_lab.models.capsnet.BackboneConfig` field); the chapter's has no decoder and r = 3. ``matched``
    is the capacity-matched control: the same CapsNet with its class capsules widened to the dimension D that
    brings its parameters closest to the main L-CapsNet's
    (:func:`capsule_lab.ladder_study.matched_class_dim`), so every extra weight sits where the ladder's extra
    weights sit, above the primary capsules. Every network trains with the same data, epochs and schedule
    (Adam, ``lr`` decayed by ``lr_decay`` per epoch: the paper gives the start, 10⁻³, and no epoch count or rate).
    ``bench`` names the sizes :func:`capsule_lab.cost.step_models` times for Table 3 (``"full"``: the paper's, on
    28×28 MNIST). ``profile_digit`` and ``profile_top``: Figure 4 averages the ``profile_top`` largest activities of
    the primary capsules over the training images of this digit; Figure 1 averages the ``coupling_top`` most active
    capsules' lengths and couplings over the test images of that digit.
    """

    ladder: LadderCapsNetConfig
    ks: tuple
    capsnet: CapsNetConfig
    matched: CapsNetConfig
    train_size: int | None      # None: the whole training set
    test_size: int | None       # None: the whole test set (both test sets are made from the same digits)
    schedule: Schedule
    bench: str = "quick"
    bench_repeats: int = 5
    profile_digit: int = 0
    profile_top: int = 300
    coupling_top: int = 100

    def __post_init__(self):
        if self.ladder.k not in self.ks:
            raise ValueError(f"ks must contain the main network's k = {self.ladder.k}, got {self.ks!r}")
        for name in ("capsnet", "matched"):
            differ = [f.name for f in fields(BackboneConfig)
                      if getattr(getattr(self, name), f.name) != getattr(self.ladder, f.name)]
            if differ:
                raise ValueError(f"the {name} CapsNet must have the ladder's conv and primary capsules to be "
                                 f"matched; {', '.join(differ)} differ")
        differ = [f.name for f in fields(CapsNetConfig) if f.name != "class_dim"
                  and getattr(self.matched, f.name) != getattr(self.capsnet, f.name)]
        if differ:
            raise ValueError(f"matched must be the CapsNet with another class dimension only; {', '.join(differ)} "
                             f"differ")

    def ladder_config(self, k: int) -> LadderCapsNetConfig:
        """The L-CapsNet that keeps ``k`` capsules (the main network's sizes otherwise)."""
        return replace(self.ladder, k=k)


@dataclass(frozen=True)
class LearnedRoutingSettings:
    """Chapter 07's experiment: one capsule network trained with each router — dynamic, similarity and
    connectionist routing — on each dataset, with the same data, epochs and optimiser.

    ``capsnet`` is the network (no decoder). The full profile's is the paper's (Table 1,
    :class:`~capsule_lab.models.ConvCapsNetConfig`): three routing layers on 4×4 pose matrices, each with its own
    router of Table 2's sizes (Q = 4, 4, 10 kernels; LSTMs of 16 units with Table 2's hidden layers). The quick
    profile's is Sabour's slim CapsNet (a :class:`~capsule_lab.models.CapsNetConfig`): one routing layer, the
    primary to the class capsules, with the router sizes of the paper's class layer (``kernels`` Gaussian
    kernels; an LSTM of ``lstm_hidden`` units) — the paper's network trains too slowly on a CPU for a minute's
    budget. Adam from ``lr`` with an exponential decay of ``lr_decay`` per epoch (the paper: Adam 3·10⁻³,
    exponential decay; its rate is not given). ``iterations``: r = 3 for dynamic routing, T = 3 for the learned
    routers (the paper: "three iterations"). ``step_batches``: training steps timed per router. ``routers`` are
    registered kinds (:func:`~capsule_lab.routing.router_kinds`): any kind can join the study by its name. ``votes``:
    the votes each router is given where the network forms either (``{router: "plain" | "normalized"}``; a router not
    named gets the network's own); ``layer_sizes``: a paper's router sizes per routing layer, ``{option: (layer 0,
    layer 1, …)}`` (:data:`~capsule_lab.models.PAPER_SIZES`), applied where a router's kind reads the option
    (:meth:`~capsule_lab.routing.RouterSpec.per_layer`); empty: the settings' ``kernels`` and ``lstm_hidden``
    everywhere.
    """

    capsnet: CapsNetConfig | ConvCapsNetConfig
    routers: tuple
    datasets: tuple
    train_size: int | None      # None: the whole training set
    test_size: int | None       # None: the whole test set
    schedule: Schedule
    iterations: int = 3
    kernels: int = 10
    lstm_hidden: int = 16
    step_batches: int = 3
    votes: dict = field(default_factory=dict)
    layer_sizes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RouterBenchSettings:
    """Chapter 08's bench: every router of the course trained on one backbone, with the same data split, epochs,
    optimiser and initialisation, then measured the same way (:mod:`capsule_lab.router_bench`).

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


#: Chapter 07's routers, in the order its study trains and shows them.
ROUTERS_07 = ("dynamic", "similarity", "connectionist")
#: The votes each of chapter 07's routers gets in Sabour's CapsNet: Sabour's W u for dynamic routing, Faria's
#: normalised votes (eq. 1) for the learned routers (in the paper's network every layer's votes are eq. 1's).
VOTES_07 = {"dynamic": "plain", "similarity": "normalized", "connectionist": "normalized"}
#: Chapter 08's routers, in the order the bench runs and the chapter shows them.
ROUTERS_08 = ("dynamic r=1", "dynamic r=3", "dynamic r=5", "detached", "uniform", "rem-pruned", "ladder",
              "similarity", "connectionist", "self-attention", "dynamic r=3 normed", "ladder matched")

CHAPTER_SETTINGS = {
    # Quick: 3 epochs on 3k digits keep the three runs of chapter 03 under a minute on 2 CPU cores.
    "03": {
        "quick": GradientStudySettings(CapsNetConfig.slim(), train_size=3000,
                                       schedule=Schedule(epochs=3, batch_size=128, lr=3e-3, lr_decay=0.9)),
        "full": GradientStudySettings(CapsNetConfig.sabour(), train_size=None,
                                      schedule=Schedule(epochs=100, batch_size=128, lr=1e-3, lr_decay=1.0,
                                                        max_shift=2)),
    },
    # Quick: one epoch on 3k digits per network, 2 seeds, depths 1-4 (chapter 04 explains what this can show).
    "04": {
        "quick": DepthStudySettings(DeepCapsNetConfig.quick(), train_size=3000, test_size=1000,
                                    schedule=Schedule(epochs=1, batch_size=64, lr=3e-3, lr_decay=0.95),
                                    seeds=(0, 1), depths=(1, 2, 3, 4), affine_train=False),
        "full": DepthStudySettings(DeepCapsNetConfig.paper(), train_size=None, test_size=10000,
                                   schedule=Schedule(epochs=30, batch_size=128, lr=1e-3, lr_decay=0.95),
                                   seeds=tuple(range(10)), depths=(1, 2, 3, 4, 5), affine_train=True),
    },
    # Quick: the slim CapsNet with 32 conv channels (144 primary capsules, no decoder) on 3k images per dataset,
    # 1 dense epoch then 3 prunings of half of what is left (87.5 % sparse): 4 epochs per run, 4 runs. One thread
    # trains this small network faster than two (1.9 s vs 2.1 s per epoch here; 64 channels: 2.8 s on two).
    "05": {
        "quick": RemSettings(CapsNetConfig.slim(conv_channels=32, decoder=False), datasets=("mnist", "fashion"),
                             train_size=3000, val_size=500, test_size=2000,
                             schedule=Schedule(epochs=4, batch_size=128, lr=3e-3, lr_decay=0.9),
                             warmup_epochs=1, rounds=3, epochs_per_round=1, amount=0.5, seeds=(0,), threads=1),
        "full": RemSettings(CapsNetConfig.sabour(decoder=False, init_std=0.1, router=RouterSpec(pose_bias=0.1)),
                            datasets=("mnist", "fashion"), train_size=None, val_size=6000, test_size=None,
                            schedule=Schedule(epochs=50, batch_size=128, lr=1e-3, lr_decay=0.99, max_shift=2),
                            warmup_epochs=10, rounds=20, epochs_per_round=2, amount=0.15, seeds=(0, 1, 2, 3, 4),
                            single_shot=True,
                            keep_every_step=False),   # Sabour's network: 27 MB of weights, 460 MB of couplings a step
    },
    # Quick: the slim networks (576 primary capsules on 40×40; Table 1's shape, widths / 8) on 3k expanded digits for 2
    # epochs, batch 32; the matched CapsNet has class capsules of D = 57 (2,712,160 parameters against the main
    # L-CapsNet's 2,721,440). Far from converged; chapter 06 shows a longer run (scripts/ladder_longer_run.py) beside it.
    "06": {
        "quick": LadderSettings(LadderCapsNetConfig.slim(), ks=(16, 32, 64),
                                capsnet=CapsNetConfig.slim(image_size=40, conv_channels=32, decoder=False),
                                matched=CapsNetConfig.slim(image_size=40, conv_channels=32, decoder=False,
                                                           class_dim=57),
                                train_size=3000, test_size=1000,
                                schedule=Schedule(epochs=2, batch_size=32, lr=2e-3, lr_decay=0.9),
                                bench="quick", bench_repeats=3, profile_digit=0, profile_top=150),
        # Full: the paper's 40×40 experiment — 60k expanded MNIST, 9×9 kernels (4608 capsules), K = 50/70/100,
        # Sabour's CapsNet on the same input (no decoder) and with D = 193 (76,477,184 parameters against K = 70's
        # 76,595,404); 50 epochs with the course's Sabour schedule (ours).
        "full": LadderSettings(LadderCapsNetConfig.paper(k=70), ks=(50, 70, 100),
                               capsnet=CapsNetConfig.sabour(image_size=40, decoder=False),
                               matched=CapsNetConfig.sabour(image_size=40, decoder=False, class_dim=193),
                               train_size=None,
                               test_size=10000, schedule=Schedule(epochs=50, batch_size=128, lr=1e-3, lr_decay=0.9),
                               bench="full", bench_repeats=20, profile_digit=0, profile_top=300),
    },
    # Quick: the slim CapsNet (144 primary capsules, no decoder) with each router on 2k digits of each dataset,
    # one epoch, batch 64: the LSTM router costs ~5 ms an image on 2 CPU cores, the others under 1 ms.
    "07": {
        "quick": LearnedRoutingSettings(CapsNetConfig.slim(decoder=False), ROUTERS_07, datasets=("mnist", "fashion"),
                                        train_size=2000, test_size=500,
                                        schedule=Schedule(epochs=1, batch_size=64, lr=3e-3, lr_decay=0.9),
                                        votes=VOTES_07),
        # Full: the paper's network (Table 1, Table 2's routers) on all 60k images of each dataset, 100 epochs as the
        # paper trains, Adam 3e-3 decayed by 0.96 per epoch and batch 64 (the rate and the batch are ours: 64 keeps
        # the LSTM router's states of 3 iterations within a 16 GB GPU).
        "full": LearnedRoutingSettings(ConvCapsNetConfig.paper(), ROUTERS_07, datasets=("mnist", "fashion"),
                                       train_size=None, test_size=None,
                                       schedule=Schedule(epochs=100, batch_size=64, lr=3e-3, lr_decay=0.96),
                                       step_batches=20, layer_sizes=PAPER_SIZES),
    },
    # Quick: the slim CapsNet (144 primary capsules, no decoder) with every router on 6k MNIST digits, 3 epochs,
    # 3 seeds: about 15 minutes on 2 CPU cores (the LSTM router alone half of it), so the chapter reads the
    # records that `capsule-lab bench routers --profile quick --seeds 3` cached, and re-trains one of them live.
    "08": {
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
    },
}


def chapter_settings(chapter: str, profile: "Profile | str | None" = None):
    """The settings of ``chapter``'s experiment (``"03"`` … ``"08"``) under ``profile`` (a :class:`Profile`, its
    name, or None for :func:`profile_name`'s choice). Chapters 03–08.
    """
    if chapter not in CHAPTER_SETTINGS:
        raise ValueError(f"chapter must be one of {sorted(CHAPTER_SETTINGS)}, got {chapter!r}")
    name = profile.name if isinstance(profile, Profile) else profile_name(profile)
    return CHAPTER_SETTINGS[chapter][name]


def profile_name(name: str | None = None) -> str:
    """``name``, else ``$CAPSULE_LAB_PROFILE``, else ``full`` with CUDA and ``quick`` without. Chapter 02."""
    name = name or os.environ.get("CAPSULE_LAB_PROFILE") or ("full" if torch.cuda.is_available() else "quick")
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
              + (", mixed precision" if prof.amp and prof.device.startswith("cuda") else ""))
    return prof
