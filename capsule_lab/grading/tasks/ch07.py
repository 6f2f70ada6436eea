"""The graded exercises of chapter 07 (learned routing): ``07.closed_form`` (the couplings of a proximal routing
step: the minimiser of the clustering objective, eq. 2, plus λ3 KL(c_·j ‖ c^prev_·j), whose λ3 = 0 case is eq. 11),
``07.kernel_mixture`` (the Gaussian-mixture kernel of eq. 15), ``07.predict_coupling`` (a prediction of eq. 11 by
hand), ``07.similarity_loop`` (a bug hunt in a similarity-routing loop) and ``07.entropy_vs_lambda`` (a
mini-experiment).

Each task has the course's reference (the proximal couplings in plain torch here, the others from
:mod:`capsule_lab.routing.similarity`: the kernel and similarity routing), seeded random and edge-case inputs in named
case groups, known wrong answers with their hints and a general hint pointing to its section of chapter 07. Letters
are the chapter's (Faria, "Learning to compute inner consensus"): I input capsules with activations a_i, J output
capsules, votes v_ij of dimension D, the kernel values k_ij = k(μ_j, v_ij), the couplings c_ij normalised over the
inputs i (Σ_i c_ij = 1), the weights λ1 (toward uniform), λ2 (toward the activations) and, in ``07.closed_form``, λ3
(toward the previous couplings c^prev), the length scales ℓ_q and mixing logits w_q. Registered with
:func:`capsule_lab.grading.tasks.registry.register` on import.
"""

from __future__ import annotations

import math

import torch

from ...routing import (SimilarityRouter, closed_form_couplings, closed_form_logits, gaussian_mixture_kernel,
                        generic_routing, kernel_matrix, normalize_couplings, similarity_routing, weighted_mean_pose)
from .registry import Case, Task, WrongAnswer, case_seed, generator, randn, register
from .questions import Question, register_questions

# --- 07.closed_form -------------------------------------------------------------------------------------------
#
# Chapter 07 prints the minimiser of (S1), its (S4), in full; the task asks for the minimiser of (S1) plus a proximal
# term, λ3 KL(c_·j ‖ c^prev_·j), the exercise's eq. (E2), which needs the derivation of (S2)–(S4) redone with a third
# KL term. The package's closed form of (S4) stays refused: it is the λ3 = 0 part of the answer.

_CLOSED_FORM_ANSWERS = (closed_form_logits, closed_form_couplings)


def _ref_proximal_couplings(kernel, activations, previous, lam1, lam2, lam3):
    """The minimiser of eq. (E2), in plain torch: each KL(c ‖ π) adds λ (log c_ij − log π_ij + 1) to the derivative,
    so (λ1 + λ2 + λ3) log c_ij = k_ij + λ2 log a_i + λ3 log c^prev_ij + const_j; the softmax over the inputs i takes
    the constant (and the normalisation of a, a constant in i) away."""
    total = lam1 + lam2 + lam3
    logits = (kernel + lam2 * torch.log(activations)[:, :, None] + lam3 * torch.log(previous)) / total
    return torch.softmax(logits, dim=1)


def _proximal_variant(kernel, activations, previous, lam1, lam2, lam3, axis=1, temperature=None, weight_a=None,
                      weight_prev=None, prior=torch.log, kernel_scale=True):
    """Eq. (E2)'s minimiser with one known mistake switched on: the softmax axis, the temperature, the weights of
    log a_i and of the previous couplings' term, that term itself (c^prev_ij for its log), the kernel unscaled."""
    total = lam1 + lam2 + lam3 if temperature is None else temperature(lam1, lam2, lam3)
    w_a = lam2 if weight_a is None else weight_a(lam1, lam2, lam3)
    w_prev = lam3 if weight_prev is None else weight_prev(lam1, lam2, lam3)
    logits = (w_a * torch.log(activations)[:, :, None] + w_prev * prior(previous)) / total \
        + (kernel / total if kernel_scale else kernel)
    return torch.softmax(logits, dim=axis)


