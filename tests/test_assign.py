"""capsule_lab.grading.notebooks.assign: student notebooks from master notebooks (``capsule-lab assign``).

Stubs on small hand-made notebooks (a function body becomes ``raise NotImplementedError``, an assignment
keeps its variable, a markdown answer becomes a placeholder, bad markers raise ``ValueError`` naming the
cell), cleared outputs and metadata, byte-identical output, and the committed ``exercises/`` in sync with
``solutions/``.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from capsule_lab.grading.notebooks.assign import assign, exercise_text, is_up_to_date, make_exercise, out_of_date

ROOT = Path(__file__).resolve().parents[1]


def notebook(*cells, **metadata):
    nb = new_notebook(cells=list(cells), metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                  "language": "python"}, **metadata})
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    return nb


def stub(source: str) -> str:
    return make_exercise(notebook(new_code_cell(source))).cells[0].source


# ---------------------------------------------------------------- code stubs

def test_function_body_becomes_raise_not_implemented():
    source = '''def squash(s, dim=-1):
    """Squash s along dim."""
    # BEGIN SOLUTION
    n2 = (s * s).sum(dim=dim, keepdim=True)
    return n2 / (1 + n2) * s / (n2 + 1e-16) ** 0.5
    # END SOLUTION'''
    assert stub(source) == '''def squash(s, dim=-1):
    """Squash s along dim."""
    raise NotImplementedError("write your solution here")'''


def test_a_bug_hunt_shows_the_given_code_uncommented_in_place_of_the_solution():
    source = '''def couplings(logits):
    # BEGIN SOLUTION
    return torch.softmax(logits, dim=-1)
    # END SOLUTION
    # BEGIN GIVEN
    # c = torch.softmax(logits, dim=1)   # normalised over ...
    #
    #     # an indented comment stays a comment
    # return c
    # END GIVEN


x = couplings(b)'''
    assert stub(source) == '''def couplings(logits):
    c = torch.softmax(logits, dim=1)   # normalised over ...

        # an indented comment stays a comment
    return c


x = couplings(b)'''
    namespace = {}
    exec(source.replace("x = couplings(b)", ""), namespace)      # the master runs its solution


@pytest.mark.parametrize("source", [
    "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n    # BEGIN GIVEN\n    # return 2\n",
    "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n    # BEGIN GIVEN\n    return 2\n    # END GIVEN",
])
def test_a_given_block_must_be_closed_and_only_comments(source):
    with pytest.raises(ValueError, match="GIVEN"):
        stub(source)


def test_region_inside_a_loop_inside_a_function_raises_too():
    source = """def f(xs):
    total = 0
    for x in xs:
        # BEGIN SOLUTION
        total += x
        # END SOLUTION
    return total"""
    assert stub(source) == """def f(xs):
    total = 0
    for x in xs:
        raise NotImplementedError("write your solution here")
    return total"""


def test_empty_region_at_the_end_of_a_body_and_a_method():
    source = """class A:
    def f(self):
        x = 1
        # BEGIN SOLUTION
        # END SOLUTION"""
    assert stub(source).splitlines()[-1] == '        raise NotImplementedError("write your solution here")'


def test_top_level_assignment_keeps_its_variable():
    source = """import torch
# BEGIN SOLUTION
lengths = torch.linalg.vector_norm(
    poses, dim=-1)
# END SOLUTION
print(lengths)"""
    assert stub(source) == """import torch
lengths = ...  # your code here
print(lengths)"""


def test_several_assignments_and_tuple_targets():
    source = """# BEGIN SOLUTION
a, (b, c) = 1, (2, 3)
d: int = 4
a = 5
# END SOLUTION"""
    assert stub(source) == """a = ...  # your code here
b = ...  # your code here
c = ...  # your code here
d = ...  # your code here"""


def test_statement_without_assignment_becomes_ellipsis_with_indentation():
    source = """for i in range(3):
    # BEGIN SOLUTION
    print(i)
    # END SOLUTION
print("done")"""
    result = stub(source)
    assert result == """for i in range(3):
    ...  # your code here
print("done")"""
    ast.parse(result)


def test_several_regions_in_one_cell_and_magics():
    source = """%matplotlib inline
def f(x):
    # BEGIN SOLUTION
    return 2 * x
    # END SOLUTION

# BEGIN SOLUTION
y = f(3)
# END SOLUTION"""
    assert stub(source) == """%matplotlib inline
def f(x):
    raise NotImplementedError("write your solution here")

y = ...  # your code here"""


def test_cells_without_markers_are_kept_verbatim():
    source = "x = 1  # BEGIN SOLUTION is only a marker on its own line\nprint(x)"
    assert stub(source) == source


# ---------------------------------------------------------------- markdown

def test_markdown_answer_becomes_placeholder():
    nb = notebook(new_markdown_cell("Why squash?\n\n<!-- BEGIN SOLUTION -->\nSo that lengths are "
                                    "probabilities.\n<!-- END SOLUTION -->\n\nNext."))
    assert make_exercise(nb).cells[0].source == "Why squash?\n\n*Your answer here.*\n\nNext."


def test_colab_badge_points_at_the_exercise():
    url = "https://colab.research.google.com/github/o/r/blob/main/{}/01_x.ipynb"
    nb = notebook(new_markdown_cell(f"# T\n[![Open In Colab](badge.svg)]({url.format('solutions')})"))
    assert url.format("exercises") in make_exercise(nb).cells[0].source


