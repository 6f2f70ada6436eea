"""Chapter 08's graded tasks (the routing bench): their points and kinds, the references against independent
computations (the mean and standard error by the statistics module, McNemar's exact test by SciPy's binomial test,
the prediction by hand, the sharpened router written again with einsum), the experiment's band measured again over
seeds 0, 1 and 2, the known mistakes each must catch with its hint (the bug hunt's planted bug among them), and a
planted wrong answer in the graded solution notebook losing exactly its task's points."""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
import torch
from scipy.stats import binomtest

from capsule_lab.grading import check, grade_notebook, tasks_for_chapter
from capsule_lab.grading.engine import checking as checking_module
from capsule_lab.grading.engine.judging import credit
from capsule_lab.grading.engine.running import expected, run_student
from conftest import CHECK_DRAW
from capsule_lab.grading.tasks import get_task

from _wrong_answers import assert_fails_with_hint

ROOT = Path(__file__).resolve().parents[1]
POINTS = {"08.summary": 2, "08.mcnemar": 2, "08.predict_p_value": 1, "08.new_router": 2}
KINDS = {"08.summary": "implement", "08.mcnemar": "bug hunt", "08.predict_p_value": "prediction",
         "08.new_router": "experiment"}


def test_the_chapters_tasks_and_points():
    assert {t.id: t.points for t in tasks_for_chapter("08")} == POINTS
    assert {t.id: t.kind for t in tasks_for_chapter("08")} == KINDS


# --- independent computations --------------------------------------------------------------------------

def _mean_se(records, router, measure, ddof=1, divide=math.sqrt, every_router=False, none_as_zero=False,
             single=math.nan):
    rows = [r for r in records if every_router or r["router"] == router]
    values = [r.get(measure) for r in rows]
    values = [0.0 if v is None else v for v in values] if none_as_zero else [v for v in values if v is not None]
    mean = statistics.fmean(values)
    if len(values) == 1:
        se = single if ddof == 1 else 0.0
    elif len(values) - ddof <= 0:
        se = math.nan
    else:
        sd = statistics.stdev(values) if ddof == 1 else statistics.pstdev(values)
        se = sd / divide(len(values))
    return torch.tensor(mean, dtype=torch.float64), torch.tensor(se, dtype=torch.float64)


def test_summary_reference_is_the_statistics_module():
    task = get_task("08.summary")
    for case in task.cases():
        mean, se = task.reference(*case.args)
        want_mean, want_se = _mean_se(*case.args)
        assert mean.dtype == se.dtype == torch.float64 and mean.shape == se.shape == ()
        assert math.isclose(mean.item(), want_mean.item(), rel_tol=1e-12), case.name
        records, router, measure = case.args
        if sum(r["router"] == router and r.get(measure) is not None for r in records) == 1:
            assert math.isnan(se.item()) and math.isnan(want_se.item()), case.name
        else:
            assert math.isclose(se.item(), want_se.item(), rel_tol=1e-10), case.name
            assert se.item() > 0, case.name


def test_summary_reference_agrees_with_the_shipped_bench():
    """On the bench's own records (as many as are cached), the reference is summarize_records's mean and se."""
    from capsule_lab.course.profiles import chapter_settings
    from capsule_lab.studies.bench.runner import SHIPPED_CACHE, run_router_bench, summarize_records
    from capsule_lab.studies.bench.records import record_key

    settings = chapter_settings("08", "quick")
    present = [(n, s) for n in settings.routers for s in settings.seeds
               if (SHIPPED_CACHE / f"{record_key(n, s, settings, 'cpu')}.json").exists()]
    if not present:
        pytest.skip("no shipped records of the quick bench")
    routers = list(dict.fromkeys(n for n, _ in present))
    records = [r for r in run_router_bench(settings, routers=routers, cache=SHIPPED_CACHE, device="cpu",
                                           progress=False) if (r["router"], r["seed"]) in present]
    table = summarize_records(records)
    task = get_task("08.summary")
    for name in routers:
        for measure in ("accuracy", "step_ms", "dyr"):
            if table[name][measure] is None:
                continue
            mean, se = task.reference(records, name, measure)
            want_mean, _, want_se = table[name][measure]
            assert math.isclose(mean.item(), want_mean, rel_tol=1e-12)
            assert (math.isnan(se.item()) if want_se is None else math.isclose(se.item(), want_se, rel_tol=1e-12))


