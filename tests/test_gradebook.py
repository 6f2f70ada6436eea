"""capsule_lab.grading.notebooks.gradebook and ``capsule-lab gradebook`` (issue 48): a class's signed reports as one
row per student with the course's fixed columns, hand-scored points filled into written.csv and merged (refused
where wrong), the Canvas and Moodle imports, the class summary page; the totals are computed here by hand from the
reports' points, not by the module's code."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from capsule_lab.cli import main
from capsule_lab.grading.engine.signing import instructor_key, sign
from capsule_lab.grading.notebooks.folder import write_csv
from capsule_lab.grading.notebooks.gradebook import (DEFAULT_STUDENT, items, read_written_csv, student_of,
                                                     students)
from capsule_lab.grading.tasks import TASKS
from capsule_lab.grading.tasks.questions import QUESTIONS

CHAPTER_05 = [t for t in TASKS.values() if t.chapter == "05"]
CHAPTER_01 = [t for t in TASKS.values() if t.chapter == "01"]


def report(notebook: str, chapter: str, earned: dict | None = None, graded: bool = True, cell_errors: int = 0,
           answers: dict | None = None, hints: dict | None = None) -> dict:
    """A grader's report of ``notebook``: every task of ``chapter`` full marks unless ``earned`` says otherwise."""
    earned = earned or {}
    tasks = {}
    for t in (t for t in TASKS.values() if t.chapter == chapter):
        points = earned.get(t.id, t.points)
        tasks[t.id] = {"points": points, "max_points": t.points, "status": "passed" if points == t.points else "wrong",
                       "passed": points == t.points, "message": "passed" if points == t.points else "wrong value",
                       "hint": (hints or {}).get(t.id, t.hint) if points != t.points else ""}
    written = {q.id: {"title": q.title, "answer": (answers or {}).get(q.id, f"{notebook} on {q.id}"),
                      "status": "answered", "rubric": list(q.rubric), "points": None, "max_points": q.points}
               for q in QUESTIONS.values() if q.id.startswith(chapter + ".")}
    score = sum(v["points"] for v in tasks.values())
    return {"notebook": notebook, "chapter": chapter, "graded": graded,
            "grading_error": None if graded else "the kernel died", "score": score if graded else 5,
            "max_score": sum(v["max_points"] for v in tasks.values()), "tasks": tasks if graded else {},
            "timeout_cells": [], "cell_errors": [{"cell": k} for k in range(cell_errors)], "written": written,
            "sha256": notebook}


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "keys" / "grader.key"
    instructor_key(path)
    return path


def write_reports(folder: Path, key_file: Path, reports: list[dict]) -> None:
    key = instructor_key(key_file)
    folder.mkdir(parents=True, exist_ok=True)
    for r in reports:
        (folder / (Path(r["notebook"]).stem + ".json")).write_text(json.dumps(sign(r, key)))


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf8") as f:
        return list(csv.DictReader(f))


def gradebook(folder, key_file, *args) -> int:
    return main(["gradebook", str(folder), "--key", str(key_file), *args])


# ---------------------------------------------------------------- who is who, and the columns

def test_the_student_comes_from_the_file_name_the_folder_or_the_metadata(tmp_path):
    assert student_of("submissions/alice_01_capsules.ipynb") == "alice"
    assert student_of("submissions/mary_ann_05_rem.ipynb") == "mary_ann"            # up to _NN_
    assert student_of("submissions/05_rem.ipynb") is None
    assert student_of("x/s1234-05_rem.ipynb", r"file:^(s\d+)-") == "s1234"
    assert student_of("x/s1234-05_rem.ipynb", r"file:(?P<id>\d+)-(?P<student>\d\d)") == "05"
    assert student_of("class/bob/05_rem.ipynb", "folder") == "bob"
    nb = tmp_path / "05_rem.ipynb"
    nb.write_text(json.dumps({"metadata": {"capsule_lab": {"student": "carol"}}, "cells": []}))
    assert student_of(str(nb), "metadata:capsule_lab.student") == "carol"
    assert student_of(str(nb), "metadata:capsule_lab.nobody") is None
    for bad in ("file:(", "name", "folder:x", "metadata:"):
        with pytest.raises(ValueError, match="pattern"):
            student_of("a_01_b.ipynb", bad)


def test_two_notebooks_of_one_student_for_one_chapter_or_an_unnamed_one_are_refused():
    with pytest.raises(ValueError, match="two notebooks of one student for one chapter: alice, chapter 05"):
        students([report("a/alice_05_rem.ipynb", "05"), report("b/alice_05_rem.ipynb", "05")])
    with pytest.raises(ValueError, match="names no student in 1 notebook.*05_rem.ipynb"):
        students([report("a/alice_05_rem.ipynb", "05"), report("b/05_rem.ipynb", "05")])


