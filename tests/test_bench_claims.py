"""Chapter 08's claims: every row names its source, quotes what its paper says, and gets the verdict that SciPy and
statsmodels give when the test is recomputed independently from the shipped records."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ttest_1samp
from statsmodels.stats.multitest import multipletests

from capsule_lab import bench_claims as bc
from capsule_lab.profiles import chapter_settings
from capsule_lab.router_bench import LONGER_RUN, SHIPPED_CACHE, record_key

QUICK = chapter_settings("08", "quick")
SEEDS_DIR = Path(__file__).resolve().parents[2] / "shared" / "seeds"
#: The papers whose text lies in ../shared/seeds, by the name a claim gives them.
PAPER_FILES = {"Mitterreiter et al. 2023": "003", "Renzulli et al. 2024 (REM)": "000", "Jeong et al. 2019": "004",
               "Faria 2022": "002"}


def shipped_records(settings, folder: Path) -> list:
    return [json.loads((folder / f"{record_key(n, s, settings)}.json").read_text())
            for n in settings.routers for s in settings.seeds]


def test_every_claim_names_its_source_and_says_whose_it_is():
    assert len(bc.CLAIMS) >= 14
    for claim in bc.CLAIMS:
        assert claim.source.strip() and claim.statement.strip() and claim.question.strip() and claim.differs.strip()
        if claim.origin == "course":
            assert claim.paper == "course" and claim.source.startswith("our question") and not claim.quoted
        else:
            assert claim.paper != "course" and re.search(r"Table|§|Abstract|Results|Appx", claim.source), claim
            assert claim.paper_setting not in ("", "-"), claim
    # the claims the review found no paper made are the course's questions, not a paper's
    course = [c.question for c in bc.CLAIMS if c.origin == "course"]
    assert any("r = 3 more accurate than r = 1" in q for q in course)
    assert not any("r = 5" in c.question for c in bc.CLAIMS)
    assert all(c.origin == "course" for c in bc.CLAIMS if "dynamic r=3 normed" in (c.a, c.b))


@pytest.mark.skipif(not SEEDS_DIR.is_dir(), reason="the paper texts (../shared/seeds) are not beside this checkout")
def test_quoted_claims_are_in_their_papers():
    flat = lambda text: re.sub(r"\s+", " ", text.replace("**", "")).lower()
    for claim in bc.CLAIMS:
        if claim.quoted and claim.paper in PAPER_FILES:
            paper = flat(next(SEEDS_DIR.glob(PAPER_FILES[claim.paper] + "_*.txt")).read_text())
            assert flat(claim.statement.removeprefix("... ")) in paper, claim.statement


def test_a_claim_checks_its_fields():
    base = bc.CLAIMS[0]
    with pytest.raises(ValueError, match="measure must be one of"):
        bc.Claim(**{**base.__dict__, "measure": "speed"})
    with pytest.raises(ValueError, match="must name its source"):
        bc.Claim(**{**base.__dict__, "source": " "})
    with pytest.raises(ValueError, match="origin must be one of"):
        bc.Claim(**{**base.__dict__, "origin": "blog"})


def scipy_outcomes(records, claims, ceiling, alpha=0.05) -> list[str]:
    """The verdicts recomputed without capsule_lab.stats: SciPy's one-sample t tests on the per-seed differences,
    statsmodels' Holm, the convergence and ceiling rules written out again."""
    by = {(r["router"], r["seed"]): r for r in records}
    p_values, untestable = [], []
    for claim in claims:
        seeds = sorted({s for n, s in by if n == claim.a} & {s for n, s in by if n == claim.b})
        lower, log = bc.MEASURES[claim.measure]
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
        late = not log and any(abs(by[n, s]["train_accuracy"][-1] - by[n, s]["train_accuracy"][-2]) >= bc.CONVERGENCE
                               for n in (claim.a, claim.b) for s in seeds)
        machines = {(by[n, s]["device"], by[n, s]["threads"]) for n in (claim.a, claim.b) for s in seeds}
        late = late or (log and len(machines) > 1)
        full = claim.measure == "entropy" and any(
            ceiling - np.mean([by[n, s]["entropy"] for s in seeds]) <= bc.CEILING_BITS for n in (claim.a, claim.b))
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


def test_the_quick_bench_verdicts_are_scipys_and_all_undecided_before_convergence():
    records = shipped_records(QUICK, SHIPPED_CACHE)
    rows = bc.claim_verdicts(records, ceiling=7.64)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(records, bc.CLAIMS, 7.64)
    assert all(r.verdict.outcome == "undecided" and "not converged" in r.verdict.reason for r in rows
               if r.claim.measure != "train_step_ms")                      # a step's time needs no convergence


