"""The binding names of the course design's ``capsule_lab.diagnostics`` (chapter 04): capsule statistics live in
:mod:`capsule_lab.measures.capsule_stats`.
"""

from .measures.capsule_stats import (ACTIVE_EPS, DEAD_MEAN_EPS, DEAD_STD_EPS, active_mask, dead_mask, activation_stats,
                                     perfect_routing_std, routing_dynamics_per_capsule, routing_dynamics,
                                     activation_correlation, CapsuleRecord, collect_capsules, layer_table,
                                     GradientTracker, mean_and_sd)

__all__ = ["ACTIVE_EPS", "DEAD_MEAN_EPS", "DEAD_STD_EPS", "active_mask", "dead_mask", "activation_stats",
           "perfect_routing_std", "routing_dynamics_per_capsule", "routing_dynamics", "activation_correlation",
           "CapsuleRecord", "collect_capsules", "layer_table", "GradientTracker", "mean_and_sd"]
