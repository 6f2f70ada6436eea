"""Chapter 08's bench: every router of the course on one backbone, trained and measured the same way.

Taught in chapter 08 (``chapters/08_routing_bench.ipynb``); run with ``capsule-lab bench routers``. Under a
:class:`~capsule_lab.studies.bench.settings.RouterBenchSettings`, :func:`run_router_bench` trains, for every router and
seed, the same backbone (the settings' CapsNet: convolution, primary capsules, one layer of class capsules; the same
initialisation of everything but the router for a given seed) on the same images with the same optimiser, and
measures it (:func:`measure_network`). The routers (:data:`~capsule_lab.studies.bench.entries.ROUTERS`):

- ``dynamic r=1``, ``dynamic r=3``, ``dynamic r=5``: Sabour's routing with 1, 3, 5 iterations (chapter 02; r = 1
  is uniform couplings in the forward pass, but its backward pass is the same, so it is here as a check);
- ``detached``: r = 3 with the couplings constant in the backward pass (chapter 03);
- ``uniform``: c_ij = 1/J, no routing (chapters 03 and 04);
- ``rem-pruned``: r = 3, its network pruned by global weight magnitude while it trains (chapter 05);
- ``ladder``: the L-CapsNet's pruning and ladder layers in place of the class layer, ``ladder_k`` kept capsules
  (chapter 06);
- ``similarity`` and ``connectionist``: Faria's learned routers (chapter 07);
- ``self-attention``: Efficient-CapsNet's non-iterative self-attention routing, the modern baseline
  (:class:`~capsule_lab.routing.SelfAttentionRouter`);
- two controls, which change one thing each so that a comparison isolates routing: ``dynamic r=3 normed`` (r = 3 on
  Faria's normalised votes, the votes the learned routers get) and ``ladder matched`` (the ladder with its hidden
  widths cut by :func:`matched_ladder_widths`, so that it has the CapsNet's number of parameters).

Each is a :class:`BenchEntry` (:data:`~capsule_lab.studies.bench.entries.ROUTERS`): the
:class:`~capsule_lab.routing.RouterSpec` of the backbone's class layer (and the votes it is given: Faria's routers get
their paper's normalised votes, the others Sabour's W u), REM's pruning while training, or a network of its own (the
ladder). Any other registered kind of router (:func:`~capsule_lab.routing.register_router`, or ``"module:Name"``) runs
on the bench by its name, with its default spec on Sabour's votes; an entry of your own plugs in with ``custom=`` of
:func:`run_router_bench`. Only the package's own entries are cached (a router written elsewhere has code the cache key
does not see). The bench never asks which network it holds: each network trains with its own loss, counts its own
routing parameters and offers its own parse trees (:class:`~capsule_lab.models.CapsuleNetwork`).
Every record is one router and seed: a JSON-ready dict (:data:`RECORD_FIELDS`). Records are cached: one JSON file per
record, named by a hash of everything that decides it (:func:`record_key`), so a second run with the same settings
only reads them.

The measures:

- ``accuracy`` on the clean test images and ``affine_accuracy`` on the same images under seeded affine maps
  (rotation ≤ 20°, shear ≤ 45°, scale 0.8–1.2: :func:`capsule_lab.data.transforms.affine_test_set`); ``correct`` and
  ``affine_correct``, one character 0/1 per test image, for paired tests
  (:func:`~capsule_lab.evidence.stats.mcnemar_test`);
- ``train_loss`` and ``train_accuracy`` per epoch; ``parameters`` (all), ``nonzero_parameters`` (after pruning)
  and ``router_parameters``;
- ``train_step_ms``: the mean training step over the whole training run (its seconds over its steps: the steadier
  number on a shared machine); ``step_ms``: the median of a few training steps (forward, loss, backward, Adam) of
  a fresh copy on one batch;
  ``inference_ms`` the median forward pass without gradients on one batch; ``device``, ``amp`` (mixed precision,
  which the step, inference and memory measures then use too, as training does) and ``threads``;
- ``peak_memory_mb``: one training step's peak memory beyond what was resident before it (CUDA: the allocator's
  peak; CPU: the peak resident set of a forked process after one warm-up step, with glibc's mmap threshold fixed at
  64 KiB so that tensors are mapped and unmapped as they live and die; Linux only; None elsewhere, or None with the
  reason in ``peak_memory_error`` when the measure failed: the run goes on);
- ``entropy`` (bits) and ``keys`` (distinct parse trees per class, averaged): chapter 05's parse-tree metric on
  the class layer's couplings, as each network offers them (:meth:`~capsule_lab.models.CapsuleNetwork.parse_trees`;
  ``normalize_over`` says how its couplings were normalised, ``levels`` how finely the keys quantise them);
- ``dyr``: chapter 04's routing-dynamics coefficient of the class layer; ``dead_primary`` and ``dead_class``:
  chapter 04's dead-capsule rate (cdr) of the primary and of the class capsules. The backbone has no hidden
  capsule layer, so these are the two capsule layers it has.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from dataclasses import replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..._checks import check_positive_int
from ..common import RESULTS, rerun
from .entries import _cached, _check_settings, bench_data, bench_entry
from .records import RECORD_FIELDS, _settings_record, record_key, train_record
from .settings import SETTINGS, RouterBenchSettings

__all__ = ["run_router_bench", "write_results", "summarize_records", "default_cache", "SHIPPED_CACHE",
           "LONGER_RUN", "longer_run_settings", "shipped_longer_run", "verdict_records"]

SHIPPED_CACHE = Path(str(RESULTS / "router_bench"))
#: The longer run's records (``scripts/router_bench_longer_run.py``); its provenance is ``router_bench_long.json``.
LONGER_RUN = Path(str(RESULTS / "router_bench_long"))


def default_cache() -> Path:
    """Where ``capsule-lab bench routers`` caches records: ``$CAPSULE_LAB_CACHE/router-bench``, else
    ``~/.cache/capsule-lab/router-bench``. Chapter 08."""
    root = os.environ.get("CAPSULE_LAB_CACHE") or Path.home() / ".cache" / "capsule-lab"
    return Path(root) / "router-bench"


def run_router_bench(settings: RouterBenchSettings, routers=None, seeds=None, data: tuple | None = None,
                     cache: str | os.PathLike | None = None, device=None, amp: bool = False,
                     custom: dict | None = None, memory: bool = True, progress: bool = True) -> list:
    """The bench: one record per router (``routers``, default the settings') and seed (default the settings'),
    from ``cache`` where it holds the record's key (:func:`record_key`), else trained and measured
    (:func:`train_record`) and written there. ``cache=None``: nothing read or written. ``custom``:
    ``{name: BenchEntry}``, routers of your own (never cached: their code is not in the key). Each record read from
    the cache gets ``"cached": True``. ``data`` defaults to :func:`bench_data`. Chapter 08.
    """
    settings = _check_settings(settings)
    routers = tuple(routers if routers is not None else settings.routers)
    seeds = tuple(seeds if seeds is not None else settings.seeds)
    for name in routers:
        bench_entry(name, custom)
    for seed in seeds:
        check_positive_int(seed, "seed", minimum=0)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    folder = Path(cache) if cache is not None else None
    records = []
    bar = tqdm([(name, seed) for name in routers for seed in seeds], desc="routers", disable=not progress)
    for name, seed in bar:
        bar.set_postfix_str(f"{name}, seed {seed}")
        key = record_key(name, seed, settings, device, amp)
        path = folder / f"{key}.json" if folder is not None else None
        if path is not None and path.exists() and _cached(name, custom):
            records.append({**json.loads(path.read_text()), "cached": True})
            continue
        if data is None:
            data = bench_data(settings)
        record = train_record(name, settings, data, seed, device, amp, custom, memory)
        if path is not None and _cached(name, custom):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record, indent=1) + "\n")
        records.append({**record, "cached": False})
    return records


def write_results(records: list, path: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``records`` as JSON to ``path`` and as CSV beside it (same name, ``.csv``; :data:`RECORD_FIELDS` as
    columns, the per-image strings left out). Returns both paths. Chapter 08.
    """
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError("records must be the list of dicts run_router_bench returns")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=1) + "\n")
    table = path.with_suffix(".csv")
    with table.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*RECORD_FIELDS, "cached"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    return path, table


