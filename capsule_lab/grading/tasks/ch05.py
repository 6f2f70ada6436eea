"""The graded exercises of chapter 05 (REM, routing entropy minimisation): ``05.quantize_keys``,
``05.class_entropy`` (a bug hunt), ``05.flip_entropy`` (a prediction), ``05.global_prune`` and
``05.entropy_vs_iterations`` (a mini-experiment).

Each task has the course's reference (:mod:`capsule_lab.measures.parse_trees`'s quantiser, dictionary and entropy; for
the pruning step a sort of |w| written here, which the tests compare with
:func:`torch.nn.utils.prune.global_unstructured`), seeded random and edge-case inputs (couplings exactly on a bin
boundary, one image per class, all-equal keys, classes never predicted, K = 2, amounts 0 and 1) in named case groups,
known wrong answers with their hints and a general hint pointing to its section of chapter 05. Letters are the
chapter's: input capsule i of I, class j of J, K quantisation levels, H_j the entropy of class j's parse trees; and the
paper's ξ for one of N images. Registered with :func:`capsule_lab.grading.tasks.registry.register` on import.
"""

from __future__ import annotations

import math
from collections import Counter

import torch

from ...measures.parse_trees import (class_parse_tree, coupling_saliency, dictionary_entropy, keys_per_class,
                                     parse_tree_dictionary, parse_tree_keys, quantize, routing_entropy)
from ...measures.pruning import global_magnitude_prune
from ...routing import dynamic_routing
from .registry import Case, Task, WrongAnswer, case_seed, generator, randn, register
from .questions import Question, register_questions

#: The package's functions that quantise couplings, build or measure the dictionary: refused while the keys, the
#: entropy and the experiment are checked (coupling_saliency and class_parse_tree quantise too).
_REM_ANSWERS = (quantize, parse_tree_keys, parse_tree_dictionary, keys_per_class, dictionary_entropy,
                routing_entropy, class_parse_tree, coupling_saliency)


def _couplings(g, n, i, j, dtype=torch.float32, scale=2.0):
    """Couplings of dynamic routing's kind: a softmax over the J classes of random logits, ``(n, i, j)``."""
    return torch.softmax(randn(g, n, i, j, dtype=torch.float64, scale=scale), dim=-1).to(dtype)


def _column(couplings, predictions):
    """``couplings[ξ, :, predictions[ξ]]`` for every image ξ: ``(N, I)``."""
    return couplings[torch.arange(couplings.shape[0]), :, predictions]


# --- 05.quantize_keys -------------------------------------------------------------------------------

def _ref_keys(couplings, predictions, levels):
    return quantize(_column(couplings, predictions), levels)


def _stand_in_keys(couplings, predictions, levels):
    """05.quantize_keys in plain torch: where the student's ``quantized_keys`` does not pass, 05's mini-experiment
    runs with this in its place (``Task.stand_in``), so one mistake costs one task."""
    return torch.round(_column(couplings, predictions) * (levels - 1)).long()


def _two_class(values, predictions):
    """Couplings ``(N, I, 2)`` whose column 0 holds ``values`` (N, I) and column 1 their complement."""
    values = torch.tensor(values, dtype=torch.float64)
    return torch.stack([values, 1 - values], dim=-1), torch.tensor(predictions)


