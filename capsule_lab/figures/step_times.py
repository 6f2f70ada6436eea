"""Seconds per training step of L-CapsNets and CapsNets: the ladder paper's Table 3 as a picture.

Taught in chapter 06 (``chapters/06_ladder.ipynb``), after Jeong, Lee and Kim, "Ladder capsule network" (ICML 2019),
Table 3: :func:`step_time_figure` draws the seconds per training step of every model of a
:func:`capsule_lab.measures.cost.bench_steps` report (named as :func:`capsule_lab.measures.cost.step_models` names them:
"ladder K=…" and "capsnet r=…"), L-CapsNets as plain blue bars and CapsNets as hatched vermillion ones, beside the
paper's numbers (:data:`PAPER_TABLE3`) on an axis of their own. It takes the report's plain dict, returns the Figure and
attaches what it shows, in words written from the bars (:func:`step_time_description`, through
:func:`capsule_lab.figures.descriptions.attach_description`).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .descriptions import attach_description
from .style import MAX_FIGURE_WIDTH, PALETTE

__all__ = ["PAPER_TABLE3", "plot_step_times", "step_time_figure", "step_time_description"]

LADDER_COLOR = PALETTE[0]       # Table 3: L-CapsNets as plain blue bars,
CAPSNET_COLOR = PALETTE[1]      # CapsNets as hatched vermillion ones
CAPSNET_HATCH = "///"

#: Seconds per training iteration on 100 MNIST samples, as (mean, standard error), from the ladder paper's
#: Table 3 (the authors' machine); named as :func:`capsule_lab.measures.cost.step_models` names the models.
PAPER_TABLE3 = {"ladder K=50": (0.2034, 0.010), "ladder K=70": (0.2159, 0.008), "ladder K=100": (0.2953, 0.001),
                "capsnet r=3": (1.732, 0.026), "capsnet r=4": (2.123, 0.041), "capsnet r=5": (2.656, 0.085)}


def _number(value, name: str, allow_nan: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise ValueError(f"{name} must be a number >= 0 (seconds), got {value!r}")
    value = float(value)
    if math.isnan(value) and allow_nan:
        return value
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"{name} must be a number >= 0 (seconds), got {value!r}")
    return value


def _is_ladder(name: str) -> bool:
    return name.lower().startswith(("ladder", "l-capsnet"))


def _is_capsnet(name: str) -> bool:
    return not _is_ladder(name) and "capsnet" in name.lower()


def _color(name: str) -> str:
    return LADDER_COLOR if _is_ladder(name) else CAPSNET_COLOR if _is_capsnet(name) else "0.5"


def _hatch(name: str) -> str | None:
    return CAPSNET_HATCH if _is_capsnet(name) else None


def plot_step_times(ax, seconds: dict, errors: dict | None = None, unit: str = "median") -> list:
    """Draw horizontal bars on ``ax``: the seconds per training step of every model of ``seconds = {name: s}``
    (top to bottom in the dict's order), L-CapsNets (names starting "ladder") in blue and CapsNets in hatched
    vermillion,
    ``errors = {name: standard error}`` as error bars (NaN: none), each bar's value written beside it. ``unit``
    names the statistic on the axis label. Returns the bar containers. Chapter 06."""
    if not isinstance(seconds, dict) or not seconds:
        raise ValueError("seconds must be a non-empty dict {model name: seconds per step}")
    names = list(seconds)
    values = [_number(seconds[n], f"seconds[{n!r}]") for n in names]
    errors = errors or {}
    if not isinstance(errors, dict):
        raise ValueError("errors must be a dict {model name: standard error in seconds}")
    spread = [_number(errors.get(n, math.nan), f"errors[{n!r}]", allow_nan=True) for n in names]
    y = np.arange(len(names))
    xerr = [0.0 if math.isnan(e) else e for e in spread]
    bars = []
    for k, name in enumerate(names):
        bars.append(ax.barh(y[k], values[k], xerr=xerr[k], color=_color(name), alpha=0.85, capsize=3,
                            hatch=_hatch(name), edgecolor="white" if _hatch(name) else None, error_kw={"lw": 1}))
    top = max(v + e for v, e in zip(values, xerr)) or 1.0
    for k, v in enumerate(values):
        ax.text(v + xerr[k] + 0.02 * top, y[k], f"{v:.3g} s", va="center", fontsize=8)
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.25 * top)
    ax.set_xlabel(f"seconds per training step ({unit})")
    ax.grid(alpha=0.3, axis="x")
    return bars


def _check_report(report) -> dict:
    if not isinstance(report, dict) or not isinstance(report.get("models"), dict) or not report["models"]:
        raise ValueError("report must be the dict capsule_lab.measures.cost.bench_steps returns, with a non-empty "
                         "'models': {name: {'median_s', 'stderr_s', ...}}")
    for name, numbers in report["models"].items():
        if not isinstance(numbers, dict) or "median_s" not in numbers:
            raise ValueError(f"report['models'][{name!r}] must be a dict with 'median_s' (and 'stderr_s'), "
                             f"as bench_steps gives it")
    return report


def _check_paper(paper) -> tuple[dict, dict]:
    if not isinstance(paper, dict) or not paper:
        raise ValueError("paper must be a non-empty dict {model name: seconds or (seconds, standard error)}, "
                         "e.g. PAPER_TABLE3")
    seconds, errors = {}, {}
    for name, value in paper.items():
        if isinstance(value, (tuple, list)):
            if len(value) != 2:
                raise ValueError(f"paper[{name!r}] must be seconds or (seconds, standard error), got {value!r}")
            seconds[name], errors[name] = value
        else:
            seconds[name] = value
    return seconds, errors


def step_time_figure(report: dict, paper: dict | None = None, title: str | None = None) -> Figure:
    """The ladder paper's Table 3 as a picture: the median seconds per training step of every model of
    ``report`` (:func:`capsule_lab.measures.cost.bench_steps`; error bars: the standard error of the mean over the
    repeats), L-CapsNets plain blue and CapsNets hatched vermillion (:func:`plot_step_times`); its panel's title says
    the device, threads and batch (the paper's panel: its batch, and that its hardware is not stated). With ``paper = {name: seconds or (seconds, standard error)}`` (e.g.
    :data:`PAPER_TABLE3`), a second panel shows the paper's numbers — another machine and other sizes, so on an axis of
    their own. The figure carries its description (:func:`step_time_description`). Chapter 06."""
    report = _check_report(report)
    if paper is not None:
        _check_paper(paper)
    panels = 1 if paper is None else 2
    rows = max(len(report["models"]), 0 if paper is None else len(paper))
    fig, axes = plt.subplots(1, panels, squeeze=False, constrained_layout=True,
                             figsize=(MAX_FIGURE_WIDTH if panels == 2 else 5.0, 1.2 + 0.35 * rows))
    models = report["models"]
    plot_step_times(axes[0, 0], {n: m["median_s"] for n, m in models.items()},
                    {n: m.get("stderr_s", math.nan) for n, m in models.items()}, unit="median")
    threads = report.get("threads", "?")
    axes[0, 0].set_title(f"this course: {report.get('device', '?')}, {threads} thread{'' if threads == 1 else 's'}, "
                         f"batch {report.get('batch', '?')}", fontsize=9)
    if paper is not None:
        seconds, errors = _check_paper(paper)
        plot_step_times(axes[0, 1], seconds, errors, unit="mean")
        axes[0, 1].set_title("the paper's Table 3: batch 100, MNIST,\nhardware not stated", fontsize=9)
    fig.suptitle(title or "one training step", fontsize=10)
    return attach_description(fig, *step_time_description(report, paper))


def _speedup(seconds: dict) -> str:
    """'a CapsNet step takes a× to b× an L-CapsNet step' from {name: seconds}, or '' without both kinds."""
    ladders = [v for n, v in seconds.items() if _is_ladder(n)]
    capsnets = [v for n, v in seconds.items() if _is_capsnet(n)]
    if not ladders or not capsnets or min(ladders) <= 0:
        return ""
    return (f"; a CapsNet step takes {min(capsnets) / max(ladders):.1f}× to {max(capsnets) / min(ladders):.1f}× "
            f"an L-CapsNet step")


def step_time_description(report: dict, paper: dict | None = None) -> tuple[str, str]:
    """``(alt, caption)`` of :func:`step_time_figure` for the same arguments, written from the bars it draws: every
    model's seconds, the fastest and the slowest, and the range of the CapsNets' time over the L-CapsNets' — for
    this course's report and for the paper's panel. Chapter 06."""
    report = _check_report(report)
    medians = {n: _number(m["median_s"], f"report['models'][{n!r}]['median_s']") for n, m in report["models"].items()}
    threads = report.get("threads", "?")
    alt = (f"Horizontal bars of the median seconds per training step on {report.get('device', '?')} ({threads} "
           f"thread{'' if threads == 1 else 's'}, batch {report.get('batch', '?')}), L-CapsNets in plain blue and "
           f"CapsNets hatched: " + ", ".join(f"{n} {v:.3g} s" for n, v in medians.items())
           + f". The fastest is {min(medians, key=medians.get)}, the slowest {max(medians, key=medians.get)}"
           + _speedup(medians) + ".")
    if paper is not None:
        seconds, _ = _check_paper(paper)
        seconds = {n: _number(v, f"paper[{n!r}]") for n, v in seconds.items()}
        alt += (" A second panel, on its own axis, shows the paper's Table 3: "
                + ", ".join(f"{n} {v:.3g} s" for n, v in seconds.items()) + _speedup(seconds) + ".")
        caption = "Seconds per training step of L-CapsNets and CapsNets here, beside the paper's Table 3"
    else:
        caption = "Seconds per training step of L-CapsNets and CapsNets"
    return alt, caption

