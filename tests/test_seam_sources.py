"""No module of the package asks which network, router or chapter it holds (one router seam, one network seam): no
``isinstance`` against a model family, a network config or a router class that decides what the code does, and no
comparison with a router's or a chapter's name, anywhere in ``capsule_lab``. Each network owns its loss, its routers,
its parse trees and its stages; each router owns how it is built for a layer and its last routing step; each
chapter's study is a row of the smoke run's table. Read from the sources' syntax trees.

Two things stay allowed, because they decide nothing: an argument check (an ``isinstance`` in the test of an ``if``
whose body only raises, or in a function that does nothing but check, ``_check_*``), and a family checking its own
types in its own module (``ConvCapsNetConfig`` in ``models/conv_capsnet.py``). The base classes a seam is made of
(``Router``, ``CapsuleNetwork``) may be asked for everywhere.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import capsule_lab.models as models
import capsule_lab.routing as routing

PACKAGE = Path(models.__file__).resolve().parents[1]
BASES = {"Router", "CapsuleNetwork"}
FAMILIES = {name for name, obj in inspect.getmembers(models, inspect.isclass)
            if issubclass(obj, models.CapsuleNetwork) or name.endswith(("Output", "Config"))} - BASES
ROUTERS = {name for name, obj in inspect.getmembers(routing, inspect.isclass) if issubclass(obj, routing.Router)} - BASES
NAMES = {"ladder", "rem-pruned", "uniform", "dynamic", "similarity", "connectionist", "self-attention",
         "02", "03", "04", "05", "06", "07", "08"}


def _strings(node) -> set:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _defined(tree) -> set:
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _checks_only(tree) -> set:
    """The ids of the isinstance calls that only check an argument: in the test of an ``if`` whose body is one
    ``raise`` (and no ``else``), or anywhere in a function named ``_check*`` or ``check_*``."""
    allowed = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.If) and not node.orelse and len(node.body) == 1
                and isinstance(node.body[0], ast.Raise)):
            allowed |= {id(n) for n in ast.walk(node.test)}
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_").startswith("check"):
            allowed |= {id(n) for n in ast.walk(node)}
    return allowed


def dispatches(source: str) -> list:
    """Where ``source`` asks which network, router or chapter it holds: ``["line N: …"]``."""
    tree = ast.parse(source)
    own, allowed, found = _defined(tree), _checks_only(tree), []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2
                and id(node) not in allowed):
            classes = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & (FAMILIES | ROUTERS)
            if classes - own:
                found.append(f"line {node.lineno}: isinstance against {sorted(classes - own)}")
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                 for op in node.ops):
            names = _strings(node) & NAMES
            if names:
                found.append(f"line {node.lineno}: compares with {sorted(names)}")
    return found


def test_no_module_asks_which_network_router_or_chapter_it_holds():
    found = {str(path.relative_to(PACKAGE)): hits for path in sorted(PACKAGE.rglob("*.py"))
             if (hits := dispatches(path.read_text()))}
    assert not found, found


def test_the_check_finds_what_it_looks_for():
    bad = ('if isinstance(net, LadderCapsNet) or name == "ladder" or chapter in ("02", "03"): pass\n'
           'label = "RBA" if routing == "dynamic" else routing\n'
           'routers = [DynamicRouter(3) if isinstance(spec, RouterSpec) else spec for spec in specs]\n')
    assert len(dispatches(bad)) == 4 and "LadderCapsNet" in FAMILIES and "DynamicRouter" in ROUTERS
    fine = ('if not isinstance(model, CapsNet):\n    raise ValueError("model must be a CapsNet")\n'
            'def _check_model(model):\n    return isinstance(model, (CapsNet, LadderCapsNet))\n'
            'if isinstance(router, Router) and len(layers) > 1: pass\n')
    assert dispatches(fine) == []
