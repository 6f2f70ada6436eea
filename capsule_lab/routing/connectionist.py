"""Connectionist routing (Faria, §4.2): one LSTM cell shared by every (input, output) pair learns to route.

Taught in chapter 07 (``chapters/07_learned_routing.ipynb``). One LSTM cell, shared by every pair (i, j), reads
per pair ``x_ij = [μ_j, a_i, v_ij, c_ij]`` (2D + 2 numbers) each iteration; its hidden and cell states (zero at
first) are carried across the iterations. A network f_c of the hidden state gives the logits ``r_ij = f_c(h_ij)``
(softmax over i), and after the last iteration a network f_a of the cell states combined over the inputs gives

    a_j = σ(f_a(mean_i cell_ij))                                                    (eq. 14)

(``combine="sum"``: Σ_i cell_ij). The router is an instance of the generic procedure
(:func:`~capsule_lab.routing.generic_routing`): :meth:`ConnectionistRouter.compatibility` and
:meth:`ConnectionistRouter.activation` are its two functions, the pose the weighted mean. Sizes: :data:`TABLE2`,
the paper's Table 2.

**Where the paper is silent, this module chooses:**

- *LSTM input*: the paper's text feeds "the compatibility probabilities" c_ij of the previous iteration (c⁰ =
  uniform at the first), which is what the public code does; the previous r_ij would be the unnormalised logits,
  which do not exist before the first iteration. This module feeds c_ij.
- *Table 2*: of its two columns of hidden sizes, the first is the compatibility network f_c (hidden state →
  r_ij), the second the activation network f_a (cell states → a_j): the order the text introduces them in, and the
  public code's ``compatibility_layers=[64, 64], activation_layers=[124, 124]`` for the class layer. Hidden layers
  use ReLU; f_c ends in a linear unit, f_a in a sigmoid.
- *The cell states combined*: averaged over the inputs i by default (``combine="mean"``); the public code sums
  them (``combine="sum"``). The two differ by the factor 1/I, which f_a's first layer could absorb, but at
  PyTorch's default initialisation the sum over I = 144 (slim CapsNet) to 1152 inputs drives the output sigmoid
  into saturation: a slim CapsNet trained on 4000 offline digits (2 epochs, batch 64, Adam 3e-3, seed 0) reached
  10 % test accuracy with the sum (every a_j near 0, margin loss 0.81 = 0.9²) and 95.6 % with the mean (the same
  setup: dynamic routing 97.1 %, similarity routing 90.6 %).

Shapes (H the LSTM's hidden size): votes ``(B, I, J, D)``, activations ``(B, I)``, the LSTM's state (h, cell),
each ``(B, I, J, H)``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from .._checks import check_one_of, check_positive_int, shape_error
from .generic import generic_routing, weighted_mean_pose
from .registry import register_router
from .router import Router, RoutingResult, check_activations, check_normalize_over, check_votes

__all__ = ["TABLE2", "ConnectionistRouter"]

#: The paper's Table 2 per layer of its network, as (hidden sizes of the compatibility network f_c, hidden sizes
#: of the activation network f_a, the LSTM's hidden and cell size).
TABLE2 = {"conv_caps_1": ((), (), 16), "conv_caps_2": ((32, 32), (64, 64), 16),
          "class_caps": ((64, 64), (124, 124), 16)}


def _mlp(sizes: Sequence[int], out_activation: Optional[nn.Module] = None) -> nn.Sequential:
    """Linear layers of the given sizes, ReLU between them, then ``out_activation`` (if any)."""
    layers = []
    for k, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if k < len(sizes) - 2:
            layers.append(nn.ReLU())
    if out_activation is not None:
        layers.append(out_activation)
    return nn.Sequential(*layers)


def _check_hidden(sizes, name: str) -> tuple:
    sizes = tuple(sizes)
    for s in sizes:
        check_positive_int(s, f"{name} entries")
    return sizes


class ConnectionistRouter(Router):
    """Connectionist routing (§4.2): one LSTM cell shared by every pair (i, j), a compatibility network of its
    hidden state and an activation network of its cell states.

    Per iteration and pair, the cell reads ``[μ_j, a_i, v_ij, c_ij]`` (2D + 2 numbers; c_ij the couplings of
    the previous iteration, uniform at the first) and updates (h_ij, cell_ij), zero at first and carried
    across the iterations; ``r_ij = f_c(h_ij)``, c = softmax over i; after the last iteration
    ``a_j = σ(f_a(mean_i cell_ij))`` (eq. 14; the public code's sum with ``combine="sum"``).

    Args:
        pose_dim: D, the dimension of the votes and poses.
        hidden: the LSTM's hidden and cell size (Table 2: 16).
        compatibility_hidden: hidden sizes of f_c (Table 2, class layer: (64, 64); :data:`TABLE2`).
        activation_hidden: hidden sizes of f_a (Table 2, class layer: (124, 124)).
        iterations: T (the paper: 3).
        normalize_over: ``"inputs"`` (the paper) or ``"outputs"``.
        combine: how the cell states of the I inputs are combined for f_a, ``"mean"`` (default) or ``"sum"``
            (the public code; it saturates f_a's sigmoid when I is large, see the module's choices).

    ``router(votes, activations=None)`` → :class:`~capsule_lab.routing.RoutingResult` whose ``state`` is
    (h, cell), each ``(B, I, J, H)``; poses and activations apart (a layer of vector capsules scales each pose to
    its activation).

    Chapter 07.
    """

    activations_are_lengths = False

    def __init__(self, pose_dim: int, hidden: int = 16, compatibility_hidden: Sequence[int] = (64, 64),
                 activation_hidden: Sequence[int] = (124, 124), iterations: int = 3,
                 normalize_over: str = "inputs", combine: str = "mean"):
        super().__init__()
        check_positive_int(iterations, "iterations", minimum=0)
        check_normalize_over(normalize_over)
        self.iterations, self.normalize_over = iterations, normalize_over
        check_positive_int(pose_dim, "pose_dim")
        self.combine = check_one_of(combine, ("mean", "sum"), "combine")
        check_positive_int(hidden, "hidden")
        compatibility_hidden = _check_hidden(compatibility_hidden, "compatibility_hidden")
        activation_hidden = _check_hidden(activation_hidden, "activation_hidden")
        self.pose_dim, self.hidden = pose_dim, hidden
        self.cell = nn.LSTMCell(2 * pose_dim + 2, hidden)
        self.compatibility_net = _mlp((hidden, *compatibility_hidden, 1))
        self.activation_net = _mlp((hidden, *activation_hidden, 1), nn.Sigmoid())

    def initial_state(self, votes: torch.Tensor) -> tuple:
        """Zero hidden and cell states ``(B, I, J, H)`` for ``votes`` ``(B, I, J, D)``."""
        zeros = votes.new_zeros(*votes.shape[:3], self.hidden)
        return zeros, zeros

    def compatibility(self, state, logits, couplings, votes, poses, activations):
        """One LSTM step for every pair; returns the new logits ``r_ij = f_c(h_ij)`` and the state (h, cell)."""
        B, I, J, D = votes.shape
        if state is None:
            state = self.initial_state(votes)
        h, cell = state
        x = torch.cat([poses[:, None].expand(B, I, J, D), activations[:, :, None, None].expand(B, I, J, 1),
                       votes, couplings[..., None]], dim=-1)
        h, cell = self.cell(x.reshape(-1, 2 * D + 2), (h.reshape(-1, self.hidden), cell.reshape(-1, self.hidden)))
        h, cell = h.view(B, I, J, self.hidden), cell.view(B, I, J, self.hidden)
        return self.compatibility_net(h).squeeze(-1), (h, cell)

    def activation(self, state, couplings, votes, poses, activations) -> torch.Tensor:
        """``a_j = σ(f_a(mean_i cell_ij))`` (or the sum) ``(B, J)``; zero cell states when no iteration ran."""
        if state is None:
            state = self.initial_state(votes)
        cells = state[1].mean(dim=1) if self.combine == "mean" else state[1].sum(dim=1)
        return self.activation_net(cells).squeeze(-1)

    def forward(self, votes: torch.Tensor, activations: Optional[torch.Tensor] = None, *,
                history: bool = False) -> RoutingResult:
        """Route ``votes`` ``(B, I, J, D)`` with input ``activations`` ``(B, I)`` (``None``: ones)."""
        check_votes(votes)
        if votes.shape[-1] != self.pose_dim:
            raise shape_error("votes", f"(B, I, J, D) with D = pose_dim = {self.pose_dim}", votes)
        return generic_routing(votes, activations, self.compatibility, self.activation, self.iterations,
                               normalize_over=self.normalize_over, history=history)

    @classmethod
    def from_layer(cls, layer, spec) -> "ConnectionistRouter":
        """The router of a ``"connectionist"`` :class:`~capsule_lab.routing.RouterSpec` for the layer's pose
        dimension: T = its iterations, its LSTM and f_c, f_a sizes."""
        return cls(layer.dim, hidden=spec.lstm_hidden, compatibility_hidden=spec.compatibility_hidden,
                   activation_hidden=spec.activation_hidden, iterations=spec.iterations)

    def combine_votes(self, votes: torch.Tensor, couplings: torch.Tensor, activations: Optional[torch.Tensor] = None,
                      state=None) -> RoutingResult:
        """The last step of Algorithm 1 with this router: the weighted mean μ_j of the votes and ``a_j = σ(f_a(·))``
        of the LSTM's cell states ``state`` (the routed result's; zeros when None)."""
        check_votes(votes)
        activations = check_activations(activations, votes)
        poses = weighted_mean_pose(couplings, votes)
        return RoutingResult(poses, self.activation(state, couplings, votes, poses, activations), couplings,
                             torch.zeros_like(couplings), state=state)

    def extra_repr(self) -> str:
        return f"pose_dim={self.pose_dim}, hidden={self.hidden}, iterations={self.iterations}, " \
               f"normalize_over={self.normalize_over!r}, combine={self.combine!r}"


register_router("connectionist", ConnectionistRouter, iterations=0,
                options={"lstm_hidden": 16, "compatibility_hidden": (64, 64), "activation_hidden": (124, 124)},
                summary="Faria's connectionist routing, an LSTM that learns to route (chapter 07)")