def _keys_cases() -> list:
    g = generator(501)

    def draw(name, n, i, j, levels, dtype, group, ties=(), scale=2.0):
        """Random couplings and predictions; ``ties``: values exact in binary on a bin boundary of ``levels``,
        written into the predicted column of the first images."""
        c = _couplings(g, n, i, j, dtype, scale)
        predictions = torch.randint(j, (n,), generator=g)
        for k, tie in enumerate(ties):
            c[k, k % i, predictions[k]] = tie
        return Case(name, (c, predictions, levels), grad="none", group=group)

    # the uniform coupling 1/J = 0.1 at K = 6 (0.5 → 0), and ties exact in binary at K = 6, 5, 3
    six, six_pred = _two_class([[0.1, 0.5, 0.9], [0.9, 0.1, 0.5], [0.5, 0.9, 0.1], [0.1, 0.1, 0.5]], [0, 1, 0, 1])
    five, five_pred = _two_class([[0.125, 0.375, 0.625, 0.875], [0.875, 0.625, 0.375, 0.125]], [0, 1])
    three, three_pred = _two_class([[0.25, 0.75, 0.5], [0.75, 0.25, 0.5]], [1, 0])
    # K = 2: couplings 0, 1 and 0.5 (round(0.5) = 0), one input capsule, random ones near 1/2
    ends = torch.nn.functional.one_hot(torch.tensor([[0, 1, 2], [2, 2, 0]]), 3).double()    # (2, 3, 3): 0 or 1
    half = torch.full((3, 1, 2), 0.5, dtype=torch.float64)
    return [
        draw("random couplings (N=20, I=6, J=4), some 0.25 and 0.75, K = 11, float32", 20, 6, 4, 11, torch.float32,
             "float32", ties=(0.25, 0.75, 0.25)),
        draw("random couplings (N=30, I=8, J=5), some 0.125 and 0.375, K = 21, float32", 30, 8, 5, 21, torch.float32,
             "float32", ties=(0.125, 0.375)),
        draw("random couplings (N=50, I=32, J=10), some 0.25 and 0.75, K = 11, float64", 50, 32, 10, 11,
             torch.float64, "float64", ties=(0.75, 0.25)),
        Case("couplings 0.1, 0.5 and 0.9 (N=4, I=3, J=2), K = 6, float64", (six, six_pred, 6), grad="none",
             group="float64"),
        Case("couplings on the boundaries of K = 5 (N=2, I=4, J=2), float64", (five, five_pred, 5), grad="none",
             group="float64"),
        Case("couplings on the boundaries of K = 3 (N=2, I=3, J=2), float64", (three, three_pred, 3), grad="none",
             group="float64"),
        Case("couplings exactly 0 and 1 (N=2, I=3, J=3), K = 2, float64", (ends, torch.tensor([1, 2]), 2),
             grad="none", group="K = 2"),
        Case("one input capsule, couplings 0.5 (N=3, I=1, J=2), K = 2, float64", (half, torch.tensor([0, 1, 1]), 2),
             grad="none", group="K = 2"),
        draw("random couplings (N=25, I=5, J=2), K = 2, float32", 25, 5, 2, 2, torch.float32, "K = 2", scale=0.5),
    ]


def _keys_k_levels(c, p, levels):
    return torch.round(_column(c, p) * levels).long()


def _keys_truncated(c, p, levels):
    return (_column(c, p) * (levels - 1)).long()


def _keys_half_up(c, p, levels):
    return torch.floor(_column(c, p) * (levels - 1) + 0.5).long()


def _keys_largest_coupling(c, p, levels):
    return torch.round(c.max(dim=-1).values * (levels - 1)).long()


def _keys_every_prediction(c, p, levels):
    return torch.round(c[:, :, p] * (levels - 1)).long()


def _keys_input_axis(c, p, levels):
    return torch.round(c[torch.arange(c.shape[0]), p] * (levels - 1)).long()


def _keys_float(c, p, levels):
    return torch.round(_column(c, p) * (levels - 1))


def _keys_values(c, p, levels):
    return torch.round(_column(c, p) * (levels - 1)) / (levels - 1)


_KEYS_WRONG = (
    WrongAnswer("K + 1 levels", _keys_k_levels,
                "your levels run from 0 to K: K levels are 0, 1, …, K − 1, so a coupling of 1 must get level K − 1 "
                "(the bins are 1/(K − 1) wide)."),
    WrongAnswer("truncated", _keys_truncated,
                "you cut c · (K − 1) down to the integer below it: a coupling goes to the *nearest* level "
                "(0.19 at K = 11 is level 2, not 1)."),
    WrongAnswer("round half up", _keys_half_up,
                "only the couplings exactly halfway between two levels come out wrong: the task rounds with "
                "torch.round, which sends halves to the even level, so 0.1 at K = 6 (0.5) is level 0 (the paper's "
                "code bins with torch.bucketize and np.digitize instead: chapter 05, §2 quantising couplings by hand)."),
    WrongAnswer("each input capsule's largest coupling", _keys_largest_coupling,
                "you took each input capsule's largest coupling, whatever its class: the key reads the coupling of "
                "every input capsule to the *predicted* class of that image."),
    WrongAnswer("every prediction for every image", _keys_every_prediction,
                "couplings[:, :, predictions] reads the predicted class of every image for every image (shape "
                "(N, I, N)): pick image ξ's own class, together with image ξ."),
    WrongAnswer("class on the input axis", _keys_input_axis,
                "you indexed the input capsules with the class: couplings are (N, I, J), images first, input capsules "
                "i second, classes j last."),
    WrongAnswer("float levels", _keys_float,
                "the right levels, but as floating-point numbers: a key is made of integer level indices (int64)."),
    WrongAnswer("quantised couplings", _keys_values,
                "you returned the quantised couplings c̃ in [0, 1]; the key is made of the level indices 0 … K − 1."),
)


