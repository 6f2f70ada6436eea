"""Chapter 05's experiment: a CapsNet trained dense (Q) and pruned while it trains (REM), measured every epoch.

Taught in chapter 05 (``chapters/05_rem.ipynb``), after Renzulli, Tartaglione and Grangetto (the REM paper),
§4.4. Under a :class:`~capsule_lab.studies.rem.RemSettings`, :func:`run_rem` trains one CapsNet per dataset and
seed twice from the same initialisation and for the same epochs with :func:`capsule_lab.training.fit`:

- **Q**: dense, and quantised at inference (:func:`capsule_lab.measures.parse_trees.quantized_inference`);
- **REM**: dense for ``warmup_epochs``, then every ``epochs_per_round`` epochs
  :func:`capsule_lab.measures.pruning.global_magnitude_prune` removes ``amount`` of the remaining prunable weights (our
  simplification of the paper's pruning; :func:`capsule_lab.measures.pruning.lobster_step` is its code's), and training
  goes on with the masks in place; quantised at inference too.

After every epoch both are measured (:func:`measure_routing`) on the test set twice, as they are (the paper's
*Vanilla* columns for the dense run) and under quantised inference with the settings' K (the paper's Q and REM):
accuracy, margin loss and the couplings of the last routing layer on every test image (from which
:mod:`capsule_lab.measures.parse_trees` computes keys and entropies); then the validation loss, the sparsity, the
training accuracy and a copy of the weights. The models are chosen as the paper's App. B.2 chooses them: Q's is the
dense step with the lowest validation loss (:func:`lowest_loss_step`), REM's the last epoch's. :func:`run_record` turns
a run into the plain numbers the chapter's tables and verdicts read (and a longer run ships as JSON,
:func:`shipped_rem_runs`).
"""

from __future__ import annotations

import copy
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import torch
from torch.nn.utils import prune
from torch.utils.data import Dataset, TensorDataset

from .._checks import check_class_index, check_positive_int
from ..data.expanded import affine_expanded_test_set, expanded_mnist
from ..data.sources import AFFINE_TEST_SEED, CLEAN_TEST_SEED, TRAIN_PLACEMENT_SEED, load_dataset
from ..evidence.stats import correct_string
from ..measures.parse_trees import (class_parse_tree, collect_parse_trees, dictionary_entropy, entropy_ceiling,
                                    keys_per_class, parse_tree_dictionary, quantized_inference)
from ..measures.pruning import global_magnitude_prune, prunable_parameters, snip_prune, sparsity
from ..models import CapsNet, CapsNetConfig, CapsuleNetwork
from ..routing import RouterSpec
from ..training import Schedule, batches, fit
from .common import shipped_results

__all__ = ["RoutingMeasure", "Step", "RemRun", "rem_study_data", "rem_affine_data", "measure_routing",
           "lowest_loss_step", "run_rem", "rem_checkpoints", "model_at", "accuracy_by_levels", "lowest_levels", "entropy_at_accuracy",
           "step_record", "run_record", "zero_transform_share", "COUPLING_BINS", "model_extras", "shipped_rem_runs",
           "RemSettings",
           "SETTINGS"]


