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

from capsule_lab.evidence.claims import Claim, advantage, describe
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


def test_the_quick_bench_verdicts_are_scipys_and_all_undecided_before_convergence():
    records = shipped_records(QUICK, SHIPPED_CACHE)
    rows = bc.claim_verdicts(records, ceiling=7.64)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(records, bc.CLAIMS, 7.64)
    assert all(r.verdict.outcome == "undecided" and "not converged" in r.verdict.reason for r in rows
               if r.claim.measure != "train_step_ms")                      # a step's time needs no convergence


@pytest.mark.skipif(not LONGER_RUN.with_suffix(".json").exists(), reason="the longer run is not shipped yet")
def test_the_longer_run_verdicts_are_scipys():
    """Chapter 08's verdict table: every router after the longer run's epochs, the ladders after their own run."""
    from capsule_lab.studies.bench.runner import shipped_longer_run
    settings, records, _ = shipped_longer_run()
    ladders, ladder_records, _ = shipped_longer_run("router_bench_long_ladder")
    assert len(settings.seeds) >= 5 and ladders.seeds == settings.seeds
    assert ladders.schedule.epochs > settings.schedule.epochs and set(ladders.routers) == {"ladder", "ladder matched"}
    combined = [r for r in records if r["router"] not in ladders.routers] + ladder_records
    assert sorted(map(str, verdict_records())) == sorted(map(str, combined))
    rows = bc.claim_verdicts(combined, ceiling=7.64)
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(combined, bc.CLAIMS, 7.64)
    assert [r.verdict for r in bc.longer_run_verdicts()] == [r.verdict for r in rows]     # the ceiling is 7.64 too
    assert [r.verdict.outcome for r in bc.claim_verdicts(records, ceiling=7.64)] == \
        scipy_outcomes(records, bc.CLAIMS, 7.64)


def synthetic(router, seed, accuracy, train=(0.98, 0.981), entropy=3.0, step=40.0, correct="1101", threads=2):
    return {"router": router, "seed": seed, "accuracy": accuracy, "affine_accuracy": accuracy - 0.1,
            "entropy": entropy, "train_step_ms": step, "train_accuracy": list(train), "correct": correct,
            "affine_correct": correct, "device": "cpu", "threads": threads}


def test_undecided_when_a_router_has_not_converged_or_the_entropy_is_saturated():
    claim = Claim("course", "08", "our question", "A beats B", False, "-", "does A beat B?", "A", "B",
                     "accuracy", "better", "nothing", origin="course")
    clear = [synthetic("A", s, 0.99 + 0.001 * s) for s in range(5)] + [synthetic("B", s, 0.95) for s in range(5)]
    assert bc.claim_verdicts(clear, [claim])[0].verdict.outcome == "supported"
    late = clear[:-1] + [synthetic("B", 4, 0.95, train=(0.90, 0.95))]
    row = bc.claim_verdicts(late, [claim])[0]
    assert row.verdict.outcome == "undecided" and "B not converged (seeds 4" in row.verdict.reason
    entropy = Claim("course", "08", "our question", "A has lower entropy", False, "-", "lower?", "A", "B",
                       "entropy", "better", "nothing", origin="course")
    saturated = [synthetic("A", s, 0.99, entropy=6.0 + 0.01 * s) for s in range(5)] + \
                [synthetic("B", s, 0.99, entropy=7.6) for s in range(5)]
    row = bc.claim_verdicts(saturated, [entropy], ceiling=7.64)[0]
    assert row.verdict.outcome == "undecided" and "within 0.5 of its ceiling" in row.verdict.reason
    assert bc.claim_verdicts(saturated, [entropy], ceiling=12.0)[0].verdict.outcome == "supported"
    faster = Claim("course", "08", "our question", "A is faster", False, "-", "faster?", "A", "B",
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
        bc.claim_verdicts(clear, [Claim(**{**claim.__dict__, "b": "C"})])


def test_describe_prints_units_and_the_pooled_mcnemar():
    claim = Claim("course", "08", "our question", "A beats B", False, "-", "does A beat B?", "A", "B",
                     "accuracy", "better", "nothing", origin="course")
    records = [synthetic("A", s, 0.99 + 0.001 * s, correct="1111") for s in range(5)] + \
              [synthetic("B", s, 0.95, correct="1100") for s in range(5)]
    text = describe(bc.claim_verdicts(records, [claim])[0])
    assert "SUPPORTED: A's advantage +4.20 points" in text and "10 right for A only, 0 for B only" in text
    assert "paired t over 5 seeds" in text and "margin 0.5 points" in text and "budgets differ" not in text
    longer = [dict(r, train_accuracy=[0.9] * 18 + [0.98, 0.98]) if r["router"] == "A" else r for r in records]
    assert "budgets differ: A trained 20 epochs, B 2" in describe(bc.claim_verdicts(longer, [claim])[0])
    timing = Claim("course", "08", "our question", "faster", False, "-", "faster?", "A", "B", "train_step_ms",
                      "better", "nothing", origin="course")
    assert advantage(timing, math.log(2)) == "2.00× as fast"
    # a share: positive advantage = A better, which is A higher where higher is better and A lower where lower is
    for measure, better, worse in (("on_object", "higher", "lower"), ("coupling", "higher", "lower"),
                                   ("middle_share", "lower", "higher"), ("dead_rate", "lower", "higher")):
        share = Claim("course", "06", "our question", "A", False, "-", "A?", "A", "B", measure, "better", "-",
                         origin="course")
        assert advantage(share, 0.012) == f"0.012 {better}" and advantage(share, -0.003) == f"0.003 {worse}"


def test_entropy_ceiling_by_hand():
    assert entropy_ceiling([0, 0, 0, 0, 1, 1]) == pytest.approx((2 + 1) / 2)
    with pytest.raises(ValueError, match="classes must hold one class index per image"):
        entropy_ceiling([])


def test_undecided_with_one_seed_or_a_record_that_cannot_be_compared():
    from capsule_lab.evidence.claims import claim_verdicts
    claim = Claim("course", "05", "our question", "A beats B", False, "-", "does A beat B?", "A", "B",
                     "accuracy", "better", "nothing", origin="course")
    one = claim_verdicts([synthetic("A", 0, 0.99, correct="1111"), synthetic("B", 0, 0.9, correct="1100")], [claim])[0]
    assert one.verdict.outcome == "undecided" and one.verdict.reason.startswith("not testable: one seed (0)")
    assert one.verdict.p_support is None and one.mcnemar.a_only == 2                # the images still speak
    assert "UNDECIDED: not testable: one seed" in describe(one) and "2 right for A only" in describe(one)
    clear = [synthetic("A", s, 0.99 + 0.001 * s) for s in range(5)] + [synthetic("B", s, 0.95) for s in range(5)]
    noted = clear[:-1] + [dict(synthetic("B", 4, 0.95), accuracy=None, untestable="no matching epoch")]
    row = claim_verdicts(noted, [claim])[0]
    assert row.verdict.outcome == "undecided" and "B: no matching epoch" in row.verdict.reason
    entropy = Claim("course", "05", "our question", "A lower", False, "-", "lower?", "A", "B", "entropy",
                       "better", "nothing", origin="course")
    own = [dict(r, entropy_ceiling=7.0, entropy=6.8 if r["router"] == "B" else 3.0) for r in clear]
    row = claim_verdicts(own, [entropy])[0]                        # each record's own ceiling, no argument needed
    assert row.verdict.outcome == "undecided" and "B's entropy 6.80 bits is within 0.5 of its ceiling 7.00" in \
        row.verdict.reason
