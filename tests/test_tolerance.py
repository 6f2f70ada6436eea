"""capsule_lab.course.tolerance: a number inside its band passes and is printed; outside, the cell fails loudly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from capsule_lab.course.profiles import get_profile
from capsule_lab.course.tolerance import Band, OutOfBand, accuracy_tolerance, expect, expect_each, standard_error

QUICK = get_profile("quick", device="cpu")
FULL = get_profile("full", device="cpu")


def test_standard_error_hand_worked():
    # p = 0.9 on 100 images: √(0.9 · 0.1 / 100) = √0.0009 = 0.03
    assert standard_error(0.9, 100) == pytest.approx(0.03, abs=1e-15)
    assert standard_error(0.5, 2000) == pytest.approx(math.sqrt(0.25 / 2000), rel=1e-15)
    assert standard_error(1.0, 10) == 0.0


def test_accuracy_tolerance_is_k_standard_errors_in_points():
    # 97.7 % on 2,000 digits: SE = √(0.977 · 0.023 / 2000) = 0.0033519... → 4 SE = 1.3408 points
    assert accuracy_tolerance(97.7, 2000) == pytest.approx(4 * 100 * math.sqrt(0.977 * 0.023 / 2000), rel=1e-12)
    assert accuracy_tolerance(97.7, 2000) == pytest.approx(1.3408, abs=1e-4)
    assert accuracy_tolerance(50.0, 100, k=2) == pytest.approx(10.0)


@pytest.mark.parametrize("call, message", [
    (lambda: standard_error(1.5, 10), "p must be an accuracy in"),
    (lambda: standard_error(0.5, 0), "n must be a positive integer"),
    (lambda: standard_error(0.5, 2.0), "n must be a positive integer"),
    (lambda: accuracy_tolerance(101, 10), "percent must lie in"),
    (lambda: accuracy_tolerance(50, 10, k=0), "k must be > 0"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_band_edges_are_inclusive_and_nan_is_outside():
    band = Band(10.0, 0.5, "test")
    assert (band.low, band.high) == (9.5, 10.5)
    assert 9.5 in band and 10.5 in band and 10.0 in band
    assert 9.4999 not in band and 10.5001 not in band
    assert math.nan not in band


def test_expect_inside_the_band_prints_and_returns_nothing(capsys):
    out = expect("test accuracy (%)", 97.55, 97.7, abs_tol=1.3, why="4 SE on 2,000 digits", fmt=".2f",
                 profile=QUICK)
    assert out is None                                  # a check on a cell's last line displays nothing more
    printed = capsys.readouterr().out
    assert "✓ test accuracy (%): 97.55" in printed and "97.7 ± 1.3: 4 SE on 2,000 digits" in printed


def test_expect_outside_the_band_raises_with_the_band_and_the_reason():
    with pytest.raises(OutOfBand, match=r"test accuracy \(%\) = 95.00 is outside its band \[96.40, 99.00\]"):
        expect("test accuracy (%)", 95.0, 97.7, abs_tol=1.3, why="4 SE", fmt=".2f", profile=QUICK)
    assert issubclass(OutOfBand, AssertionError)          # a failing cell, as pytest and nbval report it


def test_expect_not_finite_is_out_of_band():
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(OutOfBand):
            expect("x", bad, 0.0, abs_tol=1e9, why="wide", profile=QUICK)


def test_relative_and_absolute_tolerances_take_the_wider():
    expect("x", 10.9, 10.0, rel_tol=0.1, why="10 %", profile=QUICK, verbose=False)      # band 9–11
    with pytest.raises(OutOfBand):
        expect("x", 11.1, 10.0, rel_tol=0.1, why="10 %", profile=QUICK, verbose=False)
    expect("x", 11.9, 10.0, rel_tol=0.1, abs_tol=2.0, why="wider", profile=QUICK, verbose=False)
    expect("x", -10.9, -10.0, rel_tol=0.1, why="|reference|", profile=QUICK, verbose=False)


def test_expect_takes_tensors_and_numpy_scalars():
    expect("x", torch.tensor(0.5), 0.5, abs_tol=0.0, why="exact", profile=QUICK, verbose=False)
    expect("x", np.float32(0.25), 0.25, abs_tol=0.0, why="exact", profile=QUICK, verbose=False)
    with pytest.raises(OutOfBand):
        expect("x", torch.tensor(0.5001), 0.5, abs_tol=0.0, why="exact", profile=QUICK, verbose=False)


@pytest.mark.parametrize("kwargs, message", [
    (dict(), "give abs_tol and/or rel_tol"),
    (dict(abs_tol=-1.0), "abs_tol must be a finite number >= 0"),
    (dict(rel_tol=math.inf), "rel_tol must be a finite number >= 0"),
    (dict(abs_tol=1.0, why=""), "why must say where the band's width comes from"),
])
def test_malformed_bands_are_errors_not_passes(kwargs, message):
    kwargs = {"why": "reason", **kwargs}
    with pytest.raises(ValueError, match=message):
        expect("x", 1.0, 1.0, profile=QUICK, **kwargs)


def test_expect_rejects_values_that_are_not_one_number():
    with pytest.raises(ValueError, match="value must be a real number"):
        expect("x", torch.tensor([1.0, 2.0]), 1.0, abs_tol=1.0, why="r", profile=QUICK)
    with pytest.raises(ValueError, match="value must be a real number"):
        expect("x", "1.0", 1.0, abs_tol=1.0, why="r", profile=QUICK)
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        expect("", 1.0, 1.0, abs_tol=1.0, why="r", profile=QUICK)


def test_under_another_profile_the_number_is_shown_but_not_checked(capsys):
    expect("accuracy", 99.6, 97.7, abs_tol=1.3, why="4 SE", profile=FULL)      # no OutOfBand
    assert "accuracy: 99.6 (its band was measured for the quick profile; not checked on full)" in capsys.readouterr().out
    expect("accuracy", 99.6, 97.7, abs_tol=1.3, why="4 SE", profile="full", verbose=False)


def test_the_profile_defaults_to_the_environment(monkeypatch):
    monkeypatch.setenv("CAPSULE_LAB_PROFILE", "quick")
    with pytest.raises(OutOfBand):
        expect("x", 2.0, 1.0, abs_tol=0.5, why="r")
    monkeypatch.setenv("CAPSULE_LAB_PROFILE", "full")
    expect("x", 2.0, 1.0, abs_tol=0.5, why="r", verbose=False)                # not checked: no OutOfBand


def test_expect_each_checks_every_entry_and_reports_them_in_one_line(capsys):
    expect_each("cnm per layer", [0.73, 0.49, 0.34], [0.72, 0.50, 0.33], abs_tol=0.02, why="measured",
                profile=QUICK)
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1 and "✓ cnm per layer: all 3 within their references ± 0.02" in printed


def test_expect_each_lists_every_entry_outside_its_band():
    with pytest.raises(OutOfBand, match=r"2 of 3 entries of t are outside") as info:
        expect_each("t", {"a": 1.0, "b": 5.0, "c": -5.0}, {"a": 1.0, "b": 1.0, "c": 1.0}, abs_tol=0.5, why="w",
                    profile=QUICK)
    assert "t[b] = 5" in str(info.value) and "t[c] = -5" in str(info.value) and "t[a]" not in str(info.value)


def test_expect_each_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="same length"):
        expect_each("t", [1.0], [1.0, 2.0], abs_tol=1, why="w", profile=QUICK)
    with pytest.raises(ValueError, match="same keys"):
        expect_each("t", {"a": 1.0}, {"b": 1.0}, abs_tol=1, why="w", profile=QUICK)
    with pytest.raises(ValueError, match="both be sequences or both be dicts"):
        expect_each("t", {"a": 1.0}, [1.0], abs_tol=1, why="w", profile=QUICK)
    with pytest.raises(ValueError, match="at least one number"):
        expect_each("t", [], [], abs_tol=1, why="w", profile=QUICK)


def test_expect_each_under_another_profile_is_not_checked(capsys):
    expect_each("t", [9.0], [1.0], abs_tol=0.5, why="w", profile=FULL)
    assert "not checked on full" in capsys.readouterr().out


def test_expect_each_takes_one_width_per_entry(capsys):
    expect_each("cnm", [0.70, 0.49], [0.73, 0.49], abs_tol=[0.05, 0.01], why="measured", profile=QUICK)
    assert "± (0.05, 0.01)" in capsys.readouterr().out
    with pytest.raises(OutOfBand, match=r"cnm\[1\] = 0.47"):
        expect_each("cnm", [0.70, 0.47], [0.73, 0.49], abs_tol=[0.05, 0.01], why="measured", profile=QUICK)
    expect_each("d", {"a": 1.0, "b": 2.0}, {"a": 1.1, "b": 2.0}, abs_tol={"a": 0.1, "b": 0.0}, why="w",
                profile=QUICK, verbose=False)
    with pytest.raises(ValueError, match="one width per value"):
        expect_each("cnm", [0.7, 0.5], [0.7, 0.5], abs_tol=[0.1], why="w", profile=QUICK)
    with pytest.raises(ValueError, match="abs_tol must be a dict with the same keys"):
        expect_each("d", {"a": 1.0}, {"a": 1.0}, abs_tol=[0.1], why="w", profile=QUICK)
