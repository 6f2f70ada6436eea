"""Chapter 05's experiment: a CapsNet trained dense (Q) and pruned while it trains (REM), measured every epoch.

Taught in chapter 05 (``chapters/05_rem.ipynb``), after Renzulli, Tartaglione and Grangetto (the REM paper),
§4.4. Under a :class:`~capsule_lab.profiles.RemSettings`, :func:`run_rem` trains one CapsNet per dataset and
seed twice from the same initialisation and for the same epochs with :func:`capsule_lab.training.fit`:

- **Q**: dense; only its couplings are quantised when they are measured;
- **REM**: dense for ``warmup_epochs``, then every ``epochs_per_round`` epochs
  :func:`capsule_lab.rem.global_magnitude_prune` removes ``amount`` of the remaining prunable weights, and
  training goes on with the masks in place.

After every epoch both are measured (:func:`measure_routing`): accuracy and margin loss on the test set, the
couplings of the last routing layer on every test image (from which :mod:`capsule_lab.rem` computes keys and
entropies at any K), the validation loss, the sparsity, and a copy of the weights (so a chapter can go back to
any step, e.g. to draw its parse tree). REM's model is :func:`chosen_step`: the most pruned step whose
validation loss is no higher than the dense model's just before the first pruning.
"""

from __future__ import annotations

import copy
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch.nn.utils import prune
from torch.utils.data import Dataset, TensorDataset

from ._checks import check_class_index, check_positive_int
from .claims import Claim, claim_verdicts
from .stats import correct_string
from .data import load_dataset
from .models import CapsNet
from .profiles import RemSettings
from .rem import (class_parse_tree, dictionary_entropy, global_magnitude_prune, keys_per_class, parse_tree_dictionary,
                  prunable_parameters, quantized_inference, snip_prune, sparsity)
from .training import batches, fit, outputs

__all__ = ["RoutingMeasure", "Step", "RemRun", "rem_study_data", "measure_routing", "chosen_step", "run_rem",
           "model_at", "accuracy_by_levels", "lowest_levels", "entropy_at_accuracy", "REM_CLAIMS", "rem_claim_records",
           "rem_verdicts"]


@dataclass
class RoutingMeasure:
    """One model measured on one set of images: accuracy, mean margin loss, and per image the couplings of the
    last routing layer ``(N, I, J)``, the predicted class and the label. Chapter 05.

    A long run cannot keep every epoch's couplings (Sabour's network on 10,000 test images: 460 MB an epoch).
    :meth:`drop_couplings` keeps only what the chapter reads from them at the given numbers of levels (the
    entropy and keys of every class, and every class's parse tree) and frees the tensor; the methods then answer
    from that summary, for those numbers of levels only.
    """

    accuracy: float
    loss: float
    couplings: Optional[torch.Tensor]
    predictions: torch.Tensor
    labels: torch.Tensor
    summary: dict = field(default_factory=dict, repr=False)    # levels → (H_j per class, keys per class, trees)
    summary_classes: int = field(default=0, repr=False)         # J, read when the couplings are gone

    @property
    def classes(self) -> int:
        """J, the number of classes."""
        return self.summary_classes if self.couplings is None else self.couplings.shape[2]

    def _summary(self, levels: int) -> tuple:
        if levels not in self.summary:
            if self.couplings is None:
                raise ValueError(f"levels = {levels}: this measure's couplings were dropped; it keeps levels "
                                 f"{sorted(self.summary)} only")
            dictionary = parse_tree_dictionary(self.couplings, self.predictions, levels)
            trees = torch.stack([class_parse_tree(self.couplings, self.predictions, j, levels)
                                 if j in dictionary else torch.zeros(self.couplings.shape[1], dtype=torch.float64)
                                 for j in range(self.couplings.shape[2])])
            self.summary[levels] = (dictionary_entropy(dictionary), keys_per_class(dictionary), trees)
        return self.summary[levels]

    def drop_couplings(self, levels=(11,)) -> None:
        """Summarise the couplings at each number of ``levels``, then free them."""
        if self.couplings is not None:
            for k in levels:
                self._summary(k)
            self.summary_classes = self.couplings.shape[2]
            self.couplings = None

    def class_entropy(self, levels: int = 11) -> dict:
        """The parse-tree entropy H_j, in bits, of every predicted class (:func:`dictionary_entropy`)."""
        return dict(self._summary(levels)[0])

    def entropy(self, levels: int = 11) -> float:
        """The mean over the predicted classes of H_j, in bits (as :func:`~capsule_lab.rem.routing_entropy`)."""
        per_class = self._summary(levels)[0]
        if not per_class:
            raise ValueError("the measure holds no image")
        return sum(per_class.values()) / len(per_class)

    def keys(self, levels: int = 11) -> dict:
        """The number of distinct parse trees of every predicted class (:func:`keys_per_class`)."""
        return dict(self._summary(levels)[1])

    def class_tree(self, label: int, levels: int = 11) -> torch.Tensor:
        """Class ``label``'s parse tree, ``(I,)``: :func:`~capsule_lab.rem.class_parse_tree`, zeros for a class
        never predicted."""
        check_class_index(label, self.classes)
        return self._summary(levels)[2][label].clone()

    def images_per_class(self) -> dict:
        """How many images each class was predicted for."""
        classes, counts = self.predictions.unique(return_counts=True)
        return dict(zip(classes.tolist(), counts.tolist()))

    def entropy_ceiling(self) -> float:
        """The most :meth:`entropy` these predictions allow: a class predicted for n_j images has at most n_j
        keys, so H_j ≤ log₂ n_j (every image its own parse tree); the mean over the predicted classes."""
        counts = self.images_per_class().values()
        return sum(math.log2(n) for n in counts) / len(counts)


