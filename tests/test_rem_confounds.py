"""What differs between Q and REM besides the pruning (capsule_lab.studies.rem_confounds), on a run record worked by
hand, and on the shipped Fashion-MNIST run the numbers the chapter quotes."""

from __future__ import annotations

import math

import pytest

from capsule_lab.studies.rem import shipped_rem_runs
from capsule_lab.studies.rem_confounds import (entropy_peak, epoch_gap, keys_dominance, levels_gap,
                                               matched_accuracy_range)


def step(epoch, accuracy, entropy):
    return {"epoch": epoch, "quantized_accuracy": accuracy, "entropy": entropy}


def sweep(*entropies):
    return {str(k): {"entropy": h, "entropy_ceiling": 3.0} for k, h in zip((3, 11, 16), entropies)}


RUN = {"dense": [step(1, 0.80, 2.0), step(2, 0.90, 2.9), step(3, 0.91, 2.5), step(4, 0.92, 2.4)],
       "pruned": [step(1, 0.80, 2.1), step(2, 0.88, 2.2), step(3, 0.90, 1.9), step(4, 0.91, 1.8)],
       "Q": {"epoch": 2, "entropy": 2.9, "quantized_accuracy": 0.90, "levels_sweep": sweep(1.0, 2.9, 3.0),
             "keys_per_class": {"0": 5, "1": 4, "2": 3}},
       "REM": {"epoch": 4, "entropy": 1.8, "quantized_accuracy": 0.91, "levels_sweep": sweep(0.5, 1.8, 3.0),
               "keys_per_class": {"0": 4, "1": 4, "2": 6}}}


def test_by_hand():
    gap = epoch_gap(RUN)
    assert (gap["q_epoch"], gap["last_epoch"], gap["rem_epoch"]) == (2, 4, 4)
    assert gap["gap_chosen"] == pytest.approx(1.1) and gap["gap_last"] == pytest.approx(0.6)
    assert levels_gap(RUN) == {3: {"q": 1.0, "rem": 0.5, "ceiling": 3.0, "gap": 0.5},
                               11: pytest.approx({"q": 2.9, "rem": 1.8, "ceiling": 3.0, "gap": 1.1}),
                               16: {"q": 3.0, "rem": 3.0, "ceiling": 3.0, "gap": 0.0}}
    # REM at 0.91 on 100 images: a standard error of √(0.91·0.09/100) = 0.0286; Q's epochs at 0.90, 0.91 and 0.92
    matched = matched_accuracy_range(RUN, 100)
    assert matched["half_width"] == pytest.approx(math.sqrt(0.91 * 0.09 / 100))
    assert matched["epochs"] == [2, 3, 4] and (matched["low"], matched["high"]) == (2.4, 2.9)
    assert matched_accuracy_range(RUN, 100_000)["epochs"] == [3]
    apart = {**RUN, "REM": {**RUN["REM"], "quantized_accuracy": 0.915}}
    assert matched_accuracy_range(apart, 10**6) == pytest.approx({"rem_accuracy": 0.915, "epochs": [], "low": None,
                                                                  "high": None,
                                                                  "half_width": math.sqrt(0.915 * 0.085 / 10**6)})
    assert entropy_peak(RUN) == {"dense": (2, 2.9), "pruned": (2, 2.2)}
    assert keys_dominance([RUN]) == {"fewer": 1, "equal": 1, "more": 1, "pairs": 3}


def test_the_shipped_fashion_run_gives_the_numbers_the_chapter_quotes():
    runs = shipped_rem_runs("rem_runs_fashion.json")["runs"]
    assert keys_dominance(runs) == {"fewer": 48, "equal": 0, "more": 2, "pairs": 50}
    gaps = [epoch_gap(r) for r in runs]
    assert [g["q_epoch"] for g in gaps] == [17, 20, 15, 11, 20] and all(g["rem_epoch"] == 24 for g in gaps)
    assert sum(g["gap_last"] for g in gaps) / 5 == pytest.approx(0.73, abs=0.005)
    assert sum(g["gap_chosen"] for g in gaps) / 5 == pytest.approx(0.97, abs=0.005)
    ranges = [matched_accuracy_range(r, 10_000) for r in runs]
    assert [(round(m["low"], 2), round(m["high"], 2)) for m in ranges] == [(8.90, 9.34), (9.14, 9.42), (9.40, 9.57),
                                                                          (8.91, 8.91), (8.79, 9.34)]


@pytest.mark.parametrize("call, message", [
    (lambda: epoch_gap({}), "run must be a run record"),
    (lambda: levels_gap({**RUN, "Q": {}}), "must hold a 'levels_sweep'"),
    (lambda: matched_accuracy_range(RUN, 0), "test_size must be an integer >= 1"),
    (lambda: keys_dominance([{**RUN, "REM": {}}]), "must hold 'keys_per_class'"),
])
def test_inputs_are_checked(call, message):
    with pytest.raises(ValueError, match=message):
        call()
