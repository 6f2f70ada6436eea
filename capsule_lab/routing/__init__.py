"""Routing: how lower capsules send their votes to higher capsules (chapters 02–08).

Every router is an ``nn.Module`` called as ``router(votes, activations=None) → RoutingResult`` (:class:`Router`),
so every one of them runs in every capsule layer and network of the package. One module per idea:

- :mod:`~capsule_lab.routing.router` — what a router is and what it returns: :class:`Router`,
  :class:`RoutingResult` (poses, activations, couplings, logits, history, state), the argument checks;
- :mod:`~capsule_lab.routing.procedure` — Sabour's Algorithm 1 as the readable loop chapter 02 teaches:
  :func:`routing_step`, :func:`agreement`, :func:`dynamic_routing`, :func:`uniform_routing` (chapter 02), and
  :func:`bin_centres`, the couplings of the REM paper's quantised inference (chapter 05);
- :mod:`~capsule_lab.routing.generic` — the general procedure, Faria's Algorithm 1 (:func:`generic_routing`),
  with Sabour's routing as one instance of it (:func:`dynamic_routing_generic`, equal to :func:`dynamic_routing`)
  (chapter 07);
- :mod:`~capsule_lab.routing.routers` — Sabour's routers: :class:`DynamicRouter` (with learned priors or REM's pose
  bias as options), :class:`DetachedRouter`, :class:`ScaledRouter`, :class:`UniformRouter` (chapters 02–05);
- :mod:`~capsule_lab.routing.vote_free` — :func:`vote_free_routing`: dynamic routing of a fully-connected layer
  without forming the votes (chapter 02);
- :mod:`~capsule_lab.routing.similarity` — similarity routing, routing as clustering: the kernel, the objective,
  its closed form and :class:`SimilarityRouter` (chapter 07);
- :mod:`~capsule_lab.routing.connectionist` — connectionist routing: :class:`ConnectionistRouter`, an LSTM that
  learns to route (chapter 07);
- :mod:`~capsule_lab.routing.self_attention` — :func:`self_attention_routing` and :class:`SelfAttentionRouter`:
  Efficient-CapsNet's routing in one pass, the routing bench's modern baseline (chapter 08);
- :mod:`~capsule_lab.routing.polarisation` — :func:`coupling_polarisation`: how far couplings are from uniform
  (chapters 03 and 07);
- :mod:`~capsule_lab.routing.registry` — one registry of routers: :func:`register_router` names a kind once, with a
  builder given what the layer knows (:class:`LayerInfo`), and every network, study, the bench, the smoke run and
  the command line build it by that name (chapter 08);
- :mod:`~capsule_lab.routing.spec` — :class:`RouterSpec`: the routing a network's config asks for, by registered
  kind and options, built into a router when the network is built.

Shapes: votes ``(B, I, J, D)``, input activations ``(B, I)``, logits and couplings ``(B, I, J)``, poses
``(B, J, D)``, output activations ``(B, J)``.
"""

from .router import (NORMALIZATIONS, Router, RoutingResult, check_activations, check_iterations, check_logits,
                     check_normalize_over, check_votes)
from .procedure import agreement, bin_centres, dynamic_routing, routing_step, softmax_backward, uniform_routing
from .generic import (dynamic_compatibility, dynamic_routing_generic, generic_routing, length_activation,
                      normalize_couplings, squashed_sum_pose, weighted_mean_pose)
from .registry import (LayerInfo, RouterKind, import_router, kind_module, register_router, router_kind,
                       router_kinds, unregister_router)
from .vote_free import vote_free_routing
from .routers import DetachedRouter, DynamicRouter, ScaledRouter, UniformRouter
from .similarity import (ACTIVATION_FLOOR, KERNELS, SimilarityRouter, closed_form_couplings, closed_form_logits,
                         gaussian_mixture_kernel, kernel_matrix, similarity_activation, similarity_objective,
                         similarity_routing)
from .connectionist import TABLE2, ConnectionistRouter
from .self_attention import SelfAttentionRouter, self_attention_routing
from .polarisation import coupling_polarisation
from .spec import ROUTER_KINDS, RouterSpec, check_router_spec

__all__ = [
    "RoutingResult", "Router", "NORMALIZATIONS", "check_votes", "check_activations", "check_iterations",
    "check_logits", "check_normalize_over",
    "agreement", "routing_step", "dynamic_routing", "uniform_routing", "softmax_backward", "bin_centres",
    "generic_routing", "normalize_couplings", "weighted_mean_pose", "dynamic_compatibility", "squashed_sum_pose",
    "length_activation", "dynamic_routing_generic",
    "vote_free_routing",
    "DynamicRouter", "DetachedRouter", "ScaledRouter", "UniformRouter",
    "ACTIVATION_FLOOR", "KERNELS", "gaussian_mixture_kernel", "kernel_matrix", "similarity_objective",
    "closed_form_logits", "closed_form_couplings", "similarity_activation", "similarity_routing",
    "SimilarityRouter",
    "TABLE2", "ConnectionistRouter",
    "self_attention_routing", "SelfAttentionRouter",
    "coupling_polarisation",
    "ROUTER_KINDS", "RouterSpec", "check_router_spec",
    "LayerInfo", "RouterKind", "register_router", "unregister_router", "router_kind", "router_kinds", "kind_module", "import_router",
]
