"""capsule_lab has no import circle: the graph of its modules' imports has no cycle (issue 41).

The graph is read from the source files' syntax trees, not from a running interpreter, so that an import inside a
function — the usual way a circle is hidden: it runs only when called, after both modules loaded — counts like one
at the top of its module. A node is a module (a package is its ``__init__.py``); an edge goes from a module to each
module of ``capsule_lab`` it imports: ``import capsule_lab.x.y``, ``from capsule_lab.x import y`` and the relative
forms (``from . import y``, ``from ..x import name``), wherever they stand. ``from P import n`` points at ``P.n`` when
``P.n`` is a module, else at ``P``. An import's target is the module it names, not the packages above it: Python runs
those first, but a package that re-exports the names of its own modules would otherwise close a circle with each of
them (``grading/__init__.py`` imports ``grading.engine.checking``, which lives inside ``grading``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import capsule_lab

PACKAGE = Path(capsule_lab.__file__).resolve().parent


def module_names(package: Path = PACKAGE, root: str = "capsule_lab") -> dict[str, Path]:
    """``{dotted module name: source file}`` for every ``.py`` file under ``package``."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((root, *parts))] = path
    return out


def _target(dotted: str, known: set[str]) -> str | None:
    """The module ``dotted`` names, or the nearest module above it (``pkg.module.name`` → ``pkg.module``)."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in known:
            return ".".join(parts[:k])
    return None


def imports_of(name: str, source: str, known: set[str], is_package: bool = False) -> set[str]:
    """The modules of ``known`` that module ``name`` (a package if ``is_package``), whose source is ``source``,
    imports anywhere in its code; ``name`` itself is left out."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    root = name.split(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                module = ".".join(base + (node.module.split(".") if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" for alias in node.names] or [module]
        else:
            continue
        for target in targets:
            if target == root or target.startswith(root + "."):
                resolved = _target(target, known)
                if resolved is not None:
                    found.add(resolved)
    found.discard(name)
    return found


def import_graph(package: Path = PACKAGE, root: str = "capsule_lab") -> dict[str, set[str]]:
    """``{module: the modules of the package it imports}`` for the whole package."""
    files = module_names(package, root)
    known = set(files)
    return {name: imports_of(name, path.read_text(encoding="utf8"), known, path.name == "__init__.py")
            for name, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """Each import circle of ``graph``: for every strongly connected component that has one (Tarjan's algorithm), the
    shortest way around it from its first module, with that module repeated at the end (``[a, b, a]``), and all the
    component's modules (those of every circle it holds); sorted, so that the output is stable."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                components.append(set(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted((_way_around(graph, c), sorted(c)) for c in components)


def _way_around(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest path through ``component`` from its first module (by name) back to it."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:                                  # breadth first: the shortest way around
        v = queue.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def described(found: list[tuple[list[str], list[str]]]) -> str:
    """One line per circle: the way around, then every module caught in it."""
    return "\n".join(f"{' → '.join(way)}   (the circle's modules: {', '.join(members)})" for way, members in found)


def test_the_package_has_no_import_circle():
    found = circles(import_graph())
    assert not found, ("import circles in capsule_lab (an import inside a function counts too): move what both "
                       "modules need to the module it belongs to\n" + described(found))


#: The layers of ``capsule_lab.grading``, lowest first (its docstring): each imports only from itself and those before.
GRADING_LAYERS = ("tasks", "engine", "notebooks")


def test_the_grading_layers_import_only_downward():
    """tasks ← engine ← notebooks: the task content knows no engine, the engine no notebooks; and no module inside
    imports the package ``capsule_lab.grading`` itself (its ``__init__`` re-exports from all three)."""
    upward = []
    for module, imported in import_graph().items():
        parts = module.split(".")
        if parts[:2] != ["capsule_lab", "grading"] or len(parts) < 3:
            continue
        rank = GRADING_LAYERS.index(parts[2])
        for other in imported:
            other_parts = other.split(".")
            if other_parts[:2] != ["capsule_lab", "grading"]:
                continue
            if len(other_parts) < 3 or GRADING_LAYERS.index(other_parts[2]) > rank:
                upward.append(f"{module} imports {other}")
    assert not upward, upward


def test_the_checker_can_fail():
    """A tiny fake graph with two circles: a → b → c → a (b ↔ x in the same component) and a module that imports
    itself; the acyclic rest (d, f) is no circle."""
    graph = {"a": {"b"}, "b": {"c", "x"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}, "x": {"b"}}
    found = circles(graph)
    assert found == [(["a", "b", "c", "a"], ["a", "b", "c", "x"]), (["e", "e"], ["e"])]
    assert "a → b → c → a   (the circle's modules: a, b, c, x)" in described(found)
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_reader_sees_every_form_of_import(tmp_path):
    """Relative and absolute imports, ``from P import module`` and ``from P import name``, and imports inside a
    function are all edges; other packages' imports are not."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .a import f\n")
    (package / "a.py").write_text("import os\nfrom . import b\n\ndef f():\n    from .sub import c\n")
    (package / "b.py").write_text("import pkg.sub.c as c\nfrom torch import nn\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("from ..a import f\nfrom pkg import b\nfrom .. import a\n")
    graph = import_graph(package, "pkg")
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b", "pkg.sub.c"}, "pkg.b": {"pkg.sub.c"},
                     "pkg.sub": set(), "pkg.sub.c": {"pkg.a", "pkg.b"}}
    # the shortest way around goes through the import inside a function
    assert circles(graph) == [(["pkg.a", "pkg.sub.c", "pkg.a"], ["pkg.a", "pkg.b", "pkg.sub.c"])]


def test_checking_and_grading_start_without_scipy_or_plotting():
    """Every check a student runs, every kernel the grader starts and every evaluation process imports
    ``capsule_lab.grading``: SciPy (~0.7 s to import, the statistics of the verdict tables) and the plotting and
    notebook libraries load where they are used, not on that path."""
    import subprocess
    import sys

    code = ("import sys, capsule_lab.grading, capsule_lab.grading.engine.child; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'scipy', 'matplotlib', 'pandas', 'captum', "
            "'statsmodels', 'nbclient'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
