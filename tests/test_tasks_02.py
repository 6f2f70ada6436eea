"""Chapter 02's graded tasks (dynamic routing): their points and kinds, and the known mistakes each must catch
with its hint."""

from __future__ import annotations

import math

import pytest
import torch

import capsule_lab
from capsule_lab.grading import check, tasks_for_chapter

from _wrong_answers import assert_fails_with_hint

POINTS = {"02.couplings": 1, "02.routing_step": 2, "02.dynamic_routing": 2, "02.predict_coupling": 1,
          "02.coupling_sharpness": 1}
KINDS = {"02.couplings": "implement", "02.routing_step": "implement", "02.dynamic_routing": "bug hunt",
         "02.predict_coupling": "prediction", "02.coupling_sharpness": "experiment"}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("02")} == POINTS
    assert {t.id: t.kind for t in tasks_for_chapter("02")} == KINDS


def _couplings_over_inputs(logits):
    return torch.softmax(logits, dim=1)


def _couplings_unstable(logits):
    e = torch.exp(logits)
    return e / e.sum(dim=-1, keepdim=True)


def _couplings_float32_zeros(logits):      # a dtype slip: the result is built in a float32 tensor
    out = torch.zeros(logits.shape)
    out[:] = torch.softmax(logits, dim=-1)
    return out


def _step(inputs, weights, logits, detach=False, update=True, over_inputs=False, squash_s=True):
    votes = (weights.unsqueeze(0) @ inputs[:, :, None, :, None]).squeeze(-1)       # (B, I, J, D)
    c = torch.softmax(logits, dim=1 if over_inputs else -1)
    s = (c.unsqueeze(-1) * votes).sum(1)
    v = capsule_lab.squash(s) if squash_s else s
    agreement = (votes * v.unsqueeze(1)).sum(-1)
    if detach:
        agreement = agreement.detach()
    return v, (logits + agreement) if update else logits


def _routing(votes, iterations, detach=False, update=True, over_inputs=False, extra=0):
    logits = torch.zeros(votes.shape[:3], dtype=votes.dtype)
    for _ in range(iterations + extra):
        c = torch.softmax(logits, dim=1 if over_inputs else -1)
        v = capsule_lab.squash((c.unsqueeze(-1) * votes).sum(1))
        a = (votes * v.unsqueeze(1)).sum(-1)
        logits = logits + (a.detach() if detach else a) if update else logits
    return v


def _routing_no_grad(votes, iterations):
    with torch.no_grad():
        return _routing(votes, iterations)


def _given_routing(votes, iterations=3):    # the bug hunt's given code, unfixed (output-major layout)
    u = votes.transpose(1, 2)
    logits = torch.zeros(u.shape[:3], dtype=votes.dtype)
    for _ in range(iterations):
        c = torch.softmax(logits, dim=-1)
        v = capsule_lab.squash((c.unsqueeze(-1) * u).sum(dim=2))
        logits = logits + (u * v.unsqueeze(2)).sum(dim=-1)
    return v


def _sharpness(vote_length, seed=0, iterations=3, last_logits=False, scale_only=False):
    g = torch.Generator().manual_seed(seed)
    votes = torch.randn(4, 64, 10, 16, generator=g, dtype=torch.float64)
    votes = votes * vote_length if scale_only else votes * (vote_length / votes.norm(dim=-1, keepdim=True))
    logits = torch.zeros(4, 64, 10, dtype=torch.float64)
    for _ in range(iterations):
        c = logits.softmax(-1)
        v = capsule_lab.squash((c[..., None] * votes).sum(1))
        logits = logits + (votes * v[:, None]).sum(-1)
    if last_logits:
        c = logits.softmax(-1)
    return c.amax(-1).mean()


WRONG = [
    ("02.couplings", _couplings_over_inputs, "sum to 1 over the input capsules"),
    ("02.couplings", _couplings_unstable, "exp(1000) overflows"),
    ("02.couplings", _couplings_float32_zeros, "dtype slip"),
    ("02.couplings", lambda b: torch.softmax(b.flatten(1), 1).view_as(b), "whole (I, J) table"),
    ("02.routing_step", lambda u, W, b: _step(u, W, b, detach=True), "cut off from autograd"),
    ("02.routing_step", lambda u, W, b: _step(u, W, b, update=False), "equal the old ones"),
    ("02.routing_step", lambda u, W, b: _step(u, W, b, over_inputs=True), "sum to 1 over the input capsules"),
    ("02.routing_step", lambda u, W, b: _step(u, W, b, squash_s=False), "longer than 1"),
    ("02.dynamic_routing", _given_routing, "which axis of *these* logits"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, detach=True), "cut off from autograd"),
    ("02.dynamic_routing", _routing_no_grad, "no gradient"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, update=False), "uniform routing"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, over_inputs=True), "sum to 1 over the input capsules"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, extra=1), "r + 1 iterations"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, extra=-1) if r > 1 else _routing(u, 1), "r − 1 iterations"),
    ("02.predict_coupling", lambda: 0.5, "iteration 1 uses"),
    ("02.predict_coupling", lambda: 1 / (1 + math.exp(-1.5)), "measured the agreement with s_j"),
    ("02.predict_coupling", lambda: 0.366, "coupling to output 1"),
    ("02.predict_coupling", lambda: 0.69, "both logits of an input grow"),
    ("02.coupling_sharpness", lambda x, seed=0: _sharpness(x, seed, iterations=2), "iteration 2"),
    ("02.coupling_sharpness", lambda x, seed=0: _sharpness(x, seed, last_logits=True), "one update too sharp"),
    ("02.coupling_sharpness", lambda x, seed=0: _sharpness(x, seed, scale_only=True), "rescale each vote"),
]


@pytest.mark.parametrize("task_id, fn, hint", WRONG, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_its_hint(task_id, fn, hint, capsys):
    assert_fails_with_hint(task_id, fn, hint, capsys)


def test_routing_step_must_return_a_pair():
    result = check("02.routing_step", lambda u, W, b: _step(u, W, b)[0], verbose=False)
    assert not result.passed and "expected a tuple (poses, new_logits)" in result.message


def test_dtype_must_be_kept():
    result = check("02.couplings", lambda b: torch.softmax(b.double(), dim=-1), verbose=False)
    assert not result.passed and "dtype" in result.message


def test_partial_credit_by_case_group():
    """An overflowing softmax keeps the groups without large logits; the experiment is credited per length."""
    result = check("02.couplings", _couplings_unstable, verbose=False)
    assert result.points == 0.67 and "case groups failed: ±1000 logits" in result.message
    result = check("02.coupling_sharpness", lambda x, seed=0: _sharpness(x, seed) if x < 2 else 0.5, verbose=False)
    assert result.points == 0.67 and "vote length 5" in result.message


def test_other_ways_of_writing_the_answers_pass():
    assert check("02.routing_step", _step, verbose=False).passed             # forming the votes first is allowed
    assert check("02.coupling_sharpness", _sharpness, verbose=False).passed
    assert check("02.predict_coupling", lambda: 0.63, verbose=False).passed
    assert not check("02.predict_coupling", lambda: 0.62, verbose=False).passed
