"""What each paper claims about routing, as the paper states it, and the bench's test of it. Chapter 08.

:data:`CLAIMS` is chapter 08's verdict table: every paper's claim the routing bench can test, and the course's own
questions, each a :class:`~capsule_lab.evidence.claims.Claim` (the paper's claim quoted with its source and setting, our
question, and what differs besides the routing). :func:`claim_verdicts` tests them on the bench's records
(:func:`~capsule_lab.studies.bench.runner.run_router_bench`), with what the bench's setting has
(:func:`bench_setting`, for the claims' premises) and the interleaved timing (:mod:`capsule_lab.studies.bench.timing`),
by the rules of :mod:`capsule_lab.evidence.rules`: a paired t test over seeds, Holm within each family (the papers'
claims, the course's questions), and *not testable* where a claim cannot be tested here (a premise absent, a measure
at its null, a router collapsed or not converged, a time not taken by the timing rule).
"""

from __future__ import annotations

import math

from ...evidence import claims as _claims
from ...evidence.claims import Claim
from ...evidence.rules import Premise
from ...measures.parse_trees import entropy_ceiling
from ..depth import DEAD_CAPSULES
from .entries import bench_data
from .runner import shipped_longer_run, verdict_records
from .timing import shipped_timing

__all__ = ["TRANSLATED_TRAINING", "CLAIMS", "bench_setting", "claim_verdicts", "longer_run_verdicts"]

#: Jeong et al.'s affine claim rests on training with translated digits (expanded MNIST), testing on affNIST.
TRANSLATED_TRAINING = Premise("translated_training", "we trained 60,000 images of the 40×40 expanded MNIST, and tested "
                              "10,000 images of the affNIST", "Jeong et al. 2019, §5.2")

_SABOUR_SETTING = ("Sabour's CapsNet (1,152 primary capsules), all of MNIST with 2-pixel shifts, no decoder for these "
                   "rows")