# --- 05.class_entropy (bug hunt) ---------------------------------------------------------------------

def _ref_class_entropy(keys, predictions, classes):
    dictionary: dict = {}
    for key, j in zip(keys.tolist(), predictions.tolist()):
        dictionary.setdefault(int(j), Counter())["-".join(map(str, key))] += 1
    per_class = dictionary_entropy(dictionary)
    entropy = torch.zeros(classes, dtype=torch.float64)
    for j, h in per_class.items():
        entropy[j] = h
    return entropy, torch.tensor(sum(per_class.values()) / len(per_class), dtype=torch.float64)


def _counts(keys, predictions, classes, key_id=None):
    """The dictionary as a table: counts[j, m] = images predicted j whose key is distinct key m."""
    if key_id is None:
        key_id = torch.unique(keys, dim=0, return_inverse=True)[1]
    counts = torch.zeros(classes, int(key_id.max()) + 1, dtype=torch.float64)
    counts.index_put_((predictions, key_id), torch.ones(len(key_id), dtype=torch.float64), accumulate=True)
    return counts


def _stand_in_class_entropy(keys, predictions, classes):
    """05.class_entropy in plain torch, the stand-in for a ``class_entropy`` that does not pass (``Task.stand_in``)."""
    return _entropy_of(_counts(keys, predictions, classes))


def _entropy_of(counts, log=torch.log2, sign=-1.0, over_all=False):
    total = counts.sum(dim=1, keepdim=True).clamp_min(1)
    p = counts / total
    terms = torch.where(p > 0, p * log(p.clamp_min(1e-300)), torch.zeros_like(p))
    entropy = sign * terms.sum(dim=1)
    predicted = counts.sum(dim=1) > 0
    return entropy, entropy.mean() if over_all else entropy[predicted].mean()


def _entropy_nats(keys, predictions, classes):
    return _entropy_of(_counts(keys, predictions, classes), log=torch.log)


def _entropy_all_classes(keys, predictions, classes):
    return _entropy_of(_counts(keys, predictions, classes), over_all=True)


def _entropy_negative(keys, predictions, classes):
    return _entropy_of(_counts(keys, predictions, classes), sign=1.0)


def _entropy_level_sum(keys, predictions, classes):
    key_id = torch.unique(keys.sum(dim=1), return_inverse=True)[1]
    return _entropy_of(_counts(keys, predictions, classes, key_id))


