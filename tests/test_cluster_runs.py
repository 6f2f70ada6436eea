"""capsule_lab.course.cluster and ``capsule-lab cluster``: a chapter's multi-seed run as Slurm array tasks.

Every test runs on a CPU in seconds, on tiny settings of the chapters' own studies and the offline digits; no GPU
and no Slurm is needed (a Slurm array task is simulated by ``$SLURM_ARRAY_TASK_ID``). What is checked:

- the tasks of every chapter's full run are complete (networks × seeds, counted from the settings here), numbered
  seed by seed, stable, and extended at the end by more seeds; the book's table of them says the same;
- tasks run alone, one process call each and in reverse order, then merged, give what the chapter's study computes
  when it trains the same networks in one go (chapters 04–08, against the study's own functions);
- a task killed after its first epoch resumes from its checkpoint to the record of a task never cut; a task whose
  record is there is not trained again; a record of other settings is not overwritten;
- the merge refuses missing tasks, two different records of one task, records of other settings, source or
  precision, and a seed the run does not have, each with a message that says which and what to do;
- the command line lists, runs (the index from ``$SLURM_ARRAY_TASK_ID``) and merges.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from capsule_lab import cli, training
from capsule_lab.course import cluster
from capsule_lab.course.profiles import chapter_settings, seed_everything
from capsule_lab.studies import depth as depth_study
from capsule_lab.studies import ladder as ladder_study
from capsule_lab.studies import learned_routing as learned_routing_study
from capsule_lab.studies import rem as rem_study
from capsule_lab.studies.bench import records as bench_records
from capsule_lab.studies.bench.runner import run_router_bench, summarize_records
from capsule_lab.studies.common import shipped_results
from capsule_lab.studies.rem_claims import rem_claim_records

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def offline_data_and_checkpoints(tmp_path_factory):
    """The offline digits of the checkout (``make data``), checkpoints in a temporary folder, and torch's
    deterministic-algorithms flag and threads put back afterwards (every task seeds everything)."""
    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        if not os.environ.get("CAPSULE_LAB_DATA"):
            mp.setenv("CAPSULE_LAB_DATA", str(ROOT / "data"))
        mp.setenv("CAPSULE_LAB_CHECKPOINTS", str(tmp_path_factory.mktemp("checkpoints")))
        mp.delenv("SLURM_ARRAY_TASK_ID", raising=False)
        torch.set_num_threads(1)                     # a shared 2-core machine: tiny networks train fastest on one
        yield
    torch.use_deterministic_algorithms(deterministic)
    torch.set_num_threads(threads)


def tiny(chapter: str, **changes):
    """Chapter ``chapter``'s quick settings cut to a few seconds of training."""
    q = chapter_settings(chapter, "quick")
    sizes = dict(train_size=128, test_size=64, schedule=replace(q.schedule, epochs=2))
    settings = {
        "04": lambda: replace(q, depths=(1, 2), **sizes),
        "05": lambda: replace(q, datasets=("mnist",), train_size=128, val_size=64, test_size=64, keep_every_step=False,
                              schedule=replace(q.schedule, epochs=3), warmup_epochs=1, rounds=2, epochs_per_round=1),
        "06": lambda: replace(q, ks=(q.ladder.k,), bench_repeats=1, profile_top=20, coupling_top=40, **sizes),
        "07": lambda: replace(q, datasets=("mnist",), routers=("dynamic", "similarity"), **sizes),
        "08": lambda: replace(q, routers=("dynamic r=1", "rem-pruned"), timing_repeats=1, rem_rounds=1, **sizes),
    }[chapter]()
    return replace(settings, **changes)


def run_all(chapter, settings, seeds, out, monkeypatch) -> None:
    """Every task of the run, each by itself, as Slurm array tasks do: the index from $SLURM_ARRAY_TASK_ID, in reverse
    order (so no task can lean on one trained before it in this process)."""
    for task in reversed(cluster.chapter_tasks(chapter, "quick", seeds, settings)):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(task.index))
        path, document = cluster.run_task(chapter, None, "quick", seeds, settings, out=out, device="cpu")
        assert path == cluster.record_path(out, task) and document["task"] == task.index
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")


