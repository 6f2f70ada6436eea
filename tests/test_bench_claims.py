"""The verdict tables' claims (chapter 08's bench, chapters 04 and 06): every row names its source, quotes what its
paper says, and gets the verdict that SciPy and statsmodels give when the test is recomputed independently from
the shipped records."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from _scipy_verdicts import SEEDS_DIR, assert_quotes_in_papers, scipy_outcomes

from capsule_lab.evidence.claims import Claim, advantage, describe, signed
from capsule_lab.measures.parse_trees import entropy_ceiling
from capsule_lab.studies.bench import claims as bc
from capsule_lab.studies.depth import DEPTH_CLAIMS
from capsule_lab.studies.ladder import LADDER_CLAIMS
from capsule_lab.course.profiles import chapter_settings
from capsule_lab.studies.rem_claims import REM_CLAIMS
from capsule_lab.studies.bench.runner import LONGER_RUN, SHIPPED_CACHE, verdict_records
from capsule_lab.studies.bench.records import record_key

QUICK = chapter_settings("08", "quick")


def shipped_records(settings, folder: Path) -> list:
    return [json.loads((folder / f"{record_key(n, s, settings)}.json").read_text())
            for n in settings.routers for s in settings.seeds]


def test_every_claim_names_its_source_and_says_whose_it_is():
    assert len(bc.CLAIMS) >= 14
    for claim in bc.CLAIMS + DEPTH_CLAIMS + LADDER_CLAIMS:
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
@pytest.mark.parametrize("table", [bc.CLAIMS, DEPTH_CLAIMS, LADDER_CLAIMS, REM_CLAIMS], ids=["08", "04", "06", "05"])
def test_quoted_claims_are_in_their_papers(table):
    assert_quotes_in_papers(table)


def test_a_claim_checks_its_fields():
    base = bc.CLAIMS[0]
    with pytest.raises(ValueError, match="measure must be one of"):
        Claim(**{**base.__dict__, "measure": "speed"})
    with pytest.raises(ValueError, match="must name its source"):
        Claim(**{**base.__dict__, "source": " "})
    with pytest.raises(ValueError, match="origin must be one of"):
        Claim(**{**base.__dict__, "origin": "blog"})


def independent_setting(records) -> dict:
    """The bench's setting for the premises, read again from the records: no dead primary capsule, centred digits."""
    return {"dead_capsules": (max(r["dead_primary"] for r in records if "timed_steps" not in r) > 0, ""),
            "translated_training": (False, "")}


def test_the_quick_bench_verdicts_are_scipys_and_none_tested_before_convergence():
    records = shipped_records(QUICK, SHIPPED_CACHE)
    rows = bc.claim_verdicts(records, ceiling=7.64)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(records, bc.CLAIMS, 7.64,
                                                               setting=independent_setting(records))
    assert all(r.verdict.outcome == "not testable" for r in rows)
    assert all("not converged" in r.verdict.reason for r in rows if r.claim.measure != "train_step_ms"
               and not r.claim.premises)
    timed = next(r for r in rows if r.claim.measure == "train_step_ms")   # the training records' times fail the rule
    assert "the timing rule is not met: the steps were not interleaved" in timed.verdict.reason


@pytest.mark.skipif(not LONGER_RUN.with_suffix(".json").exists(), reason="the longer run is not shipped yet")
def test_the_longer_run_verdicts_are_scipys():
    """Chapter 08's verdict table: every router after the longer run's epochs, the ladders after their own run, the
    time claim on the shipped interleaved timing."""
    from capsule_lab.studies.bench.runner import shipped_longer_run
    from capsule_lab.studies.bench.timing import shipped_timing
    settings, records, _ = shipped_longer_run()
    ladders, ladder_records, _ = shipped_longer_run("router_bench_long_ladder")
    assert len(settings.seeds) >= 5 and ladders.seeds == settings.seeds
    assert ladders.schedule.epochs > settings.schedule.epochs and set(ladders.routers) == {"ladder", "ladder matched"}
    combined = [r for r in records if r["router"] not in ladders.routers] + ladder_records
    assert sorted(map(str, verdict_records())) == sorted(map(str, combined))
    timing = shipped_timing()["records"]
    rows = bc.claim_verdicts(combined, ceiling=7.64, timing=timing)
    setting = independent_setting(combined)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(combined + timing, bc.CLAIMS, 7.64, setting=setting)
    assert [r.verdict for r in bc.longer_run_verdicts()] == [r.verdict for r in rows]     # the ceiling is 7.64 too
    assert [r.verdict.outcome for r in bc.claim_verdicts(records, ceiling=7.64)] == \
        scipy_outcomes(records, bc.CLAIMS, 7.64, setting=independent_setting(records))
    by_question = {r.claim.question: r.verdict for r in rows}
    # the findings, each by its rule: a premise absent, a symmetric rule, a measure at its null
    assert by_question["is uniform routing more accurate than r = 3 with one routing layer?"].outcome == "not testable"
    assert by_question["is the ladder more accurate than r = 3 on the affine test?"].outcome == "not testable"
    assert by_question["is r = 3 more accurate than r = 1?"].outcome == "undecided"
    assert by_question["does pruning lower the parse-tree entropy of r = 3?"].outcome == "not testable"


