"""The convolutional capsule network of Faria's "Learning to compute inner consensus" (§5, Table 1). Chapter 07.

The paper trains one network with each routing procedure (dynamic, similarity, connectionist) "for three
iterations"; the network is "a slight modification of the smaller Capsule Network" of Hinton et al.'s matrix
capsules: every pose is a 4×4 matrix (stored flattened, 16 numbers), batch normalisation follows the first
convolution, and the votes are eq. 1's normalised matrix products. Three layers route:

    layer                          Table 1              28×28 MNIST          32×32 smallNORB crops
    conv + ReLU + BatchNorm        K=5, S=2, A=64       12×12×64             14×14×64
    primary capsules               K=1, S=1, B=8        12×12×8 (×16 + 1)    14×14×8
    conv capsules 1                K=3, S=2, C=16       5×5×16               6×6×16
    conv capsules 2                K=3, S=1, D=16       3×3×16               4×4×16
    class capsules                 flatten, O=classes   10 (144 inputs)      5 (256 inputs)

One class, two sizes:

    ConvCapsNetConfig.paper()   the table's sizes. On smallNORB (32×32, 1 channel, 5 classes) it has
                                86,408 parameters outside the routers — the paper's "86K parameters,
                                excluding the ones pertaining to the different routing procedures":
                                conv 1664 + BatchNorm 128 + primary 8320 + 520 + W₁ 18,432 + W₂ 36,864
                                + W_class 20,480. On 28×28 MNIST (10 classes): 88,968.
    ConvCapsNetConfig.slim()    the same layers at CPU size: A=16, B=4, C=D=8.

**Primary capsules.** From the normalised feature map x, at every position a 1×1 convolution gives B poses
(B × 16 numbers, each read row by row as a 4×4 matrix P_i) and another 1×1 convolution followed by a sigmoid
gives B activations a_i ∈ (0, 1).

**A convolutional capsule layer** (:class:`ConvCapsuleLayer`, kernel K, stride S, no padding). An output
position (y, x) sees the K·K·T input capsules of its receptive field, numbered i = (ky, kx, t) row by row:
I = K·K·T inputs, each with its own transformation matrix W_ij (4×4) for each output type j — the matrices
``(K, K, T, J, 4, 4)`` are shared over the positions, as a convolution's kernel is. The votes are eq. 1 with
a matrix product (not a 16×16 map of the flattened pose):

    v_ij = W_ij P_i / (‖W_ij‖_F + 10⁻⁶)                                               (:func:`matrix_votes`)

so ``‖v_ij‖_F ≤ ‖P_i‖_F``. Every output position is then routed on its own by the layer's router:

    router(votes (B·H'·W', I, J, 16), activations (B·H'·W', I)) → poses (…, J, 16), activations (…, J)

and the J routed capsules of each position form the layer's output grid ``(B, H', W', J, 16)``. The patches
are gathered with ``Tensor.unfold`` (no loop over positions); ``tests/test_conv_capsnet.py`` checks a layer
against a loop over positions that indexes each receptive field and routes it alone.

**The class capsule layer** (:class:`ClassCapsuleLayer`, "flatten, O=classes"): every capsule of the last
grid (H·W·D of them) is an input with its **own** W_ij ``(I, classes, 4, 4)``, not shared over positions
(this is what makes the paper's parameter count come out), routed to the classes. The class capsules'
activations are the scores (:class:`ConvCapsNetOutput`'s ``activations``, also ``scores``), and the loss
(:meth:`ConvCapsNet.loss`) is the margin loss on them; there is no decoder.

**Routers** (:func:`paper_routers`). Each of the three routing layers holds its own
:class:`~capsule_lab.routing.Router` — any of the course's — built from the config's
:class:`~capsule_lab.routing.RouterSpec` (Sabour's dynamic routing by default) or given as modules: with the
paper's sizes per layer for its two learned routers, :class:`~capsule_lab.routing.SimilarityRouter` (Q = 4, 4, 10
kernels, :data:`~capsule_lab.routing.similarity.KERNELS`; λ1, λ2 and θ per capsule type in the convolutional layers) and
:class:`~capsule_lab.routing.ConnectionistRouter` (Table 2's sizes, :data:`~capsule_lab.routing.connectionist.TABLE2`).
"Three iterations" is read in each procedure's own terms: Sabour's r = 3 for dynamic routing (3 poses, 2 logit updates)
and Algorithm 1's T = 3 for the learned routers (3 compatibility updates, 4 poses), as in chapter 07's experiment.

**Where the paper is silent, this module chooses:**

- *The pose a layer passes on* is the router's μ_j itself and its activation the router's a_j: matrix capsules
  carry the two separately (no rescaling of the pose by the activation, unlike the vector capsules of
  :class:`~capsule_lab.layers.dense.CapsuleLayer`). With dynamic routing a_j = ``‖μ_j‖`` and the input activations are
  ignored: the primary activations' 1×1 convolution then gets no gradient.
- *Primary poses* are the 1×1 convolution's outputs as they are (no squash): after the BatchNorm they have a
  moderate scale, and every later pose is a weighted mean (or a squashed sum) of normalised votes.
- *W's initialisation*: normal with standard deviation ``init_std`` (0.05, as
  :class:`~capsule_lab.layers.dense.CapsuleLayer`); its scale does not change the normalised votes.

Shapes (B batch, H × W a grid, T input types, J output types or classes, I inputs of one routing):
    images           (B, in_channels, image_size, image_size)
    a capsule grid   poses (B, H, W, T, 16), activations (B, H, W, T)
    conv votes       (B, H', W', I, J, 16), I = K·K·T
    class votes      (B, I, classes, 16), I = H·W·D
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import NamedTuple, Optional

import torch
from torch import nn

from .._checks import check_nonnegative, check_positive_int, check_tensor
from ..capsules import margin_loss
from ..layers.convolutional import ClassCapsuleLayer, ConvCapsuleLayer, _check_router
from ..layers.votes import POSE_DIM
from ..routing import KERNELS, TABLE2, LayerInfo, RouterSpec, check_router_spec
from .network import CapsuleNetwork, ParseTrees, layer_routers, network_config, routed_parse_trees

__all__ = ["ROUTING_LAYERS", "PAPER_SIZES", "ConvCapsNetConfig", "ConvCapsNetOutput", "ConvCapsNet", "paper_routers"]

#: The three routing layers, in order, by the names of :data:`~capsule_lab.routing.similarity.KERNELS` and
#: :data:`~capsule_lab.routing.connectionist.TABLE2`.
ROUTING_LAYERS = ("conv_caps_1", "conv_caps_2", "class_caps")

VOTE_EPS = 1e-6

#: The paper's router sizes per routing layer (conv capsules 1, conv capsules 2, class capsules), by the
#: :class:`~capsule_lab.routing.RouterSpec` option that holds them: Q kernels of the similarity router
#: (:data:`~capsule_lab.routing.similarity.KERNELS`) and Table 2's connectionist sizes
#: (:data:`~capsule_lab.routing.connectionist.TABLE2`). A spec takes those its kind reads
#: (:meth:`~capsule_lab.routing.RouterSpec.per_layer`).
PAPER_SIZES = {"kernels": tuple(KERNELS[layer] for layer in ROUTING_LAYERS),
               "compatibility_hidden": tuple(TABLE2[layer][0] for layer in ROUTING_LAYERS),
               "activation_hidden": tuple(TABLE2[layer][1] for layer in ROUTING_LAYERS),
               "lstm_hidden": tuple(TABLE2[layer][2] for layer in ROUTING_LAYERS)}


# ------------------------------------------------------------------------------------------------ sizes

def _grid_after(size: int, kernel: int, stride: int) -> int:
    """The side of a valid (unpadded) convolution's output: ⌊(size − K) / S⌋ + 1, or 0 if the kernel does not fit."""
    return (size - kernel) // stride + 1 if size >= kernel else 0


