"""What differs between chapter 05's Q and REM besides the pruning, each sized from a run's records. Chapter 05.

The paper compares DR-CapsNet+Q with DR-CapsNet+REM as if only the pruning differed. Read from a shipped run
(:func:`capsule_lab.studies.rem.run_record`: every epoch of the dense and of the pruned training, and the two chosen
models with their sweep over K), four other things differ, and each has its number here:

- **which epoch** (:func:`epoch_gap`): Q is the dense epoch with the lowest validation loss, REM the last (App. B.2);
  if the dense entropy keeps falling after Q's epoch, the gap at REM's own epoch is smaller;
- **which K** (:func:`levels_gap`): the parse trees are counted at one quantisation K; where both networks sit at the
  ceiling (every image its own key) or at the floor, no K-level difference can show;
- **which accuracy** (:func:`matched_accuracy_range`): "Q at REM's accuracy" reads Q's curve between two epochs; the
  epochs whose accuracy lies within a binomial standard error of REM's give the range that reading could take;
- **how the entropy moves while training** (:func:`entropy_peak`): the epoch where each run's entropy is highest.

And the paper's "for each class" (§4.4) is counted class by class (:func:`keys_dominance`).
"""

from __future__ import annotations

import math

__all__ = ["epoch_gap", "levels_gap", "matched_accuracy_range", "entropy_peak", "keys_dominance"]


def _run(run) -> dict:
    if not isinstance(run, dict) or not {"dense", "pruned", "Q", "REM"} <= set(run):
        raise ValueError("run must be a run record (capsule_lab.studies.rem.run_record) with its 'dense', 'pruned', "
                         "'Q' and 'REM'")
    if not run["dense"] or not run["pruned"]:
        raise ValueError("run must hold at least one dense and one pruned epoch")
    return run


def epoch_gap(run: dict) -> dict:
    """Q's entropy at its chosen epoch and at the last dense epoch, REM's at its own (the last), and the two gaps
    (Q − REM, bits): ``{"q_epoch", "q_entropy", "last_epoch", "q_last_entropy", "rem_epoch", "rem_entropy",
    "gap_chosen", "gap_last"}``. Chapter 05."""
    run = _run(run)
    last = run["dense"][-1]
    q, rem = run["Q"], run["REM"]
    return {"q_epoch": q["epoch"], "q_entropy": q["entropy"], "last_epoch": last["epoch"],
            "q_last_entropy": last["entropy"], "rem_epoch": rem["epoch"], "rem_entropy": rem["entropy"],
            "gap_chosen": q["entropy"] - rem["entropy"], "gap_last": last["entropy"] - rem["entropy"]}


def levels_gap(run: dict) -> dict:
    """Per quantisation K of the chosen models' sweep: ``{K: {"q", "rem", "ceiling", "gap"}}`` (entropies in bits,
    the ceiling the larger of the two models' ceilings, the gap Q − REM), in increasing K. Chapter 05."""
    run = _run(run)
    q, rem = run["Q"].get("levels_sweep"), run["REM"].get("levels_sweep")
    if not q or not rem:
        raise ValueError("run's Q and REM must hold a 'levels_sweep' (capsule_lab.studies.rem.model_extras)")
    out = {}
    for k in sorted(set(q) & set(rem), key=int):
        ceiling = max(q[k]["entropy_ceiling"], rem[k]["entropy_ceiling"])
        out[int(k)] = {"q": q[k]["entropy"], "rem": rem[k]["entropy"], "ceiling": ceiling,
                       "gap": q[k]["entropy"] - rem[k]["entropy"]}
    return out


def matched_accuracy_range(run: dict, test_size: int, standard_errors: float = 1.0) -> dict:
    """The entropies of Q's dense epochs whose quantised accuracy lies within ``standard_errors`` binomial standard
    errors (√(p(1 − p)/n), n = ``test_size``) of REM's: ``{"rem_accuracy", "half_width", "epochs", "low", "high"}``
    (low and high None when no epoch is that close). The interpolated "Q at REM's accuracy" is one point of this
    range. Chapter 05."""
    run = _run(run)
    if isinstance(test_size, bool) or not isinstance(test_size, int) or test_size < 1:
        raise ValueError(f"test_size must be an integer >= 1, got {test_size!r}")
    p = run["REM"]["quantized_accuracy"]
    half = standard_errors * math.sqrt(p * (1 - p) / test_size)
    close = [s for s in run["dense"] if abs(s["quantized_accuracy"] - p) <= half]
    entropies = [s["entropy"] for s in close]
    return {"rem_accuracy": p, "half_width": half, "epochs": [s["epoch"] for s in close],
            "low": min(entropies) if entropies else None, "high": max(entropies) if entropies else None}


def entropy_peak(run: dict) -> dict:
    """The epoch at which each training's entropy was highest, and that entropy: ``{"dense": (epoch, bits),
    "pruned": (epoch, bits)}``. Chapter 05."""
    run = _run(run)
    return {name: max(((s["epoch"], s["entropy"]) for s in run[name]), key=lambda e: e[1])
            for name in ("dense", "pruned")}


def keys_dominance(runs: list) -> dict:
    """§4.4's "for each class", counted: over the runs (any seeds of one dataset), how many (class, seed) pairs have
    fewer keys under REM than under Q, as many, and more: ``{"fewer", "equal", "more", "pairs"}``. Chapter 05."""
    counts = {"fewer": 0, "equal": 0, "more": 0}
    for run in runs:
        run = _run(run)
        q, rem = run["Q"].get("keys_per_class"), run["REM"].get("keys_per_class")
        if not q or not rem:
            raise ValueError("each run's Q and REM must hold 'keys_per_class'")
        for label in sorted(set(q) & set(rem)):
            which = "fewer" if rem[label] < q[label] else "equal" if rem[label] == q[label] else "more"
            counts[which] += 1
    return {**counts, "pairs": sum(counts.values())}
