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
import statistics
from pathlib import Path

import torch

from ..._checks import check_positive_int
from ...measures.cost import time_interleaved, training_step
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
    routers, seeds, threads = tuple(routers), tuple(seeds), tuple(threads)
    if len(routers) < 2:
        raise ValueError(f"routers must name two or more bench routers to interleave, got {routers!r}")
    if not seeds or not threads:
        raise ValueError("seeds and threads must each hold at least one value")
    for t in threads:
        check_positive_int(t, "threads")
    if check_positive_int(steps, "steps") < 10:
        raise ValueError(f"steps must be >= 10 (the timing rule), got {steps}")
    train = (data if data is not None else bench_data(settings))[0]
    images, labels = (t[:settings.schedule.batch_size] for t in train.tensors)
    before, records = torch.get_num_threads(), []
    try:
        for count in threads:
            torch.set_num_threads(count)
            for seed in seeds:
                steps_of = {name: training_step(build_network(name, settings, seed), images, labels)
                            for name in routers}
                timed = time_interleaved(steps_of, repeats=steps, warmup=warmup)
                for name in routers:
                    times = [round(1e3 * s, 3) for s in timed["times"][name]]
                    records.append({"router": name, "seed": seed, "train_step_ms": statistics.median(times),
                                    "step_times_ms": times, "timed_steps": len(times), "interleaved": True,
                                    "load": list(timed["load"]), "device": "cpu", "threads": count,
                                    "batch": int(labels.shape[0])})
    finally:
        torch.set_num_threads(before)
    return records


def shipped_timing(path: str | Path = TIMING) -> dict:
    """The shipped interleaved timing: ``{"provenance": …, "records": [...]}`` (``scripts/router_timing.py``).
    Chapter 08."""
    path = Path(str(path))
    if not path.exists():
        raise ValueError(f"no shipped timing at {path}: run python scripts/router_timing.py")
    return json.loads(path.read_text())