def _proximal_cases() -> list:
    g = generator(701)

    def draw(B, I, J, dtype, lam1, lam2, lam3):
        kernel = torch.rand(B, I, J, generator=g, dtype=torch.float64)             # kernel values in (0, 1)
        activations = 0.05 + 0.95 * torch.rand(B, I, generator=g, dtype=torch.float64)
        previous = torch.softmax(randn(g, B, I, J, dtype=torch.float64), dim=1)    # columns on the simplex, > 0
        return kernel.to(dtype), activations.to(dtype), previous.to(dtype), lam1, lam2, lam3

    return [
        Case("B=2, I=12, J=5, λ1 = 0.1, λ2 = 0.3, λ3 = 0.2, float32", draw(2, 12, 5, torch.float32, 0.1, 0.3, 0.2),
             group="float32"),
        Case("B=3, I=8, J=10, λ1 = 0.5, λ2 = 0.2, λ3 = 1, float32", draw(3, 8, 10, torch.float32, 0.5, 0.2, 1.0),
             group="float32"),
        Case("B=2, I=16, J=4, λ1 = 0.05, λ2 = 0.15, λ3 = 0.1, float64",
             draw(2, 16, 4, torch.float64, 0.05, 0.15, 0.1), group="float64"),
        Case("B=2, I=6, J=3, λ1 = 0.5, λ2 = 1, λ3 = 1.5, float64", draw(2, 6, 3, torch.float64, 0.5, 1.0, 1.5),
             group="float64"),
        Case("λ1 = 0, λ2 = 0.3, λ3 = 0.2 (B=2, I=10, J=4), float64", draw(2, 10, 4, torch.float64, 0.0, 0.3, 0.2),
             group="one weight zero"),
        Case("λ1 = 0.2, λ2 = 0.3, λ3 = 0: (S4) (B=2, I=10, J=4), float64",
             draw(2, 10, 4, torch.float64, 0.2, 0.3, 0.0), group="one weight zero"),
    ]


def _proximal_wrong(**mistake):
    return lambda k, a, p, l1, l2, l3: _proximal_variant(k, a, p, l1, l2, l3, **mistake)


_CLOSED_FORM_WRONG = (
    WrongAnswer("normalised over the outputs", _proximal_wrong(axis=2),
                "your columns do not sum to 1 but your rows do: that is Sabour's convention (Σ_j c_ij = 1). "
                "Similarity routing is clustering: each output j distributes one unit over the inputs, "
                "Σ_i c_ij = 1, so the softmax runs over i (dim=1)."),
    WrongAnswer("(S4), the previous couplings ignored",
                _proximal_wrong(temperature=lambda x, y, z: x + y, weight_prev=lambda x, y, z: 0.0),
                "your couplings do not depend on c^prev at all: that is chapter 07's (S4), the minimiser of (S1) "
                "without the proximal term. Redo the derivation with the third KL term of eq. (E2): it changes the "
                "stationarity condition twice."),
    WrongAnswer("λ3 not in the temperature", _proximal_wrong(temperature=lambda x, y, z: x + y),
                "your couplings are too sharp when λ3 > 0: KL(c ‖ c^prev) holds a Σ_i c_ij log c_ij, like the two "
                "other KL terms, so λ3 adds to the coefficient of log c_ij in the stationarity condition — and you "
                "divide by that whole coefficient."),
    WrongAnswer("the previous couplings left out of the logits",
                _proximal_wrong(weight_prev=lambda x, y, z: 0.0),
                "λ3 is in your temperature but c^prev is not in your logits: the derivative of "
                "λ3 KL(c ‖ c^prev) in c_ij has a term in c^prev_ij besides its λ3 log c_ij."),
    WrongAnswer("c^prev linear, not its log", _proximal_wrong(prior=lambda p: p),
                "c^prev enters your logits as c^prev_ij itself: the KL to c^prev brings its logarithm into the "
                "stationarity condition, just as the KL to a brings log a_i."),
    WrongAnswer("the weights of log a and log c^prev swapped",
                _proximal_wrong(weight_a=lambda x, y, z: z, weight_prev=lambda x, y, z: y),
                "the weights of log a_i and log c^prev_ij are swapped: each prior's logarithm comes from its own "
                "KL term and carries that term's λ."),
    WrongAnswer("log a weighted by λ1", _proximal_wrong(weight_a=lambda x, y, z: x),
                "log a_i carries λ1, the weight of the pull toward uniform: the uniform prior's logarithm, −log I, "
                "is the same for every input and goes into the constant; the activations' term comes from the KL "
                "to a."),
    WrongAnswer("kernel not divided", _proximal_wrong(kernel_scale=False),
                "your kernel values enter the logits unscaled: divide the whole stationarity condition by the "
                "coefficient of log c_ij, the kernel term included."),
)


