"""What the experiments of chapters 04–08 share: networks that start the same, and the results shipped with the
package.

Taught in chapter 07 and 08 (a comparison of routers is fair only if everything but the router is the same). Each
chapter's experiment (:mod:`~capsule_lab.studies.depth`, :mod:`~capsule_lab.studies.rem`,
:mod:`~capsule_lab.studies.ladder`, :mod:`~capsule_lab.studies.learned_routing`,
:mod:`~capsule_lab.studies.bench.runner`) reads its images with :func:`capsule_lab.data.sources.load_dataset`, trains
with :func:`capsule_lab.training.fit` on its settings' :class:`~capsule_lab.training.Schedule`, measures with reductions
of :func:`capsule_lab.training.outputs`, and builds the networks it compares with :func:`same_start`:

    torch.manual_seed(seed)
    reference = backbone()        # the reference network (the one with Sabour's routing)
    network = build()             # the network compared, built right after from the same random stream
    network takes every weight of the reference's ``share`` (None: all it has)

so for one seed every router starts from the same convolutions, primary capsules and (where it has them) class
layer W, and a router with parameters of its own (the LSTM's) draws them the same way whatever else differs.
The longer runs that are too slow for a chapter ship as JSON or CSV in ``capsule_lab/results`` (:data:`RESULTS`,
read with :func:`shipped_results`), so the chapters find them in Colab too.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Callable, Iterable, Optional

import torch
from torch import nn

from .._checks import check_positive_int

__all__ = ["RESULTS", "same_start", "shipped_results", "rerun"]

#: The longer runs and searches shipped with the package (``capsule_lab/results``).
RESULTS = resources.files("capsule_lab") / "results"


def same_start(seed: int, backbone: Callable[[], nn.Module], build: Callable[[], nn.Module],
               share: Optional[Iterable[str]] = None) -> nn.Module:
    """``build()``'s network with the weights of ``backbone()``'s, both made from ``torch.manual_seed(seed)``, the
    reference first (see the module docstring). ``share``: the names of the reference's top-level modules whose
    weights the network takes (None: every weight the reference has); every one of them must fit the network, else
    ``RuntimeError``. Chapters 07–08.
    """
    check_positive_int(seed, "seed", minimum=0)
    share = None if share is None else set(share)
    torch.manual_seed(seed)
    reference = backbone()
    network = build()
    state = {k: v for k, v in reference.state_dict().items() if share is None or k.split(".")[0] in share}
    if share is not None and not share <= {k.split(".")[0] for k in state}:
        raise RuntimeError(f"the reference network has no {sorted(share - {k.split('.')[0] for k in state})}")
    _, unexpected = network.load_state_dict(state, strict=False)
    if unexpected:
        raise RuntimeError(f"the network does not take the reference's weights {unexpected}")
    return network


def shipped_results(name: str) -> dict:
    """A JSON file of :data:`RESULTS` (a longer run, with its provenance), read. Chapters 04–08."""
    return json.loads((RESULTS / name).read_text())


def rerun(script: str) -> str:
    """How to remake a shipped record that is missing or stale, for an error message: the script's command, in a clone
    of the repository (a ``pip install`` ships the records, not the scripts that made them). Chapters 04–08."""
    return (f"rerun `python scripts/{script}` in a clone of the repository "
            "(https://github.com/capsule-lab/capsule-lab; a pip install ships the records, not the scripts)")
