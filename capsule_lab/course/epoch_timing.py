"""One timed epoch of each chapter's main network: seconds per epoch, peak memory, accuracy after the epoch.

Taught with the profiles in the book's set-up page (``book/setup.md``) and chapter 08; run with
``capsule-lab smoke --profile full --epoch`` on a GPU (Colab, or any CUDA machine). The smoke run
(:mod:`capsule_lab.course.smoke`) proves every network builds and steps; this measures what a student waits for: how
long one epoch of a chapter's full profile takes on the machine at hand, how much GPU memory it needs, and that
one epoch already learns (the test accuracy after it).

For each chapter its *main* network (:func:`main_network`: the one the chapter's questions turn on) is built as
the chapter's study builds it (:data:`capsule_lab.course.smoke.STUDIES`), then

1. one training step is timed (:func:`capsule_lab.measures.cost.training_step_seconds`: the median of ``repeats`` steps
   after a warm-up, at the chapter's batch size, mixed precision on CUDA where the profile asks for it);
2. a fresh copy of the network trains one epoch with :func:`capsule_lab.training.fit` and the chapter's
   :class:`~capsule_lab.training.Schedule` (the copies of each batch to the device and the loop's own work
   included), and is evaluated on the test set (:func:`capsule_lab.training.evaluate`).

The data. In the full profile, where the chapter's dataset is on disk in torchvision's files (MNIST after
``capsule-lab data --online``, Fashion-MNIST after ``capsule-lab data``), and always in the quick profile, the
epoch reads the chapter's data through the chapter's own pipeline (its sizes, canvas, affine test set). Where the
full profile's dataset is not on disk (a machine without network has no MNIST's 60,000, only the 8,000 offline
digits), the epoch reads Fashion-MNIST's full set in its place, at the chapter's image shape (:func:`chapter_images`):
an epoch's cost depends on the images' shape and count, not their pixels, and Fashion-MNIST has MNIST's. The result
names the data it used (``data``), so an accuracy is never read as another dataset's. Nothing is downloaded.
"""

from __future__ import annotations

import math
import platform
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import torch
from torch.utils.data import TensorDataset

from .._checks import check_positive_int
from ..data.expanded import expanded_mnist
from ..data.sources import load_dataset
from ..measures.cost import training_step_seconds
from ..training import evaluate, fit
from .profiles import PROFILES
from .smoke import (CHAPTERS, ROUTER_CHAPTERS, STUDIES, SmokeNetwork, _check_chapter, _check_profile, _device,
                    chapter_settings_with, resolve_source)

__all__ = ["EPOCH_IMAGES", "EpochResult", "main_network", "chapter_images", "epoch_data", "time_epoch", "time_epochs",
           "epoch_report"]

#: The images of an epoch that ``seconds_per_60000`` is counted for: MNIST's (and Fashion-MNIST's) training set.
EPOCH_IMAGES = 60000


@dataclass(frozen=True)
class EpochResult:
    """One chapter's timed epoch (see the module docstring). ``error`` is empty when everything ran; otherwise the
    measures that were not reached are None. ``peak_memory_gb`` is the most GPU memory held at once while the
    network was built, timed, trained and evaluated (None on a CPU). Book set-up page, chapter 08."""

    chapter: str
    model: str
    data: str                     # e.g. "mnist (torchvision)" or "fashion (torchvision) in place of mnist"
    parameters: int
    device: str
    amp: bool
    batch_size: int
    train_images: int
    test_images: int
    step_ms: float | None
    epoch_s: float | None
    seconds_per_60000: float | None
    train_accuracy: float | None
    test_accuracy: float | None
    peak_memory_gb: float | None
    error: str = ""


def main_network(chapter: str, profile: str = "full", routers=None) -> SmokeNetwork:
    """The main network of ``chapter``'s ``profile`` as its study builds it: the one its study marks as the network
    the chapter's questions turn on (:class:`~capsule_lab.course.smoke.SmokeNetwork`'s ``main``), else its first — with
    ``routers`` (a chapter that compares routers, :func:`~capsule_lab.course.smoke.chapter_settings_with`), the first of
    theirs."""
    study = STUDIES[_check_chapter(chapter)]
    networks = study.networks(chapter_settings_with(chapter, profile, routers))
    return next((network for network in networks if network.main), networks[0])


def chapter_images(data: TensorDataset, shape: tuple) -> TensorDataset:
    """``data``'s images at the shape ``(C, H, W)`` a chapter's network reads: as they are when they have it, else
    each placed at random on an H × H canvas (:func:`capsule_lab.data.expanded.expanded_mnist`, chapter 06's 40 ×
    40)."""
    images = data.tensors[0]
    shape = tuple(shape)
    if tuple(images.shape[1:]) == shape:
        return data
    if len(shape) == 3 and shape[0] == images.shape[1] and shape[1] == shape[2] > images.shape[-1]:
        return expanded_mnist(data, canvas=shape[1])
    raise ValueError(f"no images of shape {shape} can be made from images of shape {tuple(images.shape[1:])}")