# --- 07.kernel_mixture ----------------------------------------------------------------------------------------

def _ref_kernel(x, y, length_scales, mixing_logits):
    return gaussian_mixture_kernel(x, y, length_scales, mixing_logits)


def _kernel_variant(x, y, length_scales, mixing_logits, two=True, square_scale=True, softmax=True, squared=True):
    """Eq. 15 with one known mistake switched on."""
    sq = ((x - y) ** 2).sum(dim=-1, keepdim=True)
    distance = sq if squared else torch.sqrt(sq)
    scale = length_scales ** 2 if square_scale else length_scales
    weights = torch.softmax(mixing_logits, dim=0) if softmax else mixing_logits
    return (weights * torch.exp(-distance / ((2 if two else 1) * scale))).sum(dim=-1)


def _kernel_cases() -> list:
    g = generator(702)

    def scales(Q, dtype):
        base = torch.logspace(-1, 0, Q, dtype=torch.float64) if Q > 1 else torch.tensor([0.5], dtype=torch.float64)
        return (base * (1 + 0.2 * torch.rand(Q, generator=g,
                                                                                        dtype=torch.float64))).to(dtype)

    def draw(shape_x, shape_y, Q, dtype, scale=0.2):
        return (randn(g, *shape_x, dtype=dtype, scale=scale), randn(g, *shape_y, dtype=dtype, scale=scale),
                scales(Q, dtype), randn(g, Q, dtype=dtype))

    return [
        Case("x, y (5, 8), Q = 4, float32", draw((5, 8), (5, 8), 4, torch.float32), group="float32"),
        Case("poses (2, 1, 3, 8) against votes (2, 6, 3, 8), Q = 10, float32",
             draw((2, 1, 3, 8), (2, 6, 3, 8), 10, torch.float32), group="float32"),
        Case("x, y (4, 6, 16), Q = 4, float64", draw((4, 6, 16), (4, 6, 16), 4, torch.float64, scale=0.15), group="float64"),
        Case("poses (3, 1, 2, 4) against votes (3, 5, 2, 4), Q = 10, float64",
             draw((3, 1, 2, 4), (3, 5, 2, 4), 10, torch.float64), group="float64"),
        Case("one Gaussian, Q = 1, x, y (6, 4), float64", draw((6, 4), (6, 4), 1, torch.float64, scale=0.2),
             group="Q = 1"),
        Case("one Gaussian, Q = 1, x (1, 8), y (7, 8), float64", draw((1, 8), (7, 8), 1, torch.float64, scale=0.3),
             group="Q = 1"),
    ]