def _entropy_cases() -> list:
    g = generator(502)

    def keys(n, i, levels):
        return torch.randint(levels, (n, i), generator=g)

    # class 0: one image; class 1: four images with one key; class 2: keys whose levels add up alike; class 3: none
    mixed = torch.tensor([[4, 4], [2, 2], [2, 2], [2, 2], [2, 2], [1, 0], [0, 1], [1, 0], [2, 2]])
    mixed_pred = torch.tensor([0, 1, 1, 1, 1, 2, 2, 2, 2])
    same = torch.tensor([[3, 0, 10, 1]]).repeat(12, 1)
    distinct = torch.tensor([[(m >> b) & 1 for b in range(5)] for m in range(24)])      # 24 different keys
    distinct_pred = torch.tensor([0] * 4 + [2] * 8 + [5] * 12)[torch.randperm(24, generator=g)]
    # levels up to 20: keys that differ although a number made of their levels in base 10 or 11, read from either
    # end, is the same (a key is a tuple of levels; a base below K + 1 merges keys once a level reaches it)
    wide = torch.tensor([[10, 0, 0], [0, 1, 0], [3, 2, 0], [3, 2, 0],          # class 0: A, B, C, C
                         [0, 0, 10], [0, 1, 0], [11, 0, 0], [0, 0, 11],        # class 1: four keys
                         [7, 7, 7], [7, 7, 7], [20, 0, 0], [0, 2, 0]])         # class 2: A, A, B, C
    return [
        Case("random keys (N=60, I=3, levels 0-2), classes 0-3 of J = 5",
             (keys(60, 3, 3), torch.randint(4, (60,), generator=g), 5), grad="none", group="several classes"),
        Case("random keys (N=200, I=4, K = 2), classes 0-8 of J = 10",
             (keys(200, 4, 2), torch.randint(9, (200,), generator=g), 10), grad="none", group="several classes"),
        Case("keys with levels up to 20 (N=12, I=3, K = 21), classes 0-2 of J = 3",
             (wide, torch.arange(3).repeat_interleave(4), 3), grad="none", group="several classes"),
        Case("one image per class (N=5, I=4), J = 5", (keys(5, 4, 11), torch.arange(5), 5), grad="none",
             group="single images and repeated keys"),
        Case("all 12 keys equal, 3 classes predicted, J = 3", (same, torch.tensor([0, 1, 2] * 4), 3), grad="none",
             group="single images and repeated keys"),
        Case("one image, four equal keys and keys 1-0, 0-1, 1-0, 2-2 in three classes of J = 4",
             (mixed, mixed_pred, 4), grad="none", group="single images and repeated keys"),
        Case("classes 1, 4 and 7 predicted of J = 10 (N=30, I=3, K = 2)",
             (keys(30, 3, 2), torch.tensor([1, 4, 7])[torch.randint(3, (30,), generator=g)], 10), grad="none",
             group="classes never predicted"),
        Case("every image its own key: 4, 8 and 12 images in classes 0, 2, 5 of J = 6",
             (distinct, distinct_pred, 6), grad="none", group="every image its own key"),
    ]


_ENTROPY_WRONG = (
    WrongAnswer("nats", _entropy_nats,
                "your entropies are in nats (natural logarithm): the chapter's are in bits, log₂."),
    WrongAnswer("mean over every class", _entropy_all_classes,
                "a class never predicted has no dictionary: the mean runs over the classes predicted at least once, "
                "not over all J."),
    WrongAnswer("no minus sign", _entropy_negative,
                "your entropies are negative: H = −Σ p log₂ p, and log₂ p ≤ 0."),
    WrongAnswer("keys compared by their sum", _entropy_level_sum,
                "two images share a parse tree only when their keys agree level by level: you merged keys whose "
                "levels merely add up to the same number."),
)


# --- 05.flip_entropy (prediction) --------------------------------------------------------------------

# The measure cell's couplings: a softmax over J = 10 classes of logits 0.05 · N(0, 1), (64, 32, 10) float64 from a
# generator seeded with 5, every one within 0.03 of 1/J = 0.1 (tests/test_tasks_05.py measures them).
_FLIP_IMAGES, _FLIP_INPUTS, _FLIP_LEVELS = 64, 32, 6


def _ref_flip_entropy():
    # 1/J = 0.1 sits on the boundary between levels 0 and 1 at K = 6 (0.1 · 5 = 0.5): a coupling a hair above
    # 0.1 gets level 1, one below gets 0. 32 fair coins per key: 2³² possible keys, so the 64 images have 64
    # different keys (almost surely), each of frequency 1/64, and H = log₂ 64 = 6 bits, the most 64 images allow.
    return math.log2(_FLIP_IMAGES)


_FLIP_WRONG = (
    WrongAnswer("0", lambda: 0.0,
                "that is the answer at K = 11, where 0.1 is the centre of a bin. At K = 6 the levels are 0, 0.2, 0.4, "
                "…: where does 0.1 fall, and what happens to a coupling a hair above or below it?"),
    WrongAnswer("32", lambda: float(_FLIP_INPUTS),
                "32 bits is the entropy of the *possible* keys (32 fair levels); H is measured on the dictionary of "
                "the 64 images: how many different keys can 64 images have, and how often is each one seen?"),
    WrongAnswer("nats", lambda: math.log(_FLIP_IMAGES),
                "in nats; the chapter's entropy is in bits (log₂)."),
    WrongAnswer("log2 K", lambda: math.log2(_FLIP_LEVELS),
                "log₂ K is the most one coupling's level can carry; H is over whole keys, one per image."),
    WrongAnswer("1 bit", lambda: 1.0,
                "one bit is one coupling that flips between two levels; a key has 32 of them."),
    WrongAnswer("64", lambda: float(_FLIP_IMAGES),
                "64 is the number of keys; H is an entropy in bits."),
)


