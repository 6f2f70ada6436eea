"""Every chapter's exercise asks for thinking, not transcription (CONTRIBUTING.md, "What an exercise asks").

For each chapter with an exercise:
- at least three graded tasks, among them a prediction, a bug hunt and a mini-experiment (``Task.kind``);
- a prediction and a mini-experiment return a number and state their band (``atol`` or ``rtol``);
- a bug hunt's exercise cell holds given code (a ``# BEGIN GIVEN`` block), and that code, run as the
  student's answer, fails the task with the hint of one of its known mistakes;
- no task's solution appears in a chapter cell or a code block of its text (all its lines, in order, in
  one place, comments and spacing aside): nothing to copy;
- the exercise's code outside the student's functions imports nothing the tasks refuse;
- a task with several case groups names each group in the exercise's text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from capsule_lab.grading import TASKS, check, tasks_for_chapter
from capsule_lab.grading.tasks import KINDS

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.name[:2] for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
SOLUTION = re.compile(r"#\s*BEGIN SOLUTION[^\n]*\n(.*?)\n[ \t]*#\s*END SOLUTION", re.S)
GIVEN = re.compile(r"#\s*BEGIN GIVEN[^\n]*\n(.*?)\n[ \t]*#\s*END GIVEN", re.S)


def notebook(folder: str, chapter: str):
    return nbformat.read(next((ROOT / folder).glob(f"{chapter}_*.ipynb")), as_version=4)


def significant(code: str) -> list[str]:
    """The lines of ``code`` that carry meaning, without comments and spaces (blank, comment and docstring
    quote lines dropped), so that a copy with other comments or spacing is still a copy."""
    lines = []
    for line in code.splitlines():
        text = re.sub(r"\s+#.*$", "", line).strip()
        if text and not text.startswith(("#", '"""', "'''")):
            lines.append(re.sub(r"\s+", "", text))
    return lines


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_three_kinds_of_task(chapter):
    tasks = tasks_for_chapter(chapter)
    kinds = {t.kind for t in tasks}
    assert len(tasks) >= 3 and {"prediction", "bug hunt", "experiment"} <= kinds, (chapter, kinds)
    assert kinds <= set(KINDS)
    for t in tasks:
        if t.kind in ("prediction", "experiment"):
            assert t.returns_number and (t.atol is not None or t.rtol is not None), t.id


def _defined(source: str, filename: str) -> dict:
    """Run a cell's ``source`` as a notebook does, its source readable by inspect (IPython keeps each cell in
    linecache), and return what it defined."""
    import linecache
    namespace: dict = {}
    exec("import torch\nimport torch.nn.functional as F\nfrom math import comb\n", namespace)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_second_hint_describes_the_function_in_front_of_it(chapter):
    """A bug hunt's second hint is the place hint while the given code's planted lines are all there, names the
    planted lines left once some are fixed, and names no line once none is left — the solution, and the solution
    with a new mistake of the student's own (one more iteration, or any edit), get NO_LINE_HINT."""
    from capsule_lab.grading.engine.checking import NO_LINE_HINT, _code, second_hint
    master = notebook("solutions", chapter)
    for task in [t for t in tasks_for_chapter(chapter) if t.kind == "bug hunt"]:
        given_cell = next(c.source for c in notebook("exercises", chapter).cells
                          if c.cell_type == "code" and f"def {task.function}(" in c.source)
        assert all(_code(line) in _code(given_cell) for line, _ in task.planted), f"{task.id}: planted lines"
        given = _defined(given_cell, f"<given {task.id}>")[task.function]
        assert second_hint(task, given) == task.place_hint
        solved_cell = next(c.source for c in master.cells if c.cell_type == "code" and f"def {task.function}(" in c.source)
        solved = _defined(solved_cell, f"<solved {task.id}>")[task.function]
        assert second_hint(task, solved) == NO_LINE_HINT
        if len(task.planted) > 1:                   # one planted line fixed: the hint names the other, only it
            line, where = task.planted[0]
            fixed_one = given_cell.replace(line, solved_line(solved_cell, line))
            hint = second_hint(task, _defined(fixed_one, f"<half {task.id}>")[task.function])
            assert where not in hint and task.planted[1][1] in hint and hint.startswith("1 of the given code's")
    assert second_hint(TASKS["02.dynamic_routing"], lambda votes: votes) == NO_LINE_HINT     # no readable source


