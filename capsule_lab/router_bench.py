"""Chapter 08's bench: every router of the course on one backbone, trained and measured the same way.

Taught in chapter 08 (``chapters/08_routing_bench.ipynb``); run with ``capsule-lab bench routers``. Under a
:class:`~capsule_lab.profiles.RouterBenchSettings`, :func:`run_router_bench` trains, for every router and seed, the
same backbone (the settings' CapsNet: convolution, primary capsules, one layer of class capsules; the same
initialisation of everything but the router for a given seed) on the same images with the same optimiser, and
measures it (:func:`measure_network`). The routers (:data:`ROUTERS`):

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

Each is a :class:`BenchEntry` (:data:`ROUTERS`): the :class:`~capsule_lab.routing.RouterSpec` of the backbone's class
layer (and the votes it is given: Faria's routers get their paper's normalised votes, the others Sabour's W u), REM's
pruning while training, or a network of its own (the ladder). Any other registered kind of router
(:func:`~capsule_lab.routing.register_router`, or ``"module:Name"``) runs on the bench by its name, with its default
spec on Sabour's votes; an entry of your own plugs in with ``custom=`` of :func:`run_router_bench`. Only the
package's own entries are cached (a router written elsewhere has code the cache key does not see). The bench never
asks which network it holds: each network trains with its own loss, counts its own routing parameters and offers its
own parse trees (:class:`~capsule_lab.models.CapsuleNetwork`).
Every record is one router and seed: a JSON-ready dict (:data:`RECORD_FIELDS`). Records are cached: one JSON file per
record, named by a hash of everything that decides it (:func:`record_key`), so a second run with the same settings
only reads them.

The measures:

- ``accuracy`` on the clean test images and ``affine_accuracy`` on the same images under seeded affine maps
  (rotation ≤ 20°, shear ≤ 45°, scale 0.8–1.2: :func:`capsule_lab.data.affine_test_set`); ``correct`` and
  ``affine_correct``, one character 0/1 per test image, for paired tests (:func:`mcnemar_test`);
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
import hashlib
import json
import math
import os
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn
from torch.utils.data import TensorDataset
from tqdm.auto import tqdm

from . import stats
from ._checks import check_one_of, check_positive_int
from .cost import inference_seconds, peak_memory, training_step, training_step_seconds
from .data import affine_test_set, load_dataset
from .diagnostics import activation_stats, routing_dynamics
from .layers import VOTES
from .models import CapsNet, LadderCapsNet, LadderCapsNetConfig, built_routers
from .models.capsnet import BackboneConfig
from .profiles import RouterBenchSettings, chapter_settings
from .rem import global_magnitude_prune, keys_per_class, parse_tree_dictionary, routing_entropy
from .routing import RouterSpec, router_kind, router_kinds
from .study import RESULTS, same_start
from .training import fit, outputs

__all__ = ["BenchEntry", "ROUTERS", "MAIN_ROUTER", "bench_entry", "matched_ladder_widths", "RECORD_FIELDS", "BENCH_VERSION", "bench_data",
           "build_network", "measure_network", "record_key", "train_record", "run_router_bench", "write_results",
           "summarize_records", "mcnemar_test", "default_cache", "SHIPPED_CACHE", "LONGER_RUN", "longer_run_settings",
           "shipped_longer_run", "verdict_records"]

#: The router whose network chapter 08's questions turn on (Sabour's r = 3): the bench's main network, the one
#: :mod:`capsule_lab.epoch_timing` times.
MAIN_ROUTER = "dynamic r=3"
#: The version of a record's meaning, part of every cache key; a new version leaves old cached records unread.
BENCH_VERSION = 1
SHIPPED_CACHE = Path(str(RESULTS / "router_bench"))
#: The longer run's records (``scripts/router_bench_longer_run.py``); its provenance is ``router_bench_long.json``.
LONGER_RUN = Path(str(RESULTS / "router_bench_long"))

#: The fields of a record, in the CSV's column order (``correct`` and ``affine_correct`` stay out of the CSV).
RECORD_FIELDS = ("router", "seed", "dataset", "accuracy", "affine_accuracy", "test_size", "parameters",
                 "nonzero_parameters", "router_parameters", "train_seconds", "train_step_ms", "step_ms", "inference_ms",
                 "batch", "peak_memory_mb", "entropy", "keys", "levels", "normalize_over", "dyr", "dead_primary",
                 "dead_class", "device", "amp", "threads", "torch", "key")


@dataclass(frozen=True)
class BenchEntry:
    """How the bench builds the network of one of its routers. Chapter 08.

    ``router(settings)`` → how the backbone's class layer routes, given ``votes`` (``"plain"``: Sabour's W u;
    ``"normalized"``: Faria's eq. 1): a :class:`~capsule_lab.routing.RouterSpec` (a registered kind's name works too),
    a factory ``f(layer) → Router`` or a :class:`~capsule_lab.routing.Router`; or ``network(settings)`` → a network of
    its own, which takes the backbone's convolution and primary capsules (the ladder). ``prune``: REM's pruning while
    training (chapter 05).
    """

    router: Optional[Callable[[RouterBenchSettings], object]] = None
    votes: str = "plain"
    prune: bool = False
    network: Optional[Callable[[RouterBenchSettings], nn.Module]] = None

    def __post_init__(self):
        check_one_of(self.votes, VOTES, "votes")
        if (self.router is None) == (self.network is None):
            raise ValueError("a BenchEntry needs exactly one of router (the class layer's) or network (its own)")


def _ladder_config(settings: RouterBenchSettings, widths: Optional[tuple] = None) -> LadderCapsNetConfig:
    """The bench's ladder on the settings' backbone: the paper's layers (Table 1) when ``settings.ladder_widths`` is
    None (the full profile), else the slim ones with those hidden widths in f, f^reg and p (the quick profile's
    (64, 32), the widths its shipped runs trained with; chapter 06's slim ladder has Table 1's three), and ``widths``
    (when given) as the hidden widths of f, f^reg and p."""
    c = settings.capsnet
    backbone = {f: getattr(c, f) for f in BackboneConfig.__dataclass_fields__}
    slim = settings.ladder_widths
    config = (LadderCapsNetConfig.paper(k=settings.ladder_k, image_size=c.image_size) if slim is None
              else LadderCapsNetConfig.slim(k=settings.ladder_k, widths=slim, contribution_widths=slim))
    config = replace(config, **backbone, classes=c.classes, class_dim=c.class_dim)
    return config if widths is None else replace(config, widths=widths, contribution_widths=widths)


def _ladder_network(settings: RouterBenchSettings) -> LadderCapsNet:
    return LadderCapsNet(_ladder_config(settings))


def matched_ladder_widths(settings: RouterBenchSettings) -> tuple[int, int]:
    """The hidden widths (w, w // 2) of the matched ladder's networks f, f^reg and p: the w in 1–128 that brings the
    ladder's parameters closest to the backbone CapsNet's. Quick profile: (6, 3), 362,378 parameters against the
    slim CapsNet's 355,488 (the ladder's (64, 32) give 1,868,928, 5.3×); full: (11, 5), 6,791,354 against 6,804,224.
    Counted on the meta device, so nothing is allocated. Chapter 08.
    """
    with torch.device("meta"):
        target = sum(p.numel() for p in CapsNet(settings.capsnet).parameters())

        def size(w):
            return sum(p.numel() for p in LadderCapsNet(_ladder_config(settings, (w, max(1, w // 2)))).parameters())

        w = min(range(1, 129), key=lambda w: abs(size(w) - target))
    return w, max(1, w // 2)


def _matched_ladder_network(settings: RouterBenchSettings) -> LadderCapsNet:
    """The ladder cut to the CapsNet's number of parameters (:func:`matched_ladder_widths`): the control that
    separates what the ladder's layers do from what its 5× more parameters do."""
    return LadderCapsNet(_ladder_config(settings, matched_ladder_widths(settings)))


