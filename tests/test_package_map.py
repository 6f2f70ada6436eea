"""The package map in capsule_lab's docstring is complete and true: every module is listed, and each imports
only from modules listed above it (the layering the map claims)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import capsule_lab

PACKAGE = Path(capsule_lab.__file__).resolve().parent


def map_rows() -> list[str]:
    """The module names of the map's table, in order."""
    lines = capsule_lab.__doc__.splitlines()
    rules = [k for k, line in enumerate(lines) if line.startswith("=====")]
    assert len(rules) == 3, "the map is one reStructuredText simple table"
    body = "\n".join(lines[rules[1] + 1:rules[2]])
    return re.findall(r"^``(\w+)``", body, flags=re.M)


def top_level(path: Path) -> str:
    """The map entry a file belongs to: ``routing/routers.py`` → ``routing``; ``capsules.py`` → ``capsules``."""
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_entries(path: Path) -> set[str]:
    """The map entries a file imports from (relative imports inside capsule_lab)."""
    tree = ast.parse(path.read_text())
    package_parts = path.relative_to(PACKAGE).parts[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package_parts[:len(package_parts) - (node.level - 1)])
            target = base + (node.module.split(".") if node.module else [])
            names = [target[0]] if target else [a.name for a in node.names]
            found.update(names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("capsule_lab."):
            found.add(node.module.split(".")[1])
    return found


def test_every_module_is_in_the_map_once():
    rows = map_rows()
    assert len(rows) == len(set(rows))
    modules = {top_level(p) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE}
    assert modules == set(rows), (sorted(modules - set(rows)), sorted(set(rows) - modules))


def test_each_module_imports_only_from_modules_above_it():
    order = {name: k for k, name in enumerate(map_rows())}
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == PACKAGE and path.name == "__init__.py":
            continue
        entry = top_level(path)
        for other in imported_entries(path) - {entry}:
            if other in order and order[other] > order[entry]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {other}, listed below {entry}")
    assert not upward, upward


def test_the_map_can_fail():
    # the checker sees a real import: deep_capsnet imports layers, which is listed above models
    assert "layers" in imported_entries(PACKAGE / "models" / "deep_capsnet.py")
    assert "training" in imported_entries(PACKAGE / "widgets" / "poses.py")
    assert "measures" in imported_entries(PACKAGE / "studies" / "bench" / "records.py")     # a sub-package's file
