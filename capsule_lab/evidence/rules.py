"""The rules every verdict of the course follows: when a claim can be tested at all, how a table's tests are adjusted,
and what each outcome means. Taught in chapter 08; chapters 04–08 read their verdicts here.

A verdict table asks, for each paper's claim (and each question the course asks), whether A beats B on some measure
over several training seeds. :mod:`capsule_lab.evidence.stats` gives the tests; this module decides what they may
conclude, by one rule for every chapter.

**When a claim is not testable here** (the outcome ``"not testable"``, with the reason named), whatever its
p-values say:

- *a premise is absent* — each claim lists what the paper's setting has and its claim rests on (:class:`Premise`,
  quoted), each study says what its setting has; a missing premise names itself (:func:`missing_premises`);
- *the measure cannot tell the networks apart* — each measure declares its null (:class:`Null`: the value it takes
  when it measures nothing: a shuffled baseline, uniform couplings, one parse tree per image, a flat profile), and
  a claim is testable only when at least one of its two networks clears that null by the measure's margin
  (:func:`clears`). *At least one*, not both: a network sitting on the null still has its value, and the other's
  distance from it is the difference the claim is about — the REM paper's own dense network has 9.53 bits against
  a ceiling of ≈ 9.97 (Table 9), and the rule must not make the paper's own comparison untestable;
- *a network is collapsed* — its last training accuracy closed less than :data:`COLLAPSE_SHARE` of the way from
  chance (1/J) to 1 (:func:`collapsed`) — or *not converged* — its last epoch still moved the training accuracy by
  :data:`CONVERGENCE` or more (:func:`converged`); a step's time needs neither;
- *a time was not measured by the timing rule* — the two networks' steps interleaved (A, B, A, B, …), at least
  :data:`MIN_TIMED_STEPS` timed steps per seed, the machine's load recorded (:func:`timing_problems`);
- *one seed* — nothing to test between training runs.

**Families, fixed in advance.** A chapter's paper claims (in the direction the paper claims) are one family, the
course's own questions another (:data:`FAMILIES`). Within each, Holm's step-down adjusts every p-value of every
testable row together (:func:`~capsule_lab.evidence.stats.holm`): for each row the p-value for the claim, the one
against it, and where the paper states a size, the one for "smaller than that size".

**Outcomes** (:data:`OUTCOMES`), from the adjusted p-values at α:

- *supported* — the test for the claim rejects; *supported, smaller* — and the effect is significantly smaller than
  the paper's stated size (where it states one);
- *contradicted* — significant the other way: for "better", A significantly behind; for "not worse", behind by
  significantly more than the margin; for "equivalent", significantly outside ±margin. A significant effect in the
  claimed direction never reads *contradicted*;
- *undecided* — neither rejects; the row says how many seeds would decide it
  (:func:`~capsule_lab.evidence.stats.seeds_needed`, with the measured mean and spread);
- *depends on the setting* — a timing claim measured at several thread counts whose outcomes differ;
- *not testable* — above.

Every testable row also prints its power: the smallest effect its seeds could detect (power :data:`POWER`, at the
family's strictest Holm level α/m, the spread as measured: :func:`~capsule_lab.evidence.stats.min_detectable_effect`),
and two intervals, labelled: the unadjusted (1 − 2α) one and the one of the whole family (Bonferroni, 1 − 2α/m).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from .._checks import check_nonnegative, check_one_of
from . import stats

__all__ = ["OUTCOMES", "FAMILIES", "POWER", "CONVERGENCE", "COLLAPSE_SHARE", "MIN_TIMED_STEPS", "Premise",
           "missing_premises", "Null", "clears", "converged", "collapsed", "chance_ceiling", "timing_problems", "Case",
           "Verdict", "judge"]

#: A verdict's outcome.
OUTCOMES = ("supported", "supported, smaller", "contradicted", "undecided", "depends on the setting", "not testable")
#: The families a chapter's rows fall into, each adjusted by Holm on its own.
FAMILIES = ("paper", "course")
#: The power at which a row's smallest detectable effect and the seeds that would decide it are computed.
POWER = 0.8
#: How close the last epoch's training accuracy must lie to the epoch before's for a network to count as converged
#: (half a point).
CONVERGENCE = 0.005
#: A network is collapsed when its last training accuracy has closed less than this share of the way from chance
#: (1/J) to 1, which is below 32.5 % with 10 classes.
COLLAPSE_SHARE = 0.25
#: The timing rule's least number of timed steps per network and seed.
MIN_TIMED_STEPS = 10


def _number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Premise:
    """What a paper's claim rests on in the paper's own setting: a ``key`` a study's setting answers, the paper's
    words (``quote``) and where they stand (``source``). Chapters 04–08."""

    key: str
    quote: str
    source: str

    def __post_init__(self):
        if not self.key.strip() or not self.quote.strip() or not self.source.strip():
            raise ValueError("a premise must have a key, the paper's words and their source")


def missing_premises(premises: Sequence[Premise], setting: Mapping) -> list:
    """The reasons ``premises`` are absent from a study's ``setting`` (``{key: (holds, what the setting has)}``), in
    order; empty when every premise holds. A premise the setting does not answer is an error: every study must say
    what its setting has. Chapters 04–08."""
    why = []
    for premise in premises:
        if not isinstance(premise, Premise):
            raise ValueError(f"premises must be Premise objects, got {type(premise).__name__}")
        if premise.key not in setting:
            raise ValueError(f"the setting does not say whether it has the premise {premise.key!r} "
                             f"({premise.quote!r}, {premise.source}): add it to the study's setting")
        holds, here = setting[premise.key]
        if not isinstance(holds, bool) or not isinstance(here, str):
            raise ValueError(f"setting[{premise.key!r}] must be (holds: bool, what the setting has: str)")
        if not holds:
            why.append(f"premise absent: the paper's \"{premise.quote}\" ({premise.source}); here {here}")
    return why


@dataclass(frozen=True)
class Null:
    """A measure's null: the value it takes when it cannot tell one network from another. ``field`` is the record
    field that holds it for each network and seed, ``words`` says what it is, ``side`` where an informative value lies
    (``"below"`` or ``"above"`` it), ``margin`` how far beyond it (on a log scale when ``log``: a ratio).
    Chapters 04–08."""

    field: str
    words: str
    side: str
    margin: float
    log: bool = False

    def __post_init__(self):
        check_one_of(self.side, ("below", "above"), "side")
        check_nonnegative(self.margin, "margin")


def clears(values: Sequence[float], nulls: Sequence[float], null: Null) -> bool:
    """Whether a network's mean over seeds (``values``) lies beyond the mean of its ``nulls`` by ``null.margin`` on the
    informative side: it measures something the null does not. Chapters 04–08."""
    values = [_number(v, "values") for v in values]
    nulls = [_number(v, "nulls") for v in nulls]
    if not values or not nulls:
        raise ValueError("values and nulls must hold at least one number each")
    f = math.log if null.log else float
    value, at = f(sum(values) / len(values)), f(sum(nulls) / len(nulls))
    return (at - value if null.side == "below" else value - at) >= null.margin


def converged(train_accuracy: Sequence[float], tolerance: float = CONVERGENCE) -> bool:
    """The course's convergence criterion: the last epoch's training accuracy differs from the epoch before by less
    than ``tolerance`` (0.005 = half a point). A model still climbing (or falling) is not converged. Chapters 04–08."""
    accuracies = [_number(v, "train_accuracy") for v in train_accuracy]
    if len(accuracies) < 2:
        raise ValueError(f"train_accuracy must hold at least 2 numbers (one per epoch), got {len(accuracies)}")
    return abs(accuracies[-1] - accuracies[-2]) < check_nonnegative(tolerance, "tolerance")


def chance_ceiling(classes: int, share: float = COLLAPSE_SHARE) -> float:
    """The training accuracy below which a network of ``classes`` classes is collapsed: 1/J + share·(1 − 1/J).
    Chapters 04–08."""
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2, got {classes!r}")
    if not 0 < _number(share, "share") < 1:
        raise ValueError(f"share must be a number in (0, 1), got {share!r}")
    return 1 / classes + share * (1 - 1 / classes)


def collapsed(train_accuracy: Sequence[float], classes: int, share: float = COLLAPSE_SHARE) -> bool:
    """Whether a network is collapsed: its last epoch's training accuracy is below :func:`chance_ceiling`. A network
    flat at chance passes the convergence criterion (it has stopped learning) but is not a trained network of the
    kind a claim is about. Chapters 04–08."""
    accuracies = [_number(v, "train_accuracy") for v in train_accuracy]
    if not accuracies:
        raise ValueError("train_accuracy must hold at least one number")
    return accuracies[-1] < chance_ceiling(classes, share)


def timing_problems(records: Sequence[Mapping]) -> list:
    """Why the times in ``records`` (one per network and seed) do not meet the timing rule, empty when they do: each
    must be ``"interleaved"`` with the other network's steps, hold at least :data:`MIN_TIMED_STEPS` ``"timed_steps"``
    and the machine's ``"load"`` before and after. Chapters 06 and 08."""
    why = []
    if not all(r.get("interleaved") for r in records):
        why.append("the steps were not interleaved with the other network's")
    steps = [r.get("timed_steps") or 0 for r in records]
    if min(steps) < MIN_TIMED_STEPS:
        why.append(f"{min(steps)} timed step{'s' if min(steps) != 1 else ''} per seed where it asks {MIN_TIMED_STEPS}")
    if not all(isinstance(r.get("load"), (list, tuple)) and len(r["load"]) == 2 for r in records):
        why.append("the machine's load was not recorded")
    return ["the timing rule is not met: " + "; ".join(why)] if why else []


