"""The tests every verdict of the course uses: is a difference real, is it small enough to call none, and what a
table of claims may conclude. Taught in chapter 08 (worked by hand once); chapters 04–08 read their verdicts here.

A bench has two kinds of noise, and one test for each:

- **between training runs** — another seed gives another network. One number per seed and router, paired by seed:
  :func:`paired_t_test` on the differences d_s = a_s − b_s,

  .. math:: t = \\frac{\\bar d - \\delta_0}{s_d / \\sqrt n}, \\qquad \\text{df} = n - 1,

  against Student's t quantile (:func:`t_quantile`; with 3 seeds the two-sided 95 % quantile is 4.30, not 2);
- **between test images** — two networks see the same images, so the test is paired image by image:
  :func:`mcnemar_test` counts the discordant images (b: right for A only, c: right for B only) and asks whether
  Binomial(b + c, ½) would split them so unevenly; :func:`pooled_mcnemar_test` pools them over seeds (each seed a
  stratum; under the null hypothesis every discordant image of every seed goes either way with probability ½,
  so the exact conditional test is Binomial(Σ b_s + Σ c_s, ½) — the Cochran–Mantel–Haenszel test of matched
  pairs, made exact).

"As good as" is not "not shown to differ": :func:`tost_paired` (two one-sided t tests) supports equivalence only
when the difference lies inside a stated margin ±δ with confidence. Many claims in one table are many tests:
:func:`holm` adjusts their p-values (Holm's step-down, family-wise error ≤ α).

:func:`compare` turns one claim — A *better* than B, A *equivalent* to B, A *not worse* than B, with a margin δ —
into one-sided p-values: one for the claim (``p_support``), one against it (``p_contradict``) and, where the paper
states the size of its effect, one for "smaller than that size" (``p_smaller``). How many seeds a test needs is
its power: :func:`power_paired_t`, :func:`min_detectable_effect` (the smallest effect n seeds detect) and
:func:`seeds_needed` (the seeds an effect needs). What a table of claims concludes from these numbers — families,
Holm, and when a claim cannot be tested at all — is :mod:`capsule_lab.evidence.rules`.

The t distributions are SciPy's (``scipy.stats.t`` and ``nct``); everything else is written out here, short enough to read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .._checks import check_nonnegative, check_one_of, check_positive_int

__all__ = ["binomial_standard_error", "t_quantile", "PairedT", "paired_t_test", "McNemar", "correct_string",
           "mcnemar_test", "pooled_mcnemar_test", "Equivalence", "tost_paired", "holm", "KINDS", "Comparison",
           "compare", "interval", "power_paired_t", "min_detectable_effect", "seeds_needed"]

ALTERNATIVES = ("two-sided", "greater", "less")
#: The kinds of claim :func:`compare` tests: A better than B; A equivalent to B (within ±margin); A not worse than B
#: (by more than the margin).
KINDS = ("better", "equivalent", "not worse")


def _probability(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    return float(value)


def _numbers(values, name: str, minimum: int = 2) -> list[float]:
    """``values`` as a list of finite floats, at least ``minimum`` of them."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise ValueError(f"{name} must be a sequence of numbers (one per seed), got {type(values).__name__}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a sequence of finite numbers (one per seed), got {v!r} in it")
        out.append(float(v))
    if len(out) < minimum:
        raise ValueError(f"{name} must hold at least {minimum} numbers (one per seed), got {len(out)}")
    return out


def binomial_standard_error(accuracy: float, n: int) -> float:
    """The standard error of an accuracy measured on ``n`` test images: √(p(1 − p)/n). Chapter 08.

    An accuracy of 0.98 on 2,000 images has a standard error of 0.0031, a third of a point: a table that prints
    "2.0 ± 0.0" % has left this noise out.
    """
    if isinstance(accuracy, bool) or not isinstance(accuracy, (int, float)) or not 0 <= accuracy <= 1:
        raise ValueError(f"accuracy must be a number in [0, 1], got {accuracy!r}")
    check_positive_int(n, "n")
    return math.sqrt(accuracy * (1 - accuracy) / n)


