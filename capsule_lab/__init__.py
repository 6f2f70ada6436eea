"""capsule_lab — the package behind the capsule-lab course: capsule networks taught through their routing.

The binding top-level API (see the course design): :func:`squash`, :func:`squash_exp`, :func:`margin_loss`;
routing lives in :mod:`capsule_lab.routing`.

The package map: its layers, each a folder (or a module of the core), the concept it holds and the chapters that
teach or use it. Each imports only from the entries above it in this table (``tests/test_package_map.py`` checks it,
``tests/test_import_graph.py`` that no module imports itself round a circle):

==================  ================================================================================  ==========
entry               concept                                                                           chapters
==================  ================================================================================  ==========
``_checks``         argument checks with one wording, naming the expected shape                       (all)
``capsules``        *the core*: capsules as vectors — ``squash``, ``squash_exp``, ``margin_loss``,     01–04
                    primary capsules
``routing``         *the core*: how votes become capsules — every router an ``nn.Module``              02–08
                    ``router(votes, activations=None) → RoutingResult``; Sabour's loop, the general
                    procedure, every router of the course, one registry of router kinds, the spec a
                    config holds
``layers``          *the core*: the votes, formed once (plain, normalised, 4×4 matrices); the dense,   02–07
                    convolutional and ladder capsule layers
``models``          *the core*: one network family per module, each owning its loss, its routers       01–08
                    (one seam: ``router=``), its parse trees and its stages
``data``            *the core*: MNIST and Fashion-MNIST offline or online; shifts, affine maps,        01–08
                    40×40 digits
``training``        *the core*: the ``Schedule``, a training step, ``fit``, one pass over a dataset     02–08
                    (``outputs``), ``eval_mode``, checkpoints
``measures``        what any trained capsule network does: parse trees (one pass, one entropy          03–08
                    ceiling, quantised inference for any router), pruning, capsule statistics and
                    dead capsules, activity, the gradient terms, saliency, cost
``evidence``        the tests every verdict uses, a paper's claim and its verdict, result tables        02–08
``figures``         one module per chapter's pictures, taking plain data (no study), the style and      01–08
                    each figure's alt text and caption
``widgets``         interactive explorers by concept, each with a static figure for the book            02–07
``studies``         one chapter's experiment each, owning its quick, gpu and full ``SETTINGS``,       03–08
                    runs, records and claims; the bench a sub-package
``course``          the course's machinery: profiles and a chapter's setup, tolerance bands, the        01–08
                    smoke run, epoch timing, a training's cost, checkpoints, cluster jobs
``grading``         exercises: task content (``tasks``), the checking engine (``engine``), notebooks    exercises
                    graded and reported (``notebooks``)
``cli``             the ``capsule-lab`` command: ``data``, ``assign``, ``grade``, ``grade-merge``,       —
                    ``captions``, ``bench``, ``smoke``,
                    ``cluster``
``rem``             the course design's binding names ``capsule_lab.rem.*``, re-exported from           05
                    ``measures``
``diagnostics``     the course design's binding names ``capsule_lab.diagnostics.*``, re-exported        04
``ladder``          the course design's binding names ``capsule_lab.ladder.*``, re-exported             06
==================  ================================================================================  ==========

Inside a folder, one module per concept (each folder's ``__init__`` lists them). The book's API reference
(``book/api/``) follows this order, one page per group.
"""

from .capsules import PrimaryCapsules, capsule_lengths, conv_to_capsules, margin_loss, squash, squash_exp

__version__ = "0.1.0"
__all__ = ["squash", "squash_exp", "capsule_lengths", "margin_loss", "conv_to_capsules", "PrimaryCapsules",
           "__version__"]
