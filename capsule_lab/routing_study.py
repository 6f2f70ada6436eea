"""Chapter 07's experiment: one capsule network trained with dynamic, similarity and connectionist routing.

Taught in chapter 07 (``chapters/07_learned_routing.ipynb``), after Faria, §5. Under a
:class:`~capsule_lab.profiles.LearnedRoutingSettings`, :func:`run_routing_study` trains, per dataset and from one
seed, the same network (same initialisation of everything but the routers, same data, epochs and optimiser) with
each router. The network is ``settings.capsnet``: a :class:`~capsule_lab.models.CapsNetConfig` (Sabour's CapsNet,
one routing layer between the primary and the class capsules: the quick profile) or a
:class:`~capsule_lab.models.ConvCapsNetConfig` (the paper's Table 1 network, three routing layers with 4×4 pose
matrices, each with its own router of Table 2's sizes, :func:`~capsule_lab.models.paper_routers`: the full
profile). The routers:

- ``"dynamic"``: Sabour's routing (r = 3 iterations, couplings a softmax over the outputs j);
- ``"similarity"``: :class:`~capsule_lab.learned_routing.SimilarityRouter` (a mixture of ``settings.kernels``
  Gaussian kernels, learned λ1, λ2, length scales and θ; couplings over the inputs i);
- ``"connectionist"``: :class:`~capsule_lab.learned_routing.ConnectionistRouter` (one LSTM cell of
  ``settings.lstm_hidden`` units shared by every pair; Table 2's hidden layers).

Each run is measured once on the test set (:func:`measure_couplings`): accuracy, and how polarised the couplings
are — their entropy along the axis each router normalises over, divided by its maximum (1 = uniform, 0 = every
unit of coupling on one capsule), and the mean largest coupling along that axis. :func:`build_model` gives a
fresh network for each router (the chapter times one training step of each with
:func:`capsule_lab.bench.training_step_seconds`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset, TensorDataset

from ._checks import check_one_of
from .data import load_fashion_mnist, load_mnist
from .learned_routing import ConnectionistRouter, SimilarityRouter
from .models import CapsNet, ConvCapsNet, ConvCapsNetConfig, capsnet_loss, paper_routers
from .modes import eval_mode
from .profiles import LearnedRoutingSettings
from .training import History, fit

__all__ = ["ROUTERS", "DATASETS", "NORMALIZED_OVER", "RouterRun", "routing_study_data", "make_router", "build_model",
           "class_layer_inputs", "coupling_polarisation", "measure_couplings", "train_router", "run_routing_study",
           "shipped_routing_runs"]

RESULTS = Path(__file__).resolve().parent / "results"

#: The routers of the study, by name.
ROUTERS = ("dynamic", "similarity", "connectionist")
#: The datasets of the study, by name.
DATASETS = {"mnist": load_mnist, "fashion": load_fashion_mnist}
#: The axis each router's couplings ``(B, I, J)`` sum to 1 over: Sabour's over the outputs, Faria's over the inputs.
NORMALIZED_OVER = {"dynamic": "outputs", "similarity": "inputs", "connectionist": "inputs"}


@dataclass
class RouterRun:
    """One router trained on one dataset. Chapter 07.

    ``accuracy`` on the test set; ``parameters`` of the whole network and ``router_parameters`` of the router
    alone; ``seconds`` of training; ``entropy`` the mean normalised entropy of the couplings along the axis they
    are normalised over, and ``largest`` the mean largest coupling along it (:func:`coupling_polarisation`);
    ``state`` the trained weights (on the CPU).
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
        raise ValueError(f"settings must be a capsule_lab.profiles.LearnedRoutingSettings, got {type(settings).__name__}")
    return settings


def _check_router(name) -> str:
    return check_one_of(name, ROUTERS, "router")


