"""Chapter 05's verdict table: the REM paper's claims that the shipped runs can test, and their verdicts.

Taught in chapter 05. :data:`REM_CLAIMS` quotes each claim with its source and setting, for MNIST, Fashion-MNIST and
expanded MNIST tested on affNIST; :func:`rem_claim_records` turns the shipped runs (or runs trained now,
:class:`~capsule_lab.studies.rem.RemRun`) into one record per model and seed; :func:`rem_verdicts` tests every claim
on them (:func:`capsule_lab.evidence.claims.claim_verdicts`, by the rules of :mod:`capsule_lab.evidence.rules`:
paired t over seeds, Holm within each family, not testable where the measure cannot tell the networks apart).
"""

from __future__ import annotations

import math

from ..evidence.claims import Claim, claim_verdicts
from ..evidence.rules import Premise
from .rem import RemRun, entropy_at_accuracy, run_record

_DATASET = {"mnist": ("MNIST", "Sabour's CapsNet without its decoder on MNIST, 85.5 % sparse: 9.53 → 4.16 bits, "
                               "99.56 → 99.56 % (Table 9)"),
            "fashion": ("Fashion-MNIST", "DR-CapsNet on Fashion-MNIST, 80.7 % sparse: 8.64 → 4.80 bits, 92.46 → "
                                         "92.62 %, 665 → 126 keys per class (Tables 1 and 11)"),
            "expanded": ("expanded MNIST", "DR-CapsNet trained on expanded MNIST until convergence, tested on affNIST, "
                                           "87.3 % sparse: 83.14 → 85.23 %, 8.45 → 5.93 bits (Table 2)")}
_REM_DIFFERS = ("nothing but the pruning: the same initialisation, data, schedule and epochs; Q's model is the dense "
                "epoch with the lowest validation loss, REM's the last epoch (App. B.2), so Q may be an earlier epoch; "
                "both quantised at inference with K = 11; our pruning is iterative global magnitude pruning, not the "
                "code's LOBSTER")
_KEYS_SETTING = {"mnist": "MNIST, per class (Figure 9: a picture, no numbers)",
                 "fashion": "Fashion-MNIST: 665 → 126 keys per class (Table 11, median over seeds)"}
_SALIENCY_SETTING = ("Eff-ConvCapsNets on Dogs vs. Cats and Imagenette, 128 × 128 photographs, shown on a few images "
                     "(Figure 5); no measure is given")


#: The premise of the saliency claim of §4.3.4, images with something besides the object for REM to dismiss.
CLUTTER = Premise("cluttered_images", "dismissing extraneous background noise or irrelevant objects",
                  "Renzulli et al. 2024 (REM), §4.3.4")

#: The sizes the paper states (bits of entropy, Tables 9, 1 and 2; the log of the keys' ratio, Table 11; points of
#: affNIST accuracy, Table 2), per dataset.
_SIZES = {"mnist": {"entropy": 9.53 - 4.16},
          "fashion": {"entropy": 8.64 - 4.80, "keys": math.log(665 / 126)},
          "expanded": {"affine_entropy": 8.45 - 5.93, "affine_accuracy": 0.8523 - 0.8314}}


