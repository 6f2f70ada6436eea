"""The binding names of the course design's ``capsule_lab.ladder`` (chapter 06): the ladder layer lives in
:mod:`capsule_lab.layers.ladder`, its activity measures in :mod:`capsule_lab.measures.activity`.
"""

from .layers.ladder import (GAMMA, EPSILON, PrunedCapsules, ConstructedWeights, LadderResult, capsule_activity,
                            code_vector, top_k_capsules, solve_gamma, table1_widths, propagate, regress,
                            regressed_capsules, ladder_activation, ladder_poses, ladder_loss, CodeMLP, CodeWeights,
                            PruningLayer, LadderLayer)
from .measures.activity import most_active_couplings, activity_profile

__all__ = ["GAMMA", "EPSILON", "PrunedCapsules", "ConstructedWeights", "LadderResult", "capsule_activity",
           "code_vector", "top_k_capsules", "solve_gamma", "table1_widths", "propagate", "regress",
           "regressed_capsules", "ladder_activation", "ladder_poses", "ladder_loss", "CodeMLP", "CodeWeights",
           "PruningLayer", "LadderLayer", "most_active_couplings", "activity_profile"]
