"""A paper's claim, the course's question, and the verdict :mod:`capsule_lab.evidence.rules` gives it. Chapters 04–08.

A :class:`Claim` keeps apart three things a careless table mixes up:

- **the paper's claim**: quoted (``quoted=True``) or closely paraphrased from a named section or table
  (``source``), with the setting the paper showed it in (``paper_setting``), the premises of that setting it rests
  on (``premises``, quoted: :class:`~capsule_lab.evidence.rules.Premise`) and the size of its effect where the paper
  states one (``size``, on the compared scale);
- **our question**: the comparison the records can make (``a`` against ``b`` on ``measure``, a
  :func:`~capsule_lab.evidence.stats.compare` ``kind`` with the measure's margin), and what differs between ``a`` and
  ``b`` besides the variable (``differs``);
- **where they come from**: ``origin="paper"`` for a paper's claim, ``origin="course"`` for a question the course
  asks that no paper answered in these words (it is labelled so, never attributed). The two are separate families.

Each measure (:data:`MEASURES`) says whether lower is better, its scale, its margin and its null
(:class:`~capsule_lab.evidence.rules.Null`: the value at which it measures nothing).

:func:`claim_verdicts` tests a table of claims on a study's records — one dict per trained network and seed, with
``"router"`` (the name ``a`` and ``b`` refer to), ``"seed"``, the measures, their nulls, and ``"train_accuracy"`` per
epoch — by the rules of :mod:`capsule_lab.evidence.rules`: *not testable* where a premise is absent from the study's
``setting``, where neither network clears the measure's null, where a network is collapsed or not converged, where a
time was not taken by the timing rule, or with one seed; else a paired t test over seeds, Holm within the claim's
family, and one of the outcomes. Beside each verdict about accuracy it gives the pooled McNemar test of the same two
networks on the test images (:func:`~capsule_lab.evidence.stats.pooled_mcnemar_test`, where the records keep each
image's result; collapsed seeds left out and named): the evidence about these trained networks rather than about
training.

Each chapter keeps its own table beside its study: chapter 04's in :mod:`capsule_lab.studies.depth`, chapter 05's in
:mod:`capsule_lab.studies.rem_claims`, chapter 06's in :mod:`capsule_lab.studies.ladder`, chapter 07's in
:mod:`capsule_lab.studies.learned_routing`, chapter 08's (every router on one bench) in
:mod:`capsule_lab.studies.bench.claims`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

from .._checks import check_one_of
from . import rules, stats
from .tables import MISSING, Table
from .rules import CONVERGENCE, Null, Premise

__all__ = ["Measure", "MEASURES", "ACCURACY_MARGIN", "AFFINE_MARGIN", "ENTROPY_MARGIN", "TIME_MARGIN", "SHARE_MARGIN",
           "DEAD_MARGIN", "SALIENCY_MARGIN", "KEYS_MARGIN", "COUPLING_MARGIN", "CEILING_BITS", "CONVERGENCE",
           "CLASSES", "Claim", "ClaimRow", "claim_verdicts", "advantage", "signed", "margin_text", "describe",
           "summary_table", "convergence"]


class Measure(NamedTuple):
    """What a claim compares: whether lower is better, whether it is compared on a log scale (a time, so that the
    difference is a ratio), the margin (the smallest difference that matters, on that scale), the unit
    :func:`advantage` prints ("points", "bits", "times", "ratio", "share" or "coupling") and the measure's null
    (:class:`~capsule_lab.evidence.rules.Null`; None where every value is informative)."""

    lower_is_better: bool
    log: bool
    margin: float
    unit: str
    null: Optional[Null] = None


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
#: An entropy within this many bits of its ceiling (log₂ of the images per class) is saturated.
CEILING_BITS = 0.5
#: The number of classes J of every dataset the course trains on (MNIST, Fashion-MNIST and their variants), so chance is 1/10.
CLASSES = 10

#: The measures a claim may name. ``affine_drop`` is clean minus affine accuracy (chapter 06); ``middling`` the
#: share of an image's primary capsules whose activity is neither high nor low, averaged over the images (chapter 06,
#: Figure 4; a record without a split — its capsules' activity never falls below one half, or is below it from the
#: first — is untestable for it, ``"untestable_for"``);
#: ``dead_rate`` the share of a layer's (or the hidden layers') capsules that are dead (chapter 04); ``on_object`` the
#: share of a saliency map's mass on the object's pixels (chapter 05); ``coupling`` a group of capsules' mean
#: coupling coefficient to the right class (chapter 06, Figure 1); ``affine_entropy`` the parse-tree entropy on the
#: affine test digits (chapter 05, the REM paper's Table 2 on affNIST). The nulls: entropy's ceiling (every image its own
#: parse tree), the images per class for the keys, the shuffled-pair maps for saliency, uniform couplings 1/J.
MEASURES = {"accuracy": Measure(False, False, ACCURACY_MARGIN, "points"),
            "affine_accuracy": Measure(False, False, AFFINE_MARGIN, "points"),
            "affine_drop": Measure(True, False, AFFINE_MARGIN, "points"),
            "entropy": Measure(True, False, ENTROPY_MARGIN, "bits",
                               Null("entropy_ceiling", "its ceiling (every image its own parse tree)", "below",
                                    CEILING_BITS)),
            "affine_entropy": Measure(True, False, ENTROPY_MARGIN, "bits",
                                      Null("affine_entropy_ceiling", "its ceiling on the affine test digits (every "
                                           "image its own parse tree)", "below", CEILING_BITS)),
            "train_step_ms": Measure(True, True, TIME_MARGIN, "times"),
            "keys": Measure(True, True, KEYS_MARGIN, "ratio",
                            Null("keys_null", "the images per class (every image its own key)", "below", KEYS_MARGIN,
                                 log=True)),
            "middling": Measure(True, False, SHARE_MARGIN, "share"),
            "dead_rate": Measure(True, False, DEAD_MARGIN, "share"),
            "on_object": Measure(False, False, SALIENCY_MARGIN, "share",
                                 Null("on_object_null", "the shuffled-pair maps' share (a map of another image)",
                                      "above", SALIENCY_MARGIN)),
            "coupling": Measure(False, False, COUPLING_MARGIN, "coupling",
                                Null("coupling_null", "uniform couplings 1/J", "above", COUPLING_MARGIN))}


@dataclass(frozen=True)
class Claim:
    """One row of a verdict table: the paper's claim (or the course's question) and its test; ``premises`` the paper's
    setting has and the claim rests on, ``size`` the effect the paper states (on the compared scale: a fraction of
    accuracy, bits, the log of a ratio), where it states one. Chapters 04–08."""

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
    premises: tuple = ()
    size: Optional[float] = None

    def __post_init__(self):
        check_one_of(self.measure, tuple(MEASURES), "measure")
        check_one_of(self.kind, stats.KINDS, "kind")
        check_one_of(self.origin, rules.FAMILIES, "origin")
        if not self.source.strip() or not self.statement.strip():
            raise ValueError("a claim must name its source (section or table) and state what it claims")
        if not all(isinstance(p, Premise) for p in self.premises):
            raise ValueError("premises must be a tuple of Premise objects (the paper's words, quoted)")
        if self.size is not None and (self.kind != "better" or not self.size > 0):
            raise ValueError("size must be a number > 0, for a claim of kind 'better' (the effect the paper states)")

    @property
    def margin(self) -> float:
        return MEASURES[self.measure].margin


@dataclass(frozen=True)
class ClaimRow:
    """A claim, its verdict (:class:`~capsule_lab.evidence.rules.Verdict`), and the pooled McNemar test of the two
    networks on the test images (None for measures other than accuracy, or records without each image's result),
    with the collapsed seeds it leaves out (``mcnemar_left_out``)."""

    claim: Claim
    verdict: rules.Verdict
    mcnemar: stats.McNemar | None
    mcnemar_left_out: tuple = ()


def _seeds_text(seeds) -> str:
    return f"seed{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}"


def _null_values(record: dict, measure: str, ceiling) -> float | None:
    """The null of ``measure`` for one record: its own field, else (entropy, keys) what the entropy's ceiling gives."""
    null = MEASURES[measure].null
    if record.get(null.field) is not None:
        return record[null.field]
    top = record.get("entropy_ceiling", ceiling)
    if measure == "entropy":
        return top
    if measure == "keys" and top is not None:
        return 2 ** top                                  # the images per class, from log₂ of them
    return None


def _untestable(claim: Claim, by_router: dict, seeds: list, ceiling, setting, classes: int) -> tuple:
    """Why ``claim`` cannot be tested on these seeds of the training records (empty when it can), and the collapsed
    seeds (for McNemar)."""
    measure, why = MEASURES[claim.measure], []
    if claim.premises:
        if setting is None:
            raise ValueError(f"claim {claim.question!r} rests on premises: pass the study's setting "
                             "({key: (holds, what the setting has)})")
        why += rules.missing_premises(claim.premises, setting)
    names = tuple(dict.fromkeys((claim.a, claim.b)))
    for name in names:
        notes = sorted({note for s in seeds for note in (by_router[name][s].get("untestable"),
                                                          by_router[name][s].get("untestable_for", {}).get(claim.measure))
                        if note})
        why += [f"{name}: {note}" for note in notes]
    fallen = set()
    if measure.unit != "times":                          # a step's time needs neither convergence nor a trained net
        for name in names:
            curves = [(s, by_router[name][s]["train_accuracy"]) for s in seeds
                      if not by_router[name][s].get("untestable")]
            down = [s for s, curve in curves if curve and rules.collapsed(curve, classes)]
            late = [s for s, curve in curves if len(curve) < 2 or not rules.converged(curve)]
            fallen |= set(down)
            if down:
                why.append(f"{name} collapsed ({_seeds_text(down)}: training accuracy below "
                           f"{100 * rules.chance_ceiling(classes):.1f} %, chance being {100 / classes:g} %)")
            if late:
                why.append(f"{name} not converged ({_seeds_text(late)}: the last epoch moved the training accuracy by "
                           f"{CONVERGENCE * 100:g} points or more)")
    if measure.null is not None:
        cleared, shown = False, []
        for name in names:
            values = [by_router[name][s][claim.measure] for s in seeds]
            nulls = [_null_values(by_router[name][s], claim.measure, ceiling) for s in seeds]
            if None in nulls:
                raise ValueError(f"the records of {name!r} do not hold {claim.measure}'s null ({measure.null.field}: "
                                 f"{measure.null.words}); a claim about {claim.measure} needs it")
            if None in values:
                continue
            cleared |= rules.clears(values, nulls, measure.null)
            shown.append(f"{name} {sum(values) / len(values):.3g} against {sum(nulls) / len(nulls):.3g}")
        if shown and not cleared:
            margin = (f"{math.exp(measure.null.margin):g}×" if measure.null.log else f"{measure.null.margin:g}")
            why.append(f"the measure cannot tell them apart: neither network clears {measure.null.words} by "
                       f"{margin} ({'; '.join(shown)})")
    return why, tuple(sorted(fallen))


def _timed(claim: Claim, timing: list, training: dict, seeds: list) -> tuple:
    """The comparisons of a claim about time, one per (device, threads) where both networks were timed, and why it
    cannot be tested (the timing rule, different machines)."""
    measure = MEASURES[claim.measure]
    found = [r for r in timing if r["router"] in (claim.a, claim.b)]
    if not found:                                        # only the training records' times: they fail the rule
        found = [training[name][s] for name in (claim.a, claim.b) for s in seeds]
    groups: dict = {}
    for r in found:
        groups.setdefault((r.get("device"), r.get("threads")), {}).setdefault(r["router"], {})[r["seed"]] = r
    why = rules.timing_problems(found)
    shared = {k: g for k, g in groups.items() if claim.a in g and claim.b in g}
    if not shared:
        machines = {name: sorted({k for k, g in groups.items() if name in g}, key=str) for name in (claim.a, claim.b)}
        why.append("timed on different devices or thread counts (" + "; ".join(
            f"{name}: " + ", ".join(f"{d} with {t} thread{'s' if t != 1 else ''}" for d, t in found)
            for name, found in machines.items()) + ")")
        return {}, why
    comparisons = {}
    for (device, threads), g in shared.items():
        both = sorted(set(g[claim.a]) & set(g[claim.b]))
        if len(both) < 2:
            why.append(f"one seed timed on {device} with {threads} threads")
            continue
        label = f"{device}, {threads} thread{'s' if threads != 1 else ''}"
        comparisons[label] = stats.compare([math.log(g[claim.a][s][claim.measure]) for s in both],
                                           [math.log(g[claim.b][s][claim.measure]) for s in both], claim.kind,
                                           claim.margin, lower_is_better=measure.lower_is_better, size=claim.size)
    return comparisons, why


def claim_verdicts(records: list, claims, alpha: float = 0.05, ceiling: float | None = None,
                   setting: dict | None = None, classes: int = CLASSES) -> list:
    """Test every claim on a study's ``records``: one :class:`ClaimRow` per claim, in order, by the rules of
    :mod:`capsule_lab.evidence.rules`. Chapters 04–08.

    ``records``: one dict per network and seed (``"router"``, ``"seed"``, each measure a claim names and its null
    field where the measure has one, ``"train_accuracy"`` per epoch, ``"correct"``/``"affine_correct"`` per test
    image where kept, ``"untestable"`` with the reason where a record cannot be compared, ``"untestable_for"``
    ``{measure: reason}`` where it cannot be compared on one measure only). Records with
    ``"timed_steps"`` are timings (:func:`~capsule_lab.evidence.rules.timing_problems`: ``"interleaved"``,
    ``"load"``, ``"device"``, ``"threads"``), one per network, seed and setting; a claim about time reads them where
    they exist for its networks, else the training records' times (which fail the timing rule). ``ceiling``: the
    entropy's ceiling (bits) for records without their own ``"entropy_ceiling"``. ``setting``: what the study's
    setting has, ``{premise key: (holds, in words)}``, needed when a claim has premises. ``classes``: J, for the
    collapse rule.
    """
    if not isinstance(records, list) or not records:
        raise ValueError("records must be a non-empty list of dicts, one per network and seed")
    timing = [r for r in records if "timed_steps" in r]
    by_router: dict = {}
    for r in records:
        if "timed_steps" in r:
            continue
        if r["seed"] in by_router.setdefault(r["router"], {}):
            raise ValueError(f"two records of {r['router']!r}, seed {r['seed']}: one per network and seed")
        by_router[r["router"]][r["seed"]] = r
    claims = tuple(claims)
    for claim in claims:
        if not isinstance(claim, Claim):
            raise ValueError(f"claims must be Claim objects, got {type(claim).__name__}")
        for name in (claim.a, claim.b):
            if name not in by_router:
                raise ValueError(f"claim {claim.question!r} names router {name!r}, which the records do not hold")
    cases, pooled, left_out, seeds_used, epochs = {}, {}, {}, {}, {}
    for k, claim in enumerate(claims):
        seeds = sorted(set(by_router[claim.a]) & set(by_router[claim.b]))
        if not seeds:
            raise ValueError(f"claim {claim.question!r}: {claim.a!r} and {claim.b!r} share no seed")
        seeds_used[k] = len(seeds)
        epochs[k] = tuple(max(len(by_router[name][s]["train_accuracy"]) for s in seeds) for name in (claim.a, claim.b))
        measure = MEASURES[claim.measure]
        why, fallen = _untestable(claim, by_router, seeds, ceiling, setting, classes)
        if measure.unit == "times":
            comparisons, timing_why = _timed(claim, timing, by_router, seeds)
            why += timing_why
        else:
            if len(seeds) < 2:
                why.insert(0, f"one seed ({seeds[0]}): a claim about training needs two or more training runs (a "
                              f"paired t test over seeds)")
            raw = [[by_router[name][s][claim.measure] for s in seeds] for name in (claim.a, claim.b)]
            value = math.log if measure.log else float
            testable = len(seeds) > 1 and not any(x is None for values in raw for x in values)
            comparisons = {None: stats.compare([value(x) for x in raw[0]], [value(x) for x in raw[1]], claim.kind,
                                               claim.margin, lower_is_better=measure.lower_is_better, alpha=alpha,
                                               size=claim.size)} if testable else {}
        cases[k] = rules.Case(claim.origin, comparisons, tuple(why))
        field = {"accuracy": "correct", "affine_accuracy": "affine_correct"}.get(claim.measure)
        kept = [s for s in seeds if s not in fallen]
        if field and all(field in by_router[name][s] for name in (claim.a, claim.b) for s in seeds):
            if kept:
                pooled[k] = stats.pooled_mcnemar_test([(by_router[claim.a][s][field], by_router[claim.b][s][field])
                                                       for s in kept])
            left_out[k] = fallen
    verdicts = rules.judge(cases, alpha)
    rows = []
    for k, claim in enumerate(claims):
        v = verdicts[k]
        v.extra.update(seeds=seeds_used[k], epochs=epochs[k])
        rows.append(ClaimRow(claim, v, pooled.get(k), left_out.get(k, ())))
    return rows


def advantage(claim: Claim, value: float) -> str:
    """A claim's estimate (A's advantage over B, positive = A better: :func:`~capsule_lab.evidence.stats.compare`) in
    the claim's units: points of accuracy, bits of entropy, how many times as fast for a step's time, how many times
    fewer parse trees; a share or a coupling signed, with which way A lies ("−0.263 (A 0.263 higher)" where lower
    is better). Chapters 04–08."""
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
    return f"{value:+.3f} (A {abs(value):.3f} {better if value >= 0 else worse})"


def signed(claim: Claim, value: float) -> str:
    """A value of A's advantage as a signed number in the claim's units (positive = A better), so that an interval
    reads low to high: points, bits, a share; a time or a count of keys as a ratio (× as fast, × fewer).
    Chapters 04–08."""
    unit = MEASURES[claim.measure].unit
    if unit == "points":
        return f"{100 * value:+.2f}"
    if unit in ("times", "ratio"):
        return f"{math.exp(value):.2f}×"
    return f"{value:+.2f}" if unit == "bits" else f"{value:+.3f}"


def _interval_words(claim: Claim) -> tuple:
    """What follows a signed interval (its unit) and what opens its parenthesis (which sign is A's advantage, for a
    share or a coupling, whose numbers carry no unit)."""
    measure = MEASURES[claim.measure]
    if measure.unit in ("share", "coupling"):
        return "", f"positive: A {'lower' if measure.lower_is_better else 'higher'}; "
    return " " + {"points": "points", "bits": "bits", "times": "as fast", "ratio": "fewer"}[measure.unit], ""


def margin_text(claim: Claim) -> str:
    """A claim's margin in its units: "0.5 points", "0.5 bits", "1.2×", "0.05". Chapters 04–08."""
    unit = MEASURES[claim.measure].unit
    if unit == "points":
        return f"{100 * claim.margin:.1f} points"
    if unit == "bits":
        return f"{claim.margin:g} bits"
    return f"{math.exp(claim.margin):g}×" if unit in ("times", "ratio") else f"{claim.margin:.3g}"


def _size_text(claim: Claim, value: float) -> str:
    unit = MEASURES[claim.measure].unit
    if unit in ("times", "ratio"):
        return f"{math.exp(value):.3g}×"
    if unit == "points":
        return f"{100 * value:.2g} points"
    return f"{value:.3g} bits" if unit == "bits" else f"{value:.3g}"


def _tested_line(claim: Claim, v: rules.Verdict) -> str:
    margin, (unit, sign) = margin_text(claim), _interval_words(claim)
    low, high = v.interval
    family_low, family_high = v.family_interval
    size = f", the paper's size {_size_text(claim, v.size)}" if v.size is not None else ""
    smaller = f", smaller {v.p_smaller:.2g}" if v.p_smaller is not None else ""
    return (f"A's advantage {advantage(claim, v.estimate)}; interval [{signed(claim, low)}, {signed(claim, high)}]"
            f"{unit} ({sign}{100 * (1 - 2 * v.alpha):g} %, unadjusted), [{signed(claim, family_low)}, "
            f"{signed(claim, family_high)}] (the {v.family} family's {v.m} tests, Bonferroni); paired t over {v.n} "
            f"seeds, claim '{claim.kind}', margin {margin}{size}; Holm-adjusted p for {v.p_support:.2g}, against "
            f"{v.p_contradict:.2g}{smaller} (α = {v.alpha:g}); smallest effect {v.n} seeds detect: "
            f"{_size_text(claim, v.detectable)} (power {rules.POWER:g} at α/{v.m})")


def describe(row: ClaimRow) -> str:
    """A few lines for a verdict table: the question and its verdict — the outcome and why; for a tested row, A's
    advantage with its interval (unadjusted and the family's, labelled), the test, α, margin, the paper's size,
    Holm-adjusted p-values within the row's family, the smallest effect its seeds could detect, and where undecided
    the seeds that would decide it; for a time, one line per setting; and the pooled McNemar test where there is
    one, naming the collapsed seeds it leaves out. Chapters 04–08."""
    claim, v = row.claim, row.verdict
    head = f"[{claim.chapter}] {claim.question} ({claim.paper}, {claim.source})"
    a_epochs, b_epochs = v.extra.get("epochs", (None, None))
    if a_epochs != b_epochs and MEASURES[claim.measure].unit != "times":      # a step's time is not trained
        head += f"\n     budgets differ: {claim.a} trained {a_epochs} epochs, {claim.b} {b_epochs}"
    lines = [f"     {v.outcome.upper()}: {v.reason}"]
    if v.tested:
        lines.append(f"     {_tested_line(claim, v)}")
    for label, each in v.settings.items():
        lines.append(f"     {label}: {each.outcome.upper()}: {each.reason}; {_tested_line(claim, each)}")
    if row.mcnemar is not None:
        m = row.mcnemar
        out = (f" (collapsed {_seeds_text(row.mcnemar_left_out)} left out)" if row.mcnemar_left_out else "")
        p = f"{m.p_value:.2g}" if m.p_value > 0 else "< 1e-300"
        lines.append(f"     images: {m.a_only} right for A only, {m.b_only} for B only; pooled McNemar over "
                     f"{m.strata} seed{'s' if m.strata != 1 else ''}{out}: p = {p}")
    return "\n".join([head] + lines)


def _mean_of(records: list, name: str, measure: str) -> float | None:
    values = [r[measure] for r in records if r["router"] == name and "timed_steps" not in r
              and r.get(measure) is not None]
    return sum(values) / len(values) if values else None


def summary_table(rows: list, records: list, caption: str) -> Table:
    """A verdict table in short, one line per claim: its source, our question, our numbers (A and B, the mean over
    the seeds the test read, in the measure's units), the paper's setting and numbers, the verdict, and what would
    decide it (the seeds an undecided row needs, the reason a row is not testable). ``rows`` are
    :func:`claim_verdicts`' rows on ``records``. Chapters 05–06."""
    if not isinstance(rows, list) or not all(isinstance(r, ClaimRow) for r in rows):
        raise ValueError("rows must be a list of ClaimRow (from claim_verdicts)")
    out = []
    for row in rows:
        claim, v = row.claim, row.verdict
        unit = MEASURES[claim.measure].unit
        a, b = (_mean_of(records, name, claim.measure) for name in (claim.a, claim.b))

        def shown(x):
            if x is None:
                return MISSING
            if unit == "points":
                return f"{100 * x:.2f} %"
            return f"{x:.2f} bits" if unit == "bits" else f"{x:.3g}"

        if v.outcome == "undecided":
            decide = (f"about {v.seeds_needed} seeds" if v.seeds_needed is not None else "more than 10,000 seeds")
        elif v.outcome == "not testable":
            decide = v.reason
        else:
            decide = MISSING
        out.append([claim.source, claim.question, f"A {shown(a)}, B {shown(b)}", claim.paper_setting,
                    v.outcome, decide])
    return Table(["source", "question (A against B)", "ours (mean over seeds)", "the paper's", "verdict",
                  "what would decide it"], out, caption=caption)


def convergence(records: list) -> dict:
    """``{router: [change of the training accuracy over the last epoch, one per seed]}``, in the records' order: what
    the convergence criterion (:data:`CONVERGENCE`) reads. Chapters 04–08."""
    changes: dict = {}
    for r in records:
        if "timed_steps" in r:
            continue
        accuracy = r["train_accuracy"]
        if len(accuracy) < 2:
            raise ValueError(f"record {r['router']!r}, seed {r['seed']} has one epoch: convergence needs two")
        changes.setdefault(r["router"], []).append(accuracy[-1] - accuracy[-2])
    return changes