def t_quantile(probability: float, df: int) -> float:
    """The ``probability`` quantile of Student's t with ``df`` degrees of freedom (SciPy's ``t.ppf``). Chapter 08.

    ``t_quantile(0.975, 2)`` = 4.303: with 3 seeds, a 95 % interval is the mean ± 4.3 standard errors.
    """
    from scipy.stats import t as student_t      # here, not at the top: importing SciPy takes ~0.7 s (see tests)

    return float(student_t.ppf(_probability(probability, "probability"), check_positive_int(df, "df")))


def _t_tail(t: float, df: int, alternative: str) -> float:
    """P-value of the statistic ``t`` under Student's t(df); t = ±inf (no spread) gives 0 or 1."""
    from scipy.stats import t as student_t

    if alternative == "greater":
        return float(student_t.sf(t, df))
    if alternative == "less":
        return float(student_t.cdf(t, df))
    return min(1.0, 2 * float(student_t.sf(abs(t), df)))


@dataclass(frozen=True)
class PairedT:
    """A paired t test over seeds: ``mean`` and ``sd`` of the differences a − b, ``se`` = sd/√n, the statistic
    ``t`` = (mean − null)/se with ``df`` = n − 1, its ``p_value`` under ``alternative``, and the two-sided
    (1 − ``alpha``) confidence ``interval`` of the mean difference. Chapter 08."""

    n: int
    mean: float
    sd: float
    se: float
    t: float
    df: int
    p_value: float
    interval: tuple
    null: float
    alternative: str
    alpha: float


def paired_t_test(a, b, *, null: float = 0.0, alternative: str = "two-sided", alpha: float = 0.05) -> PairedT:
    """Student's paired t test of the mean difference of ``a`` and ``b`` (one value per seed, paired by seed) against
    ``null``. ``alternative``: ``"two-sided"``, ``"greater"`` (H1: mean(a − b) > null) or ``"less"``. Chapter 08.

    With no spread at all (every difference the same) the statistic is ±infinite: p = 0 when the mean lies on the
    alternative's side of ``null``, 1 when it does not (or equals it).
    """
    a, b = _numbers(a, "a"), _numbers(b, "b")
    if len(a) != len(b):
        raise ValueError(f"a and b must be paired (one value per seed each), got {len(a)} and {len(b)} values")
    check_one_of(alternative, ALTERNATIVES, "alternative")
    alpha = _probability(alpha, "alpha")
    if isinstance(null, bool) or not isinstance(null, (int, float)) or not math.isfinite(null):
        raise ValueError(f"null must be a finite number, got {null!r}")
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    se = sd / math.sqrt(n)
    if se > 0:
        t = (mean - null) / se
    else:
        t = math.copysign(math.inf, mean - null) if mean != null else 0.0
    if math.isinf(t):
        side = {"greater": t > 0, "less": t < 0, "two-sided": True}[alternative]
        p = 0.0 if side else 1.0
    else:
        p = _t_tail(t, n - 1, alternative) if se > 0 else 1.0
    half = t_quantile(1 - alpha / 2, n - 1) * se
    return PairedT(n, mean, sd, se, t, n - 1, p, (mean - half, mean + half), float(null), alternative, alpha)


@dataclass(frozen=True)
class McNemar:
    """McNemar's exact test: ``a_only`` images right for A alone, ``b_only`` for B alone, over ``strata`` seeds,
    and the two-sided ``p_value``. Chapter 08."""

    a_only: int
    b_only: int
    p_value: float
    strata: int = 1


def _correct(value, name: str) -> str:
    if not isinstance(value, str) or not value or set(value) - {"0", "1"}:
        raise ValueError(f"{name} must be a non-empty string of 0s and 1s (a record's 'correct')")
    return value


