"""Exercises from master notebooks: ``solutions/NN_topic.ipynb`` → ``exercises/NN_topic.ipynb``.

Used for every chapter's exercise notebook; run as ``capsule-lab assign``.

In a master notebook the code a student must write sits between two marker lines in a code cell::

    def squash(s, dim=-1):
        # BEGIN SOLUTION
        n2 = (s * s).sum(dim=dim, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-12)
        # END SOLUTION

and a written answer between ``<!-- BEGIN SOLUTION -->`` and ``<!-- END SOLUTION -->`` in a markdown
cell. :func:`make_exercise` replaces each region (markers included) by a stub with the region's
indentation:

* inside a function: ``raise NotImplementedError("write your solution here")``;
* elsewhere: ``...  # your code here``, or ``x = ...  # your code here`` for each variable the region
  assigns (so that later cells still parse and refer to the same names);
* in markdown: ``*Your answer here.*``.

A bug hunt gives the student code to fix instead of a stub: a ``# BEGIN GIVEN`` … ``# END GIVEN`` block of
comment lines right after a solution region is what the exercise shows in the region's place, uncommented
(in the master it is only comments, so the master runs its solution)::

    def couplings(logits):
        # BEGIN SOLUTION
        return torch.softmax(logits, dim=-1)
        # END SOLUTION
        # BEGIN GIVEN
        # return torch.softmax(logits, dim=1)
        # END GIVEN

Outputs and execution counts are cleared, execution and widget metadata removed; the notebook-level
metadata (kernel, language) is kept. The result is deterministic: the same master gives a byte-identical
exercise file. Nested or unbalanced markers raise ``ValueError`` naming the cell.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import os
import re
import textwrap
from pathlib import Path

import nbformat
from nbformat import NotebookNode

__all__ = ["make_exercise", "exercise_text", "assign", "is_up_to_date", "out_of_date"]

_CODE_BEGIN = re.compile(r"^(?P<indent>[ \t]*)#\s*BEGIN SOLUTION\b.*$")
_CODE_END = re.compile(r"^[ \t]*#\s*END SOLUTION\b.*$")
_GIVEN_BEGIN = re.compile(r"^[ \t]*#\s*BEGIN GIVEN\b.*$")
_GIVEN_END = re.compile(r"^[ \t]*#\s*END GIVEN\b.*$")
_MD_MARKER = re.compile(r"<!--\s*(BEGIN|END) SOLUTION\s*-->")
_RAISE = 'raise NotImplementedError("write your solution here")'
_ELLIPSIS = "...  # your code here"
_MD_STUB = "*Your answer here.*"
_CELL_METADATA_DROPPED = ("execution", "widgets")


def _solution_regions(lines: list[str], cell_index: int) -> list[tuple[int, int, str]]:
    """(begin line, end line, indentation) of each marked region of a code cell; ValueError if unbalanced."""
    regions, begin = [], None
    for i, line in enumerate(lines):
        m = _CODE_BEGIN.match(line)
        if m:
            if begin is not None:
                raise ValueError(f"cell {cell_index}: nested '# BEGIN SOLUTION' (line {i + 1}, the region "
                                 f"opened on line {begin[0] + 1} is not closed)")
            begin = (i, m.group("indent"))
        elif _CODE_END.match(line):
            if begin is None:
                raise ValueError(f"cell {cell_index}: '# END SOLUTION' on line {i + 1} without a "
                                 "'# BEGIN SOLUTION' before it")
            regions.append((begin[0], i, begin[1]))
            begin = None
    if begin is not None:
        raise ValueError(f"cell {cell_index}: '# BEGIN SOLUTION' on line {begin[0] + 1} is never closed "
                         "by '# END SOLUTION'")
    return regions


def _function_lines(source: str) -> list[tuple[int, int]] | None:
    """1-based (first, last) lines after each ``def`` line up to its last statement; None if no parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spans.append((node.lineno + 1, node.end_lineno))
    return spans


def _inside_def_by_indentation(lines: list[str], begin: int, indent: str) -> bool:
    """Fallback for cells that do not parse (IPython magics): is an enclosing block header a ``def``?"""
    level = len(indent.expandtabs())
    for line in reversed(lines[:begin]):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        width = len(line) - len(line.lstrip())
        if width < level:
            if re.match(r"(async\s+)?def\s", stripped):
                return True
            level = width
            if level == 0:
                return False
    return False