def without(record: dict, *timing) -> dict:
    """``record`` without the fields that time the run (they differ from run to run)."""
    return {k: v for k, v in record.items() if k not in timing}


# ---------------------------------------------------------------- the tasks

FULL_TASKS = {"04": 100, "05": 10, "06": 25, "07": 30, "08": 36}


def networks_per_seed(chapter: str, s) -> set:
    """The networks each seed trains, counted from the settings."""
    return {"04": lambda: {depth_study.run_name(r, d) for r in ("dynamic", "uniform") for d in s.depths},
            "05": lambda: set(s.datasets),
            "06": lambda: {f"ladder K={k}" for k in s.ks} | {"capsnet r=3", "capsnet matched"},
            "07": lambda: {f"{r}, {d}" for r in s.routers for d in s.datasets},
            "08": lambda: set(s.routers)}[chapter]()


@pytest.mark.parametrize("chapter", cluster.CHAPTERS)
def test_the_tasks_are_every_network_times_every_seed_numbered_seed_by_seed(chapter):
    settings, seeds = cluster.run_settings(chapter, "full")
    tasks = cluster.chapter_tasks(chapter, "full")
    names = networks_per_seed(chapter, settings)
    assert len(tasks) == len(names) * len(seeds) == FULL_TASKS[chapter]
    assert [t.index for t in tasks] == list(range(len(tasks)))
    assert {(t.network, t.seed) for t in tasks} == {(n, s) for n in names for s in seeds}      # each exactly once
    assert [t.seed for t in tasks] == [s for s in seeds for _ in names]                        # seed by seed
    assert len({cluster.record_path("records", t) for t in tasks}) == len(tasks)               # a file each
    assert cluster.chapter_tasks(chapter, "full") == tasks                                     # stable
    more = cluster.chapter_tasks(chapter, "full", seeds=seeds + (97, 98))
    assert more[:len(tasks)] == tasks and len(more) == len(tasks) + 2 * len(names)             # seeds added at the end


def test_the_seeds_of_chapters_06_and_07_are_those_of_their_shipped_runs():
    assert cluster.SEEDS_06 == tuple(shipped_results("ladder_runs.json")["provenance"]["seeds"])
    assert cluster.SEEDS_07 == tuple(shipped_results("routing_runs.json")["provenance"]["seeds"])
    assert cluster.run_settings("04", "full", seeds=(3, 1))[0].seeds == (3, 1)       # --seeds replaces the settings'


def test_the_book_lists_every_chapters_tasks():
    text = (ROOT / "book" / "setup.md").read_text(encoding="utf8")
    section = text[text.index("## Past one machine"):]
    for chapter, count in FULL_TASKS.items():
        row = re.search(rf"^\| {chapter} \|.*$", section, flags=re.M)
        assert row, f"book/setup.md's table has no row for chapter {chapter}"
        cells = [c.strip() for c in row.group(0).strip("|").split("|")]
        assert str(count) in cells and f"0-{count - 1}" in row.group(0), row.group(0)


def test_the_task_index_comes_from_slurm_when_none_is_given(monkeypatch):
    assert cluster.task_index(3) == 3
    with pytest.raises(ValueError, match=r"no task index: pass --task K.*SLURM_ARRAY_TASK_ID"):
        cluster.task_index()
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "17")
    assert cluster.task_index() == 17
    assert cluster.task_index(2) == 2                                                   # an explicit index wins
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "x")
    with pytest.raises(ValueError, match="SLURM_ARRAY_TASK_ID must be an integer >= 0, got 'x'"):
        cluster.task_index()
    with pytest.raises(ValueError, match="task must be an integer >= 0, got -1"):
        cluster.task_index(-1)


def test_arguments_are_checked_in_the_packages_wording(tmp_path):
    with pytest.raises(ValueError, match=r"chapter must be one of \['04', '05', '06', '07', '08'\], got '03'"):
        cluster.chapter_tasks("03")
    with pytest.raises(ValueError, match="profile must be one of"):
        cluster.chapter_tasks("04", "huge")
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        cluster.chapter_tasks("04", seeds=(0, -1))
    with pytest.raises(ValueError, match="seeds must be distinct"):
        cluster.chapter_tasks("04", seeds=(0, 0))
    with pytest.raises(ValueError, match="settings must be chapter 04's DepthStudySettings, got LadderSettings"):
        cluster.chapter_tasks("04", settings=chapter_settings("06", "quick"))
    with pytest.raises(ValueError, match=r"task must be an index in \[0, 4\).*--array=0-3\), got 4"):
        cluster.run_task("04", 4, "quick", (0,), tiny("04"), out=tmp_path, device="cpu")
    assert cluster.array_ranges([8, 0, 1, 2, 5, 7]) == "0-2,5,7-8"


