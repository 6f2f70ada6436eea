"""Chapter 05's graded tasks (REM): their points and kinds, the references against independent computations
(the package's string keys and Counter dictionaries, torch.nn.utils.prune), and the known mistakes each must catch
with its hint (the bug hunt's planted bug among them)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from torch.nn.utils import prune

from capsule_lab.grading import check, tasks_for_chapter
from capsule_lab.grading.engine.judging import credit
from capsule_lab.grading.engine.running import expected, run_student
from capsule_lab.grading.tasks import get_task
from capsule_lab.measures.parse_trees import parse_tree_keys, routing_entropy
from capsule_lab.routing import dynamic_routing

from _wrong_answers import assert_fails_with_hint

POINTS = {"05.quantize_keys": 2, "05.class_entropy": 2, "05.flip_entropy": 1, "05.global_prune": 2,
          "05.entropy_vs_iterations": 2}
KINDS = {"05.quantize_keys": "implement", "05.class_entropy": "bug hunt", "05.flip_entropy": "prediction",
         "05.global_prune": "implement", "05.entropy_vs_iterations": "experiment"}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("05")} == POINTS
    assert {t.id: t.kind for t in tasks_for_chapter("05")} == KINDS


# --- the references against independent computations -----------------------------------------------------

def test_keys_reference_matches_the_packages_string_keys():
    task = get_task("05.quantize_keys")
    for case in task.cases():
        couplings, predictions, levels = case.args
        keys = task.reference(couplings, predictions, levels)
        assert keys.dtype == torch.int64 and keys.shape == couplings.shape[:2]
        assert ["-".join(map(str, row)) for row in keys.tolist()] == parse_tree_keys(couplings, predictions, levels)


def test_keys_on_the_bin_boundaries_round_halves_to_even():
    task = get_task("05.quantize_keys")
    c = torch.tensor([[[0.1, 0.9], [0.5, 0.5], [0.9, 0.1]]], dtype=torch.float64)          # (1, 3, 2)
    assert task.reference(c, torch.tensor([0]), 6).tolist() == [[0, 2, 4]]               # 0.5, 2.5, 4.5
    assert task.reference(c, torch.tensor([1]), 2).tolist() == [[1, 0, 0]]               # 0.9, 0.5, 0.1


def test_entropy_reference_matches_the_package_and_a_hand_count():
    task = get_task("05.class_entropy")
    for case in task.cases():
        keys, predictions, classes = case.args
        entropy, mean = task.reference(keys, predictions, classes)
        counts = {}
        for key, j in zip(map(tuple, keys.tolist()), predictions.tolist()):
            counts.setdefault(j, Counter())[key] += 1
        for j in range(classes):
            n = sum(counts.get(j, Counter()).values())
            want = -sum(m / n * math.log2(m / n) for m in counts[j].values()) if n else 0.0
            assert math.isclose(entropy[j].item(), want, abs_tol=1e-12)
        assert math.isclose(mean.item(), sum(entropy[j].item() for j in counts) / len(counts), abs_tol=1e-12)
        # the same through the package, with couplings whose quantised column is the key
        levels = int(keys.max()) + 1 if keys.max() > 0 else 2
        couplings = torch.zeros(len(keys), keys.shape[1], classes, dtype=torch.float64)
        couplings[torch.arange(len(keys)), :, predictions] = keys.double() / (levels - 1)
        assert math.isclose(routing_entropy(couplings, predictions, levels)[0], mean.item(), abs_tol=1e-12)


def test_entropy_of_the_edge_cases():
    task = get_task("05.class_entropy")
    cases = {c.group: c for c in task.cases()}
    entropy, mean = task.reference(*cases["every image its own key"].args)
    assert torch.allclose(entropy, torch.tensor([2.0, 0, 3.0, 0, 0, math.log2(12)], dtype=torch.float64))
    entropy, mean = task.reference(*cases["classes never predicted"].args)
    assert entropy[[0, 2, 3, 5, 6, 8, 9]].eq(0).all() and math.isclose(mean.item(), entropy[[1, 4, 7]].mean().item())
    one_each, same, mixed = [c for c in task.cases() if c.group == "single images and repeated keys"]
    assert task.reference(*one_each.args)[1].item() == task.reference(*same.args)[1].item() == 0.0
    entropy, mean = task.reference(*mixed.args)                 # 1 image; 4 equal keys; 1-0, 0-1, 1-0, 2-2; none
    assert torch.allclose(entropy, torch.tensor([0, 0, 1.5, 0], dtype=torch.float64)) and mean.item() == 0.5


def test_the_flip_prediction_is_what_the_definitions_give():
    g = torch.Generator().manual_seed(5)
    couplings = torch.softmax(0.05 * torch.randn(64, 32, 10, generator=g, dtype=torch.float64), dim=-1)
    predictions = torch.zeros(64, dtype=torch.long)
    assert ((couplings - 0.1).abs() < 0.03).all()
    assert get_task("05.flip_entropy").reference() == 6.0
    assert math.isclose(routing_entropy(couplings, predictions, 6)[0], 6.0, abs_tol=1e-12)
    assert routing_entropy(couplings, predictions, 11)[0] == 0.0


def _torch_prune(weights, masks, amount):
    """The same step with torch.nn.utils.prune.global_unstructured on modules holding the weights and the masks."""
    holders = []
    for w, m in zip(weights, masks):
        holder = torch.nn.Module()
        holder.weight = torch.nn.Parameter(w.detach().clone())
        prune.custom_from_mask(holder, "weight", m)
        holders.append(holder)
    prune.global_unstructured([(h, "weight") for h in holders], pruning_method=prune.L1Unstructured, amount=amount)
    return tuple(h.weight_mask.bool() for h in holders)


def test_prune_reference_matches_torch_nn_utils_prune():
    task = get_task("05.global_prune")
    for case in task.cases():
        ours, theirs = task.reference(*case.args), _torch_prune(*case.args)
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs)), case.name
        weights, masks, amount = case.args
        before, after = sum(int(m.sum()) for m in masks), sum(int(m.sum()) for m in ours)
        assert before - after == round(amount * before)
        assert all(not (n & ~m).any() for n, m in zip(ours, masks))        # a pruned weight stays pruned


def test_prune_cases_have_no_tie_at_the_threshold():
    task = get_task("05.global_prune")
    for case in task.cases():
        weights, masks, amount = case.args
        new = task.reference(weights, masks, amount)
        magnitude = torch.cat([w.abs().flatten().double() for w in weights])
        kept, now = torch.cat([m.flatten() for m in masks]), torch.cat([m.flatten() for m in new])
        gone, stay = magnitude[kept & ~now], magnitude[now]
        if len(gone) and len(stay):
            assert gone.max() < stay.min(), case.name


def test_the_experiment_reference_is_the_packages_entropy_of_routed_votes():
    task = get_task("05.entropy_vs_iterations")
    g = torch.Generator().manual_seed(3)
    votes = 0.5 * torch.randn(200, 8, 10, 4, generator=g, dtype=torch.float64)
    routed = dynamic_routing(votes, 4)
    predictions = routed.poses.norm(dim=-1).argmax(dim=1)
    assert task.reference(4, 11, 3) == routing_entropy(routed.couplings, predictions, 11)[0]
    assert task.reference(1, 11, 0) == task.reference(1, 6, 1) == 0.0         # uniform couplings: one key


# --- the students' likely mistakes, written independently of the task module ---------------------------

def _column(c, p):
    return c[torch.arange(c.shape[0]), :, p]


def _entropy(keys, predictions, classes, joint=False, log=math.log2, over_all=False, sign=-1.0, by_sum=False,
             base=None, big_endian=False):
    """The entropies by hand; ``base``: each key read as one number in that base (levels from the left when
    ``big_endian``), which merges keys once a level reaches the base."""
    rows = [list(reversed(k)) if big_endian else k for k in keys.tolist()]
    ids = [(sum(k),) if by_sum else (sum(v * base ** i for i, v in enumerate(k)),) if base else tuple(k)
           for k in rows]
    preds = predictions.tolist()
    total = len(preds)
    h = []
    for j in range(classes):
        mine = [k for k, p in zip(ids, preds) if p == j]
        n = total if joint else len(mine)
        h.append(sign * sum(m / n * log(m / n) for m in Counter(mine).values()) if mine else 0.0)
    used = h if over_all else [h[j] for j in set(preds)]
    return torch.tensor(h, dtype=torch.float64), torch.tensor(sum(used) / len(used), dtype=torch.float64)


def _prune(weights, masks, amount, per_tensor=False, of_all=False, signed=False, reprune=False, forget=False,
           largest=False, count=round, inverted=False):
    if per_tensor:
        return tuple(_prune([w], [m], amount)[0] for w, m in zip(weights, masks))
    w = torch.cat([x.flatten().double() for x in weights])
    kept = torch.cat([m.flatten() for m in masks])
    score = w if signed else w.abs()
    if reprune:
        score = score * kept
    pool = list(range(len(w))) if (reprune or forget) else kept.nonzero().flatten().tolist()
    k = count(amount * (len(kept) if of_all else int(kept.sum())))
    pool.sort(key=lambda i: score[i].item(), reverse=largest)
    new = torch.ones_like(kept) if forget else kept.clone()
    new[pool[:k]] = False
    if inverted:
        new = ~new
    out, start = [], 0
    for m in masks:
        out.append(new[start:start + m.numel()].reshape(m.shape))
        start += m.numel()
    return tuple(out)


def _experiment(iterations, levels, seed=0, by_couplings=False, scale=None, log=math.log2, pooled=False):
    g = torch.Generator().manual_seed(seed)
    votes = 0.5 * torch.randn(200, 8, 10, 4, generator=g, dtype=torch.float64)
    routed = dynamic_routing(votes, iterations)
    c = routed.couplings
    p = c.sum(dim=1).argmax(dim=1) if by_couplings else routed.poses.norm(dim=-1).argmax(dim=1)
    keys = torch.round(_column(c, p) * (scale or levels - 1)).long()
    if pooled:
        return _entropy(keys, torch.zeros_like(p), 1, log=log)[1].item()
    return _entropy(keys, p, 10, log=log)[1].item()


WRONG = [
    ("05.quantize_keys", lambda c, p, k: torch.round(_column(c, p) * k).long(), "from 0 to K"),
    ("05.quantize_keys", lambda c, p, k: torch.floor(_column(c, p) * (k - 1)).long(), "*nearest* level"),
    ("05.quantize_keys", lambda c, p, k: (_column(c, p) * (k - 1) + 0.5).floor().long(), "halves to the even"),
    ("05.quantize_keys", lambda c, p, k: torch.round(c.amax(dim=2) * (k - 1)).long(), "whatever its class"),
    ("05.quantize_keys", lambda c, p, k: torch.round(c[:, :, p] * (k - 1)).long(), "(N, I, N)"),
    ("05.quantize_keys", lambda c, p, k: torch.round(c[torch.arange(len(p)), p] * (k - 1)).long(),
     "indexed the input capsules with the class"),
    ("05.quantize_keys", lambda c, p, k: torch.round(_column(c, p) * (k - 1)), "integer level indices"),
    ("05.quantize_keys", lambda c, p, k: torch.round(_column(c, p) * (k - 1)) / (k - 1), "quantised couplings c̃"),
    ("05.class_entropy", lambda k, p, n: _entropy(k, p, n, joint=True), "P(key | ŷ = j)"),     # the planted bug
    ("05.class_entropy", lambda k, p, n: _entropy(k, p, n, log=math.log), "in nats"),
    ("05.class_entropy", lambda k, p, n: _entropy(k, p, n, over_all=True), "predicted at least once"),
    ("05.class_entropy", lambda k, p, n: _entropy(k, p, n, sign=1.0), "negative"),
    ("05.class_entropy", lambda k, p, n: _entropy(k, p, n, by_sum=True), "add up to the same number"),
    ("05.flip_entropy", lambda: 0.0, "centre of a bin"),
    ("05.flip_entropy", lambda: 32.0, "*possible* keys"),
    ("05.flip_entropy", lambda: math.log(64), "in nats"),
    ("05.flip_entropy", lambda: math.log2(6), "one coupling's level"),
    ("05.flip_entropy", lambda: 1.0, "flips between two levels"),
    ("05.flip_entropy", lambda: 64.0, "number of keys"),
    ("05.global_prune", lambda w, m, a: _prune(w, m, a, per_tensor=True), "one threshold over all of them"),
    ("05.global_prune", lambda w, m, a: _prune(w, m, a, of_all=True), "of the weights still kept"),
    ("05.global_prune", lambda w, m, a: _prune(w, m, a, signed=True), "most negative"),
    ("05.global_prune", lambda w, m, a: _prune(w, m, a, reprune=True), "used up part of the count"),
    ("05.global_prune", lambda w, m, a: _prune(w, m, a, forget=True), "came back"),
    ("05.global_prune", lambda w, m, a: _prune(w, m, a, largest=True), "the largest weights"),
    ("05.global_prune", lambda w, m, a: _prune(w, m, a, count=int), "not int(…)"),
    ("05.global_prune", lambda w, m, a: _prune(w, m, a, count=lambda x: math.floor(x + 0.5)), "halves to even"),
    ("05.global_prune", lambda w, m, a: _prune(w, m, a, inverted=True), "True where a weight is pruned"),
    ("05.entropy_vs_iterations", lambda r, k, seed=0: _experiment(r, k, seed, by_couplings=True), "longest pose"),
    ("05.entropy_vs_iterations", lambda r, k, seed=0: _experiment(r, k, seed, scale=k), "K + 1 levels"),
    ("05.entropy_vs_iterations", lambda r, k, seed=0: _experiment(r, k, seed, log=math.log), "in nats"),
    ("05.entropy_vs_iterations", lambda r, k, seed=0: _experiment(r, k, seed, pooled=True), "all the keys together"),
]


@pytest.mark.parametrize("task_id, fn, hint", WRONG, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_its_hint(task_id, fn, hint, capsys):
    assert_fails_with_hint(task_id, fn, hint, capsys)


def test_the_planted_bug_fails_every_case_group():
    task = get_task("05.class_entropy")
    cases = expected(task)
    fraction, failed = credit(task, cases, run_student(task, WRONG[8][1], cases))
    assert fraction == 0 and failed == task.groups()


@pytest.mark.parametrize("base, big_endian", [(10, False), (10, True), (11, False), (11, True)])
def test_keys_read_as_numbers_in_a_small_base_fail(base, big_endian):
    """A key read as one number in base 10 or 11 (from either end) merges keys once a level reaches the base: the
    case of levels up to 20 refuses it; base 21 (above every level) is a right answer."""
    wrong = check("05.class_entropy", lambda k, p, n: _entropy(k, p, n, base=base, big_endian=big_endian),
                  verbose=False)
    assert not wrong.passed and "levels up to 20" in wrong.message
    assert check("05.class_entropy", lambda k, p, n: _entropy(k, p, n, base=21, big_endian=big_endian),
                 verbose=False).passed


def test_an_entropy_that_is_nan_for_unused_keys_gets_the_nonfinite_hint():
    def naive(keys, predictions, classes):
        _, key_id = torch.unique(keys, dim=0, return_inverse=True)
        counts = torch.zeros(classes, int(key_id.max()) + 1, dtype=torch.float64)
        counts.index_put_((predictions, key_id), torch.ones(len(key_id), dtype=torch.float64), accumulate=True)
        p = counts / counts.sum(dim=1, keepdim=True)
        entropy = -(p * torch.log2(p)).sum(dim=1)
        return entropy, entropy.mean()

    result = check("05.class_entropy", naive, verbose=False)
    assert not result.passed and "0 · log₂ 0 counts as 0" in result.message


def test_the_bands(check_draw):
    assert check("05.flip_entropy", lambda: 6.04, verbose=False).passed
    assert not check("05.flip_entropy", lambda: 6.06, verbose=False).passed
    task = get_task("05.entropy_vs_iterations")
    # the reference is refused in check: its answers on the cases check runs (their seeds drawn by the fixture)
    measured = {case.args: task.reference(*case.args) for case in check_draw(task)}
    assert check(task.id, lambda r, k, seed=0: measured[(r, k, seed)] + 0.004, verbose=False).passed
    assert not check(task.id, lambda r, k, seed=0: measured[(r, k, seed)] + 0.006, verbose=False).passed


def test_an_answer_right_except_for_two_levels_earns_its_share():
    def keys_but_not_for_two_levels(c, p, k):
        levels = torch.round(_column(c, p) * (k - 1)).long()
        return levels if k > 2 else torch.zeros_like(levels)

    result = check("05.quantize_keys", keys_but_not_for_two_levels, verbose=False)
    assert not result.passed and result.points == 1.33 and "case groups failed: K = 2" in result.message


@pytest.mark.parametrize("task_id", sorted(POINTS))
def test_the_cases_can_be_built_while_the_answers_are_refused(task_id):
    """The grader's evaluation process refuses the answers for good before it lists a task's case groups."""
    from capsule_lab.grading.engine.refusal import refused

    task = get_task(task_id)
    with refused(task.refused):
        assert task.groups() and len(task.cases()) >= 1


def test_a_prune_that_overwrites_the_input_masks_fails_and_leaves_the_cases_alone():
    """05.global_prune asks to leave the inputs as they are: the right masks written into the input masks and
    returned fail every case (and the cases themselves stay as they were for the next run)."""
    def in_place(weights, masks, amount):
        for mask, new in zip(masks, _prune(weights, masks, amount)):
            mask.copy_(new)
        return tuple(masks)

    task = get_task("05.global_prune")
    before = [[m.clone() for m in case.args[1]] for case in task.cases()]
    result = check("05.global_prune", in_place, verbose=False)
    assert not result.passed and "changed its inputs in place" in result.message
    assert check("05.global_prune", lambda w, m, a: _prune(w, m, a), verbose=False).passed
    assert all(torch.equal(a, b) for case, kept in zip(task.cases(), before) for a, b in zip(case.args[1], kept))