def solved_line(solved_cell: str, planted: str) -> str:
    """The solution's line that takes the place of the planted ``planted`` (the one assigning the same name)."""
    target = planted.split("=")[0].strip()
    block = SOLUTION.search(solved_cell).group(1)
    return next(line.strip().split("#")[0].rstrip() for line in block.splitlines()
                if "=" in line and target in [x.strip() for x in line.split("=")[0].split(",")])


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_bug_hunt_shows_the_symptom_never_the_fix_or_the_line(chapter, monkeypatch):
    """The exercise's given (buggy) function, checked as it stands: the first message gives the failing case with
    expected against got, and names no known mistake, no line of the given code and no line of the solution; after
    PLACE_HINT_AFTER failed checks the second hint narrows the place, still naming neither."""
    import capsule_lab.grading.engine.checking as checking
    from capsule_lab.grading.engine.judging import BUG_HUNT_HINT

    monkeypatch.setattr(checking, "_FAILED_CHECKS", {})
    master = notebook("solutions", chapter)
    for task in [t for t in tasks_for_chapter(chapter) if t.kind == "bug hunt"]:
        cells = [c.source for c in master.cells if c.cell_type == "code" and f"def {task.function}(" in c.source]
        assert cells and GIVEN.search(cells[0]), f"{task.id}: no '# BEGIN GIVEN' block in the master's cell"
        given_cell = next(c.source for c in notebook("exercises", chapter).cells
                          if c.cell_type == "code" and f"def {task.function}(" in c.source)
        namespace = _defined(given_cell, f"<given {task.id}>")
        lines = [line for line in significant(GIVEN.search(cells[0]).group(1).replace("#", "", 1))
                 + [x for block in SOLUTION.findall(cells[0]) for x in significant(block)] if len(line) > 12]
        for attempt in range(1, checking.PLACE_HINT_AFTER + 1):
            message = check(task.id, namespace[task.function], verbose=False).message
            squeezed = re.sub(r"\s+", "", message)
            assert "expected" in message and "got" in message and BUG_HUNT_HINT in message, message
            assert not [w.label for w in task.wrong_answers if w.hint in message], (task.id, message)
            assert not [line for line in lines if line in squeezed], (task.id, message)
            assert (task.place_hint in message) == (attempt >= checking.PLACE_HINT_AFTER), (task.id, attempt, message)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_solution_can_be_copied_from_the_chapter(chapter):
    chapter_cells = []           # the chapter's code cells and the code blocks of its text
    for c in notebook("chapters", chapter).cells:
        blocks = [c.source] if c.cell_type == "code" else re.findall(r"```[a-z]*\n(.*?)```", c.source, re.S)
        chapter_cells += [significant(b) for b in blocks]
    for cell in notebook("solutions", chapter).cells:
        for block in SOLUTION.findall(cell.source) if cell.cell_type == "code" else []:
            lines = significant(block)
            if len(lines) < 2:
                continue
            for source in chapter_cells:
                positions = [source.index(line) if line in source else -1 for line in lines]
                assert -1 in positions or positions != sorted(positions), \
                    f"chapter {chapter}: a solution is in a chapter cell word for word:\n" + "\n".join(lines)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_exercise_imports_nothing_that_solves_a_task(chapter):
    refused = {fn.__name__ for t in tasks_for_chapter(chapter) for fn in t.refused}
    for cell in notebook("exercises", chapter).cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("capsule_lab"):
                names = {a.name for a in node.names} & refused
                assert not names, f"exercise {chapter} imports {names}, which solve a task"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_case_group_is_named_in_the_exercise(chapter):
    text = "\n".join(c.source for c in notebook("exercises", chapter).cells if c.cell_type == "markdown")
    for task in tasks_for_chapter(chapter):
        groups = task.groups()
        if len(groups) > 1:
            missing = [g for g in groups if g not in text]
            assert not missing, f"{task.id}: the exercise does not name the case groups {missing}"


EXPERIMENTS = [t.id for t in TASKS.values() if t.kind == "experiment" and t.id not in ("04.revival", "08.new_router")]


@pytest.mark.parametrize("task_id", EXPERIMENTS)
def test_an_experiment_refuses_its_plausible_wrong_variants(task_id):
    """Each mini-experiment's band tells right from wrong: every registered wrong variant (a step of the experiment
    done the other plausible way) misses the band on at least one case of every case group, so it earns nothing.
    (04.revival and 08.new_router train networks: tests/test_tasks_04.py and test_tasks_08.py run theirs.)"""
    from capsule_lab.grading.engine.judging import credit
    from capsule_lab.grading.engine.running import evaluate, expected

    task = TASKS[task_id]
    cases = expected(task)
    assert task.wrong_answers, task_id
    for wrong in task.wrong_answers:
        got = [evaluate(task, wrong.fn, e.case, None, student=False) for e in cases]
        fraction, failed = credit(task, cases, got)
        assert fraction == 0, (task_id, wrong.label, failed)