@dataclass(frozen=True)
class ConvCapsNetConfig:
    """Sizes of a :class:`ConvCapsNet` (Faria, Table 1). Chapter 07.

    ``conv_channels`` is Table 1's A, ``primary_types`` B, ``caps1_types`` C, ``caps2_types`` D; the kernels
    and strides are the table's (5/2, then 1×1 primary capsules, 3/2, 3/1). ``init_std``: the normal
    initialisation of the transformation matrices W. ``router``: the :class:`~capsule_lab.routing.RouterSpec` the
    three routing layers build their routers from, or a tuple of three (:meth:`router_specs` gives the paper's sizes
    per layer); None in the config of a network that was given router modules.
    """

    image_size: int = 28
    in_channels: int = 1
    classes: int = 10
    conv_channels: int = 64
    conv_kernel: int = 5
    conv_stride: int = 2
    primary_types: int = 8
    caps1_types: int = 16
    caps1_kernel: int = 3
    caps1_stride: int = 2
    caps2_types: int = 16
    caps2_kernel: int = 3
    caps2_stride: int = 1
    init_std: float = 0.05
    router: RouterSpec | None = RouterSpec()

    def __post_init__(self):
        for f in fields(self):
            if f.name not in ("classes", "init_std", "router"):
                check_positive_int(getattr(self, f.name), f.name)
        object.__setattr__(self, "router", check_router_spec(self.router))
        check_positive_int(self.classes, "classes", minimum=2)
        check_nonnegative(self.init_std, "init_std")
        size = self.image_size
        for name, kernel, stride in (("conv", self.conv_kernel, self.conv_stride),
                                     ("conv capsule layer 1", self.caps1_kernel, self.caps1_stride),
                                     ("conv capsule layer 2", self.caps2_kernel, self.caps2_stride)):
            if size < kernel:
                raise ValueError(f"image_size {self.image_size} is too small for the layers: the {name}'s "
                                 f"{kernel}×{kernel} kernel does not fit its {size}×{size} input")
            size = _grid_after(size, kernel, stride)

    @classmethod
    def paper(cls, image_size: int = 28, in_channels: int = 1, classes: int = 10, **changes) -> "ConvCapsNetConfig":
        """Table 1's network: A=64, B=8, C=D=16. ``paper(32, 1, 5)`` is the smallNORB model (86,408 parameters
        outside the routers), ``paper()`` the MNIST one (88,968)."""
        return replace(cls(image_size=image_size, in_channels=in_channels, classes=classes), **changes)

    @classmethod
    def slim(cls, image_size: int = 28, in_channels: int = 1, classes: int = 10, **changes) -> "ConvCapsNetConfig":
        """The same layers at CPU size: A=16 conv channels, B=4 primary types, C=D=8 capsule types."""
        return replace(cls(image_size=image_size, in_channels=in_channels, classes=classes, conv_channels=16,
                           primary_types=4, caps1_types=8, caps2_types=8), **changes)

    @property
    def grids(self) -> tuple:
        """The sides of the square grids of the primary capsules, conv capsules 1 and conv capsules 2, e.g.
        (12, 5, 3) on 28×28 with the paper's kernels and (14, 6, 4) on 32×32."""
        g0 = _grid_after(self.image_size, self.conv_kernel, self.conv_stride)
        g1 = _grid_after(g0, self.caps1_kernel, self.caps1_stride)
        return g0, g1, _grid_after(g1, self.caps2_kernel, self.caps2_stride)

    @property
    def primary_caps(self) -> int:
        """How many primary capsules there are, grid positions × types."""
        return self.grids[0] ** 2 * self.primary_types

    @property
    def class_inputs(self) -> int:
        """How many inputs the class capsule layer routes, every capsule of conv capsule layer 2."""
        return self.grids[2] ** 2 * self.caps2_types

    def router_layers(self) -> tuple:
        """What each of the three routing layers knows (:class:`~capsule_lab.routing.LayerInfo`): conv capsules 1
        and 2 route the K·K·T capsules of a receptive field to their capsule types at every position
        (convolutional), the class layer the flattened last grid to the classes; 16-D poses everywhere."""
        inputs = (self.caps1_kernel ** 2 * self.primary_types, self.caps2_kernel ** 2 * self.caps1_types,
                  self.class_inputs)
        outputs = (self.caps1_types, self.caps2_types, self.classes)
        return tuple(LayerInfo(i, j, POSE_DIM, None, l, len(ROUTING_LAYERS), convolutional=l < 2)
                     for l, (i, j) in enumerate(zip(inputs, outputs)))

    def network(self, router=None) -> "ConvCapsNet":
        """The network this config describes, ``ConvCapsNet(self, router)``."""
        return ConvCapsNet(self, router)

    @staticmethod
    def router_specs(kind, iterations: int = 3) -> tuple:
        """The paper's three router specs for ``kind`` (a registered kind's name, with ``iterations``, or a
        :class:`~capsule_lab.routing.RouterSpec`, its own iterations and options then): the spec with the paper's
        sizes per layer (:data:`PAPER_SIZES`) wherever its kind reads them — Q = 4, 4, 10 kernels for similarity
        routing, Table 2's sizes for connectionist routing — and the same spec in every layer otherwise."""
        spec = kind if isinstance(kind, RouterSpec) else RouterSpec(kind, iterations)
        return spec.per_layer(PAPER_SIZES)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------- votes

