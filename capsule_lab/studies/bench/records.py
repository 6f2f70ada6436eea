"""Chapter 08's records: one router and one seed, trained and measured the same way, keyed for the cache.

Taught in chapter 08. :func:`train_record` trains :func:`~capsule_lab.studies.bench.entries.build_network` with the
settings' schedule and the network's own loss, measures it (:func:`measure_network`: clean and affine accuracy, the
parse-tree entropy and keys, dyr, dead capsules), times a fresh copy's training step and inference batch and measures a
step's peak memory (:func:`capsule_lab.measures.cost.peak_memory`: on a CPU in a forked process, so a router written in
a notebook or a script is measured too; a measure that fails is recorded, with its reason in
``peak_memory_error``). Every record is a JSON-ready dict (:data:`RECORD_FIELDS`) named by :func:`record_key`, a hash
of everything that decides it; settings added after the records were shipped leave the keys unchanged at their
shipped values (:data:`ADDED_SETTINGS`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict

import torch
from torch import nn
from torch.utils.data import TensorDataset

from ..._checks import check_positive_int
from ...evidence import stats
from ...measures.capsule_stats import activation_stats, routing_dynamics
from ...measures.cost import inference_seconds, peak_memory, training_step, training_step_seconds
from ...measures.parse_trees import collect_parse_trees, keys_per_class, parse_tree_dictionary, routing_entropy
from ...measures.pruning import global_magnitude_prune
from ...routing import kind_module, router_kinds
from ...training import fit
from .entries import _check_settings, bench_entry, build_network
from .settings import RouterBenchSettings

#: The version of a record's meaning, part of every cache key; a new version leaves old cached records unread.
BENCH_VERSION = 1
#: The fields of a record, in the CSV's column order (``correct`` and ``affine_correct`` stay out of the CSV).
RECORD_FIELDS = ("router", "seed", "dataset", "accuracy", "affine_accuracy", "test_size", "parameters",
                 "nonzero_parameters", "router_parameters", "train_seconds", "train_step_ms", "step_ms", "inference_ms",
                 "batch", "peak_memory_mb", "entropy", "keys", "levels", "normalize_over", "dyr", "dead_primary",
                 "dead_class", "device", "amp", "threads", "torch", "key")


def _bench_step(name: str, settings: RouterBenchSettings, seed: int, images: torch.Tensor, labels: torch.Tensor,
                custom: dict | None = None, amp: bool = False, device="cpu"):
    """One training step of a fresh ``name`` network on one batch (:func:`capsule_lab.measures.cost.training_step`): the
    step whose peak memory a record reports."""
    net = build_network(name, settings, seed, custom).to(device)
    return training_step(net, images.to(device), labels.to(device), amp=amp)


def _peak_memory_mb(name, settings, seed, images, labels, device, custom, amp=False) -> float | None:
    """One training step's peak memory (MB) beyond what was resident before it
    (:func:`capsule_lab.measures.cost.peak_memory`: the modules that register routers outside the package imported in
    its fresh process first), or None where it cannot be measured (a CPU elsewhere than Linux)."""
    registering = sorted({m for m in map(kind_module, router_kinds()) if not m.startswith("capsule_lab.")})
    peak = peak_memory(_bench_step, (name, settings, seed, images, labels, custom, amp), device, imports=registering)
    return None if peak is None else round(peak / 1e6, 1)


def measure_network(net: nn.Module, test: TensorDataset, affine: TensorDataset, batch_size: int = 500, device="cpu",
                    amp: bool = False) -> dict:
    """Measure a trained network on the clean and the affine test sets (one pass over each,
    :func:`capsule_lab.measures.parse_trees.collect_parse_trees`): ``accuracy``, ``affine_accuracy``, ``correct``,
    ``affine_correct`` (0/1 strings), ``entropy``, ``keys``, ``levels``, ``normalize_over``, ``dyr``,
    ``dead_primary``, ``dead_class`` (see the module docstring; the routing measures come from the clean images).
    Chapter 08.
    """
    primary, scores = [], []

    def keep_lengths(x, y, out):
        primary.append(out.primary.norm(dim=-1).float().cpu())
        scores.append(out.scores.float().cpu())

    trees = collect_parse_trees(net, test, batch_size, device, amp, dynamics=True, each_batch=keep_lengths)
    affine_trees = collect_parse_trees(net, affine, batch_size, device, amp, keep=None)
    result = {}
    for label, seen in (("", trees), ("affine_", affine_trees)):
        correct = seen.predictions == seen.labels
        result[f"{label}accuracy"] = correct.double().mean().item()
        result[f"{label}correct"] = stats.correct_string(correct)
    result["entropy"] = routing_entropy(trees.couplings, trees.predictions, trees.levels)[0]
    keys = keys_per_class(parse_tree_dictionary(trees.couplings, trees.predictions, trees.levels))
    result["keys"] = sum(keys.values()) / len(keys)
    result["levels"] = trees.levels
    result["normalize_over"] = trees.normalize_over
    result["dyr"] = None if trees.dynamics is None else routing_dynamics(trees.dynamics)["dyr"]
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
                 amp: bool = False, custom: dict | None = None, memory: bool = True, checkpoint=None) -> dict:
    """One record: train :func:`build_network` ``(name, settings, seed)`` on ``data = (train, test, affine)`` with the
    settings' schedule (REM's pruning after each of its first ``rem_rounds`` epochs) and the network's own loss,
    measure it (:func:`measure_network`), and time a fresh copy's training step and inference batch.
    ``checkpoint``: a file :func:`~capsule_lab.training.fit` saves the training to after every epoch and resumes it
    from (REM's pruning happens before the epoch's checkpoint is written, so a resumed run has its masks). Chapter 08.
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
                  progress=False, on_epoch_end=prune_after, checkpoint=checkpoint)
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
