"""Capsule network models, one family per module.

- :mod:`~capsule_lab.models.capsnet`: Sabour et al.'s CapsNet (``CapsNetConfig.sabour()/.slim()``), its
  ``Decoder`` and ``capsnet_loss`` — chapters 01–02.
- :mod:`~capsule_lab.models.deep_capsnet`: Mitterreiter et al.'s deep fully-connected ``DeepCapsNet``
  (``DeepCapsNetConfig.quick()/.paper()``) — chapter 04.
- :mod:`~capsule_lab.models.ladder_capsnet`: Jeong et al.'s ladder capsule network ``LadderCapsNet``
  (``LadderCapsNetConfig.paper()/.slim()``) and ``ladder_capsnet_loss`` — chapter 06.
- :mod:`~capsule_lab.models.conv_capsnet`: Faria's convolutional capsule network ``ConvCapsNet`` with 4×4 pose
  matrices (``ConvCapsNetConfig.paper()/.slim()``, Table 1), its layers and ``paper_routers`` (Table 2) —
  chapter 07.

- :mod:`~capsule_lab.models.network`: ``CapsuleNetwork``, the base every family shares (its loss, its routers and
  routing parameters, what its output offers the parse-tree measures: ``ParseTrees``) — chapter 08.

Every name is re-exported here: ``from capsule_lab.models import CapsNet, DeepCapsNet`` works.
"""

from .network import CapsuleNetwork, ParseTrees, built_routers, layer_routers, network_config, routed_parse_trees
from .capsnet import CapsNet, CapsNetConfig, CapsNetOutput, Decoder, capsnet_loss
from .deep_capsnet import DeepCapsNet, DeepCapsNetConfig, DeepCapsNetOutput
from .ladder_capsnet import LadderCapsNet, LadderCapsNetConfig, LadderCapsNetOutput, ladder_capsnet_loss
from .conv_capsnet import PAPER_SIZES, ConvCapsNet, ConvCapsNetConfig, ConvCapsNetOutput, paper_routers
from ..layers.convolutional import ClassCapsuleLayer, ConvCapsuleLayer

__all__ = ["CapsuleNetwork", "ParseTrees", "routed_parse_trees", "network_config", "layer_routers", "built_routers",
           "CapsNetConfig", "CapsNetOutput", "CapsNet", "Decoder", "capsnet_loss",
           "DeepCapsNetConfig", "DeepCapsNetOutput", "DeepCapsNet",
           "LadderCapsNetConfig", "LadderCapsNetOutput", "LadderCapsNet", "ladder_capsnet_loss",
           "ConvCapsNetConfig", "ConvCapsNetOutput", "ConvCapsuleLayer", "ClassCapsuleLayer", "ConvCapsNet",
           "paper_routers", "PAPER_SIZES"]
