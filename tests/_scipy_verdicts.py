"""Shared by the verdict tests (chapters 04, 06, 08): a verdict table recomputed without capsule_lab.evidence.stats —
SciPy's one-sample t tests on the per-seed differences, statsmodels' Holm, and the convergence, ceiling and machine
rules written out again — and the papers' text to check a quote against."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from scipy.stats import ttest_1samp
from statsmodels.stats.multitest import multipletests

from capsule_lab.evidence.claims import CEILING_BITS, CONVERGENCE, MEASURES

SEEDS_DIR = Path(__file__).resolve().parents[2] / "shared" / "seeds"
#: The papers whose text lies in ../shared/seeds, by the name a claim gives them.
PAPER_FILES = {"Mitterreiter et al. 2023": "003", "Renzulli et al. 2024 (REM)": "000", "Jeong et al. 2019": "004",
               "Faria 2022": "002"}


def flat(text: str) -> str:
    """Text with Markdown bold and runs of white space removed, lower case: a quote's form for comparison."""
    return re.sub(r"\s+", " ", text.replace("**", "")).lower()


def assert_quotes_in_papers(claims) -> None:
    """Every quoted claim of a paper in PAPER_FILES is, word for word, in that paper's text."""
    for claim in claims:
        if claim.quoted and claim.paper in PAPER_FILES:
            paper = flat(next(SEEDS_DIR.glob(PAPER_FILES[claim.paper] + "_*.txt")).read_text())
            assert flat(claim.statement.removeprefix("... ")) in paper, claim.statement


def scipy_outcomes(records, claims, ceiling=None, alpha=0.05) -> list[str]:
    """Each claim's outcome ("supported", "contradicted", "undecided"), recomputed independently."""
    by = {(r["router"], r["seed"]): r for r in records}
    p_values, untestable = [], []
    for claim in claims:
        seeds = sorted({s for n, s in by if n == claim.a} & {s for n, s in by if n == claim.b})
        lower, log = MEASURES[claim.measure].lower_is_better, MEASURES[claim.measure].log
        noted = any(by[n, s].get("untestable") or by[n, s][claim.measure] is None
                    for n in (claim.a, claim.b) for s in seeds)
        if len(seeds) < 2 or noted:                      # one training run, or a record that cannot be compared
            p_values.append((1.0, 1.0))
            untestable.append(True)
            continue
        f = np.log if log else np.asarray
        a = f(np.array([by[claim.a, s][claim.measure] for s in seeds], dtype=float))
        b = f(np.array([by[claim.b, s][claim.measure] for s in seeds], dtype=float))
        d, m = (b - a) if lower else (a - b), claim.margin

        def p(null, alternative):
            return ttest_1samp(d, null, alternative=alternative).pvalue

        if claim.kind == "better":
            p_values.append((p(0, "greater"), p(m, "less")))
        elif claim.kind == "equivalent":
            p_values.append((max(p(-m, "greater"), p(m, "less")), min(1, 2 * min(p(m, "greater"), p(-m, "less")))))
        else:
            p_values.append((p(-m, "greater"), p(-m, "less")))
        timed = MEASURES[claim.measure].unit == "times"
        late = not timed and any(len(by[n, s]["train_accuracy"]) < 2 or
                               abs(by[n, s]["train_accuracy"][-1] - by[n, s]["train_accuracy"][-2]) >= CONVERGENCE
                               for n in (claim.a, claim.b) for s in seeds)
        machines = {(by[n, s].get("device"), by[n, s].get("threads")) for n in (claim.a, claim.b) for s in seeds}
        late = late or (timed and len(machines) > 1)
        def top(n):                                      # each record's own ceiling where it holds one
            own = [by[n, s].get("entropy_ceiling") for s in seeds]
            return ceiling if None in own else np.mean(own)

        full = claim.measure == "entropy" and any(
            top(n) - np.mean([by[n, s]["entropy"] for s in seeds]) <= CEILING_BITS for n in (claim.a, claim.b))
        untestable.append(late or full)
    family = [p for (pf, pa), u in zip(p_values, untestable) if not u for p in (pf, pa)]
    adjusted = iter(multipletests(family, method="holm")[1]) if family else iter(())
    outcomes = []
    for u in untestable:
        if u:
            outcomes.append("undecided")
            continue
        pf, pa = next(adjusted), next(adjusted)
        outcomes.append("contradicted" if pa < alpha else "supported" if pf < alpha else "undecided")
    return outcomes