def test_mcnemar_reference_is_scipys_exact_binomial_test():
    task = get_task("08.mcnemar")
    for case in task.cases():
        a, b = case.args
        only_a = sum(x == "1" and y == "0" for x, y in zip(a, b))
        only_b = sum(x == "0" and y == "1" for x, y in zip(a, b))
        want = 1.0 if only_a + only_b == 0 else binomtest(only_a, only_a + only_b, 0.5).pvalue
        assert math.isclose(task.reference(a, b), want, rel_tol=1e-9, abs_tol=1e-300), case.name
        assert task.reference(b, a) == task.reference(a, b), case.name                  # symmetric
    ps = [task.reference(*case.args) for case in task.cases()]
    assert all(0 <= p <= 1 for p in ps) and any(p < 0.05 for p in ps) and any(0.05 < p < 1 for p in ps)


def test_the_prediction_is_the_binomial_tail_by_hand():
    value = get_task("08.predict_p_value").reference()
    assert math.isclose(value, 2 * (1 + 14 + 91) / 2 ** 14, rel_tol=1e-12)
    assert math.isclose(value, binomtest(12, 14, 0.5).pvalue, rel_tol=1e-9)


def test_the_prediction_band():
    value = get_task("08.predict_p_value").reference()
    assert check("08.predict_p_value", lambda: value + 0.0019, verbose=False).passed
    assert not check("08.predict_p_value", lambda: value + 0.0021, verbose=False).passed


def _sharp_einsum():
    """The sharpened router written apart from the task module: einsum sums and the squash by hand."""
    from capsule_lab.routing import Router, RoutingResult

    class SharpEinsum(Router):
        def forward(self, votes, activations=None, *, history=False, iterations=3, temperature=0.1):
            b = votes.new_zeros(votes.shape[:3])
            for t in range(iterations):
                c = torch.softmax(b / temperature, dim=-1)
                s = torch.einsum("bij,bijd->bjd", c, votes)
                n2 = (s ** 2).sum(dim=-1, keepdim=True)
                v = n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-16)
                if t < iterations - 1:
                    b = b + torch.einsum("bijd,bjd->bij", votes, v)
            return RoutingResult(v, v.norm(dim=-1), c, b)

    return SharpEinsum()


@functools.lru_cache(maxsize=None)
def _bench(seed: int) -> dict:
    """The sharpened router on the bench's own data (bench_data: the first 1000 and 1000 images), at ``seed``."""
    from capsule_lab.course.profiles import chapter_settings
    from capsule_lab.studies.bench.entries import BenchEntry
    from capsule_lab.studies.bench.runner import run_router_bench

    quick = chapter_settings("08", "quick")
    settings = replace(quick, train_size=1000, test_size=1000, schedule=replace(quick.schedule, epochs=1), rem_rounds=0,
                       seeds=(seed,), timing_repeats=1)
    (record,) = run_router_bench(settings, routers=["einsum"], custom={"einsum": BenchEntry(lambda s: _sharp_einsum())},
                                 cache=None, memory=False, progress=False)
    return record


REAL_FRESH_DRAW = checking_module.fresh_draw

#: The draw the tests give check's drawn seeds (conftest's check_draw), so that they train the same networks every run.
DRAW = CHECK_DRAW


@pytest.fixture(autouse=True)
def fixed_draw(check_draw):
    """Every test of this file runs check on the drawn seeds of :data:`DRAW` (conftest's ``check_draw``)."""


def _drawn_seeds(draw=DRAW) -> list:
    from capsule_lab.grading.tasks.registry import drawn

    with drawn(draw):
        return [case.args[-1] for case in get_task("08.new_router").cases()]