@dataclass(frozen=True)
class RemSettings:
    """Chapter 05's experiment: the same CapsNet trained twice per dataset and seed, once dense (Q: only its
    couplings quantised) and once pruned while it trains (REM), for the same epochs.

    The REM run trains ``warmup_epochs`` dense, then prunes ``amount`` of the remaining prunable weights (one
    global magnitude threshold) every ``epochs_per_round`` epochs, ``rounds`` times, training on after each
    pruning, and then ``tune_epochs`` more with the masks in place; both runs are measured after every epoch.
    The models are chosen as the paper's App. B.2 chooses them: Q's is the dense epoch with the lowest validation
    loss (``val_size`` images are held out of the training set for it; the paper: 10 %), REM's the last epoch.
    The full entry is the paper's MNIST network with its options (its Table 9 model, optimiser and batch); the
    number of epochs and the pruning schedule are ours, the paper does not give them.
    """

    capsnet: CapsNetConfig
    datasets: tuple             # "mnist", "fashion"
    train_size: int | None      # None: the whole training set less the validation images
    val_size: int
    test_size: int | None       # None: the whole test set
    schedule: Schedule          # its epochs are warmup_epochs + rounds · epochs_per_round
    warmup_epochs: int
    rounds: int
    epochs_per_round: int
    amount: float               # share of the still-unpruned weights pruned per round
    seeds: tuple
    levels: int = 11
    threads: int = 2
    single_shot: bool = False   # also train a third run, pruned once at initialisation (SNIP) to REM's sparsity
    keep_every_step: bool = True    # False: only each run's last step and Q's model keep weights and couplings
    tune_epochs: int = 0        # epochs trained after the last round, nothing more pruned

    def __post_init__(self):
        epochs = self.warmup_epochs + self.rounds * self.epochs_per_round + self.tune_epochs
        if self.schedule.epochs != epochs:
            raise ValueError(f"schedule.epochs must be warmup_epochs + rounds · epochs_per_round + tune_epochs = "
                             f"{epochs} (the epochs of every run, dense or pruned), got {self.schedule.epochs}")

    @property
    def final_sparsity(self) -> float:
        """The share of the prunable weights the REM run has pruned after its last round."""
        return 1 - (1 - self.amount) ** self.rounds


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
    quantized_levels: Optional[int] = None                      # K of quantised inference, if measured under it

    @property
    def classes(self) -> int:
        """J, the number of classes."""
        return self.summary_classes if self.couplings is None else self.couplings.shape[2]

    def _summary(self, levels: int) -> tuple:
        if self.quantized_levels is not None and levels != self.quantized_levels:
            raise ValueError(f"levels = {levels}: this measure was taken under quantised inference with K = "
                             f"{self.quantized_levels}; its couplings are those bin centres and count at that K only")
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
        """The mean over the predicted classes of H_j, in bits (as
        :func:`~capsule_lab.measures.parse_trees.routing_entropy`)."""
        per_class = self._summary(levels)[0]
        if not per_class:
            raise ValueError("the measure holds no image")
        return sum(per_class.values()) / len(per_class)

    def keys(self, levels: int = 11) -> dict:
        """The number of distinct parse trees of every predicted class (:func:`keys_per_class`)."""
        return dict(self._summary(levels)[1])

    def class_tree(self, label: int, levels: int = 11) -> torch.Tensor:
        """Class ``label``'s parse tree, ``(I,)``: :func:`~capsule_lab.measures.parse_trees.class_parse_tree`, zeros for
        a class never predicted."""
        check_class_index(label, self.classes)
        return self._summary(levels)[2][label].clone()

    def images_per_class(self) -> dict:
        """How many images each class was predicted for."""
        classes, counts = self.predictions.unique(return_counts=True)
        return dict(zip(classes.tolist(), counts.tolist()))

    def entropy_ceiling(self) -> float:
        """The most :meth:`entropy` these predictions allow: a class predicted for n_j images has at most n_j
        keys, so H_j ≤ log₂ n_j (every image its own parse tree); the mean over the predicted classes."""
        return entropy_ceiling(self.predictions)


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
    """One dataset and seed of the study: the dense run's steps, the pruned run's steps, which dense step is Q's
    model (``q_index``, :func:`lowest_loss_step`), the seconds the runs took and, if trained, the single-shot run's
    steps. REM's model is the pruned run's last step (the paper's App. B.2). Chapter 05."""

    dataset: str
    seed: int
    dense: list
    pruned: list
    q_index: int
    seconds: float
    single_shot: list | None = None

    @property
    def q(self) -> Step:
        """Q's model, the dense step with the lowest validation loss (App. B.2, "for models without REM, we take the
        checkpoint that achieved the lowest loss on the validation set")."""
        return self.dense[self.q_index]

    @property
    def rem(self) -> Step:
        """REM's model, the pruned run's last step (App. B.2, "for models with REM we take the model on the last
        epoch")."""
        return self.pruned[-1]