def _assigned_names(region: list[str]) -> list[str]:
    """Variables assigned at the top level of the region's code, in order of first assignment."""
    try:
        tree = ast.parse(textwrap.dedent("\n".join(region)))
    except SyntaxError:
        return []
    names: list[str] = []

    def add(target) -> None:
        if isinstance(target, ast.Name):
            if target.id not in names:
                names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                add(t.value if isinstance(t, ast.Starred) else t)

    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                add(t)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            add(node.target)
    return names


def _given(lines: list[str], start: int, indent: str, cell_index: int) -> tuple[list[str], int] | None:
    """The uncommented lines of a ``# BEGIN GIVEN`` block starting at ``start`` and the line after it, or None."""
    if start >= len(lines) or not _GIVEN_BEGIN.match(lines[start]):
        return None
    given = []
    for i in range(start + 1, len(lines)):
        if _GIVEN_END.match(lines[i]):
            return given, i + 1
        stripped = lines[i].strip()
        if stripped and not stripped.startswith("#"):
            raise ValueError(f"cell {cell_index}: line {i + 1} of a '# BEGIN GIVEN' block is not a comment")
        text = stripped[1:]
        text = text[1:] if text.startswith(" ") else text
        given.append(indent + text if text.strip() else "")
    raise ValueError(f"cell {cell_index}: '# BEGIN GIVEN' on line {start + 1} is never closed by '# END GIVEN'")


def _stub_code(source: str, cell_index: int) -> str:
    lines = source.split("\n")
    regions = _solution_regions(lines, cell_index)
    if not regions:
        return source
    functions = _function_lines(source)
    out: list[str] = []
    position = 0
    for begin, end, indent in regions:
        out.extend(lines[position:begin])
        # the parse tree knows where functions are; the indentation decides for an empty region at the
        # end of a body (after the last statement) and for cells that do not parse (IPython magics)
        in_def = (functions is not None and any(first <= begin + 1 <= last for first, last in functions)) \
            or _inside_def_by_indentation(lines, begin, indent)
        given = _given(lines, end + 1, indent, cell_index)
        if given is not None:
            out.extend(given[0])
            position = given[1]
            continue
        if in_def:
            out.append(indent + _RAISE)
        else:
            names = _assigned_names(lines[begin + 1:end])
            if names:
                out.extend(indent + f"{name} = {_ELLIPSIS}" for name in names)
            else:
                out.append(indent + _ELLIPSIS)
        position = end + 1
    out.extend(lines[position:])
    return "\n".join(out)


def _stub_markdown(source: str, cell_index: int) -> str:
    pieces, position, open_at = [], 0, None
    for m in _MD_MARKER.finditer(source):
        if m.group(1) == "BEGIN":
            if open_at is not None:
                raise ValueError(f"cell {cell_index}: nested '<!-- BEGIN SOLUTION -->' in a markdown cell")
            pieces.append(source[position:m.start()])
            open_at = m.start()
        else:
            if open_at is None:
                raise ValueError(f"cell {cell_index}: '<!-- END SOLUTION -->' without a "
                                 "'<!-- BEGIN SOLUTION -->' before it")
            pieces.append(_MD_STUB)
            open_at = None
        position = m.end()
    if open_at is not None:
        raise ValueError(f"cell {cell_index}: '<!-- BEGIN SOLUTION -->' is never closed")
    pieces.append(source[position:])
    return "".join(pieces)


def _retarget_colab_links(source: str, solutions_name: str, exercises_name: str) -> str:
    """Point "Open in Colab" links at the exercise: ``…/blob/<branch>/solutions/X`` → ``…/exercises/X``."""
    pattern = re.compile(r"(colab\.research\.google\.com/github/[^\s)\]\"']*?/blob/[^/\s)]+/)"
                         + re.escape(solutions_name) + "/")
    return pattern.sub(lambda m: m.group(1) + exercises_name + "/", source)