# --- 05.global_prune ---------------------------------------------------------------------------------

def _ref_global_prune(weights, masks, amount):
    return _prune_step(weights, masks, amount)


def _prune_step(weights, masks, amount):
    """One step of global magnitude pruning by a sort of |w| over the kept weights of all the tensors (apart from the
    reference, which is refused while the student's function runs, so that the cases can use it then)."""
    scores = torch.cat([w.detach().abs().flatten().double() for w in weights])
    kept = torch.cat([m.flatten() for m in masks])
    alive = kept.nonzero().squeeze(1)
    k = round(amount * alive.numel())
    order = torch.argsort(scores[alive], stable=True)
    new = kept.clone()
    new[alive[order[:k]]] = False
    return _split(new, masks)


def _split(flat, like) -> tuple:
    out, start = [], 0
    for m in like:
        out.append(flat[start:start + m.numel()].view(m.shape))
        start += m.numel()
    return tuple(out)


def _prune_variant(weights, masks, amount, per_tensor=False, of_all=False, signed=False, reprune=False,
                   ignore_masks=False, largest=False, count=round, inverted=False):
    """The pruning step with one known mistake switched on."""
    if per_tensor:
        return tuple(_prune_variant([w], [m], amount)[0] for w, m in zip(weights, masks))
    values = torch.cat([w.detach().flatten().double() for w in weights])
    kept = torch.cat([m.flatten() for m in masks])
    scores = values if signed else values.abs()
    if reprune:
        scores = scores * kept
    candidates = torch.arange(len(kept)) if (reprune or ignore_masks) else kept.nonzero().squeeze(1)
    n = kept.numel() if of_all else int(kept.sum())
    k = min(count(amount * n), len(candidates))
    order = torch.argsort(scores[candidates], descending=largest, stable=True)
    new = torch.ones_like(kept) if ignore_masks else kept.clone()
    new[candidates[order[:k]]] = False
    return _split(~new if inverted else new, masks)


def _prune_cases() -> list:
    g = generator(503)

    def weights(dtype, shapes=((4, 1, 3, 3), (8, 4, 3, 3), (6, 10, 4, 4)), scales=(0.3, 0.1, 0.05)):
        return [randn(g, *s, dtype=dtype, scale=sc) for s, sc in zip(shapes, scales)]

    def fresh(ws):
        return [torch.ones(w.shape, dtype=torch.bool) for w in ws]

    def earlier(ws, amount, rounds=1, odd=False):
        """Masks from earlier rounds on other weights (so a pruned weight's value is anything); ``odd``: then
        one or more of the kept weights dropped at random, so that the kept count is 1 more than a multiple
        of 4 (half of it ends in .5 and rounds down to even)."""
        masks = fresh(ws)
        for _ in range(rounds):
            masks = list(_prune_step([w + randn(g, *w.shape, dtype=w.dtype, scale=0.02) for w in ws],
                                           masks, amount))
        while odd and sum(int(m.sum()) for m in masks) % 4 != 1:
            flat = masks[2].flatten().clone()
            kept = flat.nonzero().squeeze(1)
            flat[kept[torch.randint(len(kept), (1,), generator=g)]] = False
            masks[2] = flat.view(masks[2].shape)
        return masks

    first32, first64 = weights(torch.float32), weights(torch.float64, ((6, 1, 5, 5), (4, 6, 3, 3), (10, 6, 2, 8)))
    later64 = weights(torch.float64)
    later32 = weights(torch.float32, ((3, 1, 3, 3), (5, 3, 3, 3), (8, 10, 3, 4)))
    edge = weights(torch.float64, ((2, 1, 2, 2), (3, 2, 1, 1), (2, 3, 2, 2)))
    # seven kept weights (0.5 · 7 = 3.5 → 4) and five (0.5 · 5 = 2.5 → 2, Python's round), exact zeros among them
    tiny = [torch.tensor([0.0, -0.02, 0.3]), torch.tensor([[0.05, 0.0], [-0.2, 0.9]]), torch.tensor([0.6, -0.01])]
    tiny_masks = [torch.tensor([True, True, False]), torch.tensor([[True, True], [True, False]]),
                  torch.tensor([True, True])]
    five = [t.double() for t in tiny]
    five_masks = [torch.tensor([True, True, False]), torch.tensor([[True, True], [False, False]]),
                  torch.tensor([False, True])]
    return [
        Case("first round, amount 0.2, float32", (first32, fresh(first32), 0.2), grad="none", group="float32"),
        Case("third round, amount 0.5 of the kept weights, float32", (later32, earlier(later32, 0.5, 2, odd=True), 0.5),
             grad="none", group="float32"),
        Case("first round, amount 0.3, float64", (first64, fresh(first64), 0.3), grad="none", group="float64"),
        Case("second round, amount 0.5 of the kept weights, float64", (later64, earlier(later64, 0.4, odd=True), 0.5),
             grad="none", group="float64"),
        Case("amount 0: nothing more pruned, float64", (edge, earlier(edge, 0.3), 0.0), grad="none",
             group="amounts 0 and 1, and rounding the count"),
        Case("amount 1: everything pruned, float64", (edge, earlier(edge, 0.3), 1.0), grad="none",
             group="amounts 0 and 1, and rounding the count"),
        Case("half of 7 kept weights (3.5 → 4), exact zeros, float32", (tiny, tiny_masks, 0.5), grad="none",
             group="amounts 0 and 1, and rounding the count"),
        Case("half of 5 kept weights (2.5 → 2), float64", (five, five_masks, 0.5), grad="none",
             group="amounts 0 and 1, and rounding the count"),
    ]