def _binomial_two_sided(b: int, c: int) -> float:
    """min(1, 2 · P(X ≤ min(b, c))) for X ~ Binomial(b + c, ½); 1 when there is nothing to split."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def _discordant(correct_a, correct_b) -> tuple[int, int]:
    correct_a, correct_b = _correct(correct_a, "correct_a"), _correct(correct_b, "correct_b")
    if len(correct_a) != len(correct_b):
        raise ValueError(f"correct_a and correct_b must cover the same images, got {len(correct_a)} and "
                         f"{len(correct_b)} characters")
    b = sum(x == "1" and y == "0" for x, y in zip(correct_a, correct_b))
    c = sum(x == "0" and y == "1" for x, y in zip(correct_a, correct_b))
    return b, c


def correct_string(correct) -> str:
    """Which test images a network got right, as the string of 0s and 1s :func:`mcnemar_test` reads (one character
    per image, in order): from a boolean tensor or sequence, e.g. ``predictions == labels``. Chapter 08."""
    values = correct.tolist() if hasattr(correct, "tolist") else list(correct)
    if not values or not all(isinstance(v, bool) for v in values):
        raise ValueError("correct must be a non-empty 1-D boolean tensor or sequence (predictions == labels)")
    return "".join("1" if ok else "0" for ok in values)


def mcnemar_test(correct_a: str, correct_b: str) -> McNemar:
    """McNemar's exact test of two classifiers on the same test images: are their error rates different?

    ``correct_a`` and ``correct_b`` are a record's ``correct`` strings (one 0/1 per image, same images). Only the
    images where they disagree count: b = A right and B wrong, c = the reverse; under the null hypothesis each
    disagreement goes either way with probability ½, so the two-sided p-value is
    ``min(1, 2 · P(X ≤ min(b, c)))`` for X ~ Binomial(b + c, ½). Chapter 08.
    """
    b, c = _discordant(correct_a, correct_b)
    return McNemar(b, c, _binomial_two_sided(b, c))


def pooled_mcnemar_test(pairs) -> McNemar:
    """McNemar's exact test pooled over seeds: ``pairs`` is one ``(correct_a, correct_b)`` per seed (stratum).

    Under the null hypothesis that in every seed a discordant image is as likely to favour A as B, the total
    Σ b_s given the total number of discordant images N = Σ (b_s + c_s) is Binomial(N, ½) whatever the strata:
    the exact conditional form of the Cochran–Mantel–Haenszel test for matched pairs. It treats the images of
    different seeds as independent pairs, which they are not quite (they are the same images): read it as the
    evidence of these trained networks, and the paired t test over seeds as the evidence about training.
    Chapter 08.
    """
    if isinstance(pairs, (str, bytes)) or not hasattr(pairs, "__iter__"):
        raise ValueError("pairs must be a sequence of (correct_a, correct_b), one per seed")
    pairs = list(pairs)
    if not pairs or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
        raise ValueError("pairs must be a non-empty sequence of (correct_a, correct_b), one per seed")
    counts = [_discordant(a, b) for a, b in pairs]
    b, c = sum(x for x, _ in counts), sum(y for _, y in counts)
    return McNemar(b, c, _binomial_two_sided(b, c), strata=len(counts))


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided t tests (TOST) of −``margin`` < mean(a − b) < ``margin``: ``p_lower`` tests
    H0: mean ≤ −margin, ``p_upper`` H0: mean ≥ +margin, ``p_value`` = the larger; ``interval`` is the (1 − 2α)
    confidence interval, which lies inside ±margin exactly when p_value < α. Chapter 08."""

    mean: float
    se: float
    df: int
    margin: float
    p_lower: float
    p_upper: float
    p_value: float
    interval: tuple
    alpha: float


def tost_paired(a, b, margin: float, alpha: float = 0.05) -> Equivalence:
    """Equivalence of ``a`` and ``b`` (one value per seed, paired) within ±``margin``: two one-sided paired t tests,
    both of which must reject for equivalence (Schuirmann's TOST). Chapter 08."""
    margin = check_nonnegative(margin, "margin")
    if margin == 0:
        raise ValueError("margin must be a number > 0: equivalence within ±0 cannot be shown")
    lower = paired_t_test(a, b, null=-margin, alternative="greater", alpha=alpha)
    upper = paired_t_test(a, b, null=margin, alternative="less", alpha=alpha)
    half = (t_quantile(1 - alpha, lower.df) * lower.se) if lower.se > 0 else 0.0
    return Equivalence(lower.mean, lower.se, lower.df, margin, lower.p_value, upper.p_value,
                       max(lower.p_value, upper.p_value), (lower.mean - half, lower.mean + half), alpha)


