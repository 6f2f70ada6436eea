"""Chapter 08's bench: every router of the course on one backbone, trained and measured the same way.

Taught in chapter 08 (``chapters/08_routing_bench.ipynb``); run with ``capsule-lab bench routers``. Under a
:class:`~capsule_lab.profiles.RouterBenchSettings`, :func:`run_router_bench` trains, for every router and seed, the
same backbone (the settings' CapsNet: convolution, primary capsules, one layer of class capsules; the same
initialisation of everything but the router for a given seed) on the same images with the same optimiser, and
measures it (:func:`measure_router`). The routers (:data:`ROUTER_SPECS`):

- ``dynamic r=1``, ``dynamic r=3``, ``dynamic r=5``: Sabour's routing with 1, 3, 5 iterations (chapter 02; r = 1
  is uniform couplings in the forward pass, but its backward pass is the same, so it is here as a check);
- ``detached``: r = 3 with the couplings constant in the backward pass (chapter 03);
- ``uniform``: c_ij = 1/J, no routing (chapters 03 and 04);
- ``rem-pruned``: r = 3, its network pruned by global weight magnitude while it trains (chapter 05);
- ``ladder``: the L-CapsNet's pruning and ladder layers in place of the class layer, ``ladder_k`` kept capsules
  (chapter 06);
- ``similarity`` and ``connectionist``: Faria's learned routers (chapter 07);
- ``self-attention``: Efficient-CapsNet's non-iterative self-attention routing, the modern baseline
  (:class:`~capsule_lab.routing.SelfAttentionRouter`).

A new router plugs in as a :class:`RouterSpec` (``custom=`` of :func:`run_router_bench`). Every record is one
router and seed: a JSON-ready dict (:data:`RECORD_FIELDS`). Records are cached: one JSON file per record, named by
a hash of everything that decides it (:func:`record_key`), so a second run with the same settings only reads them.

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
  peak; CPU: the peak resident set of a fresh process after one warm-up step, with glibc's mmap threshold fixed at
  64 KiB so that tensors are mapped and unmapped as they live and die; Linux only; None elsewhere);
- ``entropy`` (bits) and ``keys`` (distinct parse trees per class, averaged): chapter 05's parse-tree metric on
  the class layer's couplings (:func:`parse_tree_couplings` says how each router's couplings are read);
- ``dyr``: chapter 04's routing-dynamics coefficient of the class layer; ``dead_primary`` and ``dead_class``:
  chapter 04's dead-capsule rate (cdr) of the primary and of the class capsules. The backbone has no hidden
  capsule layer, so these are the two capsule layers it has.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import multiprocessing as mp
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn
from torch.utils.data import TensorDataset
from tqdm.auto import tqdm

from ._checks import check_one_of, check_positive_int
from .bench import _sync, _training_step, time_runs, training_step_seconds
from .data import affine_test_set, load_fashion_mnist, load_mnist
from .diagnostics import activation_stats, routing_dynamics
from .learned_routing import ConnectionistRouter, SimilarityRouter
from .models import CapsNet, LadderCapsNet, LadderCapsNetConfig, capsnet_loss, ladder_capsnet_loss
from .modes import eval_mode
from .profiles import RouterBenchSettings
from .rem import global_magnitude_prune, keys_per_class, parse_tree_dictionary, routing_entropy
from .routing import DetachedRouter, DynamicRouter, SelfAttentionRouter, UniformRouter
from .training import fit, mixed_precision

__all__ = ["RouterSpec", "ROUTER_SPECS", "RECORD_FIELDS", "BENCH_VERSION", "bench_data", "build_network",
           "parse_tree_couplings", "measure_router", "router_parameters", "record_key", "train_and_measure",
           "run_router_bench", "write_results", "summarize", "mcnemar_test", "default_cache", "SHIPPED_CACHE"]

#: The version of a record's meaning, part of every cache key; a new version leaves old cached records unread.
BENCH_VERSION = 1
SHIPPED_CACHE = Path(__file__).resolve().parent / "results" / "router_bench"
DATASETS = {"mnist": load_mnist, "fashion": load_fashion_mnist}

#: The fields of a record, in the CSV's column order (``correct`` and ``affine_correct`` stay out of the CSV).
RECORD_FIELDS = ("router", "seed", "dataset", "accuracy", "affine_accuracy", "test_size", "parameters",
                 "nonzero_parameters", "router_parameters", "train_seconds", "train_step_ms", "step_ms", "inference_ms", "batch",
                 "peak_memory_mb", "entropy", "keys", "levels", "normalized_over", "dyr", "dead_primary",
                 "dead_class", "device", "amp", "threads", "torch", "key")


@dataclass(frozen=True)
class RouterSpec:
    """How the bench builds one router: ``make(settings)`` → the router of the backbone's class layer (an object
    ``router(votes) → RoutingResult``, or a module with ``takes_weights``, as
    :class:`~capsule_lab.layers.CapsuleLayer` takes), or None for a network of its own (``network`` then builds
    it). ``normalized_over``: the axis the couplings sum to 1 over (``"outputs"``, ``"inputs"``, or ``"none"``).
    ``prune``: REM's pruning while training. Chapter 08.
    """

    make: Optional[Callable[[RouterBenchSettings], object]]
    normalized_over: str = "outputs"
    prune: bool = False
    network: Optional[Callable[[RouterBenchSettings], nn.Module]] = None


def _ladder_network(settings: RouterBenchSettings) -> LadderCapsNet:
    c = settings.capsnet
    backbone = {name: getattr(c, name) for name in ("image_size", "in_channels", "conv_channels", "conv_kernel",
                                                     "primary_types", "primary_dim", "primary_kernel",
                                                     "primary_stride")}
    full = c.primary_types == 32
    config = (LadderCapsNetConfig.paper(k=settings.ladder_k, image_size=c.image_size) if full
              else LadderCapsNetConfig.slim(k=settings.ladder_k))
    return LadderCapsNet(replace(config, **backbone, classes=c.classes, class_dim=c.class_dim))


#: The bench's routers by name (:data:`capsule_lab.profiles.ROUTERS_08`).
ROUTER_SPECS = {
    "dynamic r=1": RouterSpec(lambda s: DynamicRouter(1)),
    "dynamic r=3": RouterSpec(lambda s: DynamicRouter(3)),
    "dynamic r=5": RouterSpec(lambda s: DynamicRouter(5)),
    "detached": RouterSpec(lambda s: DetachedRouter(3)),
    "uniform": RouterSpec(lambda s: UniformRouter()),
    "rem-pruned": RouterSpec(lambda s: DynamicRouter(3), prune=True),
    "ladder": RouterSpec(None, normalized_over="none", network=_ladder_network),
    "similarity": RouterSpec(lambda s: SimilarityRouter(kernels=s.kernels, iterations=s.iterations),
                             normalized_over="inputs"),
    "connectionist": RouterSpec(lambda s: ConnectionistRouter(s.capsnet.class_dim, hidden=s.lstm_hidden,
                                                              iterations=s.iterations), normalized_over="inputs"),
    "self-attention": RouterSpec(lambda s: SelfAttentionRouter(s.capsnet.primary_caps, s.capsnet.classes)),
}


def _check_settings(settings) -> RouterBenchSettings:
    if not isinstance(settings, RouterBenchSettings):
        raise ValueError(f"settings must be a capsule_lab.profiles.RouterBenchSettings, got {type(settings).__name__}")
    return settings


def _spec(name: str, custom: dict | None = None) -> RouterSpec:
    specs = {**ROUTER_SPECS, **(custom or {})}
    spec = specs[check_one_of(name, tuple(specs), "router")]
    if not isinstance(spec, RouterSpec):
        raise ValueError(f"router {name!r} must be given as a RouterSpec, got {type(spec).__name__}")
    return spec


def bench_data(settings: RouterBenchSettings, source: str = "offline") -> tuple:
    """``(train, test, affine)``: the first ``train_size`` training and ``test_size`` test images of the settings'
    dataset, and the test images under seeded affine maps (seed 0, :func:`capsule_lab.data.affine_test_set`).
    ``source`` as :func:`capsule_lab.data.load_mnist`. Chapter 08.
    """
    settings = _check_settings(settings)
    load = DATASETS[check_one_of(settings.dataset, tuple(DATASETS), "dataset")]
    out = []
    for train, size in ((True, settings.train_size), (False, settings.test_size)):
        images, labels = load(train, source).tensors
        out.append(TensorDataset(images[:size], labels[:size]))
    return out[0], out[1], affine_test_set(out[1], seed=0, strength=settings.affine_strength)


def build_network(name: str, settings: RouterBenchSettings, seed: int = 0, custom: dict | None = None) -> nn.Module:
    """A fresh network with router ``name``. The backbone (Sabour's CapsNet of the settings) is initialised from
    ``seed`` before the router is made, and every router's network takes its weights, so for one seed every router
    starts from the same convolution, primary capsules and (where it has them) class-layer W. Chapter 08.
    """
    settings, spec = _check_settings(settings), _spec(name, custom)
    torch.manual_seed(seed)
    backbone = CapsNet(settings.capsnet)
    if spec.network is not None:
        net = spec.network(settings)
        shared = {k: v for k, v in backbone.state_dict().items() if k.split(".")[0] in ("conv", "primary")}
    else:
        net = CapsNet(settings.capsnet, router=spec.make(settings))
        shared = backbone.state_dict()
    missing, unexpected = net.load_state_dict(shared, strict=False)
    if unexpected or any(k.split(".")[0] in ("conv", "primary") for k in missing):
        raise RuntimeError(f"the {name} network does not share the backbone's weights: {missing}, {unexpected}")
    return net


def _loss(net: nn.Module):
    return ladder_capsnet_loss if isinstance(net, LadderCapsNet) else capsnet_loss


def parse_tree_couplings(out, normalized_over: str) -> tuple[torch.Tensor, int]:
    """The couplings ``(B, I, J)`` the parse-tree metric reads from a network's output, and their levels.

    Chapter 05's parse tree is, for each image, the column of couplings to the predicted class, quantised into
    11 levels; it assumes that each input's couplings sum to 1 over the outputs (``"outputs"``: Sabour's, REM's,
    the self-attention router's). Couplings normalised over the inputs (Faria's) are about 1/I each and would all
    quantise to 0, so each input's row is first divided by its sum over the outputs (negative couplings, which the
    self-attention router's learned bias can make, are clipped to 0 first, everywhere). The ladder has no couplings:
    its parse tree is its code vector, which capsules it kept, at 2 levels. Chapter 08.
    """
    check_one_of(normalized_over, ("outputs", "inputs", "none"), "normalized_over")
    if normalized_over == "none":
        code = out.code.detach().float()
        return code[:, :, None].expand(-1, -1, out.lengths.shape[1]), 2
    c = out.couplings.detach().float().clamp_min(0)
    return c / c.sum(dim=2, keepdim=True).clamp_min(1e-12), 11


def _peak_memory_child(name, settings, seed, images, labels, queue):  # a fresh process: CPU peak resident set
    from .bench import _status_kib

    torch.set_num_threads(1)
    net = build_network(name, settings, seed)
    step = _training_step(net, images, labels, _loss(net))
    step()                                              # warm-up: thread pools, allocator, Adam's state
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                                    # reset the peak resident set (VmHWM) to the current one
    before = _status_kib("VmRSS")
    step()
    queue.put((_status_kib("VmHWM") - before) * 1024)


def _peak_memory_mb(name, settings, seed, images, labels, device, custom, amp=False) -> float | None:
    """One training step's peak memory (MB) beyond what was resident before it, after a warm-up step: on CUDA the
    allocator's peak, on a Linux CPU the peak resident set of a fresh process (None elsewhere, or for a custom
    router, which may not pickle into one)."""
    if device.type == "cuda":
        net = build_network(name, settings, seed, custom).to(device)
        step = _training_step(net, images.to(device), labels.to(device), _loss(net), amp)
        step()                                          # warm-up: Adam's state, the scaler, cuBLAS workspaces
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize()
        return round((torch.cuda.max_memory_allocated(device) - base) / 1e6, 1)
    if custom and name in custom or platform.system() != "Linux":
        return None                                     # a custom router may not pickle into a fresh process
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_peak_memory_child, args=(name, settings, seed, images, labels, queue))
    # glibc serves a freed block's size from its heap next time (its mmap threshold rises), so the second step's
    # tensors would reuse memory the warm-up step left resident and its peak would not show; a fixed threshold
    # keeps every block of 64 KiB or more mapped on allocation and returned on free.
    saved = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
    try:
        child.start()
    finally:
        if saved is None:
            del os.environ["MALLOC_MMAP_THRESHOLD_"]
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = saved
    child.join(timeout=600)
    if child.exitcode != 0 or queue.empty():
        child.kill()
        raise RuntimeError(f"measuring the peak memory of {name!r} failed in its process (exit code {child.exitcode})")
    return round(queue.get() / 1e6, 1)


def measure_router(net: nn.Module, test: TensorDataset, affine: TensorDataset, normalized_over: str,
                   batch_size: int = 500, device="cpu") -> dict:
    """Measure a trained network on the clean and the affine test sets: ``accuracy``, ``affine_accuracy``,
    ``correct``, ``affine_correct`` (0/1 strings), ``entropy``, ``keys``, ``levels``, ``dyr``, ``dead_primary``,
    ``dead_class`` (see the module docstring; the routing measures come from the clean images). Chapter 08.
    """
    check_one_of(normalized_over, ("outputs", "inputs", "none"), "normalized_over")
    device = torch.device(device)
    result = {}
    with eval_mode(net), torch.no_grad():
        for label, data in (("", test), ("affine_", affine)):
            images, labels = data.tensors[:2]
            correct, couplings, predictions, primary, lengths = [], [], [], [], []
            for start in range(0, len(labels), batch_size):
                x = images[start:start + batch_size].to(device)
                out = net(x)
                predicted = out.lengths.argmax(dim=1).cpu()
                correct.append(predicted == labels[start:start + batch_size])
                if not label:
                    c, levels = parse_tree_couplings(out, normalized_over)
                    couplings.append(c.cpu())
                    predictions.append(predicted)
                    primary.append(out.primary.norm(dim=-1).float().cpu())
                    lengths.append(out.lengths.float().cpu())
            correct = torch.cat(correct)
            result[f"{label}accuracy"] = correct.double().mean().item()
            result[f"{label}correct"] = "".join("1" if ok else "0" for ok in correct.tolist())
            if not label:
                couplings, predictions = torch.cat(couplings), torch.cat(predictions)
                result["entropy"] = routing_entropy(couplings, predictions, levels)[0]
                keys = keys_per_class(parse_tree_dictionary(couplings, predictions, levels))
                result["keys"] = sum(keys.values()) / len(keys)
                result["levels"] = levels
                result["dyr"] = None if normalized_over == "none" else routing_dynamics(couplings)["dyr"]
                result["dead_primary"] = activation_stats(torch.cat(primary))["cdr"]
                result["dead_class"] = activation_stats(torch.cat(lengths))["cdr"]
    return result


def router_parameters(net: nn.Module) -> int:
    """The parameters of what a network has in place of plain routing: its router's (0 for dynamic and uniform
    routing, which learn nothing), or all the ladder's layers after the primary capsules. Chapter 08."""
    if isinstance(net, LadderCapsNet):
        return sum(p.numel() for name, p in net.named_parameters() if name.split(".")[0] not in ("conv", "primary"))
    router = net.digits.router
    return sum(p.numel() for p in router.parameters()) if isinstance(router, nn.Module) else 0


