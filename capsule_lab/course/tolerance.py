"""Numbers from training, checked within a stated band: how a chapter stays testable on every machine.

Used from chapter 02 on, wherever a chapter trains; CONTRIBUTING.md states the rule.

Training is seeded and deterministic on one machine, yet its numbers differ in their last digits between
processors: MKL, oneDNN and ATen pick different kernels (AVX2, AVX-512, ...) and so different summation
orders, and a difference in the 7th digit of one gradient grows over a few hundred steps into a different
0.05 % of accuracy. No seed fixes that. So a chapter prints such a number as before and then calls
:func:`expect`, which fails the cell when the number leaves its band::

    expect("test accuracy (%)", 100 * accuracy, 97.7, abs_tol=1.3,
           why="4 standard errors of an accuracy near 97.7 % on 2,000 digits")

The band is the reference ± the tolerance, and ``why`` says in one line where the tolerance comes from:
the standard error of an accuracy on N test images (:func:`accuracy_tolerance`), or the spread measured
over seeds and CPU-kernel settings (``scripts/notebook_spread.py``). The cell's printed digits are kept
out of nbval's strict comparison (tagged so that nbval ignores its output); the band decides instead.

Bands are measured for the ``quick`` profile, the one the committed notebooks and the tests run. Under
another profile (``full`` on a GPU) :func:`expect` prints the number and says that it was not checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .profiles import Profile, profile_name

__all__ = ["Band", "OutOfBand", "accuracy_tolerance", "expect", "expect_each", "standard_error"]


class OutOfBand(AssertionError):
    """A number left the band its chapter states for it."""


def _check_number(value, name: str) -> float:
    if isinstance(value, (bool, str, bytes)):
        raise ValueError(f"{name} must be a real number, got {type(value).__name__}")
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError) as error:     # e.g. a tensor with more than one element
        raise ValueError(f"{name} must be a real number (a scalar), got {value!r}") from error


@dataclass(frozen=True)
class Band:
    """The interval ``reference ± tolerance`` and the one-line reason for its width. Chapter 02."""

    reference: float
    tolerance: float
    why: str

    def __post_init__(self):
        if not math.isfinite(self.reference):
            raise ValueError(f"reference must be a finite number, got {self.reference}")
        if not (self.tolerance >= 0 and math.isfinite(self.tolerance)):
            raise ValueError(f"tolerance must be a finite number >= 0, got {self.tolerance}")
        if not self.why or not self.why.strip():
            raise ValueError("why must say where the band's width comes from (one line)")

    @property
    def low(self) -> float:
        return self.reference - self.tolerance

    @property
    def high(self) -> float:
        return self.reference + self.tolerance

    def __contains__(self, value: float) -> bool:
        # NaN is in no band; the comparison is inclusive at both ends.
        return self.low <= value <= self.high

    def describe(self) -> str:
        return f"{self.reference:g} ± {self.tolerance:.3g}: {self.why}"


def _profile_that_ran(profile: Profile | str | None) -> str:
    return profile.name if isinstance(profile, Profile) else profile_name(profile)


def standard_error(p: float, n: int) -> float:
    """Standard error √(p(1 − p)/n) of an accuracy ``p`` (in [0, 1]) measured on ``n`` images. Chapter 02.

    Two networks that are equally good in truth still differ on a finite test set by about this much, so it
    sets the width of an accuracy's band (and says when two accuracies differ at all).
    """
    p = _check_number(p, "p")
    if not 0 <= p <= 1:
        raise ValueError(f"p must be an accuracy in [0, 1], got {p}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer (test images), got {n!r}")
    return math.sqrt(p * (1 - p) / n)


def accuracy_tolerance(percent: float, n: int, k: float = 4.0) -> float:
    """``k`` standard errors, in percentage points, of an accuracy near ``percent`` % on ``n`` images. Chapter 02.

    With ``k = 4`` a network trained as the chapter says leaves the band by chance about once in 16,000
    times; a network with a real defect (a wrong routing, a wrong loss) lands many standard errors away.
    """
    percent = _check_number(percent, "percent")
    if not 0 <= percent <= 100:
        raise ValueError(f"percent must lie in [0, 100], got {percent}")
    k = _check_number(k, "k")
    if not k > 0:
        raise ValueError(f"k must be > 0, got {k}")
    return k * 100 * standard_error(percent / 100, n)


def expect(name: str, value, reference, *, abs_tol: float | None = None, rel_tol: float | None = None,
           why: str, fmt: str = ".4g", profile: Profile | str | None = None, measured_on: str = "quick",
           verbose: bool = True) -> None:
    """Check that ``value`` lies within ``reference`` ± tolerance, print it, and fail loudly if it does not.

    Args:
        name: what the number is, as the reader should read it ("test accuracy (%)").
        value: the number the chapter just computed (a float, int, or one-element tensor).
        reference: the value measured when the band was set (the committed run).
        abs_tol, rel_tol: the band's half-width, absolute and/or relative to ``|reference|``; with both,
            the wider one applies (as in :func:`math.isclose`). At least one is required.
        why: one line saying where the width comes from (standard errors, measured spread).
        fmt: format of the printed value.
        profile: the profile that ran (a :class:`~capsule_lab.course.profiles.Profile` or its name); default:
            :func:`~capsule_lab.course.profiles.profile_name`. The band is checked only when it is ``measured_on``.
        verbose: print the one-line result (a failure is always raised).

    Returns nothing, so a check on a cell's last line adds no output of its own.

    Raises:
        OutOfBand: the value is outside the band (or not finite).
        ValueError: a malformed band (no tolerance, a negative one, no ``why``).

    Chapter 02.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError("name must be a non-empty string")
    value = _check_number(value, "value")
    reference = _check_number(reference, "reference")
    if abs_tol is None and rel_tol is None:
        raise ValueError("give abs_tol and/or rel_tol: a band needs a width")
    for tol_name, tol in (("abs_tol", abs_tol), ("rel_tol", rel_tol)):
        if tol is not None:
            tol = _check_number(tol, tol_name)
            if not (tol >= 0 and math.isfinite(tol)):
                raise ValueError(f"{tol_name} must be a finite number >= 0, got {tol}")
    tolerance = max(abs_tol or 0.0, (rel_tol or 0.0) * abs(reference))
    band = Band(reference, tolerance, why if isinstance(why, str) else "")
    ran = _profile_that_ran(profile)
    shown = format(value, fmt)
    if ran != measured_on:
        if verbose:
            print(f"  {name}: {shown} (its band was measured for the {measured_on} profile; not checked on {ran})")
        return
    if value not in band:
        raise OutOfBand(f"{name} = {shown} is outside its band [{band.low:{fmt}}, {band.high:{fmt}}] "
                        f"({band.describe()})")
    if verbose:
        print(f"  ✓ {name}: {shown}, within {band.describe()}")