_PRUNE_WRONG = (
    WrongAnswer("a threshold per tensor", lambda w, m, a: _prune_variant(w, m, a, per_tensor=True),
                "you pruned the same share of every tensor, each with its own threshold: global pruning puts one "
                "threshold over all of them, so a tensor of small weights loses more than its share."),
    WrongAnswer("share of all weights", lambda w, m, a: _prune_variant(w, m, a, of_all=True),
                "you pruned `amount` of *all* the weights: each round prunes `amount` of the weights still kept "
                "(0.2 per round leaves 0.8, 0.64, 0.51, … of them)."),
    WrongAnswer("signed weights", lambda w, m, a: _prune_variant(w, m, a, signed=True),
                "you pruned the most negative weights: magnitude pruning ranks the weights by |w|."),
    WrongAnswer("pruned weights counted again", lambda w, m, a: _prune_variant(w, m, a, reprune=True),
                "too few new weights pruned: the weights pruned in earlier rounds (zero in w · mask) were ranked "
                "again and used up part of the count. Rank the kept weights only."),
    WrongAnswer("earlier masks ignored", lambda w, m, a: _prune_variant(w, m, a, ignore_masks=True),
                "some weights pruned in an earlier round came back: a pruned weight stays pruned (its mask stays "
                "False), whatever its value."),
    WrongAnswer("largest pruned", lambda w, m, a: _prune_variant(w, m, a, largest=True),
                "you pruned the largest weights: magnitude pruning removes those with the smallest |w|."),
    WrongAnswer("count truncated", lambda w, m, a: _prune_variant(w, m, a, count=int),
                "one weight too few pruned now and then: the count is round(amount × kept), not int(…)."),
    WrongAnswer("count rounded half up", lambda w, m, a: _prune_variant(w, m, a, count=lambda x: math.floor(x + 0.5)),
                "one weight too many when amount × kept ends in .5: the count is Python's round (halves to even), "
                "as in torch.nn.utils.prune."),
    WrongAnswer("masks inverted", lambda w, m, a: _prune_variant(w, m, a, inverted=True),
                "your masks are True where a weight is pruned: a mask is True (1) where the weight is kept, as "
                "torch.nn.utils.prune's weight_mask."),
)


# --- 05.entropy_vs_iterations (mini-experiment) ------------------------------------------------------

_EXP_SHAPE, _EXP_SCALE = (200, 8, 10, 4), 0.5


def _experiment_votes(seed: int) -> torch.Tensor:
    """The experiment's votes: 0.5 · N(0, 1) of shape (N, I, J, D) = (200, 8, 10, 4), float64, from a generator
    seeded with ``seed`` (chapter 05, exercise)."""
    g = torch.Generator().manual_seed(seed)
    return _EXP_SCALE * torch.randn(*_EXP_SHAPE, generator=g, dtype=torch.float64)


