"""REM, routing entropy minimisation: quantised couplings, parse-tree dictionaries, their entropy, and pruning.

Taught in chapter 05, after Renzulli, Tartaglione and Grangetto, "Capsule networks do not need to model
everything" (the REM paper). For every test image ξ the couplings of the last routing layer to the
*predicted* class j, ``c[ξ, :, j]`` (one per input capsule i), are quantised into K levels,

    k = q_K(c) = round(c · (K − 1)),    c̃ = k / (K − 1)     (K = 11: bins of width 0.1 centred on 0, 0.1, …, 1)

(the level k, and its value c̃, the centre of its bin); the levels are joined into a string, the image's *key* (its
parse tree). Per predicted class the keys are counted (the
class's *dictionary*); the class's entropy, in bits, is that of the keys' frequencies,

    H_j = − Σ_key P(key | ŷ = j) · log₂ P(key | ŷ = j),

and the network's entropy is the mean of H_j over the classes predicted at least once. The number of keys of a
class is the number of distinct parse trees it uses.

REM lowers that entropy by pruning: the paper prunes the backbone's convolution, the primary capsules'
convolution and the class capsules' matrices W (not the biases, not a decoder) by iterative magnitude
pruning (its code with LOBSTER, :func:`lobster_step`), here simplified to :func:`global_magnitude_prune` built on
:mod:`torch.nn.utils.prune` (a mask per parameter, kept at zero while training goes on;
:func:`make_pruning_permanent` folds the masks into the weights). :func:`sparsity` reports the pruned share per
parameter and overall. Its Q and REM networks route with the values c̃ at inference: :func:`quantized_inference`.
"""

from __future__ import annotations

import math
from collections import Counter
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import prune

from ._checks import check_class_index, check_positive_int, check_tensor
from .layers import CapsuleLayer
from .routing import Router, RoutingResult, bin_centres
from .routing.procedure import check_quantize_levels

__all__ = ["quantize", "quantized_inference", "entropy_ceiling", "parse_tree_keys", "parse_tree_dictionary", "keys_per_class",
           "dictionary_entropy", "routing_entropy", "class_parse_tree", "coupling_saliency", "prunable_parameters",
           "global_magnitude_prune", "sparsity", "make_pruning_permanent", "snip_prune", "lobster_step"]


def _check_levels(levels: int) -> int:
    return check_positive_int(levels, "levels", minimum=2)


def quantize(c: torch.Tensor, levels: int = 11) -> torch.Tensor:
    """Quantise couplings in [0, 1] into ``levels`` uniform levels: integer indices ``round(c · (levels − 1))``.

    ``c`` any shape, floating point, every value in [0, 1] (a coupling is a probability); returns int64 of the
    same shape. Ties round half to even (``torch.round``). The paper's code bins with ``torch.bucketize`` on the
    edges (a tie goes down) for inference and ``np.digitize`` (a tie goes up) for its dictionary; the three differ only
    for a coupling exactly on a bin edge. Chapter 05.
    """
    _check_levels(levels)
    check_tensor(c, "c", "(...) with values in [0, 1]", floating=True)
    if c.numel() and (not torch.isfinite(c).all() or c.min() < 0 or c.max() > 1):
        raise ValueError("c must hold couplings in [0, 1], got values outside it (or nan)")
    return torch.round(c.detach() * (levels - 1)).long()


def _quantised_step(levels: int):
    """A forward hook that runs a router's last step again on its couplings' bin centres among ``levels`` levels."""
    def hook(router: Router, args: tuple, kwargs: dict, result: RoutingResult) -> RoutingResult:
        votes = args[0] if args else kwargs["votes"]
        activations = args[1] if len(args) > 1 else kwargs.get("activations")
        step = router.combine_votes(votes, bin_centres(result.couplings, levels), activations, result.state)
        return step._replace(logits=result.logits, history=result.history)
    return hook


