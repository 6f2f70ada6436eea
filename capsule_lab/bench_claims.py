"""What each paper claims about routing, as the paper states it, and the bench's test of it. Chapter 08.

A :class:`Claim` keeps apart three things a careless table mixes up:

- **the paper's claim**: quoted (``quoted=True``) or closely paraphrased from a named section or table
  (``source``), with the setting the paper showed it in (``paper_setting``);
- **our question**: the comparison the bench can make (``a`` against ``b`` on ``measure``, a
  :func:`~capsule_lab.stats.compare` ``kind`` with its ``margin``), and what differs between ``a`` and ``b`` besides the variable (``differs``);
- **where they come from**: ``origin="paper"`` for a paper's claim, ``origin="course"`` for a question the course
  asks that no paper answered in these words (it is labelled so, never attributed).

:func:`claim_verdicts` tests every claim on a bench's records with :mod:`capsule_lab.stats`: a paired t test over
seeds, Holm's correction over the whole table, and *undecided* where the claim cannot be tested — a router that has
not converged (:func:`~capsule_lab.stats.converged` on every seed's training accuracy; a step's time is exempt), an
entropy within :data:`CEILING_BITS` of its ceiling (:func:`~capsule_lab.stats.at_ceiling`), or times measured on
different devices or thread counts. Beside each verdict it gives the pooled
McNemar test of the same two routers on the test images (:func:`~capsule_lab.stats.pooled_mcnemar_test`), the
evidence about these trained networks rather than about training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import stats
from ._checks import check_one_of

__all__ = ["Claim", "CLAIMS", "MEASURES", "ACCURACY_MARGIN", "AFFINE_MARGIN", "ENTROPY_MARGIN", "TIME_MARGIN",
           "CEILING_BITS", "CONVERGENCE", "ClaimRow", "claim_verdicts", "entropy_ceiling", "advantage", "margin_text",
           "describe", "convergence"]

#: The measures a claim may name, with whether lower is better and whether it is compared on a log scale.
MEASURES = {"accuracy": (False, False), "affine_accuracy": (False, False), "entropy": (True, False),
            "train_step_ms": (True, True)}
#: The margins, each the smallest difference that matters. Half a point of clean accuracy is about 1.5 binomial
#: standard errors of one accuracy near 98 % on 2,000 images; a point of affine accuracy is about one standard error
#: near 85 %; then half a bit of parse-tree entropy, and 20 % of a training step's time (ln 1.2 on the log scale).
ACCURACY_MARGIN, AFFINE_MARGIN, ENTROPY_MARGIN, TIME_MARGIN = 0.005, 0.01, 0.5, math.log(1.2)
#: An entropy within this many bits of its ceiling (log₂ of the images per class) is saturated.
CEILING_BITS = 0.5
#: The convergence criterion (:func:`~capsule_lab.stats.converged`): the last epoch's training accuracy within half a
#: point of the epoch before's.
CONVERGENCE = 0.005


@dataclass(frozen=True)
class Claim:
    """One row of chapter 08's verdict table: the paper's claim (or the course's question) and its test."""

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
        return {"accuracy": ACCURACY_MARGIN, "affine_accuracy": AFFINE_MARGIN, "entropy": ENTROPY_MARGIN,
                "train_step_ms": TIME_MARGIN}[self.measure]


_SABOUR_SETTING = ("Sabour's CapsNet (1,152 primary capsules), all of MNIST with 2-pixel shifts, no decoder for these "
                   "rows")

#: The table, in chapter order. ``differs`` names everything besides the routing that differs between a and b.
CLAIMS = (
    Claim("Sabour et al. 2017", "02", "Table 1 (rows without reconstruction)",
          "test error 0.34 ± 0.032 % with 1 routing iteration and 0.35 ± 0.036 % with 3", False, _SABOUR_SETTING,
          "is r = 3 as accurate as r = 1 (within the margin)?", "dynamic r=3", "dynamic r=1", "accuracy",
          "equivalent", "nothing: the same network, 2 more iterations"),
    Claim("course", "02", "our question (Sabour et al. use r = 3 without testing it against r = 1 in the text)",
          "more routing iterations make a more accurate network", False, "-",
          "is r = 3 more accurate than r = 1?", "dynamic r=3", "dynamic r=1", "accuracy", "better",
          "nothing: the same network, 2 more iterations", origin="course"),
    Claim("Gu & Tresp 2020", "03", "Abstract",
          "the routing procedure contributes neither to generalization ability nor to the affine robustness of the "
          "CapsNets", True, "CapsNet with its decoder, 100 epochs on MNIST, tested on affNIST",
          "is uniform routing no less accurate than r = 3 (by the margin)?", "uniform", "dynamic r=3", "accuracy",
          "not worse", "nothing: the same votes, couplings fixed at 1/J"),
    Claim("Gu & Tresp 2020", "03", "Abstract",
          "... nor to the affine robustness of the CapsNets", True,
          "CapsNet with its decoder, 100 epochs on MNIST, tested on affNIST",
          "is uniform routing no less accurate than r = 3 on the affine test?", "uniform", "dynamic r=3",
          "affine_accuracy", "not worse", "nothing: the same votes, couplings fixed at 1/J; our affine set, "
          "not affNIST"),
    Claim("course", "03", "our question, from the supplement's Appx. A, eqs. 4–5 (the coupling gradient ≈ 0 and "
          "\"the constant can be absorbed into the learning rate\" once couplings are polarised)",
          "detaching the couplings in the backward pass changes the gradient only by a constant", False,
          "an argument about the gradient, not an experiment",
          "is detached routing no less accurate than r = 3?", "detached", "dynamic r=3", "accuracy", "not worse",
          "nothing: the same forward pass; our couplings are far from polarised (dyr ≈ 0.03)", origin="course"),
    Claim("Mitterreiter et al. 2023", "04", "Results, beside Table 2 (Tables 5 and 14 in their appendix)",
          "baseline models trained with uniform routing perform better than models trained with RBA", True,
          "five capsule layers of 16/10 capsules, where dead capsules starve routing-by-agreement",
          "is uniform routing more accurate than r = 3 with one routing layer?", "uniform", "dynamic r=3",
          "accuracy", "better", "their RBA has learned routing priors; ours has one routing layer, where the paper's "
          "explanation (dead capsules in deep layers) does not apply"),
    Claim("Renzulli et al. 2024 (REM)", "05", "Abstract",
          "significantly reducing the generation of intra-class parse trees", True,
          "DR-CapsNet pruned to 85.5 % sparsity while it trains; entropy 9.53 → 4.16 bits (Table 9)",
          "does pruning lower the parse-tree entropy of r = 3?", "rem-pruned", "dynamic r=3", "entropy", "better",
          "nothing but the pruning: 75 % sparse after 2 rounds here"),
    Claim("Renzulli et al. 2024 (REM)", "05", "Abstract",
          "with fewer parameters and negligible performance loss", True,
          "99.57 → 99.56 % on MNIST (Table 9)",
          "is the pruned network no less accurate than r = 3?", "rem-pruned", "dynamic r=3", "accuracy",
          "not worse", "nothing but the pruning: 75 % sparse after 2 rounds here"),
    Claim("Jeong et al. 2019", "06", "§5.2, Table 2",
          "the L-CapsNet learns an equivariant representation that is more robust to pose variations on MNIST "
          "digits than the CapsNet", True, "trained on 40×40 expanded MNIST, tested on affNIST: 12.2–13.2 % "
          "error against the CapsNet's 21 %",
          "is the ladder more accurate than r = 3 on the affine test?", "ladder", "dynamic r=3",
          "affine_accuracy", "better", "the ladder has its own loss and 5.3× the parameters; trained on centred "
          "28×28 digits, not expanded ones"),
    Claim("Jeong et al. 2019", "06", "§5.2, Table 2",
          "the L-CapsNet resulted in higher test errors on MNIST classification", True,
          "0.50–0.80 % error against the CapsNet's 0.25 %",
          "is r = 3 more accurate than the ladder on clean digits?", "dynamic r=3", "ladder", "accuracy",
          "better", "the ladder has its own loss and 5.3× the parameters"),
    Claim("Jeong et al. 2019", "06", "§5.2, Table 3",
          "the L-CapsNet significantly reduces the computation time", True,
          "0.20–0.30 s per training iteration against 1.73–2.66 s (r = 3–5), Sabour's 1,152 capsules",
          "is a ladder training step faster than an r = 3 step?", "ladder", "dynamic r=3", "train_step_ms",
          "better", "144 capsules, not 1,152: routing is a small part of our step; the ladder has its own layers"),
    Claim("course", "06", "our question: the control for the ladder's parameters",
          "the ladder's robustness comes from its layers, not from its 5.3× parameters", False, "-",
          "is the ladder with the CapsNet's parameter count more accurate than r = 3 on the affine test?",
          "ladder matched", "dynamic r=3", "affine_accuracy", "better",
          "the ladder's own loss; its hidden widths cut to (6, 3) so its parameters match (362k against 355k)",
          origin="course"),
    Claim("Faria 2022", "07", "Table 3",
          "MNIST error 0.53 % for connectionist and 1.0 % for similarity routing", False,
          "Faria's convolutional capsule network with 4×4 pose matrices",
          "is connectionist routing more accurate than similarity routing?", "connectionist", "similarity",
          "accuracy", "better", "nothing: the same normalised votes, T = 3 updates, sigmoid activations"),
    Claim("course", "07", "our question (Faria compares with EM routing, not with dynamic routing: §6)",
          "a learned router does as well as dynamic routing on the same votes", False, "-",
          "is connectionist routing no less accurate than r = 3 on Faria's normalised votes?", "connectionist",
          "dynamic r=3 normed", "accuracy", "not worse",
          "the learned router's sigmoid activations and T = 3 updates against 2; its 26k parameters",
          origin="course"),
    Claim("course", "07", "our question (Faria compares with EM routing, not with dynamic routing: §6)",
          "a learned router does as well as dynamic routing on the same votes", False, "-",
          "is similarity routing no less accurate than r = 3 on Faria's normalised votes?", "similarity",
          "dynamic r=3 normed", "accuracy", "not worse",
          "the learned router's sigmoid activations and T = 3 updates against 2", origin="course"),
    Claim("course", "08", "our question (Efficient-CapsNet reports 0.26 % MNIST error with its own network)",
          "non-iterative self-attention routing is as accurate as dynamic routing", False, "-",
          "is self-attention routing no less accurate than r = 3?", "self-attention", "dynamic r=3", "accuracy",
          "not worse", "self-attention uses the exponential squash and 1,440 learned biases", origin="course"),
)


@dataclass(frozen=True)
class ClaimRow:
    """A claim, its verdict (:class:`~capsule_lab.stats.Verdict`), and the pooled McNemar test of the two routers on
    the test images (None for measures other than accuracy)."""

    claim: Claim
    verdict: stats.Verdict
    mcnemar: stats.McNemar | None


def entropy_ceiling(labels) -> float:
    """The parse-tree entropy's ceiling on a test set with these ``labels`` (a 1-D tensor or sequence of class
    indices): the mean over classes of log₂(images of the class), reached when every image has its own parse tree.
    Chapter 08."""
    labels = [int(x) for x in (labels.tolist() if hasattr(labels, "tolist") else labels)]
    if not labels:
        raise ValueError("labels must be the test set's class indices, got none")
    counts = [labels.count(c) for c in sorted(set(labels))]
    return sum(math.log2(n) for n in counts) / len(counts)


def claim_verdicts(records: list, claims=CLAIMS, alpha: float = 0.05, ceiling: float | None = None) -> list:
    """Test every claim on a bench's ``records`` (:func:`~capsule_lab.router_bench.run_router_bench`): one
    :class:`ClaimRow` per claim, in order. The claims are one family (Holm); a claim is *undecided — not testable*
    when a router it names has a seed that is not converged (:data:`CONVERGENCE`; not asked of a step's time); for
    entropy, when either router's mean lies within :data:`CEILING_BITS` of ``ceiling`` (bits, :func:`entropy_ceiling`
    of the test labels; needed when a claim is about entropy); for time, when the two routers' records were timed on
    different devices or thread counts. Chapter 08.
    """
    if not isinstance(records, list) or not records:
        raise ValueError("records must be a non-empty list of run_router_bench's records")
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
        seeds_used[k] = len(seeds)
        epochs[k] = tuple(max(len(by_router[name][s]["train_accuracy"]) for s in seeds) for name in (claim.a, claim.b))
        if len(seeds) < 2:
            raise ValueError(f"claim {claim.question!r} needs at least 2 seeds of both routers, got {seeds}")
        lower, log = MEASURES[claim.measure]
        value = (lambda x: math.log(x)) if log else float
        a = [value(by_router[claim.a][s][claim.measure]) for s in seeds]
        b = [value(by_router[claim.b][s][claim.measure]) for s in seeds]
        comparisons[k] = stats.compare(a, b, claim.kind, claim.margin, lower_is_better=lower, alpha=alpha)
        why = []
        for name in dict.fromkeys((claim.a, claim.b)) if not log else ():      # a step's time needs no convergence
            late = [s for s in seeds if not stats.converged(by_router[name][s]["train_accuracy"], CONVERGENCE)]
            if late:
                why.append(f"{name} not converged (seeds {', '.join(map(str, late))}: the last epoch moved the "
                           f"training accuracy by {CONVERGENCE * 100:g} points or more)")
        if log:                                           # times compare only on the same device and thread count
            machines = {name: sorted({(by_router[name][s].get("device"), by_router[name][s].get("threads"))
                                      for s in seeds}, key=str) for name in (claim.a, claim.b)}
            if len(set(map(tuple, machines.values()))) > 1 or len(machines[claim.a]) > 1:
                why.append("timed on different devices or thread counts (" + "; ".join(
                    f"{name}: " + ", ".join(f"{d} with {t} thread{'s' if t != 1 else ''}" for d, t in found)
                    for name, found in machines.items()) + ")")
        if claim.measure == "entropy":
            if ceiling is None:
                raise ValueError("ceiling must be given (entropy_ceiling of the test labels) for a claim about entropy")
            top = ceiling
            for name in dict.fromkeys((claim.a, claim.b)):
                mean = sum(by_router[name][s]["entropy"] for s in seeds) / len(seeds)
                if stats.at_ceiling(mean, top, CEILING_BITS):
                    why.append(f"{name}'s entropy {mean:.2f} bits is within {CEILING_BITS} of its ceiling "
                               f"{top:.2f}: every image has its own parse tree, so the measure is saturated")
        if why:
            untestable[k] = "; ".join(why)
        if claim.measure in ("accuracy", "affine_accuracy"):
            field = "correct" if claim.measure == "accuracy" else "affine_correct"
            pooled[k] = stats.pooled_mcnemar_test([(by_router[claim.a][s][field], by_router[claim.b][s][field])
                                                   for s in seeds])
    verdicts = stats.decide(comparisons, alpha, untestable)
    return [ClaimRow(claim, replace(verdicts[k], extra={"seeds": seeds_used[k], "epochs": epochs[k]}), pooled.get(k))
            for k, claim in enumerate(claims)]


def advantage(claim: Claim, value: float) -> str:
    """A claim's estimate (A's advantage over B, positive = A better: :func:`~capsule_lab.stats.compare`) in the
    claim's units: points of accuracy, bits of entropy, or how many times as fast for a step's time. Chapter 08."""
    if claim.measure in ("accuracy", "affine_accuracy"):
        return f"{100 * value:+.2f} points"
    if claim.measure == "entropy":
        return f"{value:+.2f} bits lower"
    return f"{math.exp(value):.2f}× as fast"


def margin_text(claim: Claim) -> str:
    """A claim's margin in its units: "0.5 points", "0.5 bits", "1.2×". Chapter 08."""
    if claim.measure in ("accuracy", "affine_accuracy"):
        return f"{100 * claim.margin:.1f} points"
    return f"{claim.margin:g} bits" if claim.measure == "entropy" else f"{math.exp(claim.margin):g}×"


def describe(row: ClaimRow) -> str:
    """Two lines for a verdict table: the question and its verdict with the test, α, margin, adjusted p-values,
    A's advantage with its interval in the claim's units, and the pooled McNemar test where there is one.
    Chapter 08."""
    claim, v = row.claim, row.verdict
    margin = margin_text(claim)
    head = f"[{claim.chapter}] {claim.question} ({claim.paper}, {claim.source})"
    a_epochs, b_epochs = v.extra.get("epochs", (None, None))
    if a_epochs != b_epochs:
        head += f"\n     budgets differ: {claim.a} trained {a_epochs} epochs, {claim.b} {b_epochs}"
    if v.p_support is None:
        return f"{head}\n     {v.outcome.upper()}: {v.reason}"
    low, high = v.interval
    line = (f"     {v.outcome.upper()}: A's advantage {advantage(claim, v.estimate)}, 90 % interval "
            f"[{advantage(claim, low)}, {advantage(claim, high)}]; paired t over {v.extra.get('seeds', '?')} seeds, "
            f"claim '{claim.kind}', margin {margin}, Holm over the table: p for {v.p_support:.2g}, "
            f"p against {v.p_contradict:.2g} (α = {v.alpha:g})")
    if row.mcnemar is not None:
        m = row.mcnemar
        line += f"\n     images: {m.a_only} right for A only, {m.b_only} for B only; pooled McNemar p = {m.p_value:.2g}"
    return f"{head}\n{line}"


def convergence(records: list) -> dict:
    """``{router: [change of the training accuracy over the last epoch, one per seed]}``, in the records' order: what
    the convergence criterion (:data:`CONVERGENCE`) reads. Chapter 08."""
    changes: dict = {}
    for r in records:
        accuracy = r["train_accuracy"]
        if len(accuracy) < 2:
            raise ValueError(f"record {r['router']!r}, seed {r['seed']} has one epoch: convergence needs two")
        changes.setdefault(r["router"], []).append(accuracy[-1] - accuracy[-2])
    return changes