_KERNEL_WRONG = (
    WrongAnswer("no 2", lambda *a: _kernel_variant(*a, two=False),
                "your kernel falls too fast: each Gaussian is exp(−‖x − y‖² / (2 ℓ_q²)), with the 2."),
    WrongAnswer("ℓ not squared", lambda *a: _kernel_variant(*a, square_scale=False),
                "you divided by 2 ℓ_q, not 2 ℓ_q²: a length scale is squared like the distance it is compared with."),
    WrongAnswer("raw mixing weights", lambda *a: _kernel_variant(*a, softmax=False),
                "the mixing weights are softmax(w)_q, not w_q itself: they are positive and sum to 1, so that "
                "k(x, x) = 1."),
    WrongAnswer("distance not squared", lambda *a: _kernel_variant(*a, squared=False),
                "you used the distance ‖x − y‖, not its square ‖x − y‖² (sum the squared differences, no square "
                "root)."),
)


# --- 07.predict_coupling (prediction) -------------------------------------------------------------------------

#: The prediction's two inputs: kernel values k_1j = 1, k_2j = 0, activations a_1 = 0.25, a_2 = 1, and λ1 = λ2.
_PREDICT = {"k": (1.0, 0.0), "a": (0.25, 1.0), "lam1": 0.25, "lam2": 0.25}


def _coupling_of_input_1(power, factor):
    (k1, k2), (a1, a2) = _PREDICT["k"], _PREDICT["a"]
    w1, w2 = a1 ** power * math.exp(k1 * factor), a2 ** power * math.exp(k2 * factor)
    return w1 / (w1 + w2)


def _ref_predict_coupling():
    # c_1 = 0.25^½ e² / (0.25^½ e² + 1) = 0.5 e² / (0.5 e² + 1) ≈ 0.787
    lam1, lam2 = _PREDICT["lam1"], _PREDICT["lam2"]
    return _coupling_of_input_1(lam2 / (lam1 + lam2), 1 / (lam1 + lam2))


_PREDICT_WRONG = (
    WrongAnswer("activations ignored", lambda: _coupling_of_input_1(0.0, 2.0),
                "e²/(e² + 1) ≈ 0.88 leaves out the activations: input 1 is weak (a_1 = 0.25), and the KL to a "
                "multiplies its weight by a_1^{λ2/(λ1+λ2)} = 0.25^½ = 0.5."),
    WrongAnswer("a_i^λ2", lambda: _coupling_of_input_1(0.25, 2.0),
                "0.25^0.25 is a_1^{λ2}: the power is λ2/(λ1+λ2) = ½, so a_1 counts as 0.5."),
    WrongAnswer("a_i^1", lambda: _coupling_of_input_1(1.0, 2.0),
                "you weighted input 1 by a_1 = 0.25 itself (a power of 1, or λ2/λ1): the power is λ2/(λ1+λ2) = ½."),
    WrongAnswer("no 1/(λ1+λ2)", lambda: _coupling_of_input_1(0.5, 1.0),
                "you used exp(k_1j) = e: the kernel is divided by λ1 + λ2 = 0.5, so it is exp(2) = e²."),
    WrongAnswer("kernel divided by λ1", lambda: _coupling_of_input_1(0.5, 4.0),
                "you used exp(k_1j / λ1) = e⁴: the kernel is divided by λ1 + λ2 = 0.5, so it is e²."),
    WrongAnswer("normalised over the outputs", lambda: 1.0,
                "1 is what a softmax over the outputs gives with one output: here the output distributes its unit "
                "over the two inputs, c_1j + c_2j = 1."),
)


# --- 07.similarity_loop (bug hunt) ----------------------------------------------------------------------------

_LOOP_ANSWERS = (similarity_routing, generic_routing, closed_form_logits, closed_form_couplings,
                 gaussian_mixture_kernel, kernel_matrix, weighted_mean_pose, normalize_couplings,
                 SimilarityRouter.forward)


def _ref_similarity_loop(votes, activations, lam1, lam2, length_scales, mixing_logits, iterations=3):
    theta = torch.zeros(3, dtype=votes.dtype)
    out = similarity_routing(votes, activations, lam1, lam2, length_scales, mixing_logits, theta, iterations)
    return out.poses, out.couplings


