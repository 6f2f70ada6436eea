"""CapsNet (Sabour et al., 2017): conv → primary capsules → class capsules by routing → optional decoder.

Taught in chapter 02 (chapter 01 already builds one). One class, two sizes:

    CapsNetConfig.sabour()  conv 256 9×9 → 32 types × 8D, 9×9/2 (1152 capsules) → 10 × 16D, r = 3,
                            decoder 512-1024-784 (the paper's network, ~8.2M parameters)
    CapsNetConfig.slim()    conv 64 9×9 → 4 types × 8D (144 capsules) → 10 × 16D, r = 3, same decoder
                            (the quick profile: the same code, a CPU-sized network)

The config's ``router`` is a :class:`~capsule_lab.routing.RouterSpec` (Sabour's dynamic routing, r = 3, by
default); the network builds its router from it, or takes a router module instead (``CapsNet(config, router=...)``,
any :class:`~capsule_lab.routing.Router`), and from then on the built router, ``model.router``, is how the network
routes. The loss is the margin loss plus 0.0005 × the sum of squared reconstruction errors (Sabour, §4.1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_one_of, check_tensor
from ..capsules import PrimaryCapsules, margin_loss
from ..layers.votes import VOTES
from ..layers.dense import CapsuleLayer
from ..routing import LayerInfo, Router, RouterSpec, check_router_spec, router_kind
from .network import CapsuleNetwork, ParseTrees, layer_routers, network_config, routed_parse_trees

__all__ = ["BackboneConfig", "CapsNetConfig", "CapsNetOutput", "CapsNet", "Decoder", "capsnet_loss"]


@dataclass(frozen=True)
class BackboneConfig:
    """Sizes of Sabour's backbone: a valid convolution, then the primary capsules' strided one, and the grid
    of primary capsules they give. The base of :class:`CapsNetConfig` and of the ladder network's config.
    Chapter 02."""

    image_size: int = 28
    in_channels: int = 1
    conv_channels: int = 256
    conv_kernel: int = 9
    primary_types: int = 32
    primary_dim: int = 8
    primary_kernel: int = 9
    primary_stride: int = 2

    @property
    def primary_grid(self) -> int:
        """The side of the primary capsules' square grid."""
        conv_out = self.image_size - self.conv_kernel + 1
        return (conv_out - self.primary_kernel) // self.primary_stride + 1

    @property
    def primary_caps(self) -> int:
        """The number of primary capsules (grid positions × capsule types)."""
        return self.primary_grid ** 2 * self.primary_types


@dataclass(frozen=True)
class CapsNetConfig(BackboneConfig):
    """Sizes of a :class:`CapsNet`, and the routing it asks for. Chapter 02.

    ``router``: the :class:`~capsule_lab.routing.RouterSpec` of the class layer's router (REM's MNIST model asks for
    ``RouterSpec(pose_bias=0.1)``, chapter 05); None in the config of a network that was given a router module.
    ``votes``: ``"plain"`` (Sabour's W u) or ``"normalized"`` (Faria's eq. 1, chapter 07).
    """

    classes: int = 10
    class_dim: int = 16
    router: RouterSpec | None = RouterSpec()
    votes: str = "plain"
    decoder: bool = True
    decoder_hidden: tuple = (512, 1024)
    init_std: float = 0.05

    def __post_init__(self):
        check_one_of(self.votes, VOTES, "votes")
        object.__setattr__(self, "router", check_router_spec(self.router))

    @classmethod
    def sabour(cls, **changes) -> "CapsNetConfig":
        """The paper's network."""
        return replace(cls(), **changes)

    @classmethod
    def slim(cls, **changes) -> "CapsNetConfig":
        """The quick profile's network: 64 conv channels, 4 primary types (144 capsules).

        Routing costs grow with the number of primary capsules: 4 types (144 capsules) train an epoch on the
        8k offline digits in ~9 s on 2 CPU cores, 8 types (288) in ~18 s, to the same accuracy after 3 epochs.
        """
        return replace(cls(conv_channels=64, primary_types=4), **changes)

    @property
    def label(self) -> str:
        """A short name for tables, ``"capsnet r=3"`` (its router's iterations), ``"capsnet uniform"`` for a
        router that does not iterate."""
        spec = self.router[-1] if isinstance(self.router, tuple) else self.router
        if spec is None:
            return "capsnet"
        return f"capsnet r={spec.iterations}" if router_kind(spec.kind).iterations is not None else f"capsnet {spec.kind}"

    @property
    def class_inputs(self) -> int:
        """How many capsules the class layer routes (the primary capsules)."""
        return self.primary_caps

    def router_layers(self) -> tuple:
        """What the one routing layer knows (:class:`~capsule_lab.routing.LayerInfo`): the primary capsules to the
        class capsules, fully connected."""
        return (LayerInfo(self.primary_caps, self.classes, self.class_dim),)

    def network(self, router=None) -> "CapsNet":
        """The network this config describes, ``CapsNet(self, router)``."""
        return CapsNet(self, router)

    def to_dict(self) -> dict:
        return asdict(self)


