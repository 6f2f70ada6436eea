"""The ladder capsule network (Jeong, Lee and Kim, 2019, §5.1, Figure 3). Taught in chapter 06.

Sabour's first two layers, then the ladder instead of routing:

    conv (ReLU) → primary capsules u_i = squash(t_i) → pruning layer (the K most active, code vector c)
                → ladder layer (weights from c; eqs. 1–4) → class activities d_j

One class, two sizes:

    LadderCapsNetConfig.paper()  40×40 input; conv 256 9×9 → 32 types × 8D, 9×9/2: 12·12·32 = 4608 capsules;
                                 K = 70 (or 50, 100); class capsules 16D; Table 1's widths (f: 384-256-128,
                                 p: 3K-2K-K); ``kernel=15``: 15×15 conv and primary kernels, 6·6·32 = 1152
                                 capsules. 76.6M parameters at K = 70 with 9×9 kernels (67.0M at K = 50,
                                 91.1M at K = 100; 52.3M with 15×15 kernels at K = 70); with 9×9 kernels all
                                 but the convolutions' 5.3M are in the J = 10 × 3 networks of the code vector:
                                 their first layer sees all n capsules, their last one writes K·d·D numbers.
    LadderCapsNetConfig.slim()   Table 1's network at CPU size: every width divided by 8
    (:meth:`LadderCapsNetConfig.slim`).

The loss is :func:`ladder_capsnet_loss`: the margin loss on the class activities + ε ‖c − A‖² (§4).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_nonnegative, check_positive_int, check_tensor
from ..capsules import PrimaryCapsules
from ..layers.ladder import EPSILON, GAMMA, LadderLayer, PruningLayer, capsule_activity, ladder_loss, table1_widths
from .capsnet import BackboneConfig
from .network import CapsuleNetwork, ParseTrees

__all__ = ["SLIM_FACTOR", "LadderCapsNetConfig", "LadderCapsNetOutput", "LadderCapsNet", "ladder_capsnet_loss"]

#: The quick profile's L-CapsNet divides the paper's widths by this factor (256 → 32 convolution channels, 32 → 4
#: primary capsule types, Table 1's hidden widths 384, 256, 128 → 48, 32, 16; :meth:`LadderCapsNetConfig.slim`).
SLIM_FACTOR = 8


@dataclass(frozen=True)
class LadderCapsNetConfig(BackboneConfig):
    """Sizes of a :class:`LadderCapsNet`. Chapter 06.

    ``k`` is the number K of primary capsules the pruning layer keeps; ``widths`` the hidden widths of the
    networks f_{j|i} and f_j^reg, ``contribution_widths`` those of p_j (None: Table 1's, from d, D and K);
    ``gamma`` the γ of eq. 4 (the loss's ε is :func:`ladder_capsnet_loss`'s argument).
    """

    image_size: int = 40        # the backbone's other sizes are BackboneConfig's (Sabour's)
    k: int = 70
    classes: int = 10
    class_dim: int = 16
    widths: Optional[tuple] = None
    contribution_widths: Optional[tuple] = None
    gamma: float = GAMMA

    def __post_init__(self):
        for name in ("image_size", "in_channels", "conv_channels", "conv_kernel", "primary_types", "primary_dim",
                     "primary_kernel", "primary_stride", "k", "class_dim"):
            check_positive_int(getattr(self, name), name)
        check_positive_int(self.classes, "classes", minimum=2)
        check_nonnegative(self.gamma, "gamma")
        if self.primary_grid < 1:
            raise ValueError(f"image_size {self.image_size} is too small for the conv and primary kernels")
        if self.k > self.primary_caps:
            raise ValueError(f"k must be an integer in [1, primary capsules] = [1, {self.primary_caps}], "
                             f"got {self.k!r}")

    @classmethod
    def paper(cls, k: int = 70, kernel: int = 9, image_size: int = 40, **changes) -> "LadderCapsNetConfig":
        """The paper's networks (§5.2, Table 2): ``k`` ∈ {50, 70, 100}, ``kernel`` ∈ {9, 15}.

        ``kernel=9``: Sabour's 9×9 conv and primary kernels (4608 capsules on 40×40, 1152 on 28×28).
        ``kernel=15``: 15×15 primary kernels, and on the 40×40 input a 15×15 conv kernel too (1152 capsules;
        on 28×28 the conv keeps 9×9: 288 capsules), as the paper sets them. Table 1's widths.
        """
        if k not in (50, 70, 100):
            raise ValueError(f"k must be one of the paper's 50, 70, 100, got {k!r} (set other values directly)")
        if kernel not in (9, 15):
            raise ValueError(f"kernel must be the paper's 9 or 15, got {kernel!r}")
        conv_kernel = 15 if kernel == 15 and image_size == 40 else 9
        return replace(cls(image_size=image_size, conv_kernel=conv_kernel, primary_kernel=kernel, k=k), **changes)

    @classmethod
    def slim(cls, **changes) -> "LadderCapsNetConfig":
        """The quick profile's network: Table 1's network at CPU size, every width of the paper divided by one factor,
        8.

        40×40 input; conv 256 → 32 channels (9×9) and 32 → 4 primary capsule types of 8D, 9×9/2 (12·12·4 = 576
        capsules); class capsules 16D as in the paper; the networks f_{j|i} and f_j^reg keep Table 1's three hidden
        layers in its 3:2:1 widths, 3dD, 2dD, dD = 384, 256, 128 divided by 8: (48, 32, 16); p_j keeps Table 1's
        (3K, 2K, K) exactly, which already scale with K. K = 32 keeps 5.6 % of the capsules, near the 6 % the
        paper's conclusion found best. 2,721,440 parameters at K = 32 (1,678,400 at K = 16, 4,945,760 at K = 64):
        1.31M in the output layers of f and f^reg (16 → K·d·D = 4,096 numbers per class), 0.55M in p's first
        layer (576 → 3K = 96 per class).

        One training step (forward, loss, backward, Adam) on a batch of 32 40×40 images on 1 CPU thread (torch
        2.14, median of 5): 69 ms at K = 32 (49 ms at K = 16, 98 ms at K = 64), against 59 ms for the
        dynamic-routing ``CapsNetConfig.slim(image_size=40, conv_channels=32, decoder=False)`` with the same 576
        primary capsules and r = 3.
        """
        f_widths, _ = table1_widths(8, 16, 70)
        return replace(cls(conv_channels=32, primary_types=4, k=32, class_dim=16,
                           widths=tuple(w // SLIM_FACTOR for w in f_widths)), **changes)

    @property
    def label(self) -> str:
        """A short name for tables, such as ``"ladder K=16"``."""
        return f"ladder K={self.k}"

    def router_layers(self) -> tuple:
        """None: the ladder network does not route (its pruning and ladder layers take the routing layer's place)."""
        return ()

    def network(self, router=None) -> "LadderCapsNet":
        """The network this config describes, ``LadderCapsNet(self)``; ``router`` must be None (it does not route)."""
        if router is not None:
            raise ValueError("a LadderCapsNet does not route: router must be None")
        return LadderCapsNet(self)

    def to_dict(self) -> dict:
        return asdict(self)


class LadderCapsNetOutput(NamedTuple):
    """What a :class:`LadderCapsNet` returns. Chapter 06.

    activities ``(B, J)``: the class activities d_j (eq. 4), the network's scores (also as ``.lengths``).
    poses ``(B, J, D)``: the class capsules v_j = d_j s_j/‖s_j‖.
    indices ``(B, K)``: the kept primary capsules, ascending; code ``(B, n)``: the code vector c.
    regressed ``(B, J, K, d)``: the kept capsules regressed from each class (eq. 3).
    selected ``(B, K, d)``: the kept capsules' actual poses U_K.
    primary ``(B, n, d)``: all primary capsules (their lengths are the A of the loss).
    """

    activities: torch.Tensor
    poses: torch.Tensor
    indices: torch.Tensor
    code: torch.Tensor
    regressed: torch.Tensor
    selected: torch.Tensor
    primary: torch.Tensor

    @property
    def lengths(self) -> torch.Tensor:
        """The class capsules' lengths ‖v_j‖, which are their activities d_j."""
        return self.activities

    @property
    def scores(self) -> torch.Tensor:
        """The class scores ``(B, J)``: the class activities d_j."""
        return self.activities


class LadderCapsNet(CapsuleNetwork):
    """Jeong et al.'s L-CapsNet: conv → primary capsules → :class:`~capsule_lab.layers.ladder.PruningLayer` →
    :class:`~capsule_lab.layers.ladder.LadderLayer` → class activities.

    ``forward(x, targets=None)`` → :class:`LadderCapsNetOutput` (``targets`` is accepted so that
    :func:`capsule_lab.training.fit` can call it; the ladder has no decoder and does not use it). Its loss
    (:meth:`loss`, what ``fit`` trains it with) is :func:`ladder_capsnet_loss`. It does not route: what it has in
    place of routing, its routing parameters, are the pruning and ladder layers; its parse tree is its code vector.

    Chapter 06.
    """

    def __init__(self, config: LadderCapsNetConfig | None = None):
        super().__init__()
        self.config = c = config or LadderCapsNetConfig.paper()
        self.conv = nn.Conv2d(c.in_channels, c.conv_channels, c.conv_kernel)
        self.primary = PrimaryCapsules(c.conv_channels, c.primary_types, c.primary_dim, c.primary_kernel,
                                       c.primary_stride)
        self.pruning = PruningLayer(c.k)
        self.ladder = LadderLayer(c.primary_caps, c.k, c.primary_dim, c.classes, c.class_dim, c.widths,
                                  c.contribution_widths, c.gamma)

    def loss(self, out: LadderCapsNetOutput, images: torch.Tensor | None, targets: torch.Tensor) -> torch.Tensor:
        """:func:`ladder_capsnet_loss`: margin(d) + ε ‖c − A‖²."""
        return ladder_capsnet_loss(out, images, targets)

    def routing_parameters(self) -> list:
        """The parameters of what the ladder has in place of routing: every layer after the primary capsules."""
        return [*self.pruning.parameters(), *self.ladder.parameters()]

    def parse_trees(self, out: LadderCapsNetOutput) -> ParseTrees:
        """The ladder's parse tree is its code vector, which primary capsules it kept: ``(B, n, J)`` (the same for
        every class), at 2 levels."""
        code = out.code.detach().float()
        return ParseTrees(code[:, :, None].expand(-1, -1, out.activities.shape[1]), 2, "none")

    def stages(self, images: torch.Tensor) -> list:
        """Convolutions, pruning and the weight networks of z (the code vector), eqs. 1–4, as cumulative prefixes (see
        :meth:`~capsule_lab.models.CapsuleNetwork.stages`)."""
        def convolutions():
            return self.primary(F.relu(self.conv(images)))

        def weights():
            pruned = self.pruning(convolutions())
            return (pruned.selected, *self.ladder.weights(pruned.code))

        return [("convolutions", convolutions), ("pruning and the weight networks of z", weights),
                ("eqs. 1-4", lambda: self(images).activities)]

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> LadderCapsNetOutput:
        c = self.config
        check_tensor(x, "images", f"(B, {c.in_channels}, {c.image_size}, {c.image_size})",
                     sizes=(None, c.in_channels, c.image_size, c.image_size))
        u = self.primary(F.relu(self.conv(x)))
        pruned = self.pruning(u)
        out = self.ladder(pruned.selected, pruned.code)
        return LadderCapsNetOutput(out.activities, out.poses, pruned.indices, pruned.code, out.regressed,
                                   pruned.selected, u)


def ladder_capsnet_loss(out: LadderCapsNetOutput, images: torch.Tensor | None, targets: torch.Tensor,
                        epsilon: float = EPSILON) -> torch.Tensor:
    """The L-CapsNet loss of a :class:`LadderCapsNetOutput`: margin(d) + ε ‖c − A‖² with A the lengths of all
    primary capsules (:func:`~capsule_lab.layers.ladder.ladder_loss`). ``images`` is unused: the signature is
    :func:`capsule_lab.training.fit`'s ``loss_fn(output, images, targets)``. Chapter 06.
    """
    if not isinstance(out, LadderCapsNetOutput):
        raise ValueError(f"out must be a LadderCapsNetOutput, got {type(out).__name__}")
    return ladder_loss(out.activities.float(), targets, out.code.float(), capsule_activity(out.primary).float(),
                       epsilon)
