"""The course design's binding public API keeps working wherever its code moved: every name it lists imports from
the module it names, is the package's one implementation (re-exported, not copied) and keeps its signature."""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

#: The binding names of ../shared/COURSE_DESIGN.md, with the arguments it fixes.
BINDING = {
    "capsule_lab.squash": ("s", "dim"),
    "capsule_lab.squash_exp": ("s", "dim"),
    "capsule_lab.margin_loss": ("lengths", "targets", "m_pos", "m_neg", "lam"),
    "capsule_lab.routing.dynamic_routing": ("votes", "iterations", "prior_logits"),
    "capsule_lab.routing.uniform_routing": ("votes",),
    "capsule_lab.rem.quantize": ("c", "levels"),
    "capsule_lab.rem.parse_tree_dictionary": ("couplings", "predictions", "levels"),
    "capsule_lab.rem.routing_entropy": ("couplings", "predictions", "levels"),
    "capsule_lab.diagnostics.activation_stats": ("norms", "active_eps", "dead_mean_eps", "dead_std_eps"),
    "capsule_lab.diagnostics.routing_dynamics": ("couplings",),
    "capsule_lab.ladder.top_k_capsules": ("u", "k"),
    "capsule_lab.ladder.ladder_activation": ("u_reg", "u_k", "gamma"),
}
#: Where each re-exported binding name lives now.
HOMES = {"capsule_lab.rem": "capsule_lab.measures.parse_trees",
         "capsule_lab.diagnostics": "capsule_lab.measures.capsule_stats",
         "capsule_lab.ladder": "capsule_lab.layers.ladder"}


@pytest.mark.parametrize("dotted", list(BINDING))
def test_every_binding_name_imports_with_its_arguments(dotted):
    module, _, name = dotted.rpartition(".")
    fn = getattr(importlib.import_module(module), name)
    parameters = list(inspect.signature(fn).parameters)
    assert parameters[:len(BINDING[dotted])] == list(BINDING[dotted])
    if module in HOMES:                                             # the one implementation, re-exported
        assert fn is getattr(importlib.import_module(HOMES[module]), name)
        assert fn.__module__ == HOMES[module]


def test_the_shims_only_re_export():
    for shim in HOMES:
        module = importlib.import_module(shim)
        own = [n for n, obj in vars(module).items()
               if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == shim]
        assert own == [], f"{shim} defines {own}: a binding module holds no code of its own"
        assert set(module.__all__) <= set(vars(module))


def test_the_binding_names_compute_what_the_design_says():
    from capsule_lab.rem import quantize, routing_entropy
    from capsule_lab.diagnostics import activation_stats
    from capsule_lab.ladder import top_k_capsules

    assert quantize(torch.tensor([0.0, 0.04, 0.06, 1.0]), 11).tolist() == [0, 0, 1, 10]
    c = torch.zeros(4, 2, 3)
    c[:, :, 1] = 1.0                                                  # every image the same tree for class 1
    bits, per_class = routing_entropy(c, torch.ones(4, dtype=torch.long))
    assert bits == 0.0 and per_class == {1: 0.0}
    stats = activation_stats(torch.tensor([[0.5, 0.0], [0.7, 0.0]]), 0.1, 0.01, 0.01)
    assert stats["cdr"] == 0.5 and stats["car"] == 0.5
    selected, code, indices = top_k_capsules(torch.tensor([[[3.0, 0.0], [0.0, 1.0], [0.0, 4.0]]]), 2)
    assert indices.tolist() == [[0, 2]] and code.tolist() == [[1.0, 0.0, 1.0]]