@dataclass(frozen=True)
class Case:
    """One row for :func:`judge`: its ``family`` (one of :data:`FAMILIES`), its comparisons (``{setting: Comparison}``:
    one, keyed None, for most claims; one per thread count for a time) and ``untestable`` (the reasons it cannot be
    tested; then its comparisons may be empty). Chapters 04–08."""

    family: str
    comparisons: Mapping
    untestable: tuple = ()

    def __post_init__(self):
        check_one_of(self.family, FAMILIES, "family")
        if not self.untestable and not self.comparisons:
            raise ValueError("a testable case needs at least one comparison (from compare)")
        for c in self.comparisons.values():
            if not isinstance(c, stats.Comparison):
                raise ValueError(f"comparisons must hold Comparison objects (from compare), got {type(c).__name__}")


@dataclass(frozen=True)
class Verdict:
    """A row's verdict: ``outcome`` (one of :data:`OUTCOMES`) and ``reason`` in words; for a tested row, its
    ``family`` and the family's number of tests ``m``, the Holm-adjusted p-values (for, against, smaller), the
    ``estimate``, the unadjusted (1 − 2α) ``interval`` and the family's (Bonferroni, 1 − 2α/m)
    ``family_interval``, the smallest effect its seeds could detect (``detectable``) and, where undecided, the
    ``seeds_needed`` to decide it (None: more than 10,000). A timing row tested at several settings keeps each
    setting's verdict in ``settings``. Chapters 04–08."""

    outcome: str
    reason: str
    family: str
    alpha: float
    test: str = "paired t over seeds"
    m: int = 0
    margin: Optional[float] = None
    size: Optional[float] = None
    p_support: Optional[float] = None
    p_contradict: Optional[float] = None
    p_smaller: Optional[float] = None
    estimate: Optional[float] = None
    interval: Optional[tuple] = None
    family_interval: Optional[tuple] = None
    detectable: Optional[float] = None
    seeds_needed: Optional[int] = None
    n: int = 0
    settings: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @property
    def tested(self) -> bool:
        return self.p_support is not None

    def __str__(self) -> str:
        if not self.tested and not self.settings:
            return f"{self.outcome}: {self.reason}"
        return f"{self.outcome} ({self.test}, Holm over the {self.family} family of {self.m} tests, α = " \
               f"{self.alpha:g}): {self.reason}"