#: The bench's routers by name (:data:`capsule_lab.profiles.ROUTERS_08`), each a registered kind's spec (or the ladder).
ROUTERS = {
    "dynamic r=1": BenchEntry(lambda s: RouterSpec("dynamic", 1)),
    "dynamic r=3": BenchEntry(lambda s: RouterSpec("dynamic", 3)),
    "dynamic r=5": BenchEntry(lambda s: RouterSpec("dynamic", 5)),
    "detached": BenchEntry(lambda s: RouterSpec("dynamic", 3, detach_couplings=True)),
    "uniform": BenchEntry(lambda s: RouterSpec("uniform")),
    "rem-pruned": BenchEntry(lambda s: RouterSpec("dynamic", 3), prune=True),
    "ladder": BenchEntry(network=_ladder_network),
    "similarity": BenchEntry(lambda s: RouterSpec("similarity", s.iterations, kernels=s.kernels), votes="normalized"),
    "connectionist": BenchEntry(lambda s: RouterSpec("connectionist", s.iterations, lstm_hidden=s.lstm_hidden),
                                votes="normalized"),
    "self-attention": BenchEntry(lambda s: RouterSpec("self-attention")),
    "dynamic r=3 normed": BenchEntry(lambda s: RouterSpec("dynamic", 3), votes="normalized"),
    "ladder matched": BenchEntry(network=_matched_ladder_network),
}


