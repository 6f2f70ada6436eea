"""A deep, fully-connected CapsNet (Mitterreiter et al., 2023, §3.2). Taught in chapter 04.

A backbone turns the image into n¹
feature vectors, squashed into the primary capsules U¹; then L routing layers, each computing

    û_{(i,j,:)} = W_(j,i) u_(i,:)               votes                          (their eq. 2)
    u_(j,:)     = g(Σ_i c_(i,j) û_(i,j,:))      g = squash_exp                 (their eq. 1)

with couplings c from routing-by-agreement started at learned routing priors b (their Algorithm 1),
or uniform (c = 1/J). ``squash="sabour"`` swaps g for Sabour's squash (length ≈ ‖s‖² near 0, slope 0 at the
origin) everywhere, and ``prior_std`` draws the priors b from N(0, prior_std²) instead of zeros: chapter 04's
search for the conditions under which capsules die (``scripts/dead_capsule_search.py``) varies both. With L = 4 this is the network of their Tables 1 and 2: capsule layers 1-4 of
16 capsules (layer 1 = the primary capsules) and the 10 class capsules as layer 5, all of dimension 8.

The decoder is chapter 02's :class:`~capsule_lab.models.capsnet.Decoder`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import NamedTuple, Optional

import torch
from torch import nn

from .._checks import check_nonnegative, check_positive_int, check_tensor
from ..capsules import squash, squash_exp
from ..layers import CapsuleLayer
from ..routing import DynamicRouter, UniformRouter
from .capsnet import Decoder

__all__ = ["SQUASHES", "DeepCapsNetConfig", "DeepCapsNetOutput", "RoutingLayer", "DeepCapsNet"]

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
    ``classes`` class capsules). ``routing`` is ``"dynamic"`` (RBA with learned priors b) or ``"uniform"``.
    ``squash`` names the squash g of every capsule layer (:data:`SQUASHES`: ``"exp"``, the paper's, or
    ``"sabour"``); ``prior_std`` is the standard deviation of the learned priors b at initialisation (0: zeros,
    the default). ``init_std`` is the standard deviation of W at initialisation.
    """

    image_size: int = 28
    in_channels: int = 1
    conv_channels: tuple = (32, 64)     # the backbone: 5×5 stride-2 convolutions with ReLU, then a linear map
    capsules: int = 16                  # n^l for the primary and the hidden capsule layers
    capsule_dim: int = 8                # d^l for every capsule layer, the class layer included
    classes: int = 10
    routing_layers: int = 4
    routing: str = "dynamic"
    iterations: int = 3
    learned_priors: bool = True
    init_std: float = 1.0               # W ~ N(0, 1): chapter 04 explains the choice
    decoder: bool = False
    decoder_hidden: tuple = (512, 1024)
    squash: str = "exp"                 # "exp" (squash_exp, the paper's) or "sabour" (squash)
    prior_std: float = 0.0              # learned priors b ~ N(0, prior_std²) at initialisation; 0: zeros

    def __post_init__(self):
        if self.routing not in {"dynamic", "uniform"}:
            raise ValueError(f"routing must be 'dynamic' or 'uniform', got {self.routing!r}")
        check_positive_int(self.routing_layers, "routing_layers")
        _check_squash(self.squash)
        check_nonnegative(self.init_std, "init_std")
        check_nonnegative(self.prior_std, "prior_std")
        if self.prior_std > 0 and not (self.routing == "dynamic" and self.learned_priors):
            raise ValueError(f"prior_std must be 0 without learned priors (routing='dynamic', learned_priors=True), "
                             f"got {self.prior_std!r}")
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


