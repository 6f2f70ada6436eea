"""capsule_lab — the package behind the capsule-lab course: capsule networks taught through their routing.

The binding top-level API (see the course design): :func:`squash`, :func:`squash_exp`, :func:`margin_loss`;
routing lives in :mod:`capsule_lab.routing`.

The package map — module, the concept it holds, the chapters that teach or use it. Each module imports only
from modules above it in this table (``tests/test_package_map.py`` checks it):

=========================  ========================================================================  ==========
module                     concept                                                                   chapters
=========================  ========================================================================  ==========
``_checks``                argument checks with one wording, naming the expected shape               (all)
``capsules``               capsules as vectors: ``squash``, ``squash_exp``, ``capsule_lengths``,     01–04
                           ``margin_loss``, primary capsules
``routing``                how votes become capsules: every router an ``nn.Module`` called as        02–08
                           ``router(votes, activations=None) → RoutingResult`` (``router``);
                           Sabour's loop (``procedure``), the general procedure (``generic``),
                           Sabour's routers (``routers``), routing without the votes
                           (``vote_free``), similarity, connectionist and self-attention routing,
                           polarisation, the router spec a config holds (``spec``)
``layers``                 a fully-connected capsule layer: it forms the votes (plain or             02, 04, 07
                           normalised), any router routes them
``ladder``                 the ladder capsule layer: the K most active capsules and their code       06
                           vector, weights built from the code, regression back to the kept
                           capsules, the γ-activation
``models``                 one model family per module, each owning its loss, its routers and what   01–08
                           its output offers the measures (``network``): ``capsnet`` (Sabour et
                           al.), ``deep_capsnet`` (Mitterreiter et al.), ``ladder_capsnet`` (Jeong
                           et al.), ``conv_capsnet`` (Faria's convolutional capsule network)
``data``                   MNIST / Fashion-MNIST (offline or torchvision), subsets, shifts, affine   01–08
                           test sets
``modes``                  ``eval_mode``: evaluation mode inside a ``with``                          02–05
``training``               the ``Schedule``, one training step (``train_step``), ``fit``, one pass   02–08
                           over a dataset (``outputs``) and its accuracy (``evaluate``),
                           checkpoints
``study``                  what the experiments share: networks that start the same, shipped         04–08
                           results
``profiles``               quick and full settings, per chapter too; seeds, threads, device          01–08
``tolerance``              a number from training checked within its stated band (``expect``)        02–07
``rem``                    routing entropy minimisation: quantised couplings, parse-tree             05
                           dictionaries, their entropy; magnitude pruning; the coupling saliency
``stats``                  the tests every verdict uses: paired t over seeds, exact and pooled        04–08
                           McNemar over test images, equivalence (TOST), Holm's correction, the
                           binomial standard error; a claim's verdict (supported, contradicted,
                           undecided), untestable at a ceiling or before convergence
``tables``                 result tables that are tables: an HTML table with caption and headers in  02–08
                           Jupyter and the book, aligned text in a terminal, CSV
``claims``                 a paper's claim (quoted, with source and setting) or the course's          04–08
                           question, what differs besides the variable, and its verdict on a
                           study's records (paired t over seeds, Holm, undecided when untestable)
``gradients``              the gradient through routing by hand: the two terms, the coupling         03
                           Jacobian
``diagnostics``            what a trained network's capsules do: activation and routing statistics,  04
                           dead capsules, per-capsule gradient norms
``depth_study``            chapter 04's experiment: deep CapsNets trained over depths × routings,    04
                           and the paper's claims tested on the shipped runs
``saliency``               Grad-CAM (Captum) beside the coupling saliency, and how much they agree   05
``rem_study``              chapter 05's experiment: a CapsNet trained dense (Q) and pruned (REM)     05
``ladder_study``           chapter 06's experiment: L-CapsNets over K against a CapsNet on expanded  06
                           and affine digits, and the paper's claims tested on the longer run
``learned_routing_study``  chapter 07's experiment: one network trained with dynamic, similarity     07
                           and connectionist routing on MNIST and Fashion-MNIST
``figures``                one module per chapter's pictures, taking plain data, never a study:      01–08
                           ``routing``, ``capsnet``, ``gradients``, ``dead_capsules``, ``depth``,
                           ``pruning``, ``dictionary``, ``parse_trees``, ``saliency``,
                           ``geometry``, ``ladder``, ``step_times``, ``learned_routing``,
                           ``router_bench``; the style (a colour-blind-safe palette, a marker and a
                           line style per series) and each figure's alt text and caption
                           (``attach_description``)
``widgets``                interactive explorers by concept: ``routing``, ``poses``, ``gradients``,  02–07
                           ``parse_tree``, ``rem``, ``ladder``, ``learned_routing``; each has a
                           static figure for the book
``cost``                   what routing and training cost: how fast routing runs against the         02, 06–08
                           machine's FLOP bound, a training step timed, peak memory
``router_bench``           chapter 08's bench: every router on one backbone, trained and measured    08
                           the same way (clean and affine accuracy, time, memory, parse-tree
                           entropy, dyr, dead capsules), records cached; McNemar's test
``bench_claims``           chapter 08's verdict table: each paper's claim about routing the bench    08
                           can test, the course's own questions labelled so, on the bench's records
``smoke``                  the full profile proven without a GPU: every chapter's study, its         08
                           networks at the papers' size and its data pipeline, two training steps
                           and one evaluation batch each
``epoch_timing``           one timed epoch of each chapter's main network at the full profile:       08
                           seconds per epoch, peak GPU memory, test accuracy after it (on a GPU)
``grading``                exercises: tasks per chapter, checks, notebook grading, ``assign``        exercises
``cli``                    the ``capsule-lab`` command: ``data``, ``assign``, ``grade``,             —
                           ``grade-merge``, ``captions``, ``bench``, ``smoke``
=========================  ========================================================================  ==========

``routing``, ``models``, ``figures``, ``widgets`` and ``grading`` are packages (one module per concept
inside). The book's API reference (``book/api/``) follows this order, one page per group.
"""

from .capsules import PrimaryCapsules, capsule_lengths, conv_to_capsules, margin_loss, squash, squash_exp

__version__ = "0.1.0"
__all__ = ["squash", "squash_exp", "capsule_lengths", "margin_loss", "conv_to_capsules", "PrimaryCapsules",
           "__version__"]
