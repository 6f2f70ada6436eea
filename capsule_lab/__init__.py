"""capsule_lab — the package behind the capsule-lab course: capsule networks taught through their routing.

The binding top-level API (see the course design): :func:`squash`, :func:`squash_exp`, :func:`margin_loss`;
routing lives in :mod:`capsule_lab.routing`.

The package map — module, the concept it holds, the chapters that teach or use it. Each module imports only
from modules above it in this table (``tests/test_package_map.py`` checks it):

===================  ===========================================================================  ==========
module               concept                                                                      chapters
===================  ===========================================================================  ==========
``_checks``          argument checks with one wording, naming the expected shape                  (all)
``capsules``         capsules as vectors: ``squash``, ``squash_exp``, ``margin_loss``, primary    01–04
                     capsules
``routing``          how votes become couplings: ``procedure`` (the one routing procedure),       02–04
                     ``routers`` (router objects), ``vote_free`` (routing without the votes)
``layers``           a capsule layer: votes, then a pluggable router                              02, 04
``ladder``           the ladder capsule layer: the K most active capsules and their code vector,  06
                     weights built from the code, regression back to the kept capsules, the
                     γ-activation
``learned_routing``  learning the routing: the generic procedure of Algorithm 1, similarity       07
                     routing (KL-penalised clustering, its closed form), LSTM routing, layers
``models``           one model family per module: ``capsnet`` (Sabour et al.), ``deep_capsnet``   01–04, 06, 07
                     (Mitterreiter et al.), ``ladder_capsnet`` (Jeong et al.), ``conv_capsnet``
                     (Faria's convolutional capsule network)
``data``             MNIST / Fashion-MNIST (offline or torchvision), shifts, affine test sets     01–07
``modes``            ``eval_mode``: evaluation mode inside a ``with``                             02–05
``training``         ``fit``, ``evaluate``, checkpoints                                           02–07
``profiles``         quick and full settings, per chapter too; seeds, threads, device             01–08
``tolerance``        a number from training checked within its stated band (``expect``)           02–07
``gradients``        the gradient through routing by hand: the two terms, the coupling Jacobian   03
``diagnostics``      what a trained network's capsules do: activation and routing statistics,     04
                     dead capsules, per-capsule gradient norms
``depth_study``      chapter 04's experiment: deep CapsNets trained over depths × routings        04
``rem``              routing entropy minimisation: quantised couplings, parse-tree dictionaries,  05
                     their entropy; magnitude pruning; the coupling saliency
``saliency``         Grad-CAM (Captum) beside the coupling saliency, and how much they agree       05
``rem_study``        chapter 05's experiment: a CapsNet trained dense (Q) and pruned (REM)         05
``ladder_study``     chapter 06's experiment: L-CapsNets over K against a matched CapsNet on       06
                     expanded and affine digits
``routing_study``    chapter 07's experiment: one network trained with dynamic, similarity and    07
                     connectionist routing on MNIST and Fashion-MNIST
``figures``          pictures by concept: ``routing``, ``capsnet``, ``gradients``,                02–08
                     ``parse_tree``, ``rem``, ``ladder``, ``learned_routing``, ``router_bench``
``widgets``          interactive explorers by concept: ``routing``, ``poses``, ``gradients``,      02–07
                     ``parse_tree``, ``rem``, ``ladder``, ``learned_routing``; each has a static
                     figure for the book
``bench``            how fast routing runs, against the machine's FLOP bound; a training step     02, 06–08
                     per model
``router_bench``     chapter 08's bench: every router on one backbone, trained and measured the   08
                     same way (clean and affine accuracy, time, memory, parse-tree entropy,
                     dyr, dead capsules), records cached; McNemar's test
``smoke``            the full profile proven without a GPU: every chapter's networks at the       08
                     papers' size and its data pipeline, two training steps and one
                     evaluation batch each
``grading``          exercises: tasks per chapter, checks, notebook grading, ``assign``           exercises
``cli``              the ``capsule-lab`` command: ``data``, ``assign``, ``grade``, ``bench``,       —
                     ``smoke``
===================  ===========================================================================  ==========

``routing``, ``models``, ``figures``, ``widgets`` and ``grading`` are packages (one module per concept
inside). The book's API reference (``book/api/``) follows this order, one page per group.
"""

from .capsules import PrimaryCapsules, conv_to_capsules, margin_loss, squash, squash_exp

__version__ = "0.1.0"
__all__ = ["squash", "squash_exp", "margin_loss", "conv_to_capsules", "PrimaryCapsules", "__version__"]
