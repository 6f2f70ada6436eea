"""What a router is: an ``nn.Module`` called as ``router(votes, activations=None) → RoutingResult``.

Taught in chapter 02 (the protocol every later chapter's router follows). A capsule layer forms the votes û_{j|i}
``(B, I, J, D)`` (plain ``W u``, Faria's normalised votes, 4×4 pose matrices: :mod:`capsule_lab.layers`,
:mod:`capsule_lab.models.conv_capsnet`) and the input activations a_i ``(B, I)``; a router turns them into output
capsules. Every router of the course — dynamic, detached, scaled, uniform and pose-biased routing
(:mod:`~capsule_lab.routing.routers`), similarity and connectionist routing
(:mod:`~capsule_lab.routing.similarity`, :mod:`~capsule_lab.routing.connectionist`) and self-attention routing
(:mod:`~capsule_lab.routing.self_attention`) — is a :class:`Router`, so every one of them runs in every capsule
layer and network of the package. A router takes what it needs (iterations, sizes, options) at construction; its
parameters, if it has any, train with the network that holds it.

What every router returns, :class:`RoutingResult`:

    poses        v_j    (B, J, D)   the output capsules
    activations  a_j    (B, J)      how present each output is (Sabour: ‖v_j‖; Faria: a learned function)
    couplings    c_ij   (B, I, J)   the couplings that produced the poses
    logits       b_ij   (B, I, J)   the logits whose normalisation gives the couplings
    history             one RoutingResult per iteration, when asked for with ``history=True``
    state               a learned router's state after the last iteration (the LSTM's), else None

Two things a router says about its result, as class (or instance) attributes, so that a layer never has to ask
which router it holds:

- ``normalize_over``: the axis the couplings sum to 1 over — ``"outputs"`` (Σ_j c_ij = 1, each input shares one
  unit of vote among the outputs: Sabour's) or ``"inputs"`` (Σ_i c_ij = 1, each output distributes one unit of
  attention over its inputs: Faria's);
- ``activations_are_lengths``: True when each activation is its pose's length (a vector capsule), False when the
  router computes the two apart (Faria's routers: a weighted mean of the votes and a sigmoid).

Two things a router can do besides routing, each with a default that fits a vector-capsule router:

- :meth:`Router.from_layer` builds the router for a layer (:class:`~capsule_lab.routing.LayerInfo`) under a
  :class:`~capsule_lab.routing.RouterSpec`: what a registered kind (:func:`~capsule_lab.routing.register_router`) is
  built with, so the router runs in every network by its name;
- :meth:`Router.combine_votes` is the routing step that turns couplings into outputs, by default
  ``v_j = squash(Σ_i c_ij û_{j|i})``: what quantised inference (chapter 05) runs again with the couplings quantised,
  for any router.
"""

from __future__ import annotations

import inspect
from abc import ABCMeta, abstractmethod
from typing import Any, NamedTuple, Optional

import torch
from torch import nn

from .._checks import check_one_of, check_positive_int, check_tensor, shape_error
from ..capsules import squash

__all__ = ["RoutingResult", "Router", "NORMALIZATIONS", "check_votes", "check_activations", "check_iterations",
           "check_logits", "check_normalize_over"]

#: The softmax axis of couplings ``(B, I, J)`` for each of the two conventions, by name.
NORMALIZATIONS = {"inputs": 1, "outputs": 2}


class RoutingResult(NamedTuple):
    """What every router returns (see the module docstring for the shapes). Chapter 02."""

    poses: torch.Tensor
    activations: torch.Tensor
    couplings: torch.Tensor
    logits: torch.Tensor
    history: tuple = ()
    state: Any = None