def _loop_variant(votes, activations, lam1, lam2, length_scales, mixing_logits, iterations=3,
                  unnormalised=False, updates=None, frozen=False, no_ratio=False):
    """Similarity routing written as a loop, with one known mistake switched on."""
    B, I, J, D = votes.shape
    weights = torch.softmax(mixing_logits, dim=0)
    log_a = torch.log(activations)[:, :, None]
    c = torch.full((B, I, J), 1.0 / I, dtype=votes.dtype)
    mu = torch.einsum("bij,bijd->bjd", c, votes)
    mu0 = mu
    for _ in range(iterations if updates is None else updates(iterations)):
        sq = ((votes - (mu0 if frozen else mu)[:, None]) ** 2).sum(dim=-1, keepdim=True)
        k = (weights * torch.exp(-sq / (2 * length_scales ** 2))).sum(dim=-1)
        r = (lam2 if no_ratio else lam2 / (lam1 + lam2)) * log_a + k / (lam1 + lam2)
        c = torch.exp(r) if unnormalised else torch.softmax(r, dim=1)
        mu = torch.einsum("bij,bijd->bjd", c, votes)
    return mu, c


def _loop_cases() -> list:
    g = generator(704)

    def draw(B, I, J, D, dtype):
        centres = randn(g, B, 1, J, D, dtype=torch.float64, scale=0.3)
        spread = torch.rand(B, I, 1, 1, generator=g, dtype=torch.float64)
        votes = centres + 0.3 * spread * randn(g, B, I, J, D, dtype=torch.float64)
        activations = 0.1 + 0.9 * torch.rand(B, I, generator=g, dtype=torch.float64)
        scales = torch.logspace(-1, 0, 4, dtype=torch.float64)
        mixing = randn(g, 4, dtype=torch.float64, scale=0.5)
        return tuple(t.to(dtype) for t in (votes, activations)) + (scales.to(dtype), mixing.to(dtype))

    def args(B, I, J, D, dtype, lam1, lam2):
        votes, activations, scales, mixing = draw(B, I, J, D, dtype)
        return votes, activations, lam1, lam2, scales, mixing

    return [
        Case("B=2, I=12, J=4, D=8, λ1 = λ2 = 0.1, float32", args(2, 12, 4, 8, torch.float32, 0.1, 0.1),
             group="float32"),
        Case("B=2, I=20, J=3, D=4, λ1 = 0.3, λ2 = 0.1, float32", args(2, 20, 3, 4, torch.float32, 0.3, 0.1),
             group="float32"),
        Case("B=3, I=10, J=5, D=8, λ1 = 0.05, λ2 = 0.2, float64", args(3, 10, 5, 8, torch.float64, 0.05, 0.2),
             group="float64"),
        Case("B=2, I=8, J=2, D=6, λ1 = λ2 = 0.1, 5 iterations, float64",
             args(2, 8, 2, 6, torch.float64, 0.1, 0.1), {"iterations": 5}, group="float64"),
        Case("one iteration, T = 1 (B=2, I=10, J=3, D=8, λ1 = 0.2, λ2 = 0.1), float64",
             args(2, 10, 3, 8, torch.float64, 0.2, 0.1), {"iterations": 1}, group="T = 1 and T = 2"),
        Case("two iterations, T = 2 (B=2, I=14, J=3, D=8, λ1 = 0.1, λ2 = 0.2), float32",
             args(2, 14, 3, 8, torch.float32, 0.1, 0.2), {"iterations": 2}, group="T = 1 and T = 2"),
    ]


def _loop_wrong(**mistake):
    return lambda *a, **k: _loop_variant(*a, **k, **mistake)