@dataclass
class Step:
    """A model after ``epoch`` epochs: its sparsity (per parameter and ``"overall"``), validation loss, test
    measure, its weights (a CPU copy of the state dict, pruning masks included; None once dropped, see
    :func:`run_rem`), its accuracy on the training images during that epoch and ``quantized``, the test measure
    under quantised inference with the settings' K (:func:`measure_routing` with ``quantize_levels``): the paper's
    Q for a dense step, REM for a pruned one, where ``test`` is the model without quantisation. Chapter 05."""

    epoch: int
    sparsity: dict
    val_loss: float
    test: RoutingMeasure
    state: Optional[dict] = field(repr=False)
    train_accuracy: Optional[float] = None
    quantized: Optional[RoutingMeasure] = None

    def drop(self, levels=(11,)) -> None:
        """Free the weights and the test couplings (:meth:`RoutingMeasure.drop_couplings`)."""
        self.state = None
        for measure in (self.test, self.quantized):
            if measure is not None:
                measure.drop_couplings(levels)


@dataclass
class RemRun:
    """One dataset and seed of the study: the dense run's steps (Q), the pruned run's steps (REM), which pruned
    step is REM's model, the seconds the runs took and, if trained, the single-shot run's steps. Chapter 05."""

    dataset: str
    seed: int
    dense: list
    pruned: list
    chosen: int
    seconds: float
    single_shot: list | None = None

    @property
    def q(self) -> Step:
        """The Q model, which is the dense run's last step."""
        return self.dense[-1]

    @property
    def rem(self) -> Step:
        """The REM model, which is the pruned step that :func:`chosen_step` picked."""
        return self.pruned[self.chosen]


def _check_settings(settings) -> RemSettings:
    if not isinstance(settings, RemSettings):
        raise ValueError(f"settings must be a RemSettings (capsule_lab.profiles.chapter_settings('05')), "
                         f"got {type(settings).__name__}")
    return settings


def rem_study_data(dataset: str, settings: RemSettings, source: str = "offline") -> tuple[Dataset, Dataset, Dataset]:
    """``(train, validation, test)`` for ``dataset`` (``"mnist"`` or ``"fashion"``) from ``source`` (see
    :func:`capsule_lab.data.load_mnist`): the validation set is the first ``val_size`` training images, the
    training set the next ``train_size`` (None: all the rest), the test set the first ``test_size`` test images
    (None: all). Chapter 05.
    """
    _check_settings(settings)
    images, labels = load_dataset(dataset, True, source).tensors
    v = settings.val_size
    if not 0 < v < len(labels):
        raise ValueError(f"val_size must be in (0, {len(labels)}), got {v}")
    end = None if settings.train_size is None else v + settings.train_size
    train, val = TensorDataset(images[v:end], labels[v:end]), TensorDataset(images[:v], labels[:v])
    return train, val, load_dataset(dataset, False, source, settings.test_size)