def _check_settings(settings) -> RemSettings:
    if not isinstance(settings, RemSettings):
        raise ValueError(f"settings must be a RemSettings (capsule_lab.course.profiles.chapter_settings('05')), "
                         f"got {type(settings).__name__}")
    return settings


def rem_study_data(dataset: str, settings: RemSettings, source: str = "offline") -> tuple[Dataset, Dataset, Dataset]:
    """``(train, validation, test)`` for ``dataset`` (``"mnist"``, ``"fashion"``, or ``"expanded"``: the MNIST digits
    each at a random place on chapter 06's 40 × 40 canvas) from ``source`` (see
    :func:`capsule_lab.data.sources.load_mnist`): the validation set is the first ``val_size`` training images, the
    training set the next ``train_size`` (None: all the rest), the test set the first ``test_size`` test images (None:
    all). Chapter 05.
    """
    _check_settings(settings)
    images, labels = load_dataset("mnist" if dataset == "expanded" else dataset, True, source).tensors
    v = settings.val_size
    if not 0 < v < len(labels):
        raise ValueError(f"val_size must be in (0, {len(labels)}), got {v}")
    end = None if settings.train_size is None else v + settings.train_size
    images, labels = images[:end], labels[:end]
    test = load_dataset("mnist" if dataset == "expanded" else dataset, False, source, settings.test_size)
    if dataset == "expanded":
        images, labels = expanded_mnist(TensorDataset(images, labels), seed=TRAIN_PLACEMENT_SEED).tensors
        test = expanded_mnist(test, seed=CLEAN_TEST_SEED)
    return TensorDataset(images[v:], labels[v:]), TensorDataset(images[:v], labels[:v]), test


def rem_affine_data(settings: RemSettings, source: str = "offline") -> Dataset:
    """The affine test set of chapter 06 for the ``"expanded"`` study: the first ``test_size`` MNIST test digits,
    centred, through chapter 03's affine map and moved to a random place on the 40 × 40 canvas
    (:func:`capsule_lab.data.expanded.affine_expanded_test_set`, the seed chapter 06 uses). Chapter 05."""
    _check_settings(settings)
    return affine_expanded_test_set(load_dataset("mnist", False, source, settings.test_size), seed=AFFINE_TEST_SEED)


def measure_routing(model: CapsuleNetwork, data: Dataset, batch_size: int = 500, device=None, keep_couplings: bool = True,
                    amp: bool = False, quantize_levels: Optional[int] = None) -> RoutingMeasure:
    """Run ``model`` on ``data`` (a reduction of :func:`capsule_lab.training.outputs`: evaluation mode, no gradient,
    ``device``, ``amp``) and keep its accuracy, mean loss (the model's own: margin + reconstruction) and every image's
    couplings, prediction and label (:class:`RoutingMeasure`; the couplings are moved to the CPU). With
    ``keep_couplings=False`` the couplings are not kept (``couplings`` is None): enough for a validation loss. With
    ``quantize_levels`` K the model runs under :func:`capsule_lab.measures.parse_trees.quantized_inference` (the paper's
    Q and REM models: the last routing iteration with its couplings' bin centres), and the couplings kept are those
    centres. Any capsule network whose last routing layer has couplings is measured (its own loss; the couplings it
    offers the parse-tree measures as its router returned them, :class:`~capsule_lab.models.ParseTrees`' ``routed``).
    Chapter 05.
    """
    if not isinstance(model, CapsuleNetwork):
        raise ValueError(f"model must be a capsule_lab.models.CapsuleNetwork, got {type(model).__name__}")
    loss = 0.0

    def add_loss(x, y, out):
        nonlocal loss
        loss += model.loss(out, x, y).item() * len(y)

    with quantized_inference(model, quantize_levels) if quantize_levels is not None else nullcontext():
        trees = collect_parse_trees(model, data, batch_size, device, amp, keep="routed" if keep_couplings else None,
                                    each_batch=add_loss)
    predictions, labels = trees.predictions, trees.labels
    return RoutingMeasure(accuracy=(predictions == labels).float().mean().item(), loss=loss / len(labels),
                          couplings=trees.couplings.float() if keep_couplings else None, predictions=predictions,
                          labels=labels, summary_classes=trees.classes, quantized_levels=quantize_levels)


