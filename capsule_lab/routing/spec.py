"""A router spec: the routing a network's config asks for, by kind and options, built into a router when the
network is built.

Taught in chapter 02 (the CapsNet's config) and used by every network config of the package
(:class:`~capsule_lab.models.CapsNetConfig`, :class:`~capsule_lab.models.DeepCapsNetConfig`,
:class:`~capsule_lab.models.ConvCapsNetConfig`). A config is a frozen description, so it holds a
:class:`RouterSpec`, not a router; the network builds the router from it with each routing layer's
:class:`~capsule_lab.routing.LayerInfo` (a spec is a router factory: ``spec(layer) → Router``). From then on the built
router is the truth: whatever needs to know how a network routes (its gradients, the bench's records, the parse-tree
entropy) reads ``model``'s routers, never the config.

The kind is any registered kind (:func:`~capsule_lab.routing.router_kinds`; :func:`~capsule_lab.routing.register_router`
adds one). The course's own (:data:`ROUTER_KINDS`) and the options each reads:

- ``"dynamic"``: :class:`~capsule_lab.routing.DynamicRouter` (Sabour), ``iterations`` = r; ``detach_votes``,
  ``detach_couplings``, ``pose_bias`` (REM's), ``learned_priors`` and ``prior_std`` (Mitterreiter et al.'s);
- ``"uniform"``: :class:`~capsule_lab.routing.UniformRouter`, c_ij = 1/J; ``pose_bias``;
- ``"similarity"``: :class:`~capsule_lab.routing.SimilarityRouter` (Faria), ``iterations`` = T; ``kernels``;
- ``"connectionist"``: :class:`~capsule_lab.routing.ConnectionistRouter` (Faria), ``iterations`` = T;
  ``lstm_hidden``, ``compatibility_hidden``, ``activation_hidden``;
- ``"self-attention"``: :class:`~capsule_lab.routing.SelfAttentionRouter` (Mazzia et al.); no option.

A kind registered from outside the package declares its own options; a spec gives them as ``options={name: value}``.
An option given to a kind that does not read it is an error, so a spec never says something its router ignores.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Mapping, Optional

import torch

from .._checks import check_bool, check_nonnegative, check_positive_int
from .registry import LayerInfo, router_kind
from .router import Router

__all__ = ["ROUTER_KINDS", "RouterSpec", "check_router_spec"]

#: The course's own kinds of router; :func:`~capsule_lab.routing.router_kinds` lists every registered one.
ROUTER_KINDS = ("dynamic", "uniform", "similarity", "connectionist", "self-attention")


def _hidden(value, name: str) -> tuple:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name} must be a sequence of layer widths, got {value!r}")
    value = tuple(value)
    for width in value:
        check_positive_int(width, f"{name}'s widths")
    return value


@dataclass(frozen=True)
class RouterSpec:
    """The routing a config asks for: a registered kind and the options that apply to it.

    ``iterations``: Sabour's r ≥ 1 for ``dynamic``, Algorithm 1's T ≥ 0 for ``similarity`` and ``connectionist`` (the
    kind's registered minimum). ``detach_votes``, ``detach_couplings``: :func:`~capsule_lab.routing.dynamic_routing`'s
    options (chapter 03's detached network has ``detach_couplings=True``). ``pose_bias``: REM's learned bias b_j added
    to every weighted sum before the squash, initialised to this value (chapter 05). ``learned_priors``: Mitterreiter
    et al.'s learned routing priors b ``(I, J)``, zeros at first or drawn from N(0, ``prior_std``²) (chapter 04).
    ``kernels``: Q, the similarity router's Gaussian kernels; ``lstm_hidden``, ``compatibility_hidden``,
    ``activation_hidden``: the connectionist router's LSTM and its networks f_c and f_a (chapter 07). ``options``: a
    registered kind's own options, ``{name: value}`` (kept as sorted pairs, so a spec stays hashable).

    ``spec(layer)`` builds the router for a :class:`~capsule_lab.routing.LayerInfo`; :meth:`build` for a layer's
    sizes. Chapter 02.
    """

    kind: str = "dynamic"
    iterations: int = 3
    detach_votes: bool = False
    detach_couplings: bool = False
    pose_bias: Optional[float] = None
    learned_priors: bool = False
    prior_std: float = 0.0
    kernels: int = 10
    lstm_hidden: int = 16
    compatibility_hidden: tuple = (64, 64)
    activation_hidden: tuple = (124, 124)
    options: Any = ()

    def __post_init__(self):
        kind = router_kind(self.kind)
        if kind.iterations is not None:
            check_positive_int(self.iterations, "iterations", minimum=kind.iterations)
        for name in ("detach_votes", "detach_couplings", "learned_priors"):
            check_bool(getattr(self, name), name)
        if self.pose_bias is not None and (isinstance(self.pose_bias, bool)
                                           or not isinstance(self.pose_bias, (int, float))):
            raise ValueError(f"pose_bias must be a number or None, got {self.pose_bias!r}")
        check_nonnegative(self.prior_std, "prior_std")
        check_positive_int(self.kernels, "kernels")
        check_positive_int(self.lstm_hidden, "lstm_hidden")
        for name in ("compatibility_hidden", "activation_hidden"):
            object.__setattr__(self, name, _hidden(getattr(self, name), name))
        if self.prior_std > 0 and not self.learned_priors:
            raise ValueError(f"prior_std must be 0 without learned priors (learned_priors=True), "
                             f"got {self.prior_std!r}")
        options = self.options.items() if isinstance(self.options, Mapping) else self.options
        try:
            options = tuple(sorted((str(k), v) for k, v in options))
        except (TypeError, ValueError) as err:
            raise ValueError(f"options must be a mapping of option names to values, got {self.options!r}") from err
        object.__setattr__(self, "options", options)
        own = {f.name for f in fields(self)} - {"kind", "iterations", "options"}
        unused = [f.name for f in fields(self) if f.name in own and f.name not in kind.options
                  and getattr(self, f.name) != f.default]
        unused += [name for name, _ in options if name in own or name not in kind.options]
        if unused:
            readable = sorted(kind.options)
            raise ValueError(f"{', '.join(unused)} do(es) not apply to a {self.kind!r} router "
                             f"(its options: {readable or 'none'})")

    def option(self, name: str) -> Any:
        """The value of the option ``name``: the spec's field of that name, else its ``options`` entry, else the kind's
        registered default. Chapter 08."""
        if name in {f.name for f in fields(self)}:
            return getattr(self, name)
        given = dict(self.options)
        if name in given:
            return given[name]
        defaults = router_kind(self.kind).options
        if name not in defaults:
            raise ValueError(f"a {self.kind!r} router has no option {name!r} (its options: {sorted(defaults)})")
        return defaults[name]

    def __call__(self, layer: LayerInfo) -> Router:
        """The router this spec asks for, for a routing layer (:class:`~capsule_lab.routing.LayerInfo`): the
        registered kind's builder. A router with parameters draws them here (the connectionist router's LSTM, the
        priors with ``prior_std`` > 0), so build it where the network's initialisation expects it."""
        if not isinstance(layer, LayerInfo):
            raise ValueError(f"layer must be a capsule_lab.routing.LayerInfo, got {type(layer).__name__}")
        router = router_kind(self.kind).build(layer, self)
        if not isinstance(router, Router):
            raise ValueError(f"the {self.kind!r} kind's builder must return a capsule_lab.routing.Router, "
                             f"got {type(router).__name__}")
        return router

    def build(self, inputs: int, outputs: int, dim: int,
              activation: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> Router:
        """The router for a layer routing ``inputs`` capsules to ``outputs`` capsules of dimension ``dim`` (one layer,
        fully connected): ``self(LayerInfo(inputs, outputs, dim, activation))``. ``activation``: the network's squash
        for the routers that squash (None: each router's own default)."""
        return self(LayerInfo(inputs, outputs, dim, activation))

    def per_layer(self, sizes: Mapping[str, tuple]) -> tuple:
        """One spec per routing layer: this spec with each option in ``sizes`` that its kind reads replaced by the
        layer's value (``sizes = {option: (value of layer 0, value of layer 1, …)}``, every tuple as long); options
        the kind does not read are left out. A network's per-layer sizes from a paper
        (:meth:`~capsule_lab.models.ConvCapsNetConfig.router_specs`). Chapter 07."""
        lengths = {len(v) for v in sizes.values()}
        if len(lengths) != 1:
            raise ValueError(f"sizes must give every option one value per layer, got lengths {sorted(lengths)}")
        read = router_kind(self.kind).options
        return tuple(replace(self, **{k: v[layer] for k, v in sizes.items() if k in read})
                     for layer in range(lengths.pop()))


def check_router_spec(spec, name: str = "router"):
    """The router spec a network config holds: ``spec`` if it is a :class:`RouterSpec`, a tuple of them (one per
    routing layer) or None (a config whose network was given router modules); a registered kind's name (or a tuple of
    names) read as its spec; else ``ValueError``. Every network config checks its ``router`` with it and keeps what it
    returns. Chapter 02."""
    def one(item):
        return RouterSpec(item) if isinstance(item, str) else item

    if isinstance(spec, (tuple, list)) and spec and all(isinstance(s, (str, RouterSpec)) for s in spec):
        return tuple(one(s) for s in spec)
    if spec is not None and not isinstance(spec, (str, RouterSpec)):
        raise ValueError(f"{name} must be a capsule_lab.routing.RouterSpec (or a kind's name), a tuple of them (one per "
                         f"routing layer) or None, got {type(spec).__name__}")
    return one(spec)