def routing_study_data(dataset: str, settings: LearnedRoutingSettings, source: str = "offline") -> tuple:
    """``(train, test)`` of ``dataset`` (``"mnist"`` or ``"fashion"``): the first ``settings.train_size`` training
    and ``settings.test_size`` test images (None: all), 28×28. ``source`` as :func:`capsule_lab.data.load_mnist`.
    Chapter 07.
    """
    settings = _check_settings(settings)
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {list(DATASETS)}, got {dataset!r}")
    out = []
    for train, size in ((True, settings.train_size), (False, settings.test_size)):
        images, labels = DATASETS[dataset](train, source).tensors
        out.append(TensorDataset(images[:size], labels[:size]))
    return tuple(out)


def make_router(name: str, settings: LearnedRoutingSettings):
    """The router for ``name`` under ``settings``. For Sabour's CapsNet: None for ``"dynamic"`` (the CapsNet's own
    routing), a :class:`~capsule_lab.learned_routing.SimilarityRouter` or a
    :class:`~capsule_lab.learned_routing.ConnectionistRouter` with the settings' sizes and iterations. For the
    paper's network (a :class:`~capsule_lab.models.ConvCapsNetConfig`): the tuple of its three layers' routers,
    :func:`~capsule_lab.models.paper_routers` (Table 2's sizes). Chapter 07.
    """
    settings, name = _check_settings(settings), _check_router(name)
    if isinstance(settings.capsnet, ConvCapsNetConfig):
        return paper_routers(name, settings.iterations, settings.capsnet)
    if name == "dynamic":
        return None
    if name == "similarity":
        return SimilarityRouter(kernels=settings.kernels, iterations=settings.iterations)
    return ConnectionistRouter(settings.capsnet.class_dim, hidden=settings.lstm_hidden, iterations=settings.iterations)


def build_model(name: str, settings: LearnedRoutingSettings, seed: int = 0) -> CapsNet | ConvCapsNet:
    """A fresh network with router ``name``: the network is initialised from ``seed`` with dynamic routing before
    the router is made, so every router starts from the same convolutions and capsule weights. Chapter 07.
    """
    settings, name = _check_settings(settings), _check_router(name)
    torch.manual_seed(seed)
    network = ConvCapsNet if isinstance(settings.capsnet, ConvCapsNetConfig) else CapsNet
    backbone = network(settings.capsnet)
    router = make_router(name, settings)
    if name == "dynamic":
        return backbone
    if network is ConvCapsNet:
        net = ConvCapsNet(settings.capsnet, routers=router)
    else:
        net = CapsNet(settings.capsnet, router=router)
    missing, unexpected = net.load_state_dict(backbone.state_dict(), strict=False)
    router_keys = {key for key in net.state_dict() if ".router." in f".{key}"}
    if unexpected or set(missing) - router_keys:
        raise RuntimeError(f"the {name} network does not share the backbone's weights: {missing}, {unexpected}")
    return net


def class_layer_inputs(settings: LearnedRoutingSettings) -> int:
    """I, the number of capsules routed to the classes: Sabour's primary capsules, or the paper's network's last
    grid of capsules (144 on 28×28). Uniform couplings over the inputs are 1/I. Chapter 07.
    """
    config = _check_settings(settings).capsnet
    return config.class_inputs if isinstance(config, ConvCapsNetConfig) else config.primary_caps


def _router_parameters(net) -> int:
    if isinstance(net, ConvCapsNet):
        return net.parameter_counts()["routers"]
    router = net.digits.router
    return sum(p.numel() for p in router.parameters()) if isinstance(router, torch.nn.Module) else 0


def coupling_polarisation(couplings: torch.Tensor, normalize_over: str) -> tuple[float, float]:
    """How polarised couplings ``(B, I, J)`` are along the axis they sum to 1 over (``"outputs"``: j, for each
    input; ``"inputs"``: i, for each output): ``(mean normalised entropy, mean largest coupling)``. The entropy
    −Σ c log c is divided by its maximum, log J or log I: 1 for uniform couplings, 0 when one capsule takes all.
    Chapter 07.
    """
    if not isinstance(couplings, torch.Tensor) or couplings.dim() != 3 or couplings.numel() == 0:
        raise ValueError(f"couplings must be a non-empty tensor of shape (B, I, J), got "
                         f"{getattr(couplings, 'shape', type(couplings).__name__)}")
    if normalize_over not in ("inputs", "outputs"):
        raise ValueError(f"normalize_over must be 'inputs' or 'outputs', got {normalize_over!r}")
    dim = 1 if normalize_over == "inputs" else 2
    c = couplings.detach().double()
    entropy = -(c * torch.log(c.clamp_min(1e-300))).sum(dim=dim) / math.log(c.shape[dim])
    return entropy.mean().item(), c.max(dim=dim).values.mean().item()


