"""What every model family offers the training loop, the benches and the measures.

Taught in chapter 08 (the bench trains and measures every family the same way; chapters 02–07 use the parts).
Each family of :mod:`capsule_lab.models` is a :class:`CapsuleNetwork` and owns what differs between families, so
that the code that trains and measures networks never asks which family it holds:

- its loss, ``model.loss(output, images, targets)`` (Sabour's margin + reconstruction, the ladder's margin +
  ε ‖c − A‖², ...): :func:`capsule_lab.training.fit` trains with it unless told otherwise;
- its routers, ``model.routers()`` (the routing layers' :class:`~capsule_lab.routing.Router` modules, input to
  output; none for the ladder), and its routing parameters, ``model.routing_parameters()`` (what it learns in
  place of fixed routing: its routers' parameters, or the ladder's pruning and ladder layers);
- what its output offers the parse-tree measures (chapter 05's keys and entropy, chapter 04's dyr),
  ``model.parse_trees(output)`` → :class:`ParseTrees`.

Every output has ``.scores`` ``(B, classes)``, the class scores the network predicts with (the longest class
capsule, the largest activity or activation).
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from dataclasses import replace
from typing import NamedTuple

import torch
from torch import nn

__all__ = ["ParseTrees", "CapsuleNetwork", "routed_parse_trees", "network_config"]


class ParseTrees(NamedTuple):
    """What a network's output offers the parse-tree measures. Chapter 08.

    couplings ``(B, I, J)``: each input capsule's couplings to the class capsules, read as each image's parse tree
    (chapter 05's key is the column of its predicted class, quantised); ``levels``: the quantisation levels K of the
    keys; ``normalize_over``: the axis the network's couplings sum to 1 over before they were read (``"outputs"``,
    ``"inputs"``, or ``"none"``: not routing couplings, the ladder's code vector); ``dynamics``: the couplings
    chapter 04's routing dynamics (dyr) reads, or None for a network that does not route.
    """

    couplings: torch.Tensor
    levels: int
    normalize_over: str
    dynamics: torch.Tensor | None = None


def routed_parse_trees(couplings: torch.Tensor, normalize_over: str, levels: int = 11) -> ParseTrees:
    """A routing layer's couplings ``(B, I, J)`` as parse trees.

    Chapter 05's parse tree is, for each image, the column of couplings to the predicted class, quantised into
    ``levels`` levels; it assumes that each input's couplings sum to 1 over the outputs (Sabour's, REM's, the
    self-attention router's). Couplings normalised over the inputs (Faria's) are about 1/I each and would all
    quantise to 0, so each input's row is divided by its sum over the outputs (negative couplings, which the
    self-attention router's learned bias can make, are clipped to 0 first, everywhere). Chapter 08.
    """
    c = couplings.detach().float().clamp_min(0)
    c = c / c.sum(dim=2, keepdim=True).clamp_min(1e-12)
    return ParseTrees(c, levels, normalize_over, dynamics=c)


def network_config(config, config_class: type, routers, argument: str = "routers"):
    """The config a network keeps. A network builds its routers from its config's
    :class:`~capsule_lab.routing.RouterSpec` (``config.router``), or is given router modules instead (``routers``,
    the constructor's ``argument``, not None); then it keeps the config with ``router=None``, so that its config
    never names a routing it does not run. ``ValueError`` unless ``config`` is a ``config_class``, or when neither
    a spec nor modules say how to route. Chapter 08.
    """
    if not isinstance(config, config_class):
        raise ValueError(f"config must be a {config_class.__name__}, got {type(config).__name__}")
    if routers is None and config.router is None:
        raise ValueError(f"config.router is None (a network that was given router modules): pass {argument}=")
    return config if routers is None else replace(config, router=None)


class CapsuleNetwork(nn.Module, metaclass=ABCMeta):
    """The base of every model family (see the module docstring). Chapter 08.

    Abstract: a family defines :meth:`loss` and :meth:`parse_trees` (and ``forward``); a class that does not
    cannot be instantiated (``TypeError``).
    """

    @abstractmethod
    def loss(self, out, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The family's training loss of an output on its images and targets (``loss_fn(output, images, targets)``,
        the signature :func:`capsule_lab.training.fit` calls)."""

    def routers(self) -> tuple:
        """The routers of the network's routing layers, input to output (a router shared by layers, once per
        layer); empty for a network that does not route."""
        return ()

    def routing_parameters(self) -> list:
        """The parameters of what the network has in place of fixed routing: its routers' (each once; none for
        Sabour's and uniform routing, which learn nothing)."""
        seen, out = set(), []
        for router in self.routers():
            for p in router.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
        return out

    @abstractmethod
    def parse_trees(self, out) -> ParseTrees:
        """What ``out``, this network's output, offers the parse-tree measures (:class:`ParseTrees`)."""
