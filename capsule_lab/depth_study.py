"""Chapter 04's experiment: train deep CapsNets of several depths and routings, and measure their capsules.

Taught in chapter 04 (``chapters/04_dead_capsules.ipynb``), after Mitterreiter et al. (2023), §4: one
:class:`~capsule_lab.models.DeepCapsNet` per (depth, routing, seed) is trained with
:func:`capsule_lab.training.fit` under a :class:`~capsule_lab.profiles.DepthStudySettings`, then its capsules
are collected on the test digits (:func:`capsule_lab.diagnostics.collect_capsules`) and summarised per layer
(:func:`capsule_lab.diagnostics.layer_table`). With ``track=True`` a
:class:`~capsule_lab.diagnostics.GradientTracker` records every capsule's length and gradient norms at every
training step (Theorem 2 seen during training).

What makes capsules die at a scale a CPU can train is searched by ``scripts/dead_capsule_search.py``: it calls
:func:`train_and_measure` with keyword overrides (``optimizer``, ``momentum``, ``config`` changes such as the
squash, W's and the priors' initial spread) on top of a settings object, and records every run in
``results/dead_capsule_search.csv``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple, Optional

import torch
from torch.utils.data import Dataset, TensorDataset

from ._checks import check_positive_int
from .data import affine_test_set, load_mnist
from .diagnostics import CapsuleRecord, GradientTracker, collect_capsules, layer_table
from .models import DeepCapsNet, DeepCapsNetConfig
from .profiles import DepthStudySettings
from .training import fit

__all__ = ["DepthRun", "depth_study_data", "train_and_measure"]


class DepthRun(NamedTuple):
    """One trained network of the study: the model, its capsules on the test digits, their per-layer table
    (:func:`~capsule_lab.diagnostics.layer_table`) and, if tracked, the per-step history of
    :class:`~capsule_lab.diagnostics.GradientTracker` (else None)."""

    model: DeepCapsNet
    record: CapsuleRecord
    table: list
    gradients: Optional[dict]


def _check_settings(settings) -> DepthStudySettings:
    if not isinstance(settings, DepthStudySettings):
        raise ValueError(f"settings must be a DepthStudySettings (capsule_lab.profiles.chapter_settings('04')), "
                         f"got {type(settings).__name__}")
    return settings


def depth_study_data(settings: DepthStudySettings, source: str = "offline") -> tuple[Dataset, Dataset]:
    """The study's training and test digits: the first ``train_size`` / ``test_size`` of MNIST from ``source``
    (see :func:`capsule_lab.data.load_mnist`), both moved by seeded affine transformations when
    ``settings.affine_train`` (the paper trains and tests on affNIST). Chapter 04.
    """
    _check_settings(settings)
    train_all, test_all = load_mnist(True, source=source), load_mnist(False, source=source)
    train = TensorDataset(*(t[:settings.train_size] for t in train_all.tensors))
    test = TensorDataset(*(t[:settings.test_size] for t in test_all.tensors))
    if settings.affine_train:
        train, test = affine_test_set(train, seed=1), affine_test_set(test, seed=2)
    return train, test


def train_and_measure(settings: DepthStudySettings, depth: int, routing: str, seed: int, train: Dataset,
                      test: Dataset, device="cpu", amp: bool = False, track: bool = False, *,
                      optimizer: Optional[str] = None, momentum: Optional[float] = None,
                      config: Optional[dict] = None) -> DepthRun:
    """Train one DeepCapsNet with ``depth`` routing layers and ``routing`` ("dynamic" or "uniform") under
    ``settings``, seeded by ``seed`` (initial weights and shuffling), and measure its capsules on ``test``.

    ``track=True`` records per-step capsule lengths and gradient norms (costs a little time).

    Overrides, for the search of what makes capsules die (``scripts/dead_capsule_search.py``): ``optimizer``
    (``"adam"`` or ``"sgd"``) and ``momentum`` go to :func:`~capsule_lab.training.fit` (default: the settings'
    ``optimizer`` and ``momentum``); ``config`` is a dict of
    :class:`~capsule_lab.models.DeepCapsNetConfig` changes applied to ``settings.config`` (e.g.
    ``{"squash": "sabour", "init_std": 0.5}``; not ``routing_layers`` or ``routing``, which are ``depth`` and
    ``routing``). Chapter 04.
    """
    _check_settings(settings)
    check_positive_int(depth, "depth")
    fields = set(DeepCapsNetConfig.__dataclass_fields__) - {"routing_layers", "routing"}
    if config is not None and (not isinstance(config, dict) or not set(config) <= fields):
        raise ValueError(f"config must be a dict of DeepCapsNetConfig changes (some of {sorted(fields)}; depth and "
                         f"routing are arguments of their own), got {config!r}")
    optimizer = settings.optimizer if optimizer is None else optimizer
    momentum = settings.momentum if momentum is None else momentum
    net_config = replace(settings.config, routing_layers=depth, routing=routing, **(config or {}))
    torch.manual_seed(seed)
    net = DeepCapsNet(net_config).to(device)
    options = dict(epochs=settings.epochs, batch_size=settings.batch_size, lr=settings.lr,
                   lr_decay=settings.lr_decay, optimizer=optimizer, momentum=momentum, seed=seed, progress=False,
                   device=device, amp=amp)
    gradients = None
    if track:
        with GradientTracker(net) as tracker:
            fit(net, train, None, **options)
        gradients = tracker.history()
    else:
        fit(net, train, None, **options)
    record = collect_capsules(net, test)
    return DepthRun(net, record, layer_table(record), gradients)