def make_exercise(nb: NotebookNode, solutions_name: str = "solutions",
                  exercises_name: str = "exercises") -> NotebookNode:
    """The student version of a master notebook (a new notebook; ``nb`` is not changed). Chapters 01–02.

    Replaces every solution region by a stub (see the module docstring), clears outputs and execution
    counts, drops execution-timing and widget metadata, keeps the notebook-level metadata and cell ids.
    The Colab badge of a master (``…/blob/main/solutions/NN_topic.ipynb``) is pointed at the exercise
    (``…/exercises/NN_topic.ipynb``; folder names ``solutions_name``/``exercises_name``), so that every
    notebook's badge opens the notebook itself. Raises ``ValueError`` naming the cell for nested or
    unbalanced markers.
    """
    if not isinstance(nb, dict) or "cells" not in nb:
        raise ValueError("make_exercise expects a notebook (nbformat.NotebookNode with 'cells')")
    ex = copy.deepcopy(nb)
    ex.metadata.pop("widgets", None)
    for index, cell in enumerate(ex.cells):
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(source)
        if cell.cell_type == "code":
            cell.source = _stub_code(source, index)
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "markdown":
            cell.source = _retarget_colab_links(_stub_markdown(source, index), solutions_name, exercises_name)
        for key in _CELL_METADATA_DROPPED:
            cell.get("metadata", {}).pop(key, None)
        if "id" not in cell and (ex.nbformat, ex.nbformat_minor) >= (4, 5):
            # deterministic ids (nbformat would otherwise invent random ones on write)
            cell["id"] = hashlib.sha1(f"{index}:{cell.cell_type}:{cell.source}".encode()).hexdigest()[:8]
    return ex


def exercise_text(solution_path: str | os.PathLike, exercises_name: str = "exercises") -> str:
    """The exact text of the exercise generated from one master notebook (with a trailing newline)."""
    solution_path = Path(solution_path)
    nb = nbformat.read(solution_path, as_version=4)
    text = nbformat.writes(make_exercise(nb, solution_path.resolve().parent.name, exercises_name))
    return text if text.endswith("\n") else text + "\n"


def _pairs(solutions_dir, exercises_dir) -> list[tuple[Path, Path]]:
    solutions = Path(solutions_dir)
    if not solutions.is_dir():
        raise ValueError(f"solutions folder not found: {solutions}")
    return [(p, Path(exercises_dir) / p.name) for p in sorted(solutions.glob("*.ipynb"))]


def out_of_date(solutions_dir="solutions", exercises_dir="exercises") -> list[Path]:
    """Exercise files that differ from what :func:`assign` would write, are missing, or have no master."""
    pairs = _pairs(solutions_dir, exercises_dir)
    name = Path(exercises_dir).resolve().name
    stale = [ex for sol, ex in pairs
             if not ex.is_file() or ex.read_text(encoding="utf8") != exercise_text(sol, name)]
    masters = {ex.name for _, ex in pairs}
    exercises = Path(exercises_dir)
    if exercises.is_dir():
        stale += [p for p in sorted(exercises.glob("*.ipynb")) if p.name not in masters]
    return stale


def is_up_to_date(solutions_dir="solutions", exercises_dir="exercises") -> bool:
    """Whether ``exercises/`` is exactly what ``capsule-lab assign`` would generate from ``solutions/``."""
    return not out_of_date(solutions_dir, exercises_dir)


def assign(solutions_dir="solutions", exercises_dir="exercises", prune: bool = True) -> list[Path]:
    """Generate ``exercises/NN_topic.ipynb`` from every ``solutions/NN_topic.ipynb``. Chapters 01–02.

    Returns the exercise files written (a file already identical to the generated text is left
    untouched, mtime included, and still listed). With ``prune``, exercise notebooks without a master
    are deleted (``exercises/`` holds generated files only).
    """
    pairs = _pairs(solutions_dir, exercises_dir)
    exercises = Path(exercises_dir)
    exercises.mkdir(parents=True, exist_ok=True)
    # every master is converted before anything is written: a bad marker leaves exercises/ untouched
    texts = [(ex, exercise_text(sol, exercises.resolve().name)) for sol, ex in pairs]
    written = []
    for ex, text in texts:
        if not ex.is_file() or ex.read_text(encoding="utf8") != text:
            ex.write_text(text, encoding="utf8", newline="\n")
        written.append(ex)
    if prune:
        masters = {ex.name for ex, _ in texts}
        for p in sorted(exercises.glob("*.ipynb")):
            if p.name not in masters:
                p.unlink()
    return written
