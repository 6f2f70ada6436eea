"""capsule_lab — the package behind the capsule-lab course: capsule networks taught through their routing.

The binding top-level API (see the course design): :func:`squash`, :func:`squash_exp`, :func:`margin_loss`;
routing lives in :mod:`capsule_lab.routing`.
"""

from .capsules import PrimaryCapsules, conv_to_capsules, margin_loss, squash, squash_exp

__version__ = "0.1.0"
__all__ = ["squash", "squash_exp", "margin_loss", "conv_to_capsules", "PrimaryCapsules", "__version__"]
