"""Chapter 07's experiment: one capsule network trained with dynamic, similarity and connectionist routing.

Taught in chapter 07 (``chapters/07_learned_routing.ipynb``), after Faria, §5. Under a
:class:`~capsule_lab.studies.learned_routing.LearnedRoutingSettings`, :func:`run_routing_study` trains, per dataset and
from one seed, the same network (the same initialisation of everything but the routers,
:func:`capsule_lab.studies.common.same_start`; the same data, epochs and optimiser) with each router. The network is
``settings.capsnet``: a
:class:`~capsule_lab.models.CapsNetConfig` (Sabour's CapsNet, one routing layer between the primary and the class
capsules: the quick profile) or a :class:`~capsule_lab.models.ConvCapsNetConfig` (the paper's Table 1 network, three
routing layers with 4×4 pose matrices, each with its own router of Table 2's sizes,
:func:`~capsule_lab.models.paper_routers`: the full profile). The routers (:func:`study_routers`):

- ``"dynamic"``: Sabour's routing (r = 3 iterations, couplings a softmax over the outputs j) on Sabour's votes W u;
- ``"similarity"``: :class:`~capsule_lab.routing.SimilarityRouter` (a mixture of ``settings.kernels`` Gaussian
  kernels, learned λ1, λ2, length scales and θ; couplings over the inputs i) on Faria's normalised votes;
- ``"connectionist"``: :class:`~capsule_lab.routing.ConnectionistRouter` (one LSTM cell of ``settings.lstm_hidden``
  units shared by every pair; Table 2's hidden layers) on Faria's normalised votes.

(In the paper's network every layer's votes are the normalised matrix products of eq. 1, whatever the router.)
Each run is measured once on the test set (:func:`measure_couplings`): accuracy, and how polarised the couplings
are along the axis each router normalises over (:func:`~capsule_lab.routing.coupling_polarisation`): their entropy
divided by its maximum (1 = uniform, 0 = every unit of coupling on one capsule) and the mean largest coupling.
:func:`build_model` gives a fresh network for each router (the chapter times one training step of each with
:func:`capsule_lab.measures.cost.training_step_seconds`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from torch.utils.data import Dataset

from ..data.sources import load_dataset
from ..evidence.claims import Claim, claim_verdicts
from ..models import PAPER_SIZES, CapsNetConfig, CapsuleNetwork, ConvCapsNetConfig, built_routers
from ..routing import RouterSpec, coupling_polarisation, router_kind
from ..training import History, Schedule, fit, outputs
from .common import same_start, shipped_results

__all__ = ["ROUTERS", "VOTES", "RouterRun", "routing_study_data", "study_router_spec", "study_routers", "build_model",
           "class_layer_inputs", "measure_couplings", "train_router", "run_routing_study", "shipped_routing_runs",
           "LEARNED_CLAIMS", "learned_claims", "learned_claim_records", "learned_verdicts", "LearnedRoutingSettings", "ROUTERS_07",
           "VOTES_07", "DYNAMIC_NORMALIZED", "with_normalized_dynamic", "SETTINGS"]


@dataclass(frozen=True)
class LearnedRoutingSettings:
    """Chapter 07's experiment: one capsule network trained with each router — dynamic, similarity and
    connectionist routing — on each dataset, with the same data, epochs and optimiser.

    ``capsnet`` is the network (no decoder). The full profile's is the paper's (Table 1,
    :class:`~capsule_lab.models.ConvCapsNetConfig`): three routing layers on 4×4 pose matrices, each with its own
    router of Table 2's sizes (Q = 4, 4, 10 kernels; LSTMs of 16 units with Table 2's hidden layers). The quick
    profile's is Sabour's slim CapsNet (a :class:`~capsule_lab.models.CapsNetConfig`): one routing layer, the
    primary to the class capsules, with the router sizes of the paper's class layer (``kernels`` Gaussian
    kernels; an LSTM of ``lstm_hidden`` units) — the paper's network trains too slowly on a CPU for a minute's
    budget. Adam from ``lr`` with an exponential decay of ``lr_decay`` per epoch (the paper: Adam 3·10⁻³,
    exponential decay; its rate is not given). ``iterations``: r = 3 for dynamic routing, T = 3 for the learned
    routers (the paper: "three iterations"). ``step_batches``: training steps timed per router. ``routers`` are
    registered kinds (:func:`~capsule_lab.routing.router_kinds`): any kind can join the study by its name. ``votes``:
    the votes each router is given where the network forms either (``{router: "plain" | "normalized"}``; a router not
    named gets the network's own); ``layer_sizes``: a paper's router sizes per routing layer, ``{option: (layer 0,
    layer 1, …)}`` (:data:`~capsule_lab.models.conv_capsnet.PAPER_SIZES`), applied where a router's kind reads the option
    (:meth:`~capsule_lab.routing.RouterSpec.per_layer`); empty: the settings' ``kernels`` and ``lstm_hidden``
    everywhere. ``arms``: routers of the study that are a registered kind under another name, ``{name: kind}``
    (:data:`DYNAMIC_NORMALIZED`: dynamic routing on Faria's normalised votes, beside dynamic routing on Sabour's,
    so that the learned routers can be compared with dynamic routing on the same votes).
    """

    capsnet: CapsNetConfig | ConvCapsNetConfig
    routers: tuple
    datasets: tuple
    train_size: int | None      # None: the whole training set
    test_size: int | None       # None: the whole test set
    schedule: Schedule
    iterations: int = 3
    kernels: int = 10
    lstm_hidden: int = 16
    step_batches: int = 3
    votes: dict = field(default_factory=dict)
    layer_sizes: dict = field(default_factory=dict)
    arms: dict = field(default_factory=dict)


#: Chapter 07's routers, in the order its study trains and shows them.
ROUTERS_07 = ("dynamic", "similarity", "connectionist")
#: The votes each of chapter 07's routers gets in Sabour's CapsNet, Sabour's W u for dynamic routing and Faria's
#: normalised votes (eq. 1) for the learned routers (in the paper's network every layer's votes are eq. 1's).
VOTES_07 = {"dynamic": "plain", "similarity": "normalized", "connectionist": "normalized"}


#: The name of the study's arm that runs dynamic routing (r = 3) on Faria's normalised votes, the votes the learned
#: routers get (``LearnedRoutingSettings.arms``), beside dynamic routing on Sabour's votes.
DYNAMIC_NORMALIZED = "dynamic, normalised votes"

#: The routers of the study, by name (:data:`capsule_lab.studies.learned_routing.ROUTERS_07`).
ROUTERS = ROUTERS_07
#: The votes each router is given in Sabour's CapsNet, Sabour's W u or Faria's normalised votes (eq. 1)
#: (:data:`capsule_lab.studies.learned_routing.VOTES_07`).
VOTES = VOTES_07


@dataclass
class RouterRun:
    """One router trained on one dataset. Chapter 07.

    ``accuracy`` on the test set; ``parameters`` of the whole network and ``router_parameters`` of its routers
    alone; ``seconds`` of training; ``entropy`` the mean normalised entropy of the couplings along the axis they
    are normalised over, and ``largest`` the mean largest coupling along it
    (:func:`~capsule_lab.routing.coupling_polarisation`); ``state`` the trained weights (on the CPU).
    """

    router: str
    dataset: str
    accuracy: float
    parameters: int
    router_parameters: int
    seconds: float
    entropy: float
    largest: float
    history: History
    state: dict


def _check_settings(settings) -> LearnedRoutingSettings:
    if not isinstance(settings, LearnedRoutingSettings):
        raise ValueError(f"settings must be a capsule_lab.studies.learned_routing.LearnedRoutingSettings, "
                         f"got {type(settings).__name__}")
    return settings


def _check_router(name, settings: LearnedRoutingSettings | None = None) -> str:
    """``name`` itself where it is a registered kind, else the kind ``settings.arms`` names for it."""
    arms = settings.arms if settings is not None else {}
    if isinstance(name, str) and name in arms:
        router_kind(arms[name])
        return name
    return router_kind(name).name


def _kind(name: str, settings: LearnedRoutingSettings) -> str:
    return settings.arms.get(name, name)


def with_normalized_dynamic(settings: LearnedRoutingSettings) -> LearnedRoutingSettings:
    """``settings`` with one more router, last, :data:`DYNAMIC_NORMALIZED` (dynamic routing, the settings' r, on
    Faria's normalised votes): every learned router then has a dynamic-routing partner on its own votes. Sabour's
    CapsNet only (the paper's network has eq. 1's votes everywhere). Chapter 07.
    """
    settings = _check_settings(settings)
    if not isinstance(settings.capsnet, CapsNetConfig):
        raise ValueError("with_normalized_dynamic needs Sabour's CapsNet (a CapsNetConfig): the paper's network "
                         "gives every router eq. 1's normalised votes already")
    if DYNAMIC_NORMALIZED in settings.routers:
        return settings
    return replace(settings, routers=settings.routers + (DYNAMIC_NORMALIZED,),
                   arms={**settings.arms, DYNAMIC_NORMALIZED: "dynamic"},
                   votes={**settings.votes, DYNAMIC_NORMALIZED: "normalized"})


def routing_study_data(dataset: str, settings: LearnedRoutingSettings, source: str = "offline") -> tuple:
    """``(train, test)`` of ``dataset`` (``"mnist"`` or ``"fashion"``): the first ``settings.train_size`` training
    and ``settings.test_size`` test images (None: all), 28×28. ``source`` as
    :func:`capsule_lab.data.sources.load_mnist`. Chapter 07.
    """
    settings = _check_settings(settings)
    return (load_dataset(dataset, True, source, settings.train_size),
            load_dataset(dataset, False, source, settings.test_size))


def study_router_spec(name: str, settings: LearnedRoutingSettings):
    """The router spec(s) for ``name`` under ``settings``: the registered kind ``name`` (or the kind ``settings.arms``
    names for it) with the settings' iterations
    and the sizes it reads (``kernels`` Gaussian kernels for similarity routing, an LSTM of ``lstm_hidden`` units for
    connectionist routing); with ``settings.layer_sizes`` (the paper's network: Table 2's sizes), one spec per routing
    layer with the paper's sizes (:meth:`~capsule_lab.routing.RouterSpec.per_layer`). Chapter 07.
    """
    settings = _check_settings(settings)
    kind = _kind(_check_router(name, settings), settings)
    read = router_kind(kind).options
    sizes = {k: v for k, v in (("kernels", settings.kernels), ("lstm_hidden", settings.lstm_hidden)) if k in read}
    spec = RouterSpec(kind, settings.iterations, **sizes)
    return spec.per_layer(settings.layer_sizes) if settings.layer_sizes else spec


def study_routers(name: str, settings: LearnedRoutingSettings):
    """The router(s) for ``name`` under ``settings``, built from :func:`study_router_spec` for the settings' network:
    for Sabour's CapsNet the class layer's router (a :class:`~capsule_lab.routing.DynamicRouter` with r = 3, a
    :class:`~capsule_lab.routing.SimilarityRouter` or a :class:`~capsule_lab.routing.ConnectionistRouter` with the
    settings' sizes), for the paper's network the tuple of its three layers' routers (Table 2's sizes). Chapter 07.
    """
    settings = _check_settings(settings)
    routers = built_routers(study_router_spec(name, settings), settings.capsnet.router_layers())
    return routers[0] if len(routers) == 1 else tuple(routers)


def build_model(name: str, settings: LearnedRoutingSettings, seed: int = 0) -> CapsuleNetwork:
    """A fresh network with router ``name`` (:func:`study_routers`), made by
    :func:`capsule_lab.studies.common.same_start`: the network with Sabour's routing from ``seed`` first, then the
    routers (built before the network's own weights) and the network they route, given the votes ``settings.votes``
    names for the router, which takes the first one's weights, so every router starts from the same convolutions and
    capsule weights. Chapter 07.
    """
    settings = _check_settings(settings)
    config = settings.capsnet
    chooses = "votes" in {f.name for f in fields(config)}       # the paper's network has eq. 1's votes everywhere
    network = replace(config, votes=settings.votes[name]) if chooses and name in settings.votes else config

    def routed():                               # the routers first (their parameters drawn before the network's own)
        routers = study_routers(name, settings)
        return network.network(list(routers) if isinstance(routers, tuple) else routers)

    return same_start(seed, config.network, routed)


def class_layer_inputs(settings: LearnedRoutingSettings) -> int:
    """I, the number of capsules routed to the classes: Sabour's primary capsules, or the paper's network's last
    grid of capsules (144 on 28×28). Uniform couplings over the inputs are 1/I. Chapter 07.
    """
    return _check_settings(settings).capsnet.class_inputs


def measure_couplings(model: CapsuleNetwork, data: Dataset, batch_size: int = 500, device="cpu",
                      amp: bool = False) -> tuple[float, float, float]:
    """One pass over ``data`` (a reduction of :func:`capsule_lab.training.outputs`): ``(accuracy, entropy,
    largest)`` — the accuracy, and the :func:`~capsule_lab.routing.coupling_polarisation` of the class layer's
    couplings along the axis its router normalises over, averaged over the images. Chapter 07.
    """
    if not isinstance(model, CapsuleNetwork) or not model.routers():
        raise ValueError(f"model must be a capsule_lab.models.CapsuleNetwork that routes, got {type(model).__name__}")
    axis = model.routers()[-1].normalize_over
    correct, entropy, largest, n = 0, 0.0, 0.0, 0
    for _, y, out in outputs(model, data, batch_size, device, amp):
        correct += (out.scores.argmax(dim=1) == y).sum().item()
        polarisation = coupling_polarisation(out.couplings, axis)
        entropy += polarisation["normalized_entropy"] * len(y)
        largest += polarisation["max_coupling"] * len(y)
        n += len(y)
    return correct / n, entropy / n, largest / n


def train_router(name: str, dataset: str, settings: LearnedRoutingSettings, data: tuple, seed: int = 0,
                 device="cpu", amp: bool = False, progress: bool = False, checkpoint=None) -> RouterRun:
    """Train :func:`build_model` ``(name, settings, seed)`` on ``data = (train, test)`` with the settings' schedule
    (shuffled with ``seed``) and the network's own loss, then measure it on the test set (:func:`measure_couplings`).
    ``checkpoint``: a file :func:`~capsule_lab.training.fit` saves the run to after every epoch and resumes it from
    (a finished run loads instead of training). Chapter 07.
    """
    settings = _check_settings(settings)
    name = _check_router(name, settings)
    if not isinstance(data, tuple) or len(data) != 2:
        raise ValueError("data must be the (train, test) tuple of routing_study_data")
    train, test = data
    net = build_model(name, settings, seed)
    history = fit(net, train, None, **settings.schedule.fit_options(), device=device, amp=amp, seed=seed,
                  progress=progress, checkpoint=checkpoint)
    accuracy, entropy, largest = measure_couplings(net, test, device=device, amp=amp)
    return RouterRun(name, dataset, accuracy, sum(p.numel() for p in net.parameters()),
                     sum(p.numel() for p in net.routing_parameters()), sum(history.seconds), entropy, largest, history,
                     {k: v.detach().cpu().clone() for k, v in net.state_dict().items()})


def run_routing_study(settings: LearnedRoutingSettings, data: dict, seed: int = 0, device="cpu", amp: bool = False,
                      progress: bool = False, checkpoints=None) -> dict:
    """Chapter 07's experiment: every router of ``settings.routers`` on every dataset of ``data``
    (``{dataset: (train, test)}``) → ``{(dataset, router): RouterRun}``. ``checkpoints``: None, or
    ``checkpoints(dataset, router)`` → the checkpoint file of that run (see :func:`train_router`). Chapter 07.
    """
    settings = _check_settings(settings)
    if checkpoints is not None and not callable(checkpoints):
        raise ValueError(f"checkpoints must be None or a function (dataset, router) -> path, got {checkpoints!r}")
    return {(dataset, name): train_router(name, dataset, settings, pair, seed, device, amp, progress,
                                          checkpoints(dataset, name) if checkpoints else None)
            for dataset, pair in data.items() for name in settings.routers}


def shipped_routing_runs(name: str = "routing_runs.json") -> dict:
    """The longer runs of ``scripts/routing_longer_run.py`` shipped with the package: ``provenance`` (command,
    settings, seeds, seconds, torch, machine, threads, date) and ``runs`` — per dataset, router and seed, the
    accuracy, parameters, router parameters, seconds, per-epoch training loss and the couplings' normalised entropy
    and mean largest coupling. Chapter 07.
    """
    return shipped_results(name)


_LEARNED_PAIR = ("the router alone: Sabour's slim CapsNet on Faria's normalised votes (eq. 1), both routers with T = 3 "
                 "updates and sigmoid activations, the same data, schedule and seeds")
_AGAINST_DYNAMIC = ("the router and what comes with it: dynamic routing gets Sabour's plain votes W_ij u_i where the "
                    "learned router gets Faria's normalised ones (eq. 1), the pose's length as activation where the "
                    "learned router has a sigmoid, and r = 3 (T = 2 updates) against T = 3; the same slim CapsNet "
                    "otherwise, data, schedule and seeds")

_SAME_VOTES = ("the router and what comes with it: the learned router's sigmoid activation against the pose's length, "
               "T = 3 updates against r = 3 (T = 2); the same normalised votes (eq. 1), slim CapsNet, data, schedule "
               "and seeds")
_VOTES_ONLY = ("the votes alone: Faria's normalised votes (eq. 1) against Sabour's plain W_ij u_i; dynamic routing "
               "(r = 3, the pose's length as activation) on both, the same slim CapsNet otherwise, data, schedule and "
               "seeds")
_OUR_QUESTION = "our question (Faria compares with EM routing, not with dynamic routing: §6)"
_HEAD_START = "our question (section 6: where does dynamic routing's head start come from?)"

#: Chapter 07's verdict table: Faria's claim that the longer run can test, and the course's questions beside it, each
#: tested on :func:`learned_claim_records` by :func:`learned_verdicts`: the learned router against dynamic routing
#: as the chapter trains them (other votes, activation and T), then on the same votes, and dynamic routing on the
#: two kinds of votes (what the votes alone change).
LEARNED_CLAIMS = (
    Claim("Faria 2022", "07", "Table 3", "MNIST error 0.53 % for connectionist and 1.0 % for similarity routing",
          False, "Faria's convolutional capsule network with 4×4 pose matrices, MNIST",
          "is connectionist routing more accurate than similarity routing on MNIST?", "connectionist, mnist",
          "similarity, mnist", "accuracy", "better", _LEARNED_PAIR),
    *(Claim("course", "07", _OUR_QUESTION, "a learned router does as well as dynamic routing", False, "-",
            f"is connectionist routing no less accurate than dynamic routing on {name}?", f"connectionist, {dataset}",
            f"dynamic, {dataset}", "accuracy", "not worse", _AGAINST_DYNAMIC, origin="course")
      for dataset, name in (("mnist", "MNIST"), ("fashion", "Fashion-MNIST"))),
    *(Claim("course", "07", _OUR_QUESTION, "a learned router does as well as dynamic routing", False, "-",
            f"is connectionist routing no less accurate than dynamic routing on the same votes ({name})?",
            f"connectionist, {dataset}", f"{DYNAMIC_NORMALIZED}, {dataset}", "accuracy", "not worse", _SAME_VOTES,
            origin="course")
      for dataset, name in (("mnist", "MNIST"), ("fashion", "Fashion-MNIST"))),
    *(Claim("course", "07", _HEAD_START, "dynamic routing's lead is not the plain votes'", False, "-",
            f"is dynamic routing on Faria's normalised votes no less accurate than on Sabour's plain ones ({name})?",
            f"{DYNAMIC_NORMALIZED}, {dataset}", f"dynamic, {dataset}", "accuracy", "not worse", _VOTES_ONLY,
            origin="course")
      for dataset, name in (("mnist", "MNIST"), ("fashion", "Fashion-MNIST"))),
)


def learned_claim_records(shipped: dict | None = None) -> list:
    """The longer run (:func:`shipped_routing_runs`) as records for :func:`capsule_lab.evidence.claims.claim_verdicts`,
    one per dataset, router and seed: ``router`` = ``"<router>, <dataset>"``, ``seed``, ``accuracy`` and the training
    accuracy per epoch; a run that kept none is ``"untestable"`` (its convergence cannot be shown). Chapter 07."""
    shipped = shipped_routing_runs() if shipped is None else shipped
    if not isinstance(shipped, dict) or not isinstance(shipped.get("runs"), dict):
        raise ValueError("shipped must be the longer run's results (shipped_routing_runs()), with its 'runs'")
    records = []
    for dataset, routers in shipped["runs"].items():
        for router, seeds in routers.items():
            for seed, run in seeds.items():
                record = {"router": f"{router}, {dataset}", "seed": int(seed), "accuracy": run["accuracy"],
                          "train_accuracy": run.get("train_accuracy", [])}
                if "train_accuracy" not in run:
                    record["untestable"] = (f"the run kept no training accuracy per epoch, so its convergence cannot "
                                            f"be shown ({len(run['train_loss'])} epochs)")
                records.append(record)
    return records


_PAPER_PAIR = ("the router alone: Faria's network (Table 1), every router on the normalised votes of eq. 1, the same "
               "data, schedule and seeds")
_PAPER_SAME_VOTES = ("the router and what comes with it: in Faria's network (Table 1) every router gets the normalised "
                     "votes of eq. 1; the learned router's own activations (and the input activations it reads) "
                     "against the pose's length with the input activations ignored, T = 3 updates against r = 3 "
                     "(T = 2); the same network otherwise, data, schedule and seeds")


def learned_claims(shipped: dict | None = None) -> tuple:
    """The rows of :data:`LEARNED_CLAIMS` that a run of chapter 07's study can ask (default: the shipped longer run),
    read from its provenance's settings and its routers. Sabour's CapsNet with the :data:`DYNAMIC_NORMALIZED` arm
    (the shipped run): all seven. Sabour's CapsNet without it (the quick settings as the chapter trains them): the
    first three; the same-votes and votes-alone rows need the arm. Faria's network (the gpu and full profiles, a
    cluster's run), where every router gets eq. 1's votes: the Table 3 row and the two same-votes rows, asked of its
    dynamic routing, each saying what differs in that network; the votes-alone rows cannot be asked there. Chapter 07.
    """
    shipped = shipped_routing_runs() if shipped is None else shipped
    if not isinstance(shipped, dict) or not isinstance(shipped.get("runs"), dict):
        raise ValueError("shipped must be a run of chapter 07's study (shipped_routing_runs()), with its 'runs'")
    capsnet = shipped.get("provenance", {}).get("settings", {}).get("capsnet")
    if not isinstance(capsnet, dict):
        raise ValueError("shipped's provenance must hold the run's settings (provenance['settings']['capsnet'])")
    routers = {router for by_router in shipped["runs"].values() for router in by_router}
    if "votes" in capsnet:                       # Sabour's CapsNet: the votes are the settings' choice per router
        return LEARNED_CLAIMS if DYNAMIC_NORMALIZED in routers else LEARNED_CLAIMS[:3]
    table3, same_votes = LEARNED_CLAIMS[0], LEARNED_CLAIMS[3:5]
    return (replace(table3, differs=_PAPER_PAIR),
            *(replace(c, b=c.b.replace(DYNAMIC_NORMALIZED, "dynamic"), differs=_PAPER_SAME_VOTES) for c in same_votes))


def learned_verdicts(shipped: dict | None = None, claims=None, alpha: float = 0.05) -> list:
    """Chapter 07's verdict table: ``claims`` (default :func:`learned_claims` of the run: :data:`LEARNED_CLAIMS` for
    the shipped longer run) tested on a run of the study (default the shipped longer run;
    :func:`learned_claim_records`) by :func:`capsule_lab.evidence.claims.claim_verdicts`. Chapter 07."""
    shipped = shipped_routing_runs() if shipped is None else shipped
    return claim_verdicts(learned_claim_records(shipped), learned_claims(shipped) if claims is None else claims, alpha)


#: Chapter 07's settings in each profile (``chapter_settings("07", profile)``).
#: Quick: the slim CapsNet (144 primary capsules, no decoder) with each router on 2k digits of each dataset,
#: one epoch, batch 64: the LSTM router costs ~5 ms an image on 2 CPU cores, the others under 1 ms.
SETTINGS = {
    "quick": LearnedRoutingSettings(CapsNetConfig.slim(decoder=False), ROUTERS_07, datasets=("mnist", "fashion"),
                                    train_size=2000, test_size=500,
                                    schedule=Schedule(epochs=1, batch_size=64, lr=3e-3, lr_decay=0.9),
                                    votes=VOTES_07),
    # GPU: the paper's network and routers on 24k images of each dataset for 2 epochs, tested on all 10k: within a
    # Colab session on a T4 (the LSTM router costs as much as the two others together).
    "gpu": LearnedRoutingSettings(ConvCapsNetConfig.paper(), ROUTERS_07, datasets=("mnist", "fashion"),
                                  train_size=24000, test_size=None,
                                  schedule=Schedule(epochs=2, batch_size=64, lr=3e-3, lr_decay=0.96),
                                  step_batches=20, layer_sizes=PAPER_SIZES),
    # Full: the paper's network (Table 1, Table 2's routers) on all 60k images of each dataset, 100 epochs as the
    # paper trains, Adam 3e-3 decayed by 0.96 per epoch and batch 64 (the rate and the batch are ours: 64 keeps
    # the LSTM router's states of 3 iterations within a 16 GB GPU).
    "full": LearnedRoutingSettings(ConvCapsNetConfig.paper(), ROUTERS_07, datasets=("mnist", "fashion"),
                                   train_size=None, test_size=None,
                                   schedule=Schedule(epochs=100, batch_size=64, lr=3e-3, lr_decay=0.96),
                                   step_batches=20, layer_sizes=PAPER_SIZES),
}
