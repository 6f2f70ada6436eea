"""Seconds per full-profile epoch of every chapter's networks, on the machine it runs on (a GPU, for book/setup.md).

For each chapter (:data:`capsule_lab.course.smoke.STUDIES`: the networks its full profile trains, with its
:class:`~capsule_lab.training.Schedule`), every network is built as the chapter builds it and timed for one
training step (:func:`capsule_lab.measures.cost.training_step_seconds`: median of ``--repeats`` steps after a warm-up,
with the chapter's batch size and mixed precision on CUDA, as ``fit`` trains). The chapter's first network then trains
one epoch with :func:`capsule_lab.training.fit` on ``--train-size`` images (default 60,000, the size of MNIST's
training set), or on as many as its step time says fit in ``--cap`` seconds; the report says which, and a partial
epoch's seconds per 60,000 images are that measure scaled, marked ``"scaled": true``.

The images are Fashion-MNIST's 60,000 training images, which have MNIST's shape and count (MNIST's own training
set cannot be downloaded on a machine without network; an epoch's cost depends on the shapes, not on the pixels),
placed on a larger canvas where a chapter's network reads larger images (chapter 06's 40×40 expanded digits).
REM's and SNIP's pruning is not applied: a pruned network's step costs what the dense one's does (the masks are
multiplications).

    python scripts/gpu_epochs.py --out gpu_epochs.json            # on a GPU, the full profile
    python scripts/gpu_epochs.py --profile quick --device cpu --train-size 256 --cap 2 --chapters 02
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from capsule_lab.measures.cost import training_step_seconds
from capsule_lab.data.sources import load_fashion_mnist
from capsule_lab.course.epoch_timing import EPOCH_IMAGES, chapter_images
from capsule_lab.course.smoke import CHAPTERS, STUDIES
from capsule_lab.training import fit


def time_chapter(chapter: str, profile: str, fashion: TensorDataset, device: torch.device, args) -> dict:
    study = STUDIES[chapter]
    settings = study.settings(profile)
    schedule = settings.schedule
    amp = device.type == "cuda"
    networks = study.networks(settings)
    sample, _ = study.data(settings, networks[0].dataset, "offline", 2, 2)    # the chapter's image shape
    images = chapter_images(fashion, tuple(sample.tensors[0].shape[1:]))
    batch = images.tensors[0][:schedule.batch_size].to(device), images.tensors[1][:schedule.batch_size].to(device)
    report = {"schedule": {"batch_size": schedule.batch_size, "lr": schedule.lr, "epochs": schedule.epochs},
              "image_shape": list(images.tensors[0].shape[1:]), "networks": {}}
    seen = set()
    for k, network in enumerate(networks):
        if network.name in seen:                         # the same network on another dataset costs the same
            continue
        seen.add(network.name)
        entry = {}
        try:
            net = network.build().to(device)
            entry["parameters"] = sum(p.numel() for p in net.parameters())
            step = training_step_seconds(net, *batch, repeats=args.repeats, amp=amp, lr=schedule.lr)
            entry["step_ms"] = round(step["median_s"] * 1e3, 2)
            steps = math.ceil(EPOCH_IMAGES / schedule.batch_size)
            entry["epoch_s_from_steps"] = round(step["median_s"] * steps, 1)
            if k == 0:                                   # the chapter's first network: a measured epoch
                size = min(args.train_size, max(schedule.batch_size,
                                                int(args.cap / step["median_s"]) * schedule.batch_size))
                train = TensorDataset(*(t[:size] for t in images.tensors))
                history = fit(net, train, None, **{**schedule.fit_options(), "epochs": 1}, device=device, amp=amp,
                              progress=False)
                seconds = sum(history.seconds)
                entry["epoch"] = {"images": size, "seconds": round(seconds, 1),
                                  "seconds_per_60000": round(seconds * EPOCH_IMAGES / size, 1),
                                  "scaled": size != EPOCH_IMAGES,
                                  "train_accuracy": round(history.train_accuracy[-1], 4)}
            if device.type == "cuda":
                entry["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 1e9, 2)
                torch.cuda.reset_peak_memory_stats(device)
        except Exception as error:                       # noqa: BLE001 - one network's failure is reported, not fatal
            entry["error"] = f"{type(error).__name__}: {error}"[:500]
        finally:
            net = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
        report["networks"][network.name] = entry
        print(chapter, network.name, json.dumps(entry), flush=True)
    return report


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=["quick", "full"], default="full")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--chapters", nargs="+", default=list(CHAPTERS))
    parser.add_argument("--train-size", type=int, default=60000)
    parser.add_argument("--cap", type=float, default=40.0, help="seconds a chapter's measured epoch may take")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per network (after one warm-up)")
    parser.add_argument("--source", default="auto", help="where Fashion-MNIST is read from (capsule_lab.data)")
    parser.add_argument("--out", type=Path, default=Path("gpu_epochs.json"))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    device = torch.device(args.device)
    fashion = load_fashion_mnist(True, source=args.source)
    fashion = TensorDataset(*(t[:args.train_size] for t in fashion.tensors))
    chapters = {}
    for chapter in args.chapters:
        chapters[chapter] = time_chapter(chapter, args.profile, fashion, device, args)
    report = {"provenance": {"command": "python scripts/gpu_epochs.py " + " ".join(argv or sys.argv[1:]),
                             "device": torch.cuda.get_device_name(device) if device.type == "cuda" else
                             (platform.processor() or platform.machine()),
                             "torch": torch.__version__, "threads": torch.get_num_threads(),
                             "seconds": round(time.perf_counter() - started, 1),
                             "date": datetime.now(timezone.utc).isoformat(timespec="seconds")},
              "chapters": chapters}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
