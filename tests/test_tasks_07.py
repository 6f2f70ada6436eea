"""Chapter 07's graded tasks (learned routing): their points and kinds, the references against independent
computations (the proximal couplings of eq. (E2) by plain-Python loops, by numerical minimisation of the objective
written out and, at λ3 = 0, as chapter 07's (S4); the kernel summed term by term, the prediction by hand, similarity
routing as a plain loop), the experiment's band measured again over seeds 0, 1 and 2, the known mistakes each must
catch with its hint (the bug hunt's planted bug among them), and no hint of 07.closed_form that prints its answer."""

from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat
import pytest
import torch

from capsule_lab.grading import check, tasks_for_chapter
from capsule_lab.grading.engine.judging import credit
from capsule_lab.grading.engine.running import expected, run_student
from capsule_lab.grading.tasks import get_task

from _wrong_answers import assert_fails_with_hint

ROOT = Path(__file__).resolve().parents[1]

POINTS = {"07.closed_form": 2, "07.kernel_mixture": 2, "07.predict_coupling": 1, "07.similarity_loop": 2,
          "07.entropy_vs_lambda": 2}
KINDS = {"07.closed_form": "implement", "07.kernel_mixture": "implement", "07.predict_coupling": "prediction",
         "07.similarity_loop": "bug hunt", "07.entropy_vs_lambda": "experiment"}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("07")} == POINTS
    assert {t.id: t.kind for t in tasks_for_chapter("07")} == KINDS


# --- independent computations --------------------------------------------------------------------------

def _proximal_loop(kernel, activations, previous, lam1, lam2, lam3):
    """The minimiser of eq. (E2) column by column in plain Python, derived here and not read from the task:
    c_ij = w_ij / Σ_i' w_i'j with w_ij = a_i^{λ2/Λ} (c^prev_ij)^{λ3/Λ} e^{k_ij/Λ}, Λ = λ1 + λ2 + λ3."""
    B, I, J = kernel.shape
    out = torch.zeros(B, I, J, dtype=torch.float64)
    total = lam1 + lam2 + lam3
    for b in range(B):
        for j in range(J):
            w = [float(activations[b, i]) ** (lam2 / total) * float(previous[b, i, j]) ** (lam3 / total)
                 * math.exp(float(kernel[b, i, j]) / total) for i in range(I)]
            for i in range(I):
                out[b, i, j] = w[i] / sum(w)
    return out


def _s4(kernel, activations, lam1, lam2):
    """Chapter 07's (S4), the paper's eq. 11: softmax over i of λ2/(λ1+λ2) · log a_i + k_ij/(λ1+λ2)."""
    total = lam1 + lam2
    return torch.softmax(lam2 / total * torch.log(activations)[:, :, None] + kernel / total, dim=1)


def _proximal_objective(c, kernel, activations, previous, lam1, lam2, lam3):
    """Eq. (E2) written out, summed over b and j: −Σ_i c k + λ1 Σ_i c log(I c) + λ2 Σ_i c log(c / â)
    + λ3 Σ_i c log(c / c^prev), with â = a / Σ_i a_i, the activations as a distribution (KL's own definition)."""
    I = kernel.shape[1]
    a = (activations / activations.sum(dim=1, keepdim=True))[:, :, None]
    return (-(c * kernel) + lam1 * c * torch.log(I * c) + lam2 * c * torch.log(c / a)
            + lam3 * c * torch.log(c / previous)).sum()


def test_closed_form_reference_is_the_minimiser_by_hand():
    task = get_task("07.closed_form")
    for case in task.cases():
        got = task.reference(*case.args)
        kernel = case.args[0]
        assert got.dtype == kernel.dtype and got.shape == kernel.shape, case.name
        assert torch.allclose(got.double(), _proximal_loop(*case.args), rtol=1e-5, atol=1e-7), case.name
        assert torch.allclose(got.sum(dim=1), torch.ones_like(got.sum(dim=1)), atol=1e-5), case.name


