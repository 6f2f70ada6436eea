"""capsule_lab.grading.engine.hidden: the cases ``grade`` draws for each notebook from the instructor's key — the draw
against an HMAC computed here, the cases' shapes and groups against their published twins, and a notebook of answers
pasted for the published cases graded by the real grader (issue 43, item 3: "answers pasted from Colab")."""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
from pathlib import Path

import nbformat
import pytest
import torch

from capsule_lab.grading import check, get_task
from capsule_lab.grading.engine.hidden import HIDDEN_KINDS, draw, hidden_cases, hidden_expected
from capsule_lab.grading.engine.running import expected
from capsule_lab.grading.tasks import TASKS
from capsule_lab.grading.tasks.registry import drawn, drawn_seed, generator

ROOT = Path(__file__).resolve().parents[1]
KEY = bytes(range(32))


def test_the_draw_is_the_hmac_of_the_nonce_under_the_key():
    want = int.from_bytes(hmac.new(KEY, b"hidden cases\0abc", hashlib.sha256).digest()[:8], "big") >> 1
    assert draw(KEY, "abc") == want
    assert draw(KEY, "abd") != want and draw(bytes(32), "abc") != want
    with pytest.raises(ValueError, match="key"):
        draw(b"short", "abc")
    with pytest.raises(ValueError, match="nonce"):
        draw(KEY, "")


def test_a_draw_changes_every_seed_and_only_within_the_block():
    plain = torch.rand(3, generator=generator(7))
    with drawn(5):
        a = torch.rand(3, generator=generator(7))
        with drawn(6):
            b = torch.rand(3, generator=generator(7))
    assert not torch.equal(a, plain) and not torch.equal(a, b)
    assert torch.equal(torch.rand(3, generator=generator(7)), plain)
    with drawn(5):
        assert torch.equal(torch.rand(3, generator=generator(7)), a)        # the same draw: the same numbers
    with pytest.raises(ValueError, match="whole number"):
        with drawn(-1):
            pass


def _tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _numbers(value) -> list:
    """Every number and string in ``value`` (tensors, lists, tuples, dicts by key), in order."""
    if isinstance(value, torch.Tensor):
        return value.double().flatten().tolist()
    if isinstance(value, (tuple, list)):
        return [n for v in value for n in _numbers(v)]
    if isinstance(value, dict):
        return [n for k in sorted(value, key=str) for n in _numbers(value[k])]
    return [value] if isinstance(value, (int, float, str)) else []


#: The experiments and how many of their cases run on drawn seeds (registry.case_seed: every seed but 0).
DRAWN_EXPERIMENTS = {"05.entropy_vs_iterations": 5, "06.activity_under_noise": 3, "07.entropy_vs_lambda": 3,
                     "08.new_router": 2}


@pytest.mark.parametrize("task_id", list(TASKS))
def test_hidden_cases_mirror_the_published_ones_on_other_numbers(task_id):
    task = get_task(task_id)
    number = draw(KEY, "n1")
    hidden = hidden_cases(task, number)
    if task.kind not in HIDDEN_KINDS or (task.kind == "experiment" and task_id not in DRAWN_EXPERIMENTS):
        assert hidden == []                                  # a prediction stays a number; a literal seed stays
        return
    assert hidden, f"{task_id} has no hidden case"
    if task_id in DRAWN_EXPERIMENTS:
        assert len(hidden) == DRAWN_EXPERIMENTS[task_id]
    with drawn(number):
        again = task.cases()
    twins = {a.name: p for a, p in zip(again, task.cases())}              # a twin is at the same place
    for case in hidden:
        assert case.hidden and case.name.startswith("hidden: ")
        twin = twins[case.name[len("hidden: "):]]
        assert case.group == twin.group and case.grad == twin.grad and case.kwargs.keys() == twin.kwargs.keys()
        tensors = list(zip(_tensors(case.args), _tensors(twin.args)))
        assert all(a.shape == b.shape and a.dtype == b.dtype for a, b in tensors)
        assert _numbers(case.args) != _numbers(twin.args) or _numbers(case.kwargs) != _numbers(twin.kwargs)
    again = hidden_cases(task, draw(KEY, "n1"))                           # the nonce and the key redraw them
    assert all(torch.equal(a, b) for x, y in zip(hidden, again) for a, b in zip(_tensors(x.args), _tensors(y.args)))
    assert [c.name for c in again] == [c.name for c in hidden]


