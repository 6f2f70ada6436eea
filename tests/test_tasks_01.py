"""Chapter 01's graded tasks (capsules): their points, and the known mistakes each must catch with its hint."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from capsule_lab.grading import tasks_for_chapter

from _wrong_answers import assert_fails_with_hint

POINTS = {"01.squash": 1, "01.margin_loss": 1, "01.primary_capsules": 1}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("01")} == POINTS


def _squash_without_factor(s, dim=-1):
    n2 = (s * s).sum(dim=dim, keepdim=True)
    return s / (1 + n2)


def _squash_nan_at_zero(s, dim=-1):
    n2 = (s * s).sum(dim=dim, keepdim=True)
    return n2 / (1 + n2) * s / n2.sqrt()


def _squash_nan_gradient_at_zero(s, dim=-1):
    n2 = (s * s).sum(dim=dim, keepdim=True)
    norm = n2.sqrt()
    return torch.where(norm > 0, n2 / (1 + n2) * s / norm, torch.zeros_like(s))


def _margin_mean_over_classes(lengths, labels):
    T = F.one_hot(labels, lengths.shape[1]).to(lengths.dtype)
    loss = T * F.relu(0.9 - lengths) ** 2 + 0.5 * (1 - T) * F.relu(lengths - 0.1) ** 2
    return loss.mean()


def _margin_without_clamp(lengths, labels):
    T = F.one_hot(labels, lengths.shape[1]).to(lengths.dtype)
    return (T * (0.9 - lengths) ** 2 + 0.5 * (1 - T) * (lengths - 0.1) ** 2).sum(1).mean()


def _primary_spatial_neighbours(conv_out, capsule_dim):
    return conv_out.reshape(conv_out.shape[0], -1, capsule_dim)


def _primary_type_first(conv_out, capsule_dim):
    B, CD, H, W = conv_out.shape
    return conv_out.reshape(B, CD // capsule_dim, capsule_dim, H * W).transpose(2, 3).reshape(B, -1, capsule_dim)


WRONG = [
    ("01.squash", _squash_without_factor, "‖s‖²"),
    ("01.squash", _squash_nan_at_zero, "ε"),
    ("01.squash", _squash_nan_gradient_at_zero, "gradient"),
    ("01.squash", lambda s, dim=-1: s / torch.sqrt((s * s).sum(-1, keepdim=True) + 1e-16) * (
        (s * s).sum(-1, keepdim=True) / (1 + (s * s).sum(-1, keepdim=True))), "`dim`"),
    ("01.margin_loss", _margin_mean_over_classes, "sum the loss over the classes"),
    ("01.margin_loss", _margin_without_clamp, "max(0, ·)"),
    ("01.primary_capsules", _primary_spatial_neighbours, "neighbouring *positions*"),
    ("01.primary_capsules", _primary_type_first, "wrong order"),
]


@pytest.mark.parametrize("task_id, fn, hint", WRONG, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_its_hint(task_id, fn, hint, capsys):
    assert_fails_with_hint(task_id, fn, hint, capsys)