def accuracy_by_levels(model: CapsuleNetwork, data: Dataset, levels=(2, 3, 4, 6, 11, 21, 51, 101), batch_size: int = 500,
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
    standard error of the reference: :func:`capsule_lab.evidence.stats.binomial_standard_error`); None when no K
    qualifies. Chapter 05."""
    if not isinstance(accuracies, dict) or not accuracies:
        raise ValueError("accuracies must be a non-empty dict {K: accuracy} (from accuracy_by_levels)")
    for name, value in (("reference", reference), ("tolerance", tolerance)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    good = [k for k, accuracy in accuracies.items() if accuracy >= reference - tolerance]
    return min(good) if good else None


def lowest_loss_step(steps: list) -> int:
    """The index in ``steps`` of the step with the lowest validation loss (the first, on a tie): Q's model, as the
    REM paper's App. B.2 picks a model trained without REM. Chapter 05."""
    if not isinstance(steps, list) or not steps or not all(isinstance(s, Step) for s in steps):
        raise ValueError("steps must be a non-empty list of Step (a RemRun's dense steps)")
    return min(range(len(steps)), key=lambda k: (steps[k].val_loss, k))


def _measure_record(measure: RoutingMeasure, levels: int) -> dict:
    """A measure as a checkpoint keeps it: its numbers and its summary at ``levels``, not its couplings."""
    entropy, keys, trees = measure._summary(levels)
    return {"accuracy": measure.accuracy, "loss": measure.loss, "predictions": measure.predictions,
            "labels": measure.labels, "classes": measure.classes, "quantized_levels": measure.quantized_levels,
            "levels": levels, "entropy": dict(entropy), "keys": dict(keys), "trees": trees}


def _measure_from_record(record: dict) -> RoutingMeasure:
    """:func:`_measure_record`'s measure back, without its couplings: it answers from its summary."""
    return RoutingMeasure(record["accuracy"], record["loss"], None, record["predictions"], record["labels"],
                          summary={record["levels"]: (record["entropy"], record["keys"], record["trees"])},
                          summary_classes=record["classes"], quantized_levels=record["quantized_levels"])


def _step_record(step: Step, levels: int) -> dict:
    """A step as ``fit``'s checkpoint keeps it (returned by ``on_epoch_end``: numbers, strings, tensors, dicts):
    the weights while the step keeps them, the measures as numbers and summaries (a kept step's couplings are
    measured again from its weights when the run resumes; at the paper's size they are 460 MB a measure)."""
    return {"epoch": step.epoch, "sparsity": dict(step.sparsity), "val_loss": step.val_loss, "state": step.state,
            "test": _measure_record(step.test, levels), "quantized": _measure_record(step.quantized, levels)}


def _step_from_record(record: dict) -> Step:
    return Step(record["epoch"], dict(record["sparsity"]), record["val_loss"], _measure_from_record(record["test"]),
                record["state"], quantized=_measure_from_record(record["quantized"]))


def _saved_records(checkpoint) -> list:
    """The step records a run's checkpoint holds (``History.epoch_end``); none without a checkpoint."""
    if checkpoint is None or not Path(checkpoint).exists():
        return []
    history = torch.load(checkpoint, map_location="cpu", weights_only=True).get("history") or {}
    return list(history.get("epoch_end") or [])