def test_the_columns_are_the_course_s_whatever_the_reports():
    columns = [i.id for i in items(["05", "01"])]
    checked = [t.id for t in CHAPTER_01] + [t.id for t in CHAPTER_05]
    assert [c for c in columns if c in TASKS] == checked                                 # course order
    assert columns[len(CHAPTER_01):][len(CHAPTER_05):] == ["05.flip_entropy.reasoning", "05.what_low_entropy_shows"]
    assert "05.flip_entropy" in columns and "05.flip_entropy.reasoning" in columns      # two ids, two items
    assert len(items()) == len(TASKS) + len(QUESTIONS)
    with pytest.raises(ValueError, match="unknown chapter"):
        items(["09"])


# ---------------------------------------------------------------- the whole loop, by the command line

def class_reports() -> list[dict]:
    return [report("sub/alice_05_rem.ipynb", "05"),
            report("sub/alice_01_capsules.ipynb", "01"),
            report("sub/bob_05_rem.ipynb", "05", earned={"05.class_entropy": 0, "05.global_prune": 1}),
            report("sub/carol_05_rem.ipynb", "05", graded=False),
            report("sub/dave_05_rem.ipynb", "05", cell_errors=2),
            dict(report("sub/dave_99_junk.ipynb", "05", graded=False), chapter=None,
                 grading_error="cannot tell the chapter")]


def test_grade_hand_score_and_export_a_class(tmp_path, key_file, capsys):
    folder = tmp_path / "reports"
    write_reports(folder, key_file, class_reports())
    assert gradebook(folder, key_file, "--chapters", "01", "05", "--export", "canvas", "--html",
                     str(tmp_path / "class.html")) == 0
    written = read_csv(folder / "written.csv")
    # one row per graded notebook and hand-scored item of chapter 05 (carol's was not graded)
    assert [(r["student"], r["item"]) for r in written] == [
        (s, i) for s in ("alice", "bob", "dave") for i in ("05.flip_entropy.reasoning", "05.what_low_entropy_shows")]
    assert all(r["points"] == "" and r["max_points"] in ("1", "2") and r["criteria"].startswith("1. ") for r in written)
    book = {r["student"]: r for r in read_csv(folder / "gradebook.csv")}
    max05 = sum(t.points for t in CHAPTER_05) + 3
    assert book["alice"]["05 checked"] == str(sum(t.points for t in CHAPTER_05)) and book["alice"]["05 total"] == ""
    assert book["alice"]["05 max"] == str(max05) and "05: pending 2" in book["alice"]["status"]
    assert book["alice"]["01 total"] == str(sum(t.points for t in CHAPTER_01))           # no hand-scored items
    assert book["carol"]["05 checked"] == "" and "05: not graded: the kernel died" in book["carol"]["status"]
    assert "01: not submitted" in book["bob"]["status"]
    assert book["dave"]["flags"] == "05: full score with 2 cell errors" and book["alice"]["flags"] == ""
    assert "sub/dave_99_junk.ipynb: not graded: cannot tell the chapter" in book["dave"]["status"]

    # the instructor scores every answer: alice full, bob 0 and 1, dave 1 and 1.5
    given = {("alice", "05.flip_entropy.reasoning"): "1", ("alice", "05.what_low_entropy_shows"): "2",
             ("bob", "05.flip_entropy.reasoning"): "0", ("bob", "05.what_low_entropy_shows"): "1",
             ("dave", "05.flip_entropy.reasoning"): "1", ("dave", "05.what_low_entropy_shows"): "1.5"}
    for r in written:
        r["points"] = given[(r["student"], r["item"])]
    with open(folder / "written.csv", "w", newline="", encoding="utf8") as f:
        writer = csv.DictWriter(f, fieldnames=list(written[0]))
        writer.writeheader()
        writer.writerows(written)
    capsys.readouterr()
    assert gradebook(folder, key_file, "--chapters", "01", "05", "--export", "moodle") == 0
    assert "hand-scored points: 6 entered" in capsys.readouterr().out
    book = {r["student"]: r for r in read_csv(folder / "gradebook.csv")}
    full05 = sum(t.points for t in CHAPTER_05)
    bob_checked = full05 - get_points("05.class_entropy") - (get_points("05.global_prune") - 1)
    assert (book["alice"]["05 total"], book["bob"]["05 total"], book["dave"]["05 total"]) == (
        str(full05 + 3), str(bob_checked + 1), str(full05 + 2.5))
    assert book["bob"]["05.class_entropy"] == "0" and book["bob"]["05.flip_entropy.reasoning"] == "0"
    assert book["alice"]["status"] == "complete" and book["carol"]["05 total"] == ""
    assert [r["points"] for r in read_csv(folder / "written.csv")] == [given[(r["student"], r["item"])]
                                                                       for r in written]    # kept when made again
    moodle = read_csv(folder / "moodle.csv")
    head = f"capsule-lab 05 ({max05} points)"
    assert list(moodle[0]) == ["username", f"capsule-lab 01 ({sum(t.points for t in CHAPTER_01)} points)", head]
    assert {r["username"]: r[head] for r in moodle} == {"alice": str(full05 + 3), "bob": str(bob_checked + 1),
                                                        "carol": "", "dave": str(full05 + 2.5)}
    with open(folder / "canvas.csv", newline="", encoding="utf8") as f:
        canvas = list(csv.reader(f))
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert canvas[1][0].strip() == "Points Possible" and canvas[1][-1] == str(max05)
    assert [row[3] for row in canvas[2:]] == ["alice", "bob", "carol", "dave"]
    assert canvas[2][-1] == ""                      # written before the points: alice's 05 was pending, left blank

    # a resubmitted answer loses its point; per chapter, one row per student and chapter
    reports = class_reports()
    reports[2]["written"]["05.flip_entropy"]["answer"] = "a new answer"
    write_reports(folder, key_file, reports)
    capsys.readouterr()
    assert gradebook(folder, key_file, "--chapters", "01", "05", "--per", "chapter") == 0
    assert "dropped the points of bob, 05.flip_entropy.reasoning" in capsys.readouterr().out
    rows = read_csv(folder / "gradebook.csv")
    assert [(r["student"], r["chapter"]) for r in rows] == [("alice", "01"), ("alice", "05"), ("bob", "05"),
                                                            ("carol", "05"), ("dave", "05")]
    assert rows[2]["total"] == "" and rows[2]["status"] == "pending 1"


