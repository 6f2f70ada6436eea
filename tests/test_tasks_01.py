"""Chapter 01's graded tasks (capsules): their points, and the known mistakes each must catch with its hint."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from capsule_lab.grading import check, tasks_for_chapter

from _wrong_answers import assert_fails_with_hint

POINTS = {"01.squash": 1, "01.margin_loss": 1, "01.primary_capsules": 1, "01.equal_length": 1,
          "01.steps_to_long": 1}
KINDS = {"01.squash": "implement", "01.margin_loss": "implement", "01.primary_capsules": "bug hunt",
         "01.equal_length": "prediction", "01.steps_to_long": "experiment"}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("01")} == POINTS
    assert {t.id: t.kind for t in tasks_for_chapter("01")} == KINDS


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


def _primary_given(conv_out, capsule_dim):            # the bug hunt's given code, unfixed
    B, CD, H, W = conv_out.shape
    x = conv_out.reshape(B, CD // capsule_dim, capsule_dim, H * W)
    return x.reshape(B, H * W * (CD // capsule_dim), capsule_dim)


def _primary_type_first(conv_out, capsule_dim):
    B, CD, H, W = conv_out.shape
    return conv_out.reshape(B, CD // capsule_dim, capsule_dim, H * W).transpose(2, 3).reshape(B, -1, capsule_dim)


def _primary_columns_first(conv_out, capsule_dim):
    B, CD, H, W = conv_out.shape
    x = conv_out.reshape(B, CD // capsule_dim, capsule_dim, H, W)
    return x.permute(0, 4, 3, 1, 2).reshape(B, -1, capsule_dim)


def _margin(lengths, labels, lam=0.5, power=2):
    T = F.one_hot(labels, lengths.shape[1]).to(lengths.dtype)
    return (T * F.relu(0.9 - lengths) ** power + lam * (1 - T) * F.relu(lengths - 0.1) ** power).sum(1).mean()


def _steps(start_length, seed=0, squash_fn=None, power=2, lr=0.1):
    squash_fn = squash_fn or (lambda s: (s @ s) / (1 + s @ s) * s / torch.sqrt(s @ s + 1e-16))
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(8, generator=g, dtype=torch.float64)
    s = (d / d.norm() * start_length).requires_grad_()
    for step in range(1, 1001):
        loss = F.relu(0.9 - squash_fn(s).norm()) ** power
        loss.backward()
        with torch.no_grad():
            s -= lr * s.grad
            s.grad = None
            if squash_fn(s).norm() >= 0.5:
                return step
    return 1000


WRONG = [
    ("01.squash", _squash_without_factor, "‖s‖/(1+‖s‖²)"),
    ("01.squash", _squash_nan_at_zero, "divides by a norm of zero"),
    ("01.squash", _squash_nan_gradient_at_zero, "divides by a norm of zero"),
    ("01.squash", lambda s, dim=-1: s / torch.sqrt((s * s).sum(-1, keepdim=True) + 1e-16) * (
        (s * s).sum(-1, keepdim=True) / (1 + (s * s).sum(-1, keepdim=True))), "case groups failed: along dim"),
    ("01.squash", lambda s, dim=-1: s / (s * s).sum(dim, keepdim=True).add(1e-16).sqrt(), "has length 1"),
    ("01.squash", lambda s, dim=-1: (lambda n: n / (1 + n) * s / n.clamp_min(1e-12))(s.norm(dim=dim, keepdim=True)),
     "‖s‖/(1+‖s‖)"),
    ("01.squash", lambda s, dim=-1: (lambda n: -torch.expm1(-n) * s / n)(
        (s * s).sum(dim, keepdim=True).add(1e-16).sqrt()), "exponential squash"),
    ("01.margin_loss", _margin_mean_over_classes, "averaged over the classes"),
    ("01.margin_loss", _margin_without_clamp, "max(0, ·)²"),
    ("01.margin_loss", lambda l, y: _margin(l, y, lam=1.0), "λ = 0.5 of eq. (4) is missing"),
    ("01.margin_loss", lambda l, y: _margin(l, y, power=1), "squared"),
    ("01.margin_loss", lambda l, y: _margin(l, y) * l.shape[0], "batch size"),
    ("01.primary_capsules", _primary_spatial_neighbours, "neighbouring *positions*"),
    ("01.primary_capsules", _primary_given, "neighbouring *positions*"),
    ("01.primary_capsules", _primary_type_first, "wrong order"),
    ("01.primary_capsules", _primary_columns_first, "rows and columns are swapped"),
    ("01.equal_length", lambda: 0.18, "full weight"),
    ("01.equal_length", lambda: 0.1, "derivatives"),
    ("01.equal_length", lambda: 0.5, "nine absent classes"),
    ("01.equal_length", lambda: 0.6333, "single absent class"),
    ("01.steps_to_long", lambda x, seed=0: _steps(x, seed, squash_fn=lambda s: s), "squashed"),
    ("01.steps_to_long", lambda x, seed=0: _steps(x, seed, power=1), "squared"),
    ("01.steps_to_long", lambda x, seed=0: _steps(x, seed, squash_fn=lambda s: -torch.expm1(-s.norm()) * s / s.norm()),
     "exponential squash"),
]


@pytest.mark.parametrize("task_id, fn, hint", WRONG, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_its_hint(task_id, fn, hint, capsys):
    assert_fails_with_hint(task_id, fn, hint, capsys)


def test_partial_credit_by_case_group():
    """A squash right everywhere but along `dim` keeps 4/5 of its point; the experiment is credited per start."""
    def last_dim_only(s, dim=-1):
        n2 = (s * s).sum(-1, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-16)

    result = check("01.squash", last_dim_only, verbose=False)
    assert result.points == 0.8 and "case groups failed: along dim" in result.message

    def stops_early(start_length, seed=0):            # right for the long start only
        return _steps(start_length, seed) if start_length > 0.01 else 5

    result = check("01.steps_to_long", stops_early, verbose=False)
    assert result.points == 0.33 and "start length 1e-3" in result.message


def test_the_experiment_is_right_with_another_way_of_writing_it():
    assert check("01.steps_to_long", _steps, verbose=False).passed
    assert check("01.equal_length", lambda: 0.245, verbose=False).passed
    assert not check("01.equal_length", lambda: 0.25 + 0.001, verbose=False).passed
