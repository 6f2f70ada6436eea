"""Shared by the verdict tests (chapters 04–08): a verdict table recomputed without capsule_lab.evidence.stats and
rules — SciPy's one-sample t tests on the per-seed differences, statsmodels' Holm within each family, and the
premise, null, collapse, convergence and timing rules written out again — and the papers' text to check a quote
(or a premise's quote) against."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from scipy.stats import ttest_1samp
from statsmodels.stats.multitest import multipletests

from capsule_lab.evidence.claims import CONVERGENCE, MEASURES

SEEDS_DIR = Path(__file__).resolve().parents[2] / "shared" / "seeds"
#: The papers whose text lies in ../shared/seeds, by the name a claim gives them.
PAPER_FILES = {"Mitterreiter et al. 2023": "003", "Renzulli et al. 2024 (REM)": "000", "Jeong et al. 2019": "004",
               "Faria 2022": "002"}


def flat(text: str) -> str:
    """Text with Markdown bold, inline LaTeX ($40 \\times 40$ reads 40×40) and runs of white space removed, lower case:
    a quote's form for comparison."""
    text = re.sub(r"\$\s*(\d+)\s*\\times\s*(\d+)\s*\$", r"\1×\2", text.replace("**", ""))
    return re.sub(r"\s+", " ", text).lower()


def _paper_text(name: str) -> str:
    return flat(next(SEEDS_DIR.glob(PAPER_FILES[name] + "_*.txt")).read_text())


def assert_quotes_in_papers(claims) -> None:
    """Every quoted claim of a paper in PAPER_FILES, and every premise's quote, is word for word in that paper's
    text."""
    for claim in claims:
        if claim.quoted and claim.paper in PAPER_FILES:
            assert flat(claim.statement.removeprefix("... ")) in _paper_text(claim.paper), claim.statement
        for premise in claim.premises:
            paper = next(name for name in PAPER_FILES if premise.source.startswith(name))
            assert flat(premise.quote) in _paper_text(paper), premise.quote


def scipy_outcomes(records, claims, ceiling=None, alpha=0.05, setting=None, classes=10) -> list[str]:
    """Each claim's outcome, recomputed independently of capsule_lab.evidence: SciPy's one-sample t tests on the per-seed
    differences, statsmodels' Holm within each family (paper, course), and the rules of the issue written out again:
    not testable for an absent premise, a measure whose null neither network clears, a collapsed or unconverged
    network, a time not taken interleaved over >= 10 steps with the load recorded, one seed; a claim about time tested
    at each setting, "depends on the setting" where they differ."""
    timing = [r for r in records if "timed_steps" in r]
    by = {(r["router"], r["seed"]): r for r in records if "timed_steps" not in r}
    tests, untestable = [], []                         # tests: per claim, [(setting, d, margin, kind, size)]
    for claim in claims:
        seeds = sorted({s for n, s in by if n == claim.a} & {s for n, s in by if n == claim.b})
        measure = MEASURES[claim.measure]
        lower, log = measure.lower_is_better, measure.log
        out = any(by[n, s].get("untestable") or by[n, s].get("untestable_for", {}).get(claim.measure)
                  for n in (claim.a, claim.b) for s in seeds)
        out = out or any(not setting[p.key][0] for p in claim.premises)
        timed = measure.unit == "times"
        if not timed:
            for n in (claim.a, claim.b):
                for s in seeds:
                    curve = by[n, s]["train_accuracy"]
                    chance = 1 / classes + 0.25 * (1 - 1 / classes)
                    out = out or len(curve) < 2 or abs(curve[-1] - curve[-2]) >= CONVERGENCE or curve[-1] < chance
        if measure.null is not None:
            def clear(n):
                values = [by[n, s][claim.measure] for s in seeds]
                if None in values:
                    return False
                nulls = []
                for s in seeds:
                    r = by[n, s]
                    top = r.get("entropy_ceiling", ceiling)
                    nulls.append(r[measure.null.field] if r.get(measure.null.field) is not None else
                                 top if claim.measure == "entropy" else 2.0 ** top)
                f = np.log if measure.null.log else np.asarray
                v, z = f(np.mean(values)), f(np.mean(nulls))
                return (z - v if measure.null.side == "below" else v - z) >= measure.null.margin
            out = out or not (clear(claim.a) or clear(claim.b))
        if timed:
            found = [r for r in timing if r["router"] in (claim.a, claim.b)] or \
                [by[n, s] for n in (claim.a, claim.b) for s in seeds]
            out = out or not all(r.get("interleaved") and (r.get("timed_steps") or 0) >= 10 and r.get("load")
                                 for r in found)
            groups = {}
            for r in found:
                groups.setdefault((r.get("device"), r.get("threads")), {})[r["router"], r["seed"]] = r
            rows = []
            for key, g in groups.items():
                both = sorted({s for n, s in g if n == claim.a} & {s for n, s in g if n == claim.b})
                if len(both) < 2:
                    out = out or bool(both)
                    continue
                a = np.log([g[claim.a, s][claim.measure] for s in both])
                b = np.log([g[claim.b, s][claim.measure] for s in both])
                rows.append((key, (b - a) if lower else (a - b)))
            out = out or not rows
        else:
            noted = any(by[n, s][claim.measure] is None for n in (claim.a, claim.b) for s in seeds)
            out = out or len(seeds) < 2 or noted
            rows = []
            if not out:
                f = np.log if log else np.asarray
                a = f(np.array([by[claim.a, s][claim.measure] for s in seeds], dtype=float))
                b = f(np.array([by[claim.b, s][claim.measure] for s in seeds], dtype=float))
                rows = [(None, (b - a) if lower else (a - b))]
        untestable.append(out)
        tests.append([(key, d, claim.margin, claim.kind, claim.size) for key, d in rows] if not out else [])

    def p(d, null, alternative):
        return ttest_1samp(d, null, alternative=alternative).pvalue

    def three(d, m, kind, size):                       # (for, against, smaller or None)
        if kind == "better":
            return p(d, 0, "greater"), p(d, 0, "less"), (None if size is None else p(d, size, "less"))
        if kind == "equivalent":
            return max(p(d, -m, "greater"), p(d, m, "less")), min(1, 2 * min(p(d, m, "greater"), p(d, -m, "less"))), None
        return p(d, -m, "greater"), p(d, -m, "less"), None

    raw = [[three(d, m, kind, size) for _, d, m, kind, size in t] for t in tests]
    adjusted = [[None] * len(t) for t in tests]
    for family in ("paper", "course"):
        slots = [(i, j, k) for i, c in enumerate(claims) if c.origin == family and not untestable[i]
                 for j, ps in enumerate(raw[i]) for k in range(3) if ps[k] is not None]
        if not slots:
            continue
        done = multipletests([raw[i][j][k] for i, j, k in slots], method="holm")[1]
        for (i, j, k), q in zip(slots, done):
            adjusted[i][j] = (adjusted[i][j] or [None, None, None])
            adjusted[i][j][k] = q
    outcomes = []
    for i, u in enumerate(untestable):
        if u:
            outcomes.append("not testable")
            continue
        each = []
        for pf, pa, ps in adjusted[i]:
            each.append("contradicted" if pa < alpha else ("supported, smaller" if ps is not None and ps < alpha
                                                            else "supported") if pf < alpha else "undecided")
        outcomes.append(each[0] if len(set(each)) == 1 else "depends on the setting")
    return outcomes
