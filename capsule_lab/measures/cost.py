"""What routing and training cost: time, FLOPs and memory — how fast is dynamic routing, and how far from the
machine's limit?

Taught in chapter 02 ("Routing without votes"); run with ``capsule-lab bench routing``, which prints JSON.
``capsule-lab bench steps`` times whole training steps instead: ladder networks against CapsNets with r = 3, 4, 5
(the ladder paper's Table 3, chapter 06). The measures are the course's one of each: :func:`time_runs` (wall
times), :func:`training_step` (one training step as :func:`~capsule_lab.training.fit` takes it) and
:func:`peak_memory` (one call's peak memory), which chapter 08's bench (:mod:`capsule_lab.studies.bench.runner`) takes
too.

For each shape and each implementation — ``materialised`` (votes û formed, then
:func:`~capsule_lab.routing.dynamic_routing`) and ``vote_free`` (:func:`~capsule_lab.routing.vote_free_routing`)
— it measures the median wall time of the forward pass and of forward + backward, and the peak memory of
forward + backward. It also measures the machine's fp32 matrix-multiply rate and turns the FLOP count of
the routing contractions into a FLOP-bound time, so each measured time can be read as a multiple of it.

FLOPs counted (a multiply-add is 2 FLOPs). Forming the votes û_{j|i} = W_ij u_i is a contraction over k of
B·I·J·D·D_in multiply-adds. On stored votes, a weighted sum s_j = Σ_i c_ij û_{j|i} and an agreement
⟨û_{j|i}, v_j⟩ cost B·I·J·D each, D_in times less; the vote-free form never stores û, so each of them is a
contraction over (i, k) or (d, k) of B·I·J·D·D_in. Forward: r weighted sums and r − 1 agreements, 2r − 1 in all:

- ``materialised``: 2·B·I·J·D·D_in (the votes, once) + (2r − 1)·2·B·I·J·D;
- ``vote_free``: (2r − 1)·2·B·I·J·D·D_in.

So the materialised form does fewer FLOPs (at Sabour's shape, r = 3: 0.61 against 1.89 GFLOP forward) and
moves more memory (the B·I·J·D votes, written once and read 2r − 1 times); the vote-free form trades memory
traffic for arithmetic. Backward: every contraction has two inputs that need a gradient, each counted as
costly as the forward, so forward + backward is 3 × the forward count for both. Not counted: the softmax,
the squash and the logit updates (B·I·J or B·J·D numbers each), and the vote-free agreement's last step, the
dot product of W_ijᵀ v_j with u_i (B·I·J·D_in multiply-adds, D times fewer than its contraction).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import json
import multiprocessing as mp
import os
import pickle
import platform
import statistics
import sys
import time
from contextlib import contextmanager, nullcontext
from typing import Callable

import torch

from .._checks import check_positive_int
from ..layers.votes import capsule_votes
from ..routing import dynamic_routing, vote_free_routing
from ..training import eval_mode, grad_scaler, mixed_precision, train_step

__all__ = ["ROUTING_SHAPES", "routing_flops", "matmul_rate", "time_runs", "time_interleaved", "interleaved_step_records",
           "time_median", "peak_memory", "bench_routing",
           "training_step", "training_step_seconds", "inference_seconds", "step_models", "bench_steps", "stage_flops",
           "step_breakdown"]

#: The shapes benchmarked, as name → (B, I, D_in, J, D, iterations) — "sabour" is the digit layer of Sabour
#: et al., "slim" the quick profile's class-capsule layer.
ROUTING_SHAPES = {
    "sabour": (128, 1152, 8, 10, 16, 3),
    "slim": (128, 144, 8, 10, 16, 3),
}

IMPLEMENTATIONS = ("materialised", "vote_free")


def routing_flops(B: int, I: int, D_in: int, J: int, D: int, iterations: int) -> dict:
    """FLOPs of each implementation (see the module docstring):
    ``{"materialised": {"forward": …, "forward_backward": …}, "vote_free": {…}}``.

    Chapter 02 ("Routing without votes").
    """
    for name, value in dict(B=B, I=I, D_in=D_in, J=J, D=D, iterations=iterations).items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    votes = 2 * B * I * J * D * D_in      # û = W u for all (i, j): also one vote-free weighted sum or agreement
    on_votes = 2 * B * I * J * D          # one weighted sum or agreement on stored votes
    contractions = 2 * iterations - 1     # r weighted sums and r − 1 agreements
    forward = {"materialised": votes + contractions * on_votes, "vote_free": contractions * votes}
    return {impl: {"forward": f, "forward_backward": 3 * f} for impl, f in forward.items()}


def time_runs(fn: Callable[[], object], repeats: int = 5, warmup: int = 1,
              sync: Callable[[], None] = lambda: None) -> list:
    """Wall times of ``fn()`` in seconds, one per run, over ``repeats`` runs after ``warmup`` runs. Chapter 02."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return times


