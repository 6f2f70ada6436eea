"""Chapter 08's bench entries: the routers the bench compares, each the class layer of one backbone.

Taught in chapter 08. Every entry (:class:`BenchEntry`, :data:`ROUTERS`) says how the backbone's class layer routes —
a :class:`~capsule_lab.routing.RouterSpec` of a registered kind on Sabour's or Faria's votes, with REM's pruning while
training where it asks for it — or gives a network of its own that takes the backbone's convolution and primary
capsules (the ladder, and the ladder cut to the CapsNet's parameters, :func:`matched_ladder_widths`). A name the
table does not hold is a registered kind (:func:`~capsule_lab.routing.register_router`, or ``"module:Name"``): it runs
on the bench by its default spec (:func:`bench_entry`). :func:`build_network` builds any of them from one seed so that
every router starts from the same weights (:func:`capsule_lab.studies.common.same_start`); :func:`bench_data` reads the
images they all train and test on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch
from torch import nn

from ..._checks import check_one_of
from ...data.sources import load_dataset
from ...data.transforms import affine_test_set
from ...layers.votes import VOTES
from ...models import CapsNet, LadderCapsNet, LadderCapsNetConfig, built_routers
from ...models.capsnet import BackboneConfig
from ...routing import RouterSpec, router_kind, router_kinds
from ..common import same_start
from .settings import RouterBenchSettings

#: The router whose network chapter 08's questions turn on (Sabour's r = 3): the bench's main network, the one
#: :mod:`capsule_lab.course.epoch_timing` times.
MAIN_ROUTER = "dynamic r=3"


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


#: The bench's routers by name (:data:`~capsule_lab.studies.bench.settings.ROUTERS_08`), each a registered kind's
#: spec (or the ladder).
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
        raise ValueError(f"settings must be a capsule_lab.studies.bench.settings.RouterBenchSettings, "
                         f"got {type(settings).__name__}")
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
    dataset, and the test images under seeded affine maps (seed 0, :func:`capsule_lab.data.transforms.affine_test_set`).
    ``source`` as :func:`capsule_lab.data.sources.load_mnist`. Chapter 08.
    """
    settings = _check_settings(settings)
    train = load_dataset(settings.dataset, True, source, settings.train_size)
    test = load_dataset(settings.dataset, False, source, settings.test_size)
    return train, test, affine_test_set(test, seed=0, strength=settings.affine_strength)


def build_network(name: str, settings: RouterBenchSettings, seed: int = 0, custom: dict | None = None) -> nn.Module:
    """A fresh network with router ``name``, made by :func:`capsule_lab.studies.common.same_start` from ``seed``: the
    backbone (Sabour's CapsNet of the settings) first, then the router's network, which takes its weights — all of them,
    or for a network of its own the convolution and primary capsules. So for one seed every router starts from the same
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
