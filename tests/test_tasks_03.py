"""Chapter 03's graded tasks (gradients through routing): their points, and the known mistakes each must catch with
its hint (the bug hunt's planted bug among them)."""

from __future__ import annotations

import pytest
import torch

from capsule_lab import squash
from capsule_lab.grading import check, tasks_for_chapter

from _wrong_answers import assert_fails_with_hint

POINTS = {"03.softmax_jacobian": 1, "03.constant_coupling_gradient": 2, "03.detached_routing": 2,
          "03.term2_exponent": 1, "03.term2_ratio": 2}
KINDS = {"03.softmax_jacobian": "implement", "03.constant_coupling_gradient": "implement",
         "03.detached_routing": "bug hunt", "03.term2_exponent": "prediction", "03.term2_ratio": "experiment"}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("03")} == POINTS
    assert {t.id: t.kind for t in tasks_for_chapter("03")} == KINDS


# --- the students' likely mistakes, written independently of the task module ---------------------------

def _jacobian_diagonal_only(c):
    return torch.diag_embed(c * (1 - c))


def _jacobian_plus_off_diagonal(c):
    return torch.diag_embed(c * (1 - c)) + c.unsqueeze(-1) * c.unsqueeze(-2) - torch.diag_embed(c * c)


def _delta(s, gv, sign=1.0, nan_at_zero=False, radial=True):
    n = s.norm(dim=-1, keepdim=True)
    unit = s / n if nan_at_zero else s / n.clamp_min(1e-30)
    out = n / (1 + n ** 2) * gv
    if radial:
        out = out + sign * n * (1 - n ** 2) / (1 + n ** 2) ** 2 * (unit * gv).sum(-1, keepdim=True) * unit
    return out


def _term1(c, s, gv, **kw):
    return c.unsqueeze(-1) * _delta(s, gv, **kw).unsqueeze(1)


def _routing(votes, iterations=3, detach=True, cut="couplings", dim=-1, extra=0):
    logits = torch.zeros(votes.shape[:3], dtype=votes.dtype)
    for _ in range(iterations + extra):
        c = torch.softmax(logits, dim=dim)
        if detach and cut == "couplings":
            c = c.detach()
        v = squash((c.unsqueeze(-1) * votes).sum(dim=1))
        w = v.detach() if detach and cut == "poses" else v
        logits = logits + (votes * w.unsqueeze(1)).sum(dim=-1)
    return v


def _ratio(scale, iterations=3, seed=0, how="right"):
    g = torch.Generator().manual_seed(seed)
    votes = scale * torch.randn(2, 8, 4, 8, generator=g, dtype=torch.float64)
    grad_poses = torch.randn(2, 4, 8, generator=g, dtype=torch.float64)
    grads = []
    for detach in (True, False):
        u = votes.clone().requires_grad_(True)
        v = _routing(u, iterations, detach=detach, cut="poses" if how == "unfixed" else "couplings")
        grads.append(torch.autograd.grad((v * grad_poses).sum(), u)[0])
    t1, total = grads
    if how == "total":
        return (total.norm() / t1.norm()).item()
    return ((total - t1).norm() / t1.norm()).item()


WRONG = [
    ("03.softmax_jacobian", _jacobian_diagonal_only, "off-diagonal entries are 0"),
    ("03.softmax_jacobian", _jacobian_plus_off_diagonal, "wrong sign"),
    ("03.softmax_jacobian", lambda c: -c.unsqueeze(-1) * c.unsqueeze(-2), "δ_jk part"),
    ("03.constant_coupling_gradient", lambda c, s, gv: c.unsqueeze(-1) * gv.unsqueeze(1), "between s and v sits"),
    ("03.constant_coupling_gradient", lambda c, s, gv: _term1(c, s, gv, radial=False), "f(n) I part"),
    ("03.constant_coupling_gradient", lambda c, s, gv: _term1(c, s, gv, sign=-1.0), "ŝŝᵀ term has the wrong sign"),
    ("03.constant_coupling_gradient", lambda c, s, gv: _term1(c, s, gv, nan_at_zero=True), "where s = 0"),
    ("03.constant_coupling_gradient", lambda c, s, gv: torch.ones_like(c).unsqueeze(-1) * _delta(s, gv).unsqueeze(1),
     "how much of the vote"),
    ("03.detached_routing", lambda u, r=3, detach=True: _routing(u, r, detach, cut="poses"),
     "a path through the couplings is still open"),
    ("03.detached_routing", lambda u, r=3, detach=True: _routing(u, r, detach=False), "still contains term 2"),
    ("03.detached_routing", lambda u, r=3, detach=True: _routing(u, r, detach, dim=1),
     "normalised over the input capsules"),
    ("03.detached_routing", lambda u, r=3, detach=True: _routing(u, r, detach, extra=1), "one more weighted sum"),
    ("03.term2_exponent", lambda: 2.0, "linear near 0"),
    ("03.term2_exponent", lambda: 0.1, "same rate"),
    ("03.term2_exponent", lambda: 1.0, "count every factor"),
    ("03.term2_ratio", lambda s, r=3, seed=0: _ratio(s, r, seed, how="total"), "size of the whole gradient"),
    ("03.term2_ratio", lambda s, r=3, seed=0: _ratio(s, r, seed, how="unfixed"), "before its bug"),
    ("03.term2_ratio", lambda s, r=3, seed=0: 0.0, "both of your gradients are the same"),
]


@pytest.mark.parametrize("task_id, fn, hint", WRONG, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_its_hint(task_id, fn, hint, capsys):
    assert_fails_with_hint(task_id, fn, hint, capsys)


def test_a_nan_at_zero_sums_loses_only_its_group():
    result = check("03.constant_coupling_gradient", lambda c, s, gv: _term1(c, s, gv, nan_at_zero=True), verbose=False)
    assert result.points == 1.5 and "zero sums" in result.message


def test_a_prediction_in_the_band_passes_and_one_outside_fails():
    assert check("03.term2_exponent", lambda: 3.2, verbose=False).passed
    assert not check("03.term2_exponent", lambda: 3.3, verbose=False).passed


def test_the_experiment_accepts_float32_votes_within_its_band():
    def float32_votes(scale, iterations=3, seed=0):
        g = torch.Generator().manual_seed(seed)
        votes = scale * torch.randn(2, 8, 4, 8, generator=g, dtype=torch.float64)
        grad_poses = torch.randn(2, 4, 8, generator=g, dtype=torch.float64)
        grads = []
        for detach in (True, False):
            u = votes.float().requires_grad_(True)
            v = _routing(u, iterations, detach=detach)
            grads.append(torch.autograd.grad((v * grad_poses.float()).sum(), u)[0].double())
        return ((grads[1] - grads[0]).norm() / grads[0].norm()).item()

    assert check("03.term2_ratio", float32_votes, verbose=False).passed