def _decision_distance(c: stats.Comparison) -> tuple:
    """(distance of the estimate beyond the null its side decides, which way) for the seeds an undecided row needs. For
    an equivalence inside its margin that is the nearer bound's one-sided test: TOST needs the farther one too, so
    the seeds it prints are a lower bound there."""
    if c.kind == "better":
        return abs(c.estimate), "for" if c.estimate > 0 else "against"
    if c.kind == "not worse":
        return abs(c.estimate + c.margin), "for" if c.estimate > -c.margin else "against"
    inside = c.margin - abs(c.estimate)                     # equivalent: the nearer bound decides either way
    return abs(inside), "for" if inside > 0 else "against"


def _one(c: stats.Comparison, p_for: float, p_against: float, p_smaller, alpha: float, m: int, family: str) -> Verdict:
    strict = alpha / m
    detectable = stats.min_detectable_effect(c.sd, c.n, strict, POWER) if c.sd > 0 else 0.0
    needed = None
    if p_against < alpha:
        outcome = "contradicted"
        reason = "significant against the claim"
    elif p_for < alpha:
        smaller = p_smaller is not None and p_smaller < alpha
        outcome = "supported, smaller" if smaller else "supported"
        reason = ("significant for the claim, and significantly smaller than the paper's size" if smaller else
                  "significant for the claim")
    else:
        outcome = "undecided"
        distance, side = _decision_distance(c)
        if c.sd == 0 or distance == 0:
            reason = "neither test rejects; the estimate sits on the null, so no number of seeds would decide it"
        else:
            needed = stats.seeds_needed(distance, c.sd, strict, POWER)
            seeds = f"about {needed} seeds" if needed is not None else "more than 10,000 seeds"
            reason = (f"neither test rejects; {seeds} would decide it {side} the claim (power {POWER:g} at α/m = "
                      f"{strict:.2g}, if the mean and spread stay as measured)")
    return Verdict(outcome, reason, family, alpha, c.test, m, c.margin, c.size, p_for, p_against, p_smaller,
                   c.estimate, c.interval, stats.interval(c, strict) if c.sd > 0 else c.interval, detectable, needed,
                   c.n)


