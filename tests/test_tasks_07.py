"""Chapter 07's graded tasks (learned routing): their points and kinds, the references against independent
computations (eq. 11 by plain-Python loops and by numerical minimisation of the objective written out, the kernel
summed term by term, the prediction by hand, similarity routing as a plain loop), the experiment's band measured
again over seeds 0, 1 and 2, and the known mistakes each must catch with its hint (the bug hunt's planted bug among
them)."""

from __future__ import annotations

import math

import pytest
import torch

from capsule_lab.grading import check, tasks_for_chapter
from capsule_lab.grading.checking import credit, expected, run_student
from capsule_lab.grading.tasks import get_task

from _wrong_answers import assert_fails_with_hint

POINTS = {"07.closed_form": 2, "07.kernel_mixture": 2, "07.predict_coupling": 1, "07.similarity_loop": 2,
          "07.entropy_vs_lambda": 2}
KINDS = {"07.closed_form": "implement", "07.kernel_mixture": "implement", "07.predict_coupling": "prediction",
         "07.similarity_loop": "bug hunt", "07.entropy_vs_lambda": "experiment"}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("07")} == POINTS
    assert {t.id: t.kind for t in tasks_for_chapter("07")} == KINDS


# --- independent computations --------------------------------------------------------------------------

def _closed_form_loop(kernel, activations, lam1, lam2):
    """Eq. 11 column by column in plain Python: c_ij = w_ij / Σ_i' w_i'j, w_ij = a_i^{λ2/(λ1+λ2)} e^{k_ij/(λ1+λ2)}."""
    B, I, J = kernel.shape
    out = torch.zeros(B, I, J, dtype=torch.float64)
    total = lam1 + lam2
    for b in range(B):
        for j in range(J):
            w = [float(activations[b, i]) ** (lam2 / total) * math.exp(float(kernel[b, i, j]) / total)
                 for i in range(I)]
            for i in range(I):
                out[b, i, j] = w[i] / sum(w)
    return out


def _objective(c, kernel, activations, lam1, lam2):
    """Eq. 2 written out: −Σ_i c k + λ1 Σ_i c log(I c) + λ2 Σ_i c log(c / a), summed over b and j."""
    I = kernel.shape[1]
    a = activations[:, :, None]
    return (-(c * kernel) + lam1 * c * torch.log(I * c) + lam2 * c * torch.log(c / a)).sum()


def test_closed_form_reference_is_eq_11_by_hand():
    task = get_task("07.closed_form")
    for case in task.cases():
        got = task.reference(*case.args)
        assert torch.allclose(got.double(), _closed_form_loop(*case.args), rtol=1e-5, atol=1e-7), case.name
        assert torch.allclose(got.sum(dim=1), torch.ones_like(got.sum(dim=1)), atol=1e-5), case.name