def _train(model: CapsNet, settings: RemSettings, train, val, test, seed: int, iterative: bool, device,
           amp: bool, checkpoint=None) -> list:
    records = _saved_records(checkpoint)            # the epochs a checkpoint already holds, if it resumes
    steps = [_step_from_record(r) for r in records]

    def keep_only_the_chosen() -> None:             # the newest step and (dense) Q's model so far; summarise the rest
        if settings.keep_every_step:
            return
        keep = {len(steps) - 1} | (set() if iterative else {lowest_loss_step(steps)})
        for k, step in enumerate(steps):
            if k not in keep and step.state is not None:
                step.drop((settings.levels,))
                records[k]["state"] = None          # the same record fit saves: the next checkpoint drops it too

    def after_epoch(epoch: int, net: CapsNet) -> dict:
        val_loss = measure_routing(net, val, device=device, keep_couplings=False, amp=amp).loss
        steps.append(Step(epoch, sparsity(net), val_loss, measure_routing(net, test, device=device, amp=amp),
                          {k: v.detach().cpu().clone() for k, v in net.state_dict().items()},
                          quantized=measure_routing(net, test, device=device, amp=amp,
                                                    quantize_levels=settings.levels)))
        records.append(_step_record(steps[-1], settings.levels))
        keep_only_the_chosen()
        since = epoch - settings.warmup_epochs
        if (iterative and 0 <= since < settings.rounds * settings.epochs_per_round
                and since % settings.epochs_per_round == 0):
            global_magnitude_prune(net, settings.amount)
        return records[-1]

    if steps:
        keep_only_the_chosen()
    history = fit(model, train, None, **settings.schedule.fit_options(), device=device, amp=amp, seed=seed,
                  progress=False, on_epoch_end=after_epoch, checkpoint=checkpoint)
    for k, step in enumerate(steps):
        step.train_accuracy = history.train_accuracy[step.epoch - 1]
        if step.state is not None and step.test.couplings is None:    # restored, kept: its couplings measured again
            steps[k] = _measured_again(step, settings, test, device, amp)
    return steps


def _measured_again(step: Step, settings: RemSettings, test, device, amp: bool) -> Step:
    """A step restored from a checkpoint with its weights, measured again on the test set (its couplings back)."""
    model = model_at(step, settings.capsnet).to(device)
    return replace(step, test=measure_routing(model, test, device=device, amp=amp),
                   quantized=measure_routing(model, test, device=device, amp=amp, quantize_levels=settings.levels))


def rem_checkpoints(checkpoint) -> dict:
    """The files :func:`run_rem` saves its runs to for ``checkpoint`` (a ``.pt`` file name):
    ``{"dense": <stem>-dense.pt, "pruned": <stem>-pruned.pt, "single_shot": <stem>-single-shot.pt}`` beside it.
    Chapter 05."""
    checkpoint = Path(checkpoint)
    return {run: checkpoint.with_name(f"{checkpoint.stem}-{run.replace('_', '-')}{checkpoint.suffix or '.pt'}")
            for run in ("dense", "pruned", "single_shot")}


def run_rem(dataset: str, settings: RemSettings, data: tuple, seed: int = 0, device="cpu",
            amp: bool = False, checkpoint=None) -> RemRun:
    """Train ``dataset``'s CapsNet dense and pruned from the same initialisation (seeded by ``seed``) on
    ``data = (train, validation, test)`` (:func:`rem_study_data`) and return the :class:`RemRun`.

    With ``settings.keep_every_step`` False (the full profile), every step but each run's last and Q's model
    keeps only a summary of its test couplings at ``settings.levels`` and no weights (:meth:`Step.drop`).
    With ``settings.single_shot`` a third run starts from the same initialisation pruned once by
    :func:`capsule_lab.measures.pruning.snip_prune` (scored on the first training batch) to the sparsity the iterative
    run ends with, and trains as long (``RemRun.single_shot``; None otherwise).

    ``checkpoint``: None, or a file name: each run is saved after every epoch to its own file beside it
    (:func:`rem_checkpoints`) by :func:`~capsule_lab.training.fit`, with every step measured so far (its numbers and
    its summary at ``settings.levels``; the weights of the steps that keep them), and a call with the same name
    resumes each run at its last finished epoch, to the same weights and steps as a run never interrupted; a kept
    step's couplings are measured again from its weights. (After a resume the file may also keep the weights of up
    to two restored steps that a later epoch no longer keeps: fit's copy of the earlier records is not the one this
    call updates.) ``RemRun.seconds`` counts this call's time only. Chapter 05.
    """
    _check_settings(settings)
    if not isinstance(data, (tuple, list)) or len(data) != 3:
        raise ValueError("data must be (train, validation, test), as rem_study_data returns")
    files = rem_checkpoints(checkpoint) if checkpoint is not None else dict.fromkeys(("dense", "pruned", "single_shot"))
    train, val, test = data
    start = time.perf_counter()
    torch.manual_seed(seed)
    initial = CapsNet(settings.capsnet).to(device)
    dense = _train(copy.deepcopy(initial), settings, train, val, test, seed, False, device, amp, files["dense"])
    pruned = _train(copy.deepcopy(initial), settings, train, val, test, seed, True, device, amp, files["pruned"])
    single_shot = None
    if settings.single_shot:
        model = copy.deepcopy(initial)
        images, labels = next(iter(batches(train, settings.schedule.batch_size)))
        snip_prune(model, images.to(device), labels.to(device), settings.final_sparsity)
        single_shot = _train(model, settings, train, val, test, seed, False, device, amp, files["single_shot"])
    return RemRun(dataset, seed, dense=dense, pruned=pruned, q_index=lowest_loss_step(dense),
                  seconds=time.perf_counter() - start, single_shot=single_shot)