def holm(p_values) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (in their order): sort them, multiply the k-th smallest (from 0) by
    (m − k), keep the running maximum, cap at 1. Rejecting where the adjusted p < α keeps the chance of any false
    rejection in the family ≤ α. Chapter 08."""
    ps = _numbers(p_values, "p_values", minimum=1)
    if any(not 0 <= p <= 1 for p in ps):
        raise ValueError(f"p_values must lie in [0, 1], got {ps}")
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted, running = [0.0] * m, 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * ps[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Comparison:
    """One claim about A against B, as one-sided paired t tests over seeds (:func:`compare`). ``estimate`` is
    mean(a − b) in the direction where higher is better, ``sd`` the spread of the per-seed differences over ``n``
    seeds, ``interval`` the two-sided (1 − 2α) confidence interval of the mean (unadjusted), ``p_support`` the p-value
    for the claim, ``p_contradict`` against it, and ``p_smaller`` (None without a ``size``) the p-value that the
    difference is smaller than the paper's stated ``size``."""

    kind: str
    margin: float
    estimate: float
    interval: tuple
    df: int
    p_support: float
    p_contradict: float
    n: int = 0
    sd: float = 0.0
    size: Optional[float] = None
    p_smaller: Optional[float] = None
    test: str = "paired t over seeds"


def compare(a, b, kind: str, margin: float = 0.0, *, lower_is_better: bool = False, alpha: float = 0.05,
            size: Optional[float] = None) -> Comparison:
    """A claim about ``a`` against ``b`` (one value per seed each, paired), as one-sided paired t tests on
    d = a − b (negated first when ``lower_is_better``: time, entropy). Chapter 08.

    ====================  ==============================================  ============================================
    ``kind``              supported when the test rejects                 contradicted when the test rejects
    ====================  ==============================================  ============================================
    ``"better"``          H0: d ≤ 0 (A is ahead)                          H0: d ≥ 0 (A is behind)
    ``"equivalent"``      H0: d ≤ −margin or d ≥ margin (TOST)            H0: −margin ≤ d ≤ margin, either side (×2)
    ``"not worse"``       H0: d ≤ −margin (A is not behind by margin)     H0: d ≥ −margin (A is behind by more)
    ====================  ==============================================  ============================================

    The rule is symmetric: a claim of being better is contradicted only by a significant difference the other way,
    never by a significant gain smaller than some margin. Where the paper states the size of its effect (``size``,
    > 0, on the same scale as d), ``p_smaller`` tests H0: d ≥ size: a supported claim whose effect is significantly
    smaller than the paper's is *supported, smaller* (:mod:`capsule_lab.evidence.rules`).
    """
    check_one_of(kind, KINDS, "kind")
    margin = check_nonnegative(margin, "margin")
    if kind == "equivalent" and margin == 0:
        raise ValueError("margin must be a number > 0 for an 'equivalent' claim: equivalence within ±0 cannot be "
                         "shown")
    if size is not None:
        size = check_nonnegative(size, "size")
        if size == 0 or kind != "better":
            raise ValueError("size must be a number > 0, and only a claim of kind 'better' has a size (the effect "
                             "the paper states)")
    a, b = _numbers(a, "a"), _numbers(b, "b")
    if lower_is_better:
        a, b = [-x for x in a], [-x for x in b]

    def one_sided(null, alternative):
        return paired_t_test(a, b, null=null, alternative=alternative, alpha=alpha)

    if kind == "better":
        support, against = one_sided(0.0, "greater"), one_sided(0.0, "less")
        p_support, p_contradict = support.p_value, against.p_value
    elif kind == "equivalent":
        support = tost_paired(a, b, margin, alpha)
        above, below = one_sided(margin, "greater"), one_sided(-margin, "less")
        p_support, p_contradict = support.p_value, min(1.0, 2 * min(above.p_value, below.p_value))
    else:
        support, against = one_sided(-margin, "greater"), one_sided(-margin, "less")
        p_support, p_contradict = support.p_value, against.p_value
    base = one_sided(0.0, "two-sided")
    half = t_quantile(1 - alpha, base.df) * base.se
    p_smaller = None if size is None else one_sided(size, "less").p_value
    return Comparison(kind, margin, base.mean, (base.mean - half, base.mean + half), base.df, p_support, p_contradict,
                      base.n, base.sd, size, p_smaller)


