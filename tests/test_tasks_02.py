"""Chapter 02's graded tasks (dynamic routing): their points, and the known mistakes each must catch with its hint."""

from __future__ import annotations

import pytest
import torch

import capsule_lab
from capsule_lab.grading import check, tasks_for_chapter

from _wrong_answers import assert_fails_with_hint

POINTS = {"02.couplings": 1, "02.routing_step": 2, "02.dynamic_routing": 2}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("02")} == POINTS


def _couplings_over_inputs(logits):
    return torch.softmax(logits, dim=1)


def _couplings_unstable(logits):
    e = torch.exp(logits)
    return e / e.sum(dim=-1, keepdim=True)


def _step(votes, logits, detach=False, update=True, over_inputs=False):
    c = torch.softmax(logits, dim=1 if over_inputs else -1)
    v = capsule_lab.squash((c.unsqueeze(-1) * votes).sum(1))
    agreement = (votes * v.unsqueeze(1)).sum(-1)
    if detach:
        agreement = agreement.detach()
    return v, (logits + agreement) if update else logits


def _routing(votes, iterations, detach=False, update=True, over_inputs=False, extra=0):
    logits = torch.zeros(votes.shape[:3], dtype=votes.dtype)
    for _ in range(iterations + extra):
        v, new = _step(votes, logits, detach=detach, update=update, over_inputs=over_inputs)
        logits = new
    return v


def _routing_no_grad(votes, iterations):
    with torch.no_grad():
        return _routing(votes, iterations)


WRONG = [
    ("02.couplings", _couplings_over_inputs, "normalised over the input capsules"),
    ("02.couplings", _couplings_unstable, "overflow"),
    ("02.routing_step", lambda u, b: _step(u, b, detach=True), "detach"),
    ("02.routing_step", lambda u, b: _step(u, b, update=False), "logits unchanged"),
    ("02.routing_step", lambda u, b: _step(u, b, over_inputs=True), "softmax over the output capsules"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, detach=True), "detach"),
    ("02.dynamic_routing", _routing_no_grad, "no gradient"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, update=False), "uniform routing"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, over_inputs=True), "softmax over the output capsules"),
    ("02.dynamic_routing", lambda u, r: _routing(u, r, extra=1), "one routing iteration too many"),

]


@pytest.mark.parametrize("task_id, fn, hint", WRONG, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_its_hint(task_id, fn, hint, capsys):
    assert_fails_with_hint(task_id, fn, hint, capsys)


def test_routing_step_must_return_a_pair():
    result = check("02.routing_step", lambda u, b: _step(u, b)[0], verbose=False)
    assert not result.passed and "expected a tuple (poses, new_logits)" in result.message


def test_dtype_must_be_kept():
    result = check("02.couplings", lambda b: torch.softmax(b.double(), dim=-1), verbose=False)
    assert not result.passed and "dtype" in result.message
