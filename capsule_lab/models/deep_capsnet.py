"""A deep, fully-connected CapsNet (Mitterreiter et al., 2023, §3.2). Taught in chapter 04.

A backbone turns the image into n¹
feature vectors, squashed into the primary capsules U¹; then L routing layers, each computing

    û_{(i,j,:)} = W_(j,i) u_(i,:)               votes                          (their eq. 2)
    u_(j,:)     = g(Σ_i c_(i,j) û_(i,j,:))      g = squash_exp                 (their eq. 1)

with couplings c from routing-by-agreement started at learned routing priors b (their Algorithm 1: the
config's router, ``RouterSpec("dynamic", learned_priors=True)``), or any other router (uniform, c = 1/J, is
chapter 04's baseline). Every routing layer is a :class:`~capsule_lab.layers.dense.CapsuleLayer` whose router holds its
priors. ``squash="sabour"`` swaps g for Sabour's squash (length ≈ ‖s‖² near 0, slope 0 at the origin) everywhere,
and the router spec's ``prior_std`` draws the priors b from N(0, prior_std²) instead of zeros: chapter 04's search
for the conditions under which capsules die (``scripts/dead_capsule_search.py``) varies both. With L = 4 this is
the network of their Tables 1 and 2: capsule layers 1-4 of 16 capsules (layer 1 = the primary capsules) and the 10
class capsules as layer 5, all of dimension 8.

The decoder is chapter 02's :class:`~capsule_lab.models.capsnet.Decoder`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import NamedTuple, Optional

import torch
from torch import nn

from .._checks import check_nonnegative, check_one_of, check_positive_int, check_tensor
from ..capsules import squash, squash_exp
from ..layers.votes import VOTES
from ..layers.dense import CapsuleLayer
from ..routing import LayerInfo, RouterSpec, check_router_spec
from .capsnet import Decoder, capsnet_loss
from .network import CapsuleNetwork, ParseTrees, layer_routers, network_config, routed_parse_trees

__all__ = ["SQUASHES", "DeepCapsNetConfig", "DeepCapsNetOutput", "DeepCapsNet"]

#: The squash g of a :class:`DeepCapsNet` by name: ``"exp"`` = :func:`~capsule_lab.capsules.squash_exp`
#: (Mitterreiter et al.'s eq. 1, slope 1 at the origin), ``"sabour"`` = :func:`~capsule_lab.capsules.squash`
#: (slope 0 at the origin). Chapter 04.
SQUASHES = {"exp": squash_exp, "sabour": squash}


def _check_squash(name) -> None:
    if name not in SQUASHES:
        raise ValueError(f"squash must be one of {sorted(SQUASHES)}, got {name!r}")


@dataclass(frozen=True)
class DeepCapsNetConfig:
    """Sizes of a :class:`DeepCapsNet`. Chapter 04.

    ``routing_layers`` = L counts routing steps, as in Mitterreiter et al.'s "four routing layers": the
    network has L + 1 capsule layers (primary capsules, L − 1 hidden layers of ``capsules`` capsules, the
    ``classes`` class capsules). ``router`` is the :class:`~capsule_lab.routing.RouterSpec` every routing layer
    builds its router from (None in the config of a network that was given router modules): RBA with learned
    priors b by default (``prior_std``: their spread at initialisation,
    0: zeros), ``RouterSpec("uniform")`` for chapter 04's baseline. ``squash`` names the squash g of every capsule
    layer (:data:`SQUASHES`: ``"exp"``, the paper's, or ``"sabour"``), the routers' included. ``votes``: the
    layers' votes (``"plain"`` or ``"normalized"``). ``init_std`` is the standard deviation of W at initialisation.
    """

    image_size: int = 28
    in_channels: int = 1
    conv_channels: tuple = (32, 64)     # the backbone: 5×5 stride-2 convolutions with ReLU, then a linear map
    capsules: int = 16                  # n^l for the primary and the hidden capsule layers
    capsule_dim: int = 8                # d^l for every capsule layer, the class layer included
    classes: int = 10
    routing_layers: int = 4
    router: RouterSpec | None = RouterSpec("dynamic", iterations=3, learned_priors=True)
    votes: str = "plain"
    init_std: float = 1.0               # W ~ N(0, 1): chapter 04 explains the choice
    decoder: bool = False
    decoder_hidden: tuple = (512, 1024)
    squash: str = "exp"                 # "exp" (squash_exp, the paper's) or "sabour" (squash)

    def __post_init__(self):
        object.__setattr__(self, "router", check_router_spec(self.router))
        check_one_of(self.votes, VOTES, "votes")
        check_positive_int(self.routing_layers, "routing_layers")
        _check_squash(self.squash)
        check_nonnegative(self.init_std, "init_std")
        if self.capsules < 1 or self.capsule_dim < 1 or self.classes < 2 or not self.conv_channels:
            raise ValueError("capsules, capsule_dim >= 1, classes >= 2 and at least one conv layer are required")

    @classmethod
    def paper(cls, **changes) -> "DeepCapsNetConfig":
        """Mitterreiter et al.'s Table 1/2 network: 4 routing layers, 16 capsules, dimension 8, 3 iterations,
        a reconstruction decoder; a wider backbone (their appendix's backbone is not in the course's text)."""
        return replace(cls(conv_channels=(64, 128), decoder=True), **changes)

    @classmethod
    def quick(cls, **changes) -> "DeepCapsNetConfig":
        """The quick profile's network: the same capsule layers, a small backbone, no decoder."""
        return replace(cls(), **changes)

    @property
    def layer_sizes(self) -> tuple:
        """Capsules per capsule layer, primary first — ``(16, 16, 16, 16, 10)`` for L = 4."""
        return (self.capsules,) * self.routing_layers + (self.classes,)

    def router_layers(self) -> tuple:
        """What each of the L routing layers knows (:class:`~capsule_lab.routing.LayerInfo`): its capsules in and
        out, their dimension, the network's squash, its index."""
        sizes = self.layer_sizes
        return tuple(LayerInfo(n_in, n_out, self.capsule_dim, SQUASHES[self.squash], l, self.routing_layers)
                     for l, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])))

    def network(self, router=None) -> "DeepCapsNet":
        """The network this config describes, ``DeepCapsNet(self, router)``."""
        return DeepCapsNet(self, router)

    def to_dict(self) -> dict:
        return asdict(self)


