"""The bench and the smoke run never ask which network or router they hold (one router seam): no ``isinstance``
against a model family or a router class, no test of a router's or a network's name, no chapter-number if-chain in
``capsule_lab/router_bench.py`` and ``capsule_lab/smoke.py``. Each network owns its loss, its routing parameters and
its parse trees; each chapter's study is a row of the smoke run's table. Read from the sources' syntax trees."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import capsule_lab.models as models
import capsule_lab.routing as routing

PACKAGE = Path(models.__file__).resolve().parents[1]
FAMILIES = {name for name, obj in inspect.getmembers(models, inspect.isclass)
            if issubclass(obj, models.CapsuleNetwork) or name.endswith(("Output", "Config"))}
ROUTERS = {name for name, obj in inspect.getmembers(routing, inspect.isclass) if issubclass(obj, routing.Router)}
NAMES = {"ladder", "rem-pruned", "uniform", "dynamic", "similarity", "connectionist", "self-attention", "none",
         "02", "03", "04", "05", "06", "07", "08"}


def _strings(node) -> set:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@pytest.mark.parametrize("module", ["router_bench.py", "smoke.py"])
def test_no_dispatch_on_what_a_network_or_a_router_is(module):
    tree = ast.parse((PACKAGE / module).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
            classes = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            if classes & (FAMILIES | ROUTERS):
                found.append(f"line {node.lineno}: isinstance against {sorted(classes & (FAMILIES | ROUTERS))}")
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                 for op in node.ops):
            names = _strings(node) & NAMES
            if names:
                found.append(f"line {node.lineno}: compares with {sorted(names)}")
    assert not found, found


def test_the_check_finds_what_it_looks_for():
    bad = ast.parse('if isinstance(net, LadderCapsNet) or name == "ladder" or chapter in ("02", "03"): pass')
    hits = [n for n in ast.walk(bad) if isinstance(n, ast.Compare) and _strings(n) & NAMES]
    assert len(hits) == 2 and "LadderCapsNet" in FAMILIES and "DynamicRouter" in ROUTERS
