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
from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_class_index, check_positive_int, check_tensor
from ..routing import Router, RoutingResult, bin_centres
from ..routing.procedure import check_quantize_levels
from ..training import outputs

__all__ = ["quantize", "quantized_inference", "CollectedParseTrees", "collect_parse_trees", "entropy_ceiling",
           "parse_tree_keys", "parse_tree_dictionary", "keys_per_class", "dictionary_entropy", "routing_entropy",
           "class_parse_tree", "coupling_saliency"]


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


class CollectedParseTrees(NamedTuple):
    """What :func:`collect_parse_trees` keeps of one pass over a dataset, on the CPU. Chapter 05.

    ``couplings`` ``(N, I, J)``: every image's couplings of the last routing layer, as asked (the parse trees as the
    network offers them, or as its router returned them), or None when not kept; ``dynamics``: the couplings chapter
    04's routing dynamics reads, or None (not asked, or a network that does not route); ``predictions`` and
    ``labels`` ``(N,)``; ``levels`` and ``normalize_over``: the network's :class:`~capsule_lab.models.ParseTrees`
    fields; ``classes``: the number of class capsules.
    """

    couplings: Optional[torch.Tensor]
    dynamics: Optional[torch.Tensor]
    predictions: torch.Tensor
    labels: torch.Tensor
    levels: int
    normalize_over: str
    classes: int


_KEEP = ("trees", "routed", None)


def collect_parse_trees(model: nn.Module, data, batch_size: int = 500, device=None, amp: bool = False,
                        keep: Optional[str] = "trees", dynamics: bool = False,
                        each_batch: Optional[Callable] = None) -> CollectedParseTrees:
    """The one pass that collects a trained network's parse trees over ``data`` (a reduction of
    :func:`capsule_lab.training.outputs`: evaluation mode, no gradient, ``device``, ``amp``), for any network with a
    ``parse_trees(output)`` method (every :class:`~capsule_lab.models.CapsuleNetwork`, whatever its routers).

    ``keep``: ``"trees"`` keeps the couplings as the network offers them as parse trees (``ParseTrees.couplings``:
    rows renormalised over the outputs for a router that normalises over the inputs), ``"routed"`` as its router
    returned them (``ParseTrees.routed``: under :func:`quantized_inference`, the bin centres the routing used; the
    trees where the network offers none), None keeps no couplings (enough for predictions). ``dynamics=True`` also keeps
    ``ParseTrees.dynamics``. ``each_batch(images, labels, output)`` is called on every batch, for what a caller
    reduces beside the trees (a loss, the capsules' lengths). Chapter 05's REM measures and chapter 08's bench read
    their trees here; :func:`routing_entropy` and :func:`parse_tree_dictionary` take the result's ``couplings`` and
    ``predictions``. Chapter 05.
    """
    if keep not in _KEEP:
        raise ValueError(f"keep must be one of {list(_KEEP)}, got {keep!r}")
    if not callable(getattr(model, "parse_trees", None)):
        raise ValueError(f"model must offer parse_trees(output) (a capsule_lab.models.CapsuleNetwork), "
                         f"got {type(model).__name__}")
    if each_batch is not None and not callable(each_batch):
        raise ValueError(f"each_batch must be a function of (images, labels, output), got {each_batch!r}")
    couplings, moves, predictions, labels = [], [], [], []
    parse, classes = None, 0
    for x, y, out in outputs(model, data, batch_size, device, amp):
        if keep is not None or dynamics or parse is None:
            parse = model.parse_trees(out)
        if keep is not None:
            couplings.append((parse.couplings if keep == "trees" or parse.routed is None else parse.routed).cpu())
        if dynamics and parse.dynamics is not None:
            moves.append(parse.dynamics.cpu())
        predictions.append(out.scores.argmax(dim=1).cpu())
        labels.append(y.cpu())
        classes = out.scores.shape[1]
        if each_batch is not None:
            each_batch(x, y, out)
    if not labels:
        raise ValueError("cannot collect parse trees from an empty dataset")
    return CollectedParseTrees(torch.cat(couplings) if keep is not None else None,
                               torch.cat(moves) if moves else None, torch.cat(predictions), torch.cat(labels),
                               parse.levels, parse.normalize_over, int(classes))


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