# ---------------------------------------------------------------- tasks alone = one process

@pytest.fixture(scope="module")
def routing_records(tmp_path_factory):
    """Chapter 07's tiny run, every task by itself (two routers, two seeds: four tasks), merged."""
    settings, out = tiny("07"), tmp_path_factory.mktemp("records-07")
    with pytest.MonkeyPatch.context() as mp:
        run_all("07", settings, (0, 1), out, mp)
    return settings, out, cluster.merge_records("07", [out], "quick", (0, 1), settings)


def test_chapter_07_tasks_alone_merge_to_the_study_in_one_process(routing_records):
    settings, _, report = routing_records
    data = {"mnist": learned_routing_study.routing_study_data("mnist", settings)}
    for seed in (0, 1):
        seed_everything(seed)
        for (dataset, router), run in learned_routing_study.run_routing_study(settings, data, seed=seed).items():
            got = report["runs"][dataset][router][str(seed)]
            assert (got["accuracy"], got["entropy"], got["largest"]) == (run.accuracy, run.entropy, run.largest)
            assert got["train_loss"] == run.history.train_loss and got["parameters"] == run.parameters
    assert list(report["runs"]["mnist"]) == ["dynamic", "similarity"]
    records = learned_routing_study.learned_claim_records(report)          # the shape chapter 07's verdicts read
    assert sorted((r["router"], r["seed"]) for r in records) == [
        ("dynamic, mnist", 0), ("dynamic, mnist", 1), ("similarity, mnist", 0), ("similarity, mnist", 1)]
    p = report["provenance"]
    assert (p["tasks"], p["seeds"], p["precision"], p["source"], p["resumed"]) == (4, [0, 1], "float32", "offline", 0)
    assert p["settings"]["train_size"] == 128 and p["seconds"] > 0


def test_chapter_04_tasks_alone_merge_to_the_study_in_one_process(tmp_path, monkeypatch):
    settings = tiny("04")
    run_all("04", settings, (0, 1), tmp_path, monkeypatch)
    report = cluster.merge_records("04", [tmp_path], "quick", (0, 1), settings)
    assert report["capsule_history"] is None
    train, test = depth_study.depth_study_data(settings)
    got = {(r["routing"], r["depth"], r["seed"]): r for r in report["runs"]}
    assert list(got) == [(r, d, s) for r in ("dynamic", "uniform") for d in (1, 2) for s in (0, 1)]
    for (routing, depth, seed), record in got.items():
        run = depth_study.train_depth_run(settings, depth, routing, seed, train, test)
        assert record["accuracy"] == run.record.accuracy
        assert record["train_accuracy"] == run.history.train_accuracy
        assert [row["cdr"] for row in record["table"]] == [row["cdr"] for row in run.table]
    assert len(depth_study.depth_claim_records(report)) == 8 + 2 * (2 + 3)      # networks, RBA's layers


def test_chapter_05_task_alone_is_the_study_in_one_process(tmp_path, monkeypatch):
    settings = tiny("05")
    run_all("05", settings, (0,), tmp_path, monkeypatch)
    report = cluster.merge_records("05", [tmp_path], "quick", (0,), settings)
    data = rem_study.rem_study_data("mnist", settings)
    seed_everything(0)
    run = rem_study.run_rem("mnist", settings, data, seed=0)
    expected = rem_study.run_record(run, settings.levels)
    [got] = report["runs"]
    assert without(got, "seconds", "Q", "REM") == without(expected, "seconds", "Q", "REM")
    for name, step in (("Q", run.q), ("REM", run.rem)):
        extras = rem_study.model_extras(rem_study.model_at(step, settings.capsnet), data[2])
        assert got[name] == json.loads(json.dumps({**expected[name], **extras}))
    assert {r["router"] for r in rem_claim_records(report["runs"])} >= {"Q, mnist", "REM, mnist"}


