"""Every place a hint or an exercise sends a student in a chapter ("chapter 06, §2 the pruning layer by hand") names a
section by its number and its title, and the title is that section's in the chapter: a hint that cites the wrong
section (06's hints once sent the pruning layer to section 1 and eqs. 2–4 to section 3) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from capsule_lab.grading import TASKS
from capsule_lab.grading.tasks.questions import QUESTIONS

ROOT = Path(__file__).resolve().parents[1]
#: A reference by number alone, which this test cannot check: the hints and exercises name the title too.
BARE = re.compile(r"chapter \d\d, sections? \d")
#: "§N title", the title running to the next ", ; : ( )" or " and §".
SECTION = re.compile(r"§(\d+) (.+?)(?= and §|[,;:()]|\.$|$)")


def headings(chapter: str) -> dict:
    """{number: title} of the chapter's "## N. Title" headings, lower case, without math dollars."""
    path = next((ROOT / "chapters").glob(f"{chapter}_*.ipynb"))
    found = {}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            for m in re.finditer(r"^## (\d+)\. (.*)$", cell.source, re.M):
                found[int(m.group(1))] = m.group(2).replace("$", "").lower()
    return found


def references(text: str) -> list:
    """(chapter, section, title) for every "§N title" in the clause that follows a "chapter NN" in ``text`` (up to
    the next bracket or line end: "chapter 07 … (§3 and §4.1 of the paper)" cites the paper, not the chapter)."""
    found = []
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)          # a Markdown link reads as its text
    for part in re.split(r"(?=chapter \d\d)", text):
        chapter = re.match(r"chapter (\d\d)", part)
        if chapter:
            clause = re.split(r"[()\[\]\n]", part)[0]
            found += [(chapter.group(1), int(m.group(1)), m.group(2).strip().lower()) for m in SECTION.finditer(clause)]
    return found


def _hint_texts() -> list:
    texts = []
    for task_id, task in TASKS.items():
        texts += [(task_id, task.hint), (task_id, task.place_hint or ""), (task_id, task.nonfinite_hint or "")]
        texts += [(task_id, wrong.hint) for wrong in task.wrong_answers]
    texts += [(q.id, " ".join([q.title, *q.rubric])) for q in QUESTIONS.values()]
    return [(where, text) for where, text in texts if text]


def _notebook_texts() -> list:
    texts = []
    for folder in ("exercises", "solutions"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            for cell in nbformat.read(path, as_version=4).cells:
                texts.append((f"{folder}/{path.name}", cell.source))
    return texts


def test_the_parser_reads_numbers_titles_and_chapters():
    assert references("(chapter 06, §3 weights from the code vector and §4 the ladder layer step by step)") == [
        ("06", 3, "weights from the code vector"), ("06", 4, "the ladder layer step by step")]
    assert references("chapter 08, §6 is a difference real?") == [("08", 6, "is a difference real?")]
    assert references("§2 nothing before a chapter") == []
    assert references("taught in chapter 07, the procedure\n(§3 and §4.1 of the paper)") == []
    assert headings("06")[2] == "the pruning layer by hand"
    assert references("Taught in [chapter 08](https://x/08.ipynb), §1 ten routers, one backbone (a router)") == [
        ("08", 1, "ten routers")]


@pytest.mark.parametrize("where, text", _hint_texts() + _notebook_texts())
def test_a_cited_section_is_named_and_is_that_section(where, text):
    assert not BARE.search(text), f"{where}: cite a section as '§N its title', not by number alone"
    for chapter, number, title in references(text):
        actual = headings(chapter).get(number)
        assert actual is not None, f"{where}: chapter {chapter} has no section {number}"
        assert actual.startswith(title), f"{where}: chapter {chapter}, §{number} is '{actual}', not '{title}'"