def time_interleaved(fns: dict, repeats: int = 10, warmup: int = 1, sync: Callable[[], None] = lambda: None,
                     load: Callable[[], float] | None = None) -> dict:
    """Wall times of several functions taken in turn, so that whatever the machine does meanwhile falls on all of
    them alike: ``{"times": {name: [seconds, one per round]}, "load": (before, after)}``. Each round calls every
    function once, the order rotated from round to round (A, B, C; B, C, A; …) so that none always runs first;
    ``warmup`` rounds come first, untimed. ``load`` (default: the machine's 1-minute load average, None where the
    system has none) is read before and after. The timing rule of chapter 08's verdicts asks for this: times of two
    networks taken interleaved, at least 10 rounds. Chapters 06 and 08."""
    if not isinstance(fns, dict) or len(fns) < 1 or not all(callable(f) for f in fns.values()):
        raise ValueError("fns must be a non-empty dict {name: function of no arguments}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if load is None:
        load = (lambda: os.getloadavg()[0]) if hasattr(os, "getloadavg") else (lambda: None)
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    sync()
    before = load()
    times = {name: [] for name in names}
    for round_ in range(repeats):
        k = round_ % len(names)
        for name in names[k:] + names[:k]:
            start = time.perf_counter()
            fns[name]()
            sync()
            times[name].append(time.perf_counter() - start)
    return {"times": times, "load": (before, load())}


def interleaved_step_records(build: Callable[[str, int], torch.nn.Module], names, seeds, threads,
                             images: torch.Tensor, labels: torch.Tensor, steps: int = 20, warmup: int = 2) -> list:
    """The timing rule's records for networks compared on a CPU: for each thread count and seed, the networks
    ``build(name, seed)`` of ``names`` take training steps on one batch ``(images, labels)`` in turn
    (:func:`time_interleaved`, ``steps`` rounds after ``warmup``), and each gives one record: ``router`` (its name),
    ``seed``, ``train_step_ms`` (the median), ``step_times_ms``, ``timed_steps``, ``interleaved``, ``load`` (the
    1-minute load average before and after), ``device``, ``threads`` and ``batch`` — what
    :func:`capsule_lab.evidence.rules.timing_problems` reads. The thread count is restored after. Chapters 06 and 08."""
    names, seeds, threads = tuple(names), tuple(seeds), tuple(threads)
    if len(names) < 2:
        raise ValueError(f"names must name two or more networks to interleave, got {names!r}")
    if not seeds or not threads:
        raise ValueError("seeds and threads must each hold at least one value")
    for t in threads:
        check_positive_int(t, "threads")
    if check_positive_int(steps, "steps") < 10:
        raise ValueError(f"steps must be >= 10 (the timing rule), got {steps}")
    before, records = torch.get_num_threads(), []
    try:
        for count in threads:
            torch.set_num_threads(count)
            for seed in seeds:
                steps_of = {name: training_step(build(name, seed), images, labels) for name in names}
                timed = time_interleaved(steps_of, repeats=steps, warmup=warmup)
                for name in names:
                    times = [round(1e3 * s, 3) for s in timed["times"][name]]
                    records.append({"router": name, "seed": seed, "train_step_ms": statistics.median(times),
                                    "step_times_ms": times, "timed_steps": len(times), "interleaved": True,
                                    "load": list(timed["load"]), "device": "cpu", "threads": count,
                                    "batch": int(labels.shape[0])})
    finally:
        torch.set_num_threads(before)
    return records


def time_median(fn: Callable[[], object], repeats: int = 5, warmup: int = 1,
                sync: Callable[[], None] = lambda: None) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` runs after ``warmup`` runs."""
    return statistics.median(time_runs(fn, repeats, warmup, sync))


def _sync(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def matmul_rate(device="cpu", n: int = 2048, repeats: int = 5) -> float:
    """The machine's fp32 matrix-multiply rate in FLOP/s: the best of ``repeats`` n×n×n products (the rate
    the hardware can reach, which is what a bound needs; a median would fold in other processes' noise)."""
    device = torch.device(device)
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    sync = _sync(device)
    time_median(lambda: a @ b, repeats=2, warmup=1, sync=sync)  # warm the caches and the clock
    best = min(time_median(lambda: a @ b, repeats=1, warmup=0, sync=sync) for _ in range(repeats))
    return 2 * n ** 3 / best


def _inputs(shape, device, seed=0):
    B, I, D_in, J, D, _ = shape
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, I, D_in, generator=g).mul_(0.3).to(device).requires_grad_()
    W = torch.randn(I, J, D, D_in, generator=g).mul_(0.05).to(device).requires_grad_()
    return u, W


def _forward(impl: str, u, W, iterations: int):
    if impl == "materialised":
        return dynamic_routing(capsule_votes(u, W), iterations).poses
    if impl == "vote_free":
        return vote_free_routing(u, W, iterations).poses
    raise ValueError(f"unknown implementation {impl!r}: expected one of {IMPLEMENTATIONS}")


def _forward_backward(impl, u, W, iterations):
    poses = _forward(impl, u, W, iterations)
    poses.square().sum().backward()
    u.grad = W.grad = None


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in /proc/self/status")


def _routing_pass(impl: str, shape, device="cpu") -> Callable[[], None]:
    """One forward + backward pass of a routing implementation at ``shape``, on seeded inputs: :func:`peak_memory`'s
    step for :func:`bench_routing`."""
    u, W = _inputs(shape, device)
    return lambda: _forward_backward(impl, u, W, shape[-1])


_M_MMAP_THRESHOLD = -3                  # mallopt's parameter number for the mmap threshold (glibc's malloc.h)


def _measure_in_child(make_step, args, pipe, imports=(), forked=False):  # runs in the measuring process
    try:
        for module in imports:                          # where the step's routers are registered
            importlib.import_module(module)
        torch.set_num_threads(1)
        if forked:                                      # a spawned process read MALLOC_MMAP_THRESHOLD_ when it started
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            libc.mallopt(_M_MMAP_THRESHOLD, 65536)
            libc.malloc_trim(0)         # the parent's freed heap leaves residence, so reusing it counts as new memory
        step = make_step(*args, device="cpu")
        step()                                          # warm-up: thread pools, allocator, an optimiser's state
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                                # reset the peak resident set (VmHWM) to the current one
        before = _status_kib("VmRSS")
        step()
        pipe.send(("ok", (_status_kib("VmHWM") - before) * 1024))
    except BaseException as err:                        # noqa: BLE001 — the reason travels to the parent
        pipe.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        pipe.close()


@contextmanager
def _main_not_imported():
    """While a process is spawned, the parent's ``__main__`` looks like an interactive session's, so the child does not
    run the parent's script again (a script without an ``if __name__ == "__main__":`` guard would run twice)."""
    main = sys.modules["__main__"]
    saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if hasattr(main, k)}
    try:
        main.__spec__ = None
        if hasattr(main, "__file__"):
            del main.__file__
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


def _spawnable(make_step, args, imports) -> bool:
    """Whether a fresh process can rebuild the step: everything it needs pickles, and every module it must import
    is importable (not a script's ``__main__``)."""
    if any(m == "__main__" for m in imports):
        return False
    try:
        pickle.dumps((make_step, args))
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


def peak_memory(make_step: Callable[..., Callable[[], object]], args: tuple = (), device="cpu",
                timeout: float = 600, imports=()) -> int | None:
    """Peak memory in bytes of one call of ``step = make_step(*args, device=device)``, beyond what was resident before
    it, after one warm-up call (both benches' memory measure: a routing pass here, a training step in
    :mod:`capsule_lab.studies.bench.records`).

    CUDA: ``torch.cuda.max_memory_allocated`` minus what was allocated before the call. CPU (Linux): in a fresh
    process with one thread, the peak resident set size (``VmHWM``, reset through ``/proc/self/clear_refs``) minus
    the resident size before the call, with glibc's mmap threshold fixed at 64 KiB (glibc would otherwise serve a
    freed block's size from its heap the next time, so the second call's tensors would reuse memory the warm-up left
    resident and its peak would not show; fixed, every block of 64 KiB or more is mapped on allocation and returned
    on free). The process is spawned with ``imports`` imported first (the modules that register the step's routers)
    and never runs the caller's script again, so a plain script without a ``__main__`` guard is measured too. What
    cannot travel to a fresh process — a router defined in a notebook or in the script itself, a lambda — is measured
    in a forked one instead (the mmap threshold set with ``mallopt`` and the heap the parent freed released with
    ``malloc_trim``, so that reusing it counts as new memory); a forked measure can read lower in a process that has
    already held much memory. None on a CPU elsewhere than Linux. ``RuntimeError`` with the child's reason when the
    step fails there, or after ``timeout`` seconds. Chapters 02 and 08.
    """
    device = torch.device(device)
    if device.type == "cuda":
        step = make_step(*args, device=device)
        step()                                          # warm-up: an optimiser's state, the scaler, cuBLAS workspaces
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated(device) - base
    if platform.system() != "Linux":
        return None
    imports = tuple(imports)
    forked = not _spawnable(make_step, args, imports)
    ctx = mp.get_context("fork" if forked else "spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_measure_in_child, args=(make_step, args, send, () if forked else imports, forked))
    saved = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"       # read by a spawned child's glibc when it starts
    try:
        with nullcontext() if forked else _main_not_imported():
            child.start()
    finally:
        if saved is None:
            del os.environ["MALLOC_MMAP_THRESHOLD_"]
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = saved
    send.close()
    try:
        message = receive.recv() if receive.poll(timeout) else ("error", f"no answer within {timeout} s")
    except EOFError:
        message = ("error", "the process ended without an answer")
    child.join(timeout=10)
    if child.is_alive():
        child.kill()
        child.join()
    if message[0] != "ok":
        raise RuntimeError(f"measuring peak memory failed in its process (exit code {child.exitcode}): {message[1]}")
    return int(message[1])


def bench_routing(device=None, repeats: int = 5, shapes=("sabour", "slim"), measure_memory: bool = True) -> dict:
    """Time (and measure the memory of) every routing implementation at the given shapes.

    Returns a JSON-ready dict: the machine (device, threads, torch, matmul rate) and, per shape and
    implementation, median forward and forward+backward times in ms, peak memory in MB, the FLOP count
    of that implementation, its FLOP-bound times and the ratio of each measured time to its bound.

    Chapter 02.
    """
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    unknown = [s for s in shapes if s not in ROUTING_SHAPES]
    if unknown:
        raise ValueError(f"unknown shape(s) {unknown}: expected names from {sorted(ROUTING_SHAPES)}")
    rate = matmul_rate(device)
    report = {
        "device": str(device),
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "matmul_gflops": round(rate / 1e9, 1),
        "repeats": repeats,
        "shapes": {},
    }
    sync = _sync(device)
    for name in shapes:
        shape = ROUTING_SHAPES[name]
        B, I, D_in, J, D, r = shape
        flops = routing_flops(B, I, D_in, J, D, r)
        entry = {
            "B": B, "I": I, "D_in": D_in, "J": J, "D": D, "iterations": r,
            "votes_mb": round(B * I * J * D * 4 / 1e6, 1),
        }
        u, W = _inputs(shape, device)
        for impl in IMPLEMENTATIONS:
            with torch.no_grad():
                fwd = time_median(lambda: _forward(impl, u, W, r), repeats, sync=sync)
            fwd_bwd = time_median(lambda: _forward_backward(impl, u, W, r), repeats, sync=sync)
            count = flops[impl]
            result = {
                "forward_ms": round(fwd * 1e3, 1),
                "forward_backward_ms": round(fwd_bwd * 1e3, 1),
                "gflop_forward": round(count["forward"] / 1e9, 3),
                "gflop_forward_backward": round(count["forward_backward"] / 1e9, 3),
                "bound_ms_forward": round(count["forward"] / rate * 1e3, 2),
                "bound_ms_forward_backward": round(count["forward_backward"] / rate * 1e3, 2),
                "forward_x_bound": round(fwd * rate / count["forward"], 1),
                "forward_backward_x_bound": round(fwd_bwd * rate / count["forward_backward"], 1),
            }
            if measure_memory:
                peak = peak_memory(_routing_pass, (impl, shape), device)
                result["peak_memory_mb"] = None if peak is None else round(peak / 1e6, 1)
            entry[impl] = result
        report["shapes"][name] = entry
    return report


def main_routing(device=None, repeats: int = 5, shapes=("sabour", "slim"), measure_memory: bool = True) -> str:
    """The JSON text that ``capsule-lab bench routing`` prints."""
    return json.dumps(bench_routing(device, repeats, shapes, measure_memory), indent=2)


# ---------------------------------------------------------------- training steps (chapters 06 and 08)

def training_step(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, loss_fn=None,
                  amp: bool = False, lr: float = 1e-3) -> Callable[[], None]:
    """A function that takes one training step of ``model`` on one batch each time it is called, as
    :func:`~capsule_lab.training.fit` takes it (:func:`~capsule_lab.training.train_step`: Adam, and with ``amp`` on
    CUDA mixed precision, with a gradient scaler where it is float16); ``loss_fn`` None: the model's own. The model is put in training
    mode. Chapters 06–08 time it and measure its memory."""
    device = next(model.parameters()).device
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scaler = grad_scaler(device, amp)
    loss_fn = loss_fn if loss_fn is not None else model.loss
    model.train()
    return lambda: train_step(model, optimizer, scaler, images, labels, loss_fn, amp)


def training_step_seconds(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, loss_fn=None,
                          repeats: int = 5, warmup: int = 1, lr: float = 1e-3, amp: bool = False) -> dict:
    """Time one training step of ``model`` — forward, ``loss_fn(output, images, labels)`` (None: the model's own
    loss), backward and an Adam step (:func:`training_step`) — on one fixed batch: ``{"median_s", "mean_s",
    "stderr_s", "times_s", "batch", "device", "threads"}``.

    The model trains while it is timed (its weights change), so time a copy you do not need. ``images`` and
    ``labels`` must be on the model's device. The standard error is that of the mean over the ``repeats`` runs,
    as the ladder paper's Table 3 reports; the median is the steadier number on a shared machine. ``amp`` times the
    step as :func:`~capsule_lab.training.fit` trains with it: mixed precision and a gradient scaler on CUDA, no
    effect on a CPU. Chapter 06.
    """
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(images, torch.Tensor) or images.dim() < 2:
        raise ValueError(f"images must be a tensor (B, ...), got {type(images).__name__}")
    if not isinstance(labels, torch.Tensor) or labels.shape != images.shape[:1]:
        raise ValueError(f"labels must be a tensor of shape (B,) = ({images.shape[0]},), "
                         f"got {getattr(labels, 'shape', type(labels).__name__)}")
    device = next(model.parameters()).device
    times = time_runs(training_step(model, images, labels, loss_fn, amp, lr), repeats, warmup, _sync(device))
    spread = statistics.stdev(times) / len(times) ** 0.5 if len(times) > 1 else float("nan")
    return {"median_s": statistics.median(times), "mean_s": statistics.fmean(times), "stderr_s": spread,
            "times_s": times, "batch": int(images.shape[0]), "device": str(device),
            "threads": torch.get_num_threads()}


def inference_seconds(model: torch.nn.Module, images: torch.Tensor, repeats: int = 5, warmup: int = 1,
                      amp: bool = False) -> dict:
    """Time one forward pass of ``model`` on ``images`` (on its device) in evaluation mode, without gradients and in
    the precision it trains in (``amp``: mixed on CUDA): ``{"median_s", "times_s", "batch", "device"}``. Chapter 08.
    """
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(images, torch.Tensor) or images.dim() < 2:
        raise ValueError(f"images must be a tensor (B, ...), got {type(images).__name__}")
    device = next(model.parameters()).device
    with eval_mode(model), torch.no_grad(), mixed_precision(device, amp):
        times = time_runs(lambda: model(images), repeats, warmup, _sync(device))
    return {"median_s": statistics.median(times), "times_s": times, "batch": int(images.shape[0]),
            "device": str(device)}


def step_models(profile: str = "quick") -> dict:
    """The models the ladder paper's Table 3 times, by name, as ``(model factory, image size)``: L-CapsNets with
    three values of K and CapsNets with r = 3, 4, 5 routing iterations (each trains with its own loss). ``"full"``:
    the papers' sizes (K = 50, 70, 100 on 28×28 MNIST as in Table 3; Sabour's CapsNet without decoder); ``"quick"``:
    the slim networks on 40×40 (K = 16, 32, 64; the slim CapsNet with the same 576 primary capsules). Chapter 06.
    """
    from ..models import CapsNet, CapsNetConfig, LadderCapsNet, LadderCapsNetConfig
    from ..routing import RouterSpec

    if profile == "full":
        ladder = {k: LadderCapsNetConfig.paper(k=k, image_size=28) for k in (50, 70, 100)}
        capsnet = {r: CapsNetConfig.sabour(router=RouterSpec(iterations=r), decoder=False) for r in (3, 4, 5)}
    elif profile == "quick":
        ladder = {k: LadderCapsNetConfig.slim(k=k) for k in (16, 32, 64)}
        capsnet = {r: CapsNetConfig.slim(image_size=40, conv_channels=32, decoder=False,
                                         router=RouterSpec(iterations=r)) for r in (3, 4, 5)}
    else:
        raise ValueError(f"profile must be 'quick' or 'full', got {profile!r}")
    models = {f"ladder K={k}": ((lambda c=c: LadderCapsNet(c)), c.image_size) for k, c in ladder.items()}
    models.update({f"capsnet r={r}": ((lambda c=c: CapsNet(c)), c.image_size) for r, c in capsnet.items()})
    return models


def bench_steps(profile: str = "quick", device=None, repeats: int = 5, batch: int = 100, seed: int = 0) -> dict:
    """Time one training step of every model of :func:`step_models` on one seeded random batch (the paper's
    Table 3 uses 100 samples): a JSON-ready dict with the machine and, per model, its parameter count and
    :func:`training_step_seconds`. Chapter 06.
    """
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    report = {"profile": profile, "device": str(device), "cpu": platform.processor() or platform.machine(),
              "threads": torch.get_num_threads(), "torch": torch.__version__, "batch": batch, "repeats": repeats,
              "models": {}}
    for name, (make, size) in step_models(profile).items():
        g = torch.Generator().manual_seed(seed)
        images = torch.rand(batch, 1, size, size, generator=g).to(device)
        labels = torch.randint(0, 10, (batch,), generator=g).to(device)
        torch.manual_seed(seed)
        model = make().to(device)
        timing = training_step_seconds(model, images, labels, repeats=repeats)
        report["models"][name] = {"parameters": sum(p.numel() for p in model.parameters()),
                                  **{k: v for k, v in timing.items() if k not in ("device", "threads", "batch")}}
    return report


def _stages(model, images: torch.Tensor) -> list:
    """The network's own stages of its forward pass (:meth:`~capsule_lab.models.CapsuleNetwork.stages`)."""
    if not callable(getattr(model, "stages", None)):
        raise ValueError(f"model must be a capsule_lab.models.CapsuleNetwork (which cuts its forward pass into stages), "
                         f"got {type(model).__name__}")
    return model.stages(images)


def stage_flops(model: torch.nn.Module, images: torch.Tensor) -> dict:
    """The forward FLOPs of each stage of a CapsNet or an L-CapsNet on ``images`` (chapter 06): ``{stage: FLOPs}``
    for the stages of :func:`step_breakdown` without its last ("loss and Adam"), counted by
    :class:`torch.utils.flop_counter.FlopCounterMode` on each cumulative prefix of the forward pass and differenced
    (a multiply-add is 2 FLOPs; matrix products and convolutions are counted, element-wise work such as the squash
    or the softmax is not). Works on the meta device, so the paper's sizes can be counted without their memory.
    """
    from torch.utils.flop_counter import FlopCounterMode

    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        raise ValueError(f"images must be a tensor (B, C, H, W), got {getattr(images, 'shape', type(images).__name__)}")
    prefixes = _stages(model, images)
    totals = []
    for _, forward in prefixes:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            forward()
        totals.append(counter.get_total_flops())
    return {name: now - before for (name, _), now, before in zip(prefixes, totals, [0, *totals])}


def step_breakdown(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, repeats: int = 5,
                   warmup: int = 1) -> dict:
    """Where one training step of a CapsNet or an L-CapsNet spends its time (chapter 06, the ladder paper's Table 3).

    The forward pass is cut into stages — CapsNet: convolutions, votes, routing (or votes and routing as one stage
    where the layer routes vote-free, :func:`~capsule_lab.routing.vote_free_routing`); L-CapsNet: convolutions,
    pruning and the weight networks of z (the code vector), eqs. 1–4 — and each cumulative prefix (the network up to
    the end of a stage) is timed forward and backward (of the sum of what it returns, so every weight before it gets its
    gradient, as in a real step); a stage's time is its prefix's median minus the previous prefix's. The last stage,
    "loss and Adam", is the whole training step (:func:`training_step`) minus the longest prefix. The prefixes and the
    step are timed interleaved, one run of each per round over ``repeats`` rounds, so that a change in the machine's
    load falls on all of them alike. Each stage also gets its forward FLOPs (:func:`stage_flops`; the loss's are not
    counted).

    Returns ``{"stages": {stage: {"seconds", "share", "forward_mflop"}}, "step_s", "batch", "device", "threads",
    "spread_s"}``, ``share`` the stage's part of ``step_s``; ``spread_s`` is the largest interquartile range of the
    timed runs (prefixes and step): a stage's time is a difference of two medians, and one smaller than about this
    spread is not told from zero (it can come out negative). ``images`` and ``labels`` on the model's device; the model
    trains while it is timed.
    """
    flops = stage_flops(model, images)
    check_positive_int(repeats, "repeats")
    device = next(model.parameters()).device
    model.train()

    def forward_backward(forward):
        def run():
            model.zero_grad(set_to_none=True)
            out = forward()
            sum(t.sum() for t in (out if isinstance(out, tuple) else (out,))).backward()
        return run

    runs = [forward_backward(f) for _, f in _stages(model, images)] + [training_step(model, images, labels)]
    sync = _sync(device)
    for run in runs:
        for _ in range(warmup):
            run()
    times = [[] for _ in runs]
    for _ in range(repeats):                              # interleaved: every prefix and the step once per round
        for run, kept in zip(runs, times):
            kept.extend(time_runs(run, 1, 0, sync))
    seconds = [statistics.median(t) for t in times]
    step = seconds[-1]
    names = [*flops, "loss and Adam"]
    stages = {name: {"seconds": now - before, "share": (now - before) / step,
                     "forward_mflop": flops.get(name, 0) / 1e6}
              for name, now, before in zip(names, seconds, [0.0, *seconds])}
    spread = max(statistics.quantiles(t, n=4)[2] - statistics.quantiles(t, n=4)[0] if len(t) > 1 else 0.0
                 for t in times)
    return {"stages": stages, "step_s": step, "batch": int(images.shape[0]), "device": str(device),
            "threads": torch.get_num_threads(), "spread_s": spread}


def main_steps(profile: str = "quick", device=None, repeats: int = 5, batch: int = 100) -> str:
    """The JSON text that ``capsule-lab bench steps`` prints."""
    return json.dumps(bench_steps(profile, device, repeats, batch), indent=2)
