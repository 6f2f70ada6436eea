"""Routers: objects with one call signature, ``router(votes) → RoutingResult``, chosen explicitly.

Taught in chapter 02. A router takes what it needs (iterations, options) at construction and is then
called on votes ``(B, I, J, D)``; every dynamic router runs the one procedure,
:func:`~capsule_lab.routing.procedure.dynamic_routing`, with its options:

- :class:`DynamicRouter` — Sabour et al.'s Algorithm 1 (options: ``prior_logits``, ``detach_votes``,
  ``detach_couplings``, ``activation``, ``history``, ``agreement_scale``);
- :class:`DetachedRouter` — the same with the couplings constant in the backward pass (chapter 03);
- :class:`ScaledRouter` — the logit update scaled, ``b ← b + scale · ⟨û, v⟩`` (the routing explorer);
- :class:`UniformRouter` — no routing, c_ij = 1/J (chapters 03 and 04's baseline);
- :class:`~capsule_lab.routing.vote_free.VoteFreeRouter` — dynamic routing from ``(u, weight)``.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..capsules import squash
from .procedure import RoutingResult, Router, check_iterations, dynamic_routing, uniform_routing
from .vote_free import VoteFreeRouter

__all__ = ["Router", "DynamicRouter", "DetachedRouter", "ScaledRouter", "UniformRouter", "VoteFreeRouter"]


class DynamicRouter(Router):
    """Dynamic routing with ``iterations`` iterations and ``options``: ``router(votes) → RoutingResult``.

    ``options`` are the keywords of :func:`~capsule_lab.routing.procedure.dynamic_routing`
    (``prior_logits``, ``detach_votes``, ``detach_couplings``, ``activation``, ``history``,
    ``agreement_scale``); an unknown one raises ``ValueError``. Its vote-free form
    (:meth:`vote_free_form`) is the :class:`VoteFreeRouter` with the same options, when they allow one.

    Chapter 02.
    """

    OPTIONS = ("prior_logits", "detach_votes", "detach_couplings", "activation", "history", "agreement_scale")

    def __init__(self, iterations: int = 3, **options):
        check_iterations(iterations)
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown} for {type(self).__name__}: "
                             f"expected some of {list(self.OPTIONS)}")
        self.iterations = iterations
        self.options = dict(options)

    def __call__(self, votes: torch.Tensor) -> RoutingResult:
        return dynamic_routing(votes, self.iterations, **self.options)

    def vote_free_form(self):
        """The :class:`VoteFreeRouter` with the same result, or ``None`` with ``history`` or a scaled update."""
        if self.options.get("history") or self.options.get("agreement_scale", 1) != 1:
            return None
        options = {k: v for k, v in self.options.items() if k in VoteFreeRouter.OPTIONS}
        return VoteFreeRouter(self.iterations, **options)

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items() if k != "prior_logits")
        return f"{type(self).__name__}({self.iterations}{opts})"


class DetachedRouter(DynamicRouter):
    """Dynamic routing whose couplings are constants in the backward pass (``detach_couplings=True``).

    The forward pass equals :class:`DynamicRouter`'s; the gradient w.r.t. the votes is term 1 only.

    Chapter 03.
    """

    def __init__(self, iterations: int = 3, **options):
        DynamicRouter.__init__(self, iterations, **{**options, "detach_couplings": True})


class ScaledRouter(DynamicRouter):
    """Dynamic routing whose logit update is scaled: ``b_ij ← b_ij + scale · ⟨û_{j|i}, v_j⟩``.

    ``scale = 1`` is Algorithm 1; larger acts like a lower softmax temperature; 0 keeps the couplings at
    their start. Chapter 02 (the routing explorer).
    """

    def __init__(self, iterations: int = 3, scale: float = 1.0, **options):
        DynamicRouter.__init__(self, iterations, **{**options, "agreement_scale": scale})


class UniformRouter(Router):
    """No routing: ``router(votes)`` is :func:`~capsule_lab.routing.procedure.uniform_routing` (c_ij = 1/J).

    Chapter 02 (the baseline of chapters 03 and 04).
    """

    def __init__(self, activation: Callable[[torch.Tensor], torch.Tensor] = squash):
        if not callable(activation):
            raise ValueError(f"activation must be a function of s (B, J, D), got {activation!r}")
        self.activation = activation

    def __call__(self, votes: torch.Tensor) -> RoutingResult:
        return uniform_routing(votes, self.activation)

    def __repr__(self) -> str:
        return "UniformRouter()" if self.activation is squash else f"UniformRouter(activation={self.activation!r})"