def measure_routing(model: CapsNet, data: Dataset, batch_size: int = 500, device=None, keep_couplings: bool = True,
                    amp: bool = False, quantize_levels: Optional[int] = None) -> RoutingMeasure:
    """Run ``model`` on ``data`` (a reduction of :func:`capsule_lab.training.outputs`: evaluation mode, no gradient,
    ``device``, ``amp``) and keep its accuracy, mean loss (the model's own: margin + reconstruction) and every image's
    couplings, prediction and label (:class:`RoutingMeasure`; the couplings are moved to the CPU). With
    ``keep_couplings=False`` the couplings are not kept (``couplings`` is None): enough for a validation loss. With
    ``quantize_levels`` K the model runs under :func:`capsule_lab.rem.quantized_inference` (the paper's Q and REM
    models: the last routing iteration with its couplings' bin centres), and the couplings kept are those centres.
    Chapter 05.
    """
    if not isinstance(model, CapsNet):
        raise ValueError(f"model must be a capsule_lab.models.CapsNet, got {type(model).__name__}")
    couplings, predictions, labels, loss = [], [], [], 0.0
    with quantized_inference(model, quantize_levels) if quantize_levels is not None else nullcontext():
        for x, y, out in outputs(model, data, batch_size, device, amp):
            loss += model.loss(out, x, y).item() * len(y)
            if keep_couplings:
                couplings.append(out.couplings.float().cpu())
            predictions.append(out.scores.argmax(dim=1).cpu())
            labels.append(y.cpu())
    if not labels:
        raise ValueError("cannot measure on an empty dataset")
    predictions, labels = torch.cat(predictions), torch.cat(labels)
    return RoutingMeasure(accuracy=(predictions == labels).float().mean().item(), loss=loss / len(labels),
                          couplings=torch.cat(couplings) if keep_couplings else None, predictions=predictions,
                          labels=labels, summary_classes=int(model.config.classes))


def accuracy_by_levels(model: CapsNet, data: Dataset, levels=(2, 3, 4, 6, 11, 21, 51, 101), batch_size: int = 500,
                       device=None, amp: bool = False) -> dict:
    """``{K: accuracy}`` of ``model`` on ``data`` under quantised inference with K levels
    (:func:`measure_routing` with ``quantize_levels=K``), for every K in ``levels``: the accuracy half of the
    paper's Fig. 7. Chapter 05."""
    levels = tuple(levels)
    if not levels:
        raise ValueError("levels must name at least one number of quantisation levels K >= 2")
    return {k: measure_routing(model, data, batch_size, device, keep_couplings=False, amp=amp,
                               quantize_levels=k).accuracy for k in levels}