def epoch_data(chapter: str, profile: str = "full", source: str | None = None, train_size: int | None = None,
               test_size: int | None = None) -> tuple:
    """``(train, test, description)`` for ``chapter``'s timed epoch (see the module docstring): the chapter's own
    pipeline from ``source`` (None: the chapter's own, :func:`~capsule_lab.course.smoke.chapter_source`) in the quick
    profile or where torchvision's files are on disk, else Fashion-MNIST at the chapter's image shape in its place.
    ``train_size`` and ``test_size`` cut the sets (None: the profile's own, all of them in the full profile)."""
    study = STUDIES[_check_chapter(chapter)]
    settings = study.settings(_check_profile(profile))
    for size, name in ((train_size, "train_size"), (test_size, "test_size")):
        if size is not None:
            check_positive_int(size, name)
    dataset = main_network(chapter, profile).dataset
    used, _ = resolve_source(dataset, source or study.source(profile))       # every router of a study: the same data
    if used == "torchvision" or profile == "quick":      # the full sets, or the quick profile's own digits
        train, test = study.data(settings, dataset, used, train_size, test_size)
        return train, test, f"{dataset} ({used})"
    fashion, _ = resolve_source("fashion", "auto")
    if fashion != "torchvision":
        raise FileNotFoundError(f"neither {dataset}'s nor Fashion-MNIST's full sets are on disk: run "
                                "`capsule-lab data` (Fashion-MNIST), or `capsule-lab data --online` (both)")
    shape = study.data(settings, dataset, "offline", 2, 2)[0].tensors[0].shape[1:]      # the chapter's image shape
    train_size = train_size if train_size is not None else getattr(settings, "train_size", None)
    train, test = (chapter_images(load_dataset("fashion", split, "torchvision", size), shape)
                   for split, size in ((True, train_size), (False, test_size)))
    return train, test, f"fashion (torchvision) in place of {dataset}, whose full set is not on disk"


def _peak_gb(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 1e9, 3) if device.type == "cuda" else None


def time_epoch(chapter: str, profile: str = "full", device="auto", source: str | None = None,
               train_size: int | None = None, test_size: int | None = None, repeats: int = 5,
               routers=None) -> EpochResult:
    """Time one step and one epoch of ``chapter``'s main network and measure its accuracy after the epoch (see the
    module docstring) → an :class:`EpochResult`. ``routers``: in a chapter that compares routers, the main network
    routed by the first of them instead (:func:`main_network`), a router of your own included. A failure is recorded
    in its ``error``, not raised, so that a run over every chapter reports them all."""
    network = main_network(chapter, profile, routers)
    check_positive_int(repeats, "repeats")
    device = _device(device)
    amp = PROFILES[profile].amp and device.type == "cuda"
    schedule = STUDIES[chapter].settings(profile).schedule
    measures = dict(parameters=0, train_images=0, test_images=0, step_ms=None, epoch_s=None, seconds_per_60000=None,
                    train_accuracy=None, test_accuracy=None, peak_memory_gb=None)
    data, error = "", ""
    try:
        train, test, data = epoch_data(chapter, profile, source, train_size, test_size)
        measures.update(train_images=len(train), test_images=len(test))
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        batch = tuple(t[:schedule.batch_size].to(device) for t in train.tensors[:2])
        net = network.build().to(device)
        measures["parameters"] = sum(p.numel() for p in net.parameters())
        if network.prepare is not None:                 # e.g. a pruning before training, as the chapter does
            network.prepare(net, *batch)
        step = training_step_seconds(net, *batch, repeats=repeats, amp=amp, lr=schedule.lr)
        measures["step_ms"] = round(step["median_s"] * 1e3, 3)
        net = network.build().to(device)                # a fresh network trains the epoch
        if network.prepare is not None:
            network.prepare(net, *batch)
        history = fit(net, train, None, **{**schedule.fit_options(), "epochs": 1}, device=device, amp=amp,
                      seed=0, progress=False)
        seconds = sum(history.seconds)
        measures.update(epoch_s=round(seconds, 2), seconds_per_60000=round(seconds * EPOCH_IMAGES / len(train), 2),
                        train_accuracy=round(history.train_accuracy[-1], 4),
                        test_accuracy=round(evaluate(net, test, batch_size=schedule.batch_size, device=device,
                                                     amp=amp), 4))
    except Exception as err:  # noqa: BLE001 - one chapter's failure is reported, the run goes on
        error = f"{type(err).__name__}: {err}"[:500]
    finally:
        measures["peak_memory_gb"] = _peak_gb(device)
        net = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return EpochResult(chapter, network.name, data, device=str(device), amp=amp, batch_size=schedule.batch_size,
                       error=error, **measures)


def time_epochs(chapters=None, profile: str = "full", device="auto", source: str | None = None,
                train_size: int | None = None, test_size: int | None = None, repeats: int = 5,
                progress: bool = False, routers=None) -> list:
    """:func:`time_epoch` for each of ``chapters`` (default: 02–08; with ``routers``, the chapters that compare
    routers) → the results in order; with ``progress`` each is printed as one line as it comes."""
    chapters = (ROUTER_CHAPTERS if routers is not None else CHAPTERS) if chapters is None else tuple(chapters)
    for chapter in chapters:
        _check_chapter(chapter)
    results = []
    for chapter in chapters:
        result = time_epoch(chapter, profile, device, source, train_size, test_size, repeats, routers)
        results.append(result)
        if progress:
            done = (f"{result.epoch_s} s an epoch of {result.train_images:,} images, test accuracy "
                    f"{result.test_accuracy}" if not result.error else f"FAILED: {result.error}")
            print(f"{chapter}  {result.model:<28} {done}  [{result.data}]", flush=True)
    return results


def epoch_report(results, profile: str, command: str = "", seconds: float | None = None) -> dict:
    """The JSON-ready report of ``results``: where and when it ran (device name, torch, threads, date, command) and
    one entry per chapter (the fields of :class:`EpochResult`)."""
    device = results[0].device if results else "cpu"
    name = (torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda")
            else platform.processor() or platform.machine())
    provenance = {"command": command, "profile": profile, "device": name, "torch": torch.__version__,
                  "threads": torch.get_num_threads(),
                  "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if seconds is not None:
        provenance["seconds"] = round(seconds, 1)
    return {"provenance": provenance, "chapters": {r.chapter: asdict(r) for r in results},
            "failed": [r.chapter for r in results if r.error or not math.isfinite(r.epoch_s or math.nan)]}
