"""How long a chapter's training takes: measured before it starts, and whether it fits a Colab session.

A student in Colab has a session that is cut after a few hours and, on a free GPU, a quota of an hour or three a
day. So before a cell trains, the chapter *measures* what it is about to cost on the device at hand and prints it
(:func:`announce_training`): one training step of the cell's own network on one batch of its own data, timed
(:func:`capsule_lab.measures.cost.training_step_seconds`, the median of a few steps after a warm-up), times the steps
the cell will take (runs × epochs × batches). The timing trains a *copy* of the network inside a forked random state,
so the cell's own training, and every number it prints, are what they would have been without it.

The ``gpu`` profile (:mod:`capsule_lab.course.profiles`) is sized with the same arithmetic from the step times
measured on an H200 for every network the chapters train (``capsule_lab/results/gpu_epochs_h200.json``, written by
``scripts/gpu_epochs.py``), scaled to a T4 — Colab's free GPU — by :data:`T4_SLOWDOWN`, an assumption until a T4 is
timed (book/setup.md says how it was chosen). Chapters 02–08; the book's set-up page.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass

import torch

from .._checks import check_one_of, check_positive_int
from ..measures.cost import training_step_seconds
from ..studies.common import shipped_results
from .profiles import PROFILES
from .smoke import STUDIES

__all__ = ["T4_SLOWDOWN", "SESSION_BUDGET_S", "TrainingEstimate", "estimate_training", "announce_training",
           "format_duration", "PlannedRuns", "training_plan", "shipped_step_ms", "session_estimate"]

#: How many times slower a T4 is assumed to train the course's networks than the H200 they were timed on. A T4 has
#: about 1/15 of an H200's memory bandwidth and half-precision throughput, but the H200's steps on these small
#: networks are mostly launch overhead (a 17 ms step for a network whose arithmetic takes ~2 ms there), which a T4 pays
#: too; 6 is the factor issue 42 assumed. Not measured: replace it by a T4's own step times when one is timed.
T4_SLOWDOWN = 6.0

#: The time a chapter's live training may take on a T4-class GPU in the ``gpu`` profile: 15 minutes.
SESSION_BUDGET_S = 15 * 60


def format_duration(seconds: float) -> str:
    """``"45 s"``, ``"3.2 min"`` or ``"1.4 h"``: a duration as a reader wants it. Chapters 02–08."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class TrainingEstimate:
    """What a training cell is about to cost: ``runs`` trainings of ``steps_per_run`` steps at ``step_s`` seconds a
    step (measured on ``device``). Chapters 02–08."""

    label: str
    runs: int
    steps_per_run: int
    step_s: float
    device: str
    profile: str

    @property
    def total_s(self) -> float:
        return self.runs * self.steps_per_run * self.step_s

    def describe(self) -> str:
        runs = f"{self.runs} runs × " if self.runs > 1 else ""
        return (f"{self.label}: {runs}{self.steps_per_run:,} steps × {self.step_s * 1000:.0f} ms a step measured on "
                f"{self.device} ≈ {format_duration(self.total_s)} of training (profile {self.profile})")