@pytest.mark.skipif(not LONGER_RUN.with_suffix(".json").exists(), reason="the longer run is not shipped yet")
def test_the_longer_run_verdicts_are_scipys():
    """Chapter 08's verdict table: every router after the longer run's epochs, the ladders after their own run."""
    from capsule_lab.router_bench import shipped_longer_run
    settings, records, _ = shipped_longer_run()
    ladders, ladder_records, _ = shipped_longer_run("router_bench_long_ladder")
    assert len(settings.seeds) >= 5 and ladders.seeds == settings.seeds
    assert ladders.schedule.epochs > settings.schedule.epochs and set(ladders.routers) == {"ladder", "ladder matched"}
    combined = [r for r in records if r["router"] not in ladders.routers] + ladder_records
    rows = bc.claim_verdicts(combined, ceiling=7.64)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(combined, bc.CLAIMS, 7.64)
    assert [r.verdict.outcome for r in bc.claim_verdicts(records, ceiling=7.64)] == \
        scipy_outcomes(records, bc.CLAIMS, 7.64)


def synthetic(router, seed, accuracy, train=(0.98, 0.981), entropy=3.0, step=40.0, correct="1101", threads=2):
    return {"router": router, "seed": seed, "accuracy": accuracy, "affine_accuracy": accuracy - 0.1,
            "entropy": entropy, "train_step_ms": step, "train_accuracy": list(train), "correct": correct,
            "affine_correct": correct, "device": "cpu", "threads": threads}


def test_undecided_when_a_router_has_not_converged_or_the_entropy_is_saturated():
    claim = bc.Claim("course", "08", "our question", "A beats B", False, "-", "does A beat B?", "A", "B",
                     "accuracy", "better", "nothing", origin="course")
    clear = [synthetic("A", s, 0.99 + 0.001 * s) for s in range(5)] + [synthetic("B", s, 0.95) for s in range(5)]
    assert bc.claim_verdicts(clear, [claim])[0].verdict.outcome == "supported"
    late = clear[:-1] + [synthetic("B", 4, 0.95, train=(0.90, 0.95))]
    row = bc.claim_verdicts(late, [claim])[0]
    assert row.verdict.outcome == "undecided" and "B not converged (seeds 4" in row.verdict.reason
    entropy = bc.Claim("course", "08", "our question", "A has lower entropy", False, "-", "lower?", "A", "B",
                       "entropy", "better", "nothing", origin="course")
    saturated = [synthetic("A", s, 0.99, entropy=6.0 + 0.01 * s) for s in range(5)] + \
                [synthetic("B", s, 0.99, entropy=7.6) for s in range(5)]
    row = bc.claim_verdicts(saturated, [entropy], ceiling=7.64)[0]
    assert row.verdict.outcome == "undecided" and "within 0.5 of its ceiling" in row.verdict.reason
    assert bc.claim_verdicts(saturated, [entropy], ceiling=12.0)[0].verdict.outcome == "supported"
    faster = bc.Claim("course", "08", "our question", "A is faster", False, "-", "faster?", "A", "B",
                      "train_step_ms", "better", "nothing", origin="course")
    timed = [synthetic("A", s, 0.99, step=20.0 + s, train=(0.5, 0.9)) for s in range(5)] + \
            [synthetic("B", s, 0.99, step=40.0) for s in range(5)]
    assert bc.claim_verdicts(timed, [faster])[0].verdict.outcome == "supported"       # time needs no convergence
    one_thread = timed[:5] + [synthetic("B", s, 0.99, step=40.0, threads=1) for s in range(5)]
    row = bc.claim_verdicts(one_thread, [faster])[0]
    assert row.verdict.outcome == "undecided" and "cpu with 2 threads; B: cpu with 1 thread)" in row.verdict.reason
    with pytest.raises(ValueError, match="ceiling must be given"):
        bc.claim_verdicts(saturated, [entropy])
    with pytest.raises(ValueError, match="names router 'C'"):
        bc.claim_verdicts(clear, [bc.Claim(**{**claim.__dict__, "b": "C"})])


def test_describe_prints_units_and_the_pooled_mcnemar():
    claim = bc.Claim("course", "08", "our question", "A beats B", False, "-", "does A beat B?", "A", "B",
                     "accuracy", "better", "nothing", origin="course")
    records = [synthetic("A", s, 0.99 + 0.001 * s, correct="1111") for s in range(5)] + \
              [synthetic("B", s, 0.95, correct="1100") for s in range(5)]
    text = bc.describe(bc.claim_verdicts(records, [claim])[0])
    assert "SUPPORTED: A's advantage +4.20 points" in text and "10 right for A only, 0 for B only" in text
    assert "paired t over 5 seeds" in text and "margin 0.5 points" in text and "budgets differ" not in text
    longer = [dict(r, train_accuracy=[0.9] * 18 + [0.98, 0.98]) if r["router"] == "A" else r for r in records]
    assert "budgets differ: A trained 20 epochs, B 2" in bc.describe(bc.claim_verdicts(longer, [claim])[0])
    timing = bc.Claim("course", "08", "our question", "faster", False, "-", "faster?", "A", "B", "train_step_ms",
                      "better", "nothing", origin="course")
    assert bc.advantage(timing, math.log(2)) == "2.00× as fast"


def test_entropy_ceiling_by_hand():
    assert bc.entropy_ceiling([0, 0, 0, 0, 1, 1]) == pytest.approx((2 + 1) / 2)
    with pytest.raises(ValueError, match="labels must be"):
        bc.entropy_ceiling([])
