"""Routing: how lower capsules send their votes to higher capsules (chapter 02; its gradients: chapter 03).

- :mod:`~capsule_lab.routing.procedure` — the one routing procedure: :func:`routing_step`,
  :func:`agreement`, :func:`dynamic_routing` (Sabour's Algorithm 1 as a loop over ``routing_step``) and
  :func:`uniform_routing`;
- :mod:`~capsule_lab.routing.routers` — routers, objects called as ``router(votes) → RoutingResult``:
  :class:`DynamicRouter`, :class:`DetachedRouter`, :class:`ScaledRouter`, :class:`UniformRouter`;
- :mod:`~capsule_lab.routing.vote_free` — :func:`vote_free_routing` and :class:`VoteFreeRouter`, called as
  ``router(u, weight)``: dynamic routing of a fully-connected layer without forming the votes;
- :mod:`~capsule_lab.routing.self_attention` — :func:`self_attention_routing` and :class:`SelfAttentionRouter`:
  Efficient-CapsNet's routing in one pass, the routing bench's modern baseline (chapter 08).

Shapes: votes ``(B, I, J, D)``, logits and couplings ``(B, I, J)``, poses ``(B, J, D)``.
"""

from .procedure import (RoutingResult, Router, agreement, check_votes, dynamic_routing, routing_step,
                        softmax_backward, uniform_routing)
from .routers import DetachedRouter, DynamicRouter, ScaledRouter, UniformRouter
from .self_attention import SelfAttentionRouter, self_attention_routing
from .vote_free import VoteFreeRouter, vote_free_routing

__all__ = [
    "RoutingResult",
    "check_votes",
    "agreement",
    "routing_step",
    "dynamic_routing",
    "uniform_routing",
    "vote_free_routing",
    "self_attention_routing",
    "softmax_backward",
    "Router",
    "DynamicRouter",
    "DetachedRouter",
    "ScaledRouter",
    "UniformRouter",
    "VoteFreeRouter",
    "SelfAttentionRouter",
]