@contextmanager
def quantized_inference(model: nn.Module, levels: int = 11):
    """Inside the ``with``, every router of ``model`` routes its last step with the couplings replaced by their bin
    centres among ``levels`` levels (:func:`capsule_lab.routing.bin_centres`): the REM paper's quantised inference
    (§3.1.2; its code does the same before the weighted sum). The model's accuracy then depends on K, the paper's
    Fig. 7; the earlier iterations, and so the couplings' levels, are those of ordinary inference.

    Quantisation is a hook of the routing step, not of one router: each router's result is routed again by its
    :meth:`~capsule_lab.routing.Router.combine_votes` (Sabour's ``squash(Σ_i c_ij û_{j|i} + b_j)`` for dynamic
    routing, the same numbers its last iteration computes) on the quantised couplings, so any router whose result has
    couplings runs quantised. While the hook is in place a layer routes the votes themselves (a hooked router is
    never asked for its vote-free form). Removes every hook on leaving, even after an error. Chapter 05.

    ``with quantized_inference(model, 11): outputs = model(images)``
    """
    check_quantize_levels(levels)
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be an nn.Module with routers, got {type(model).__name__}")
    routers = [m for m in model.modules() if isinstance(m, Router)]
    if not routers:
        raise ValueError("model has no router to quantise (quantised inference acts on a router's couplings)")
    handles = []
    try:
        for router in routers:
            handles.append(router.register_forward_hook(_quantised_step(levels), with_kwargs=True))
        yield model
    finally:
        for handle in handles:
            handle.remove()


def entropy_ceiling(classes) -> float:
    """The most parse-tree entropy a set of images allows, keyed by ``classes`` (a 1-D tensor or sequence of class
    indices, one per image: the predicted classes the trees are keyed by, or the labels where predictions were not
    recorded): a class with n images has at most n keys, so H ≤ log₂ n (every image its own parse tree); the mean over
    the classes present. The one ceiling of every entropy claim (chapters 04, 05 and 08). Chapter 05.
    """
    classes = [int(x) for x in (classes.tolist() if hasattr(classes, "tolist") else classes)]
    if not classes:
        raise ValueError("classes must hold one class index per image, got none")
    counts = [classes.count(c) for c in sorted(set(classes))]
    return sum(math.log2(n) for n in counts) / len(counts)