def _first_batch(train, batch_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``batch_size`` (image, label) pairs of ``train``, stacked, on ``device``."""
    items = [train[i] for i in range(min(batch_size, len(train)))]
    images = torch.stack([torch.as_tensor(item[0]) for item in items]).to(device)
    labels = torch.as_tensor([int(item[1]) for item in items]).to(device)
    return images, labels


def estimate_training(model, train, *, epochs: int, batch_size: int, runs: int = 1,
                      device="cpu", amp: bool = False, profile: str = "", label: str = "training",
                      repeats: int = 3) -> TrainingEstimate:
    """Measure one training step of ``model`` on the first batch of ``train`` on ``device`` and return the cost of
    ``runs`` trainings of ``epochs`` epochs (``ceil(len(train) / batch_size)`` steps each), without touching
    ``model``, its optimiser or any random state: a copy is timed, in a forked random state. ``model`` is a network,
    or a function of no arguments that builds one (called in the forked random state too, so that building a network
    only to time it draws nothing from the chapter's random numbers). Chapters 02–08.
    """
    if not isinstance(model, torch.nn.Module) and not callable(model):
        raise ValueError(f"model must be a torch.nn.Module or a function that builds one, got {type(model).__name__}")
    for name, value in (("epochs", epochs), ("batch_size", batch_size), ("runs", runs), ("repeats", repeats)):
        check_positive_int(value, name)
    if len(train) == 0:
        raise ValueError("train must hold at least one example")
    device = torch.device(device)
    forked = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=forked):
        twin = copy.deepcopy(model) if isinstance(model, torch.nn.Module) else model()
        if not isinstance(twin, torch.nn.Module):
            raise ValueError(f"model() must return a torch.nn.Module, got {type(twin).__name__}")
        twin = twin.to(device)
        images, labels = _first_batch(train, batch_size, device)
        timing = training_step_seconds(twin, images, labels, repeats=repeats, warmup=1, amp=amp)
    del twin
    steps = math.ceil(len(train) / batch_size) * epochs
    return TrainingEstimate(label, runs, steps, timing["median_s"], str(device), profile)


def announce_training(*estimates: TrainingEstimate) -> float:
    """Print what a cell is about to train, one line per :func:`estimate_training`, and the total when there are
    several; return the total in seconds. The line a chapter shows before a cell that trains. Chapters 02–08."""
    if not estimates or not all(isinstance(e, TrainingEstimate) for e in estimates):
        raise ValueError("announce_training takes one or more TrainingEstimate (from estimate_training)")
    for estimate in estimates:
        print(estimate.describe())
    total = sum(e.total_s for e in estimates)
    if len(estimates) > 1:
        print(f"in all ≈ {format_duration(total)} of training on {estimates[0].device}")
    return total


# ---------------------------------------------------------------- the session budget, from the shipped timings
#: A training set's size where a chapter's settings say "all of it" (MNIST's, Fashion-MNIST's, expanded MNIST's).
FULL_TRAINING_SET = 60000


@dataclass(frozen=True)
class PlannedRuns:
    """``runs`` trainings of the network timed as ``network`` (its name in ``gpu_epochs_h200.json``) on ``images``
    images for ``epochs`` epochs of batches of ``batch_size``. The book's set-up page."""

    network: str
    runs: int
    images: int
    epochs: int
    batch_size: int

    @property
    def steps(self) -> int:
        return self.runs * self.epochs * math.ceil(self.images / self.batch_size)


def _capsnet_plan(p) -> list[PlannedRuns]:            # 02: the profile's CapsNet, once
    return [PlannedRuns("CapsNet", 1, p.train_size or FULL_TRAINING_SET, p.schedule.epochs, p.schedule.batch_size)]


def _gradient_plan(s) -> list[PlannedRuns]:           # 03: full, detached and uniform routing, one run each
    images = s.train_size or FULL_TRAINING_SET
    return [PlannedRuns(f"CapsNet {v}", 1, images, s.schedule.epochs, s.schedule.batch_size)
            for v in ("full", "detached", "uniform")]


def _depth_plan(s) -> list[PlannedRuns]:              # 04: every depth at seed 0 and the other seeds at depth 4,
    images, (epochs, batch) = s.train_size or FULL_TRAINING_SET, (s.schedule.epochs, s.schedule.batch_size)
    runs = len(s.depths) + len(s.seeds) - 1           # for both routings; then 4 revivals of 500 images, 1 epoch
    return [PlannedRuns("DeepCapsNet depth 5 dynamic", runs, images, epochs, batch),
            PlannedRuns("DeepCapsNet depth 5 uniform", runs, images, epochs, batch),
            PlannedRuns("DeepCapsNet depth 5 dynamic", 4, 500, 1, batch)]


def _rem_plan(s) -> list[PlannedRuns]:                # 05: Q and REM (and SNIP) per dataset and seed
    images, runs = s.train_size or FULL_TRAINING_SET - s.val_size, len(s.datasets) * len(s.seeds)
    names = ["Q (dense)", "REM (pruned)"] + (["SNIP (single shot)"] if s.single_shot else [])
    return [PlannedRuns(name, runs, images, s.schedule.epochs, s.schedule.batch_size) for name in names]


def _ladder_plan(s) -> list[PlannedRuns]:             # 06: Sabour's CapsNet, its matched twin, one L-CapsNet per K
    images, (epochs, batch) = s.train_size or FULL_TRAINING_SET, (s.schedule.epochs, s.schedule.batch_size)
    return [PlannedRuns("CapsNet r=3", 2, images, epochs, batch),
            PlannedRuns("L-CapsNet K=70", len(s.ks), images, epochs, batch)]


def _routing_plan(s) -> list[PlannedRuns]:            # 07: every router on every dataset
    images = s.train_size or FULL_TRAINING_SET
    return [PlannedRuns(f"ConvCapsNet {router}", len(s.datasets), images, s.schedule.epochs, s.schedule.batch_size)
            for router in s.routers]


def _bench_plan(s) -> list[PlannedRuns]:              # 08: every router and seed, where the bench is trained
    return [PlannedRuns(f"bench {router}", len(s.seeds), s.train_size or FULL_TRAINING_SET, s.schedule.epochs,
                        s.schedule.batch_size) for router in s.routers]


#: Each chapter's live training, counted from its cells, as a function of its settings (the smoke run's
#: :data:`~capsule_lab.course.smoke.STUDIES` gives the settings).
PLANS = {"02": _capsnet_plan, "03": _gradient_plan, "04": _depth_plan, "05": _rem_plan, "06": _ladder_plan,
         "07": _routing_plan, "08": _bench_plan}
#: The chapters that train only in the full profile: chapter 08 reads its bench from the shipped records otherwise.
TRAINED_ONLY_IN_FULL = {"08"}


def training_plan(chapter: str, profile: str = "gpu") -> list[PlannedRuns]:
    """What ``chapter``'s cells train in ``profile``, network by network: the runs its notebook starts (counted from
    its cells: which networks, seeds, depths, routers and datasets it loops over, ``PLANS``), each named by the
    network the shipped GPU timings give a step time for. Where a chapter trains a smaller network than the one timed
    (chapter 04's shallower depths), the larger one's time stands in for it, so the estimate errs long. Chapter 08
    trains on the GPU only in the full profile (its bench is read from the shipped records otherwise): an empty plan.
    The book's set-up page."""
    check_one_of(chapter, sorted(PLANS), "chapter")
    check_one_of(profile, sorted(PROFILES), "profile")
    if chapter in TRAINED_ONLY_IN_FULL and profile != "full":
        return []
    return PLANS[chapter](STUDIES[chapter].settings(profile))


def shipped_step_ms(path=None) -> dict:
    """The shipped GPU timings (``path``, default ``capsule_lab/results/gpu_epochs_h200.json``):
    ``{"device", "chapters": {chapter: {network: (step_ms, batch_size)}}, "overhead": {chapter: seconds}}``, the
    overhead being what one measured epoch of 60,000 images of the chapter's first network took beyond its steps
    (copying batches to the GPU, the loop's own work: the epoch measured less the step time × steps; 0 where the
    epoch was no longer). The book's set-up page."""
    if path is None:
        report = shipped_results("gpu_epochs_h200.json")
    else:
        with open(path) as f:
            report = json.load(f)
    steps = {chapter: {name: (network["step_ms"], entry["schedule"]["batch_size"])
                       for name, network in entry["networks"].items()}
             for chapter, entry in report["chapters"].items()}
    overhead = {}
    for chapter, entry in report["chapters"].items():
        measured = [n for n in entry["networks"].values() if (n.get("epoch") or {}).get("seconds_per_60000")]
        if measured:
            first = measured[0]
            overhead[chapter] = max(0.0, first["epoch"]["seconds_per_60000"] - first["epoch_s_from_steps"])
    return {"device": report["provenance"]["device"], "chapters": steps, "overhead": overhead}


def session_estimate(chapter: str, profile: str = "gpu", slowdown: float = T4_SLOWDOWN, timings=None) -> dict:
    """Seconds of training ``chapter`` takes in ``profile``: on the GPU the shipped timings were measured on
    (:func:`shipped_step_ms`: step time × steps, network by network, :func:`training_plan`) and, × ``slowdown``, on a
    T4. The loop's own work per image (:func:`shipped_step_ms`'s overhead, mostly on the CPU) is added to both, not
    scaled; the evaluations a chapter runs after training are not counted. A network the timings do not hold is
    listed in ``"untimed"`` and left out of the sum (rerun ``scripts/gpu_epochs.py`` on a GPU).
    ``{"chapter", "profile", "device", "steps", "timed_s", "t4_s", "overhead_s", "runs", "untimed"}``. The book's set-up page."""
    if isinstance(slowdown, bool) or not isinstance(slowdown, (int, float)) or not slowdown > 0:
        raise ValueError(f"slowdown must be a number > 0, got {slowdown!r}")
    timings = timings or shipped_step_ms()
    timed = timings["chapters"].get(chapter, {})
    total, overhead, runs, untimed = 0.0, 0.0, [], []
    per_image = timings.get("overhead", {}).get(chapter, 0.0) / FULL_TRAINING_SET
    for planned in training_plan(chapter, profile):
        if planned.network not in timed:                 # not in the timings: left out of the sum, and said so
            untimed.append(planned.network)
            continue
        step_ms, timed_batch = timed[planned.network]
        if timed_batch != planned.batch_size:
            raise ValueError(f"chapter {chapter}'s {planned.network!r} was timed at batch {timed_batch}, "
                             f"the {profile} profile trains it at {planned.batch_size}")
        seconds = planned.steps * step_ms / 1000
        total += seconds
        overhead += per_image * planned.images * planned.epochs * planned.runs
        runs.append({**planned.__dict__, "steps": planned.steps, "step_ms": step_ms, "timed_s": seconds})
    return {"chapter": chapter, "profile": profile, "device": timings["device"],
            "steps": sum(r["steps"] for r in runs), "timed_s": total + overhead, "t4_s": total * slowdown + overhead,
            "overhead_s": overhead, "runs": runs, "untimed": untimed}