def lowest_levels(accuracies: dict, reference: float, tolerance: float) -> Optional[int]:
    """The paper's choice of K (§3.1.2: "the lowest K such that the accuracy does not deteriorate"): the smallest K
    in ``accuracies`` (``{K: accuracy}``, :func:`accuracy_by_levels`) whose accuracy is at least ``reference`` (the
    model's accuracy without quantisation) minus ``tolerance`` (what "does not deteriorate" allows, e.g. one binomial
    standard error of the reference: :func:`capsule_lab.stats.binomial_standard_error`); None when no K qualifies.
    Chapter 05."""
    if not isinstance(accuracies, dict) or not accuracies:
        raise ValueError("accuracies must be a non-empty dict {K: accuracy} (from accuracy_by_levels)")
    for name, value in (("reference", reference), ("tolerance", tolerance)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    good = [k for k, accuracy in accuracies.items() if accuracy >= reference - tolerance]
    return min(good) if good else None


def chosen_step(steps: list, warmup_epochs: int) -> int:
    """The index in ``steps`` of REM's model: the most pruned step whose validation loss is no higher than that
    of the dense model measured at epoch ``warmup_epochs`` (just before the first pruning). Chapter 05."""
    if not steps:
        raise ValueError("steps must hold at least one Step, got none")
    base = [k for k, s in enumerate(steps) if s.epoch == warmup_epochs]
    if not base:
        raise ValueError(f"steps must include the dense step at epoch warmup_epochs = {warmup_epochs}")
    reference = steps[base[0]].val_loss
    ok = [k for k, s in enumerate(steps) if s.epoch >= warmup_epochs and s.val_loss <= reference]
    return max(ok, key=lambda k: (steps[k].sparsity["overall"], steps[k].epoch))


def _train(model: CapsNet, settings: RemSettings, train, val, test, seed: int, iterative: bool, device,
           amp: bool) -> list:
    steps = []

    def after_epoch(epoch: int, net: CapsNet) -> None:
        val_loss = measure_routing(net, val, device=device, keep_couplings=False, amp=amp).loss
        steps.append(Step(epoch, sparsity(net), val_loss, measure_routing(net, test, device=device, amp=amp),
                          {k: v.detach().cpu().clone() for k, v in net.state_dict().items()},
                          quantized=measure_routing(net, test, device=device, amp=amp,
                                                    quantize_levels=settings.levels)))
        if not settings.keep_every_step:    # keep the newest step and REM's model so far; summarise the rest
            keep = {len(steps) - 1}
            if iterative and epoch >= settings.warmup_epochs:
                keep.add(chosen_step(steps, settings.warmup_epochs))
            for k, step in enumerate(steps):
                if k not in keep and step.state is not None:
                    step.drop((settings.levels,))
        since = epoch - settings.warmup_epochs
        last = epoch == settings.schedule.epochs
        if iterative and since >= 0 and since % settings.epochs_per_round == 0 and not last:
            global_magnitude_prune(net, settings.amount)

    history = fit(model, train, None, **settings.schedule.fit_options(), device=device, amp=amp, seed=seed,
                  progress=False, on_epoch_end=after_epoch)
    for step in steps:
        step.train_accuracy = history.train_accuracy[step.epoch - 1]
    return steps


def run_rem(dataset: str, settings: RemSettings, data: tuple, seed: int = 0, device="cpu",
            amp: bool = False) -> RemRun:
    """Train ``dataset``'s CapsNet dense and pruned from the same initialisation (seeded by ``seed``) on
    ``data = (train, validation, test)`` (:func:`rem_study_data`) and return the :class:`RemRun`.

    With ``settings.keep_every_step`` False (the full profile), every step but the run's last and REM's model
    keeps only a summary of its test couplings at ``settings.levels`` and no weights (:meth:`Step.drop`).
    With ``settings.single_shot`` a third run starts from the same initialisation pruned once by
    :func:`capsule_lab.rem.snip_prune` (scored on the first training batch) to the sparsity the iterative run
    ends with, and trains as long (``RemRun.single_shot``; None otherwise). Chapter 05.
    """
    _check_settings(settings)
    if not isinstance(data, (tuple, list)) or len(data) != 3:
        raise ValueError("data must be (train, validation, test), as rem_study_data returns")
    train, val, test = data
    start = time.perf_counter()
    torch.manual_seed(seed)
    initial = CapsNet(settings.capsnet).to(device)
    dense = _train(copy.deepcopy(initial), settings, train, val, test, seed, False, device, amp)
    pruned = _train(copy.deepcopy(initial), settings, train, val, test, seed, True, device, amp)
    single_shot = None
    if settings.single_shot:
        model = copy.deepcopy(initial)
        images, labels = next(iter(batches(train, settings.schedule.batch_size)))
        snip_prune(model, images.to(device), labels.to(device), settings.final_sparsity)
        single_shot = _train(model, settings, train, val, test, seed, False, device, amp)
    return RemRun(dataset, seed, dense=dense, pruned=pruned, chosen=chosen_step(pruned, settings.warmup_epochs),
                  seconds=time.perf_counter() - start, single_shot=single_shot)


def model_at(step: Step, config) -> CapsNet:
    """The CapsNet of ``step`` (built from ``config``, a :class:`~capsule_lab.models.CapsNetConfig`), its weights
    and pruning masks restored, in evaluation mode. Chapter 05."""
    if not isinstance(step, Step):
        raise ValueError(f"step must be a capsule_lab.rem_study.Step, got {type(step).__name__}")
    if step.state is None:
        raise ValueError(f"the weights of epoch {step.epoch} were dropped (settings.keep_every_step is False): "
                         "only Q's, REM's and each run's last step keep them")
    model = CapsNet(config)
    names = {module: name for name, module in model.named_modules()}
    for module, attr in prunable_parameters(model):
        if f"{names[module]}.{attr}_mask" in step.state:
            prune.identity(module, attr)                    # a mask buffer for load_state_dict to fill
    model.load_state_dict(step.state)
    for module, attr in prunable_parameters(model):
        if prune.is_pruned(module):                         # the masked weight, as the next forward would set it
            setattr(module, attr, getattr(module, f"{attr}_orig") * getattr(module, f"{attr}_mask"))
    return model.eval()


def entropy_at_accuracy(steps: list, accuracy: float, levels: int = 11) -> float:
    """The entropy a run's ``steps`` had when their test accuracy was ``accuracy``: linear interpolation between
    the epochs, on the steps sorted by accuracy. Reads Q's entropy at REM's accuracy, the comparison at equal
    accuracy. Raises ValueError when ``accuracy`` lies outside the accuracies the steps reached (no extrapolation).
    Chapter 05."""
    if not isinstance(steps, list) or not steps or not all(isinstance(s, Step) for s in steps):
        raise ValueError("steps must be a non-empty list of Step (a RemRun's dense or pruned steps)")
    check_positive_int(levels, "levels", minimum=2)
    points = sorted((s.test.accuracy, s.test.entropy(levels)) for s in steps)
    low, high = points[0][0], points[-1][0]
    if not low <= accuracy <= high:
        raise ValueError(f"accuracy {accuracy:.4f} lies outside the steps' accuracies [{low:.4f}, {high:.4f}]")
    for (a0, h0), (a1, h1) in zip(points, points[1:]):
        if a0 <= accuracy <= a1:
            return h0 if a1 == a0 else h0 + (h1 - h0) * (accuracy - a0) / (a1 - a0)
    return points[0][1]                                   # a single step, at exactly this accuracy


_DATASET = {"mnist": ("MNIST", "Sabour's CapsNet without its decoder on MNIST, 85.5 % sparse: 9.53 → 4.16 bits, "
                               "99.56 → 99.56 % (Table 9)"),
            "fashion": ("Fashion-MNIST", "DR-CapsNet on Fashion-MNIST, 80.7 % sparse: 8.64 → 4.80 bits, 92.46 → "
                                         "92.62 %, 665 → 126 keys per class (Tables 1 and 11)")}
_REM_DIFFERS = ("nothing but the pruning: the same initialisation, data, schedule and epochs; REM's model is the most "
                "pruned epoch whose validation loss is no higher than the dense model's before the first pruning, Q's "
                "the last epoch; the couplings are quantised when measured, not during inference as in §3.1.2")


def _rem_claims(dataset: str) -> tuple:
    name, setting = _DATASET[dataset]
    q, rem = f"Q, {dataset}", f"REM, {dataset}"
    return (
        Claim("Renzulli et al. 2024 (REM)", "05", "Abstract; Tables 1 and 9",
              "significantly reducing the generation of intra-class parse trees", True, setting,
              f"{name}: is REM's parse-tree entropy lower than Q's?", rem, q, "entropy", "better", _REM_DIFFERS),
        Claim("Renzulli et al. 2024 (REM)", "05", "Abstract; Tables 1 and 9",
              "with fewer parameters and negligible performance loss", True, setting,
              f"{name}: is REM no less accurate than Q (by the margin)?", rem, q, "accuracy", "not worse",
              _REM_DIFFERS),
        Claim("Renzulli et al. 2024 (REM)", "05", "§4.4, Figure 9",
              "the number of keys in the dictionary for DR-CapsNet+REM is lower than the one for DR-CapsNet+Q for "
              "each class", True, "MNIST, per class (Figure 9)",
              f"{name}: does REM have fewer parse trees (keys) per class than Q?", rem, q, "keys", "better",
              _REM_DIFFERS),
        Claim("course", "05", "our question (the paper compares Q and REM at the end of training, where their "
              "accuracies are nearly equal)", "REM's entropy is lower than Q's at the same accuracy", False, "-",
              f"{name}: at REM's accuracy, is REM's entropy lower than Q's read off Q's training curve?", rem,
              f"Q at REM's accuracy, {dataset}", "entropy", "better",
              "Q is read between two of its epochs (linear interpolation), so it is less trained than Q's model; "
              "REM is pruned", origin="course"),
    )


#: Chapter 05's verdict table, per dataset (MNIST, then Fashion-MNIST): the REM paper's claims and the course's
#: question at equal accuracy, tested on :func:`rem_claim_records` by :func:`rem_verdicts`.
REM_CLAIMS = _rem_claims("mnist") + _rem_claims("fashion")


def _correct(measure: RoutingMeasure) -> str:
    return correct_string(measure.predictions == measure.labels)


def rem_claim_records(runs: dict, levels: int = 11) -> list:
    """``runs`` (``{(dataset, seed): RemRun}``) as records for :func:`capsule_lab.claims.claim_verdicts`, per dataset
    and seed: ``"Q, <dataset>"`` and ``"REM, <dataset>"`` (test ``accuracy``, ``entropy`` and its ``entropy_ceiling``
    at ``levels``, mean ``keys`` per class, ``correct`` per test image, ``train_accuracy`` per epoch up to the model's
    epoch) and ``"Q at REM's accuracy, <dataset>"`` (:func:`entropy_at_accuracy`; its entropy None, and the record
    ``"untestable"``, for a seed where Q never had REM's accuracy). Chapter 05."""
    if not isinstance(runs, dict) or not runs or not all(isinstance(r, RemRun) for r in runs.values()):
        raise ValueError("runs must be a non-empty dict {(dataset, seed): RemRun} (from run_rem)")
    records = []
    for (dataset, seed), run in runs.items():
        curves = {"Q": [s.train_accuracy for s in run.dense],
                  "REM": [s.train_accuracy for s in run.pruned[:run.chosen + 1]]}
        for name, step in (("Q", run.q), ("REM", run.rem)):
            keys = step.test.keys(levels)
            records.append({"router": f"{name}, {dataset}", "seed": seed, "accuracy": step.test.accuracy,
                            "entropy": step.test.entropy(levels), "entropy_ceiling": step.test.entropy_ceiling(),
                            "keys": sum(keys.values()) / len(keys), "correct": _correct(step.test),
                            "train_accuracy": curves[name]})
        matched = {"router": f"Q at REM's accuracy, {dataset}", "seed": seed, "accuracy": run.rem.test.accuracy,
                   "entropy_ceiling": run.q.test.entropy_ceiling(), "train_accuracy": curves["Q"]}
        try:
            matched["entropy"] = entropy_at_accuracy(run.dense, run.rem.test.accuracy, levels)
        except ValueError as error:
            matched.update(entropy=None, untestable=f"seed {seed}: Q never had REM's accuracy ({error})")
        records.append(matched)
    return records


def rem_verdicts(runs: dict, levels: int = 11, claims=None, alpha: float = 0.05) -> list:
    """Chapter 05's verdict table: :data:`REM_CLAIMS` of the datasets in ``runs`` (or ``claims``) tested on
    :func:`rem_claim_records` by :func:`capsule_lab.claims.claim_verdicts` — paired t over seeds, Holm over the
    table, *undecided* with one seed, before convergence or at the entropy's ceiling. Chapter 05."""
    records = rem_claim_records(runs, levels)
    if claims is None:
        datasets = {dataset for dataset, _ in runs}
        claims = tuple(c for c in REM_CLAIMS if c.a.rsplit(", ", 1)[1] in datasets)
    return claim_verdicts(records, claims, alpha)