def test_closed_form_cases_cover_the_groups_the_exercise_lists():
    task = get_task("07.closed_form")
    cases = task.cases()
    assert task.groups() == ["float32", "float64", "one weight zero"]
    assert task.input_names == ("kernel", "activations", "previous") and task.function == "proximal_couplings"
    for case in cases:
        kernel, activations, previous, lam1, lam2, lam3 = case.args
        assert kernel.dtype == activations.dtype == previous.dtype, case.name
        assert (case.group == "float32") == (kernel.dtype == torch.float32), case.name
        assert (activations > 0).all() and (previous > 0).all(), case.name
        assert torch.allclose(previous.double().sum(dim=1), torch.ones(kernel.shape[0], kernel.shape[2],
                                                                       dtype=torch.float64), atol=1e-6), case.name
        assert min(lam1, lam2, lam3) >= 0 and lam1 + lam2 + lam3 > 0 and case.grad == "compare", case.name
    lams = {case.group: [] for case in cases}
    for case in cases:
        lams[case.group].append(case.args[3:])
    assert any(sum(l) == 3 for l in lams["float64"])
    assert sorted(l.index(0.0) for l in lams["one weight zero"]) == [0, 2]        # λ1 = 0, and λ3 = 0


@pytest.mark.parametrize("lam1, lam2, lam3", [(0.1, 0.3, 0.2), (0.5, 0.2, 1.0), (0.05, 0.02, 0.1), (0.0, 0.3, 0.4),
                                              (0.3, 0.0, 0.2), (0.2, 0.3, 0.0)])
