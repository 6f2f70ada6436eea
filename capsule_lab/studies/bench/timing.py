"""Chapter 08's bench timed by the timing rule: two or more routers' training steps interleaved, repeated, at each
thread count, with the machine's load recorded. Chapter 08.

A step's time on a shared CPU moves with whatever else the machine does. Timing router by router (all seeds of one,
then all of the next) turns the machine's moods into differences between routers; timing once per seed leaves no
spread to read. :func:`time_routers` builds each router's bench network for a seed
(:func:`~capsule_lab.studies.bench.entries.build_network`, the same start for every router), takes one training batch,
and times their training steps in turn (:func:`capsule_lab.measures.cost.time_interleaved`: A, B, A, B, …, the order
rotated each round), at least 10 rounds per seed, at each thread count asked; the 1-minute load average is read
before and after. Each record is one router, seed and thread count: ``train_step_ms`` (the median of its timed
steps), the steps themselves, ``timed_steps``, ``interleaved``, ``load``, ``device``, ``threads`` and ``batch``: what
:func:`capsule_lab.evidence.claims.claim_verdicts` reads for a claim about time
(:func:`~capsule_lab.evidence.rules.timing_problems`). ``scripts/router_timing.py`` ships one such run
(:func:`shipped_timing`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...measures.cost import interleaved_step_records
from ..common import RESULTS
from .entries import bench_data, build_network
from .settings import RouterBenchSettings

__all__ = ["TIMING", "time_routers", "shipped_timing"]

#: The shipped interleaved timing of chapter 08's time claim (``scripts/router_timing.py``).
TIMING = RESULTS / "router_timing.json"


def time_routers(settings: RouterBenchSettings, routers, seeds, threads=(1, 2), steps: int = 20, warmup: int = 2,
                 data: tuple | None = None) -> list:
    """Training steps of ``routers`` (bench names) timed interleaved, ``steps`` rounds per seed after ``warmup``, for
    each seed and each thread count in ``threads``, on the CPU: one record per router, seed and thread count (see the
    module). ``data`` is :func:`~capsule_lab.studies.bench.entries.bench_data`'s triple (read when None); the batch is
    the first ``settings.schedule.batch_size`` training images. Chapter 08."""
    train = (data if data is not None else bench_data(settings))[0]
    images, labels = (t[:settings.schedule.batch_size] for t in train.tensors)
    return interleaved_step_records(lambda name, seed: build_network(name, settings, seed), routers, seeds, threads,
                                    images, labels, steps, warmup)


def shipped_timing(path: str | Path = TIMING) -> dict:
    """The shipped interleaved timing: ``{"provenance": …, "records": [...]}`` (``scripts/router_timing.py``).
    Chapter 08."""
    path = Path(str(path))
    if not path.exists():
        raise ValueError(f"no shipped timing at {path}: run python scripts/router_timing.py")
    return json.loads(path.read_text())