def judge(cases: Mapping[str, Case], alpha: float = 0.05) -> dict:
    """The verdicts of a table: ``{name: Verdict}`` in ``cases``' order, by the module's rules. Each family's p-values
    (for, against and, with a size, smaller — per setting of a timing row) are adjusted together by Holm; an untestable
    case leaves its family. Chapters 04–08."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    if not isinstance(cases, Mapping) or not cases:
        raise ValueError("cases must be a non-empty mapping {name: Case}")
    for name, case in cases.items():
        if not isinstance(case, Case):
            raise ValueError(f"cases[{name!r}] must be a Case, got {type(case).__name__}")
    adjusted, sizes = {}, {}
    for family in FAMILIES:
        slots = [(name, setting, kind) for name, case in cases.items() if case.family == family and not case.untestable
                 for setting, c in case.comparisons.items()
                 for kind in ("for", "against") + (("smaller",) if c.p_smaller is not None else ())]
        raw = [getattr(cases[name].comparisons[setting], {"for": "p_support", "against": "p_contradict",
                                                           "smaller": "p_smaller"}[kind]) for name, setting, kind in slots]
        for slot, p in zip(slots, stats.holm(raw) if raw else ()):
            adjusted[slot] = p
        sizes[family] = len(raw)
    verdicts = {}
    for name, case in cases.items():
        if case.untestable:
            verdicts[name] = Verdict("not testable", "; ".join(case.untestable), case.family, alpha)
            continue
        m = sizes[case.family]
        each = {setting: _one(c, adjusted[name, setting, "for"], adjusted[name, setting, "against"],
                              adjusted.get((name, setting, "smaller")), alpha, m, case.family)
                for setting, c in case.comparisons.items()}
        if list(each) == [None]:
            verdicts[name] = each[None]
            continue
        outcomes = {v.outcome for v in each.values()}
        first = next(iter(each.values()))
        if len(outcomes) == 1:
            verdicts[name] = Verdict(first.outcome, f"{first.outcome} at every setting ({'; '.join(each)})",
                                     case.family, alpha, first.test, m, settings=each)
        else:
            verdicts[name] = Verdict("depends on the setting", "; ".join(f"{s}: {v.outcome}" for s, v in each.items()),
                                     case.family, alpha, first.test, m, settings=each)
    return verdicts
