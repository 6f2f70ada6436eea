"""Chapter 04's experiment: train deep CapsNets of several depths and routings, and measure their capsules.

Taught in chapter 04 (``chapters/04_dead_capsules.ipynb``), after Mitterreiter et al. (2023), §4: one
:class:`~capsule_lab.models.DeepCapsNet` per (depth, routing, seed) is trained with
:func:`capsule_lab.training.fit` under a :class:`~capsule_lab.studies.depth.DepthStudySettings`, then its capsules
are collected on the test digits (:func:`capsule_lab.measures.capsule_stats.collect_capsules`) and summarised per layer
(:func:`capsule_lab.measures.capsule_stats.layer_table`). With ``track=True`` a
:class:`~capsule_lab.measures.capsule_stats.GradientTracker` records every capsule's length and gradient norms at every
training step (Theorem 2 seen during training).

What makes capsules die at a scale a CPU can train is searched by ``scripts/dead_capsule_search.py``: it calls
:func:`train_depth_run` with keyword overrides (``optimizer``, ``momentum``, ``config`` changes such as the
squash, W's and the priors' initial spread) on top of a settings object, and records every run in
``capsule_lab/results/dead_capsule_search.csv``; its ``ship`` command trains the chapter's experiment under the
setting that kills capsules, which is too long for the chapter to train, and writes
``capsule_lab/results/dead_capsule_runs.json`` with its provenance. Both files are installed with the package
(so the chapter finds them in Colab too) and read with :func:`search_results` and :func:`shipped_runs`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from typing import NamedTuple, Optional

import torch
from torch.utils.data import Dataset

from .._checks import check_positive_int
from ..data.sources import load_dataset
from ..data.transforms import affine_test_set
from ..evidence.claims import Claim, claim_verdicts
from ..evidence.rules import Premise
from ..measures.capsule_stats import CapsuleRecord, GradientTracker, collect_capsules, layer_table
from ..models import DeepCapsNet, DeepCapsNetConfig
from ..routing import RouterSpec, router_kind
from ..training import History, Schedule, fit
from .common import RESULTS, rerun, shipped_results

__all__ = ["ROUTINGS", "DepthRun", "depth_study_data", "routing_spec", "depth_network", "train_depth_run", "hidden_dead_rate",
           "search_results", "shipped_runs", "run_name", "DEAD_CAPSULES", "DEPTH_CLAIMS", "depth_claim_records",
           "depth_setting", "depth_verdicts",
           "DepthStudySettings", "SETTINGS"]


@dataclass(frozen=True)
class DepthStudySettings:
    """Chapter 04's experiment: DeepCapsNets over depths × routings × seeds, their capsules measured.

    The full entry is Mitterreiter et al.'s setting for their Tables 1–2: 10 models, affNIST-style training
    data, depths up to 5. ``threads``: CPU threads for these tiny networks (one is faster than two). The schedule's
    optimiser is Adam or SGD (chapter 04 compares them on dying capsules).
    """

    config: DeepCapsNetConfig
    train_size: int | None      # None: the whole training set
    test_size: int
    schedule: Schedule
    seeds: tuple
    depths: tuple
    affine_train: bool
    threads: int = 1


#: The routings the study compares, Mitterreiter et al.'s routing by agreement (the settings' router) and uniform.
ROUTINGS = ("dynamic", "uniform")
#: The paper's name of a routing where it has one of its own (Mitterreiter et al.'s "RBA"); else its kind's name.
LABELS = {"dynamic": "RBA"}
#: The routings whose every hidden layer's dead rate is a record of its own (the paper's per-layer claims read RBA's).
LAYER_RECORDS = ("dynamic",)


class DepthRun(NamedTuple):
    """One trained network of the study: the model, its capsules on the test digits, their per-layer table
    (:func:`~capsule_lab.measures.capsule_stats.layer_table`), if tracked the per-step history of
    :class:`~capsule_lab.measures.capsule_stats.GradientTracker` (else None), and the training's per-epoch
    :class:`~capsule_lab.training.History` (its training accuracy is what the convergence criterion reads)."""

    model: DeepCapsNet
    record: CapsuleRecord
    table: list
    gradients: Optional[dict]
    history: Optional[History] = None


def _check_settings(settings) -> DepthStudySettings:
    if not isinstance(settings, DepthStudySettings):
        raise ValueError(f"settings must be a DepthStudySettings (capsule_lab.course.profiles.chapter_settings('04')), "
                         f"got {type(settings).__name__}")
    return settings


def depth_study_data(settings: DepthStudySettings, source: str = "offline") -> tuple[Dataset, Dataset]:
    """The study's training and test digits: the first ``train_size`` / ``test_size`` of MNIST from ``source``
    (see :func:`capsule_lab.data.sources.load_mnist`), both moved by seeded affine transformations when
    ``settings.affine_train`` (the paper trains and tests on affNIST). Chapter 04.
    """
    _check_settings(settings)
    train = load_dataset("mnist", True, source, settings.train_size)
    test = load_dataset("mnist", False, source, settings.test_size)
    if settings.affine_train:
        train, test = affine_test_set(train, seed=1), affine_test_set(test, seed=2)
    return train, test


def routing_spec(settings: DepthStudySettings, routing: str, **changes) -> RouterSpec:
    """The router spec of ``routing``, a registered kind (the study's: :data:`ROUTINGS`): the settings' network's own
    spec when it is of that kind (``"dynamic"``: routing by agreement from learned priors), else the kind's default
    spec (``"uniform"``: c = 1/J). ``changes``: fields of the spec (``iterations``, ``prior_std``; the search's
    overrides); one the kind does not read, set to another value than the spec's, is an error. Chapter 04.
    """
    _check_settings(settings)
    kind = router_kind(routing)
    own = settings.config.router
    spec = own if routing == own.kind else RouterSpec(routing)
    read = set(kind.options) | ({"iterations"} if kind.iterations is not None else set())
    unread = sorted(k for k, v in changes.items() if k not in read and getattr(spec, k, v) != v)
    if unread:
        raise ValueError(f"{routing} routing has no {' or '.join(unread)} to change, got {changes!r}")
    return replace(spec, **{k: v for k, v in changes.items() if k in read})


def depth_network(settings: DepthStudySettings, depth: int, routing: str, config: Optional[dict] = None) -> DeepCapsNet:
    """The DeepCapsNet :func:`train_depth_run` trains: ``depth`` routing layers, ``routing`` ("dynamic" or "uniform"),
    ``config`` its changes to ``settings.config`` (see there), initialised from torch's random state as it is.
    Chapter 04 (its cells time one step of it before they train)."""
    _check_settings(settings)
    check_positive_int(depth, "depth")
    fields = (set(DeepCapsNetConfig.__dataclass_fields__) - {"routing_layers", "router"}) | {"iterations", "prior_std"}
    if config is not None and (not isinstance(config, dict) or not set(config) <= fields):
        raise ValueError(f"config must be a dict of DeepCapsNetConfig changes (some of {sorted(fields)}; depth and "
                         f"routing are arguments of their own), got {config!r}")
    config = dict(config or {})
    router = {k: config.pop(k) for k in ("iterations", "prior_std") if k in config}
    spec = routing_spec(settings, routing, **router)
    return DeepCapsNet(replace(settings.config, routing_layers=depth, router=spec, **config))


def train_depth_run(settings: DepthStudySettings, depth: int, routing: str, seed: int, train: Dataset,
                    test: Dataset, device="cpu", amp: bool = False, track: bool = False, *,
                    optimizer: Optional[str] = None, momentum: Optional[float] = None,
                    config: Optional[dict] = None, checkpoint=None) -> DepthRun:
    """Train one DeepCapsNet with ``depth`` routing layers and ``routing`` ("dynamic" or "uniform",
    :func:`routing_spec`) under ``settings``, seeded by ``seed`` (initial weights and shuffling), and measure its
    capsules on ``test``.

    ``track=True`` records per-step capsule lengths and gradient norms (costs a little time).
    ``checkpoint``: a file :func:`~capsule_lab.training.fit` saves the run to after every epoch and resumes it from (a
    finished run loads instead of training); not with ``track``, whose per-step record a checkpoint does not keep.

    Overrides, for the search of what makes capsules die (``scripts/dead_capsule_search.py``): ``optimizer``
    (``"adam"`` or ``"sgd"``) and ``momentum`` replace the schedule's; ``config`` is a dict of
    :class:`~capsule_lab.models.DeepCapsNetConfig` changes applied to ``settings.config`` (e.g.
    ``{"squash": "sabour", "init_std": 0.5}``; not ``routing_layers`` or ``router``, which are ``depth`` and
    ``routing``) and of the dynamic router's ``iterations`` and ``prior_std``. Chapter 04.
    """
    _check_settings(settings)
    if track and checkpoint is not None:
        raise ValueError("track and checkpoint exclude each other: a tracked run records every step's gradients, "
                         "which a checkpoint does not keep (a resumed run would lack the epochs before the cut)")
    schedule = replace(settings.schedule, **{k: v for k, v in (("optimizer", optimizer), ("momentum", momentum))
                                             if v is not None})
    torch.manual_seed(seed)
    net = depth_network(settings, depth, routing, config).to(device)
    options = dict(**schedule.fit_options(), seed=seed, progress=False, device=device, amp=amp, checkpoint=checkpoint)
    gradients = None
    if track:
        with GradientTracker(net) as tracker:
            history = fit(net, train, None, **options)
        gradients = tracker.history()
    else:
        history = fit(net, train, None, **options)
    record = collect_capsules(net, test, amp=amp)
    return DepthRun(net, record, layer_table(record), gradients, history)


def hidden_dead_rate(table: list) -> float:
    """The dead rate of a network's hidden layers 2 … L: their dead capsules over their capsules, from a
    :func:`~capsule_lab.measures.capsule_stats.layer_table` (a :class:`DepthRun`'s ``table``, or a shipped run's);
    0 for a network with no hidden layer. Chapter 04."""
    hidden = table[1:-1]                        # not the primary capsules, not the class capsules
    return sum(r["cds"] for r in hidden) / sum(r["capsules"] for r in hidden) if hidden else 0.0


def _number(text: str):
    """A CSV cell as a bool, int or float where it is one; the text otherwise ("" for an absent layer)."""
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def search_results(name: str = "dead_capsule_search.csv") -> list[dict]:
    """Every run of ``scripts/dead_capsule_search.py``, one dict per CSV row (settings, depth, seed, accuracy,
    per-layer ``cdr_l``/``cds_l``/``cnm_l``, seconds, torch version, machine), numbers as numbers. Chapter 04."""
    with (RESULTS / name).open(newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def shipped_runs(name: str = "dead_capsule_runs.json") -> dict:
    """The experiment ``scripts/dead_capsule_search.py ship`` trained for chapter 04: ``provenance`` (command,
    setting, seeds, seconds, torch, machine, date), ``runs`` (per depth × routing × seed: accuracy and the
    per-layer table) and ``capsule_history`` (per training step, a dying and a living capsule's mean length,
    ‖∂L/∂u‖ and ‖∂L/∂W‖). Chapter 04."""
    return shipped_results(name)


def run_name(routing: str, depth: int, layer: Optional[int] = None) -> str:
    """The name a verdict table gives a shipped network (or one of its layers): ``"RBA, 4 routing layers"``,
    ``"uniform, 4 routing layers"``, ``"RBA, 4 routing layers, layer 2"``. Chapter 04."""
    router_kind(routing)
    name = f"{LABELS.get(routing, routing)}, {check_positive_int(depth, 'depth')} routing layers"
    return name if layer is None else f"{name}, layer {check_positive_int(layer, 'layer')}"


#: The premise of Mitterreiter et al.'s explanation of why uniform routing beats RBA, dead capsules (chapters 04 and 08).
DEAD_CAPSULES = Premise("dead_capsules", "dead capsules limit the capacity of a CapsNet as their respective parameters "
                        "are not in use. This explains why baseline models trained with uniform routing perform "
                        "better than models trained with RBA", "Mitterreiter et al. 2023, Results, beside Table 2")

_PAPER_NETWORK = "five capsule layers of 16 capsules (10 class capsules) trained on AffNIST, RBA with 3 iterations"
_SAME = "the same network, data, budget and seeds"

_DEPTH_4_CLAIMS = (
    Claim("Mitterreiter et al. 2023", "04", "Results, beside Table 2 (Tables 5 and 14 in their appendix)",
          "baseline models trained with uniform routing perform better than models trained with RBA", True,
          _PAPER_NETWORK, "with 4 routing layers, is uniform routing more accurate than RBA?",
          run_name("uniform", 4), run_name("dynamic", 4), "accuracy", "better",
          f"nothing but the routing: {_SAME}; our RBA runs 5 iterations (section 4's setting) and is trained on "
          "8,000 MNIST digits", premises=(DEAD_CAPSULES,)),
    Claim("Mitterreiter et al. 2023", "04", "Results, Table 2 (dead rate 7 %, 56 %, 63 % in layers 2–4)",
          "we observe that the number of dead capsules cdr increases with the depth of the model", True,
          _PAPER_NETWORK, "with 4 routing layers, are fewer capsules dead in layer 2 than in layer 4?",
          run_name("dynamic", 4, 2), run_name("dynamic", 4, 4), "dead_rate", "better",
          "the layer alone: two layers of the same networks; ours trained 20 epochs on 8,000 MNIST digits with 5 "
          "routing iterations, the paper's trained on AffNIST to 99.2 % accuracy with 3", size=0.63 - 0.07),
    Claim("Mitterreiter et al. 2023", "04", "Results, beside Table 2",
          "the depth of a CapsNet is limited as the number of dead capsules rises with the number of layers", True,
          "121 architectures of several depths (their appendix)",
          "are fewer hidden capsules dead with 4 routing layers than with 6?", run_name("dynamic", 4),
          run_name("dynamic", 6), "dead_rate", "better",
          "the depth alone: 2 more routing layers of 16 capsules, the same data, budget and seeds; 5 routing "
          "iterations, 8,000 MNIST digits and 20 epochs, against the paper's 3 iterations trained on AffNIST to 99.2 %"),
    Claim("course", "04", "our question (the paper's explanation: dead capsules leave RBA's parameters unused, "
          "\"uniform routing, which uses all parameters\")",
          "uniform routing kills fewer capsules than RBA", False, "-",
          "with 4 routing layers, are fewer hidden capsules dead under uniform routing than under RBA?",
          run_name("uniform", 4), run_name("dynamic", 4), "dead_rate", "better",
          f"nothing but the routing: {_SAME}; 5 routing iterations, 8,000 MNIST digits and 20 epochs",
          origin="course"),
)
#: The 6-layer RBA networks: a 4-layer claim that names them already has no 6-layer twin.
_RBA_6 = run_name("dynamic", 6)

#: Chapter 04's verdict table: Mitterreiter et al.'s claims (Results, beside their Table 2) that the shipped runs
#: (section 4's setting that kills capsules) can test, each tested on :func:`depth_claim_records` by
#: :func:`depth_verdicts`. The last three ask the 4-layer questions again with 6 routing layers: they were added
#: after the longer run, whose RBA networks with 4 routing layers had not converged after 20 epochs (3 of 5 seeds)
#: where those with 6 had, and each says so.
DEPTH_CLAIMS = _DEPTH_4_CLAIMS + tuple(
    replace(claim, question=claim.question.replace("with 4 routing layers", "with 6 routing layers") +
            " (asked after the 4-layer networks did not converge)",
            a=claim.a.replace(", 4 routing layers", ", 6 routing layers"),
            b=claim.b.replace(", 4 routing layers", ", 6 routing layers"))
    for claim in _DEPTH_4_CLAIMS if _RBA_6 not in (claim.a, claim.b))


def depth_claim_records(shipped: Optional[dict] = None) -> list:
    """The shipped runs (:func:`shipped_runs`) as records for :func:`capsule_lab.evidence.claims.claim_verdicts`: one
    per network and seed (``router`` = :func:`run_name`, ``accuracy``, ``dead_rate`` of the hidden layers
    (:func:`hidden_dead_rate`), ``train_accuracy`` per epoch, ``correct`` per test image), and one per RBA network,
    seed and layer (``dead_rate`` = that layer's cdr, the network's accuracy and training accuracy). Chapter 04."""
    shipped = shipped_runs() if shipped is None else shipped
    if not isinstance(shipped, dict) or not isinstance(shipped.get("runs"), list):
        raise ValueError("shipped must be the shipped runs (shipped_runs()), with their 'runs'")
    records = []
    for run in shipped["runs"]:
        if "train_accuracy" not in run:
            raise ValueError(f"the run {run_name(run['routing'], run['depth'])}, seed {run['seed']} has no training "
                             f"accuracy: {rerun('dead_capsule_search.py ship')}")
        common = {"seed": run["seed"], "accuracy": run["accuracy"], "train_accuracy": run["train_accuracy"]}
        records.append({"router": run_name(run["routing"], run["depth"]), **common,
                        "dead_rate": hidden_dead_rate(run["table"]),
                        **({"correct": run["correct"]} if "correct" in run else {})})
        if run["routing"] in LAYER_RECORDS:
            records += [{"router": run_name("dynamic", run["depth"], row["layer"]), **common, "dead_rate": row["cdr"]}
                        for row in run["table"]]
    return records


def depth_setting(records: list) -> dict:
    """What chapter 04's setting has, for the premises of :data:`DEPTH_CLAIMS` (``{key: (holds, in words)}``): dead
    capsules in the RBA networks' hidden layers, read from the records (:func:`depth_claim_records`). Chapter 04."""
    rates = [r["dead_rate"] for r in records if r["router"].startswith("RBA") and ", layer " not in r["router"]]
    if not rates:
        raise ValueError("the records hold no RBA network: chapter 04's setting cannot say whether capsules die")
    dying = sum(rate > 0 for rate in rates)
    return {"dead_capsules": (dying > 0, f"{dying} of {len(rates)} RBA networks have dead hidden capsules (up to "
                                         f"{100 * max(rates):.0f} % of them)")}


def depth_verdicts(shipped: Optional[dict] = None, claims=DEPTH_CLAIMS, alpha: float = 0.05) -> list:
    """Chapter 04's verdict table: :data:`DEPTH_CLAIMS` tested on the shipped runs (:func:`depth_claim_records`), with
    the setting they have (:func:`depth_setting`), by :func:`capsule_lab.evidence.claims.claim_verdicts` — the rules of
    :mod:`capsule_lab.evidence.rules`: not testable for a collapsed or unconverged network, paired t over seeds, Holm
    within each family. Chapter 04."""
    records = depth_claim_records(shipped)
    setting = depth_setting(records) if any(c.premises for c in claims) else None
    return claim_verdicts(records, claims, alpha, setting=setting)


#: Chapter 04's settings in each profile (``chapter_settings("04", profile)``).
#: Quick: one epoch on 3k digits per network, 2 seeds, depths 1-4 (chapter 04 explains what this can show).
SETTINGS = {
    "quick": DepthStudySettings(DeepCapsNetConfig.quick(), train_size=3000, test_size=1000,
                                schedule=Schedule(epochs=1, batch_size=64, lr=3e-3, lr_decay=0.95),
                                seeds=(0, 1), depths=(1, 2, 3, 4), affine_train=False),
    # GPU: the paper's network and data (affine augmentation, 10k test digits; 50k of the 60k training digits) with the
    # quick profile's seeds and depths, which the chapter's cells are laid out for, 2 epochs: within a Colab session
    # on a T4.
    "gpu": DepthStudySettings(DeepCapsNetConfig.paper(), train_size=50000, test_size=10000,
                              schedule=Schedule(epochs=2, batch_size=128, lr=1e-3, lr_decay=0.95),
                              seeds=(0, 1), depths=(1, 2, 3, 4), affine_train=True),
    "full": DepthStudySettings(DeepCapsNetConfig.paper(), train_size=None, test_size=10000,
                               schedule=Schedule(epochs=30, batch_size=128, lr=1e-3, lr_decay=0.95),
                               seeds=tuple(range(10)), depths=(1, 2, 3, 4, 5), affine_train=True),
}