def test_the_bench_setting_says_why_a_premise_is_absent():
    records = shipped_records(QUICK, SHIPPED_CACHE)
    setting = bc.bench_setting(records)
    assert setting["dead_capsules"][0] is False and "0.0 % of the primary capsules dead" in setting["dead_capsules"][1]
    assert setting["translated_training"] == (False, "the bench trains on centred 28×28 digits, without translations")
    with pytest.raises(ValueError, match="the records hold no dead_primary"):
        bc.bench_setting([{k: v for k, v in r.items() if k != "dead_primary"} for r in records])


def test_describe_prints_units_and_the_pooled_mcnemar():
    claim = Claim("course", "08", "our question", "A beats B", False, "-", "does A beat B?", "A", "B",
                     "accuracy", "better", "nothing", origin="course")
    records = [synthetic("A", s, 0.99 + 0.001 * s, correct="1111") for s in range(5)] + \
              [synthetic("B", s, 0.95, correct="1100") for s in range(5)]
    text = describe(bc.claim_verdicts(records, [claim])[0])
    assert "SUPPORTED:" in text and "A's advantage +4.20 points" in text
    assert "10 right for A only, 0 for B only" in text and "pooled McNemar over 5 seeds" in text
    assert "(90 %, unadjusted)" in text and "(the course family's 2 tests, Bonferroni)" in text
    assert "paired t over 5 seeds" in text and "margin 0.5 points" in text and "budgets differ" not in text
    assert "smallest effect 5 seeds detect" in text
    longer = [dict(r, train_accuracy=[0.9] * 18 + [0.98, 0.98]) if r["router"] == "A" else r for r in records]
    assert "budgets differ: A trained 20 epochs, B 2" in describe(bc.claim_verdicts(longer, [claim])[0])
    timing = Claim("course", "08", "our question", "faster", False, "-", "faster?", "A", "B", "train_step_ms",
                      "better", "nothing", origin="course")
    assert advantage(timing, math.log(2)) == "2.00× as fast"
    # a share: positive advantage = A better, which is A higher where higher is better and A lower where lower is
    for measure, better, worse in (("on_object", "higher", "lower"), ("coupling", "higher", "lower"),
                                   ("middling", "lower", "higher"), ("dead_rate", "lower", "higher")):
        share = Claim("course", "06", "our question", "A", False, "-", "A?", "A", "B", measure, "better", "-",
                         origin="course")
        assert advantage(share, 0.012) == f"+0.012 (A 0.012 {better})"
        assert advantage(share, -0.003) == f"-0.003 (A 0.003 {worse})"
    # an interval reads low to high, signed, whichever way the measure points
    dead = Claim("course", "04", "our question", "A", False, "-", "A?", "A", "B", "dead_rate", "better", "-",
                 origin="course")
    assert (signed(dead, -0.328), signed(dead, -0.197)) == ("-0.328", "-0.197")


def synthetic(router, seed, accuracy, train=(0.98, 0.981), entropy=3.0, step=40.0, correct="1101", threads=2):
    return {"router": router, "seed": seed, "accuracy": accuracy, "affine_accuracy": accuracy - 0.1,
            "entropy": entropy, "train_step_ms": step, "train_accuracy": list(train), "correct": correct,
            "affine_correct": correct, "device": "cpu", "threads": threads}


def test_entropy_ceiling_by_hand():
    assert entropy_ceiling([0, 0, 0, 0, 1, 1]) == pytest.approx((2 + 1) / 2)
    with pytest.raises(ValueError, match="classes must hold one class index per image"):
        entropy_ceiling([])