def model_at(step: Step, config) -> CapsNet:
    """The CapsNet of ``step`` (built from ``config``, a :class:`~capsule_lab.models.CapsNetConfig`), its weights
    and pruning masks restored, in evaluation mode. Chapter 05."""
    if not isinstance(step, Step):
        raise ValueError(f"step must be a capsule_lab.studies.rem.Step, got {type(step).__name__}")
    if step.state is None:
        raise ValueError(f"the weights of epoch {step.epoch} were dropped (settings.keep_every_step is False): "
                         "only Q's model and each run's last step keep them")
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


def entropy_at_accuracy(points: list, accuracy: float) -> float:
    """The entropy a run had when its test accuracy was ``accuracy``: linear interpolation between its epochs'
    ``points`` (``(accuracy, entropy)`` pairs, one per epoch), sorted by accuracy. Reads Q's entropy at REM's
    accuracy, the comparison at equal accuracy. Raises ValueError when ``accuracy`` lies outside the accuracies the
    points reach (no extrapolation). Chapter 05."""
    if (not isinstance(points, list) or not points
            or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in points)):
        raise ValueError("points must be a non-empty list of (accuracy, entropy) pairs, one per epoch")
    points = sorted((float(a), float(h)) for a, h in points)
    low, high = points[0][0], points[-1][0]
    if not low <= accuracy <= high:
        raise ValueError(f"accuracy {accuracy:.4f} lies outside the steps' accuracies [{low:.4f}, {high:.4f}]")
    for (a0, h0), (a1, h1) in zip(points, points[1:]):
        if a0 <= accuracy <= a1:
            return h0 if a1 == a0 else h0 + (h1 - h0) * (accuracy - a0) / (a1 - a0)
    return points[0][1]                                   # a single step, at exactly this accuracy


# ---------------------------------------------------------------- a run as plain numbers (the chapter's tables)

def step_record(step: Step, levels: int = 11) -> dict:
    """One :class:`Step` as plain numbers: ``epoch``, ``sparsity`` (per parameter and overall), ``val_loss``,
    ``train_accuracy``, ``accuracy`` (the model as it is: the paper's *Vanilla* column for a dense step),
    ``quantized_accuracy`` (under quantised inference: the paper's Q or REM column), and, from the quantised
    measure (the plain one when the step has none), ``entropy`` (bits, at ``levels``), its ``entropy_ceiling``,
    ``keys`` (the mean per predicted class) and ``keys_per_class``. Chapter 05."""
    if not isinstance(step, Step):
        raise ValueError(f"step must be a capsule_lab.studies.rem.Step, got {type(step).__name__}")
    measure = _read(step)
    numbers = _parse_tree_numbers(measure, levels)
    return {"epoch": step.epoch, "sparsity": dict(step.sparsity), "val_loss": step.val_loss,
            "train_accuracy": step.train_accuracy, "accuracy": step.test.accuracy,
            "quantized_accuracy": None if step.quantized is None else step.quantized.accuracy,
            "entropy": numbers["entropy"], "entropy_ceiling": numbers["entropy_ceiling"], "keys": numbers["keys"],
            "keys_per_class": {str(c): n for c, n in measure.keys(levels).items()}}