# ---------------------------------------------------------------- bad markers

@pytest.mark.parametrize("source", [
    "# BEGIN SOLUTION\nx = 1",
    "x = 1\n# END SOLUTION",
    "# BEGIN SOLUTION\n# BEGIN SOLUTION\nx = 1\n# END SOLUTION\n# END SOLUTION",
])
def test_unbalanced_or_nested_code_markers_name_the_cell(source):
    nb = notebook(new_markdown_cell("# T"), new_code_cell("ok = 1"), new_code_cell(source))
    with pytest.raises(ValueError, match="cell 2"):
        make_exercise(nb)


@pytest.mark.parametrize("source", [
    "<!-- BEGIN SOLUTION -->answer",
    "answer<!-- END SOLUTION -->",
    "<!-- BEGIN SOLUTION --><!-- BEGIN SOLUTION -->a<!-- END SOLUTION --><!-- END SOLUTION -->",
])
def test_unbalanced_markdown_markers_name_the_cell(source):
    with pytest.raises(ValueError, match="cell 1"):
        make_exercise(notebook(new_code_cell("x = 1"), new_markdown_cell(source)))


def test_make_exercise_rejects_non_notebooks():
    with pytest.raises(ValueError):
        make_exercise({"not": "a notebook"})


# ---------------------------------------------------------------- outputs, metadata, determinism

def executed_master():
    cell = new_code_cell("def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\nf()", execution_count=3,
                         outputs=[new_output("execute_result", {"text/plain": "1"}, execution_count=3)])
    cell.metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00Z"}
    cell.metadata["tags"] = ["keep-me"]
    other = new_code_cell("print(2)", execution_count=4, outputs=[new_output("stream", name="stdout", text="2\n")])
    nb = notebook(new_markdown_cell("# Exercises — 01 T"), cell, other,
                  widgets={"application/vnd.jupyter.widget-state+json": {"state": {}}})
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def test_outputs_counts_and_metadata_are_cleared_and_the_master_is_untouched():
    master = executed_master()
    snapshot = nbformat.writes(master)
    ex = make_exercise(master)
    assert nbformat.writes(master) == snapshot
    for cell in ex.cells[1:]:
        assert cell.outputs == [] and cell.execution_count is None
        assert "execution" not in cell.metadata
    assert ex.cells[1].metadata["tags"] == ["keep-me"]
    assert "widgets" not in ex.metadata
    assert ex.metadata["kernelspec"]["name"] == "python3" and ex.metadata["language_info"] == {"name": "python"}
    assert [c.id for c in ex.cells] == [c.id for c in master.cells]
    nbformat.validate(ex)


def write_master(folder: Path, name: str = "01_t.ipynb", nb=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    nbformat.write(nb or executed_master(), path)
    return path


def test_assign_is_deterministic_and_leaves_identical_files_alone(tmp_path):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    write_master(solutions)
    written = assign(solutions, exercises)
    assert written == [exercises / "01_t.ipynb"]
    first = written[0].read_bytes()
    assert first.endswith(b"}\n") and first == exercise_text(solutions / "01_t.ipynb").encode()
    os.utime(written[0], ns=(1_000_000_000, 1_000_000_000))
    assert assign(solutions, exercises) == written
    assert written[0].read_bytes() == first and written[0].stat().st_mtime_ns == 1_000_000_000
    assert is_up_to_date(solutions, exercises)


def test_is_up_to_date_notices_edits_missing_and_stale_files(tmp_path):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    write_master(solutions)
    assert not is_up_to_date(solutions, exercises)  # nothing generated yet
    assign(solutions, exercises)
    target = exercises / "01_t.ipynb"
    target.write_text(target.read_text().replace("print(2)", "print(3)"))
    assert out_of_date(solutions, exercises) == [target]
    assign(solutions, exercises)
    stale = exercises / "09_old.ipynb"
    stale.write_text(target.read_text())
    assert out_of_date(solutions, exercises) == [stale]
    assign(solutions, exercises)  # prunes exercises without a master
    assert not stale.exists() and is_up_to_date(solutions, exercises)


def test_a_bad_master_writes_nothing(tmp_path):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    write_master(solutions, "01_good.ipynb")
    write_master(solutions, "02_bad.ipynb", notebook(new_code_cell("# BEGIN SOLUTION\nx = 1")))
    with pytest.raises(ValueError, match="cell 0"):
        assign(solutions, exercises)
    assert not list(exercises.glob("*.ipynb"))


def test_missing_solutions_folder(tmp_path):
    with pytest.raises(ValueError, match="solutions folder not found"):
        assign(tmp_path / "nope", tmp_path / "exercises")


# ---------------------------------------------------------------- the repository's exercises

def test_committed_exercises_are_in_sync_with_the_solutions():
    assert is_up_to_date(ROOT / "solutions", ROOT / "exercises"), \
        f"out of date: {out_of_date(ROOT / 'solutions', ROOT / 'exercises')}; run `capsule-lab assign`"


def test_committed_exercises_parse_and_hold_stubs():
    for path in sorted((ROOT / "exercises").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        for source in code[1:]:  # the setup cell holds IPython magics
            ast.parse(source)
        assert sum('raise NotImplementedError("write your solution here")' in s for s in code) >= 3
