"""The binding names of the course design's ``capsule_lab.rem`` (chapter 05): REM's parse-tree measures and pruning
live in :mod:`capsule_lab.measures.parse_trees` and :mod:`capsule_lab.measures.pruning`.
"""

from .measures.parse_trees import (quantize, quantized_inference, entropy_ceiling, parse_tree_keys,
                                   parse_tree_dictionary, keys_per_class, dictionary_entropy, routing_entropy,
                                   class_parse_tree, coupling_saliency)
from .measures.pruning import (prunable_parameters, global_magnitude_prune, sparsity, make_pruning_permanent,
                               snip_prune, lobster_step)

__all__ = ["quantize", "quantized_inference", "entropy_ceiling", "parse_tree_keys", "parse_tree_dictionary",
           "keys_per_class", "dictionary_entropy", "routing_entropy", "class_parse_tree", "coupling_saliency",
           "prunable_parameters", "global_magnitude_prune", "sparsity", "make_pruning_permanent", "snip_prune",
           "lobster_step"]