@pytest.mark.slow
def test_the_experiment_reference_and_its_band():
    task = get_task("08.new_router")
    accuracies = [_bench(seed)["accuracy"] for seed in (0, 1, 2)]
    spread = max(accuracies) - min(accuracies)
    # The band is for a comparison at the same seed (reproduced exactly across kernels and threads): 2 of the 1000
    # test images and rounding; the spread between seeds is far wider and is no band for it.
    assert task.atol == pytest.approx(0.003) and spread > 2 * task.atol, accuracies
    from capsule_lab.course.profiles import chapter_settings
    from capsule_lab.studies.bench.entries import bench_data

    train, test, _ = bench_data(replace(chapter_settings("08", "quick"), train_size=1000, test_size=1000))
    assert [c.args[-1] for c in task.cases()] == [0, 1, 2]                              # published: seeds 0, 1, 2
    for case in task.cases():
        *data, seed = case.args
        for given, bench in zip(data, (*train.tensors, *test.tensors)):                # the cases carry bench_data
            assert torch.equal(given, bench), case.name
    seeds = _drawn_seeds()
    assert seeds[0] == 0 and min(seeds[1:]) >= 3 and seeds[1] != seeds[2]              # what check runs
    measured = {seed: _bench(seed)["accuracy"] for seed in seeds}                       # the einsum router
    for case in expected(replace(task, cases=lambda: [replace(c, args=(*c.args[:-1], s))
                                                      for c, s in zip(task.cases(), seeds)])):
        assert abs(case.want.outputs[0].item() - measured[case.case.args[-1]]) <= task.atol, case.case.name
    assert check(task.id, lambda *data, seed=0: measured[data[-1]] + 0.0029, verbose=False).passed
    assert not check(task.id, lambda *data, seed=0: measured[data[-1]] + 0.0031, verbose=False).passed
    assert min(accuracies) > 0.75 and _bench(0)["affine_accuracy"] < min(accuracies) - task.atol


@pytest.mark.slow
def test_a_table_of_the_seeds_answers_does_not_pass():
    """Issue 47: the task text prints seed 0's accuracy; a table of it (and of seeds 1 and 2, the published
    twins of the drawn seeds) passes seed 0 only, in check (seeds drawn for the check) and in grade (seeds drawn
    from the instructor's key), whatever it returns for a seed it does not know."""
    table = {seed: _bench(seed)["accuracy"] for seed in (0, 1, 2)}
    mean = sum(table.values()) / 3
    for answer in (lambda *data, seed=0: table[data[-1]], lambda *data, seed=0: table.get(data[-1], mean)):
        result = check("08.new_router", answer, verbose=False)
        assert not result.passed and result.points == 1, result.message               # seed 0 only
        assert "two drawn seeds" in result.message and "drawn (1000 training" in result.message
    from capsule_lab.grading.engine.hidden import draw, hidden_cases

    hidden = hidden_cases(get_task("08.new_router"), draw(bytes(range(32)), "a notebook"))
    assert [c.group for c in hidden] == ["two drawn seeds"] * 2
    assert all(c.args[-1] not in table and c.name.startswith("hidden: seed ") for c in hidden)


def test_each_check_draws_its_seeds_afresh(monkeypatch):
    """Without the tests' fixed draw, every check runs the drawn group on other seeds (none of 0, 1, 2), and the
    reference runs on them each time; seed 0's reference is computed once."""
    from capsule_lab.grading.engine import checking

    monkeypatch.setattr(checking, "fresh_draw", REAL_FRESH_DRAW)
    seen = []

    def reference_answers(task, cached=False):          # records the seeds the reference is asked for
        seeds = [c.args[-1] for c in task.cases()]
        seen.append(seeds)
        return [seed for seed in seeds]

    monkeypatch.setattr(checking, "expected", reference_answers)
    monkeypatch.setattr(checking, "_CHECKED", {})
    task = get_task("08.new_router")
    runs = [checking._checked_cases(task) for _ in range(2)]
    assert seen[0] == [0] and [len(s) for s in seen[1:]] == [2, 2]          # seed 0 once; two new seeds per check
    assert runs[0][0] == runs[1][0] == 0 and runs[0][1:] == seen[1] and runs[1][1:] == seen[2]
    assert set(seen[1] + seen[2]).isdisjoint({0, 1, 2}) and set(seen[1]) != set(seen[2])


