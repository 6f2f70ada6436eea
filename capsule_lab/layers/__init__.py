"""Capsule layers: how a layer forms its votes, and the layers that hand them to a router (chapters 02–07).

One module per idea:

- :mod:`~capsule_lab.layers.votes` — the votes, formed once for every layer: Sabour's ``W u``, Faria's normalised
  votes for vector capsules and for 4×4 pose matrices (eq. 1, one normalisation);
- :mod:`~capsule_lab.layers.dense` — :class:`CapsuleLayer`: fully-connected capsules, any router (chapter 02);
- :mod:`~capsule_lab.layers.convolutional` — Faria's convolutional and class capsule layers (chapter 07);
- :mod:`~capsule_lab.layers.ladder` — the ladder capsule layer: the K most active capsules and their code vector,
  weights built from the code, regression back to the kept capsules, the γ-activation (chapter 06).

Every name is re-exported here: ``from capsule_lab.layers import CapsuleLayer`` works.
"""


from .votes import (VOTES, VOTE_EPS, capsule_votes, normalized_weight, normalized_votes, POSE_SIZE, POSE_DIM,
                    matrix_votes)
from .dense import check_router, CapsuleLayer
from .convolutional import CapsuleGrid, ConvCapsuleLayer, ClassCapsuleLayer
from .ladder import (GAMMA, EPSILON, PrunedCapsules, ConstructedWeights, LadderResult, capsule_activity, code_vector,
                     top_k_capsules, solve_gamma, table1_widths, propagate, regress, regressed_capsules,
                     ladder_activation, ladder_poses, ladder_loss, CodeMLP, CodeWeights, PruningLayer, LadderLayer)

__all__ = ["VOTES", "VOTE_EPS", "capsule_votes", "normalized_weight", "normalized_votes", "POSE_SIZE", "POSE_DIM",
           "matrix_votes", "check_router", "CapsuleLayer", "CapsuleGrid", "ConvCapsuleLayer", "ClassCapsuleLayer",
           "GAMMA", "EPSILON", "PrunedCapsules", "ConstructedWeights", "LadderResult", "capsule_activity",
           "code_vector", "top_k_capsules", "solve_gamma", "table1_widths", "propagate", "regress",
           "regressed_capsules", "ladder_activation", "ladder_poses", "ladder_loss", "CodeMLP", "CodeWeights",
           "PruningLayer", "LadderLayer"]