def summarize_records(records: list, measures=("accuracy", "affine_accuracy", "train_step_ms", "step_ms",
                                              "inference_ms", "entropy", "keys", "dyr", "dead_primary", "dead_class",
                                              "peak_memory_mb", "parameters", "router_parameters")) -> dict:
    """Per router, in the records' order: for each measure the mean over seeds, the sample standard deviation and
    the standard error of the mean (sd/√n; None with one seed), and ``seeds`` — ``{router: {"seeds": n,
    measure: (mean, sd, se)}}``. Measures that are None for a router (the ladder's dyr) stay None. Chapter 08.
    """
    if not isinstance(records, list) or not records:
        raise ValueError("records must be a non-empty list of run_router_bench's records")
    by_router: dict = {}
    for r in records:
        by_router.setdefault(r["router"], []).append(r)
    summary = {}
    for name, rows in by_router.items():
        summary[name] = {"seeds": len(rows)}
        for measure in measures:
            values = [float(r[measure]) for r in rows if r.get(measure) is not None]
            if not values:
                summary[name][measure] = None
                continue
            mean = statistics.fmean(values)
            sd = statistics.stdev(values) if len(values) > 1 else None
            summary[name][measure] = (mean, sd, sd / math.sqrt(len(values)) if sd is not None else None)
    return summary