def _rem_claims(dataset: str) -> tuple:
    name, setting = _DATASET[dataset]
    q, rem, sizes = f"Q, {dataset}", f"REM, {dataset}", _SIZES[dataset]
    if dataset == "expanded":
        return (
            Claim("Renzulli et al. 2024 (REM)", "05", "§4.3.2, Table 2",
                  "a well-trained CapsNet+REM can be robust to affine transformations and have low entropy", True,
                  setting, "trained on expanded MNIST: is REM more accurate than Q on affine-transformed digits?",
                  rem, q, "affine_accuracy", "better",
                  _REM_DIFFERS + "; chapter 06's affine test digits, not affNIST", size=sizes["affine_accuracy"]),
            Claim("Renzulli et al. 2024 (REM)", "05", "§4.3.2, Table 2 (\"on affNIST test set\")",
                  "a well-trained CapsNet+REM can be robust to affine transformations and have low entropy", True,
                  setting, "trained on expanded MNIST: is REM's entropy on the affine test digits lower than Q's?",
                  rem, q, "affine_entropy", "better",
                  _REM_DIFFERS + "; chapter 06's affine test digits, not affNIST", size=sizes["affine_entropy"]),
        )
    return (
        Claim("Renzulli et al. 2024 (REM)", "05", "Abstract; Tables 1 and 9",
              "significantly reducing the generation of intra-class parse trees", True, setting,
              f"{name}: is REM's parse-tree entropy lower than Q's?", rem, q, "entropy", "better", _REM_DIFFERS,
              size=sizes["entropy"]),
        Claim("Renzulli et al. 2024 (REM)", "05", "Abstract; Tables 1 and 9",
              "with fewer parameters and negligible performance loss", True, setting,
              f"{name}: is REM no less accurate than Q (by the margin)?", rem, q, "accuracy", "not worse",
              _REM_DIFFERS),
        Claim("Renzulli et al. 2024 (REM)", "05", "§4.4, Figure 9",
              "the number of keys in the dictionary for DR-CapsNet+REM is lower than the one for DR-CapsNet+Q for "
              "each class", True, _KEYS_SETTING[dataset],
              f"{name}: does REM have fewer parse trees (keys) per class than Q?", rem, q, "keys", "better",
              _REM_DIFFERS + "; the mean over classes (each class is counted apart beside the table)",
              size=sizes.get("keys")),
        Claim("Renzulli et al. 2024 (REM)", "05", "§4.3.4, Figure 5",
              "When REM is applied (second rows), we can see that the network predominantly concentrates on the "
              "object of interest", True, _SALIENCY_SETTING,
              f"{name}: is a larger share of REM's eq. 16 saliency on the object's pixels than of Q's?", rem, q,
              "on_object", "better", _REM_DIFFERS + "; the object is the pixels brighter than 0.5",
              premises=(CLUTTER,)),
        Claim("course", "05", "our question (the paper compares Q and REM at the end of training, where their "
              "accuracies are nearly equal)", "REM's entropy is lower than Q's at the same accuracy", False, "-",
              f"{name}: at REM's accuracy, is REM's entropy lower than Q's read off Q's training curve?", rem,
              f"Q at REM's accuracy, {dataset}", "entropy", "better",
              "Q is read between two of its epochs (linear interpolation), so it is less trained than Q's model; "
              "REM is pruned", origin="course"),
        Claim("course", "05", "our question (App. B.2 picks Q at its lowest validation loss and REM at the last "
              "epoch, so the two are different epochs)", "REM's entropy is lower than Q's at the same epoch", False,
              "-", f"{name}: at REM's epoch (the last), is REM's entropy lower than Q's?", rem,
              f"Q at REM's epoch, {dataset}", "entropy", "better",
              "nothing but the pruning, at the same (last) epoch; Q's model may be an earlier one", origin="course"),
    )


#: Chapter 05's verdict table, per dataset (MNIST, Fashion-MNIST, then expanded MNIST with its affine test digits):
#: the REM paper's claims and the course's question at equal accuracy, tested on :func:`rem_claim_records` by
#: :func:`rem_verdicts`.
REM_CLAIMS = _rem_claims("mnist") + _rem_claims("fashion") + _rem_claims("expanded")

#: What chapter 05's setting has, for the premises of :data:`REM_CLAIMS`: digits and clothes on a blank background.
REM_SETTING = {"cluttered_images": (False, "28 × 28 digits and clothes on a blank background: no background noise or "
                                           "irrelevant object to dismiss")}


def _run_records(runs, levels: int) -> list:
    if isinstance(runs, dict) and runs and all(isinstance(r, RemRun) for r in runs.values()):
        return [run_record(r, levels) for r in runs.values()]
    if isinstance(runs, list) and runs and all(isinstance(r, dict) and {"dense", "pruned", "Q", "REM"} <= set(r)
                                               for r in runs):
        return runs
    raise ValueError("runs must be a non-empty dict {(dataset, seed): RemRun} (from run_rem) or a list of run "
                     "records (run_record, shipped_rem_runs()['runs'])")