def _check_settings(settings) -> RouterBenchSettings:
    if not isinstance(settings, RouterBenchSettings):
        raise ValueError(f"settings must be a capsule_lab.profiles.RouterBenchSettings, got {type(settings).__name__}")
    return settings


def bench_entry(name: str, custom: dict | None = None) -> BenchEntry:
    """The entry of ``name``: one of ``custom``'s, one of :data:`ROUTERS`, else the default spec of the registered kind
    ``name`` (or ``"module:Name"``, imported) on Sabour's votes."""
    entries = {**ROUTERS, **(custom or {})}
    if name not in entries:
        if not isinstance(name, str) or (name not in router_kinds() and ":" not in name):
            raise ValueError(f"router must be one of {sorted(entries)} or a registered kind of router "
                             f"{router_kinds()} (or 'module:Name'), got {name!r}")
        kind = router_kind(name).name
        return BenchEntry(lambda s: RouterSpec(kind))
    entry = entries[name]
    if not isinstance(entry, BenchEntry):
        raise ValueError(f"router {name!r} must be given as a BenchEntry, got {type(entry).__name__}")
    return entry


def _cached(name: str, custom: dict | None) -> bool:
    """Whether a record of ``name`` may be read from and written to the cache: the package's own entries only (the key
    does not see the code of a router written elsewhere)."""
    return name in ROUTERS and not (custom and name in custom)


def bench_data(settings: RouterBenchSettings, source: str = "offline") -> tuple:
    """``(train, test, affine)``: the first ``train_size`` training and ``test_size`` test images of the settings'
    dataset, and the test images under seeded affine maps (seed 0, :func:`capsule_lab.data.affine_test_set`).
    ``source`` as :func:`capsule_lab.data.load_mnist`. Chapter 08.
    """
    settings = _check_settings(settings)
    train = load_dataset(settings.dataset, True, source, settings.train_size)
    test = load_dataset(settings.dataset, False, source, settings.test_size)
    return train, test, affine_test_set(test, seed=0, strength=settings.affine_strength)


def build_network(name: str, settings: RouterBenchSettings, seed: int = 0, custom: dict | None = None) -> nn.Module:
    """A fresh network with router ``name``, made by :func:`capsule_lab.study.same_start` from ``seed``: the backbone
    (Sabour's CapsNet of the settings) first, then the router's network, which takes its weights — all of them, or
    for a network of its own the convolution and primary capsules. So for one seed every router starts from the same
    convolution, primary capsules and (where it has them) class-layer W. Chapter 08.
    """
    settings, entry = _check_settings(settings), bench_entry(name, custom)
    if entry.network is not None:
        return same_start(seed, lambda: CapsNet(settings.capsnet), lambda: entry.network(settings),
                          share=("conv", "primary"))
    config = replace(settings.capsnet, votes=entry.votes)

    def routed():                               # the router first (its parameters drawn before the network's own)
        return config.network(built_routers(entry.router(settings), config.router_layers()))

    return same_start(seed, settings.capsnet.network, routed)


def _bench_step(name: str, settings: RouterBenchSettings, seed: int, images: torch.Tensor, labels: torch.Tensor,
                custom: dict | None = None, amp: bool = False, device="cpu"):
    """One training step of a fresh ``name`` network on one batch (:func:`capsule_lab.cost.training_step`): the
    step whose peak memory a record reports."""
    net = build_network(name, settings, seed, custom).to(device)
    return training_step(net, images.to(device), labels.to(device), amp=amp)


def _peak_memory_mb(name, settings, seed, images, labels, device, custom, amp=False) -> float | None:
    """One training step's peak memory (MB) beyond what was resident before it (:func:`capsule_lab.cost.peak_memory`),
    or None where it cannot be measured (a CPU elsewhere than Linux)."""
    peak = peak_memory(_bench_step, (name, settings, seed, images, labels, custom, amp), device)
    return None if peak is None else round(peak / 1e6, 1)


