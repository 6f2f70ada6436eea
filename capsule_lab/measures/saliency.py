"""Grad-CAM beside REM's coupling saliency, and how much the two maps agree over many images.

Taught in chapter 05, after Renzulli, Tartaglione and Grangetto (the REM paper), §3.2.1: the coupling saliency
of its eq. 16 (:func:`capsule_lab.measures.parse_trees.coupling_saliency`) is a *built-in* explanation, read off one
forward pass; Grad-CAM (Selvaraju et al.) weighs a layer's activations by the gradient of the class score and needs a
backward pass. Here Grad-CAM is Captum's ``captum.attr.LayerGradCam`` on the primary capsules'
convolution, whose output has the same spatial grid as eq. 16's map, so the two explain the same positions:

    w_k = mean over (m, n) of ∂‖v_ŷ‖ / ∂A_k(m, n),        L(m, n) = relu(Σ_k w_k · A_k(m, n)),

both upsampled bilinearly to the image size (:func:`grad_cam`, :func:`coupling_saliency_maps`).

How much two saliency maps agree, image by image: :func:`rank_correlation` (Spearman's ρ of the pixels, ties
get their average rank) and :func:`top_k_overlap` (the share of one map's most salient pixels that are also
among the other's); :func:`saliency_agreement` summarises both over a batch, beside what two unrelated maps
would give by chance. Whether a map looks at the object, the paper's Fig. 5 claim for REM against Q (§4.3.4):
:func:`saliency_on_object`, the share of a map's saliency on the digit's own pixels, beside the same share on
another image's digit (the shuffled-pair baseline).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from captum.attr import LayerGradCam
from torch import nn

from .._checks import check_tensor
from ..models import CapsNet
from ..training import eval_mode
from .parse_trees import coupling_saliency

__all__ = ["grad_cam", "coupling_saliency_maps", "rank_correlation", "top_k_overlap", "saliency_agreement",
           "saliency_on_object"]


def _check_model(model) -> CapsNet:
    if not isinstance(model, CapsNet):
        raise ValueError(f"model must be a capsule_lab.models.CapsNet, got {type(model).__name__}")
    return model


def _check_images(model: CapsNet, images) -> torch.Tensor:
    c = model.config
    shape = f"(B, {c.in_channels}, {c.image_size}, {c.image_size})"
    check_tensor(images, "images", shape, sizes=(None, c.in_channels, c.image_size, c.image_size),
                 floating=True, nonempty=True)
    return images


def grad_cam(model: CapsNet, images: torch.Tensor, targets: torch.Tensor | None = None,
             layer: nn.Module | None = None) -> torch.Tensor:
    """Grad-CAM maps of a CapsNet, by Captum's ``captum.attr.LayerGradCam``, upsampled to the image size.

    The class score is the class capsule's length ``‖v_j‖`` (the forward function returns ``lengths``); the
    target is each image's predicted class, or ``targets`` ``(B,)``. The layer is by default
    ``model.primary.conv``, the primary capsules' convolution (before the squash): its output has the grid
    ``(H', W')`` of the primary capsules, the same grid on which the coupling saliency of the REM paper's
    eq. 16 lives, so the two maps explain the same positions. As Grad-CAM does, the gradients are averaged
    over the positions into one weight per channel, the channels are summed with those weights, and the result
    is ReLU'd (``relu_attributions=True``); then it is upsampled bilinearly (``align_corners=False``, as
    :func:`capsule_lab.measures.parse_trees.coupling_saliency`) to the image size.

    images ``(B, C, H, W)`` as the model takes them. Runs in evaluation mode (the model's mode is given back);
    each image's routing is its own, so every map is the gradient of that image's own score. Returns a
    detached ``(B, H, W)`` tensor. Chapter 05.
    """
    _check_model(model)
    _check_images(model, images)
    layer = model.primary.conv if layer is None else layer
    if not isinstance(layer, nn.Module) or not any(m is layer for m in model.modules()):
        raise ValueError("layer must be a torch.nn.Module inside model, e.g. model.primary.conv")
    J = model.config.classes
    with eval_mode(model), torch.enable_grad():
        if targets is None:
            with torch.no_grad():
                targets = model(images).lengths.argmax(dim=1)
        check_tensor(targets, "targets", f"(B,) = ({images.shape[0]},)", sizes=(images.shape[0],))
        if targets.is_floating_point() or targets.dtype == torch.bool or (
                targets.numel() and (targets.min() < 0 or targets.max() >= J)):
            raise ValueError(f"targets must be integer class indices in [0, {J}) of shape (B,)")
        cam = LayerGradCam(lambda x: model(x).lengths, layer)
        inputs = images.detach().clone().requires_grad_(True)
        maps = cam.attribute(inputs, target=targets.long(), relu_attributions=True)      # (B, 1, H', W')
    maps = F.interpolate(maps, size=tuple(images.shape[-2:]), mode="bilinear", align_corners=False)
    return maps[:, 0].detach()


@torch.no_grad()
def coupling_saliency_maps(model: CapsNet, images: torch.Tensor, levels: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    """The REM paper's coupling saliency (eq. 16, :func:`capsule_lab.measures.parse_trees.coupling_saliency`) of every
    image, at the image size: ``(maps (B, H, W), predictions (B,))``.

    Runs ``model`` in evaluation mode and backtracks from the predicted class: each position of the primary
    capsules' ``g × g`` grid (``g = model.config.primary_grid``) gets the mean over its capsule types of the
    capsule's length times its quantised coupling (``levels`` levels) to the predicted class, upsampled
    bilinearly. images ``(B, C, H, W)``. Chapter 05.
    """
    _check_model(model)
    _check_images(model, images)
    g = model.config.primary_grid
    with eval_mode(model):
        out = model(images)
    predictions = out.lengths.argmax(dim=1)
    maps = coupling_saliency(out.primary, out.couplings, predictions, grid=(g, g),
                             image_size=tuple(images.shape[-2:]), levels=levels)
    return maps, predictions


def _check_pair(a, b) -> tuple[torch.Tensor, torch.Tensor]:
    check_tensor(a, "a", "(B, H, W)", ndim=3, nonempty=True)
    check_tensor(b, "b", f"(B, H, W) = {tuple(a.shape)}", sizes=tuple(a.shape))
    for name, x in (("a", a), ("b", b)):
        if x.is_complex() or x.dtype == torch.bool:
            raise ValueError(f"{name} must be a real tensor of shape (B, H, W), got dtype {x.dtype}")
        if not torch.isfinite(x.double()).all():
            raise ValueError(f"{name} must be finite, got nan or inf in a map of shape (B, H, W)")
    return a.detach().double().flatten(1), b.detach().double().flatten(1)


def _average_ranks(x: torch.Tensor) -> torch.Tensor:
    """Per row of ``x`` ``(B, N)``, every value's rank from 0, tied values sharing the mean of their ranks."""
    B, N = x.shape
    values, order = torch.sort(x, dim=1, stable=True)
    position = torch.arange(N, device=x.device).expand(B, N)
    new = torch.ones_like(values, dtype=torch.bool)
    new[:, 1:] = values[:, 1:] != values[:, :-1]                 # where a run of equal values starts
    last = torch.ones_like(new)
    last[:, :-1] = new[:, 1:]                                    # where a run ends
    first = torch.where(new, position, 0).cummax(dim=1).values
    end = torch.where(last, position, N - 1).flip(1).cummin(dim=1).values.flip(1)
    return torch.empty_like(values).scatter_(1, order, (first + end).to(values.dtype) / 2)


def rank_correlation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Spearman's rank correlation between two saliency maps of every image: ``(B,)`` in [−1, 1].

    a, b ``(B, H, W)`` (e.g. :func:`grad_cam` and :func:`coupling_saliency_maps`). Per image the ``H·W`` pixels
    of each map are ranked (tied values get the mean of their ranks, so a map's plateau of zeros counts as one
    tie), and ρ is the Pearson correlation of the two rank vectors: 1 when the maps order the pixels alike, −1
    when in reverse. An image where one of the maps is constant has no order to compare: its ρ is ``nan``
    (:func:`saliency_agreement` skips those). Computed in float64. Chapter 05.
    """
    a, b = _check_pair(a, b)
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra, rb = ra - ra.mean(dim=1, keepdim=True), rb - rb.mean(dim=1, keepdim=True)
    denominator = (ra.square().sum(dim=1) * rb.square().sum(dim=1)).sqrt()
    rho = (ra * rb).sum(dim=1) / denominator
    return torch.where(denominator > 0, rho, torch.full_like(rho, math.nan))


def _top_count(fraction, pixels: int) -> int:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"fraction must be a share in (0, 1], got {fraction!r}")
    return max(1, round(fraction * pixels))


def _top_membership(x: torch.Tensor, k: int) -> torch.Tensor:
    """``(B, P)``: the probability that each pixel is among the ``k`` largest of its row when ties at the cut are
    broken uniformly at random — 1 above the k-th largest value, (k − s)/t for the t pixels equal to it (s above it),
    0 below."""
    kth = torch.sort(x, dim=1, descending=True).values[:, k - 1:k]
    above, tied = x > kth, x == kth
    room = (k - above.sum(dim=1, keepdim=True)).double() / tied.sum(dim=1, keepdim=True).double()
    return above.double() + tied.double() * room


def top_k_overlap(a: torch.Tensor, b: torch.Tensor, fraction: float = 0.1) -> torch.Tensor:
    """The share of the most salient pixels of ``a`` that are also among the most salient of ``b``: ``(B,)``.

    a, b ``(B, H, W)``. Per image, the top ``k = max(1, round(fraction · H·W))`` pixels of each map are taken and
    the result is ``|top_k(a) ∩ top_k(b)| / k``: 1 when both maps single out the same pixels, 0 when none in common.
    A map with a plateau at its cut (many pixels equal to its k-th largest value, e.g. zeros) has no single top k:
    the pixels of the plateau are drawn at random, and the result is the expected overlap over those draws,
    ``Σ_p P(p ∈ top_k(a)) · P(p ∈ top_k(b)) / k`` (not the first pixels in memory order). Two maps that have nothing
    to do with each other overlap by ``k / (H·W) ≈ fraction`` on average. Chapter 05.
    """
    a, b = _check_pair(a, b)
    k = _top_count(fraction, a.shape[1])
    return (_top_membership(a.double(), k) * _top_membership(b.double(), k)).sum(dim=1) / k


def saliency_agreement(a: torch.Tensor, b: torch.Tensor, fraction: float = 0.1) -> dict:
    """How much two saliency maps agree over a batch of images, in one dict. Chapter 05.

    a, b ``(B, H, W)``. Per image :func:`rank_correlation` and :func:`top_k_overlap`; images where either map
    is constant (ρ is ``nan``, and the top pixels are an arbitrary pick) are skipped for both. Returns

    - ``spearman_mean``, ``spearman_std``, ``overlap_mean``, ``overlap_std``: over the images kept (the standard
      deviation with ddof 0; ``nan`` when no image is kept);
    - ``images``: how many images were kept; ``skipped``: how many were not;
    - ``fraction`` and ``chance_overlap``: the expected overlap of two unrelated maps, ``k / (H·W)`` with
      ``k = max(1, round(fraction · H·W))`` (``= fraction`` when ``fraction · H·W`` is whole).
    """
    rho = rank_correlation(a, b)
    overlap = top_k_overlap(a, b, fraction)
    kept = ~torch.isnan(rho)
    pixels = a.shape[1] * a.shape[2]

    def stats(x: torch.Tensor) -> tuple[float, float]:
        if not len(x):
            return math.nan, math.nan
        return x.mean().item(), x.std(correction=0).item()

    spearman_mean, spearman_std = stats(rho[kept])
    overlap_mean, overlap_std = stats(overlap[kept])
    return {"spearman_mean": spearman_mean, "spearman_std": spearman_std, "overlap_mean": overlap_mean,
            "overlap_std": overlap_std, "images": int(kept.sum()), "skipped": int((~kept).sum()),
            "fraction": float(fraction), "chance_overlap": _top_count(fraction, pixels) / pixels}


def saliency_on_object(maps: torch.Tensor, images: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """The share of each saliency map's mass that lies on the object: ``(B,)`` in [0, 1].

    maps ``(B, H, W)``, non-negative (Grad-CAM and eq. 16 are); images ``(B, 1, H, W)`` or ``(B, H, W)`` of the
    same size, grey levels. The object is the pixels brighter than ``threshold`` (a digit's strokes); the share is
    Σ map · [object] / Σ map. A map with no mass has no share (``nan``). The chance level depends on how much of
    the image the object covers, so read it against a baseline: the same maps on other images' objects,
    ``saliency_on_object(maps, images.roll(1, dims=0))`` (each map paired with the next image's digit). The paper
    reads REM's saliency as concentrated on the object (§4.3.4, Fig. 5). Chapter 05.
    """
    check_tensor(maps, "maps", "(B, H, W)", ndim=3, nonempty=True)
    check_tensor(images, "images", f"(B, 1, H, W) or (B, H, W) with (B, H, W) = {tuple(maps.shape)}")
    pixels = images[:, 0] if images.dim() == 4 and images.shape[1] == 1 else images
    if tuple(pixels.shape) != tuple(maps.shape):
        raise ValueError(f"images must have shape (B, 1, H, W) or (B, H, W) with (B, H, W) = {tuple(maps.shape)}, "
                         f"got {tuple(images.shape)}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number (a grey level), got {threshold!r}")
    m = maps.detach().double()
    if (m < 0).any() or not torch.isfinite(m).all():
        raise ValueError("maps must be finite and non-negative (a saliency map's mass), got a negative or nan value")
    on = (pixels.detach() > threshold).double()
    total = m.sum(dim=(1, 2))
    share = (m * on).sum(dim=(1, 2)) / total
    return torch.where(total > 0, share, torch.full_like(share, math.nan))
