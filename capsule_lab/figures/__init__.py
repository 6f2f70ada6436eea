"""Figures of the course, one module per chapter's pictures (or one idea they share). Pure matplotlib: every function
returns the :class:`matplotlib.figure.Figure` (or draws on a given ``Axes``), never calls ``show``, and checks its
inputs. They take plain data — numbers, lists, dicts, arrays, tensors, and the networks and configs of the core —
never a study's objects: a study hands them its numbers (e.g. :func:`capsule_lab.studies.rem_pictures.epoch_curve`).

- :mod:`~capsule_lab.figures.routing` — couplings per iteration and the 2-D routing toy (chapter 02);
- :mod:`~capsule_lab.figures.capsnet` — training curves, reconstructions, pose sweeps of a CapsNet (chapter 02);
- :mod:`~capsule_lab.figures.gradients` — the unrolled routing graph and the two gradient terms (chapter 03);
- :mod:`~capsule_lab.figures.dead_capsules` — which capsules die and why: the fuzzy parse tree of a deep CapsNet
  with its dead capsules, the per-layer statistics, the starved capsule's gradients, a search's dead rates
  (chapter 04);
- :mod:`~capsule_lab.figures.depth` — measures against the number of routing layers, the activation correlation
  per layer (chapter 04);
- :mod:`~capsule_lab.figures.pruning` — REM's runs epoch by epoch: entropy and accuracy while pruning, entropy
  against accuracy, the pruning explorer's picture (chapter 05);
- :mod:`~capsule_lab.figures.dictionary` — the parse-tree dictionary: entropy against K, keys per class, the
  couplings against the quantisation's bin edges (chapter 05);
- :mod:`~capsule_lab.figures.parse_trees` — a class's parse tree as a graph, backtracked to the image (chapter 05);
- :mod:`~capsule_lab.figures.saliency` — saliency maps over their images (chapter 05);
- :mod:`~capsule_lab.figures.geometry` — where a primary capsule sits on the image (chapters 05–06);
- :mod:`~capsule_lab.figures.ladder` — the ladder capsule network: lengths and couplings of the most active
  capsules, activity by rank per K, the kept capsules on the image and what the ladder layer regresses
  (chapter 06);
- :mod:`~capsule_lab.figures.step_times` — seconds per training step of L-CapsNets and CapsNets, the ladder paper's
  Table 3 (chapter 06);
- :mod:`~capsule_lab.figures.learned_routing` — similarity routing as clustering: one output capsule's votes,
  couplings and pose per (λ1, λ2), the paper's Figure 2 (chapter 07);
- :mod:`~capsule_lab.figures.router_bench` — every router's accuracy against its cost, one bar chart per
  measure (chapter 08);
- :mod:`~capsule_lab.figures.style` — the maximum figure width, the colour-blind-safe palette, a marker and a line
  style per series;
- :mod:`~capsule_lab.figures.descriptions` — alt text and numbered captions written from a figure's data
  (:func:`~capsule_lab.figures.descriptions.attach_description`) and ``show``.

Every name is re-exported here: ``from capsule_lab.figures import plot_couplings`` works. Importing the package
sets the course's figure style (:func:`capsule_lab.figures.style.use`) for every figure drawn afterwards, the
package's and those a notebook cell draws.
"""

from .capsnet import plot_history, plot_pose_sweep, plot_reconstructions
from .dead_capsules import (LAYER_STATISTICS, ParseTreeSummary, capsule_gradients_figure, dead_rate_search_figure,
                            explorer_routings, format_layer_table, layer_statistics_table, parse_tree_explorer_figure,
                            parse_tree_figure, parse_tree_summary, plot_parse_tree)
from .depth import activation_correlation_figure, depth_figure
from .dictionary import (coupling_histogram_figure, entropy_vs_levels_figure, keys_per_class_figure,
                         plot_entropy_vs_levels, plot_keys_per_class)