class DeepCapsNetOutput(NamedTuple):
    """lengths ``(B, classes)``; poses ``(B, classes, d)``; capsules: one ``(B, n^l, d)`` tensor per capsule
    layer, primary first; couplings: one ``(B, n^l, n^{l+1})`` tensor per routing layer; reconstruction or None."""

    lengths: torch.Tensor
    poses: torch.Tensor
    capsules: tuple
    couplings: tuple
    reconstruction: Optional[torch.Tensor]

    @property
    def scores(self) -> torch.Tensor:
        """The class scores ``(B, classes)``: the class capsules' lengths."""
        return self.lengths


class DeepCapsNet(CapsuleNetwork):
    """A deep fully-connected CapsNet (Mitterreiter et al., 2023): backbone → primary capsules → L routing layers.

    The primary capsules are the backbone's ``capsules × capsule_dim`` features, squashed with the config's
    squash (``squash_exp`` by default); every routing layer is a :class:`~capsule_lab.layers.dense.CapsuleLayer`
    (``layers[l]``, weight ``(I, J, d, d)``, its router ``layers[l].router``; the votes are formed from the
    materialised W u: 16 × 16 capsules of dimension 8 are small, and the readable routing is faster here).
    ``forward(x, targets=None)`` → :class:`DeepCapsNetOutput` with every capsule layer and every coupling tensor,
    for the diagnostics of :mod:`capsule_lab.measures.capsule_stats`; ``.lengths`` makes it work with
    :func:`capsule_lab.training.fit`. ``router``, if given, routes the L layers instead of ``config.router``, through
    the seam every network shares (:func:`~capsule_lab.models.network.layer_routers`): a registered kind's name, a
    :class:`~capsule_lab.routing.RouterSpec`, a factory ``f(layer) → Router`` given each layer's
    :class:`~capsule_lab.routing.LayerInfo` (its sizes, its index and the network's squash, e.g.
    ``lambda layer: SimilarityRouter()``, a learned router of chapter 07), or a sequence of L of these or of
    :class:`~capsule_lab.routing.Router` modules. Router modules or factories leave the network's ``config`` saying
    ``router=None``.

    Chapter 04.
    """

    def __init__(self, config: DeepCapsNetConfig | None = None, router=None):
        super().__init__()
        self.config, router = network_config(config or DeepCapsNetConfig.paper(), DeepCapsNetConfig, router)
        c = self.config
        convs, channels, size = [], c.in_channels, c.image_size
        for out in c.conv_channels:
            convs += [nn.Conv2d(channels, out, 5, stride=2), nn.ReLU(inplace=True)]
            channels, size = out, (size - 5) // 2 + 1
        if size < 1:
            raise ValueError(f"image_size {c.image_size} is too small for {len(c.conv_channels)} conv layers")
        self.backbone = nn.Sequential(*convs, nn.Flatten(), nn.Linear(channels * size * size,
                                                                      c.capsules * c.capsule_dim))
        infos = c.router_layers()
        make = layer_routers(router, infos)
        layers = []
        for l, layer in enumerate(infos):                             # each layer's router, then its W
            layers.append(CapsuleLayer(layer.inputs, c.capsule_dim, layer.outputs, c.capsule_dim, router=make(l),
                                       init_std=c.init_std, votes=c.votes, vote_free=False))
        self.layers = nn.ModuleList(layers)
        self.decoder = (Decoder(c.classes, c.capsule_dim, c.decoder_hidden, c.image_size, c.in_channels)
                        if c.decoder else None)

    def routers(self) -> tuple:
        """The L routing layers' routers, primary capsules first."""
        return tuple(layer.router for layer in self.layers)

    def loss(self, out: "DeepCapsNetOutput", images: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The margin loss on the class capsules' lengths, plus the reconstruction error if there is a decoder
        (:func:`~capsule_lab.models.capsnet_loss`)."""
        return capsnet_loss(out, images, targets)

    def parse_trees(self, out: "DeepCapsNetOutput") -> ParseTrees:
        """The last routing layer's couplings (to the class capsules) read as parse trees."""
        return routed_parse_trees(out.couplings[-1], self.layers[-1].router.normalize_over)

    def primary(self, x: torch.Tensor) -> torch.Tensor:
        """The primary capsules U¹ ``(B, capsules, capsule_dim)``: the backbone's features, squashed."""
        c = self.config
        return SQUASHES[c.squash](self.backbone(x).view(x.shape[0], c.capsules, c.capsule_dim))

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> DeepCapsNetOutput:
        c = self.config
        check_tensor(x, "images", f"(B, {c.in_channels}, {c.image_size}, {c.image_size})",
                     sizes=(None, c.in_channels, c.image_size, c.image_size))
        u = self.primary(x)
        capsules, couplings = [u], []
        for layer in self.layers:
            routed = layer(u)
            u = routed.poses
            capsules.append(u)
            couplings.append(routed.couplings)
        lengths = u.norm(dim=-1)
        reconstruction = None
        if self.decoder is not None:
            which = targets if targets is not None else lengths.argmax(dim=1)
            reconstruction = self.decoder(u, which)
        return DeepCapsNetOutput(lengths, u, tuple(capsules), tuple(couplings), reconstruction)