def longer_run_settings(epochs: int, train_size: int, test_size: int, seeds, routers=None,
                        lr_decay: float | None = None) -> RouterBenchSettings:
    """The quick bench trained longer (``scripts/router_bench_longer_run.py``): the quick profile's settings with
    ``epochs``, the sizes, ``seeds``, ``routers`` (default all) and ``lr_decay`` (default the quick schedule's), REM's
    pruning rounds kept below the epochs so the network trains after its last one. Chapter 08."""
    quick = SETTINGS["quick"]
    check_positive_int(epochs, "epochs")
    if lr_decay is not None and not 0 < lr_decay <= 1:
        raise ValueError(f"lr_decay must be in (0, 1], got {lr_decay!r}")
    return replace(quick, train_size=train_size, test_size=test_size, seeds=tuple(seeds),
                   routers=tuple(routers) if routers else quick.routers,
                   schedule=replace(quick.schedule, epochs=epochs, lr_decay=lr_decay or quick.schedule.lr_decay),
                   rem_rounds=min(quick.rem_rounds, epochs - 1))


def shipped_longer_run(report: str = "router_bench_long") -> tuple[RouterBenchSettings, list, dict]:
    """The bench's longer run as shipped: ``(settings, records, provenance)``, the settings rebuilt from the
    provenance ``scripts/router_bench_longer_run.py`` wrote (``capsule_lab/results/{report}.json``: the quick
    profile's with its own routers, sizes, epochs and seeds) and the records read from its cache
    (:data:`LONGER_RUN`), in the settings' router and seed order. ``report``: ``"router_bench_long"`` (every router,
    12 epochs) or ``"router_bench_long_ladder"`` (the two ladders, 20 epochs). Chapter 08.
    """
    path = Path(str(RESULTS / f"{report}.json"))
    if not path.exists():
        raise ValueError(f"no longer run named {report!r}: {path} does not exist")
    report = json.loads(path.read_text())
    provenance, saved = report["provenance"], report["provenance"]["settings"]
    settings = longer_run_settings(saved["schedule"]["epochs"], saved["train_size"], saved["test_size"],
                                   saved["seeds"], saved["routers"])
    if _settings_record(settings) != saved:                                  # as JSON: tuples read back as lists
        raise ValueError("the longer run was trained with settings that differ from the quick profile's in more than "
                         f"sizes, epochs and seeds: {rerun('router_bench_longer_run.py')}")
    missing = [(name, seed) for name in settings.routers for seed in settings.seeds
               if not (LONGER_RUN / f"{record_key(name, seed, settings)}.json").exists()]
    if missing:
        raise ValueError(f"{LONGER_RUN} lacks the records of {missing}: {rerun('router_bench_longer_run.py')}")
    records = run_router_bench(settings, cache=LONGER_RUN, device="cpu", progress=False)
    return settings, records, provenance


def verdict_records() -> list:
    """The records chapter 08's verdicts read: every router of the longer run after its epochs, except the two
    ladders, which come from their own, longer run (the budget each needed to converge), in the longer run's router
    and seed order (:func:`shipped_longer_run` of both reports). Chapters 06 and 08."""
    settings, records, _ = shipped_longer_run()
    _, ladder_records, _ = shipped_longer_run("router_bench_long_ladder")
    ladders = {r["router"] for r in ladder_records}
    return sorted([r for r in records if r["router"] not in ladders] + ladder_records,
                  key=lambda r: (settings.routers.index(r["router"]), r["seed"]))