def _read(step: Step) -> RoutingMeasure:
    """The measure a step's tables read: the quantised one (the paper's Q or REM), the plain one if there is none."""
    return step.test if step.quantized is None else step.quantized


def _parse_tree_numbers(measure: RoutingMeasure, levels: int) -> dict:
    keys = measure.keys(levels)
    return {"accuracy": measure.accuracy, "entropy": measure.entropy(levels),
            "entropy_ceiling": measure.entropy_ceiling(), "keys": sum(keys.values()) / len(keys)}


def _model_record(step: Step, levels: int) -> dict:
    measure = _read(step)
    return dict(step_record(step, levels), correct=correct_string(measure.predictions == measure.labels))


def run_record(run: RemRun, levels: int = 11) -> dict:
    """A :class:`RemRun` as the plain numbers the chapter's tables and verdicts read (and a longer run ships as
    JSON): ``dataset``, ``seed``, ``seconds``, ``levels``, ``q_index``, every step of ``dense`` and ``pruned``
    (:func:`step_record`), and the two models, ``"Q"`` and ``"REM"``, each a step record with ``correct`` (its 0/1
    string per test image under quantised inference, for McNemar's test). :func:`model_extras` adds to them.
    Chapter 05."""
    if not isinstance(run, RemRun):
        raise ValueError(f"run must be a capsule_lab.studies.rem.RemRun, got {type(run).__name__}")
    return {"dataset": run.dataset, "seed": run.seed, "seconds": run.seconds, "levels": levels,
            "q_index": run.q_index, "dense": [step_record(s, levels) for s in run.dense],
            "pruned": [step_record(s, levels) for s in run.pruned],
            "Q": _model_record(run.q, levels), "REM": _model_record(run.rem, levels)}


def zero_transform_share(model: CapsNet) -> float:
    """The share of the class capsules' transformation matrices W_ij that pruning emptied (every entry zero): a
    capsule pair whose vote û_j|i is zero on every image. Chapter 05."""
    if not isinstance(model, CapsNet):
        raise ValueError(f"model must be a capsule_lab.models.CapsNet, got {type(model).__name__}")
    w = model.digits.weight.detach()                         # (I, J, D_out, D_in)
    return (w == 0).flatten(2).all(dim=2).float().mean().item()


#: The bins of [0, 1] that :func:`model_extras` counts a model's couplings to the predicted class in.
COUPLING_BINS = 200


def model_extras(model: CapsNet, test: Dataset, levels=(2, 3, 4, 5, 6, 7, 9, 11, 16, 21, 51, 101),
                 saliency_images: int = 1000, affine: Optional[Dataset] = None, device=None) -> dict:
    """What the chapter measures on a chosen model beyond its step: ``levels_sweep`` (``{K: {"accuracy", "entropy",
    "entropy_ceiling", "keys"}}`` under quantised inference with each K: the paper's Fig. 7), ``on_object`` and
    ``on_object_shuffled`` (the mean share of the eq. 16 saliency map on the object's pixels, over the first
    ``saliency_images`` test images, and the same maps on the next image's object: the baseline;
    :func:`capsule_lab.measures.saliency.saliency_on_object`), ``zero_transforms`` (:func:`zero_transform_share`),
    ``coupling_counts`` (every test image's couplings to its predicted class, unquantised, counted in
    :data:`COUPLING_BINS` equal bins of [0, 1]: how far routing moved them from 1/J) and,
    with an ``affine`` test set, ``affine_accuracy`` (quantised inference at K = 11), ``affine_entropy``, its
    ``affine_entropy_ceiling`` and ``affine_correct`` (the paper's Table 2). Chapter 05."""
    from ..measures.saliency import coupling_saliency_maps, saliency_on_object

    check_positive_int(saliency_images, "saliency_images")
    sweep = {}
    for k in levels:
        sweep[str(k)] = _parse_tree_numbers(measure_routing(model, test, device=device, quantize_levels=k), k)
    images = test[:saliency_images][0]
    maps, _ = coupling_saliency_maps(model.cpu(), images)
    on, shuffled = saliency_on_object(maps, images), saliency_on_object(maps, images.roll(1, dims=0))
    kept = ~(on.isnan() | shuffled.isnan())
    plain = measure_routing(model, test, device=device)
    to_predicted = plain.couplings[torch.arange(len(plain.predictions)), :, plain.predictions].flatten()
    extras = {"levels_sweep": sweep, "on_object": on[kept].mean().item(),
              "on_object_shuffled": shuffled[kept].mean().item(), "on_object_images": int(kept.sum()),
              "zero_transforms": zero_transform_share(model),
              "coupling_counts": torch.histc(to_predicted.double(), bins=COUPLING_BINS, min=0, max=1).long().tolist()}
    if affine is not None:
        m = measure_routing(model, affine, device=device, quantize_levels=11)
        extras.update(affine_accuracy=m.accuracy, affine_entropy=m.entropy(11),
                      affine_entropy_ceiling=m.entropy_ceiling(),
                      affine_correct=correct_string(m.predictions == m.labels))
    return extras