from .geometry import check_backbone, receptive_field_centres
from .gradients import (draw_routing_graph, plot_gradient_history, plot_gradient_terms, plot_routing_graphs,
                        routing_graph_edges)
from .ladder import (activity_profile_description, activity_profile_figure, coupling_length_description,
                     coupling_length_figure, draw_ladder_explorer, kept_capsule_positions, ladder_explorer_description,
                     ladder_explorer_figure, ladder_explorer_result, plot_activity_profile, plot_coupling_length,
                     plot_kept_capsules)
from .learned_routing import (DEFAULT_PAIRS, SimilarityClusters, clustered_votes, plot_similarity_routing,
                              similarity_clusters, similarity_grid_figure, similarity_routing_words)
from .parse_trees import (check_parse_trees, class_couplings, parse_tree_graph, parse_tree_graph_figure,
                          parse_tree_words, plot_backtracked_image)
from .pruning import (check_epoch_curve, entropy_accuracy_figure, plot_entropy_accuracy, plot_pruning_curve,
                      pruning_curve_figure, pruning_explorer_figure, step_summary)
from .router_bench import (MEASURE_LABELS, accuracy_time_description, accuracy_time_figure, measures_description,
                           measures_figure, plot_accuracy_time, plot_measure)
from .routing import draw_coupling_bars, draw_toy, plot_couplings, plot_routing_state, plot_toy_routing
from .saliency import OBJECT_LEVEL, saliency_figure
from .step_times import PAPER_TABLE3, plot_step_times, step_time_description, step_time_figure
from .descriptions import Description, attach_description, show
from .style import LINESTYLES, MARKERS, MAX_FIGURE_WIDTH, OUTPUT_COLORS, PALETTE, series, use

use()

__all__ = [
    "MAX_FIGURE_WIDTH", "OUTPUT_COLORS", "PALETTE", "MARKERS", "LINESTYLES", "series",
    "Description", "attach_description", "show",
    "MEASURE_LABELS", "plot_accuracy_time", "accuracy_time_figure", "plot_measure", "measures_figure",
    "accuracy_time_description", "measures_description",
    "plot_couplings", "draw_toy", "draw_coupling_bars", "plot_routing_state", "plot_toy_routing",
    "plot_history", "plot_reconstructions", "plot_pose_sweep",
    "routing_graph_edges", "draw_routing_graph", "plot_routing_graphs", "plot_gradient_terms",
    "plot_gradient_history",
    "ParseTreeSummary", "parse_tree_summary", "plot_parse_tree", "parse_tree_figure", "format_layer_table",
    "explorer_routings", "parse_tree_explorer_figure", "LAYER_STATISTICS", "layer_statistics_table",
    "capsule_gradients_figure", "dead_rate_search_figure", "depth_figure", "activation_correlation_figure",
    "check_epoch_curve", "plot_pruning_curve", "pruning_curve_figure", "plot_entropy_accuracy",
    "entropy_accuracy_figure", "step_summary", "pruning_explorer_figure",
    "plot_entropy_vs_levels", "entropy_vs_levels_figure", "plot_keys_per_class", "keys_per_class_figure",
    "coupling_histogram_figure",
    "check_parse_trees", "class_couplings", "parse_tree_graph", "plot_backtracked_image", "parse_tree_words",
    "parse_tree_graph_figure",
    "OBJECT_LEVEL", "saliency_figure",
    "check_backbone", "receptive_field_centres",
    "plot_coupling_length", "coupling_length_figure", "plot_activity_profile", "activity_profile_figure",
    "kept_capsule_positions", "plot_kept_capsules", "ladder_explorer_result", "ladder_explorer_figure",
    "draw_ladder_explorer", "coupling_length_description", "activity_profile_description",
    "ladder_explorer_description",
    "PAPER_TABLE3", "plot_step_times", "step_time_figure", "step_time_description",
    "DEFAULT_PAIRS", "SimilarityClusters", "clustered_votes", "similarity_clusters", "plot_similarity_routing",
    "similarity_grid_figure", "similarity_routing_words",
]
