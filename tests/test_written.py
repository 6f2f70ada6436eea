"""Written answers (capsule_lab.grading.tasks.questions, capsule_lab.grading.notebooks.written): the reasoning behind
each prediction and each exercise's written question are found by their cell metadata, recorded with their rubric and
never scored."""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest

from capsule_lab.grading import TASKS
from capsule_lab.grading.notebooks.written import PLACEHOLDER, write_written, written_answers
from capsule_lab.grading.tasks.questions import QUESTIONS, Question, questions_for_chapter, register_questions

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted({q.chapter for q in QUESTIONS.values()})


def notebook(folder: str, chapter: str):
    return nbformat.read(next((ROOT / folder).glob(f"{chapter}_*.ipynb")), as_version=4)


def test_chapters_05_to_08_each_have_a_written_question_and_the_reasoning_of_every_prediction():
    assert CHAPTERS == ["05", "06", "07", "08"]
    for chapter in CHAPTERS:
        ids = {q.id for q in questions_for_chapter(chapter)}
        predictions = {t.id for t in TASKS.values() if t.chapter == chapter and t.kind == "prediction"}
        assert predictions < ids, (chapter, ids)           # each prediction's reasoning, and at least one question
        assert all(q.rubric and q.points > 0 for q in questions_for_chapter(chapter))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_question_has_one_cell_in_the_master_and_the_exercise(chapter):
    for folder in ("solutions", "exercises"):
        cells = [c for c in notebook(folder, chapter).cells
                 if c.cell_type == "markdown" and c.metadata.get("capsule_lab", {}).get("written")]
        assert sorted(c.metadata["capsule_lab"]["written"] for c in cells) == \
            sorted(q.id for q in questions_for_chapter(chapter)), (folder, chapter)
        if folder == "exercises":  # the model answer is gone, the placeholder is there
            assert all(PLACEHOLDER in c.source and "BEGIN SOLUTION" not in c.source for c in cells)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_answers_are_read_from_the_cells_that_carry_their_question(chapter):
    master = written_answers(notebook("solutions", chapter), chapter)
    assert {w["status"] for w in master.values()} == {"answered"} and all(w["points"] is None for w in master.values())
    assert not any("BEGIN SOLUTION" in w["answer"] or w["answer"].startswith("**Your") for w in master.values())

    exercise = notebook("exercises", chapter)
    assert {w["status"] for w in written_answers(exercise, chapter).values()} == {"empty"}
    cells = [c for c in exercise.cells if c.metadata.get("capsule_lab", {}).get("written")]
    first = cells[0].metadata["capsule_lab"]["written"]
    cells[0].source = cells[0].source.replace(PLACEHOLDER, "Because the bins sit at 0.5.\n\nSecond paragraph.")
    moved = copy.deepcopy(cells[-1])
    cells[-1].metadata.pop("capsule_lab")                    # a student who pasted the cell anew lost its metadata
    got = written_answers(exercise, chapter)
    assert got[first]["status"] == "answered"
    assert got[first]["answer"] == "Because the bins sit at 0.5.\n\nSecond paragraph."
    last = moved.metadata["capsule_lab"]["written"]
    assert got[last]["status"] == "missing" and got[last]["answer"] == ""
    assert got[first]["rubric"] == list(QUESTIONS[first].rubric) and got[first]["max_points"] == QUESTIONS[first].points


def test_written_md_gathers_each_question_with_its_rubric_then_every_answer(tmp_path):
    qid = "05.flip_entropy"
    reports = [
        {"notebook": "b.ipynb", "written": {qid: {"title": "T", "answer": "line one\n\nline two", "status": "answered",
                                                  "rubric": ["first", "second"], "points": None, "max_points": 1}}},
        {"notebook": "a.ipynb", "written": {qid: {"title": "T", "answer": "", "status": "missing",
                                                  "rubric": ["first", "second"], "points": None, "max_points": 1}}},
    ]
    text = write_written(reports, tmp_path).read_text()
    assert f"## {qid}.reasoning — T (1 point)" in text                       # the reasoning, not the number and "1. first\n2. second" in text
    assert text.index("### a.ipynb") < text.index("### b.ipynb")
    assert "*No answer (missing).*" in text and "> line one\n>\n> line two" in text
    assert write_written([{"notebook": "c.ipynb", "written": {}}], tmp_path / "none") is None


@pytest.mark.parametrize("question, message", [
    (Question("5.x", "t", ("r",)), "expected 'NN.name'"),
    (Question("05.flip_entropy", "t", ("r",)), "registered twice"),
    (Question("05.new_one", "t", ()), "at least one criterion"),
    (Question("05.new_one", "t", ("",)), "at least one criterion"),
    (Question("05.new_one", "t", ("r",), points=0), "positive integer"),
])
def test_a_question_is_checked_when_registered(question, message):
    before = dict(QUESTIONS)
    with pytest.raises(ValueError, match=message):
        register_questions(question)
    assert QUESTIONS == before
