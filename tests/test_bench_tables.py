"""Chapter 08's result tables (capsule_lab.studies.bench.tables), against numbers worked by hand and SciPy."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from scipy.stats import binomtest, ttest_rel

from capsule_lab.studies.bench.runner import summarize_records
from capsule_lab.studies.bench.tables import (PAIRS, bench_tables, convergence_table, error_entry, pair_table,
                                              plus_minus, routing_table)


def record(router, seed, accuracy, correct, epochs=(0.90, 0.95)):
    return {"router": router, "seed": seed, "accuracy": accuracy, "affine_accuracy": accuracy - 0.1,
            "train_step_ms": 10.0 + seed, "step_ms": 9.0, "inference_ms": 3.0, "peak_memory_mb": 5.0,
            "parameters": 100, "router_parameters": 7, "entropy": 2.0 + seed, "keys": 4.0, "dyr": 0.1,
            "dead_primary": 0.0, "dead_class": 0.1, "correct": correct, "train_accuracy": list(epochs)}


RECORDS = [record("dynamic r=3", 0, 0.98, "1110"), record("dynamic r=3", 1, 0.96, "1101"),
           record("uniform", 0, 0.94, "1000"), record("uniform", 1, 0.95, "1100")]


def test_plus_minus_and_the_error_of_an_accuracy_by_hand():
    assert plus_minus((0.5, 0.1, 0.02)) == "0.5 ± 0.0" and plus_minus((0.5, 0.1, 0.02), 100) == "50.0 ± 2.0"
    assert plus_minus((0.25, None, None), digits=2) == "0.25"
    mean, sd, se = error_entry((0.97, 0.01, 0.005))
    assert (mean, sd, se) == pytest.approx((3.0, None, 0.5)) and sd is None


def test_the_error_and_cost_tables_of_a_summary_by_hand():
    summary = summarize_records(RECORDS)
    errors, costs = bench_tables(summary, 2000, "Tiny")
    rows = {row[0]: row for row in errors.rows}
    mean_error = 100 * (1 - (0.98 + 0.96) / 2)                           # 3.0 %
    se = 100 * (0.02 / math.sqrt(2)) / math.sqrt(2)                      # sd of (0.98, 0.96) over √2
    assert rows["dynamic r=3"][1] == pytest.approx((mean_error, None, se))
    assert rows["dynamic r=3"][2] == pytest.approx(100 * math.sqrt(0.97 * 0.03 / 2000))   # one run's binomial se
    assert rows["dynamic r=3"][4:] == ("0.35", "Sabour, Table 1, no decoder") and rows["uniform"][4:] == (None, None)
    assert "over 2 seeds" in errors.caption and errors.caption.startswith("Tiny")
    cost = {row[0]: row for row in costs.rows}
    assert cost["uniform"][1] == pytest.approx((10.5, math.sqrt(0.5), 0.5)) and cost["uniform"][4] == 100
    routing = {row[0]: row for row in routing_table(summary, "Tiny").rows}
    assert routing["dynamic r=3"][1] == pytest.approx((2.5, math.sqrt(0.5), 0.5))
    with pytest.raises(ValueError, match="summary must be the non-empty dict"):
        bench_tables({}, 10, "Tiny")


def test_the_pair_table_is_scipys_paired_t_and_an_exact_mcnemar():
    (row,) = pair_table(RECORDS, (0, 1), pairs=(("dynamic r=3", "uniform"),)).rows
    t = ttest_rel([0.98, 0.96], [0.94, 0.95])
    assert row[2] == pytest.approx(100 * ((0.98 - 0.94) + (0.96 - 0.95)) / 2)
    assert row[4] == pytest.approx(t.pvalue)
    # pooled over the seeds: "1110" vs "1000" gives 2 images right for A only; "1101" vs "1100" gives 1
    assert row[5] == "3 / 0" and row[6] == pytest.approx(binomtest(0, 3, 0.5).pvalue)
    assert ("connectionist", "similarity") in PAIRS


def test_the_convergence_table_reads_the_last_epoch():
    settings = SimpleNamespace(seeds=(0, 1), schedule=SimpleNamespace(epochs=2))
    rows = {row[0]: row for row in convergence_table(settings, RECORDS, "Tiny").rows}
    assert rows["uniform"][1:3] == pytest.approx((5.0, 5.0)) and rows["uniform"][3] is False   # +5 points: not yet
    steady = [dict(r, train_accuracy=[0.95, 0.951]) for r in RECORDS]
    assert all(row[-1] for row in convergence_table(settings, steady, "Tiny").rows)
