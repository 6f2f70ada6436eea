"""A paper's claim, the course's question, and the verdict :mod:`capsule_lab.evidence.stats` gives it. Chapters 04–08.

A :class:`Claim` keeps apart three things a careless table mixes up:

- **the paper's claim**: quoted (``quoted=True``) or closely paraphrased from a named section or table
  (``source``), with the setting the paper showed it in (``paper_setting``);
- **our question**: the comparison the records can make (``a`` against ``b`` on ``measure``, a
  :func:`~capsule_lab.evidence.stats.compare` ``kind`` with the measure's margin), and what differs between ``a`` and
  ``b`` besides the variable (``differs``);
- **where they come from**: ``origin="paper"`` for a paper's claim, ``origin="course"`` for a question the course
  asks that no paper answered in these words (it is labelled so, never attributed).

:func:`claim_verdicts` tests a table of claims on a study's records — one dict per trained network and seed, with
``"router"`` (the name ``a`` and ``b`` refer to), ``"seed"``, the measures, and ``"train_accuracy"`` per epoch — with
:mod:`capsule_lab.evidence.stats`: a paired t test over seeds, Holm's correction over the whole table, and *undecided*
where the claim cannot be tested — a network that has not converged (:func:`~capsule_lab.evidence.stats.converged` on
every seed's training accuracy; a step's time is exempt), an entropy within :data:`CEILING_BITS` of its ceiling
(:func:`~capsule_lab.evidence.stats.at_ceiling`), or times measured on different devices or thread counts. Beside each
verdict about accuracy it gives the pooled McNemar test of the same two networks on the test images
(:func:`~capsule_lab.evidence.stats.pooled_mcnemar_test`, where the records keep each image's result): the evidence
about these trained networks rather than about training.

Each chapter keeps its own table beside its study: chapter 04's in :mod:`capsule_lab.studies.depth`, chapter 06's in
:mod:`capsule_lab.studies.ladder`, chapter 08's (every router on one bench) in :mod:`capsule_lab.studies.bench.claims`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

from .._checks import check_one_of
from . import stats

__all__ = ["Measure", "MEASURES", "ACCURACY_MARGIN", "AFFINE_MARGIN", "ENTROPY_MARGIN", "TIME_MARGIN", "SHARE_MARGIN",
           "DEAD_MARGIN", "SALIENCY_MARGIN", "KEYS_MARGIN", "CEILING_BITS", "CONVERGENCE", "Claim", "ClaimRow",
           "claim_verdicts", "advantage", "margin_text", "describe", "convergence"]


class Measure(NamedTuple):
    """What a claim compares: whether lower is better, whether it is compared on a log scale (a time, so that the
    difference is a ratio), the margin (the smallest difference that matters, on that scale) and the unit
    :func:`advantage` prints ("points", "bits", "times" or "share")."""

    lower_is_better: bool
    log: bool
    margin: float
    unit: str


#: Half a point of clean accuracy is about 1.5 binomial standard errors of one accuracy near 98 % on 2,000 images; a
#: point of affine accuracy is about one standard error near 85 %; then half a bit of parse-tree entropy, and 20 % of a
#: training step's time (ln 1.2 on the log scale).
ACCURACY_MARGIN, AFFINE_MARGIN, ENTROPY_MARGIN, TIME_MARGIN = 0.005, 0.01, 0.5, math.log(1.2)
#: The margin of the number of parse trees (keys) per class, compared as a ratio, is 20 % fewer (ln 1.2).
KEYS_MARGIN = math.log(1.2)
#: The margin of a share of capsules is 5 % of them (7.5 of the 150 ranks of chapter 06's activity profile).
SHARE_MARGIN = 0.05
#: The margin of a dead rate is one capsule of a layer of 16 (chapter 04's networks).
DEAD_MARGIN = 1 / 16
#: The margin of a saliency map's share on the object (chapter 05) is 2 % of the map's mass.
SALIENCY_MARGIN = 0.02
#: The margin of a mean coupling coefficient (chapter 06, the ladder paper's Figure 1) is 0.01, a tenth of the uniform
#: coupling 1/J of J = 10 classes.
COUPLING_MARGIN = 0.01

#: The measures a claim may name. ``affine_drop`` is clean minus affine accuracy (chapter 06); ``middle_share`` the
#: share of the most active primary capsules whose mean activity is neither high nor low (chapter 06, Figure 4);
#: ``dead_rate`` the share of a layer's (or the hidden layers') capsules that are dead (chapter 04); ``on_object`` the
#: share of a saliency map's mass on the object's pixels (chapter 05); ``coupling`` a group of capsules' mean
#: coupling coefficient to the right class (chapter 06, Figure 1).
MEASURES = {"accuracy": Measure(False, False, ACCURACY_MARGIN, "points"),
            "affine_accuracy": Measure(False, False, AFFINE_MARGIN, "points"),
            "affine_drop": Measure(True, False, AFFINE_MARGIN, "points"),
            "entropy": Measure(True, False, ENTROPY_MARGIN, "bits"),
            "train_step_ms": Measure(True, True, TIME_MARGIN, "times"),
            "keys": Measure(True, True, KEYS_MARGIN, "ratio"),
            "middle_share": Measure(True, False, SHARE_MARGIN, "share"),
            "dead_rate": Measure(True, False, DEAD_MARGIN, "share"),
            "on_object": Measure(False, False, SALIENCY_MARGIN, "share"),
            "coupling": Measure(False, False, COUPLING_MARGIN, "coupling")}
#: An entropy within this many bits of its ceiling (log₂ of the images per class) is saturated.
CEILING_BITS = 0.5
#: The convergence criterion (:func:`~capsule_lab.evidence.stats.converged`): the last epoch's training accuracy within
#: half a point of the epoch before's.
CONVERGENCE = 0.005


@dataclass(frozen=True)
class Claim:
    """One row of a verdict table: the paper's claim (or the course's question) and its test. Chapters 04–08."""

    paper: str
    chapter: str
    source: str
    statement: str
    quoted: bool
    paper_setting: str
    question: str
    a: str
    b: str
    measure: str
    kind: str
    differs: str
    origin: str = "paper"

    def __post_init__(self):
        check_one_of(self.measure, tuple(MEASURES), "measure")
        check_one_of(self.kind, stats.KINDS, "kind")
        check_one_of(self.origin, ("paper", "course"), "origin")
        if not self.source.strip() or not self.statement.strip():
            raise ValueError("a claim must name its source (section or table) and state what it claims")

    @property
    def margin(self) -> float:
        return MEASURES[self.measure].margin


@dataclass(frozen=True)
class ClaimRow:
    """A claim, its verdict (:class:`~capsule_lab.evidence.stats.Verdict`), and the pooled McNemar test of the two
    networks on the test images (None for measures other than accuracy, or records without each image's result)."""

    claim: Claim
    verdict: stats.Verdict
    mcnemar: stats.McNemar | None


def _untestable(claim: Claim, by_router: dict, seeds: list, ceiling) -> list:
    """Why ``claim`` cannot be tested on these seeds (empty when it can): :func:`claim_verdicts`' three rules."""
    measure, why = MEASURES[claim.measure], []
    for name in dict.fromkeys((claim.a, claim.b)):
        notes = sorted({by_router[name][s]["untestable"] for s in seeds if by_router[name][s].get("untestable")})
        why += [f"{name}: {note}" for note in notes]
    timed = measure.unit == "times"
    for name in dict.fromkeys((claim.a, claim.b)) if not timed else ():        # a step's time needs no convergence
        curves = [(s, by_router[name][s]["train_accuracy"]) for s in seeds if not by_router[name][s].get("untestable")]
        late = [s for s, curve in curves if len(curve) < 2 or not stats.converged(curve, CONVERGENCE)]
        if late:
            why.append(f"{name} not converged (seeds {', '.join(map(str, late))}: the last epoch moved the "
                       f"training accuracy by {CONVERGENCE * 100:g} points or more)")
    if timed:                                           # times compare only on the same device and thread count
        machines = {name: sorted({(by_router[name][s].get("device"), by_router[name][s].get("threads"))
                                  for s in seeds}, key=str) for name in (claim.a, claim.b)}
        if len(set(map(tuple, machines.values()))) > 1 or len(machines[claim.a]) > 1:
            why.append("timed on different devices or thread counts (" + "; ".join(
                f"{name}: " + ", ".join(f"{d} with {t} thread{'s' if t != 1 else ''}" for d, t in found)
                for name, found in machines.items()) + ")")
    if claim.measure == "entropy":
        for name in dict.fromkeys((claim.a, claim.b)):
            own = [by_router[name][s].get("entropy_ceiling") for s in seeds]
            if None in own and ceiling is None:
                raise ValueError("ceiling must be given (entropy_ceiling of the test labels) for a claim about "
                                 "entropy, unless every record holds its own 'entropy_ceiling'")
            top = ceiling if None in own else sum(own) / len(own)
            values = [by_router[name][s]["entropy"] for s in seeds]
            mean = None if None in values else sum(values) / len(values)
            if mean is not None and stats.at_ceiling(mean, top, CEILING_BITS):
                why.append(f"{name}'s entropy {mean:.2f} bits is within {CEILING_BITS} of its ceiling "
                           f"{top:.2f}: every image has its own parse tree, so the measure is saturated")
    return why


def claim_verdicts(records: list, claims, alpha: float = 0.05, ceiling: float | None = None) -> list:
    """Test every claim on a study's ``records`` (one dict per network and seed: ``"router"``, ``"seed"``, each
    measure a claim names, ``"train_accuracy"`` per epoch; ``"correct"``/``"affine_correct"`` per test image where
    kept): one :class:`ClaimRow` per claim, in order. The claims are one family (Holm); a claim is *undecided — not
    testable* when a network it names has a seed that is not converged (:data:`CONVERGENCE`; not asked of a step's
    time); for entropy, when either network's mean lies within :data:`CEILING_BITS` of ``ceiling`` (bits,
    :func:`~capsule_lab.measures.parse_trees.entropy_ceiling` of the test labels; needed for a claim about
    entropy unless every record holds its own ``"entropy_ceiling"``); for time, when the two networks were timed on different devices or thread counts;
    and whatever the claim, when the two networks share one seed only (nothing to test between training runs) or
    a record says why it cannot be compared (``"untestable"``: why; its measure may then be None). Chapters 04–08.
    """
    if not isinstance(records, list) or not records:
        raise ValueError("records must be a non-empty list of dicts, one per network and seed")
    by_router: dict = {}
    for r in records:
        by_router.setdefault(r["router"], {})[r["seed"]] = r
    claims = tuple(claims)
    for claim in claims:
        if not isinstance(claim, Claim):
            raise ValueError(f"claims must be Claim objects, got {type(claim).__name__}")
        for name in (claim.a, claim.b):
            if name not in by_router:
                raise ValueError(f"claim {claim.question!r} names router {name!r}, which the records do not hold")
    comparisons, untestable, pooled, seeds_used, epochs = {}, {}, {}, {}, {}
    for k, claim in enumerate(claims):
        seeds = sorted(set(by_router[claim.a]) & set(by_router[claim.b]))
        if not seeds:
            raise ValueError(f"claim {claim.question!r}: {claim.a!r} and {claim.b!r} share no seed")
        seeds_used[k] = len(seeds)
        epochs[k] = tuple(max(len(by_router[name][s]["train_accuracy"]) for s in seeds) for name in (claim.a, claim.b))
        measure = MEASURES[claim.measure]
        value = math.log if measure.log else float
        raw = [[by_router[name][s][claim.measure] for s in seeds] for name in (claim.a, claim.b)]
        why = [] if len(seeds) > 1 else [f"one seed ({seeds[0]}): a claim about training needs two or more "
                                         f"training runs (a paired t test over seeds)"]
        why += _untestable(claim, by_router, seeds, ceiling)
        testable = len(seeds) > 1 and not any(x is None for values in raw for x in values)
        comparisons[k] = stats.compare([value(x) for x in raw[0]], [value(x) for x in raw[1]], claim.kind,
                                       claim.margin, lower_is_better=measure.lower_is_better,
                                       alpha=alpha) if testable else None
        if why:
            untestable[k] = "; ".join(why)
        field = {"accuracy": "correct", "affine_accuracy": "affine_correct"}.get(claim.measure)
        if field and all(field in by_router[name][s] for name in (claim.a, claim.b) for s in seeds):
            pooled[k] = stats.pooled_mcnemar_test([(by_router[claim.a][s][field], by_router[claim.b][s][field])
                                                   for s in seeds])
    verdicts = stats.decide(comparisons, alpha, untestable)
    return [ClaimRow(claim, replace(verdicts[k], extra={"seeds": seeds_used[k], "epochs": epochs[k]}), pooled.get(k))
            for k, claim in enumerate(claims)]


def advantage(claim: Claim, value: float) -> str:
    """A claim's estimate (A's advantage over B, positive = A better: :func:`~capsule_lab.evidence.stats.compare`) in
    the claim's units: points of accuracy, bits of entropy, how many times as fast for a step's time, how many times
    fewer parse trees, a share of capsules. Chapters 04–08."""
    unit = MEASURES[claim.measure].unit
    lower = MEASURES[claim.measure].lower_is_better
    if unit == "points":
        return f"{100 * value:+.2f} points" + (" smaller" if lower else "")
    if unit == "bits":
        return f"{abs(value):.2f} bits {'lower' if value >= 0 else 'higher'}"
    if unit == "times":
        return f"{math.exp(value):.2f}× as fast"
    if unit == "ratio":
        return f"{math.exp(value):.2f}× fewer"
    better, worse = ("lower", "higher") if lower else ("higher", "lower")
    return f"{abs(value):.3f} {better if value >= 0 else worse}"


def margin_text(claim: Claim) -> str:
    """A claim's margin in its units: "0.5 points", "0.5 bits", "1.2×", "0.05". Chapters 04–08."""
    unit = MEASURES[claim.measure].unit
    if unit == "points":
        return f"{100 * claim.margin:.1f} points"
    if unit == "bits":
        return f"{claim.margin:g} bits"
    return f"{math.exp(claim.margin):g}×" if unit in ("times", "ratio") else f"{claim.margin:.3g}"


def describe(row: ClaimRow) -> str:
    """Two lines for a verdict table: the question and its verdict with the test, α, margin, adjusted p-values,
    A's advantage with its interval in the claim's units, and the pooled McNemar test where there is one.
    Chapters 04–08."""
    claim, v = row.claim, row.verdict
    margin = margin_text(claim)
    head = f"[{claim.chapter}] {claim.question} ({claim.paper}, {claim.source})"
    a_epochs, b_epochs = v.extra.get("epochs", (None, None))
    if a_epochs != b_epochs:
        head += f"\n     budgets differ: {claim.a} trained {a_epochs} epochs, {claim.b} {b_epochs}"
    if v.p_support is None:
        line = f"     {v.outcome.upper()}: {v.reason}"
    else:
        low, high = v.interval
        line = (f"     {v.outcome.upper()}: A's advantage {advantage(claim, v.estimate)}, 90 % interval "
                f"[{advantage(claim, low)}, {advantage(claim, high)}]; paired t over {v.extra.get('seeds', '?')} "
                f"seeds, claim '{claim.kind}', margin {margin}, Holm over the table: p for {v.p_support:.2g}, "
                f"p against {v.p_contradict:.2g} (α = {v.alpha:g})")
    if row.mcnemar is not None:
        m = row.mcnemar
        line += f"\n     images: {m.a_only} right for A only, {m.b_only} for B only; pooled McNemar p = {m.p_value:.2g}"
    return f"{head}\n{line}"


def convergence(records: list) -> dict:
    """``{router: [change of the training accuracy over the last epoch, one per seed]}``, in the records' order: what
    the convergence criterion (:data:`CONVERGENCE`) reads. Chapters 04–08."""
    changes: dict = {}
    for r in records:
        accuracy = r["train_accuracy"]
        if len(accuracy) < 2:
            raise ValueError(f"record {r['router']!r}, seed {r['seed']} has one epoch: convergence needs two")
        changes.setdefault(r["router"], []).append(accuracy[-1] - accuracy[-2])
    return changes