def interval(comparison: Comparison, alpha: float) -> tuple:
    """The two-sided (1 − 2·``alpha``) confidence interval of a :func:`compare` estimate: ``alpha`` = 0.05 gives the
    90 % interval whose ends are the one-sided tests' bounds; ``alpha`` = 0.05/m the interval of a family of m tests
    (Bonferroni). Chapter 08."""
    if not isinstance(comparison, Comparison):
        raise ValueError(f"comparison must be a Comparison (from compare), got {type(comparison).__name__}")
    half = t_quantile(1 - _probability(alpha, "alpha"), comparison.df) * comparison.sd / math.sqrt(comparison.n)
    return comparison.estimate - half, comparison.estimate + half


# ------------------------------------------------------------------------------------------------------ power

def power_paired_t(effect: float, sd: float, n: int, alpha: float) -> float:
    """The power of the one-sided paired t test at level ``alpha`` over ``n`` seeds: the chance that it rejects when
    the true mean difference lies ``effect`` beyond the null and the differences have standard deviation ``sd``.
    Under that alternative the statistic follows the noncentral t with n − 1 degrees of freedom and noncentrality
    effect·√n / sd, so the power is P(T' > t_{1−α, n−1}) (SciPy's ``nct``). Chapter 08."""
    for name, v in (("effect", effect), ("sd", sd)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if sd <= 0:
        raise ValueError(f"sd must be a number > 0 (with no spread any effect is certain), got {sd!r}")
    n = check_positive_int(n, "n")
    if n < 2:
        raise ValueError("n must be an integer >= 2: a t test needs two seeds")
    from scipy.stats import nct as noncentral_t

    critical = t_quantile(1 - _probability(alpha, "alpha"), n - 1)
    return float(noncentral_t.sf(critical, n - 1, effect * math.sqrt(n) / sd))


def min_detectable_effect(sd: float, n: int, alpha: float, power: float = 0.8) -> float:
    """The smallest true mean difference the one-sided paired t test over ``n`` seeds detects with probability
    ``power`` at level ``alpha``, given the spread ``sd`` of the per-seed differences: the effect at which
    :func:`power_paired_t` equals ``power`` (solved by Brent's method). Each verdict row prints it at its family's
    strictest level. Chapter 08."""
    power = _probability(power, "power")
    if power_paired_t(0.0, sd, n, alpha) >= power:
        return 0.0
    high = sd
    while power_paired_t(high, sd, n, alpha) < power:
        high *= 2
    from scipy.optimize import brentq

    return float(brentq(lambda e: power_paired_t(e, sd, n, alpha) - power, 0.0, high, xtol=1e-12 * high))


def seeds_needed(effect: float, sd: float, alpha: float, power: float = 0.8, limit: int = 10_000) -> Optional[int]:
    """How many seeds the one-sided paired t test needs to detect a true mean difference ``effect`` (> 0, beyond the
    null) with probability ``power`` at level ``alpha``, given the spread ``sd``: the smallest n ≥ 2 with
    :func:`power_paired_t` ≥ ``power``; None when not even ``limit`` seeds would (the effect is too small against
    the spread). Chapter 08."""
    power = _probability(power, "power")
    if isinstance(effect, bool) or not isinstance(effect, (int, float)) or not effect > 0:
        raise ValueError(f"effect must be a number > 0 (a difference beyond the null), got {effect!r}")
    if power_paired_t(effect, sd, limit, alpha) < power:
        return None
    low, high = 2, limit                                 # power rises with n: the smallest n is found by bisection
    if power_paired_t(effect, sd, low, alpha) >= power:
        return low
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if power_paired_t(effect, sd, middle, alpha) >= power else (middle, high)
    return high