def test_closed_form_reference_minimises_the_proximal_objective_numerically(lam1, lam2, lam3):
    """L-BFGS on a softmax parametrisation of each column, float64, from uniform couplings; the reference is given
    the activations unnormalised, the objective the normalised ones: the softmax makes the difference a constant."""
    g = torch.Generator().manual_seed(7)
    kernel = torch.rand(2, 7, 3, generator=g, dtype=torch.float64)
    activations = 0.1 + 0.9 * torch.rand(2, 7, generator=g, dtype=torch.float64)
    previous = torch.softmax(torch.randn(2, 7, 3, generator=g, dtype=torch.float64), dim=1)
    args = (kernel, activations, previous, lam1, lam2, lam3)
    free = torch.zeros(2, 7, 3, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([free], max_iter=2000, tolerance_grad=1e-14, tolerance_change=1e-16,
                                  line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        value = _proximal_objective(torch.softmax(free, dim=1), *args)
        value.backward()
        return value

    for _ in range(3):
        optimizer.step(closure)
    numerical = torch.softmax(free, dim=1).detach()
    reference = get_task("07.closed_form").reference(*args)
    assert (reference - numerical).abs().max() < 1e-6
    assert _proximal_objective(reference, *args) <= _proximal_objective(numerical, *args) + 1e-12


def test_closed_form_with_lambda3_zero_is_s4_and_a_large_lambda3_keeps_the_previous_couplings():
    from capsule_lab.routing import closed_form_couplings

    task = get_task("07.closed_form")
    (case,) = [c for c in task.cases() if c.args[5] == 0]
    kernel, activations, previous, lam1, lam2, _ = case.args
    got = task.reference(*case.args)
    assert torch.allclose(got, _s4(kernel, activations, lam1, lam2), rtol=1e-12, atol=1e-14)
    assert torch.allclose(got, closed_form_couplings(kernel, activations, lam1, lam2), rtol=1e-12, atol=1e-14)
    other = torch.softmax(torch.randn(previous.shape, generator=torch.Generator().manual_seed(3),
                                      dtype=torch.float64), dim=1)                   # c^prev does not count
    assert torch.equal(task.reference(kernel, activations, other, lam1, lam2, 0.0), got)
    g = torch.Generator().manual_seed(11)
    for lam1, lam2 in ((0.1, 0.3), (0.5, 0.2), (0.0, 0.3), (0.3, 0.0), (1.0, 2.0)):           # and on other draws
        k = torch.rand(3, 9, 4, generator=g, dtype=torch.float64)
        a = 0.05 + 0.95 * torch.rand(3, 9, generator=g, dtype=torch.float64)
        p = torch.softmax(torch.randn(3, 9, 4, generator=g, dtype=torch.float64), dim=1)
        assert torch.allclose(task.reference(k, a, p, lam1, lam2, 0.0), _s4(k, a, lam1, lam2), rtol=1e-12,
                              atol=1e-14), (lam1, lam2)
    # a proximal weight that dwarfs the others: the step stays where it was
    assert torch.allclose(task.reference(kernel, activations, previous, lam1, lam2, 1e7), previous, atol=1e-5)


def test_closed_form_passes_in_other_equivalent_forms():
    """The activations normalised first (a constant in i), or the product of powers normalised by hand: both pass."""

    def normalised_activations(kernel, activations, previous, lam1, lam2, lam3):
        total = lam1 + lam2 + lam3
        a = activations / activations.sum(dim=1, keepdim=True)
        return torch.softmax((lam2 * torch.log(a)[:, :, None] + lam3 * torch.log(previous) + kernel) / total, dim=1)

    def product_of_powers(kernel, activations, previous, lam1, lam2, lam3):
        total = lam1 + lam2 + lam3
        w = activations[:, :, None] ** (lam2 / total) * previous ** (lam3 / total) * torch.exp(kernel / total)
        return w / w.sum(dim=1, keepdim=True)

    assert check("07.closed_form", normalised_activations, verbose=False).passed
    assert check("07.closed_form", product_of_powers, verbose=False).passed


def _squeezed(text: str) -> str:
    """Text or LaTeX with the typesetting taken out (λ for \\lambda_, no spaces, braces, \\cdot, \\, or ·), so that
    one pattern finds a formula however it is written."""
    text = text.replace("\\lambda_", "λ").replace("\\log", "log").replace("\\exp", "exp")
    for noise in ("\\left", "\\right", "\\big", "\\Big", "\\cdot", "\\,", "\\text", "·", "{", "}"):
        text = text.replace(noise, "")
    return re.sub(r"\s+", "", text)


#: The answer's formula in pieces, squeezed (:func:`_squeezed`): a weight or the kernel over a sum, the temperature as
#: a denominator or a fraction, a power of a_i or of c^prev, the logit's terms written next to each other (in maths
#: or in code).
FORMULA = [r"λ[123]/", r"k_?ij/", r"/\(?λ1\+λ2\+λ3", r"\\frac\S{0,30}?λ1\+λ2\+λ3", r"\^\(?λ", r"λ2loga_?i\+",
           r"λ3logc\^?prev", r"loga_?i\+λ3", r"\(lam1\+lam2\+lam3\)", r"lam[23]\*torch\.log"]
#: In a hint, also the temperature itself, λ1 + λ2 + λ3: a hint names the derivation's steps, not its result.
HINT_FORMULA = FORMULA + [r"λ1\+λ2\+λ3"]


def test_no_hint_of_the_closed_form_prints_the_answer():
    task = get_task("07.closed_form")
    texts = {"hint": task.hint, "title": task.title, **{w.label: w.hint for w in task.wrong_answers}}
    for label, text in texts.items():
        found = [p for p in HINT_FORMULA if re.search(p, _squeezed(text))]
        assert not found, (label, found, text)
    assert "chapter 07" in task.hint and "(S4)" in task.hint and "§2" in task.hint      # where the derivation is
    for answer in ("softmax over i of (λ2 log a_i + λ3 log c^prev_ij + k_ij) / (λ1 + λ2 + λ3)",   # the patterns
                   "a_i^{λ2/(λ1+λ2+λ3)} · exp(k_ij/(λ1+λ2+λ3))", "λ2/(λ1 + λ2 + λ3) · log a_i",      # catch the
                   r"\frac{\lambda_2 \log a_i + \lambda_3 \log c^{\text{prev}}_{ij} + k_{ij}}"          # answer
                   r"{\lambda_1 + \lambda_2 + \lambda_3}",
                   "torch.softmax((kernel + lam2 * torch.log(a)) / (lam1 + lam2 + lam3), dim=1)"):
        assert any(re.search(p, _squeezed(answer)) for p in FORMULA), answer


def test_the_exercise_does_not_print_the_answer_of_task_1():
    """Task 1's cells in the generated exercise (statement, stub, check, explore) state eq. (E2) and never its
    minimiser; the sum λ1 + λ2 + λ3 may appear as a condition on the inputs, never as a denominator."""
    cells = nbformat.read(ROOT / "exercises" / "07_learned_routing.ipynb", as_version=4).cells
    first = next(i for i, c in enumerate(cells) if c.source.startswith("## Task 1"))
    last = next(i for i, c in enumerate(cells) if c.source.startswith("## Task 2"))
    text = "\n".join(c.source for c in cells[first:last])
    assert "proximal_couplings(kernel, activations, previous, lam1, lam2, lam3)" in text
    assert text.count(r"\tag{E2}") == 1 and "eq. (E2)" in text
    found = [p for p in FORMULA if re.search(p, _squeezed(text))]
    assert not found, found


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


def test_the_experiment_reference_and_its_band(check_draw):
    task = get_task("07.entropy_vs_lambda")
    for case in task.cases():
        assert math.isclose(task.reference(*case.args), _experiment(*case.args), abs_tol=1e-9), case.name
    assert task.reference(100.0, 1) == pytest.approx(math.log(16), abs=1e-3)        # λ1 → ∞: uniform columns
    spread = max(max(v) - min(v) for v in ([_experiment(lam1, seed) for seed in (0, 1, 2)]
                                          for lam1 in (0.01, 0.03, 0.1, 0.3, 1.0)))
    # the band is for a comparison at the same seed (reproduced to round-off), not the spread between seeds
    assert task.atol == pytest.approx(0.001) and spread > 20 * task.atol
    measured = {case.args: task.reference(*case.args) for case in check_draw(task)}   # on the cases check runs
    assert check(task.id, lambda lam1, seed=0: measured[(lam1, seed)] + 0.00099, verbose=False).passed
    assert not check(task.id, lambda lam1, seed=0: measured[(lam1, seed)] + 0.00101, verbose=False).passed
    values = [measured[(lam1, 0)] for lam1 in (0.01, 0.1, 1.0)]
    assert values == sorted(values)                                              # λ1 softens the clusters


# --- the students' likely mistakes, written independently of the task module ---------------------------

def _proximal(kernel, activations, previous, lam1, lam2, lam3, axis=1, temperature=None, w_a=None, w_prev=None,
              linear=False, scaled=True):
    """The proximal couplings with one slip: the softmax axis, the temperature, the weight of log a_i or of the
    previous couplings' term, c^prev_ij used for its log, the kernel left unscaled."""
    t = lam1 + lam2 + lam3 if temperature is None else temperature
    prior = previous if linear else torch.log(previous)
    logits = ((lam2 if w_a is None else w_a) * torch.log(activations)[:, :, None]
              + (lam3 if w_prev is None else w_prev) * prior) / t + (kernel / t if scaled else kernel)
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
    ("07.closed_form", lambda k, a, p, l1, l2, l3: _proximal(k, a, p, l1, l2, l3, axis=2), "Sabour's convention"),
    ("07.closed_form", lambda k, a, p, l1, l2, l3: _s4(k, a, l1, l2), "do not depend on c^prev at all"),
    ("07.closed_form", lambda k, a, p, l1, l2, l3: _proximal(k, a, p, l1, l2, l3, temperature=l1 + l2),
     "too sharp when λ3 > 0"),
    ("07.closed_form", lambda k, a, p, l1, l2, l3: _proximal(k, a, p, l1, l2, l3, w_prev=0.0),
     "c^prev is not in your logits"),
    ("07.closed_form", lambda k, a, p, l1, l2, l3: _proximal(k, a, p, l1, l2, l3, linear=True), "c^prev_ij itself"),
    ("07.closed_form", lambda k, a, p, l1, l2, l3: _proximal(k, a, p, l1, l2, l3, w_a=l3, w_prev=l2), "are swapped"),
    ("07.closed_form", lambda k, a, p, l1, l2, l3: _proximal(k, a, p, l1, l2, l3, w_a=l1), "log a_i carries λ1"),
    ("07.closed_form", lambda k, a, p, l1, l2, l3: _proximal(k, a, p, l1, l2, l3, scaled=False),
     "enter the logits unscaled"),
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
    from capsule_lab.grading.engine.refusal import refused

    task = get_task(task_id)
    with refused(task.refused):
        assert task.groups() and len(task.cases()) >= 1