def _variant_router(temperature=0.1, axis=-1, uniform=False):
    """A student's plausible wrong router, written here: another temperature, uniform couplings, another axis."""
    from capsule_lab.routing import Router, RoutingResult

    class Variant(Router):
        def forward(self, votes, activations=None, *, history=False):
            b = votes.new_zeros(votes.shape[:3])
            for t in range(3):
                c = torch.full_like(b, 1.0 / b.shape[-1]) if uniform else torch.softmax(b / temperature, dim=axis)
                s = torch.einsum("bij,bijd->bjd", c, votes)
                n2 = (s ** 2).sum(dim=-1, keepdim=True)
                v = n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-16)
                if t < 2:
                    b = b + torch.einsum("bijd,bjd->bij", votes, v)
            return RoutingResult(v, v.norm(dim=-1), c, b)

    return Variant()


@pytest.mark.slow
@pytest.mark.xdist_group("task-08.new_router")
@pytest.mark.parametrize("variant", [dict(temperature=1.0), dict(uniform=True), dict(axis=1)],
                         ids=["temperature 1", "uniform couplings", "softmax over the inputs"])
def test_the_experiment_refuses_the_plausible_wrong_routers(variant):
    """Each wrong router, run through the bench as a student would, earns nothing: it misses the band at seed 0 and at
    the tests' two drawn seeds (at a drawn seed one of them lands within it now and then, see ch08._EXP_BAND)."""
    from capsule_lab.data.transforms import affine_test_set
    from capsule_lab.course.profiles import chapter_settings
    from capsule_lab.studies.bench.entries import BenchEntry
    from capsule_lab.studies.bench.runner import run_router_bench
    from torch.utils.data import TensorDataset

    def accuracy(train_images, train_labels, test_images, test_labels, seed=0):
        quick = chapter_settings("08", "quick")
        settings = replace(quick, train_size=len(train_labels), test_size=len(test_labels), rem_rounds=0,
                           schedule=replace(quick.schedule, epochs=1), seeds=(seed,), timing_repeats=1)
        test = TensorDataset(test_images, test_labels)
        data = (TensorDataset(train_images, train_labels), test,
                affine_test_set(test, seed=0, strength=settings.affine_strength))
        (record,) = run_router_bench(settings, routers=["mine"], data=data, cache=None, memory=False, progress=False,
                                     custom={"mine": BenchEntry(lambda s: _variant_router(**variant))})
        return record["accuracy"]

    result = check("08.new_router", accuracy, verbose=False)     # seed 0 and the tests' drawn seeds
    assert not result.passed and result.points == 0, result.message


# --- the students' likely mistakes, written independently of the task module ---------------------------

def _counts(a, b):
    return sum(x > y for x, y in zip(a, b)), sum(x < y for x, y in zip(a, b))


def _exact(a, b, trials=None, sides=2, cap=True, strict=False):
    only_a, only_b = _counts(a, b)
    n = only_a + only_b if trials is None else trials
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k if strict else k + 1)) / 2 ** n
    return min(1.0, sides * tail) if cap else sides * tail


def _chi2(a, b, continuity=0):
    only_a, only_b = _counts(a, b)
    if only_a + only_b == 0:
        return 1.0
    statistic = max(abs(only_a - only_b) - continuity, 0) ** 2 / (only_a + only_b)
    return math.erfc(math.sqrt(statistic / 2))


_A, _B = "1" * 12 + "0" * 2 + "1" * 1986, "0" * 12 + "1" * 2 + "1" * 1986