def record_key(name: str, seed: int, settings: RouterBenchSettings, device="cpu", amp: bool = False) -> str:
    """The cache key of one record: a hash of the router's name, the seed, the device type, :data:`BENCH_VERSION`,
    every setting that decides a run (all but ``routers`` and ``seeds``, so adding a seed reuses the others) and,
    when the run trains in mixed precision (``amp`` on CUDA), that fact. Chapter 08.
    """
    settings = _check_settings(settings)
    decisive = {k: v for k, v in asdict(settings).items() if k not in ("routers", "seeds")}
    what = {"router": name, "seed": seed, "device": torch.device(device).type, "version": BENCH_VERSION,
            "settings": decisive}
    if _mixed(device, amp):
        what["amp"] = True                # full precision adds nothing, so full-precision records keep their keys
    blob = json.dumps(what, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _mixed(device, amp: bool) -> bool:
    """Whether a run trains in mixed precision: ``amp`` acts on CUDA only (:func:`~capsule_lab.training.fit`)."""
    return bool(amp) and torch.device(device).type == "cuda"


def train_and_measure(name: str, settings: RouterBenchSettings, data: tuple, seed: int = 0, device="cpu",
                      amp: bool = False, custom: dict | None = None, memory: bool = True) -> dict:
    """One record: train :func:`build_network` ``(name, settings, seed)`` on ``data = (train, test, affine)`` with the
    settings' schedule (REM's pruning after each of its first ``rem_rounds`` epochs), measure it
    (:func:`measure_router`), and time a fresh copy's training step and inference batch. Chapter 08.
    """
    settings, spec = _check_settings(settings), _spec(name, custom)
    if not isinstance(data, tuple) or len(data) != 3:
        raise ValueError("data must be the (train, test, affine) tuple of bench_data")
    check_positive_int(seed, "seed", minimum=0)
    device = torch.device(device)
    train, test, affine = data
    net = build_network(name, settings, seed, custom).to(device)

    def prune_after(epoch, model):
        if spec.prune and epoch <= settings.rem_rounds:
            global_magnitude_prune(model, settings.rem_amount)

    start = time.perf_counter()
    history = fit(net, train, None, epochs=settings.epochs, batch_size=settings.batch_size, lr=settings.lr,
        lr_decay=settings.lr_decay, device=device, amp=amp, seed=seed, loss_fn=_loss(net), progress=False,
        on_epoch_end=prune_after)
    seconds = time.perf_counter() - start
    record = {"router": name, "seed": seed, "dataset": settings.dataset, "test_size": len(test),
              **measure_router(net, test, affine, spec.normalized_over, device=device),
              "parameters": sum(p.numel() for p in net.parameters()),
              "nonzero_parameters": sum(int((p != 0).sum()) for p in _effective_weights(net)),
              "router_parameters": router_parameters(net), "train_seconds": seconds,
              "train_step_ms": 1e3 * seconds / (settings.epochs * math.ceil(len(train) / settings.batch_size)),
              "train_loss": history.train_loss, "train_accuracy": history.train_accuracy,
              "normalized_over": spec.normalized_over}
    record.update(_timings(name, settings, seed, train, device, custom, amp))
    batch = train.tensors[0][:settings.batch_size], train.tensors[1][:settings.batch_size]
    record["peak_memory_mb"] = _peak_memory_mb(name, settings, seed, *batch, device, custom, amp) if memory else None
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
    images = train.tensors[0][:settings.batch_size].to(device)
    labels = train.tensors[1][:settings.batch_size].to(device)
    net = build_network(name, settings, seed, custom).to(device)
    step = training_step_seconds(net, images, labels, _loss(net), repeats=settings.timing_repeats, amp=amp)
    with eval_mode(net), torch.no_grad(), mixed_precision(device, amp):
        times = time_runs(lambda: net(images), settings.timing_repeats, 1, _sync(device))
    return {"step_ms": step["median_s"] * 1e3, "inference_ms": statistics.median(times) * 1e3,
            "batch": len(labels)}


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
    (:func:`train_and_measure`) and written there. ``cache=None``: nothing read or written. ``custom``:
    ``{name: RouterSpec}``, routers of your own (never cached: their code is not in the key). Each record read from
    the cache gets ``"cached": True``. ``data`` defaults to :func:`bench_data`. Chapter 08.
    """
    settings = _check_settings(settings)
    routers = tuple(routers if routers is not None else settings.routers)
    seeds = tuple(seeds if seeds is not None else settings.seeds)
    for name in routers:
        _spec(name, custom)
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
        if path is not None and path.exists() and not (custom and name in custom):
            records.append({**json.loads(path.read_text()), "cached": True})
            continue
        if data is None:
            data = bench_data(settings)
        record = train_and_measure(name, settings, data, seed, device, amp, custom, memory)
        if path is not None and not (custom and name in custom):
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


def summarize(records: list, measures=("accuracy", "affine_accuracy", "train_step_ms", "step_ms", "inference_ms", "entropy", "keys",
                                      "dyr", "dead_primary", "dead_class", "peak_memory_mb", "parameters",
                                      "router_parameters")) -> dict:
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
    """McNemar's exact test of two classifiers on the same test images: are their error rates different?

    ``correct_a`` and ``correct_b`` are a record's ``correct`` strings (one 0/1 per image, same images). Only the
    images where they disagree count: b = a right and b wrong, c = the reverse; under the null hypothesis each
    disagreement goes either way with probability ½, so the two-sided p-value is
    ``min(1, 2 · P(X ≤ min(b, c)))`` for X ~ Binomial(b + c, ½). Returns ``{"a_only", "b_only", "p_value"}``.
    Chapter 08.
    """
    for name, value in (("correct_a", correct_a), ("correct_b", correct_b)):
        if not isinstance(value, str) or not value or set(value) - {"0", "1"}:
            raise ValueError(f"{name} must be a non-empty string of 0s and 1s (a record's 'correct')")
    if len(correct_a) != len(correct_b):
        raise ValueError(f"correct_a and correct_b must cover the same images, got {len(correct_a)} and "
                         f"{len(correct_b)} characters")
    b = sum(x == "1" and y == "0" for x, y in zip(correct_a, correct_b))
    c = sum(x == "0" and y == "1" for x, y in zip(correct_a, correct_b))
    n = b + c
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n if n else 1.0
    return {"a_only": b, "b_only": c, "p_value": min(1.0, 2 * tail)}