def _ref_entropy_vs_iterations(iterations, levels, seed=0):
    routed = dynamic_routing(_experiment_votes(seed), iterations)
    predictions = routed.poses.norm(dim=-1).argmax(dim=1)
    return routing_entropy(routed.couplings, predictions, levels)[0]


def _experiment_variant(iterations, levels, seed=0, predict="lengths", k_levels=False, log=math.log2,
                        pooled=False):
    routed = dynamic_routing(_experiment_votes(seed), iterations)
    c = routed.couplings
    predictions = c.sum(dim=1).argmax(dim=1) if predict == "couplings" else routed.poses.norm(dim=-1).argmax(dim=1)
    scale = levels if k_levels else levels - 1
    keys = [tuple(row) for row in torch.round(_column(c, predictions) * scale).long().tolist()]
    groups = [[k for k, j in zip(keys, predictions.tolist()) if j == cls] for cls in range(c.shape[-1])]
    if pooled:
        groups = [keys]

    def entropy(items):
        n = len(items)
        return -sum(m / n * log(m / n) for m in Counter(items).values())

    values = [entropy(items) if items else 0.0 for items in groups]
    used = values if pooled else [v for v, items in zip(values, groups) if items]
    return sum(used) / len(used)


def _experiment_cases() -> list:
    """Seed 0's cases, and the others on seeds from :func:`~.registry.case_seed` (1, 2 and 3 when published): drawn
    afresh by every check and every grading, so that every group has a case no table of answers holds."""
    plan = [("one iteration", 1, 11, 0, "K = 11"), ("3 iterations", 3, 11, 0, "K = 11"),
            ("5 iterations", 5, 11, 1, "K = 11"), ("one iteration", 1, 6, 1, "K = 6 and K = 21"),
            ("2 iterations", 2, 6, 2, "K = 6 and K = 21"), ("3 iterations", 3, 21, 2, "K = 6 and K = 21"),
            ("5 iterations", 5, 2, 0, "K = 2"), ("5 iterations", 5, 2, 3, "K = 2")]
    seeds = {published: case_seed(published) for published in (0, 1, 2, 3)}
    return [Case(f"{said}, K = {k}, {seeds[seed][1]}", (r, k, seeds[seed][0]), grad="none", group=group)
            for said, r, k, seed, group in plan]


_EXPERIMENT_WRONG = (
    WrongAnswer("prediction from the couplings", lambda r, k, seed=0: _experiment_variant(r, k, seed, "couplings"),
                "the predicted class is the class capsule with the longest pose ‖v_j‖ (routed.poses), not the class "
                "that collects the most coupling."),
    WrongAnswer("K + 1 levels", lambda r, k, seed=0: _experiment_variant(r, k, seed, k_levels=True),
                "your keys have K + 1 levels (round(c · K)): is your quantized_keys from task 1 the one that passes?"),
    WrongAnswer("nats", lambda r, k, seed=0: _experiment_variant(r, k, seed, log=math.log),
                "your entropy is in nats: the chapter's is in bits (log₂)."),
    WrongAnswer("one dictionary for all images", lambda r, k, seed=0: _experiment_variant(r, k, seed, pooled=True),
                "you measured the entropy of all the keys together: H is the entropy of each predicted class's "
                "keys, averaged over the classes."),
)