#: Each bug hunt's two planted bugs, as (the given line's code, the fix): the first shows on the first check, the
#: second only on some of the cases, so that finding it takes a small experiment (issue 32).
PLANTED = {
    "05": (("p = counts / counts.sum()", "p = counts / counts.sum(dim=1, keepdim=True).clamp_min(1)"),
           ("key_id = keys @ 10 ** torch.arange(keys.shape[1])",
            "_, key_id = torch.unique(keys, dim=0, return_inverse=True)")),
    "06": (('regression, s / length)', 'regression, s)'),
           (".mean(dim=-1).squeeze()", ".mean(dim=-1)")),
    "07": (("c = torch.softmax(r, dim=-1)", "c = torch.softmax(r, dim=1)"),
           ("c = torch.full((B, I, J), 1.0 / I)", "c = torch.full((B, I, J), 1.0 / I, dtype=votes.dtype)")),
    "08": (("n = len(correct_a)", "n = b + c"),
           ("range(b + 1)", "range(min(b, c) + 1)")),
}


def _given_with(chapter: str, task, fixed: tuple) -> dict:
    """The exercise's given function with the planted bugs of index ``fixed`` fixed, in a fresh namespace."""
    source = next(c.source for c in notebook("exercises", chapter).cells
                  if c.cell_type == "code" and f"def {task.function}(" in c.source)
    for index in fixed:
        bug, fix = PLANTED[chapter][index]
        assert source.count(bug) == 1, (task.id, bug)
        source = source.replace(bug, fix)
    namespace: dict = {}
    exec("import torch\nfrom math import comb\n" + source, namespace)
    return namespace[task.function]


@pytest.mark.parametrize("chapter", sorted(PLANTED))
def test_a_bug_hunt_plants_two_bugs_that_are_no_registered_mistake(chapter):
    """Each planted bug alone fails the task and behaves like none of the task's registered known mistakes (so no
    hint could ever name it); the second one gives the right answer on some cases and a wrong one on others; both
    fixed, the function passes."""
    from dataclasses import replace

    from capsule_lab.grading.engine.judging import credit, verdict
    from capsule_lab.grading.engine.running import expected, run_student

    (task,) = [t for t in tasks_for_chapter(chapter) if t.kind == "bug hunt"]
    assert len(PLANTED) == len({t.chapter for t in TASKS.values() if t.kind == "bug hunt" and t.chapter >= "05"})
    as_implementation = replace(task, kind="implement")  # the verdict looks for known mistakes again
    cases = expected(task)
    for index in (0, 1):
        fn = _given_with(chapter, task, fixed=(1 - index,))
        got = run_student(task, fn, cases)
        fraction, failed = credit(task, cases, got)
        status, problem, hint = verdict(as_implementation, cases, got)
        assert status in ("wrong", "error") and problem, (task.id, index)
        assert hint in (task.hint, task.nonfinite_hint), (task.id, index, hint)
        if index == 1:  # right on some cases, wrong on others: comparing them is the experiment that locates it
            right = [e.case.name for e, g in zip(cases, got) if not credit(task, [e], [g])[1]]
            assert failed and right, (task.id, failed)
    assert check(task.id, _given_with(chapter, task, fixed=(0, 1)), verbose=False).passed


def _task_sections(chapter: str) -> dict[str, str]:
    """The markdown of each task of the exercise (from its '## Task' heading to the next heading of that level), by
    the id its check cell names."""
    sections, text, checked = {}, None, None
    for cell in [*notebook("exercises", chapter).cells, nbformat.v4.new_markdown_cell("## end")]:
        if cell.cell_type == "markdown" and cell.source.startswith("## "):
            if text is not None and checked:
                sections[checked] = "\n".join(text)
            text, checked = ([cell.source], None) if cell.source.startswith("## Task") else (None, None)
        elif text is not None and cell.cell_type == "markdown":
            text.append(cell.source)
        elif text is not None and checked is None:
            found = re.search(r"check\(\"(\d\d\.[a-z0-9_]+)\"", cell.source)
            checked = found.group(1) if found else None
    return sections


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_task_states_what_of_the_package_it_may_call_and_what_it_returns(chapter):
    """The rules are in the text before they are enforced (issue 32): what the function may call of the package,
    and what it returns — a dtype for a tensor, "a number" for a prediction or a measurement."""
    tasks = tasks_for_chapter(chapter)
    sections = _task_sections(chapter)
    assert set(sections) == {t.id for t in tasks}, chapter
    for task in tasks:
        text = sections[task.id]
        assert "**What of the package it may call:**" in text, task.id
        if task.returns_number:
            assert re.search(r"\bnumber\b", text), task.id
        else:
            assert re.search(r"float32|float64|int64|\bbool\b|dtype|float tensor|'s dtype", text), task.id