def test_chapter_06_tasks_alone_merge_to_the_study_in_one_process(tmp_path, monkeypatch):
    settings = tiny("06")
    run_all("06", settings, (0,), tmp_path, monkeypatch)
    report = cluster.merge_records("06", [tmp_path], "quick", (0,), settings)
    data = ladder_study.ladder_study_data(settings)
    networks = ladder_study.run_ladder_study(settings, data, seed=0)
    assert list(report["runs"]) == list(networks)                     # the study's networks, in its order
    profiles = ladder_study.activity_profiles(networks, data[0], settings.profile_digit, settings.profile_top)
    for name, net in networks.items():
        got = report["runs"][name]["0"]
        assert (got["clean_accuracy"], got["affine_accuracy"]) == (net.clean_accuracy, net.affine_accuracy)
        assert (got["clean_correct"], got["affine_correct"]) == (net.clean_correct, net.affine_correct)
        assert got["train_loss"] == net.history.train_loss and got["parameters"] == net.parameters
        assert got["activity_profile"] == [round(float(a), 5) for a in profiles[name]]
        assert ("couplings" in got) == (not net.is_ladder)
    assert {r["router"] for r in ladder_study.ladder_claim_records(report)} >= set(networks)


def test_chapter_08_tasks_alone_merge_to_the_bench_in_one_process(tmp_path, monkeypatch):
    # a CPU's peak memory is measured in a forked process, seconds a record: tested in test_router_bench.py
    monkeypatch.setattr(bench_records, "_peak_memory_mb", lambda *args, **kwargs: None)
    settings = tiny("08")
    run_all("08", settings, (0,), tmp_path, monkeypatch)
    report = cluster.merge_records("08", [tmp_path], "quick", (0,), settings)
    expected = run_router_bench(settings, seeds=(0,), device="cpu", memory=False, progress=False)
    timing = ("train_seconds", "train_step_ms", "step_ms", "inference_ms", "cached")
    assert [without(r, *timing) for r in report["runs"]] == [without(r, *timing) for r in json.loads(json.dumps(
        expected))]
    assert [r["router"] for r in report["runs"]] == ["dynamic r=1", "rem-pruned"]
    assert summarize_records(report["runs"])["rem-pruned"]["seeds"] == 1          # records the bench's tables take


# ---------------------------------------------------------------- resuming

class Preempted(Exception):
    """The scheduler's kill, after an epoch's checkpoint was saved."""


@pytest.mark.parametrize("chapter, changes, trained_again", [
    ("07", {"routers": ("dynamic",)}, [2, 3]),          # the study's train_router takes the checkpoint
    ("04", {"depths": (2,)}, [2, 3]),                   # train_depth_run hands it to the study's fit
    ("08", {"routers": ("rem-pruned",)}, [2, 3]),       # pruned after epoch 1, before its checkpoint was written
    ("05", {}, [2, 3, 1, 2, 3]),                        # the dense run's epochs 2 and 3, then the pruned run's
])
def test_a_task_killed_after_an_epoch_resumes_to_the_same_record(tmp_path, monkeypatch, chapter, changes,
                                                                  trained_again):
    settings = tiny(chapter, **changes)
    settings = replace(settings, schedule=replace(settings.schedule, epochs=3))
    whole, _ = cluster.run_task(chapter, 0, "quick", (0,), settings, out=tmp_path / "whole", device="cpu")
    saved, plain = [], training.save_checkpoint

    def save_then_die(path, *args, **kwargs):
        plain(path, *args, **kwargs)
        saved.append(Path(path))
        raise Preempted

    monkeypatch.setattr(training, "save_checkpoint", save_then_die)
    with pytest.raises(Preempted):
        cluster.run_task(chapter, 0, "quick", (0,), settings, out=tmp_path / "cut", device="cpu")
    [checkpoint] = saved
    assert checkpoint.exists() and not (tmp_path / "cut").exists()            # killed: no record, a checkpoint

    def save(path, *args, **kwargs):
        plain(path, *args, **kwargs)
        saved.append(kwargs["resume"]["epoch"])

    monkeypatch.setattr(training, "save_checkpoint", save)
    path, resumed = cluster.run_task(chapter, 0, "quick", (0,), settings, out=tmp_path / "cut", device="cpu")
    assert saved[1:] == trained_again                                          # the epochs not saved before only
    assert not any(f.exists() for f in cluster.RUNS[chapter].checkpoint_files(checkpoint))   # gone with the record
    first = json.loads(whole.read_text())
    timing = ("seconds", "train_seconds", "train_step_ms", "step_ms", "inference_ms", "peak_memory_mb")
    assert without(resumed["record"], *timing) == without(first["record"], *timing)
    assert (resumed["provenance"]["resumed"], first["provenance"]["resumed"]) == (True, False)