def test_a_drawn_seed_is_the_published_one_outside_a_draw_and_another_within():
    assert [drawn_seed(s) for s in (0, 1, 2)] == [0, 1, 2]
    with drawn(5):
        a, b = drawn_seed(1), drawn_seed(2)
        with drawn(6):
            c = drawn_seed(1)
    assert len({a, b, c}) == 3 and min(a, b, c) >= 3 and max(a, b, c) < 2 ** 31
    with drawn(5):
        assert drawn_seed(1) == a                                          # the same draw: the same seed
    assert drawn_seed(1) == 1
    with drawn(0):                                                         # the draw 0 too moves every seed
        assert drawn_seed(0) == 3 and drawn_seed(1) == 3 + 0x9E3779B97F4A7C15 % (2 ** 31 - 4)
    for bad in (-1, 1.0, True, "1"):
        with pytest.raises(ValueError, match="whole number"):
            drawn_seed(bad)


def test_check_redraws_only_an_experiment_s_drawn_cases():
    from capsule_lab.grading.engine.hidden import redrawn_cases

    for task in TASKS.values():
        pairs = redrawn_cases(task, draw(KEY, "check"))
        assert [c.group for c, _ in pairs] == [c.group for c in task.cases()]
        drawn_ones = [c for c, d in pairs if d]
        assert len(drawn_ones) == (DRAWN_EXPERIMENTS.get(task.id, 0)), task.id
        assert all(not c.hidden for c, _ in pairs)


def test_the_hidden_answers_are_the_reference_s_on_the_hidden_inputs():
    task = get_task("01.squash")
    number = draw(KEY, "n2")
    (out,) = hidden_expected([task], number).values()
    for e in out:
        s = e.case.args[0].double()
        n2 = (s * s).sum(dim=e.case.kwargs.get("dim", -1), keepdim=True)        # eq. (1), computed here
        want = n2 / (1 + n2) * s / torch.sqrt(n2).clamp_min(1e-300)
        assert torch.allclose(e.want.outputs[0].double(), want, rtol=1e-5, atol=1e-6), e.case.name


#: Exercise 01's squash as a table: the published inputs' outputs and Jacobians, pasted (base64 of torch.save), as a
#: student who computed them with the package in Colab would.
PASTED_SQUASH = '''import base64, io, torch
_TABLE = torch.load(io.BytesIO(base64.b64decode("{table}")), weights_only=True)
def squash(s, dim=-1):
    for x, d, y, jacobian in _TABLE:
        if d == dim and x.shape == s.shape and x.dtype == s.dtype and torch.equal(x, s.detach()):
            delta = (s - s.detach()).reshape(-1)
            return y + (jacobian.reshape(y.numel(), -1) @ delta).reshape(y.shape)
    return torch.zeros_like(s)
'''


def _pasted_table() -> str:
    from capsule_lab.capsules import squash

    rows = []
    for case in get_task("01.squash").cases():
        s, dim = case.args[0], case.kwargs.get("dim", -1)
        jacobian = torch.autograd.functional.jacobian(lambda x: squash(x, dim), s)
        rows.append((s, dim, squash(s, dim), jacobian))
    buffer = io.BytesIO()
    torch.save(rows, buffer)
    return base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.notebook