register(
    Task("05.quantize_keys", "The parse-tree key of every image", 2, _ref_keys, _keys_cases,
         hint="image ξ's key is the column couplings[ξ, :, ŷ_ξ] of its predicted class ŷ_ξ, every coupling quantised "
              "to the level round(c · (K − 1)) (torch.round, halves to even); return int64 (N, I) "
              "(chapter 05, §2 quantising couplings by hand and §3 the dictionary of parse trees).",
         outputs=("keys",), wrong_answers=_KEYS_WRONG, input_names=("couplings",), function="quantized_keys",
         answers=_REM_ANSWERS, stand_in=_stand_in_keys),
    Task("05.class_entropy", "Bug hunt: the entropy of each class's parse trees", 2, _ref_class_entropy,
         _entropy_cases,
         hint="H_j = −Σ_key P(key | ŷ = j) log₂ P(key | ŷ = j) over the keys of the images predicted as j, 0 for a "
              "class never predicted; H is the mean of H_j over the classes predicted at least once "
              "(chapter 05, §3 the dictionary of parse trees).",
         outputs=("entropy per class", "mean entropy"), wrong_answers=_ENTROPY_WRONG,
         nonfinite_hint="nan or inf: 0 · log₂ 0 counts as 0 (a key a class never uses adds nothing), and a class "
                        "never predicted has H_j = 0.",
         function="class_entropy", kind="bug hunt",
         place_hint=("two lines are wrong: one decides which keys are the same parse tree, one turns the counts into "
                     "frequencies."),
         planted=(("key_id = keys @ 10 ** torch.arange(keys.shape[1])",
                   "the line that decides which keys are the same parse tree"),
                  ("p = counts / counts.sum()", "the line that turns the counts into frequencies")),
         answers=_REM_ANSWERS, stand_in=_stand_in_class_entropy),
    Task("05.flip_entropy", "Prediction: the entropy of couplings at the uniform 1/J with K = 6", 1,
         _ref_flip_entropy, lambda: [Case("your prediction", (), grad="none")],
         hint="where does the uniform coupling 1/J = 0.1 fall among the K = 6 levels, what does that do to 64 keys "
              "of 32 couplings each, and what is the entropy of a dictionary of n images that all differ "
              "(chapter 05, §2 quantising couplings by hand and §3 the dictionary of parse trees)?",
         outputs=("entropy (bits)",), wrong_answers=_FLIP_WRONG, function="predict_flip_entropy", kind="prediction",
         returns_number=True, atol=0.05, rtol=0.0),
    Task("05.global_prune", "One step of global magnitude pruning", 2, _ref_global_prune, _prune_cases,
         hint="over the weights still kept (mask True) of all three tensors at once, prune the round(amount × kept) "
              "with the smallest |w| (one threshold for all of them); a weight pruned before stays pruned; return "
              "the three new bool masks (chapter 05, §4 pruning by hand).",
         outputs=("conv mask", "primary mask", "class-capsule mask"), wrong_answers=_PRUNE_WRONG,
         function="global_prune", answers=(global_magnitude_prune,), keeps_inputs=True),
    Task("05.entropy_vs_iterations", "Mini-experiment: the entropy of dynamic routing's parse trees against the "
         "iterations", 2, _ref_entropy_vs_iterations, _experiment_cases,
         hint="route the task's votes, take each image's predicted class from the lengths of the poses, its key with "
              "your quantized_keys and the mean entropy with your class_entropy; return it as a number "
              "(chapter 05, §2 quantising couplings by hand and §3 the dictionary of parse trees).",
         outputs=("mean entropy (bits)",), wrong_answers=_EXPERIMENT_WRONG, function="parse_tree_entropy",
         kind="experiment", returns_number=True, atol=0.005, rtol=0.0, answers=_REM_ANSWERS,
         allowed=("capsule_lab.routing.dynamic_routing",), uses=("05.quantize_keys", "05.class_entropy")),
)


# --- written answers, scored by the instructor with these rubrics (grading.tasks.questions) ---------------------

register_questions(
    Question("05.flip_entropy", "The reasoning behind the prediction of task 3 (couplings at 1/J, K = 6)", (
        "At K = 6 the level of a coupling c is round(5c): 1/J = 0.1 gives 0.5, the boundary between levels 0 and 1, "
        "so each coupling's level depends on which side of 0.1 it falls (a coin toss for these couplings).",
        "With 32 such levels per key, the 64 images almost surely all have different keys: each key once, "
        "H_0 = log₂ 64 = 6 bits, the most 64 images can have.",
        "Says what that shows: the entropy depends on where the bin edges sit (at K = 11 or 21, 0.1 is a bin's "
        "centre, every key is the same and H_0 = 0), not only on the network.",
    ), points=1),
    Question("05.what_low_entropy_shows", "Is the network with the lowest entropy the best parse-tree network?", (
        "H = 0 at one iteration (task 5) comes from the uniform couplings 1/J: every image has the same key, a parse "
        "tree that tells nothing about the image. A low H alone is not the goal.",
        "H depends on the quantisation (task 3: 6 bits or 0 bits from the same couplings, by K), so entropies are "
        "compared only at the same K, and against the ceiling log₂ n_j of each class.",
        "Names a measurement to put beside H before calling lower better — the accuracy (a pruned network must keep "
        "it; the paper reports each entropy beside the accuracy), how far the couplings are from 1/J, or the number "
        "of images per class — and says why.",
    )),
)
