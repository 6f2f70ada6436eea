"""Every dependency declared in pyproject.toml's ``[project] dependencies`` is imported by capsule_lab.

A dependency nobody imports costs every student an install (issue 13): declare a package in the step that
first uses it. Distribution names are mapped to import names where they differ.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "capsule_lab"

IMPORT_NAMES = {              # distribution name → the top-level module it installs, where they differ
    "pyyaml": "yaml",
    "scikit-learn": "sklearn",
    "pillow": "PIL",
    "ipython": "IPython",
}


def declared() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf8"))["project"]
    return [re.match(r"[A-Za-z0-9._-]+", spec).group(0).lower() for spec in project["dependencies"]]


def imported_modules() -> set[str]:
    """Top-level modules imported anywhere in capsule_lab/, at module level or inside functions."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def import_name(distribution: str) -> str:
    return IMPORT_NAMES.get(distribution, distribution.replace("-", "_"))


def test_every_declared_dependency_is_imported():
    modules = imported_modules()
    unused = [d for d in declared() if import_name(d) not in modules]
    assert not unused, (f"declared in pyproject.toml [project] dependencies but imported nowhere in capsule_lab/: "
                        f"{unused}; remove them, or add them with the code that uses them")


def test_the_scan_finds_known_imports():
    modules = imported_modules()
    assert {"torch", "numpy", "matplotlib"} <= modules
    assert import_name("PyYAML".lower()) == "yaml" and import_name("torch") == "torch"
