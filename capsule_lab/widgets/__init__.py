"""Interactive widgets (ipywidgets), one module per concept they explore; each comes with a ``*_figure``
function that draws exactly what the widget shows at its default values, for the static book.

- :mod:`~capsule_lab.widgets.routing` — the routing explorer: iterations and agreement scale (chapter 02);
- :mod:`~capsule_lab.widgets.poses` — the pose explorer: one pose dimension perturbed (chapter 02);
- :mod:`~capsule_lab.widgets.gradients` — the gradient-terms explorer (chapter 03);
- :mod:`~capsule_lab.widgets.parse_tree` — the parse-tree explorer: depth × routing (chapter 04);
- :mod:`~capsule_lab.widgets.rem` — the pruning explorer: a class's parse tree along REM's pruned run (chapter 05);
- :mod:`~capsule_lab.widgets.ladder` — the ladder explorer: the kept capsules and their regression, per K and
  image (chapter 06);
- :mod:`~capsule_lab.widgets.learned_routing` — the similarity-routing explorer: λ1, λ2, the kernel's width and
  the iterations for one output capsule's votes (chapter 07);
- :mod:`~capsule_lab.widgets.figure_output` — how a widget shows its figure.

The widgets are thin: the maths lives in :mod:`capsule_lab.routing` and :mod:`capsule_lab.measures.gradients`, the
pictures in :mod:`capsule_lab.figures`; like the figures, they take plain data, never a study's objects (the pruning
explorer a run as :func:`capsule_lab.studies.rem_pictures.pruning_explorer_run` gives it). They can be built without a
display (e.g. in tests); the figure of the current state is kept in ``.figure`` and the numbers behind it in ``.result``
/ ``.summary`` / ``.reconstruction``. Every name is re-exported here.
"""

from .gradients import GradientTermsExplorer, gradient_terms_explorer, gradient_terms_figure
from .ladder import LadderExplorer, ladder_explorer
from .learned_routing import (LAMBDA_VALUES, LENGTH_SCALES, SimilarityRoutingExplorer, similarity_routing_explorer,
                              similarity_routing_explorer_figure, similarity_routing_result)
from .parse_tree import ParseTreeExplorer, parse_tree_explorer
from .poses import SABOUR_PERTURBATIONS, PoseExplorer, pose_explorer, pose_explorer_figure, pose_sweep
from .rem import PruningExplorer, pruning_explorer
from .routing import RoutingExplorer, routing_explorer, routing_explorer_figure, toy_votes

__all__ = [
    "toy_votes", "routing_explorer_figure", "routing_explorer", "RoutingExplorer",
    "SABOUR_PERTURBATIONS", "pose_sweep", "pose_explorer_figure", "pose_explorer", "PoseExplorer",
    "gradient_terms_figure", "gradient_terms_explorer", "GradientTermsExplorer",
    "parse_tree_explorer", "ParseTreeExplorer",
    "pruning_explorer", "PruningExplorer",
    "ladder_explorer", "LadderExplorer",
    "LAMBDA_VALUES", "LENGTH_SCALES", "similarity_routing_result", "similarity_routing_explorer_figure",
    "similarity_routing_explorer", "SimilarityRoutingExplorer",
]