class CapsNetOutput(NamedTuple):
    """lengths ``(B, J)``, poses ``(B, J, D)``, couplings ``(B, I, J)``, primary capsules ``(B, I, 8)``,
    reconstruction ``(B, 1, H, W)`` or None."""

    lengths: torch.Tensor
    poses: torch.Tensor
    couplings: torch.Tensor
    primary: torch.Tensor
    reconstruction: Optional[torch.Tensor]

    @property
    def scores(self) -> torch.Tensor:
        """The class scores ``(B, J)``: the class capsules' lengths."""
        return self.lengths


class Decoder(nn.Module):
    """Reconstruct the image from the class capsules, all masked to zero but one (Sabour, Fig. 2).

    Chapter 02.
    """

    def __init__(self, classes: int, class_dim: int, hidden: tuple, image_size: int, in_channels: int = 1):
        super().__init__()
        self.shape = (in_channels, image_size, image_size)
        sizes = [classes * class_dim, *hidden]
        layers = []
        for a, b in zip(sizes, sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        layers += [nn.Linear(sizes[-1], in_channels * image_size * image_size), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, poses: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
        """poses ``(B, J, D)``; which ``(B,)`` the class capsule to keep → image ``(B, C, H, W)``."""
        if poses.dim() != 3 or which.shape != poses.shape[:1]:
            raise ValueError(f"poses must be (B, J, D) and which (B,), got {tuple(poses.shape)}, {tuple(which.shape)}")
        mask = F.one_hot(which.long(), poses.shape[1]).to(poses.dtype).unsqueeze(-1)
        return self.net((poses * mask).flatten(1)).view(-1, *self.shape)


class CapsNet(CapsuleNetwork):
    """Sabour et al.'s CapsNet, at full size (``CapsNetConfig.sabour()``) or slim (``CapsNetConfig.slim()``).

    ``CapsNet(config, router=None)``: the class layer's router is built from ``config.router``, or from ``router``
    — a registered kind's name, a :class:`~capsule_lab.routing.RouterSpec` (the network's ``config`` then says so), a
    factory ``f(layer) → Router`` or a :class:`~capsule_lab.routing.Router` (the ``config`` then says
    ``router=None``): the seam every network shares (:func:`~capsule_lab.models.network.layer_routers`).
    ``model.router`` is the router it routes with. ``forward(x, targets=None)`` → :class:`CapsNetOutput`. The decoder
    reconstructs from the target class when ``targets`` is given (training) and from the longest capsule otherwise.

    Chapter 02.
    """

    def __init__(self, config: CapsNetConfig | None = None, router=None):
        super().__init__()
        self.config, router = network_config(config or CapsNetConfig.sabour(), CapsNetConfig, router)
        c = self.config
        if c.primary_grid < 1:
            raise ValueError(f"image_size {c.image_size} is too small for the conv and primary kernels")
        self.conv = nn.Conv2d(c.in_channels, c.conv_channels, c.conv_kernel)
        self.primary = PrimaryCapsules(c.conv_channels, c.primary_types, c.primary_dim,
                                       c.primary_kernel, c.primary_stride)
        router = layer_routers(router, c.router_layers())(0)
        self.digits = CapsuleLayer(c.primary_caps, c.primary_dim, c.classes, c.class_dim,
                                   router=router, init_std=c.init_std, votes=c.votes)
        self.decoder = (Decoder(c.classes, c.class_dim, c.decoder_hidden, c.image_size, c.in_channels)
                        if c.decoder else None)

    @property
    def router(self) -> Router:
        """The class layer's router, how this network routes."""
        return self.digits.router

    def routers(self) -> tuple:
        """The class layer's router, the network's only one."""
        return (self.router,)

    def loss(self, out: "CapsNetOutput", images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """:func:`capsnet_loss`: the margin loss plus the reconstruction error, if there is a decoder."""
        return capsnet_loss(out, images, targets)

    def parse_trees(self, out: "CapsNetOutput") -> ParseTrees:
        """The class layer's couplings read as parse trees (:func:`~capsule_lab.models.network.routed_parse_trees`)."""
        return routed_parse_trees(out.couplings, self.router.normalize_over)

    def stages(self, images: torch.Tensor) -> list:
        """Convolutions, votes and routing — or votes and routing as one stage where the class layer routes without
        forming the votes (:func:`~capsule_lab.routing.vote_free_routing`) — as cumulative prefixes (see
        :meth:`~capsule_lab.models.CapsuleNetwork.stages`); the routing stage names its router's iterations where the
        router has them."""
        def convolutions():
            return self.primary(F.relu(self.conv(images)))

        r = getattr(self.router, "iterations", None)
        counted = "" if r is None else f" ({r} iterations)"
        layer = self.digits
        with torch.no_grad():                           # does the layer route vote-free? (its router may not know how)
            fused = (layer.vote_free and layer.vote_form == "plain" and not layer.router.hooked
                     and layer.router.route_weights(self.primary(F.relu(self.conv(images[:1]))), layer.weight)
                     is not None)

        def routing():
            return layer(convolutions()).poses

        if fused:                                                               # the votes are never formed
            return [("convolutions", convolutions), (f"votes and routing, vote-free{counted}", routing)]
        return [("convolutions", convolutions), ("votes", lambda: layer.votes(convolutions())),
                (f"routing{counted}", routing)]

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> CapsNetOutput:
        c = self.config
        check_tensor(x, "images", f"(B, {c.in_channels}, {c.image_size}, {c.image_size})",
                     sizes=(None, c.in_channels, c.image_size, c.image_size))
        u = self.primary(F.relu(self.conv(x)))
        routed = self.digits(u)
        lengths = routed.poses.norm(dim=-1)
        reconstruction = None
        if self.decoder is not None:
            which = targets if targets is not None else lengths.argmax(dim=1)
            reconstruction = self.decoder(routed.poses, which)
        return CapsNetOutput(lengths, routed.poses, routed.couplings, u, reconstruction)


def capsnet_loss(out: CapsNetOutput, images: torch.Tensor, targets: torch.Tensor,
                 reconstruction_weight: float = 0.0005) -> torch.Tensor:
    """Margin loss + ``reconstruction_weight`` × Σ_pixels (reconstruction − image)², averaged over the batch.

    Chapter 02.
    """
    loss = margin_loss(out.lengths.float(), targets)
    if out.reconstruction is not None and reconstruction_weight:
        if out.reconstruction.shape != images.shape:
            raise ValueError(f"images must have the reconstruction's shape {tuple(out.reconstruction.shape)}, "
                             f"got {tuple(images.shape)}")
        sse = ((out.reconstruction.float() - images.float()) ** 2).flatten(1).sum(dim=1).mean()
        loss = loss + reconstruction_weight * sse
    return loss