def measure_couplings(model: CapsNet | ConvCapsNet, data: Dataset, normalize_over: str, batch_size: int = 500,
                      device="cpu") -> tuple[float, float, float]:
    """One pass over ``data``: ``(accuracy, entropy, largest)`` — the accuracy, and the
    :func:`coupling_polarisation` of the model's class-layer couplings averaged over the images. Chapter 07.
    """
    if not isinstance(model, (CapsNet, ConvCapsNet)):
        raise ValueError(f"model must be a capsule_lab.models.CapsNet or ConvCapsNet, got {type(model).__name__}")
    images, labels = data.tensors[:2]
    correct, entropy, largest = 0, 0.0, 0.0
    with eval_mode(model), torch.no_grad():
        for start in range(0, len(labels), batch_size):
            x, y = images[start:start + batch_size].to(device), labels[start:start + batch_size].to(device)
            out = model(x)
            correct += (out.lengths.argmax(dim=1) == y).sum().item()
            e, m = coupling_polarisation(out.couplings, normalize_over)
            entropy, largest = entropy + e * len(y), largest + m * len(y)
    n = len(labels)
    return correct / n, entropy / n, largest / n


def train_router(name: str, dataset: str, settings: LearnedRoutingSettings, data: tuple, seed: int = 0,
                 device="cpu", amp: bool = False, progress: bool = False) -> RouterRun:
    """Train :func:`build_model` ``(name, settings, seed)`` on ``data = (train, test)`` with the settings' schedule
    (shuffled with ``seed``), then measure it on the test set (:func:`measure_couplings`). Chapter 07.
    """
    settings, name = _check_settings(settings), _check_router(name)
    if not isinstance(data, tuple) or len(data) != 2:
        raise ValueError("data must be the (train, test) tuple of routing_study_data")
    train, test = data
    net = build_model(name, settings, seed)
    start = time.perf_counter()
    history = fit(net, train, None, epochs=settings.epochs, batch_size=settings.batch_size, lr=settings.lr,
                  lr_decay=settings.lr_decay, device=device, amp=amp, seed=seed, loss_fn=capsnet_loss,
                  progress=progress)
    seconds = time.perf_counter() - start
    accuracy, entropy, largest = measure_couplings(net, test, NORMALIZED_OVER[name], device=device)
    return RouterRun(name, dataset, accuracy, sum(p.numel() for p in net.parameters()), _router_parameters(net),
                     seconds, entropy, largest, history,
                     {k: v.detach().cpu().clone() for k, v in net.state_dict().items()})


def run_routing_study(settings: LearnedRoutingSettings, data: dict, seed: int = 0, device="cpu", amp: bool = False,
                      progress: bool = False) -> dict:
    """Chapter 07's experiment: every router of ``settings.routers`` on every dataset of ``data``
    (``{dataset: (train, test)}``) → ``{(dataset, router): RouterRun}``. Chapter 07.
    """
    settings = _check_settings(settings)
    return {(dataset, name): train_router(name, dataset, settings, pair, seed, device, amp, progress)
            for dataset, pair in data.items() for name in settings.routers}


def shipped_routing_runs(name: str = "routing_runs.json") -> dict:
    """The longer runs of ``scripts/routing_longer_run.py`` shipped with the package: ``provenance`` (command,
    settings, seeds, seconds, torch, machine, threads, date) and ``runs`` — per dataset, router and seed, the
    accuracy, parameters, router parameters, seconds, per-epoch training loss and the couplings' normalised entropy
    and mean largest coupling. Chapter 07.
    """
    return json.loads((RESULTS / name).read_text())
