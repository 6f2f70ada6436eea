"""How active capsules are: the ladder paper's activity profile and the couplings of its most active capsules.

Taught in chapter 06. :func:`activity_profile` is Figure 4's curve: per image the activities of its most active
capsules sorted from the largest, averaged over the images; :func:`activity_drop` reads the split between active
and inactive capsules image by image (where each image's activity falls, and how many of its capsules sit in
between), which a mean profile cannot: a mean of sharp falls at different ranks looks like a slow fall, and a
network whose every capsule stays active has no middling capsule but no split either; :func:`most_active_couplings`
is Figure 1's measure, the lengths and couplings of the most active capsules for one class. They read any network's
capsules.
"""

from __future__ import annotations

import torch

from .._checks import check_class_index, check_positive_int, check_tensor
from ..layers.ladder import capsule_activity


def most_active_couplings(u: torch.Tensor, couplings: torch.Tensor, label: int, top: int = 100) -> tuple:
    """The thought experiment of §3.1 (the paper's Figure 1) on one image: the ``top`` most active lower capsules
    of a trained CapsNet, from the most active, with their lengths and their couplings to class ``label``.

    u ``(n, d)`` the image's lower capsules; couplings ``(n, J)`` its couplings (dynamic routing's, each row a
    softmax over the J classes). Returns ``(indices, lengths, couplings to label)``, each ``(top,)``; ties in
    length keep the lower index first. If only a few capsules carry both a long length and a large coupling,
    the rest could be pruned without changing the class capsule much — the argument for the pruning layer.
    Chapter 06.
    """
    check_tensor(u, "u", "(n, d)", ndim=2, nonempty=True, floating=True)
    n = u.shape[0]
    check_tensor(couplings, "couplings", f"(n, J) = ({n}, J)", sizes=(n, None), floating=True)
    check_class_index(label, couplings.shape[1])
    check_positive_int(top, "top")
    if top > n:
        raise ValueError(f"top must be at most the number of capsules n = {n}, got {top}")
    lengths = torch.linalg.vector_norm(u.detach(), dim=-1)
    order = torch.sort(lengths, descending=True, stable=True).indices[:top]
    return order, lengths[order], couplings.detach()[order, label]


def activity_profile(u: torch.Tensor, top: int = 300) -> torch.Tensor:
    """The paper's Figure 4: per image, the activities (lengths) of its ``top`` most active capsules sorted from
    the largest, averaged over the images. u ``(B, n, d)`` → ``(top,)``, non-increasing. A profile that drops
    fast means a few capsules carry each image, and a small K keeps them. Chapter 06.
    """
    check_positive_int(top, "top")
    activities = capsule_activity(u.detach())
    if top > activities.shape[1]:
        raise ValueError(f"top must be at most the number of capsules n = {activities.shape[1]}, got {top}")
    return torch.sort(activities, dim=1, descending=True).values[:, :top].mean(dim=0)


def activity_drop(u: torch.Tensor, low: float = 0.1, high: float = 0.9, threshold: float = 0.5) -> dict:
    """Where each image's capsule activities fall, image by image (the paper's Figure 4, §5.3: "for low K values
    ... the activity levels are extremely high or low. That is, the active and inactive capsules are distinguished
    clearly"). u ``(B, n, d)`` → ``{"drop_rank": (B,), "middling": (B,)}``, integer counts per image:

    - ``drop_rank``: how many of its capsules have an activity of at least ``threshold`` — on its activities sorted
      from the largest, the rank after which they fall below ``threshold`` (``n``: they never do, no split);
    - ``middling``: how many have an activity strictly between ``low`` and ``high`` — the width, in ranks, of the
      fall from active to inactive (0: every capsule clearly on or off).

    A clear split at K is ``drop_rank`` near K with few ``middling``; a network whose capsules all stay active has
    ``middling`` 0 too, but ``drop_rank`` n: read the two together. Chapter 06.
    """
    activities = capsule_activity(u.detach())
    if not 0 <= low < threshold < high <= 1:
        raise ValueError(f"low, threshold and high must satisfy 0 <= low < threshold < high <= 1, got {low!r}, "
                         f"{threshold!r} and {high!r}")
    return {"drop_rank": (activities >= threshold).sum(dim=1),
            "middling": ((activities > low) & (activities < high)).sum(dim=1)}
