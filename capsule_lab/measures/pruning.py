"""Magnitude pruning, REM's way to low-entropy parse trees, with torch.nn.utils.prune.

Taught in chapter 05. :func:`prunable_parameters` are the weights pruning may remove (every convolution's weight and
every capsule layer's W, outside a decoder; no biases); :func:`global_magnitude_prune` removes a share of those left
by one global magnitude threshold (the REM paper's iterative pruning, one round per call), :func:`snip_prune` prunes
once at initialisation by SNIP's saliency to a given sparsity, :func:`lobster_step` is one LOBSTER update (a decay
where the loss is insensitive to a parameter);
:func:`sparsity` counts what is gone and :func:`make_pruning_permanent` folds the masks into the weights. Every
network prunes the same way, whatever routes it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import prune

from .._checks import check_tensor
from ..layers.dense import CapsuleLayer


def prunable_parameters(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """The parameters REM prunes, as ``(module, "weight")`` pairs: every convolution's weight and every
    capsule layer's W, outside a ``decoder`` submodule; no biases. Chapter 05."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    pairs = []
    for name, module in model.named_modules():
        if name.split(".")[0] == "decoder":
            continue
        if isinstance(module, (nn.Conv2d, CapsuleLayer)):
            pairs.append((module, "weight"))
    if not pairs:
        raise ValueError("model has no convolution or capsule layer to prune")
    return pairs


def global_magnitude_prune(model: nn.Module, amount: float) -> dict:
    """Prune the ``amount`` share of the still-unpruned prunable weights with the smallest ``|w|``, over all of
    them at once (one global threshold), and return :func:`sparsity`.

    Built on :func:`torch.nn.utils.prune.global_unstructured` with ``L1Unstructured``: each pruned parameter
    gets a ``weight_mask`` buffer, and stays zero while training goes on. Called once per round of iterative
    magnitude pruning, e.g. ``amount=0.2`` prunes a fifth of what is left. Chapter 05.
    """
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount <= 1:
        raise ValueError(f"amount must be a share in [0, 1], got {amount!r}")
    pairs = prunable_parameters(model)
    prune.global_unstructured(pairs, pruning_method=prune.L1Unstructured, amount=float(amount))
    return sparsity(model)


def sparsity(model: nn.Module) -> dict:
    """The share of zero weights per prunable parameter (``{"conv.weight": 0.3, ...}``) and ``"overall"``,
    counting the masks of :mod:`torch.nn.utils.prune` where a parameter has one. Chapter 05."""
    names = {module: name for name, module in model.named_modules()}
    report, zeros, total = {}, 0, 0
    for module, attr in prunable_parameters(model):
        weight = getattr(module, attr)
        z, n = int((weight == 0).sum()), weight.numel()
        report[f"{names[module]}.{attr}" if names[module] else attr] = z / n
        zeros, total = zeros + z, total + n
    report["overall"] = zeros / total
    return report


def make_pruning_permanent(model: nn.Module) -> nn.Module:
    """Fold every pruning mask into its weight (:func:`torch.nn.utils.prune.remove`): the zeros stay, the masks
    and the ``weight_orig`` parameters go. Returns the model. Chapter 05."""
    for module, attr in prunable_parameters(model):
        if prune.is_pruned(module) and hasattr(module, f"{attr}_mask"):
            prune.remove(module, attr)
    return model


def snip_prune(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, amount: float,
               loss_fn=None) -> dict:
    """Single-shot pruning at initialisation, SNIP-like (Lee et al. 2019; the REM paper's Figure 10): score every
    prunable weight by its connection sensitivity ``|w · ∂L/∂w|`` on one batch, prune the ``amount`` share with
    the lowest scores over all of them at once, and return :func:`sparsity`.

    ``images`` ``(B, C, H, W)``, ``labels`` ``(B,)``; ``loss_fn(out, images, labels)`` defaults to
    :func:`capsule_lab.models.capsnet_loss`. Built on :func:`torch.nn.utils.prune.global_unstructured` with the
    scores as ``importance_scores``; the masks stay while the network then trains. Chapter 05.
    """
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount <= 1:
        raise ValueError(f"amount must be a share in [0, 1], got {amount!r}")
    check_tensor(images, "images", "(B, C, H, W)", ndim=4, floating=True)
    check_tensor(labels, "labels", f"(B,) = ({images.shape[0]},)", sizes=(images.shape[0],))
    if loss_fn is None:
        from ..models import capsnet_loss as loss_fn
    pairs = prunable_parameters(model)
    if any(prune.is_pruned(module) for module, _ in pairs):
        raise ValueError("model must not be pruned yet: SNIP prunes once, at initialisation")
    model.zero_grad(set_to_none=True)
    loss_fn(model(images, labels), images, labels).backward()
    scores = {}
    for module, attr in pairs:
        weight = getattr(module, attr)
        if weight.grad is None:
            raise ValueError(f"the loss does not depend on {type(module).__name__}.{attr}: cannot score it")
        scores[(module, attr)] = (weight.detach() * weight.grad).abs()
    model.zero_grad(set_to_none=True)
    prune.global_unstructured(pairs, pruning_method=prune.L1Unstructured, importance_scores=scores,
                              amount=float(amount))
    return sparsity(model)


@torch.no_grad()
def lobster_step(model: nn.Module, strength: float) -> None:
    """One LOBSTER update (Tartaglione et al., 2022) on every parameter, with a gradient, of the layers REM
    prunes (:func:`prunable_parameters`' modules: their weights and biases, and a capsule layer's routing pose bias):

        p ← p − strength · p · relu(1 − |∂L/∂p|)

    a decay applied only where the loss is insensitive to the parameter (``|∂L/∂p| < 1``), which drives those
    parameters towards zero for a magnitude threshold to remove. Call it after ``loss.backward()`` and *before*
    ``optimizer.step()``, as the REM paper's public code does (with strength 1e-4 decaying × 0.99 per epoch, and a
    global magnitude threshold each epoch that does not raise the validation loss), where the paper's text says
    iterative magnitude pruning; the paper cites LOBSTER as its pruning method [40]. With pruning masks the update
    acts on ``weight_orig``. Parameters without a gradient are left alone. Chapter 05.
    """
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not strength >= 0:
        raise ValueError(f"strength must be a number >= 0, got {strength!r}")
    seen = set()
    with torch.no_grad():
        for module, _ in prunable_parameters(model):
            for parameter in module.parameters():
                if parameter.grad is not None and id(parameter) not in seen:
                    seen.add(id(parameter))
                    parameter -= strength * parameter * torch.relu(1 - parameter.grad.abs())
