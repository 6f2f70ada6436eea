"""capsule_lab.figures and capsule_lab.widgets sit below the studies: they take plain data and import only the core
(capsules, routing, layers, models, training, data), the measures and the evidence, never a chapter's study or the
course's machinery; and each module holds one chapter's pictures (or one idea they share), none over 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import capsule_lab

PACKAGE = Path(capsule_lab.__file__).resolve().parent
#: What figures and widgets may not import: the studies, the bench, the course's machinery and the grader.
ABOVE = {"studies", "course", "grading", "cli"}


def imported(path: Path, text: str | None = None) -> set[str]:
    """The top-level capsule_lab entries ``path`` (or ``text`` as if it were there) imports (``..rem_study`` →
    ``rem_study``)."""
    depth = len(path.relative_to(PACKAGE).parts) - 1
    found = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.ImportFrom) and node.level > depth and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level > depth:
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("capsule_lab."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("capsule_lab."))
    return found


def modules():
    return sorted(p for folder in ("figures", "widgets") for p in (PACKAGE / folder).glob("*.py"))


def test_figures_and_widgets_import_no_study():
    wrong = {str(p.relative_to(PACKAGE)): sorted(n for n in imported(p) if n in ABOVE or n.endswith("_study"))
             for p in modules()}
    assert not {k: v for k, v in wrong.items() if v}, wrong


def test_the_check_can_fail():
    here = PACKAGE / "figures" / "pruning.py"
    assert imported(here, "from ..rem_study import RemRun\nfrom .style import PALETTE") == {"rem_study"}
    assert imported(here, "from .. import studies\nimport capsule_lab.course.smoke") == {"studies", "course"}
    assert "models" in imported(PACKAGE / "figures" / "ladder.py")
    assert "figures" in imported(PACKAGE / "widgets" / "rem.py")


def test_no_figure_or_widget_module_is_over_500_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in modules() if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long
