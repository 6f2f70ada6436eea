"""Chapter 04's graded tasks (dead capsules): their points and kinds, and the known mistakes each must catch with its
hint (the bug hunt's planted bug among them)."""

from __future__ import annotations

import math

import pytest
import torch

from capsule_lab import margin_loss
from capsule_lab.grading import check, tasks_for_chapter
from capsule_lab.models import DeepCapsNet, DeepCapsNetConfig

from _wrong_answers import assert_fails_with_hint

POINTS = {"04.dyr": 2, "04.dead_capsules": 1, "04.active_rate": 1, "04.dead_spike": 1, "04.revival": 2}
KINDS = {"04.dyr": "bug hunt", "04.dead_capsules": "implement", "04.active_rate": "implement",
         "04.dead_spike": "prediction", "04.revival": "experiment"}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("04")} == POINTS
    assert {t.id: t.kind for t in tasks_for_chapter("04")} == KINDS


# --- the students' likely mistakes, written independently of the task module ---------------------------

def _dyr(c, dim=0, correction=0, normalise=True, factor=1.0):
    n = c.shape[-1]
    spread = c.std(dim=dim, correction=correction).mean()
    return factor * (spread / math.sqrt((1 - 1 / n) / n) if normalise else spread)


def _revival(optimizer, scale, seed=0, write=True, read=True, swapped=False, growth=False):
    torch.manual_seed(seed)
    net = DeepCapsNet(DeepCapsNetConfig(conv_channels=(8, 16), routing_layers=2))
    with torch.no_grad():
        writes, reads = (net.layers[0].weight[0], net.layers[1].weight[:, 0]) if swapped else \
            (net.layers[0].weight[:, 0], net.layers[1].weight[0])
        if write:
            writes.mul_(scale)
        if read:
            reads.mul_(scale)
    g = torch.Generator().manual_seed(seed)
    images, labels = torch.rand(32, 1, 28, 28, generator=g), torch.arange(32) % 10
    with torch.no_grad():
        before = net(images).capsules[1][:, 0].norm(dim=-1).mean().item()
    opt = (torch.optim.SGD(net.parameters(), lr=0.1) if optimizer == "sgd"
           else torch.optim.Adam(net.parameters(), lr=3e-3))
    for _ in range(10):
        loss = margin_loss(net(images).lengths, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = net(images).capsules[1][:, 0].norm(dim=-1).mean().item()
    return after / before if growth else after


WRONG = [
    ("04.dyr", lambda c: _dyr(c, dim=-1), "static one-hot routing"),             # the bug of the exercise
    ("04.dyr", lambda c: _dyr(c, correction=1), "√(k/(k − 1))"),
    ("04.dyr", lambda c: _dyr(c, normalise=False), "compare the spread"),
    ("04.dyr", lambda c: _dyr(c, factor=c.shape[-1]), "dys = n · dyr"),
    ("04.dead_capsules", lambda x, a, b: (x.mean(0) <= a) & (x.std(0) <= b), "torch.std divides by k − 1"),
    ("04.dead_capsules", lambda x, a, b: (x.mean(0) <= a) | (x.std(0, correction=0) <= b), "*and*"),
    ("04.dead_capsules", lambda x, a, b: (x.mean(0) < a) & (x.std(0, correction=0) < b), "or equal"),
    ("04.dead_capsules", lambda x, a, b: x.mean(0) <= a, "sometimes strongly on"),
    ("04.dead_capsules", lambda x, a, b: (x <= a).all(0), "every single norm"),
    ("04.active_rate", lambda x, eps: (x > eps).to(x.dtype).mean(), "greater than *or equal*"),
    ("04.active_rate", lambda x, eps: (x >= eps).to(x.dtype).sum(1).mean(), "can exceed 1"),
    ("04.active_rate", lambda x, eps: (x >= eps).any(0).to(x.dtype).mean(), "at least one image"),
    ("04.dead_spike", lambda: 10.0, "which of the two conditions fails first"),
    ("04.dead_spike", lambda: 0.1, "threshold of an *active* capsule"),
    ("04.dead_spike", lambda: 0.012, "every single norm"),
    ("04.revival", lambda o, s, seed=0: _revival(o, s, seed, read=False), "Theorem 2 has two sides"),
    ("04.revival", lambda o, s, seed=0: _revival(o, s, seed, swapped=True), "not the one you shrank"),
    ("04.revival", lambda o, s, seed=0: _revival(o, s, seed, growth=True), "growth factor"),
]


@pytest.mark.parametrize("task_id, fn, hint", WRONG, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_its_hint(task_id, fn, hint, capsys):
    assert_fails_with_hint(task_id, fn, hint, capsys)


def test_the_prediction_band():
    assert check("04.dead_spike", lambda: 0.32, verbose=False).passed
    assert not check("04.dead_spike", lambda: 0.33, verbose=False).passed


def test_an_answer_right_only_for_dead_capsules_earns_their_share():
    result = check("04.revival", lambda o, s, seed=0: 0.0, verbose=False)
    assert not result.passed and result.points == 0.67 and "SGD, almost dead" in result.message