class ConvCapsNetOutput(NamedTuple):
    """What a :class:`ConvCapsNet` returns. Chapter 07.

    activations ``(B, classes)``: the class capsules' activations, the scores (also ``scores``).
    poses ``(B, classes, 16)``: the class capsules' poses. couplings ``(B, I, classes)``: the class layer's.
    primary ``(B, I0, 16)``: the primary poses, capsule (y, x, type) row by row; primary_activations
    ``(B, I0)``. layer_couplings: the couplings of conv capsule layer 1 ``(B, H1, W1, I1, C)``, conv capsule
    layer 2 ``(B, H2, W2, I2, D)`` and the class layer ``(B, I, classes)``. layer_activations: conv capsule layer
    1's ``(B, H1, W1, C)`` and layer 2's ``(B, H2, W2, D)``.
    """

    activations: torch.Tensor
    poses: torch.Tensor
    couplings: torch.Tensor
    primary: torch.Tensor
    primary_activations: torch.Tensor
    layer_couplings: tuple
    layer_activations: tuple

    @property
    def scores(self) -> torch.Tensor:
        """The class scores ``(B, classes)``: the class capsules' activations."""
        return self.activations


class ConvCapsNet(CapsuleNetwork):
    """Faria's convolutional capsule network (Table 1) with a router per routing layer. Chapter 07.

    ``ConvCapsNet(config, router=None)``: ``config`` a :class:`ConvCapsNetConfig` (default ``paper()``); the routers
    of conv capsule layer 1, conv capsule layer 2 and the class layer built from ``config.router`` or from ``router``,
    through the seam every network shares (:func:`~capsule_lab.models.network.layer_routers`): a registered kind's
    name, a :class:`~capsule_lab.routing.RouterSpec`, a factory ``f(layer) → Router``, or three of these or of
    :class:`~capsule_lab.routing.Router` modules (``pose_dim`` 16 if one declares it), e.g.
    ``ConvCapsNetConfig.router_specs("similarity")``, the paper's sizes per layer.
    ``forward(images)`` → :class:`ConvCapsNetOutput`.
    :meth:`~capsule_lab.models.network.CapsuleNetwork.routing_parameters` and :meth:`parameter_counts`
    separate the routers' parameters from the rest (the paper counts the network without them); :meth:`loss` is the
    margin loss on the class activations.
    """

    def __init__(self, config: Optional[ConvCapsNetConfig] = None, router=None):
        super().__init__()
        self.config, router = network_config(config if config is not None else ConvCapsNetConfig.paper(),
                                             ConvCapsNetConfig, router)
        c = self.config
        make = layer_routers(router, c.router_layers())
        routers = [make(l) for l in range(len(ROUTING_LAYERS))]        # the routers first, then the layers' weights
        for router, name, outputs in zip(routers, ROUTING_LAYERS, (c.caps1_types, c.caps2_types, c.classes)):
            _check_router(router, f"the {name} router", outputs)
        A, B, C, D = c.conv_channels, c.primary_types, c.caps1_types, c.caps2_types
        # conv → ReLU → BatchNorm (Table 1's first row)
        self.conv = nn.Conv2d(c.in_channels, A, c.conv_kernel, c.conv_stride)
        self.norm = nn.BatchNorm2d(A)
        # primary capsules: 1×1 convolutions to B poses of 16 numbers and B activations
        self.primary_poses = nn.Conv2d(A, B * POSE_DIM, 1)
        self.primary_activations = nn.Conv2d(A, B, 1)
        self.caps1 = ConvCapsuleLayer(B, C, c.caps1_kernel, c.caps1_stride, routers[0], c.init_std)
        self.caps2 = ConvCapsuleLayer(C, D, c.caps2_kernel, c.caps2_stride, routers[1], c.init_std)
        self.class_caps = ClassCapsuleLayer(c.class_inputs, c.classes, routers[2], c.init_std)

    def routers(self) -> tuple:
        """The three routers (conv capsule layer 1, conv capsule layer 2, class capsules)."""
        return self.caps1.router, self.caps2.router, self.class_caps.router

    def loss(self, out: ConvCapsNetOutput, images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The margin loss on the class capsules' activations (no decoder)."""
        return margin_loss(out.activations.float(), targets)

    def parse_trees(self, out: ConvCapsNetOutput) -> ParseTrees:
        """The class layer's couplings read as parse trees."""
        return routed_parse_trees(out.couplings, self.class_caps.router.normalize_over)

    def parameter_counts(self) -> dict:
        """Numbers of parameters: ``{"backbone": everything but the routers, "routers": the routers'}``.

        ``ConvCapsNet(ConvCapsNetConfig.paper(32, 1, 5)).parameter_counts()["backbone"]`` is 86,408, the
        paper's "86K parameters, excluding the ones pertaining to the different routing procedures".
        """
        routing = self.routing_parameters()
        ids = {id(p) for p in routing}
        backbone = sum(p.numel() for p in self.parameters() if id(p) not in ids)
        return {"backbone": backbone, "routers": sum(p.numel() for p in routing)}

    def forward(self, images: torch.Tensor, targets: Optional[torch.Tensor] = None) -> ConvCapsNetOutput:
        """Images → :class:`ConvCapsNetOutput`. ``targets`` is accepted and unused (no decoder), so that
        :func:`~capsule_lab.training.fit` trains this network as it trains a CapsNet."""
        c = self.config
        check_tensor(images, "images", f"(B, {c.in_channels}, {c.image_size}, {c.image_size})",
                     sizes=(None, c.in_channels, c.image_size, c.image_size), floating=True, nonempty=True)
        x = self.norm(torch.relu(self.conv(images)))                                   # (B, A, G, G)
        B, _, G, _ = x.shape
        T = c.primary_types
        # primary capsules as a grid (B, G, G, T, 16) and (B, G, G, T)
        poses = self.primary_poses(x).view(B, T, POSE_DIM, G, G).permute(0, 3, 4, 1, 2)
        activations = torch.sigmoid(self.primary_activations(x)).permute(0, 2, 3, 1)
        caps1 = self.caps1(poses, activations)                                         # (B, H1, W1, C, 16)
        caps2 = self.caps2(caps1.poses, caps1.activations)                             # (B, H2, W2, D, 16)
        # flatten: every capsule of layer 2, (y, x, type) row by row, is one input of the class layer
        classes = self.class_caps(caps2.poses.reshape(B, -1, POSE_DIM), caps2.activations.reshape(B, -1))
        return ConvCapsNetOutput(classes.activations, classes.poses, classes.couplings,
                                 poses.reshape(B, -1, POSE_DIM), activations.reshape(B, -1),
                                 (caps1.couplings, caps2.couplings, classes.couplings),
                                 (caps1.activations, caps2.activations))


def paper_routers(kind, iterations: int = 3, config: Optional[ConvCapsNetConfig] = None) -> tuple:
    """The three routers for conv capsules 1, conv capsules 2 and the class layer of a network with ``config`` (None:
    ``ConvCapsNetConfig.paper()``), built from :meth:`ConvCapsNetConfig.router_specs` ``(kind, iterations)``: a
    registered kind with ``iterations`` (r for dynamic routing, T for the learned routers), or a
    :class:`~capsule_lab.routing.RouterSpec` (its own iterations and options then).

    The paper's two learned routers (§5) have its sizes per layer (:data:`PAPER_SIZES`):

    - ``"similarity"``: :class:`~capsule_lab.routing.SimilarityRouter` with Q = 4, 4, 10 Gaussian kernels
      (:data:`~capsule_lab.routing.similarity.KERNELS`); in the two convolutional layers λ1, λ2 and θ are "distinct for
      each channel" (§4.1): one per capsule type; the class layer, not convolutional, has one λ1, λ2 and θ.
    - ``"connectionist"``: :class:`~capsule_lab.routing.ConnectionistRouter` with Table 2's sizes
      (:data:`~capsule_lab.routing.connectionist.TABLE2`: f_c hidden (), (32, 32), (64, 64); f_a hidden (), (64, 64),
      (124, 124); LSTM 16) on 16-D poses.

    Every other kind is built from the same spec in each layer for its inputs (K·K·T for a convolutional layer, the
    flattened grid for the class layer), outputs and 16-D poses: ``"dynamic"`` is Sabour's routing (no parameters;
    r poses, r − 1 logit updates). The paper runs "every routing procedure for three iterations": the default 3 is
    read in each procedure's own terms (r = 3 for dynamic routing, T = 3 for the learned routers). Chapter 07.
    """
    config = config if config is not None else ConvCapsNetConfig.paper()
    if not isinstance(config, ConvCapsNetConfig):
        raise ValueError(f"config must be a ConvCapsNetConfig, got {type(config).__name__}")
    make = layer_routers(ConvCapsNetConfig.router_specs(kind, iterations), config.router_layers())
    return tuple(make(l) for l in range(len(ROUTING_LAYERS)))
