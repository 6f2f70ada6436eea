"""The notebooks follow the course's conventions (CONTRIBUTING.md): a title cell with objectives, a time
(a chapter: how long it runs; an exercise: only a measured solving time, never a guess) and a Colab badge pointing at
the notebook itself; the shared setup cell installing from the repository set in _config.yml; executed and committed
with outputs; each chapter in the table of contents."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

from capsule_lab.course.profiles import CHAPTER_SETTINGS

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))
ALL = CHAPTERS + SOLUTIONS + EXERCISES


def repository_url() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return config["repository"]["url"].rstrip("/")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_there_are_chapters_and_exercises():
    assert {p.name for p in CHAPTERS} >= {"01_capsules.ipynb", "02_dynamic_routing.ipynb"}
    assert {p.name for p in SOLUTIONS} == {p.name for p in EXERCISES}
    assert {p.name for p in SOLUTIONS} >= {p.name for p in CHAPTERS}


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_title_cell_has_objectives_time_and_colab_badge(path):
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown"
    assert first.source.lstrip().startswith("# "), "the first cell starts with the title"
    assert re.search(r"objectives", first.source, re.I), "learning objectives are stated"
    time = re.search(r"\b\d+\s*(s|min|minutes|h|hours)\b", first.source, re.I)
    if path in CHAPTERS:
        assert time, "a chapter says how long it runs"
    elif time:
        assert re.search(r"measured", first.source, re.I), "an exercise states a time only if it was measured"
    org_repo = repository_url().split("github.com/")[1]
    badge = f"https://colab.research.google.com/github/{org_repo}/blob/main/{rel(path)}"
    assert badge in first.source, f"the Colab badge must open this notebook: {badge}"


@pytest.mark.parametrize("path", ALL, ids=rel)
def test_setup_cell_installs_from_the_configured_repository(path):
    nb = nbformat.read(path, as_version=4)
    setup = nb.cells[1]
    assert setup.cell_type == "code"
    assert 'if "google.colab" in sys.modules:' in setup.source
    assert f"git+{repository_url()}" in setup.source
    assert "setup(" in setup.source, "the setup cell picks the profile and seeds everything"


#: What a chapter reads from the profile when it trains the profile's own CapsNet with its schedule.
PROFILE_TRAINING_FIELDS = re.compile(r"\bprofile\.(capsnet|epochs|train_size|batch_size|lr|data_source|max_shift)\b")


@pytest.mark.parametrize("path", CHAPTERS + EXERCISES + SOLUTIONS, ids=rel)
def test_setup_banner_describes_what_the_chapter_trains(path):
    """setup()'s first line describes the profile's CapsNet and schedule; a chapter that never trains them (it reads
    none of those fields) passes chapter="NN" so the line points to its own settings, and only such a chapter."""
    number = path.name[:2]
    source = "\n".join(c.source for c in code_cells(path))
    uses_profile_network = bool(PROFILE_TRAINING_FIELDS.search(source))
    passes_chapter = f'setup(seed=0, chapter="{number}")' in nbformat.read(path, as_version=4).cells[1].source
    if number in CHAPTER_SETTINGS and number >= "04":
        assert passes_chapter != uses_profile_network, (
            f'{rel(path)}: call setup(seed=0, chapter="{number}") exactly when the chapter does not read '
            "the profile's CapsNet or schedule")
    else:
        assert not passes_chapter


@pytest.mark.parametrize("path", CHAPTERS + SOLUTIONS, ids=rel)
def test_committed_executed_in_order(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    counts = [c.execution_count for c in code]
    assert None not in counts, "every code cell was executed"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), "executed top to bottom, once"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"committed with an error output: {errors[:1]}"
    assert "quick" in "".join(o.get("text", "") for o in code[0].outputs), \
        "committed outputs come from the quick profile"


@pytest.mark.parametrize("path", EXERCISES, ids=rel)
def test_exercises_carry_no_outputs_and_no_solutions(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        assert "BEGIN SOLUTION" not in cell.source and "END SOLUTION" not in cell.source
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None


def test_every_chapter_and_exercise_is_in_the_table_of_contents():
    toc = (ROOT / "_toc.yml").read_text()
    for path in CHAPTERS + EXERCISES:
        assert f"file: {rel(path)[:-len('.ipynb')]}" in toc, f"{rel(path)} missing from _toc.yml"


def code_cells(path: Path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def shows_widget(cell) -> bool:
    return any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in cell.outputs)


@pytest.mark.parametrize("path", CHAPTERS + SOLUTIONS, ids=rel)
def test_test_markers_are_cell_tags_not_comments(path):
    """nbval's markers are tags (invisible in the book), never `# NBVAL_...` comments in the code."""
    for cell in code_cells(path):
        markers = [line for line in cell.source.splitlines() if line.strip().startswith("# NBVAL_")]
        assert not markers, f"use the cell tag, not {markers[0].strip()!r}: {cell.source[:80]!r}"


@pytest.mark.parametrize("path", CHAPTERS + SOLUTIONS, ids=rel)
def test_unstable_widget_cells_are_ignored_by_nbval(path):
    """A widget's output holds a fresh model id on every run: its cell must carry the tag nbval-ignore-output."""
    for cell in code_cells(path):
        if shows_widget(cell):
            assert "nbval-ignore-output" in cell.metadata.get("tags", []), cell.source[:80]


@pytest.mark.parametrize("path", CHAPTERS + SOLUTIONS, ids=rel)
def test_every_output_nbval_ignores_is_checked_another_way(path):
    """An ignored output is a number checked within its band (expect), a widget, or a timing (CONTRIBUTING.md)."""
    for cell in code_cells(path):
        tags = cell.metadata.get("tags", [])
        if "nbval-ignore-output" not in tags:
            continue
        checked = re.search(r"\bexpect(_each)?\(", cell.source)
        assert checked or shows_widget(cell) or "timing" in tags, (
            "a cell whose output nbval ignores must check its numbers with expect(...) or expect_each(...), "
            "show a widget, "
            f"or be tagged 'timing': {cell.source[:80]!r}")