def test_a_done_task_is_not_trained_again_and_other_settings_are_not_overwritten(routing_records, monkeypatch):
    settings, out, _ = routing_records
    path = cluster.record_path(out, cluster.chapter_tasks("07", "quick", (0, 1), settings)[2])
    before = path.read_text()

    def boom(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(learned_routing_study, "train_router", boom)
    _, document = cluster.run_task("07", 2, "quick", (0, 1), settings, out=out, device="cpu")
    assert document == json.loads(before) and path.read_text() == before
    other = replace(settings, schedule=replace(settings.schedule, lr=1e-2))
    with pytest.raises(ValueError, match=r"holds a record of other settings \(settings differ\): delete it"):
        cluster.run_task("07", 2, "quick", (0, 1), other, out=out, device="cpu")
    with pytest.raises(ValueError, match="holds a record of other settings .*source"):
        cluster.run_task("07", 2, "quick", (0, 1), settings, out=out, device="cpu", source="auto")
    assert path.read_text() == before


# ---------------------------------------------------------------- the merge refuses

def copy_of(out: Path, tmp_path: Path, name: str = "records") -> Path:
    return Path(shutil.copytree(out, tmp_path / name))


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_the_merge_refuses_a_missing_task_and_says_which_to_run(routing_records, tmp_path):
    settings, out, _ = routing_records
    folder = copy_of(out, tmp_path)
    tasks = cluster.chapter_tasks("07", "quick", (0, 1), settings)
    for k in (1, 2, 3):
        cluster.record_path(folder, tasks[k]).unlink()
    with pytest.raises(ValueError, match=re.escape("3 of 4 tasks have no record yet: run them (sbatch --array=1-3 "
                                                   "scripts/slurm/full_runs.sbatch 07) and merge again")):
        cluster.merge_records("07", [folder], "quick", (0, 1), settings)
    with pytest.raises(ValueError, match="record folder\\(s\\) not found"):
        cluster.merge_records("07", [tmp_path / "nowhere"], "quick", (0, 1), settings)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no task records of chapter 07's run"):
        cluster.merge_records("07", [tmp_path / "empty"], "quick", (0, 1), settings)


def test_the_merge_refuses_two_different_records_of_one_task_and_takes_a_copy_once(routing_records, tmp_path):
    settings, out, report = routing_records
    second = copy_of(out, tmp_path, "second")
    assert cluster.merge_records("07", [out, second], "quick", (0, 1), settings)["runs"] == report["runs"]
    edit(second / "dynamic-mnist-seed1.json", lambda d: d["record"].update(accuracy=0.5))
    with pytest.raises(ValueError, match=r"1 task\(s\) with two different records \(trained twice\): keep one of "
                                         r"each: task 2 \(dynamic, mnist, seed 1\)"):
        cluster.merge_records("07", [out, second], "quick", (0, 1), settings)


@pytest.mark.parametrize("field, change", [
    ("settings", lambda d: d["settings"]["schedule"].update(lr=0.1)),
    ("source", lambda d: d.update(source="torchvision")),
    ("precision", lambda d: d.update(precision="mixed precision (bfloat16)")),
    ("profile", lambda d: d.update(profile="full")),
])
def test_the_merge_refuses_records_of_other_settings(routing_records, tmp_path, field, change):
    settings, out, _ = routing_records
    folder = copy_of(out, tmp_path)
    edit(folder / "similarity-mnist-seed0.json", change)
    with pytest.raises(ValueError, match=rf"1 record\(s\) of other settings than chapter 07's quick run \(these "
                                         rf"differ\): .*similarity-mnist-seed0.json: {field}"):
        cluster.merge_records("07", [folder], "quick", (0, 1), settings)


def test_the_merge_refuses_a_seed_that_is_not_the_runs(routing_records, tmp_path):
    settings, out, _ = routing_records
    with pytest.raises(ValueError, match=r"2 record\(s\) of a network or seed that is not one of this run's \(merge "
                                         r"with the run's --seeds\)"):
        cluster.merge_records("07", [out], "quick", (0,), settings)


def test_a_merged_report_is_written_whole(routing_records, tmp_path):
    _, _, report = routing_records
    path = cluster.write_report(report, tmp_path / "07.json")
    assert json.loads(path.read_text()) == report and not list(tmp_path.glob(".*partial"))
    with pytest.raises(ValueError, match="is a folder, not a file"):
        cluster.write_report(report, tmp_path)


# ---------------------------------------------------------------- the command line

def test_cluster_tasks_prints_every_task_and_the_array(capsys):
    assert cli.main(["cluster", "tasks", "08"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "chapter 08, profile full: 36 tasks (12 networks × 3 seeds), --array=0-35"
    assert len(lines) == 2 + 36 and lines[2].split() == ["0", "0", "dynamic", "r=1"]
    assert cli.main(["cluster", "tasks", "04", "--seeds", "0", "1"]) == 0
    assert "20 tasks (10 networks × 2 seeds), --array=0-19" in capsys.readouterr().out


def test_cluster_run_takes_its_index_from_slurm_and_merge_names_the_missing(tmp_path, monkeypatch, capsys):
    out = tmp_path / "records"
    record = out / "dynamic-mnist-seed0.json"
    assert cli.main(["cluster", "run", "07", "--profile", "quick", "--out", str(out)]) == 2
    assert "no task index: pass --task K" in capsys.readouterr().err
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")
    args = ["cluster", "run", "07", "--profile", "quick", "--out", str(out), "--device", "cpu"]
    assert cli.main(args) == 0
    assert capsys.readouterr().out.strip() == f"task 0 of 30 (dynamic, mnist, seed 0): trained, {record}"
    assert cli.main(args) == 0
    assert "already done" in capsys.readouterr().out
    document = json.loads(record.read_text())
    assert document["provenance"]["command"] == "capsule-lab cluster " + " ".join(args[1:])
    assert document["provenance"]["slurm"]["array_task_id"] == "0" and document["settings"]["train_size"] == 2000
    assert cli.main(["cluster", "merge", "07", str(out), "--profile", "quick"]) == 2       # 5 seeds, as shipped
    assert "29 of 30 tasks have no record yet: run them (sbatch --array=1-29" in capsys.readouterr().err


def test_the_batch_script_runs_its_array_task_with_the_chapter_and_options(tmp_path):
    """scripts/slurm/full_runs.sbatch under bash with a Slurm task's environment and a stand-in ``capsule-lab`` that
    writes down how it was called (no Slurm needed)."""
    import subprocess

    script = ROOT / "scripts" / "slurm" / "full_runs.sbatch"
    text = script.read_text()
    for line in ("#SBATCH --array=", "#SBATCH --gres=gpu:1", "#SBATCH --requeue", "#SBATCH --output=logs/%x-%A_%a.out"):
        assert line in text
    (tmp_path / "bin").mkdir()
    stand_in = tmp_path / "bin" / "capsule-lab"
    stand_in.write_text('#!/bin/bash\necho "$@" > called\necho "$OMP_NUM_THREADS $CAPSULE_LAB_CHECKPOINTS" >> called\n')
    stand_in.chmod(0o755)
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_JOB_ID": "77",
           "SLURM_CPUS_PER_TASK": "4", "HOME": str(tmp_path)}
    done = subprocess.run(["bash", str(script), "06", "--seeds", "0", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "called").read_text().splitlines() == ["cluster run 06 --seeds 0 1",
                                                              f"4 {tmp_path}/checkpoints"]
    assert "task 3 of job 77, restart 0" in done.stdout
    missing = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert missing.returncode != 0 and "usage: sbatch --array=0-N" in missing.stderr