def _check_couplings(couplings: torch.Tensor, predictions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_tensor(couplings, "couplings", "(N, I, J)", ndim=3, floating=True)
    check_tensor(predictions, "predictions", f"(N,) = ({couplings.shape[0]},)", sizes=(couplings.shape[0],))
    if predictions.is_floating_point() or predictions.dtype == torch.bool:
        raise ValueError(f"predictions must be integer class indices of shape (N,), got dtype {predictions.dtype}")
    J = couplings.shape[2]
    if predictions.numel() and (predictions.min() < 0 or predictions.max() >= J):
        raise ValueError(f"predictions must be class indices in [0, {J}), got values outside it")
    return couplings, predictions


def parse_tree_keys(couplings: torch.Tensor, predictions: torch.Tensor, levels: int = 11) -> list[str]:
    """Every image's parse-tree key: the quantised couplings ``couplings[n, :, predictions[n]]`` joined by "-".

    couplings ``(N, I, J)`` (the last routing layer's, in [0, 1]); predictions ``(N,)`` the predicted classes.
    Only the predicted class's column is read, so the couplings need not sum to 1 over j here (dynamic
    routing's do). Returns N strings of I indices each, e.g. ``"10-0-3"``. Chapter 05.
    """
    couplings, predictions = _check_couplings(couplings, predictions)
    columns = couplings.detach()[torch.arange(couplings.shape[0]), :, predictions.long()]     # (N, I)
    return ["-".join(map(str, row)) for row in quantize(columns, levels).tolist()]


def parse_tree_dictionary(couplings: torch.Tensor, predictions: torch.Tensor, levels: int = 11) -> dict:
    """The dictionary of parse trees: ``{class: Counter(key → number of images)}`` for every predicted class.

    couplings ``(N, I, J)``, predictions ``(N,)``; keys as :func:`parse_tree_keys`. Chapter 05.
    """
    keys = parse_tree_keys(couplings, predictions, levels)
    dictionary: dict = {}
    for key, label in zip(keys, predictions.tolist()):
        dictionary.setdefault(int(label), Counter())[key] += 1
    return dict(sorted(dictionary.items()))


def keys_per_class(dictionary: dict) -> dict:
    """The number of distinct parse trees (keys) of every class of a :func:`parse_tree_dictionary`. Chapter 05."""
    _check_dictionary(dictionary)
    return {label: len(counter) for label, counter in dictionary.items()}


def _check_dictionary(dictionary) -> None:
    if not isinstance(dictionary, dict) or not all(isinstance(c, Counter) for c in dictionary.values()):
        raise ValueError("dictionary must be {class: Counter(key → count)}, as parse_tree_dictionary returns")


def dictionary_entropy(dictionary: dict) -> dict:
    """The entropy in bits of every class's key frequencies, ``{class: H_j}``. Chapter 05."""
    _check_dictionary(dictionary)
    entropy = {}
    for label, counter in dictionary.items():
        total = sum(counter.values())
        entropy[label] = 0.0 - sum(n / total * math.log2(n / total) for n in counter.values() if n)  # not −0.0
    return entropy


def routing_entropy(couplings: torch.Tensor, predictions: torch.Tensor, levels: int = 11) -> tuple[float, dict]:
    """``(mean over the predicted classes of H_j, {class: H_j})``, in bits, of the parse-tree dictionary.

    couplings ``(N, I, J)``, predictions ``(N,)``. Only classes predicted at least once count. Chapter 05.
    """
    per_class = dictionary_entropy(parse_tree_dictionary(couplings, predictions, levels))
    if not per_class:
        raise ValueError("couplings must hold at least one image, got N = 0")
    return sum(per_class.values()) / len(per_class), per_class


def class_parse_tree(couplings: torch.Tensor, predictions: torch.Tensor, label: int, levels: int = 11) -> torch.Tensor:
    """The parse tree of class ``label`` backtracked from its capsule (the REM paper's §3.2): over the images
    predicted as ``label``, the mean quantised coupling ``quantize(c[n, i, label]) / (levels − 1)`` of every input
    capsule i, a value in [0, 1] per capsule. Edges above a threshold (the paper draws those above 1/J, the
    uniform coupling) are the tree's. couplings ``(N, I, J)``, predictions ``(N,)``; returns ``(I,)``, float64.
    Raises ValueError if no image is predicted as ``label``. Chapter 05.
    """
    couplings, predictions = _check_couplings(couplings, predictions)
    check_class_index(label, couplings.shape[2])
    chosen = predictions == label
    if not chosen.any():
        raise ValueError(f"no image is predicted as class {label}: its parse tree is empty")
    levels_of = quantize(couplings.detach()[chosen][:, :, label], levels).double()          # (n_j, I)
    return levels_of.mean(dim=0) / (levels - 1)


def coupling_saliency(capsules: torch.Tensor, couplings: torch.Tensor, predictions: torch.Tensor,
                      grid: tuple[int, int], image_size: tuple[int, int] | None = None,
                      levels: int = 11) -> torch.Tensor:
    """The REM paper's built-in saliency map (its eq. 16): per image, every position (m, n) of the primary
    capsules' grid gets the mean over the O capsule types there of ‖u_(m,n,o)‖ · c̃_(m,n,o),j, the capsule's
    length times its quantised coupling (``quantize(c) / (levels − 1)``) to the predicted class j,

        E_(m,n) = (1/O) Σ_o ‖u_(m,n,o)‖ · c̃_(m,n,o),j ,

    then upsampled bilinearly to ``image_size`` (if given).

    capsules ``(B, I, D)`` ordered by (row, column, type) as :func:`capsule_lab.conv_to_capsules` makes them,
    ``I = H·W·O``; couplings ``(B, I, J)``; predictions ``(B,)``; grid ``(H, W)``. Returns ``(B, H, W)``, or
    ``(B, *image_size)``. Chapter 05.
    """
    couplings, predictions = _check_couplings(couplings, predictions)
    B, I, J = couplings.shape
    check_tensor(capsules, "capsules", f"(B, I, D) = ({B}, {I}, D)", sizes=(B, I, None), floating=True)
    if (not isinstance(grid, (tuple, list)) or len(grid) != 2
            or any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in grid) or I % (grid[0] * grid[1])):
        raise ValueError(f"grid must be (H, W), two positive integers with H·W dividing I = {I}, got {grid!r}")
    H, W = grid
    coupling = couplings.detach()[torch.arange(B), :, predictions.long()]                    # (B, I)
    weighted = capsules.detach().norm(dim=-1) * quantize(coupling, levels).to(capsules.dtype) / (levels - 1)
    saliency = weighted.view(B, H, W, I // (H * W)).mean(dim=-1)                             # (B, H, W)
    if image_size is None:
        return saliency
    return F.interpolate(saliency.unsqueeze(1), size=tuple(image_size), mode="bilinear", align_corners=False)[:, 0]


# ---------------------------------------------------------------- pruning (torch.nn.utils.prune)

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
        from .models import capsnet_loss as loss_fn
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

