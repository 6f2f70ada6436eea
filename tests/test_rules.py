"""The verdict rules (capsule_lab.evidence.rules, through capsule_lab.evidence.claims.claim_verdicts): a constructed
record set lands in each outcome and in each reason a claim is not testable, and every number a tested row prints —
Holm within a family, the two intervals, the smallest detectable effect, the seeds that would decide it — is what
SciPy and statsmodels give when computed again."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as sp
from _scipy_verdicts import scipy_outcomes
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from capsule_lab.evidence import rules, stats
from capsule_lab.evidence.claims import Claim, claim_verdicts, describe
from capsule_lab.evidence.rules import Premise

SEEDS = range(5)


def net(router, seed, accuracy, train=(0.98, 0.981), **extra):
    return {"router": router, "seed": seed, "accuracy": accuracy, "train_accuracy": list(train),
            "correct": "1101", "device": "cpu", "threads": 2, **extra}


def claim(measure="accuracy", kind="better", origin="course", **extra):
    paper = "course" if origin == "course" else "A paper"
    source = "our question" if origin == "course" else "Table 1"
    return Claim(paper, "08", source, "A beats B", False, "-", f"does A beat B ({measure}, {kind})?", "A", "B",
                 measure, kind, "nothing", origin=origin, **extra)


def pair(a, b, **extra):
    """Records of A and B over five seeds: A's accuracy a + spread, B's b."""
    return [net("A", s, a + 0.001 * (s - 2) * (1 + s % 2), **extra) for s in SEEDS] + \
        [net("B", s, b, **extra) for s in SEEDS]


def tight(a, b):
    """A ahead of B by a - b with a spread of a few hundredths of a point."""
    return [net("A", s, a + 0.0001 * (s - 2) * (1 + s % 2)) for s in SEEDS] + [net("B", s, b) for s in SEEDS]


def outcome(records, c, **kwargs):
    row = claim_verdicts(records, [c], **kwargs)[0]
    return row.verdict


# ------------------------------------------------------------------------------------------------------ outcomes

def test_supported_and_the_symmetric_rule():
    assert outcome(pair(0.99, 0.95), claim()).outcome == "supported"
    behind = outcome(pair(0.95, 0.99), claim())
    assert behind.outcome == "contradicted" and behind.reason == "significant against the claim"
    # A ahead by 0.2 points, significantly, with a 0.5-point margin: the old rule said "contradicted"; now supported
    small = tight(0.9920, 0.9900)
    assert outcome(small, claim()).outcome == "supported"


def test_supported_but_smaller_than_the_paper_s_size():
    v = outcome(tight(0.9920, 0.9900), claim(origin="paper", size=0.02))          # the paper: 2 points
    assert v.outcome == "supported, smaller" and v.p_smaller < 0.05
    assert outcome(pair(0.99, 0.95), claim(origin="paper", size=0.02)).outcome == "supported"    # 4 points
    with pytest.raises(ValueError, match="size must be a number > 0, for a claim of kind 'better'"):
        claim(kind="not worse", size=0.02)


def test_undecided_says_how_many_seeds_would_decide_it():
    records = [net("A", s, x) for s, x in zip(SEEDS, (0.95, 0.97, 0.96, 0.99, 0.94))] + \
        [net("B", s, x) for s, x in zip(SEEDS, (0.955, 0.96, 0.95, 0.975, 0.945))]
    v = outcome(records, claim())
    assert v.outcome == "undecided"
    d = np.array([0.95, 0.97, 0.96, 0.99, 0.94]) - np.array([0.955, 0.96, 0.95, 0.975, 0.945])
    effect = d.mean() / d.std(ddof=1)
    expected = math.ceil(TTestPower().solve_power(effect_size=effect, nobs=None, alpha=0.05 / 2, power=0.8,
                                                   alternative="larger"))
    assert v.seeds_needed == expected and f"about {expected} seeds would decide it for the claim" in v.reason
    detectable = TTestPower().solve_power(effect_size=None, nobs=5, alpha=0.05 / 2, power=0.8,
                                          alternative="larger") * d.std(ddof=1)
    assert v.detectable == pytest.approx(detectable, rel=1e-6)


def test_the_intervals_are_labelled_unadjusted_and_the_family_s():
    records = pair(0.99, 0.95) + [net("C", s, 0.97 + 0.002 * s) for s in SEEDS]
    c1, c2 = claim(), Claim(**{**claim().__dict__, "b": "C", "question": "A beats C?"})
    rows = claim_verdicts(records, [c1, c2])
    d = np.array([r["accuracy"] for r in records[:5]]) - 0.95
    se = d.std(ddof=1) / math.sqrt(5)
    assert rows[0].verdict.interval == pytest.approx((d.mean() - sp.t.ppf(0.95, 4) * se,
                                                      d.mean() + sp.t.ppf(0.95, 4) * se))
    m = rows[0].verdict.m
    assert m == 4                                     # two rows, for and against each
    low, high = sp.t.interval(1 - 2 * 0.05 / m, 4, loc=d.mean(), scale=se)
    assert rows[0].verdict.family_interval == pytest.approx((low, high))


def test_holm_runs_within_each_family():
    records = pair(0.99, 0.95) + [net("C", s, 0.97 + 0.002 * s) for s in SEEDS] + \
        [net("D", s, 0.975 - 0.001 * s) for s in SEEDS]
    claims = [claim(origin="paper"), Claim(**{**claim(origin="paper").__dict__, "b": "C", "question": "A > C?"}),
              Claim(**{**claim().__dict__, "b": "D", "question": "A > D?"})]
    rows = claim_verdicts(records, claims)
    raw = [[stats.compare([r["accuracy"] for r in records if r["router"] == "A"],
                          [r["accuracy"] for r in records if r["router"] == x], "better", 0.005)]
           for x in ("B", "C", "D")]
    paper = multipletests([p for (c,) in raw[:2] for p in (c.p_support, c.p_contradict)], method="holm")[1]
    course = multipletests([raw[2][0].p_support, raw[2][0].p_contradict], method="holm")[1]
    got = [p for r in rows for p in (r.verdict.p_support, r.verdict.p_contradict)]
    assert got == pytest.approx(list(paper) + list(course), rel=1e-12)
    assert [r.verdict.family for r in rows] == ["paper", "paper", "course"]
    assert [r.verdict.outcome for r in rows] == scipy_outcomes(records, claims)


def test_a_time_that_flips_with_the_thread_count_depends_on_the_setting():
    faster = claim("train_step_ms")

    def timed(router, seed, ms, threads, steps=10, interleaved=True):
        return {"router": router, "seed": seed, "train_step_ms": ms, "timed_steps": steps, "interleaved": interleaved,
                "load": [0.1, 0.2], "device": "cpu", "threads": threads}

    training = pair(0.99, 0.95)
    flips = [timed("A", s, 20.0 + s, 1) for s in SEEDS] + [timed("B", s, 40.0 + s, 1) for s in SEEDS] + \
        [timed("A", s, 40.0 + s, 2) for s in SEEDS] + [timed("B", s, 20.0 + 0.5 * s, 2) for s in SEEDS]
    v = outcome(training + flips, faster)
    assert v.outcome == "depends on the setting"
    assert v.reason == "cpu, 1 thread: supported; cpu, 2 threads: contradicted"
    assert scipy_outcomes(training + flips, [faster]) == ["depends on the setting"]
    assert v.m == 4                                   # both settings' tests are in the family
    same = flips[:10] + [timed("A", s, 10.0 + s, 2) for s in SEEDS] + [timed("B", s, 40.0 + s, 2) for s in SEEDS]
    assert outcome(training + same, faster).outcome == "supported"
    text = describe(claim_verdicts(training + flips, [faster])[0])
    assert "cpu, 1 thread: SUPPORTED" in text and "cpu, 2 threads: CONTRADICTED" in text
    # the timing rule: interleaved, >= 10 steps, the load recorded
    few = [dict(r, timed_steps=5) for r in flips]
    assert "5 timed steps per seed where it asks 10" in outcome(training + few, faster).reason
    apart = [dict(r, interleaved=False, load=None) for r in flips]
    why = outcome(training + apart, faster)
    assert why.outcome == "not testable" and "not interleaved" in why.reason and "load was not recorded" in why.reason
    elsewhere = [r for r in flips if not (r["router"] == "B" and r["threads"] == 2)]
    elsewhere = [r for r in elsewhere if not (r["router"] == "A" and r["threads"] == 1)]
    assert "timed on different devices or thread counts" in outcome(training + elsewhere, faster).reason


# ------------------------------------------------------------------------------------------ not testable, by reason

def test_a_missing_premise_makes_the_row_not_testable_and_names_it():
    premise = Premise("deep", "five capsule layers", "Table 1")
    c = claim(origin="paper", premises=(premise,))
    v = outcome(pair(0.99, 0.95), c, setting={"deep": (False, "one routing layer")})
    assert v.outcome == "not testable"
    assert v.reason == "premise absent: the paper's \"five capsule layers\" (Table 1); here one routing layer"
    assert outcome(pair(0.99, 0.95), c, setting={"deep": (True, "six")}).outcome == "supported"
    with pytest.raises(ValueError, match="pass the study's setting"):
        outcome(pair(0.99, 0.95), c)
    with pytest.raises(ValueError, match="the setting does not say whether it has the premise 'deep'"):
        outcome(pair(0.99, 0.95), c, setting={})


@pytest.mark.parametrize("measure, a, b, null, cleared", [
    ("entropy", 7.5, 7.6, {"entropy_ceiling": 7.64}, False),          # both at the ceiling: saturated
    ("entropy", 4.2, 9.5, {"entropy_ceiling": 9.97}, True),           # REM's Table 9: only the pruned one clears
    ("on_object", 0.128, 0.127, {"on_object_null": 0.129}, False),    # no better than a map of another image
    ("coupling", 0.104, 0.102, {"coupling_null": 0.1}, False),        # on the uniform floor
    ("keys", 190.0, 193.0, {"keys_null": 199.0}, False),              # every image its own key
    ("keys", 120.0, 190.0, {"keys_null": 199.0}, True),
])
def test_a_measure_is_read_only_where_a_network_clears_its_null(measure, a, b, null, cleared):
    records = [net("A", s, 0.99, **{measure: a * (1 + 0.001 * s)}, **null) for s in SEEDS] + \
        [net("B", s, 0.99, **{measure: b}, **null) for s in SEEDS]
    v = outcome(records, claim(measure))
    assert (v.outcome != "not testable") == cleared
    if not cleared:
        assert v.reason.startswith("the measure cannot tell them apart: neither network clears")
    assert [v.outcome] == scipy_outcomes(records, [claim(measure)])


def test_the_null_is_required_and_the_ceiling_may_stand_in_for_it():
    records = [net("A", s, 0.99, entropy=3.0 + 0.01 * s) for s in SEEDS] + [net("B", s, 0.99, entropy=6.0)
                                                                           for s in SEEDS]
    with pytest.raises(ValueError, match="do not hold entropy's null"):
        outcome(records, claim("entropy"))
    assert outcome(records, claim("entropy"), ceiling=12.0).outcome == "supported"
    keys = [dict(r, keys=r["entropy"] * 10) for r in records]
    assert outcome(keys, claim("keys"), ceiling=12.0).outcome == "supported"      # 2^12 images per class


def test_collapsed_and_unconverged_networks_are_not_testable_and_mcnemar_leaves_collapsed_seeds_out():
    records = pair(0.99, 0.95)
    records[5 + 4] = net("B", 4, 0.12, train=(0.1113, 0.1108), correct="0000")   # flat at chance: "converged"
    assert rules.converged([0.1113, 0.1108]) and rules.collapsed([0.1113, 0.1108], 10)
    row = claim_verdicts(records, [claim()])[0]
    assert row.verdict.outcome == "not testable"
    assert "B collapsed (seed 4: training accuracy below 32.5 %, chance being 10 %)" in row.verdict.reason
    assert row.mcnemar_left_out == (4,) and row.mcnemar.strata == 4
    assert "(collapsed seed 4 left out)" in describe(row)
    late = pair(0.99, 0.95)
    late[5 + 3] = net("B", 3, 0.95, train=(0.90, 0.95))
    v = outcome(late, claim())
    assert v.outcome == "not testable" and "B not converged (seed 3" in v.reason
    assert scipy_outcomes(records, [claim()]) == scipy_outcomes(late, [claim()]) == ["not testable"]


def test_one_seed_or_a_record_that_cannot_be_compared():
    one = claim_verdicts([net("A", 0, 0.99, correct="1111"), net("B", 0, 0.9, correct="1100")], [claim()])[0]
    assert one.verdict.outcome == "not testable" and one.verdict.reason.startswith("one seed (0)")
    assert not one.verdict.tested and one.mcnemar.a_only == 2                      # the images still speak
    noted = pair(0.99, 0.95)
    noted[-1] = dict(noted[-1], accuracy=None, untestable="no matching epoch")
    assert "B: no matching epoch" in outcome(noted, claim()).reason
    # a record that cannot be compared on one measure only: that measure's rows are not testable, the others are
    split = [dict(r, middling=0.1 + 0.01 * r["seed"] if r["router"] == "A" else 0.4) for r in pair(0.99, 0.95)]
    split[-1] = dict(split[-1], middling=0.0, untestable_for={"middling": "no split"})
    v = outcome(split, claim("middling"))
    assert v.outcome == "not testable" and v.reason == "B: no split"
    assert outcome(split, claim()).outcome == "supported"
    assert scipy_outcomes(split, [claim("middling"), claim()]) == ["not testable", "supported"]


# ------------------------------------------------------------------------------------------------ the pieces

def test_chance_ceiling_and_convergence_by_hand():
    assert rules.chance_ceiling(10) == pytest.approx(0.325)
    assert rules.chance_ceiling(2) == pytest.approx(0.625)
    assert not rules.collapsed([0.5, 0.9], 10) and rules.collapsed([0.2233], 10)
    assert rules.converged([0.8, 0.9612, 0.9612]) and not rules.converged([0.95, 0.9612])
    assert not rules.converged([0.7368, 0.6813])                     # falling is not converged either


def test_clears_reads_the_informative_side_and_the_log_scale():
    below = rules.Null("x", "a ceiling", "below", 0.5)
    assert rules.clears([7.0], [7.64], below) and not rules.clears([7.2], [7.64], below)
    above = rules.Null("x", "a floor", "above", 0.01)
    assert rules.clears([0.111], [0.1], above) and not rules.clears([0.109], [0.1], above)
    ratio = rules.Null("x", "images", "below", math.log(1.2), log=True)
    assert rules.clears([160.0], [199.0], ratio) and not rules.clears([170.0], [199.0], ratio)


@pytest.mark.parametrize("call, message", [
    (lambda: rules.Null("x", "y", "beside", 0.1), "side must be one of"),
    (lambda: rules.Premise("", "quote", "source"), "a premise must have a key"),
    (lambda: rules.missing_premises([Premise("k", "q", "s")], {"k": ("yes", "x")}), "must be \\(holds: bool"),
    (lambda: rules.collapsed([0.5], 1), "classes must be an integer >= 2"),
    (lambda: rules.converged([0.9]), "train_accuracy must hold at least 2 numbers"),
    (lambda: rules.judge({}), "cases must be a non-empty mapping"),
    (lambda: rules.judge({"x": 1}), "must be a Case"),
    (lambda: rules.Case("blog", {}, ("why",)), "family must be one of"),
    (lambda: rules.Case("paper", {}), "a testable case needs at least one comparison"),
    (lambda: rules.judge({"x": rules.Case("paper", {}, ("why",))}, alpha=1.5), "alpha must be a number in"),
])
def test_inputs_are_checked(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_summary_table_gives_each_row_its_numbers_verdict_and_what_would_decide_it():
    from capsule_lab.evidence.claims import summary_table
    records = pair(0.99, 0.95) + [net("C", s, 0.99 + 0.001 * (s % 2)) for s in SEEDS]
    collapsed = [net("D", s, 0.1, train=(0.1, 0.1)) for s in SEEDS]
    claims = [claim(), Claim(**{**claim().__dict__, "b": "C", "question": "A > C?"}),
              Claim(**{**claim().__dict__, "b": "D", "question": "A > D?"})]
    rows = claim_verdicts(records + collapsed, claims)
    table = summary_table(rows, records + collapsed, "three rows")
    text = str(table)
    lines = [line for line in text.splitlines() if line.startswith("our question")]
    assert len(lines) == 3
    assert "A 99.00 %, B 95.00 %" in lines[0] and "| supported" in lines[0]
    assert "A 99.00 %, B 99.04 %" in lines[1]
    undecided = rows[1].verdict
    assert undecided.outcome == "undecided" and f"about {undecided.seeds_needed} seeds" in lines[1]
    assert "not testable" in lines[2] and "D collapsed (seeds 0, 1, 2, 3, 4" in lines[2]
    with pytest.raises(ValueError, match="rows must be a list of ClaimRow"):
        summary_table([1], records, "x")