def measure_network(net: nn.Module, test: TensorDataset, affine: TensorDataset, batch_size: int = 500, device="cpu",
                    amp: bool = False) -> dict:
    """Measure a trained network on the clean and the affine test sets (reductions of
    :func:`capsule_lab.training.outputs`): ``accuracy``, ``affine_accuracy``, ``correct``, ``affine_correct`` (0/1
    strings), ``entropy``, ``keys``, ``levels``, ``normalize_over``, ``dyr``, ``dead_primary``, ``dead_class`` (see the
    module docstring; the routing measures come from the clean images). Chapter 08.
    """
    result = {}
    for label, data in (("", test), ("affine_", affine)):
        correct, trees, dynamics, predictions, primary, scores = [], [], [], [], [], []
        for _, y, out in outputs(net, data, batch_size, device, amp):
            predicted = out.scores.argmax(dim=1)
            correct.append((predicted == y).cpu())
            if not label:
                parse = net.parse_trees(out)
                trees.append(parse.couplings.cpu())
                if parse.dynamics is not None:
                    dynamics.append(parse.dynamics.cpu())
                predictions.append(predicted.cpu())
                primary.append(out.primary.norm(dim=-1).float().cpu())
                scores.append(out.scores.float().cpu())
        correct = torch.cat(correct)
        result[f"{label}accuracy"] = correct.double().mean().item()
        result[f"{label}correct"] = stats.correct_string(correct)
        if not label:
            couplings, predictions = torch.cat(trees), torch.cat(predictions)
            result["entropy"] = routing_entropy(couplings, predictions, parse.levels)[0]
            keys = keys_per_class(parse_tree_dictionary(couplings, predictions, parse.levels))
            result["keys"] = sum(keys.values()) / len(keys)
            result["levels"] = parse.levels
            result["normalize_over"] = parse.normalize_over
            result["dyr"] = None if parse.dynamics is None else routing_dynamics(torch.cat(dynamics))["dyr"]
            result["dead_primary"] = activation_stats(torch.cat(primary))["cdr"]
            result["dead_class"] = activation_stats(torch.cat(scores))["cdr"]
    return result