WRONG = [
    ("08.summary", lambda r, n, m: _mean_se(r, n, m, ddof=0), "population standard deviation"),
    ("08.summary", lambda r, n, m: _mean_se(r, n, m, divide=lambda k: k), "not sd/n"),
    ("08.summary", lambda r, n, m: _mean_se(r, n, m, divide=lambda k: 1), "standard deviation of the seeds"),
    ("08.summary", lambda r, n, m: _mean_se(r, n, m, every_router=True), "the records of every router"),
    ("08.summary", lambda r, n, m: _mean_se(r, n, m, none_as_zero=True), "do not count it as 0"),
    ("08.summary", lambda r, n, m: _mean_se(r, n, m, single=0.0), "no spread to estimate"),  # not "population"
    ("08.mcnemar", lambda a, b: _exact(a, b, trials=len(a)), "only the images where the two disagree"),  # planted 1
    ("08.mcnemar", lambda a, b: _exact(a, b, sides=1), "one-sided test"),
    ("08.mcnemar", lambda a, b: _exact(a, b, cap=False), "cap it"),
    ("08.mcnemar", lambda a, b: _exact(a, b, strict=True), "must include min(b, c) itself"),
    ("08.mcnemar", _chi2, "without the continuity correction"),
    ("08.mcnemar", lambda a, b: _chi2(a, b, continuity=1), "with the continuity correction"),
    ("08.predict_p_value", lambda: _exact(_A, _B, sides=1), "that is one tail"),
    ("08.predict_p_value", lambda: _exact(_A, _B, strict=True), "the observed split included"),
    ("08.predict_p_value", lambda: _chi2(_A, _B, continuity=1), "continuity-corrected"),
    # 0.00753 lies within the band of the one-sided 0.00647 too: the nearest mistake names it (a two-sided
    # approximation, not one tail)
    ("08.predict_p_value", lambda: _chi2(_A, _B), "without the continuity correction, (12 − 2)²/14"),
    ("08.new_router", lambda ti, tl, si, sl, seed=0: _bench(seed)["affine_accuracy"], "affine test images"),
    ("08.new_router", lambda ti, tl, si, sl, seed=0: 1 - _bench(seed)["accuracy"], "the error rate"),
    ("08.new_router", lambda ti, tl, si, sl, seed=0: 100 * _bench(seed)["accuracy"], "a percentage"),
]


@pytest.mark.parametrize("task_id, fn, hint", WRONG, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(WRONG)])
def test_wrong_answer_fails_with_its_hint(task_id, fn, hint, capsys):
    assert_fails_with_hint(task_id, fn, hint, capsys)


def test_the_planted_bug_fails_every_case_group():
    task = get_task("08.mcnemar")
    cases = expected(task)
    planted = next(fn for t, fn, hint in WRONG if t == task.id and "only the images where" in hint)
    fraction, failed = credit(task, cases, run_student(task, planted, cases))
    assert fraction == 0 and failed == task.groups()


def test_a_single_seed_returned_as_none_is_not_a_pass():
    """The exercise asks for nan with one seed; None (summarize_records's word) is no tensor and earns no point for
    it."""
    def with_none(records, router, measure):
        mean, se = _mean_se(records, router, measure)
        return mean, (None if math.isnan(se.item()) else se)

    result = check("08.summary", with_none, verbose=False)
    assert not result.passed


@pytest.mark.parametrize("task_id", sorted(POINTS))
def test_the_cases_can_be_built_while_the_answers_are_refused(task_id):
    """The grader's evaluation process refuses the answers for good before it lists a task's case groups."""
    from capsule_lab.grading.engine.refusal import refused

    task = get_task(task_id)
    with refused(task.refused):
        assert task.groups() and len(task.cases()) >= 1


@pytest.mark.notebook
@pytest.mark.xdist_group("grading-references")     # beside test_grading's gradings: the references computed once
def test_a_planted_wrong_answer_loses_exactly_its_points(tmp_path):
    """The graded solution notebook with mean_and_stderr averaging over every router's records: 08.summary loses
    its 2 points, with the mistake's hint; every other task keeps its points; the file is not modified."""
    nb = nbformat.read(ROOT / "solutions" / "08_routing_bench.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("def mean_and_stderr")]
    assert 'if r["router"] == router and r.get' in cell.source
    cell.source = cell.source.replace('if r["router"] == router and r.get', "if r.get")
    path = tmp_path / "08_routing_bench.ipynb"
    nbformat.write(nb, path)
    before = path.read_bytes()
    report = grade_notebook(path, timeout=120)
    assert report["max_score"] == sum(POINTS.values())
    assert report["score"] == report["max_score"] - POINTS["08.summary"], report
    summary = report["tasks"]["08.summary"]
    assert summary["status"] == "wrong" and summary["points"] == 0 and "every router" in summary["hint"]
    assert all(t["passed"] for tid, t in report["tasks"].items() if tid != "08.summary")
    assert path.read_bytes() == before