def rem_claim_records(runs, levels: int = 11) -> list:
    """``runs`` (``{(dataset, seed): RemRun}``, or a list of :func:`run_record` s such as a shipped run's) as records
    for :func:`capsule_lab.evidence.claims.claim_verdicts`, per dataset and seed: ``"Q, <dataset>"`` and ``"REM,
    <dataset>"`` (the quantised test ``accuracy``, ``entropy`` and its ``entropy_ceiling``, mean ``keys`` per class,
    ``correct`` per test image, the run's ``train_accuracy`` per epoch, and whatever :func:`model_extras` measured:
    ``on_object`` with its null ``on_object_null`` (the shuffled-pair maps' share), ``affine_accuracy`` with
    ``affine_correct``) and ``"Q at REM's accuracy, <dataset>"``
    (:func:`entropy_at_accuracy` on Q's epochs; its entropy None, and the record ``"untestable"``, for a seed where Q
    never had REM's accuracy). Chapter 05."""
    records = []
    for run in _run_records(runs, levels):
        dataset, seed = run["dataset"], run["seed"]
        curves = {"Q": [s["train_accuracy"] for s in run["dense"]],
                  "REM": [s["train_accuracy"] for s in run["pruned"]]}
        for name in ("Q", "REM"):
            model = run[name]
            record = {"router": f"{name}, {dataset}", "seed": seed, "accuracy": model["quantized_accuracy"],
                      "entropy": model["entropy"], "entropy_ceiling": model["entropy_ceiling"], "keys": model["keys"],
                      "correct": model["correct"], "train_accuracy": curves[name]}
            record.update({k: model[k] for k in ("on_object", "affine_accuracy", "affine_correct", "affine_entropy",
                                                 "affine_entropy_ceiling") if k in model})
            if "on_object_shuffled" in model:           # the saliency measure's null: maps of other images
                record["on_object_null"] = model["on_object_shuffled"]
            records.append(record)
        rem_accuracy = run["REM"]["quantized_accuracy"]
        matched = {"router": f"Q at REM's accuracy, {dataset}", "seed": seed, "accuracy": rem_accuracy,
                   "entropy_ceiling": run["Q"]["entropy_ceiling"], "train_accuracy": curves["Q"]}
        try:
            matched["entropy"] = entropy_at_accuracy([(s["quantized_accuracy"], s["entropy"]) for s in run["dense"]],
                                                     rem_accuracy)
        except ValueError as error:
            matched.update(entropy=None, untestable=f"seed {seed}: Q never had REM's accuracy ({error})")
        records.append(matched)
        last = run["dense"][-1]                         # Q's network at REM's epoch: the last dense one
        records.append({"router": f"Q at REM's epoch, {dataset}", "seed": seed, "accuracy": last["quantized_accuracy"],
                        "entropy": last["entropy"], "entropy_ceiling": last["entropy_ceiling"],
                        "train_accuracy": curves["Q"]})
    return records


def rem_verdicts(runs, levels: int = 11, claims=None, alpha: float = 0.05) -> list:
    """Chapter 05's verdict table: the claims of :data:`REM_CLAIMS` that the records of ``runs`` can answer (their
    datasets, and measures they hold), or ``claims``, tested on :func:`rem_claim_records` by
    :func:`capsule_lab.evidence.claims.claim_verdicts` — paired t over seeds, Holm within each family, *not testable*
    with one seed, for a collapsed or unconverged network, or where neither network clears the measure's null (the
    entropy's ceiling, the images per class, the shuffled-pair maps). Chapter 05."""
    records = rem_claim_records(runs, levels)
    if claims is None:
        held = {}
        for r in records:
            held.setdefault(r["router"], set()).update(k for k, v in r.items() if v is not None)
        claims = tuple(c for c in REM_CLAIMS if c.a in held and c.b in held
                       and c.measure in held[c.a] and c.measure in held[c.b])
    claims = tuple(claims)
    setting = REM_SETTING if any(c.premises for c in claims) else None
    return claim_verdicts(records, claims, alpha, setting=setting)


# ---------------------------------------------------------------- plain data for chapter 05's figures and widget