def record_key(name: str, seed: int, settings: RouterBenchSettings, device="cpu", amp: bool = False) -> str:
    """The cache key of one record: a hash of the router's name, the seed, the device type, :data:`BENCH_VERSION`,
    every setting that decides a run (all but ``routers`` and ``seeds``, so adding a seed reuses the others) and,
    when the run trains in mixed precision (``amp`` on CUDA), that fact. Chapter 08.
    """
    settings = _check_settings(settings)
    decisive = {k: v for k, v in _settings_record(settings).items() if k not in ("routers", "seeds")}
    what = {"router": name, "seed": seed, "device": torch.device(device).type, "version": BENCH_VERSION,
            "settings": decisive}
    if _mixed(device, amp):
        what["amp"] = True                # full precision adds nothing, so full-precision records keep their keys
    blob = json.dumps(what, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


#: Settings added after the bench's records were shipped (the bench's own and its network's router spec's), with the
#: value every shipped record was trained with: at that value a setting is left out of a record's key and of a longer
#: run's provenance, so the shipped records keep theirs.
ADDED_SETTINGS = {"ladder_widths": (64, 32), "compatibility_hidden": (64, 64), "activation_hidden": (124, 124),
                  "options": ()}


def _without_added(value):
    if isinstance(value, dict):
        return {k: _without_added(v) for k, v in value.items()
                if k not in ADDED_SETTINGS or v != json.loads(json.dumps(ADDED_SETTINGS[k]))}
    return value


def _settings_record(settings: RouterBenchSettings) -> dict:
    """The settings as JSON-ready data, those of :data:`ADDED_SETTINGS` left out at their shipped value."""
    return _without_added(json.loads(json.dumps(asdict(settings), default=str)))


def _mixed(device, amp: bool) -> bool:
    """Whether a run trains in mixed precision: ``amp`` acts on CUDA only (:func:`~capsule_lab.training.fit`)."""
    return bool(amp) and torch.device(device).type == "cuda"


def train_record(name: str, settings: RouterBenchSettings, data: tuple, seed: int = 0, device="cpu",
                 amp: bool = False, custom: dict | None = None, memory: bool = True) -> dict:
    """One record: train :func:`build_network` ``(name, settings, seed)`` on ``data = (train, test, affine)`` with the
    settings' schedule (REM's pruning after each of its first ``rem_rounds`` epochs) and the network's own loss,
    measure it (:func:`measure_network`), and time a fresh copy's training step and inference batch. Chapter 08.
    """
    settings, entry = _check_settings(settings), bench_entry(name, custom)
    if not isinstance(data, tuple) or len(data) != 3:
        raise ValueError("data must be the (train, test, affine) tuple of bench_data")
    check_positive_int(seed, "seed", minimum=0)
    device = torch.device(device)
    train, test, affine = data
    net = build_network(name, settings, seed, custom).to(device)

    def prune_after(epoch, model):
        if entry.prune and epoch <= settings.rem_rounds:
            global_magnitude_prune(model, settings.rem_amount)

    history = fit(net, train, None, **settings.schedule.fit_options(), device=device, amp=amp, seed=seed,
                  progress=False, on_epoch_end=prune_after)
    seconds = sum(history.seconds)
    record = {"router": name, "seed": seed, "dataset": settings.dataset, "test_size": len(test),
              **measure_network(net, test, affine, device=device, amp=amp),
              "parameters": sum(p.numel() for p in net.parameters()),
              "nonzero_parameters": sum(int((p != 0).sum()) for p in _effective_weights(net)),
              "router_parameters": sum(p.numel() for p in net.routing_parameters()), "train_seconds": seconds,
              "train_step_ms": 1e3 * seconds / (settings.schedule.epochs
                                                * math.ceil(len(train) / settings.schedule.batch_size)),
              "train_loss": history.train_loss, "train_accuracy": history.train_accuracy}
    record.update(_timings(name, settings, seed, train, device, custom, amp))
    batch = train.tensors[0][:settings.schedule.batch_size], train.tensors[1][:settings.schedule.batch_size]
    record["peak_memory_mb"] = None
    if memory:
        try:
            record["peak_memory_mb"] = _peak_memory_mb(name, settings, seed, *batch, device, custom, amp)
        except RuntimeError as err:             # a failed measure is recorded, the run goes on
            record["peak_memory_error"] = str(err)
    record.update(device=str(device), amp=_mixed(device, amp), threads=torch.get_num_threads(),
                  torch=torch.__version__, key=record_key(name, seed, settings, device, amp))
    return record


def _effective_weights(net: nn.Module):
    """Each parameter as the network uses it: a pruned weight as weight_orig × mask."""
    for module in net.modules():
        for name, p in module.named_parameters(recurse=False):
            mask = getattr(module, name.removesuffix("_orig") + "_mask", None) if name.endswith("_orig") else None
            yield p.detach() * mask if mask is not None else p.detach()


def _timings(name, settings, seed, train, device, custom, amp=False) -> dict:
    images = train.tensors[0][:settings.schedule.batch_size].to(device)
    labels = train.tensors[1][:settings.schedule.batch_size].to(device)
    net = build_network(name, settings, seed, custom).to(device)
    step = training_step_seconds(net, images, labels, repeats=settings.timing_repeats, amp=amp)
    inference = inference_seconds(net, images, repeats=settings.timing_repeats, amp=amp)
    return {"step_ms": step["median_s"] * 1e3, "inference_ms": inference["median_s"] * 1e3, "batch": len(labels)}


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


def mcnemar_test(correct_a: str, correct_b: str) -> dict:
    """McNemar's exact test of two classifiers on the same test images (:func:`capsule_lab.stats.mcnemar_test`), as
    a dict ``{"a_only", "b_only", "p_value"}``: b = images right for A only, c = right for B only, and the two-sided
    p-value ``min(1, 2 · P(X ≤ min(b, c)))`` for X ~ Binomial(b + c, ½). Chapter 08.
    """
    result = stats.mcnemar_test(correct_a, correct_b)
    return {"a_only": result.a_only, "b_only": result.b_only, "p_value": result.p_value}


def longer_run_settings(epochs: int, train_size: int, test_size: int, seeds, routers=None) -> RouterBenchSettings:
    """The quick bench trained longer (``scripts/router_bench_longer_run.py``): the quick profile's settings with
    ``epochs``, the sizes, ``seeds`` and ``routers`` (default all), REM's pruning rounds kept below the epochs so the
    network trains after its last one. Chapter 08."""
    quick = chapter_settings("08", "quick")
    check_positive_int(epochs, "epochs")
    return replace(quick, train_size=train_size, test_size=test_size, seeds=tuple(seeds),
                   routers=tuple(routers) if routers else quick.routers,
                   schedule=replace(quick.schedule, epochs=epochs), rem_rounds=min(quick.rem_rounds, epochs - 1))


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
                         "sizes, epochs and seeds: rerun scripts/router_bench_longer_run.py")
    missing = [(name, seed) for name in settings.routers for seed in settings.seeds
               if not (LONGER_RUN / f"{record_key(name, seed, settings)}.json").exists()]
    if missing:
        raise ValueError(f"{LONGER_RUN} lacks the records of {missing}: rerun scripts/router_bench_longer_run.py")
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