class RoutingLayer(nn.Module):
    """One fully-connected routing layer of a :class:`DeepCapsNet`: ``(B, I, d_in)`` → RoutingResult ``(B, J, d)``.

    A :class:`~capsule_lab.layers.CapsuleLayer` (weight ``W`` of shape ``(I, J, d, d_in)``) whose router is
    RBA with ``iterations`` iterations started at the learned priors ``prior`` ``(I, J)`` (zeros at
    initialisation, or N(0, prior_std²); Mitterreiter et al., Algorithm 1), or uniform routing; the squash is
    ``squash_exp`` (``squash="exp"``) or Sabour's ``squash`` (``squash="sabour"``). ``router``, if given,
    replaces the router that ``routing`` names (no priors then), e.g. a learned router of chapter 07.

    Chapter 04.
    """

    def __init__(self, in_caps: int, in_dim: int, out_caps: int, out_dim: int, routing: str = "dynamic",
                 iterations: int = 3, learned_priors: bool = True, init_std: float = 1.0,
                 squash: str = "exp", prior_std: float = 0.0, router=None):
        super().__init__()
        _check_squash(squash)
        check_nonnegative(prior_std, "prior_std")
        self.routing = routing
        g = SQUASHES[squash]
        if router is not None:
            self.prior = None
        elif routing == "dynamic":
            self.prior = nn.Parameter(torch.zeros(in_caps, out_caps)) if learned_priors else None
            if self.prior is not None and prior_std > 0:
                with torch.no_grad():                     # drawn only when asked: prior_std = 0 draws nothing
                    self.prior.normal_(0.0, prior_std)
            options = {"activation": g}
            if self.prior is not None:
                options["prior_logits"] = self.prior      # the same Parameter object: learned through the router
            router = DynamicRouter(iterations, **options)
        elif routing == "uniform":
            self.prior = None
            router = UniformRouter(activation=g)
        else:
            raise ValueError(f"routing must be 'dynamic' or 'uniform', got {routing!r}")
        # 16 × 16 capsules of dimension 8 are small: the readable routing on materialised votes is faster here.
        self.capsules = CapsuleLayer(in_caps, in_dim, out_caps, out_dim, router=router, init_std=init_std,
                                     vote_free=False)

    @property
    def weight(self) -> torch.Tensor:
        return self.capsules.weight

    def forward(self, u: torch.Tensor):
        return self.capsules(u)


class DeepCapsNet(nn.Module):
    """A deep fully-connected CapsNet (Mitterreiter et al., 2023): backbone → primary capsules → L routing layers.

    The primary capsules are the backbone's ``capsules × capsule_dim`` features, squashed with the config's
    squash (``squash_exp`` by default);
    every routing layer is a :class:`RoutingLayer`. ``forward(x, targets=None)`` → :class:`DeepCapsNetOutput`
    with every capsule layer and every coupling tensor, for the diagnostics of
    :mod:`capsule_lab.diagnostics`; ``.lengths`` makes it work with :func:`capsule_lab.training.fit`.
    ``routers``, if given, routes the L layers instead of ``config.routing``: a sequence of L routers, or a
    function of the layer index l = 0 … L − 1 that returns one (e.g. ``lambda l: SimilarityRouter()``, a
    learned router of chapter 07).

    Chapter 04.
    """

    def __init__(self, config: DeepCapsNetConfig | None = None, routers=None):
        super().__init__()
        self.config = c = config or DeepCapsNetConfig.paper()
        convs, channels, size = [], c.in_channels, c.image_size
        for out in c.conv_channels:
            convs += [nn.Conv2d(channels, out, 5, stride=2), nn.ReLU(inplace=True)]
            channels, size = out, (size - 5) // 2 + 1
        if size < 1:
            raise ValueError(f"image_size {c.image_size} is too small for {len(c.conv_channels)} conv layers")
        self.backbone = nn.Sequential(*convs, nn.Flatten(), nn.Linear(channels * size * size,
                                                                      c.capsules * c.capsule_dim))
        sizes = c.layer_sizes
        if routers is not None:
            if callable(routers) and not isinstance(routers, nn.Module):
                routers = [routers(l) for l in range(c.routing_layers)]
            routers = list(routers)
            if len(routers) != c.routing_layers:
                raise ValueError(f"routers must be {c.routing_layers} routers (one per routing layer) or a function "
                                 f"of the layer index, got {len(routers)}")
        self.layers = nn.ModuleList(
            RoutingLayer(n_in, c.capsule_dim, n_out, c.capsule_dim, c.routing, c.iterations,
                         c.learned_priors, c.init_std, c.squash, c.prior_std,
                         router=None if routers is None else routers[l])
            for l, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])))
        self.decoder = (Decoder(c.classes, c.capsule_dim, c.decoder_hidden, c.image_size, c.in_channels)
                        if c.decoder else None)

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