_LOOP_WRONG = (
    WrongAnswer("μ from unnormalised couplings", _loop_wrong(unnormalised=True),
                "μ_j is computed from exp(r_ij), the unnormalised couplings: normalise them first (softmax over i), "
                "so that μ_j is a weighted mean of the votes."),
    WrongAnswer("one update too many", _loop_wrong(updates=lambda t: t + 1),
                "one compatibility update too many: T iterations are T updates of the couplings (T + 1 poses)."),
    WrongAnswer("one update too few", _loop_wrong(updates=lambda t: t - 1),
                "one compatibility update too few: T iterations are T updates of the couplings (T + 1 poses)."),
    WrongAnswer("kernel at the first pose", _loop_wrong(frozen=True),
                "the kernel is always evaluated at μ⁰, the first pose: each iteration must use the pose of the "
                "previous one (carry μ through the loop)."),
    WrongAnswer("a_i^λ2", _loop_wrong(no_ratio=True),
                "the compatibility has λ2 · log a_i: eq. 12 has λ2/(λ1+λ2) · log a_i."),
)


# --- 07.entropy_vs_lambda (mini-experiment) -------------------------------------------------------------------

#: The experiment's sizes: B vote sets of I inputs, J outputs, votes of dimension D; λ2 and the T iterations.
_EXP_B, _EXP_I, _EXP_J, _EXP_D = 500, 16, 4, 8
_EXP_LAM2, _EXP_T = 0.1, 3

#: The experiment's band, atol. The answer is compared with the reference at the same seed and λ1, which a float64
#: computation reproduces to round-off (4e-16 between this CPU's kernels on 2 threads and AVX2-only kernels on 1
#: thread); the band, 0.001, leaves room for any order of the sums and a float32 computation. (The spread *between*
#: seeds, 0.0217, is no measure of this comparison: as a band, 0.0325, it let the uniform couplings pass on a case.)
#: The nearest wrong variant, the uniform couplings, misses it by 0.018 and more (tests/test_tasks_07.py).
_EXP_BAND = 0.001


