"""Self-attention routing (Mazzia et al., 2021, Efficient-CapsNet): routing in one pass, without iterations.

Taught in chapter 08 (the routing bench's modern baseline). Mazzia, Salvetti and Chiaberge's Efficient-CapsNet
replaces the iterations of dynamic routing by one self-attention pass. For votes û ``(B, I, J, D)``, each vote is
scored by its agreement with all the votes for the same output capsule j, the row sum of the self-attention
matrix A_j = Û_j Û_jᵀ / √D of output j:

    b_ij = Σ_k ⟨û_{j|i}, û_{j|k}⟩ / √D = ⟨û_{j|i}, Σ_k û_{j|k}⟩ / √D
    c_ij = softmax_j(b_ij)                   (each input's couplings sum to 1 over the outputs, as Sabour's)
    s_j  = Σ_i (c_ij + β_ij) û_{j|i}         (β: a learned bias (I, J), added after the softmax)
    v_j  = squash_exp(s_j)                   (Efficient-CapsNet's squash, (1 − e^{−‖s‖}) s/‖s‖)

The second form of b_ij is one contraction over the votes, O(B·I·J·D) like one iteration of dynamic routing;
the I×I attention matrix (O(B·I²·J·D)) is never formed. There are no iterations. This is the fully-connected
form of the routing (Efficient-CapsNet's FCCaps layer): every input capsule votes for every output capsule.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

from .._checks import check_positive_int, check_tensor
from ..capsules import squash_exp
from .registry import register_router
from .router import Router, RoutingResult, check_votes

__all__ = ["self_attention_routing", "SelfAttentionRouter"]


def _check_activation(activation) -> None:
    if not callable(activation):
        raise ValueError(f"activation must be a function of s (B, J, D), got {activation!r}")


def self_attention_routing(votes: torch.Tensor, bias: Optional[torch.Tensor] = None,
                           activation: Callable[[torch.Tensor], torch.Tensor] = squash_exp) -> RoutingResult:
    """Efficient-CapsNet's self-attention routing (Mazzia et al., 2021) of votes ``(B, I, J, D)``, in one pass.

    ``b_ij = Σ_k ⟨û_{j|i}, û_{j|k}⟩ / √D``, computed as ``⟨û_{j|i}, Σ_k û_{j|k}⟩ / √D`` (O(B·I·J·D), the I×I
    attention matrix is never formed); ``c_ij = softmax_j(b_ij) + β_ij`` with ``bias`` β ``(I, J)`` (None: 0);
    ``v_j = activation(Σ_i c_ij û_{j|i})``, default ``squash_exp``. The fully-connected form (FCCaps).

    Returns a :class:`~capsule_lab.routing.RoutingResult`: ``poses`` ``(B, J, D)``, ``activations`` their lengths,
    ``couplings`` ``(B, I, J)`` the c_ij + β_ij that produced them (the softmax alone when there is no bias),
    ``logits`` the b_ij.

    Chapter 08 (the routing bench's modern baseline).
    """
    check_votes(votes)
    _, I, J, D = votes.shape
    if bias is not None:
        check_tensor(bias, "bias", f"(I, J) = ({I}, {J})", sizes=(I, J), floating=True)
    _check_activation(activation)
    consensus = votes.sum(dim=1, keepdim=True)                          # Σ_k û_{j|k}: (B, 1, J, D)
    logits = (votes * consensus).sum(dim=-1) / math.sqrt(D)            # b_ij: (B, I, J)
    couplings = torch.softmax(logits, dim=2)                           # over the outputs j
    if bias is not None:
        couplings = couplings + bias.to(votes.dtype)                   # after the softmax
    poses = activation(torch.einsum("bij,bijd->bjd", couplings, votes))
    return RoutingResult(poses, poses.norm(dim=-1), couplings, logits)


class SelfAttentionRouter(Router):
    """Efficient-CapsNet's self-attention routing (Mazzia et al., 2021) with a learned bias β ``(inputs, outputs)``.

    ``router(votes, activations=None) → RoutingResult`` (the input activations are ignored) runs
    :func:`self_attention_routing` (``b_ij = ⟨û_{j|i}, Σ_k û_{j|k}⟩/√D``, ``c_ij = softmax_j(b_ij) + β_ij``,
    ``v_j = activation(Σ_i c_ij û_{j|i})``) in one pass. β starts at zero and trains with the network that holds
    the router. The fully-connected form (Efficient-CapsNet's FCCaps layer).

    Chapter 08 (the routing bench's modern baseline).
    """

    def __init__(self, inputs: int, outputs: int, activation: Callable[[torch.Tensor], torch.Tensor] = squash_exp):
        super().__init__()
        check_positive_int(inputs, "inputs")
        check_positive_int(outputs, "outputs")
        _check_activation(activation)
        self.activation = activation
        self.bias = nn.Parameter(torch.zeros(inputs, outputs))

    def forward(self, votes: torch.Tensor, activations: Optional[torch.Tensor] = None, *,
                history: bool = False) -> RoutingResult:
        """Route ``votes`` ``(B, I, J, D)``, with (I, J) = (inputs, outputs)."""
        check_votes(votes)
        I, J = self.bias.shape
        if tuple(votes.shape[1:3]) != (I, J):
            raise ValueError(f"votes must have shape (B, I, J, D) with (I, J) = ({I}, {J}), "
                             f"got {tuple(votes.shape)}")
        result = self_attention_routing(votes, self.bias, self.activation)
        return result._replace(history=(result,)) if history else result

    @classmethod
    def from_layer(cls, layer, spec) -> "SelfAttentionRouter":
        """The router of a ``"self-attention"`` :class:`~capsule_lab.routing.RouterSpec`: a bias β of the layer's
        (inputs, outputs), the network's squash."""
        return cls(layer.inputs, layer.outputs, **layer.squash_options())

    def extra_repr(self) -> str:
        name = getattr(self.activation, "__name__", repr(self.activation))
        return f"inputs={self.bias.shape[0]}, outputs={self.bias.shape[1]}, activation={name}"


register_router("self-attention", SelfAttentionRouter,
                summary="Efficient-CapsNet's self-attention routing in one pass (chapter 08)")