def shipped_rem_runs(name: str = "rem_runs.json") -> dict:
    """The longer run shipped with the package (``capsule_lab/results/<name>``, written by
    ``scripts/rem_longer_run.py``): ``{"settings": ..., "provenance": ..., "runs": [run records]}``, each run a
    :func:`run_record` with :func:`model_extras` merged into its ``"Q"`` and ``"REM"``. Chapter 05."""
    return shipped_results(name)


#: Chapter 05's settings in each profile (``chapter_settings("05", profile)``).
#: Quick: the slim CapsNet with 32 conv channels (144 primary capsules, no decoder) on 3k images per dataset,
#: 1 dense epoch then 3 prunings of half of what is left (87.5 % sparse): 4 epochs per run, 4 runs. One thread
#: trains this small network faster than two (1.9 s vs 2.1 s per epoch here; 64 channels: 2.8 s on two).
SETTINGS = {
    "quick": RemSettings(CapsNetConfig.slim(conv_channels=32, decoder=False), datasets=("mnist", "fashion"),
                         train_size=3000, val_size=500, test_size=2000,
                         schedule=Schedule(epochs=4, batch_size=128, lr=3e-3, lr_decay=0.9),
                         warmup_epochs=1, rounds=3, epochs_per_round=1, amount=0.5, seeds=(0,), threads=1),
    # GPU: the full profile's network and data on both datasets, one seed as in the quick profile, 8 epochs (2 dense,
    # then 3 prunings of half of what is left, 2 epochs apart: 87.5 % sparse): within a Colab session on a T4.
    "gpu": RemSettings(CapsNetConfig.sabour(decoder=False, init_std=0.1, router=RouterSpec(pose_bias=0.1)),
                       datasets=("mnist", "fashion"), train_size=None, val_size=6000, test_size=None,
                       schedule=Schedule(epochs=8, batch_size=128, lr=1e-3, lr_decay=0.99, max_shift=2),
                       warmup_epochs=2, rounds=3, epochs_per_round=2, amount=0.5, seeds=(0,), threads=2,
                       keep_every_step=False),
    "full": RemSettings(CapsNetConfig.sabour(decoder=False, init_std=0.1, router=RouterSpec(pose_bias=0.1)),
                        datasets=("mnist", "fashion"), train_size=None, val_size=6000, test_size=None,
                        schedule=Schedule(epochs=50, batch_size=128, lr=1e-3, lr_decay=0.99, max_shift=2),
                        warmup_epochs=10, rounds=20, epochs_per_round=2, amount=0.15, seeds=(0, 1, 2, 3, 4),
                        single_shot=True,
                        keep_every_step=False),   # Sabour's network: 27 MB of weights, 460 MB of couplings a step
}