def _experiment_data(seed: int):
    """The experiment's votes ``(B, I, J, D)``, activations ``(B, I)``, length scales ``(4,)`` and mixing logits
    ``(4,)``, float64, from a generator seeded with ``seed`` (chapter 07, exercise)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(_EXP_B, 1, _EXP_J, _EXP_D, generator=g, dtype=torch.float64) * 0.3
    spread = torch.rand(_EXP_B, _EXP_I, 1, 1, generator=g, dtype=torch.float64)
    votes = centres + 0.3 * spread * torch.randn(_EXP_B, _EXP_I, _EXP_J, _EXP_D, generator=g, dtype=torch.float64)
    activations = 0.1 + 0.9 * torch.rand(_EXP_B, _EXP_I, generator=g, dtype=torch.float64)
    return votes, activations, torch.logspace(-1, 0, 4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)


def _entropy(c, dim=1, log=torch.log):
    return -(c * log(c.clamp_min(1e-300))).sum(dim=dim)


def _ref_entropy_vs_lambda(lam1, seed=0):
    votes, activations, scales, mixing = _experiment_data(seed)
    theta = torch.zeros(3, dtype=torch.float64)
    out = similarity_routing(votes, activations, lam1, _EXP_LAM2, scales, mixing, theta, _EXP_T)
    return _entropy(out.couplings).mean().item()


def _experiment_variant(lam1, seed=0, mistake=""):
    votes, activations, scales, mixing = _experiment_data(seed)
    mu, c = _loop_variant(votes, activations, lam1, _EXP_LAM2, scales, mixing, _EXP_T,
                          updates=(lambda t: 0) if mistake == "no updates" else None)
    if mistake == "bits":
        return _entropy(c, log=torch.log2).mean().item()
    if mistake == "rows":
        return _entropy(c / c.sum(dim=2, keepdim=True), dim=2).mean().item()
    if mistake == "sum":
        return _entropy(c).sum(dim=1).mean().item()
    return _entropy(c).mean().item()


def _experiment_cases() -> list:
    """Seed 0's three cases, and three on two seeds from :func:`~.registry.case_seed` (1 and 2 when published): drawn
    afresh by every check and every grading, so that no table of answers holds them."""
    plan = [("λ1 = 0.01", 0.01, 0), ("λ1 = 0.1", 0.1, 0), ("λ1 = 1", 1.0, 0),
            ("λ1 = 0.03", 0.03, 1), ("λ1 = 0.3", 0.3, 2), ("λ1 = 0.1", 0.1, 2)]
    seeds = {published: case_seed(published) for published in (0, 1, 2)}
    return [Case(f"{said}, {seeds[seed][1]}", (x, seeds[seed][0]), grad="none",
                 group="seed 0" if seed == 0 else "two drawn seeds") for said, x, seed in plan]


def _experiment_wrong(mistake):
    return lambda lam1, seed=0: _experiment_variant(lam1, seed, mistake)


_EXPERIMENT_WRONG = (
    WrongAnswer("entropy in bits", _experiment_wrong("bits"),
                "your entropies are about 1.44 times too large: they are in bits (log2); use the natural log "
                "(nats), so that the uniform column has entropy log I = log 16 ≈ 2.77."),
    WrongAnswer("entropy of the rows", _experiment_wrong("rows"),
                "you took the entropy of each input's row over the outputs: the distribution is each output's "
                "column c_{·j}, over the I inputs (Σ_i c_ij = 1), averaged over the outputs and the vote sets."),
    WrongAnswer("summed over the outputs", _experiment_wrong("sum"),
                "your number is J = 4 times too large: average the column entropies over the outputs j (and the "
                "vote sets), do not add them up."),
    WrongAnswer("the uniform couplings", _experiment_wrong("no updates"),
                "log 16 ≈ 2.77 whatever λ1: those are the uniform couplings c⁰, before any update — route with "
                "T = 3 compatibility updates first."),
)


register(
    Task("07.closed_form", "Eq. (E2): the couplings of a proximal routing step", 2, _ref_proximal_couplings,
         _proximal_cases,
         hint="redo chapter 07's derivation of (S4) (§2, routing as clustering: eqs. S2 and S3) with the third KL "
              "term of eq. (E2): write each KL out as a sum over i, add a multiplier for Σ_i c_ij = 1, set the "
              "derivative in c_ij to zero, collect every log c_ij on one side and divide by its coefficient; "
              "exponentiate and normalise over the inputs i (dim=1), which takes the constants away.",
         outputs=("couplings",), wrong_answers=_CLOSED_FORM_WRONG,
         input_names=("kernel", "activations", "previous"), function="proximal_couplings",
         answers=_CLOSED_FORM_ANSWERS),
    Task("07.kernel_mixture", "Eq. 15: a mixture of Gaussian kernels with softmax weights", 2, _ref_kernel,
         _kernel_cases,
         hint="k(x, y) = Σ_q softmax(w)_q · exp(−‖x − y‖² / (2 ℓ_q²)): the squared distance over the last axis "
              "(broadcast x against y), one Gaussian per length scale, mixed with the softmax of the logits w "
              "(chapter 07, the kernel).",
         outputs=("kernel",), wrong_answers=_KERNEL_WRONG,
         input_names=("x", "y", "length_scales", "mixing_logits"), function="mixture_kernel",
         answers=(gaussian_mixture_kernel, kernel_matrix)),
    Task("07.predict_coupling", "Prediction: how much of an output a weak but well-placed input gets", 1,
         _ref_predict_coupling, lambda: [Case("your prediction", (), grad="none")],
         hint="the closed form (S4) of chapter 07, §2 routing as clustering, with two inputs: work out what each "
              "input's weight is made of, and which part of it the weak input loses and the well-placed one gains.",
         outputs=("c_1j",), wrong_answers=_PREDICT_WRONG, function="predict_coupling", kind="prediction",
         returns_number=True, atol=0.01, rtol=0.0, answers=(closed_form_couplings, closed_form_logits)),
    Task("07.similarity_loop", "Bug hunt: similarity routing written as a loop", 2, _ref_similarity_loop,
         _loop_cases,
         hint="c⁰ uniform over the inputs, μ⁰_j = Σ_i c_ij v_ij; then T times: k_ij = k(μ_j, v_ij) (eq. 15), "
              "r_ij = λ2/(λ1+λ2) log a_i + k_ij/(λ1+λ2) (eq. 12), c = softmax of r over the inputs i, "
              "μ_j = Σ_i c_ij v_ij; return (μ, c) (chapter 07, Algorithm 1 and similarity routing).",
         outputs=("poses", "couplings"), wrong_answers=_LOOP_WRONG,
         input_names=("votes", "activations", "length_scales", "mixing_logits"), function="similarity_routing_loop",
         kind="bug hunt",
         place_hint=("two lines are wrong: one before the loop, and one inside it, where the compatibilities become "
                     "couplings."),
         planted=(("c = torch.full((B, I, J), 1.0 / I)", "a line before the loop"),
                  ("c = torch.softmax(r, dim=-1)", "the line inside the loop where the compatibilities become couplings")),
         answers=_LOOP_ANSWERS),
    Task("07.entropy_vs_lambda", "Mini-experiment: how λ1 softens the clusters", 2, _ref_entropy_vs_lambda,
         _experiment_cases,
         hint="route the task's votes with your fixed similarity_routing_loop (λ2 = 0.1, T = 3, the given length "
              "scales and mixing logits), then the entropy −Σ_i c_ij log c_ij (natural log) of each output's "
              "column, averaged over the outputs and the vote sets, as a number (chapter 07, similarity routing).",
         outputs=("mean entropy",), wrong_answers=_EXPERIMENT_WRONG, function="coupling_entropy",
         kind="experiment", returns_number=True, atol=_EXP_BAND, rtol=0.0,
         answers=(similarity_routing, generic_routing, closed_form_logits, closed_form_couplings,
                  gaussian_mixture_kernel, kernel_matrix, weighted_mean_pose, normalize_couplings,
                  SimilarityRouter.forward)),
)


# --- written answers, scored by the instructor with these rubrics (grading.tasks.questions) ---------------------

register_questions(
    Question("07.predict_coupling", "The reasoning behind the prediction of task 3 (a weak but well-placed input)", (
        "Uses (S4): input i is weighted by a_i^{λ2/(λ1+λ2)} · exp(k_ij/(λ1+λ2)), here a_i^{1/2} · e^{2 k_ij} with "
        "λ1 + λ2 = 0.5.",
        "Input 1: 0.5 · e² ≈ 3.69, input 2: 1; normalised over the two inputs, c_1j ≈ 3.69 / 4.69 ≈ 0.787.",
        "Reads it: the good fit wins, but the weak activation costs it (about 0.88 without the activations); the "
        "sum λ1 + λ2 sets how much the fit dominates, λ2's share how much the activations count.",
    ), points=1),
    Question("07.what_lambda_controls", "What can a network learn through λ1 and λ2?", (
        "From (S4): the couplings depend on the kernel only through k_ij / (λ1 + λ2), and on the activations only "
        "through λ2 / (λ1 + λ2) — scaling λ1 and λ2 together is the same as scaling the kernel down.",
        "Because the kernel values lie in (0, 1] (a mixture of Gaussians with softmax weights), the length scales "
        "cannot make the kernel's spread larger than 1: λ1 + λ2 alone sets how sharp the clusters can be (task 5: "
        "the entropy rises towards the uniform value as λ1 grows; once λ1 + λ2 passes about 1 the fit barely "
        "counts).",
        "Concludes what learning them means: λ1 + λ2 acts as the layer's temperature and λ2 / (λ1 + λ2) as how "
        "much it trusts the inputs' activations, so a trained layer chooses its own sharpness — and a λ driven "
        "towards 0 gives hard, winner-take-all couplings.",
    )),
)