def _aligned(name: str, items, keys: list | None):
    """``items`` (a sequence, or a dict when ``keys`` are given) as a list in ``keys``' order."""
    if keys is None:
        if isinstance(items, dict):
            raise ValueError(f"{name} must be a sequence when the values are a sequence")
        return list(items)
    if not isinstance(items, dict) or set(items) != set(keys):
        raise ValueError(f"{name} must be a dict with the same keys as the values {sorted(map(str, keys))}")
    return [items[k] for k in keys]


def expect_each(name: str, values, references, *, abs_tol=None, rel_tol: float | None = None,
                why: str, profile: Profile | str | None = None, measured_on: str = "quick",
                verbose: bool = True) -> None:
    """:func:`expect` for a row or table of numbers, reported in one line.

    ``values`` and ``references`` are sequences of the same length (e.g. a table's column, layer by
    layer), or dicts with the same keys (the key names the entry in an error). ``abs_tol`` is one width
    for all entries or one per entry (a sequence or dict aligned with the values); ``rel_tol`` is one
    width for all. Every entry is checked; a failure lists all entries outside their bands, not only the
    first. Returns nothing.

    Chapter 02.
    """
    keys = list(values) if isinstance(values, dict) else None
    if isinstance(references, dict) != (keys is not None):
        raise ValueError("values and references must both be sequences or both be dicts")
    values, references = _aligned("values", values, keys), _aligned("references", references, keys)
    if len(values) != len(references):
        raise ValueError(f"values and references must have the same length, got {len(values)} and "
                         f"{len(references)}")
    if not values:
        raise ValueError("values must hold at least one number")
    per_entry = abs_tol is not None and not isinstance(abs_tol, (int, float))
    tolerances = _aligned("abs_tol", abs_tol, keys) if per_entry else [abs_tol] * len(values)
    if len(tolerances) != len(values):
        raise ValueError(f"abs_tol must hold one width per value ({len(values)}), got {len(tolerances)}")
    keys = keys if keys is not None else list(range(len(values)))
    failures = []
    for key, value, reference, tol in zip(keys, values, references, tolerances):
        try:
            expect(f"{name}[{key}]", value, reference, abs_tol=tol, rel_tol=rel_tol, why=why, profile=profile,
                   measured_on=measured_on, verbose=False)
        except OutOfBand as error:
            failures.append(str(error))
    if failures:
        raise OutOfBand(f"{len(failures)} of {len(values)} entries of {name} are outside their bands:\n  "
                        + "\n  ".join(failures))
    if verbose:
        ran = _profile_that_ran(profile)
        widths = []
        if abs_tol is not None:
            widths.append("(" + ", ".join(f"{t:.3g}" for t in tolerances) + ")" if per_entry else f"{abs_tol:.3g}")
        if rel_tol is not None:
            widths.append(f"{rel_tol:.0%}")
        width = "± " + (widths[0] if len(widths) == 1 else f"max({', '.join(widths)})")
        if ran == measured_on:
            print(f"  ✓ {name}: all {len(values)} within their references {width}: {why}")
        else:
            print(f"  {name}: {len(values)} values (their bands were measured for the {measured_on} profile; "
                  f"not checked on {ran})")
