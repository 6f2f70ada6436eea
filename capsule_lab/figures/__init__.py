"""Figures of the course, one module per concept they draw. Pure matplotlib: every function returns the
:class:`matplotlib.figure.Figure` (or draws on a given ``Axes``), never calls ``show``, and checks its inputs.

- :mod:`~capsule_lab.figures.routing` — couplings per iteration and the 2-D routing toy (chapter 02);
- :mod:`~capsule_lab.figures.capsnet` — training curves, reconstructions, pose sweeps of a CapsNet (chapter 02);
- :mod:`~capsule_lab.figures.gradients` — the unrolled routing graph and the two gradient terms (chapter 03);
- :mod:`~capsule_lab.figures.parse_tree` — the fuzzy parse tree of a deep CapsNet (chapter 04);
- :mod:`~capsule_lab.figures.rem` — REM's entropy while pruning, keys per class, a class's parse tree
  backtracked to the image, saliency maps (chapter 05);
- :mod:`~capsule_lab.figures.ladder` — the ladder capsule network: lengths and couplings of the most active
  capsules, activity by rank per K, seconds per training step, the kept capsules on the image and what the
  ladder layer regresses (chapter 06);
- :mod:`~capsule_lab.figures.learned_routing` — similarity routing as clustering: one output capsule's votes,
  couplings and pose per (λ1, λ2), the paper's Figure 2 (chapter 07);
- :mod:`~capsule_lab.figures.router_bench` — every router's accuracy against its cost, one bar chart per
  measure (chapter 08);
- :mod:`~capsule_lab.figures.style` — the maximum figure width, the colour-blind-safe palette, a marker and a line
  style per series;
- :mod:`~capsule_lab.figures.descriptions` — alt text and numbered captions written from a figure's data.

Every name is re-exported here: ``from capsule_lab.figures import plot_couplings`` works. Importing the package
sets the course's figure style (:func:`capsule_lab.figures.style.use`) for every figure drawn afterwards, the
package's and those a notebook cell draws.
"""

from .capsnet import plot_history, plot_pose_sweep, plot_reconstructions
from .gradients import (draw_routing_graph, plot_gradient_history, plot_gradient_terms, plot_routing_graphs,
                        routing_graph_edges)
from .ladder import (PAPER_TABLE3, activity_profile_description, activity_profile_figure, coupling_length_description,
                     coupling_length_figure, kept_capsule_positions, ladder_explorer_description,
                     ladder_explorer_figure, ladder_explorer_result, plot_activity_profile, plot_coupling_length,
                     plot_kept_capsules, plot_step_times, step_time_description, step_time_figure)
from .learned_routing import (DEFAULT_PAIRS, SimilarityClusters, clustered_votes, plot_similarity_routing,
                              similarity_clusters, similarity_grid_figure, similarity_routing_words)
from .parse_tree import (LAYER_STATISTICS, ParseTreeSummary, activation_correlation_figure, capsule_gradients_figure,
                         dead_rate_search_figure, depth_figure, format_layer_table, layer_statistics_table,
                         parse_tree_explorer_figure, parse_tree_figure, parse_tree_summary, plot_parse_tree)
from .rem import (class_couplings, coupling_histogram_figure, entropy_accuracy_figure, entropy_vs_levels_figure,
                  keys_per_class_figure, parse_tree_graph, parse_tree_graph_figure, plot_backtracked_image,
                  plot_entropy_accuracy, plot_entropy_vs_levels, plot_keys_per_class, plot_pruning_curve,
                  pruning_curve_figure, pruning_explorer_figure, receptive_field_centres, saliency_figure, step_summary)
from .router_bench import (MEASURE_LABELS, accuracy_time_description, accuracy_time_figure, measures_description,
                           measures_figure, plot_accuracy_time, plot_measure)
from .routing import draw_coupling_bars, draw_toy, plot_couplings, plot_routing_state, plot_toy_routing
from .descriptions import Description, describe, show
from .style import LINESTYLES, MARKERS, MAX_FIGURE_WIDTH, OUTPUT_COLORS, PALETTE, series, use

use()

__all__ = [
    "MAX_FIGURE_WIDTH", "OUTPUT_COLORS", "PALETTE", "MARKERS", "LINESTYLES", "series",
    "Description", "describe", "show",
    "MEASURE_LABELS", "plot_accuracy_time", "accuracy_time_figure", "plot_measure", "measures_figure",
    "accuracy_time_description", "measures_description",
    "plot_couplings", "draw_toy", "draw_coupling_bars", "plot_routing_state", "plot_toy_routing",
    "plot_history", "plot_reconstructions", "plot_pose_sweep",
    "routing_graph_edges", "draw_routing_graph", "plot_routing_graphs", "plot_gradient_terms",
    "plot_gradient_history",
    "ParseTreeSummary", "parse_tree_summary", "plot_parse_tree", "parse_tree_figure", "format_layer_table",
    "parse_tree_explorer_figure", "LAYER_STATISTICS", "layer_statistics_table", "capsule_gradients_figure",
    "dead_rate_search_figure", "depth_figure", "activation_correlation_figure",
    "plot_pruning_curve", "pruning_curve_figure", "plot_entropy_accuracy", "entropy_accuracy_figure",
    "plot_entropy_vs_levels", "entropy_vs_levels_figure", "plot_keys_per_class", "keys_per_class_figure",
    "class_couplings", "receptive_field_centres", "parse_tree_graph", "plot_backtracked_image",
    "parse_tree_graph_figure", "saliency_figure", "step_summary", "pruning_explorer_figure",
    "PAPER_TABLE3", "plot_coupling_length", "coupling_length_figure", "plot_activity_profile",
    "activity_profile_figure", "plot_step_times", "step_time_figure", "kept_capsule_positions",
    "plot_kept_capsules", "ladder_explorer_result", "ladder_explorer_figure", "coupling_length_description",
    "activity_profile_description", "step_time_description", "ladder_explorer_description",
    "DEFAULT_PAIRS", "SimilarityClusters", "clustered_votes", "similarity_clusters", "plot_similarity_routing",
    "similarity_grid_figure", "similarity_routing_words", "coupling_histogram_figure",
]
