"""What every model family offers the training loop, the benches and the measures.

Taught in chapter 08 (the bench trains and measures every family the same way; chapters 02–07 use the parts).
Each family of :mod:`capsule_lab.models` is a :class:`CapsuleNetwork` and owns what differs between families, so
that the code that trains and measures networks never asks which family it holds:

- its loss, ``model.loss(output, images, targets)`` (Sabour's margin + reconstruction, the ladder's margin +
  ε ‖c − A‖², ...): :func:`capsule_lab.training.fit` trains with it unless told otherwise;
- its routers, ``model.routers()`` (the routing layers' :class:`~capsule_lab.routing.Router` modules, input to
  output; none for the ladder), and its routing parameters, ``model.routing_parameters()`` (what it learns in
  place of fixed routing: its routers' parameters, or the ladder's pruning and ladder layers);
- one seam for its routers: ``Network(config, router=...)`` takes, for every family, a registered kind's name, a
  :class:`~capsule_lab.routing.RouterSpec`, a router factory ``f(layer) → Router`` (given each routing layer's
  :class:`~capsule_lab.routing.LayerInfo`: its sizes, the network's squash, its place), a
  :class:`~capsule_lab.routing.Router` (a network of one routing layer), or a sequence of these, one per routing layer
  (:func:`network_config`, :func:`layer_routers`), as torchvision's models take ``norm_layer``;
- what its output offers the parse-tree measures (chapter 05's keys and entropy, chapter 04's dyr),
  ``model.parse_trees(output)`` → :class:`ParseTrees`;
- the stages of its forward pass, ``model.stages(images)``, for the step breakdown of chapter 06.

Every output has ``.scores`` ``(B, classes)``, the class scores the network predicts with (the longest class
capsule, the largest activity or activation).
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from dataclasses import replace
from typing import Callable, NamedTuple, Sequence

import torch
from torch import nn

from ..routing import LayerInfo, Router, RouterSpec

__all__ = ["ParseTrees", "CapsuleNetwork", "routed_parse_trees", "network_config", "layer_routers", "built_routers"]


class ParseTrees(NamedTuple):
    """What a network's output offers the parse-tree measures. Chapter 08.

    couplings ``(B, I, J)``: each input capsule's couplings to the class capsules, read as each image's parse tree
    (chapter 05's key is the column of its predicted class, quantised); ``levels``: the quantisation levels K of the
    keys; ``normalize_over``: the axis the network's couplings sum to 1 over before they were read (``"outputs"``,
    ``"inputs"``, or ``"none"``: not routing couplings, the ladder's code vector); ``dynamics``: the couplings
    chapter 04's routing dynamics (dyr) reads, or None for a network that does not route; ``routed``: the couplings as
    the router returned them, before they were read as parse trees (chapter 05's REM measures read these: under
    quantised inference they are the bin centres the routing used), or None for a network that does not route.
    """

    couplings: torch.Tensor
    levels: int
    normalize_over: str
    dynamics: torch.Tensor | None = None
    routed: torch.Tensor | None = None


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
    return ParseTrees(c, levels, normalize_over, dynamics=c, routed=couplings.detach())


def _is_spec(item) -> bool:
    return isinstance(item, (str, RouterSpec))


def _spec(item) -> RouterSpec:
    return RouterSpec(item) if isinstance(item, str) else item


def network_config(config, config_class: type, router, argument: str = "router"):
    """``(config, routers)``: the config a network keeps and what its routing layers build their routers from.

    ``router`` None: the config's :class:`~capsule_lab.routing.RouterSpec` (``config.router``; a tuple of specs
    gives each routing layer its own). A kind's name, a spec or a sequence of them: the config kept says so
    (``router=`` that spec, or the tuple). Router modules or factories (or a sequence mixing them): the config kept
    says ``router=None``, so that a config never names a routing it does not run. ``ValueError`` unless ``config``
    is a ``config_class``, or when neither the config nor ``router`` says how to route. Chapter 08.
    """
    if not isinstance(config, config_class):
        raise ValueError(f"config must be a {config_class.__name__}, got {type(config).__name__}")
    if router is None:
        if config.router is None:
            raise ValueError(f"config.router is None (a network that was given router modules): pass {argument}=")
        return config, config.router
    if _is_spec(router):
        return replace(config, router=_spec(router)), _spec(router)
    if isinstance(router, (list, tuple)) and router and all(_is_spec(r) for r in router):
        specs = tuple(_spec(r) for r in router)
        return replace(config, router=specs), specs
    return replace(config, router=None), router


def layer_routers(router, layers: Sequence[LayerInfo], argument: str = "router") -> Callable[[int], Router]:
    """``make(l)``: the router of routing layer l, from what a network was given (:func:`network_config`'s second
    value) for its routing ``layers`` (one :class:`~capsule_lab.routing.LayerInfo` each, input to output). Each item —
    one for every layer, or one per layer in a sequence of ``len(layers)`` — is a kind's name, a
    :class:`~capsule_lab.routing.RouterSpec`, a factory ``f(layer) → Router`` or a :class:`~capsule_lab.routing.Router`
    (one module cannot route two layers: it would share its parameters). The lengths and kinds are checked here,
    each router is built when ``make(l)`` is called, so a network draws its routers' parameters where its
    initialisation expects them. Chapter 08.
    """
    L = len(layers)
    if isinstance(router, (list, tuple)):
        items = list(router)
        if len(items) != L:
            raise ValueError(f"{argument} must give {L} routers (one per routing layer), got {len(items)}")
    else:
        if isinstance(router, Router) and L > 1:
            raise ValueError(f"{argument} is one Router module but the network has {L} routing layers: give one per "
                             f"layer, a kind's name, a RouterSpec or a factory f(layer) → Router")
        items = [router] * L
    for k, item in enumerate(items):
        if isinstance(item, str):
            items[k] = RouterSpec(item)
        elif not (isinstance(item, Router) or callable(item)):
            raise ValueError(f"{argument} must be a kind's name, a RouterSpec, a factory f(layer) → Router or a Router "
                             f"(or one per routing layer), got {type(item).__name__}")

    def make(l: int) -> Router:
        item = items[l]
        built = item if isinstance(item, Router) else item(layers[l])
        name = argument if L == 1 else f"{argument}[{l}]"
        if not isinstance(built, Router):
            raise ValueError(f"{name} must be a capsule_lab.routing.Router (an nn.Module called as "
                             f"router(votes, activations=None) → RoutingResult), got {type(built).__name__}")
        return built

    return make


def built_routers(router, layers: Sequence[LayerInfo], argument: str = "router") -> list:
    """The routers of ``layers`` built now, input to output (:func:`layer_routers`): for a comparison that builds
    every router before its network's own weights, so that a router with parameters draws them the same way whatever
    network it routes in (:func:`capsule_lab.studies.common.same_start`). Chapters 07–08."""
    make = layer_routers(router, layers, argument)
    return [make(l) for l in range(len(layers))]


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

    def stages(self, images: torch.Tensor) -> list:
        """The stages of the forward pass on ``images`` as cumulative prefixes ``[(stage, forward of the prefix), …]``:
        each function runs the network up to the end of its stage and returns what is there (chapter 06's step
        breakdown, :func:`capsule_lab.measures.cost.step_breakdown`). By default one stage, the whole forward pass; a
        family that can cut its pass into meaningful stages says so."""
        return [("forward pass", lambda: self(images))]