@pytest.mark.parametrize("lam1, lam2", [(0.1, 0.3), (0.5, 0.2), (0.0, 0.3), (0.3, 0.0)])
def test_closed_form_reference_minimises_the_objective_numerically(lam1, lam2):
    g = torch.Generator().manual_seed(7)
    kernel = torch.rand(2, 7, 3, generator=g, dtype=torch.float64)
    activations = 0.1 + 0.9 * torch.rand(2, 7, generator=g, dtype=torch.float64)
    free = torch.zeros(2, 7, 3, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([free], max_iter=1000, tolerance_grad=1e-13, tolerance_change=1e-15,
                                  line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        value = _objective(torch.softmax(free, dim=1), kernel, activations, lam1, lam2)
        value.backward()
        return value

    optimizer.step(closure)
    numerical = torch.softmax(free, dim=1).detach()
    reference = get_task("07.closed_form").reference(kernel, activations, lam1, lam2)
    assert (reference - numerical).abs().max() < 1e-5
    assert _objective(reference, kernel, activations, lam1, lam2) <= _objective(numerical, kernel, activations,
                                                                                 lam1, lam2) + 1e-12


def _kernel_loop(x, y, scales, logits):
    """Eq. 15 term by term over the broadcast points."""
    x, y = torch.broadcast_tensors(x.double(), y.double())
    weights = [math.exp(float(w)) for w in logits]
    weights = [w / sum(weights) for w in weights]
    flat_x, flat_y = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
    out = []
    for p, q in zip(flat_x.tolist(), flat_y.tolist()):
        sq = sum((u - v) ** 2 for u, v in zip(p, q))
        out.append(sum(w * math.exp(-sq / (2 * float(s) ** 2)) for w, s in zip(weights, scales)))
    return torch.tensor(out, dtype=torch.float64).reshape(x.shape[:-1])


def test_kernel_reference_is_eq_15_term_by_term():
    task = get_task("07.kernel_mixture")
    for case in task.cases():
        got = task.reference(*case.args)
        want = _kernel_loop(*case.args)
        assert got.shape == want.shape and torch.allclose(got.double(), want, rtol=1e-5, atol=1e-7), case.name
        # values in a range where the mistakes show
        assert 0.05 < float(want.mean()) < 0.95, case.name
    x = torch.randn(3, 4, dtype=torch.float64)
    assert torch.allclose(task.reference(x, x, torch.tensor([0.1, 1.0], dtype=torch.float64),
                                         torch.tensor([2.0, -1.0], dtype=torch.float64)),
                          torch.ones(3, dtype=torch.float64))


def test_the_prediction_is_eq_11_by_hand_and_the_packages():
    from capsule_lab.routing import closed_form_couplings

    value = get_task("07.predict_coupling").reference()
    by_hand = 0.5 * math.e ** 2 / (0.5 * math.e ** 2 + 1)
    assert math.isclose(value, by_hand, rel_tol=1e-12)
    kernel = torch.tensor([[[1.0], [0.0]]], dtype=torch.float64)
    activations = torch.tensor([[0.25, 1.0]], dtype=torch.float64)
    assert math.isclose(closed_form_couplings(kernel, activations, 0.25, 0.25)[0, 0, 0].item(), value, rel_tol=1e-12)


def test_the_prediction_band():
    value = get_task("07.predict_coupling").reference()
    assert check("07.predict_coupling", lambda: value + 0.0099, verbose=False).passed
    assert not check("07.predict_coupling", lambda: value + 0.0101, verbose=False).passed


def _routing_loop(votes, activations, lam1, lam2, scales, logits, iterations=3, axis=1, unnormalised=False,
                  updates=None, frozen=False, no_ratio=False, exact=True):
    """Similarity routing as a plain loop (Algorithm 1, the closed form, the weighted mean), one mistake optional;
    in float64 (``exact``) or in the inputs' dtype, as a student's code would run."""
    if exact:
        votes, activations = votes.double(), activations.double()
        scales, logits = scales.double(), logits.double()
    B, I, J, D = votes.shape
    weights = torch.exp(logits) / torch.exp(logits).sum()
    c = torch.ones(B, I, J, dtype=votes.dtype) / (I if axis == 1 else J)
    mu = (c[..., None] * votes).sum(dim=1) / c.sum(dim=1)[..., None]
    first = mu
    total = lam1 + lam2
    for _ in range(iterations if updates is None else updates):
        at = first if frozen else mu
        sq = ((votes - at[:, None]) ** 2).sum(dim=-1)                                         # (B, I, J)
        if exact:
            k = sum(w * torch.exp(-sq / (2 * s ** 2)) for w, s in zip(weights, scales))
        else:                                    # the Q Gaussians on a last axis, as a student would write it
            k = (torch.softmax(logits, dim=0) * torch.exp(-sq[..., None] / (2 * scales ** 2))).sum(dim=-1)
        logit = (lam2 if no_ratio else lam2 / total) * torch.log(activations)[:, :, None] + k / total
        e = torch.exp(logit - logit.amax(dim=axis, keepdim=True))
        c = e / e.sum(dim=axis, keepdim=True) if exact else torch.softmax(logit, dim=axis)
        c = torch.exp(logit) if unnormalised else c
        mu = (c[..., None] * votes).sum(dim=1)
    return mu, c


def test_similarity_loop_reference_is_the_plain_loop():
    task = get_task("07.similarity_loop")
    for case in task.cases():
        mu, c = task.reference(*case.args, **case.kwargs)
        want_mu, want_c = _routing_loop(*case.args, **case.kwargs)
        assert torch.allclose(mu.double(), want_mu, rtol=1e-4, atol=1e-6), case.name
        assert torch.allclose(c.double(), want_c, rtol=1e-4, atol=1e-6), case.name
        assert torch.allclose(c.sum(dim=1).double(), torch.ones(c.shape[0], c.shape[2], dtype=torch.float64),
                              atol=1e-5), case.name


def _experiment(lam1, seed, mistake=""):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(500, 1, 4, 8, generator=g, dtype=torch.float64) * 0.3
    spread = torch.rand(500, 16, 1, 1, generator=g, dtype=torch.float64)
    votes = centres + 0.3 * spread * torch.randn(500, 16, 4, 8, generator=g, dtype=torch.float64)
    activations = 0.1 + 0.9 * torch.rand(500, 16, generator=g, dtype=torch.float64)
    scales = torch.tensor([0.1 * 10 ** (q / 3) for q in range(4)], dtype=torch.float64)
    _, c = _routing_loop(votes, activations, lam1, 0.1, scales, torch.zeros(4, dtype=torch.float64), 3,
                         updates=0 if mistake == "uniform" else None)
    if mistake == "rows":
        c = c / c.sum(dim=2, keepdim=True)
        return (-(c * torch.log(c)).sum(dim=2)).mean().item()
    log = torch.log2 if mistake == "bits" else torch.log
    entropy = -(c * log(c)).sum(dim=1)                                                        # (B, J)
    return entropy.sum(dim=1).mean().item() if mistake == "sum" else entropy.mean().item()


def test_the_experiment_reference_and_its_band():
    task = get_task("07.entropy_vs_lambda")
    for case in task.cases():
        assert math.isclose(task.reference(*case.args), _experiment(*case.args), abs_tol=1e-9), case.name
    assert task.reference(100.0, 1) == pytest.approx(math.log(16), abs=1e-3)        # λ1 → ∞: uniform columns
    spread = max(max(v) - min(v) for v in ([_experiment(lam1, seed) for seed in (0, 1, 2)]
                                          for lam1 in (0.01, 0.03, 0.1, 0.3, 1.0)))
    # the band is for a comparison at the same seed (reproduced to round-off), not the spread between seeds
    assert task.atol == pytest.approx(0.001) and spread > 20 * task.atol
    measured = {case.args: task.reference(*case.args) for case in task.cases()}
    assert check(task.id, lambda lam1, seed=0: measured[(lam1, seed)] + 0.00099, verbose=False).passed
    assert not check(task.id, lambda lam1, seed=0: measured[(lam1, seed)] + 0.00101, verbose=False).passed
    values = [measured[(lam1, 0)] for lam1 in (0.01, 0.1, 1.0)]
    assert values == sorted(values)                                              # λ1 softens the clusters


# --- the students' likely mistakes, written independently of the task module ---------------------------

def _closed(kernel, activations, lam1, lam2, axis=1, power=None, factor=None):
    total = lam1 + lam2
    p = lam2 / total if power is None else power
    f = 1 / total if factor is None else factor
    logits = p * torch.log(activations)[:, :, None] + f * kernel
    return torch.softmax(logits, dim=axis)


def _mixture(x, y, scales, logits, two=2, scale_power=2, softmax=True, distance_power=2):
    d = torch.sqrt(((x - y) ** 2).sum(dim=-1, keepdim=True))
    w = torch.softmax(logits, dim=0) if softmax else logits
    return (w * torch.exp(-d ** distance_power / (two * scales ** scale_power))).sum(dim=-1)


def _c1(power, factor):
    w1 = 0.25 ** power * math.exp(factor)
    return w1 / (w1 + 1)


def _loop(**mistake):
    def fn(votes, activations, lam1, lam2, scales, logits, iterations=3):
        return _routing_loop(votes, activations, lam1, lam2, scales, logits, iterations, exact=False, **{
            k: (v(iterations) if k == "updates" else v) for k, v in mistake.items()})
    return fn


WRONG = [
    ("07.closed_form", lambda k, a, l1, l2: _closed(k, a, l1, l2, axis=2), "Sabour's convention"),
    ("07.closed_form", lambda k, a, l1, l2: _closed(k, a, l1, l2, power=l2 / l1 if l1 else 1e9),
     "not λ2/λ1"),
    ("07.closed_form", lambda k, a, l1, l2: _closed(k, a, l1, l2, factor=1.0), "not exp(k_ij)"),
    ("07.closed_form", lambda k, a, l1, l2: _closed(k, a, l1, l2, factor=1 / l1 if l1 else 1e9),
     "not by λ1 alone"),
    ("07.closed_form", lambda k, a, l1, l2: _closed(k, a, l1, l2, power=l2), "not λ2: after dividing"),
    ("07.closed_form", lambda k, a, l1, l2: _closed(k, a, l1, l2, power=1.0), "not a_i itself"),
    ("07.closed_form", lambda k, a, l1, l2: _closed(k, a, l1, l2, power=0.0), "ignore the activations"),
    ("07.kernel_mixture", lambda *a: _mixture(*a, two=1), "with the 2"),
    ("07.kernel_mixture", lambda *a: _mixture(*a, scale_power=1), "not 2 ℓ_q²"),
    ("07.kernel_mixture", lambda *a: _mixture(*a, softmax=False), "not w_q itself"),
    ("07.kernel_mixture", lambda *a: _mixture(*a, distance_power=1), "not its square"),
    ("07.predict_coupling", lambda: math.e ** 2 / (math.e ** 2 + 1), "leaves out the activations"),
    ("07.predict_coupling", lambda: _c1(0.25, 2), "a_1^{λ2}"),
    ("07.predict_coupling", lambda: _c1(1, 2), "a power of 1"),
    ("07.predict_coupling", lambda: _c1(0.5, 1), "exp(k_1j) = e"),
    ("07.predict_coupling", lambda: _c1(0.5, 4), "e⁴"),
    ("07.predict_coupling", lambda: 1.0, "softmax over the outputs"),
    ("07.similarity_loop", _loop(axis=2), "chapter 02's habit"),                                          # planted
    ("07.similarity_loop", _loop(unnormalised=True), "the unnormalised couplings"),
    ("07.similarity_loop", _loop(updates=lambda t: t + 1), "one compatibility update too many"),
    ("07.similarity_loop", _loop(updates=lambda t: t - 1), "one compatibility update too few"),
    ("07.similarity_loop", _loop(frozen=True), "carry μ through the loop"),
    ("07.similarity_loop", _loop(no_ratio=True), "λ2 · log a_i"),
    ("07.entropy_vs_lambda", lambda lam1, seed=0: _experiment(lam1, seed, "bits"), "in bits"),
    ("07.entropy_vs_lambda", lambda lam1, seed=0: _experiment(lam1, seed, "rows"), "each input's row"),
    ("07.entropy_vs_lambda", lambda lam1, seed=0: _experiment(lam1, seed, "sum"), "do not add them up"),
    ("07.entropy_vs_lambda", lambda lam1, seed=0: _experiment(lam1, seed, "uniform"), "uniform couplings c⁰"),
]


@pytest.mark.parametrize("task_id, fn, hint", WRONG, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_its_hint(task_id, fn, hint, capsys):
    assert_fails_with_hint(task_id, fn, hint, capsys)


def test_the_planted_bug_fails_every_case_group():
    task = get_task("07.similarity_loop")
    cases = expected(task)
    planted = next(fn for t, fn, hint in WRONG if t == task.id and "chapter 02's habit" in hint)
    fraction, failed = credit(task, cases, run_student(task, planted, cases))
    assert fraction == 0 and failed == task.groups()


@pytest.mark.parametrize("task_id", sorted(POINTS))
def test_the_cases_can_be_built_while_the_answers_are_refused(task_id):
    """The grader's evaluation process refuses the answers for good before it lists a task's case groups."""
    from capsule_lab.grading.lock import refused

    task = get_task(task_id)
    with refused(task.refused):
        assert task.groups() and len(task.cases()) >= 1
