"""Where a primary capsule sits on the image: the centre of its receptive field.

Taught in chapter 05 (a class's parse tree taken back to the image, ``chapters/05_rem.ipynb``) and chapter 06 (the
capsules the ladder's pruning layer keeps, ``chapters/06_ladder.ipynb``). The primary capsules lie on a g × g grid
(:class:`capsule_lab.capsules.PrimaryCapsules`); the two convolutions before them fix where on the image each grid
position looks (:func:`receptive_field_centres`), for any network with that backbone
(:class:`~capsule_lab.models.capsnet.BackboneConfig`).
"""

from __future__ import annotations

import numpy as np

from ..models.capsnet import BackboneConfig

__all__ = ["check_backbone", "receptive_field_centres"]


def check_backbone(config) -> BackboneConfig:
    """``config`` if it is a :class:`~capsule_lab.models.capsnet.BackboneConfig` (a
    :class:`~capsule_lab.models.CapsNetConfig` or a :class:`~capsule_lab.models.LadderCapsNetConfig`), else
    ValueError. Chapters 05 and 06."""
    if not isinstance(config, BackboneConfig):
        raise ValueError(f"config must be a capsule_lab.models.CapsNetConfig or LadderCapsNetConfig (a "
                         f"BackboneConfig), got {type(config).__name__}")
    return config


def receptive_field_centres(config: BackboneConfig) -> np.ndarray:
    """The pixel coordinate (row or column, from 0) of the centre of the receptive field of every position of a
    primary-capsule grid: ``m · s + (k_conv − 1) / 2 + (k_primary − 1) / 2`` for m = 0 … g − 1 (the first
    convolution has stride 1, the primary capsules' convolution stride s). ``config``: any
    :class:`~capsule_lab.models.capsnet.BackboneConfig` — a :class:`~capsule_lab.models.CapsNetConfig` or a
    :class:`~capsule_lab.models.LadderCapsNetConfig`. For the MNIST CapsNet (9, 9, stride 2): 8, 10, …, 18;
    for the ladder network on 40×40 images: 8, 10, …, 30. Chapters 05 and 06."""
    config = check_backbone(config)
    m = np.arange(config.primary_grid)
    return m * config.primary_stride + (config.conv_kernel - 1) / 2 + (config.primary_kernel - 1) / 2