def get_points(task_id: str) -> int:
    return TASKS[task_id].points


@pytest.mark.parametrize("points, item, student, why", [
    ("3", "05.what_low_entropy_shows", "alice", "3 points, outside 0 to 2"),
    ("-1", "05.flip_entropy.reasoning", "alice", "outside 0 to 1"),
    ("one", "05.flip_entropy.reasoning", "alice", "'one' is not a number"),
    ("1", "05.flip_entropy.reasoning", "zoe", "no graded notebook of student 'zoe'"),
    ("1", "05.flip_entropy", "alice", "'05.flip_entropy' is no hand-scored item"),
    ("1", "06.gamma_activation.reasoning", "alice", "no hand-scored item of the chosen chapters"),
])
def test_wrong_hand_scored_points_are_refused_with_their_line(tmp_path, key_file, capsys, points, item, student,
                                                              why):
    folder = tmp_path / "reports"
    write_reports(folder, key_file, class_reports())
    assert gradebook(folder, key_file, "--chapters", "01", "05") == 0
    before = (folder / "gradebook.csv").read_text()
    with open(folder / "written.csv", "a", newline="", encoding="utf8") as f:
        csv.writer(f).writerow([student, "x", "05", item, "q", "1", "answered", "", "", "", points, ""])
    capsys.readouterr()
    assert gradebook(folder, key_file, "--chapters", "01", "05") == 2
    err = capsys.readouterr().err
    assert "1 row(s) refused" in err and "line 8" in err and why in err, err
    assert (folder / "gradebook.csv").read_text() == before                              # nothing written


def test_points_given_twice_are_refused(tmp_path, key_file):
    by_student = students(class_reports())
    path = tmp_path / "written.csv"
    rows = [["student", "item", "points"], ["alice", "05.flip_entropy.reasoning", "1"],
            ["alice", "05.flip_entropy.reasoning", "0"]]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(ValueError, match="line 3 .*given twice"):
        read_written_csv(path, by_student, ["05"])


def test_the_grades_csv_has_the_course_s_columns_no_score_when_ungraded_and_flags(tmp_path):
    path = write_csv(class_reports(), tmp_path)
    rows = read_csv(path)
    header = list(rows[0])
    assert header[5:5 + len(TASKS)] == list(TASKS) and header[-1] == "flags"            # every task, always
    carol = next(r for r in rows if "carol" in r["notebook"])
    assert carol["graded"] == "no" and carol["score"] == carol["max_score"] == "" and carol["05.quantize_keys"] == ""
    dave = next(r for r in rows if "dave" in r["notebook"])
    assert dave["flags"] == "full score with 2 cell errors"
    only_01 = read_csv(write_csv([report("sub/alice_01_capsules.ipynb", "01")], tmp_path))
    assert list(only_01[0]) == header                                                      # not the folder's chapters


def test_the_class_summary_names_what_the_class_missed(tmp_path, key_file):
    reports = [report(f"sub/s{k}_05_rem.ipynb", "05", earned={"05.class_entropy": 0},
                      hints={"05.class_entropy": "keys in base 11 collide"}) for k in range(3)]
    reports.append(report("sub/s9_05_rem.ipynb", "05"))
    folder = tmp_path / "reports"
    write_reports(folder, key_file, reports)
    page = tmp_path / "class.html"
    assert gradebook(folder, key_file, "--chapters", "05", "--html", str(page)) == 0
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and '<html lang="en">' in text
    assert "keys in base 11 collide <strong>(3×)</strong>" in text and "1 of 4" in text
    assert "<caption>Chapter 05: the checked tasks (4 graded notebook(s))</caption>" in text


def test_the_default_student_pattern_is_documented_in_the_command():
    assert DEFAULT_STUDENT.startswith("file:")
    with pytest.raises(SystemExit):
        main(["gradebook", "--help"])