#: The table, in chapter order. ``differs`` names everything besides the routing that differs between a and b.
CLAIMS = (
    Claim("Sabour et al. 2017", "02", "Table 1 (rows without reconstruction)",
          "test error 0.34 ± 0.032 % with 1 routing iteration and 0.35 ± 0.036 % with 3", False, _SABOUR_SETTING,
          "is r = 3 as accurate as r = 1 (within the margin)?", "dynamic r=3", "dynamic r=1", "accuracy",
          "equivalent", "nothing: the same network, 2 more iterations"),
    Claim("course", "02", "our question (Sabour et al. use r = 3 without testing it against r = 1 in the text)",
          "more routing iterations make a more accurate network", False, "-",
          "is r = 3 more accurate than r = 1?", "dynamic r=3", "dynamic r=1", "accuracy", "better",
          "nothing: the same network, 2 more iterations", origin="course"),
    Claim("Gu & Tresp 2020", "03", "Abstract",
          "the routing procedure contributes neither to generalization ability nor to the affine robustness of the "
          "CapsNets", True, "CapsNet with its decoder, 100 epochs on MNIST, tested on affNIST",
          "is uniform routing no less accurate than r = 3 (by the margin)?", "uniform", "dynamic r=3", "accuracy",
          "not worse", "nothing: the same votes, couplings fixed at 1/J"),
    Claim("Gu & Tresp 2020", "03", "Abstract",
          "... nor to the affine robustness of the CapsNets", True,
          "CapsNet with its decoder, 100 epochs on MNIST, tested on affNIST",
          "is uniform routing no less accurate than r = 3 on the affine test?", "uniform", "dynamic r=3",
          "affine_accuracy", "not worse", "nothing: the same votes, couplings fixed at 1/J; our affine set, "
          "not affNIST"),
    Claim("course", "03", "our question, from the supplement's Appx. A (unrolling eq. 3 gives ∂c/∂û ≈ 0; with "
          "polarised couplings, eqs. 4–5 leave a constant that \"can be absorbed into the learning rate\")",
          "detaching the couplings in the backward pass changes the gradient only by a constant", False,
          "an argument about the gradient, not an experiment",
          "is detached routing no less accurate than r = 3?", "detached", "dynamic r=3", "accuracy", "not worse",
          "nothing: the same forward pass, the backward pass without the couplings' gradient", origin="course"),
    Claim("Mitterreiter et al. 2023", "04", "Results, beside Table 2 (Tables 5 and 14 in their appendix)",
          "baseline models trained with uniform routing perform better than models trained with RBA", True,
          "five capsule layers of 16/10 capsules, where dead capsules starve routing-by-agreement",
          "is uniform routing more accurate than r = 3 with one routing layer?", "uniform", "dynamic r=3",
          "accuracy", "better", "their RBA has learned routing priors; ours has one routing layer, where the paper's "
          "explanation (dead capsules in deep layers) does not apply", premises=(DEAD_CAPSULES,)),
    Claim("Renzulli et al. 2024 (REM)", "05", "Abstract",
          "significantly reducing the generation of intra-class parse trees", True,
          "DR-CapsNet pruned to 85.5 % sparsity while it trains; entropy 9.53 → 4.16 bits (Table 9)",
          "does pruning lower the parse-tree entropy of r = 3?", "rem-pruned", "dynamic r=3", "entropy", "better",
          "nothing but the pruning: 75 % sparse after 2 rounds here", size=9.53 - 4.16),
    Claim("Renzulli et al. 2024 (REM)", "05", "Abstract",
          "with fewer parameters and negligible performance loss", True,
          "99.57 → 99.56 % on MNIST (Table 9)",
          "is the pruned network no less accurate than r = 3?", "rem-pruned", "dynamic r=3", "accuracy",
          "not worse", "nothing but the pruning: 75 % sparse after 2 rounds here"),
    Claim("Jeong et al. 2019", "06", "§5.2, Table 2",
          "the L-CapsNet learns an equivariant representation that is more robust to pose variations on MNIST "
          "digits than the CapsNet", True, "trained on 40×40 expanded MNIST, tested on affNIST: 12.2–13.2 % "
          "error against the CapsNet's 21 %",
          "is the ladder more accurate than r = 3 on the affine test?", "ladder", "dynamic r=3",
          "affine_accuracy", "better", "the ladder has its own loss and 5.3× the parameters; trained on centred "
          "28×28 digits, not expanded ones", premises=(TRANSLATED_TRAINING,), size=0.210 - 0.132),
    Claim("Jeong et al. 2019", "06", "§5.2, Table 2",
          "the L-CapsNet resulted in higher test errors on MNIST classification", True,
          "0.50–0.80 % error against the CapsNet's 0.25 %",
          "is r = 3 more accurate than the ladder on clean digits?", "dynamic r=3", "ladder", "accuracy",
          "better", "the ladder has its own loss and 5.3× the parameters", size=0.0050 - 0.0025),
    Claim("Jeong et al. 2019", "06", "§5.2, Table 3",
          "the L-CapsNet significantly reduces the computation time", True,
          "0.20–0.30 s per training iteration against 1.73–2.66 s (r = 3–5), Sabour's 1,152 capsules",
          "is a ladder training step faster than an r = 3 step?", "ladder", "dynamic r=3", "train_step_ms",
          "better", "144 capsules, not 1,152: routing is a small part of our step; the ladder has its own layers; "
          "timed interleaved on one batch of the longer run's settings (scripts/router_timing.py)",
          size=math.log(1.732 / 0.2953)),
    Claim("course", "06", "our question: the control for the ladder's parameters",
          "the ladder's robustness comes from its layers, not from its 5.3× parameters", False, "-",
          "is the ladder with the CapsNet's parameter count more accurate than r = 3 on the affine test?",
          "ladder matched", "dynamic r=3", "affine_accuracy", "better",
          "the ladder's own loss; its hidden widths cut to (6, 3) so its parameters match (362k against 355k)",
          origin="course", premises=(TRANSLATED_TRAINING,)),
    Claim("Faria 2022", "07", "Table 3",
          "MNIST error 0.53 % for connectionist and 1.0 % for similarity routing", False,
          "Faria's convolutional capsule network with 4×4 pose matrices",
          "is connectionist routing more accurate than similarity routing?", "connectionist", "similarity",
          "accuracy", "better", "nothing: the same normalised votes, T = 3 updates, sigmoid activations",
          size=0.0100 - 0.0053),
    Claim("course", "07", "our question (Faria compares with EM routing, not with dynamic routing: §6)",
          "a learned router does as well as dynamic routing on the same votes", False, "-",
          "is connectionist routing no less accurate than r = 3 on Faria's normalised votes?", "connectionist",
          "dynamic r=3 normed", "accuracy", "not worse",
          "the learned router's sigmoid activations and T = 3 updates against 2; its 26k parameters",
          origin="course"),
    Claim("course", "07", "our question (Faria compares with EM routing, not with dynamic routing: §6)",
          "a learned router does as well as dynamic routing on the same votes", False, "-",
          "is similarity routing no less accurate than r = 3 on Faria's normalised votes?", "similarity",
          "dynamic r=3 normed", "accuracy", "not worse",
          "the learned router's sigmoid activations and T = 3 updates against 2", origin="course"),
    Claim("course", "08", "our question (Efficient-CapsNet reports 0.26 % MNIST error with its own network)",
          "non-iterative self-attention routing is as accurate as dynamic routing", False, "-",
          "is self-attention routing no less accurate than r = 3?", "self-attention", "dynamic r=3", "accuracy",
          "not worse", "self-attention uses the exponential squash and 1,440 learned biases", origin="course"),
)