def test_answers_pasted_for_the_published_cases_earn_nothing_on_the_hidden_ones(tmp_path):
    from capsule_lab.grading import grade_notebook
    from capsule_lab.grading.engine.checking import check

    table = _pasted_table()
    namespace: dict = {}
    exec(PASTED_SQUASH.format(table=table), namespace)
    assert check("01.squash", namespace["squash"], verbose=False), "the table passes the published cases"
    nb = nbformat.read(ROOT / "solutions" / "01_capsules.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith("def squash")]
    cell.source = PASTED_SQUASH.format(table=table)
    pasted = tmp_path / "pasted" / "01_capsules.ipynb"
    pasted.parent.mkdir()
    nbformat.write(nb, pasted)
    report = grade_notebook(pasted, timeout=120, sandbox=False)
    squash = report["tasks"]["01.squash"]
    assert squash["points"] == 0 and squash["status"] == "wrong", squash
    assert squash["hidden"] == {"cases": 9, "passed": 0} and "drawn for this grading" in squash["message"]
    assert len(report["hidden_draw"]) == 16
    honest = grade_notebook(ROOT / "solutions" / "01_capsules.ipynb", timeout=120, sandbox=False)
    assert honest["tasks"]["01.squash"]["hidden"] == {"cases": 9, "passed": 9} and honest["score"] == 5
    assert honest["hidden_draw"] != report["hidden_draw"]                 # drawn again for every notebook


def _solution_functions(chapter: str) -> dict:
    """The functions of the chapter's solution notebook, defined as the grader's child defines them."""
    from capsule_lab.grading.engine.child import definitions

    nb = nbformat.read(ROOT / "solutions" / next(p.name for p in (ROOT / "solutions").glob(f"{chapter}_*.ipynb")),
                       as_version=4)
    namespace: dict = {"__name__": "__main__"}
    for index, module in definitions([c.source if c.cell_type == "code" else None for c in nb.cells]):
        if type(module.body[0]).__name__ in ("Import", "ImportFrom", "FunctionDef"):
            exec(compile(module, f"<cell {index}>", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("chapter", sorted({t.chapter for t in TASKS.values()}))
def test_the_solutions_pass_the_hidden_cases_of_many_draws(chapter):
    """The solution notebooks (written apart from the references) on eight draws: the hidden cases' tolerances hold
    for a right answer whatever the numbers."""
    from capsule_lab.grading.engine.judging import verdict
    from capsule_lab.grading.engine.running import run_student

    functions = _solution_functions(chapter)
    tasks = [t for t in TASKS.values() if t.chapter == chapter and t.kind in HIDDEN_KINDS and t.kind != "experiment"]
    for nonce in range(8):
        for task_id, cases in hidden_expected(tasks, draw(KEY, f"draw {nonce}")).items():
            task = get_task(task_id)
            got = run_student(task, functions[task.function], cases)
            status, problem, _ = verdict(task, cases, got)
            assert status == "passed", (task_id, nonce, problem)


@pytest.mark.slow
def test_the_solution_passes_the_drawn_seeds_of_two_gradings():
    """08's experiment on the seeds of two gradings' draws (each trains the reference and the solution twice): the
    band holds for a right answer at seeds nobody chose."""
    from capsule_lab.grading.engine.judging import verdict
    from capsule_lab.grading.engine.running import run_student

    functions = _solution_functions("08")
    task = get_task("08.new_router")
    for nonce in range(2):
        (cases,) = hidden_expected([task], draw(KEY, f"draw {nonce}")).values()
        status, problem, _ = verdict(task, cases, run_student(task, functions[task.function], cases))
        assert status == "passed", (nonce, problem)


def test_grade_runs_an_experiment_s_drawn_seeds_instead_of_their_published_twins():
    """08.new_router: seed 0 and the two seeds drawn for the notebook, not seeds 1 and 2 besides (each would train
    the student's router once more); an implementation keeps its published cases beside its hidden ones."""
    from capsule_lab.grading.engine.hidden import graded_cases
    from capsule_lab.grading.engine.running import Expected

    for task_id, kept in (("08.new_router", ["seed 0"]), ("01.squash", None)):
        task = get_task(task_id)
        published = [Expected(c, None, None) for c in task.cases()]
        hidden = [Expected(c, None, None) for c in hidden_cases(task, draw(KEY, "g"))]
        names = [e.case.name for e in graded_cases(task, published, hidden)]
        if kept is None:
            assert names == [e.case.name for e in published + hidden]
        else:
            assert [n.split(" (")[0] for n in names[:1]] == kept and len(names) == 3
            assert all(n.startswith("hidden: seed ") for n in names[1:])


@pytest.mark.parametrize("task_id, points", [("05.entropy_vs_iterations", 0), ("06.activity_under_noise", 1),
                                             ("07.entropy_vs_lambda", 1)])
def test_a_table_of_an_experiment_s_published_answers_passes_seed_0_only(task_id, points):
    """A failing check names the expected number of the case it failed on, so a table of the published cases' answers
    can be gathered (here: the reference's, computed outside the check). Every case on a seed other than 0 runs on a
    seed drawn afresh by each check and by each grading: such a table earns the seed-0 groups only (05 has none: each
    of its groups holds a drawn seed), with or without a fallback for the seeds it does not know."""
    task = get_task(task_id)
    table = {case.args: task.reference(*case.args) for case in task.cases()}
    fallback = sum(table.values()) / len(table)
    for answer in (lambda *args: table[args], lambda *args: table.get(args, fallback)):
        result = check(task_id, answer, verbose=False)
        assert not result.passed and result.points == points, result.message
        assert ", drawn" in result.message
    hidden = hidden_cases(task, draw(KEY, "a notebook"))
    assert len(hidden) == DRAWN_EXPERIMENTS[task_id] and all(c.args not in table for c in hidden)
    assert {c.args[-1] for c in hidden}.isdisjoint({0, 1, 2, 3})


def test_the_seed_blind_answer_script_counts_each_drawn_group(capsys):
    """scripts/seed_blind_answers.py (the instructors' page quotes it): a line per drawn case group, counts within
    the draws; 05's one-iteration case is the same at every seed (uniform couplings), so its spread is 0."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "seed_blind_answers.py"
    spec = importlib.util.spec_from_file_location("seed_blind_answers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["05.entropy_vs_iterations", "07.entropy_vs_lambda", "--draws", "3"])
    lines = capsys.readouterr().out.splitlines()
    groups = ["05.entropy_vs_iterations | " + g for g in ("K = 11", "K = 2", "K = 6 and K = 21")]
    assert [line.split(":")[0] for line in lines] == groups + ["07.entropy_vs_lambda | two drawn seeds"]
    assert all(0 <= int(line.split("passed ")[1].split(" of")[0]) <= 3 for line in lines)
    assert "(1, 6): 0.0000" in lines[0]
    with pytest.raises(SystemExit):
        module.main(["05.flip_entropy"])