class Router(nn.Module, metaclass=ABCMeta):
    """A router: an ``nn.Module`` called as ``router(votes, activations=None, *, history=False) → RoutingResult``.

    ``votes`` ``(B, I, J, D)``; ``activations`` ``(B, I)`` the input capsules' activations (a router that has no
    use for them, like Sabour's, ignores them; ``None``: all ones); ``history=True`` also returns every iteration's
    result in ``.history``. Subclasses define :meth:`forward` and, where they differ from Sabour's, the class
    attributes ``normalize_over`` and ``activations_are_lengths`` (module docstring). A router that can compute
    the same result for a fully-connected layer from its inputs and weights, without forming the votes, says so by
    returning it from :meth:`route_weights`.

    Chapter 02.
    """

    #: the axis the couplings sum to 1 over, "outputs" (Σ_j c_ij = 1, Sabour) or "inputs" (Σ_i c_ij = 1, Faria)
    normalize_over = "outputs"
    #: True when each output's activation is its pose's length; False when the router computes them apart
    activations_are_lengths = True

    @abstractmethod
    def forward(self, votes: torch.Tensor, activations: Optional[torch.Tensor] = None, *,
                history: bool = False) -> RoutingResult:
        """Route ``votes`` ``(B, I, J, D)`` given the input ``activations`` ``(B, I)``; every router defines it (a
        class that does not is abstract: instantiating it raises ``TypeError``)."""

    def route_weights(self, u: torch.Tensor, weight: torch.Tensor) -> Optional[RoutingResult]:
        """The result of routing the votes ``W_ij u_i`` of a fully-connected layer (u ``(B, I, D_in)``, weight
        ``(I, J, D, D_in)``) computed without forming them, or None when this router has no such form (the
        default). :class:`~capsule_lab.layers.dense.CapsuleLayer` asks for it when it is told to (``vote_free=True``)
        and the router has no forward hook (a hook, quantised inference's say, sees the votes)."""
        return None

    def sabour_form(self) -> Optional[tuple]:
        """This router as an instance of Sabour's Algorithm 1, ``(iterations, prior_logits, activation, pose_bias,
        term_2)`` (``term_2``: whether the gradient flows through the couplings), or None when it is not one (the
        default): what chapter 03's gradient terms by hand
        (:func:`capsule_lab.measures.gradients.capsnet_gradient_terms`) need to know. Chapter 03."""
        return None

    @property
    def hooked(self) -> bool:
        """True while a forward hook watches this router (it must then be called on its votes). Chapter 05."""
        return bool(self._forward_hooks or self._forward_pre_hooks)

    @classmethod
    def from_layer(cls, layer, spec) -> "Router":
        """This router for a routing layer (:class:`~capsule_lab.routing.LayerInfo`) under ``spec`` (a
        :class:`~capsule_lab.routing.RouterSpec` of its registered kind): how
        :func:`~capsule_lab.routing.register_router` builds a router registered by its class. The default is ``cls()``,
        given the network's squash as ``activation=`` when the constructor takes one; a router that needs the layer's
        sizes or the spec's options overrides it. Chapter 08."""
        takes_activation = "activation" in inspect.signature(cls.__init__).parameters
        return cls(**(layer.squash_options() if takes_activation else {}))

    def combine_votes(self, votes: torch.Tensor, couplings: torch.Tensor, activations: Optional[torch.Tensor] = None,
                state: Any = None) -> RoutingResult:
        """The routing step from couplings ``(B, I, J)`` to outputs: the vector capsules ``v_j = f(Σ_i c_ij û_{j|i})``,
        activations ``‖v_j‖``, with ``f`` the router's ``activation`` attribute where it has a function of s there, else
        :func:`~capsule_lab.capsules.squash`. A router whose last step differs (a pose bias, a weighted mean, a learned
        activation) overrides it. Quantised inference (:func:`capsule_lab.measures.parse_trees.quantized_inference`)
        calls it with the router's last couplings quantised, ``state`` the router's result's. Chapter 05."""
        check_votes(votes)
        activation = getattr(self, "activation", None)
        if not callable(activation) or inspect.ismethod(activation):
            activation = squash
        poses = activation(torch.einsum("bij,bijd->bjd", couplings.to(votes.dtype), votes))
        return RoutingResult(poses, poses.norm(dim=-1), couplings, torch.zeros_like(couplings))


def check_votes(votes) -> None:
    """Raise ``ValueError`` unless ``votes`` is a floating tensor of shape ``(B, I, J, D)``. Chapter 02."""
    check_tensor(votes, "votes", "(B, I, J, D)", ndim=4, nonempty=True, floating=True)


def check_activations(activations, votes: torch.Tensor, name: str = "activations") -> torch.Tensor:
    """The input activations ``(B, I)`` for ``votes`` ``(B, I, J, D)``, finite and ≥ 0, in the votes' dtype; all
    ones when None; else ``ValueError``. Chapter 07."""
    B, I = votes.shape[:2]
    if activations is None:
        return votes.new_ones(B, I)
    check_tensor(activations, name, f"(B, I) = ({B}, {I})", sizes=(B, I), floating=True)
    if bool((activations < 0).any()) or not bool(torch.isfinite(activations).all()):
        raise ValueError(f"{name} must be finite and >= 0 (capsule lengths)")
    return activations.to(votes.dtype)


def check_iterations(iterations, minimum: int = 1) -> int:
    """Raise ``ValueError`` unless ``iterations`` is an integer ≥ ``minimum`` (not a bool). Chapter 02."""
    return check_positive_int(iterations, "iterations", minimum)


def check_logits(logits, B: int, I: int, J: int, like: torch.Tensor, name: str) -> torch.Tensor:
    """Logits of shape (B, I, J) or (I, J), in ``like``'s dtype, expanded to (B, I, J); else ``ValueError``.

    Chapter 02.
    """
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) not in {(B, I, J), (I, J)}:
        raise shape_error(name, f"(B, I, J) = ({B}, {I}, {J}) or (I, J)", logits)
    return logits.to(like.dtype).expand(B, I, J)


def check_normalize_over(normalize_over) -> int:
    """The softmax axis of couplings ``(B, I, J)`` for ``"inputs"`` (1) or ``"outputs"`` (2); else ``ValueError``.

    Chapter 07.
    """
    return NORMALIZATIONS[check_one_of(normalize_over, tuple(NORMALIZATIONS), "normalize_over")]