def bench_setting(records: list) -> dict:
    """What the bench's setting has, for the premises of :data:`CLAIMS` (``{key: (holds, in words)}``): dead capsules
    (read from the records' ``dead_primary``; the backbone has no hidden capsule layer) and training on translated
    digits (never: the bench trains on centred 28×28 digits). Chapter 08."""
    dead = [r["dead_primary"] for r in records if r.get("dead_primary") is not None]
    if not dead:
        raise ValueError("the records hold no dead_primary: the bench's setting cannot say whether capsules die")
    share = max(dead)
    return {"dead_capsules": (share > 0, f"one routing layer and no hidden capsule layer, and at most "
                                         f"{100 * share:.1f} % of the primary capsules dead in any router and seed"),
            "translated_training": (False, "the bench trains on centred 28×28 digits, without translations")}


def claim_verdicts(records: list, claims=CLAIMS, alpha: float = 0.05, ceiling: float | None = None,
                   timing: list | None = None) -> list:
    """Test chapter 08's :data:`CLAIMS` (or ``claims``) on a bench's ``records``
    (:func:`~capsule_lab.studies.bench.runner.run_router_bench`), with the bench's setting (:func:`bench_setting`) and,
    for the claims about time, ``timing`` (:func:`~capsule_lab.studies.bench.timing.time_routers`' records; without
    them the training records' times, which the timing rule does not accept):
    :func:`capsule_lab.evidence.claims.claim_verdicts`. Chapter 08."""
    claims = tuple(claims)
    setting = bench_setting(records) if any(c.premises for c in claims) else None
    return _claims.claim_verdicts(records + list(timing or []), claims, alpha, ceiling, setting=setting)


def longer_run_verdicts(claims=CLAIMS, alpha: float = 0.05) -> list:
    """Chapter 08's verdict table on the shipped longer run (:func:`~capsule_lab.studies.bench.runner.verdict_records`)
    and the shipped interleaved timing (:func:`~capsule_lab.studies.bench.timing.shipped_timing`), the entropy's
    ceiling read from the bench's test labels: what chapters 06 and 07 print beside their own tables. Chapters 06–08."""
    settings, _, _ = shipped_longer_run()
    return claim_verdicts(verdict_records(), claims, alpha, entropy_ceiling(bench_data(settings)[1].tensors[1]),
                          shipped_timing()["records"])
