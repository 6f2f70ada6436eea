"""A chapter's multi-seed run as independent, resumable tasks: one per network and seed, for a Slurm job array.

Taught with the profiles in the book's set-up page (``book/setup.md``, "Past one machine"); run with
``capsule-lab cluster tasks|run|merge CHAPTER``. The full profile of chapters 04–08 trains the papers' networks on the
full datasets over several seeds: hours on one GPU per network, so a lab with a cluster trains every (network, seed) as
a task of its own, side by side, and joins their records afterwards, as the grader's shards are joined
(``capsule-lab grade --shard K/N``, then ``capsule-lab grade-merge``):

1. :func:`chapter_tasks` lists a chapter's tasks with a stable index, seed by seed and, within a seed, network by
   network in the order the chapter's study trains them (:data:`RUNS`): task ``k`` is seed ``k // n``'s network
   ``k % n`` of ``n``. Adding seeds adds tasks at the end and leaves every earlier index as it was.
2. :func:`run_task` trains task ``k`` alone (``k`` from ``$SLURM_ARRAY_TASK_ID`` when no index is given) with the
   study's own code, and writes one record file, ``<network>-seed<seed>.json``: what the chapter's shipped run
   holds for that network and seed (``record``), the settings it trained with, the data source, the precision and
   the task's provenance. A task whose record is already there is done and returns at once. Training goes through
   :func:`capsule_lab.training.fit` with a checkpoint (:func:`capsule_lab.course.checkpoints.checkpoint_path`), saved
   after every epoch: a task that is preempted, killed or requeued resumes at its last finished epoch, to the same
   weights, and the checkpoint is deleted once the record is written. A chapter 05 task trains three networks
   (dense, REM-pruned, SNIP-pruned), each with a checkpoint of its own beside that name
   (:func:`~capsule_lab.studies.rem.rem_checkpoints`), which also holds every epoch's measurement.
3. :func:`merge_records` joins the record files of one run (from one folder or many) into one report,
   ``{"provenance": ..., "runs": ...}``, the ``runs`` in the shape the chapter's study reads them (its verdict function takes the
   report: :func:`~capsule_lab.studies.depth.depth_verdicts`, :func:`~capsule_lab.studies.rem_claims.rem_verdicts` of
   its ``runs``, :func:`~capsule_lab.studies.ladder.ladder_verdicts`,
   :func:`~capsule_lab.studies.learned_routing.learned_verdicts`,
   :func:`~capsule_lab.studies.bench.claims.claim_verdicts` of its ``runs``). It refuses, naming the files, a record
   of other settings (or data source, precision, chapter or profile), a network or seed that is not one of the run's,
   two different records of one task, and a missing task (with the ``sbatch --array=...`` that runs the missing
   ones).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import torch

from .. import __version__
from .. import training
from .._checks import check_folders, check_one_of, check_positive_int
from ..evidence.stats import correct_string
from ..studies import depth as depth_study
from ..studies import ladder as ladder_study
from ..studies import learned_routing as learned_routing_study
from ..studies import rem as rem_study
from ..studies.bench import records as bench_records
from ..studies.bench.entries import bench_data
from .checkpoints import checkpoint_path
from .profiles import PROFILES, chapter_settings, seed_everything

__all__ = ["FORMAT", "SEEDS_06", "SEEDS_07", "ChapterRun", "Task", "RUNS", "CHAPTERS", "run_settings", "chapter_tasks",
           "task_index", "record_path", "run_task", "read_records", "merge_records", "write_report", "array_ranges"]

#: The version of a task record's meaning, stored in every record file (the key that marks a JSON file as one).
FORMAT = 1
#: The seeds of chapters 06 and 07, whose settings name none: as many as their shipped longer runs have
#: (``ladder_runs.json`` and ``routing_runs.json``: 5 each).
SEEDS_06, SEEDS_07 = (0, 1, 2, 3, 4), (0, 1, 2, 3, 4)


class Task(NamedTuple):
    """One task of a chapter's run: its ``index`` (the Slurm array's task id), the ``network`` (its name in the
    chapter's records) and the ``seed``. Chapters 04–08."""

    index: int
    network: str
    seed: int


@dataclass(frozen=True)
class ChapterRun:
    """How one chapter's multi-seed run splits into tasks and joins again (see the module docstring). Chapters 04–08.

    ``networks(settings)`` → ``{name: spec}``: every network the study trains for one seed, in its order, and what
    ``train`` needs to train it; ``seeds(settings)`` → the run's seeds; ``data(settings, spec, source)`` → the data
    the network trains and is measured on; ``train(settings, spec, seed, data, device, amp, checkpoint)`` → its
    record, JSON-ready, as the chapter's shipped run holds it, trained by the study with ``checkpoint`` (a file
    :func:`~capsule_lab.training.fit` saves to and resumes from); ``runs([(spec, seed, record)])`` → the report's
    ``runs``, from the records in network and seed order; ``checkpoint_files(checkpoint)`` → the files a task's
    training writes for that checkpoint name (deleted once its record is written); ``extra``: what the report holds
    besides ``provenance`` and ``runs``.
    """

    networks: Callable
    seeds: Callable
    data: Callable
    train: Callable
    runs: Callable
    checkpoint_files: Callable = lambda checkpoint: [checkpoint]
    extra: dict | None = None


# ---------------------------------------------------------------- chapter 04: deep CapsNets over depths and routings

#: The columns of a network's per-layer table that chapter 04's shipped runs keep.
TABLE_KEYS = ("layer", "capsules", "alive", "cnm", "cns", "car", "cas", "cdr", "cds", "dyr", "dys")


def _depth_networks(settings) -> dict:
    return {depth_study.run_name(routing, depth): (routing, depth)
            for routing in depth_study.ROUTINGS for depth in settings.depths}


def _depth_record(settings, spec, seed, data, device, amp, checkpoint) -> dict:
    routing, depth = spec
    run = depth_study.train_depth_run(settings, depth, routing, seed, *data, device=device, amp=amp,
                                      checkpoint=checkpoint)
    return {"depth": depth, "routing": routing, "seed": seed, "accuracy": run.record.accuracy,
            "train_accuracy": run.history.train_accuracy, "seconds": round(sum(run.history.seconds), 2),
            "correct": correct_string(run.record.predictions == run.record.labels),
            "table": [{k: row[k] for k in TABLE_KEYS} for row in run.table]}


# ---------------------------------------------------------------- chapter 05: Q and REM per dataset

def _rem_data(settings, dataset, source) -> tuple:
    affine = rem_study.rem_affine_data(settings, source) if dataset == "expanded" else None
    return rem_study.rem_study_data(dataset, settings, source), affine


def _rem_record(settings, dataset, seed, data, device, amp, checkpoint) -> dict:
    (train, val, test), affine = data
    run = rem_study.run_rem(dataset, settings, (train, val, test), seed=seed, device=device, amp=amp,
                            checkpoint=checkpoint)
    record = rem_study.run_record(run, settings.levels)
    for name, step in (("Q", run.q), ("REM", run.rem)):
        model = rem_study.model_at(step, settings.capsnet).to(device)
        record[name].update(rem_study.model_extras(model, test, affine=affine, device=device))
    if run.single_shot:
        record["single_shot"] = [rem_study.step_record(step, settings.levels) for step in run.single_shot]
    return record


# ---------------------------------------------------------------- chapter 06: L-CapsNets against CapsNets

def _ladder_networks(settings) -> dict:
    """The networks of :func:`capsule_lab.studies.ladder.run_ladder_study`, by the names it gives them."""
    configs = [(settings.ladder_config(k), None) for k in settings.ks]
    configs += [(settings.capsnet, None), (settings.matched, "capsnet matched")]
    return {name or config.label: (config, name) for config, name in configs}


def _ladder_record(settings, spec, seed, data, device, amp, checkpoint) -> dict:
    config, name = spec
    net = ladder_study.train_network(config, settings, data, seed, device, amp, name=name, checkpoint=checkpoint,
                                     track_test=True)
    return ladder_study.run_record(net, settings, data, device, amp)


def _by_network(items) -> dict:
    runs: dict = {}
    for (config, name), seed, record in items:
        runs.setdefault(name or config.label, {})[str(seed)] = record
    return runs


# ---------------------------------------------------------------- chapter 07: one network, each router

def _routing_networks(settings) -> dict:
    return {f"{router}, {dataset}": (dataset, router) for dataset in settings.datasets for router in settings.routers}


def _routing_record(settings, spec, seed, data, device, amp, checkpoint) -> dict:
    dataset, router = spec
    run = learned_routing_study.train_router(router, dataset, settings, data, seed, device, amp,
                                             checkpoint=checkpoint)
    return {"accuracy": run.accuracy, "parameters": run.parameters, "router_parameters": run.router_parameters,
            "seconds": run.seconds, "train_loss": run.history.train_loss, "train_accuracy": run.history.train_accuracy,
            "entropy": run.entropy, "largest": run.largest}


def _by_dataset_and_router(items) -> dict:
    runs: dict = {}
    for (dataset, router), seed, record in items:
        runs.setdefault(dataset, {}).setdefault(router, {})[str(seed)] = record
    return runs


# ---------------------------------------------------------------- chapter 08: the bench

def _bench_record(settings, name, seed, data, device, amp, checkpoint) -> dict:
    return bench_records.train_record(name, settings, data, seed, device, amp, checkpoint=checkpoint)


# ---------------------------------------------------------------- the table

def _listed(items) -> list:
    return [record for _, _, record in items]


#: Each chapter's run, as :func:`run_task` and :func:`merge_records` read it (see :class:`ChapterRun`).
RUNS = {
    "04": ChapterRun(_depth_networks, lambda s: s.seeds,
                     lambda s, spec, source: depth_study.depth_study_data(s, source), _depth_record, _listed,
                     extra={"capsule_history": None}),
    "05": ChapterRun(lambda s: {dataset: dataset for dataset in s.datasets}, lambda s: s.seeds, _rem_data,
                     _rem_record, _listed,
                     checkpoint_files=lambda checkpoint: list(rem_study.rem_checkpoints(checkpoint).values())),
    "06": ChapterRun(_ladder_networks, lambda s: SEEDS_06,
                     lambda s, spec, source: ladder_study.ladder_study_data(s, source), _ladder_record, _by_network),
    "07": ChapterRun(_routing_networks, lambda s: SEEDS_07,
                     lambda s, spec, source: learned_routing_study.routing_study_data(spec[0], s, source),
                     _routing_record, _by_dataset_and_router),
    "08": ChapterRun(lambda s: {name: name for name in s.routers}, lambda s: s.seeds,
                     lambda s, spec, source: bench_data(s, source), _bench_record, _listed),
}
#: The chapters whose full profile is a multi-seed run, in order.
CHAPTERS = tuple(RUNS)


# ---------------------------------------------------------------- the tasks

def _check_seeds(seeds) -> tuple:
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise ValueError(f"seeds must be a non-empty sequence of integers >= 0, got {seeds!r}")
    for seed in seeds:
        check_positive_int(seed, "seed", minimum=0)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {list(seeds)}")
    return tuple(seeds)


def run_settings(chapter: str, profile: str = "full", seeds=None, settings=None) -> tuple:
    """``(settings, seeds)`` of ``chapter``'s run under ``profile``: ``settings`` (None: the chapter's,
    :func:`capsule_lab.course.profiles.chapter_settings`) with ``seeds`` (None: the run's own, :class:`ChapterRun`)
    in place of the settings' own where they name seeds. Chapters 04–08."""
    run = RUNS[check_one_of(chapter, CHAPTERS, "chapter")]
    expected = chapter_settings(chapter, check_one_of(profile, sorted(PROFILES), "profile"))
    settings = expected if settings is None else settings
    if not isinstance(settings, type(expected)):
        raise ValueError(f"settings must be chapter {chapter}'s {type(expected).__name__}, "
                         f"got {type(settings).__name__}")
    seeds = tuple(run.seeds(settings)) if seeds is None else _check_seeds(seeds)
    if "seeds" in {f.name for f in fields(settings)}:
        settings = replace(settings, seeds=seeds)
    return settings, seeds


def chapter_tasks(chapter: str, profile: str = "full", seeds=None, settings=None) -> list:
    """Every task of ``chapter``'s run (:func:`run_settings`), in index order: seed by seed, and within a seed network
    by network in the study's order → ``[Task(index, network, seed)]``. Chapters 04–08."""
    settings, seeds = run_settings(chapter, profile, seeds, settings)
    names = list(RUNS[chapter].networks(settings))
    return [Task(k, network, seed) for k, (seed, network) in enumerate(itertools.product(seeds, names))]


def task_index(index=None) -> int:
    """``index``, else ``$SLURM_ARRAY_TASK_ID`` (the task of a Slurm job array), as an integer >= 0; ``ValueError``
    when neither is given. Chapters 04–08."""
    if index is not None:
        return check_positive_int(index, "task", minimum=0)
    text = os.environ.get("SLURM_ARRAY_TASK_ID", "").strip()
    if not text:
        raise ValueError("no task index: pass --task K, or run as a task of a Slurm job array ($SLURM_ARRAY_TASK_ID "
                         "is not set)")
    if not text.isdigit():
        raise ValueError(f"SLURM_ARRAY_TASK_ID must be an integer >= 0, got {text!r}")
    return int(text)


def record_path(folder, task: Task) -> Path:
    """The record file of ``task`` in ``folder``: ``<network>-seed<seed>.json``, the network's name made safe for a file
    name (``"capsnet r=3"`` → ``capsnet-r-3``). Chapters 04–08."""
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", task.network).strip("-").lower()
    return Path(folder) / f"{slug}-seed{task.seed}.json"


def array_ranges(indices) -> str:
    """Task indices as Slurm's ``--array`` writes them: ``[0, 1, 2, 5, 7, 8]`` → ``"0-2,5,7-8"``. Chapters 04–08."""
    indices, parts = sorted(set(indices)), []
    for _, group in itertools.groupby(enumerate(indices), key=lambda pair: pair[1] - pair[0]):
        run = [k for _, k in group]
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts)


# ---------------------------------------------------------------- one task

def _settings_json(settings) -> dict:
    """The settings as JSON data, without their seeds (a run with more seeds is the same run, extended)."""
    data = json.loads(json.dumps(asdict(settings), default=str))
    data.pop("seeds", None)
    return data


def _identity(chapter, profile, settings, source, device, amp) -> dict:
    """What a record must share with every other record of its run."""
    return {"chapter": chapter, "profile": profile, "settings": _settings_json(settings), "source": source,
            "precision": training.precision(device, amp)}


def _device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model (from ``/proc/cpuinfo`` where there is one)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    return model or platform.processor() or platform.machine()


def _provenance(command, device, started: float, resumed: bool) -> dict:
    slurm = {k.removeprefix("SLURM_").lower(): os.environ[k] for k in
             ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT") if k in os.environ}
    return {"command": command or " ".join(sys.argv), "device": _device_name(device), "torch": torch.__version__,
            "capsule_lab": __version__, "machine": platform.machine(), "threads": torch.get_num_threads(),
            "seconds": round(time.perf_counter() - started, 1), "resumed": resumed,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), **({"slurm": slurm} if slurm else {})}


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data) -> None:
    """``data`` as JSON at ``path``, written to a temporary file beside it and renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf8")
    os.replace(partial, path)


def _differs(expected: dict, found: dict) -> list:
    return sorted(k for k in expected if expected[k] != found.get(k))


def run_task(chapter: str, index=None, profile: str = "full", seeds=None, settings=None, out="cluster-records",
             device=None, source: str | None = None, command: str | None = None) -> tuple:
    """Train task ``index`` of ``chapter``'s run (:func:`chapter_tasks`; None: ``$SLURM_ARRAY_TASK_ID``,
    :func:`task_index`) alone and write its record to ``out`` (:func:`record_path`) → ``(path, record file)``.

    ``device``: None for CUDA if available; mixed precision where the profile asks for it, on CUDA. ``source``: where
    the images come from (None: the profile's, ``"torchvision"`` for the full profile: MNIST's 60,000 and 10,000;
    ``"offline"``: the 8,000 / 2,000 offline digits; see :func:`capsule_lab.data.sources.load_mnist`). Seeds
    everything with the task's seed first (:func:`~capsule_lab.course.profiles.seed_everything`). A record already in
    ``out`` for this task with the same settings, source and precision is returned as it is; one of other settings is
    an error. The training's checkpoint is :func:`~capsule_lab.course.checkpoints.checkpoint_path` of the chapter,
    network and seed, under the profile's name and a digest of the settings (so no other run resumes from it), and is
    deleted once the record is written. ``command``: the command line the provenance
    names (default: this process's). Chapters 04–08.
    """
    started = time.perf_counter()
    settings, seeds = run_settings(chapter, profile, seeds, settings)
    run, tasks = RUNS[chapter], chapter_tasks(chapter, profile, seeds, settings)
    k = task_index(index)
    if k >= len(tasks):
        raise ValueError(f"task must be an index in [0, {len(tasks)}) (chapter {chapter}'s run has {len(tasks)} tasks: "
                         f"--array=0-{len(tasks) - 1}), got {k}")
    task = tasks[k]
    spec = run.networks(settings)[task.network]
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    amp = PROFILES[profile].amp and device.type == "cuda"
    source = source or PROFILES[profile].data_source
    identity = {**_identity(chapter, profile, settings, source, device, amp), "network": task.network,
                "seed": task.seed}
    path = record_path(out, task)
    if path.exists():
        found = _read_json(path)
        if not isinstance(found, dict) or found.get("format") != FORMAT:
            raise ValueError(f"{path} is not a task record (format {FORMAT}): delete it or write this run's records to "
                             "another folder (--out)")
        if _differs(identity, found):
            raise ValueError(f"{path} holds a record of other settings ({', '.join(_differs(identity, found))} "
                             "differ): delete it or write this run's records to another folder (--out)")
        return path, found
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
    checkpoint = checkpoint_path(chapter, task.network, f"{profile}-{digest}", task.seed)
    files = run.checkpoint_files(checkpoint)
    resumed = any(f.exists() for f in files)
    seed_everything(task.seed)
    data = run.data(settings, spec, source)
    record = run.train(settings, spec, task.seed, data, device, amp, checkpoint)
    document = {"format": FORMAT, **identity, "task": task.index, "tasks": len(tasks),
                "provenance": _provenance(command, device, started, resumed), "record": record}
    document = json.loads(json.dumps(document))
    _write_json(path, document)
    for f in files:
        f.unlink(missing_ok=True)
    return path, document


# ---------------------------------------------------------------- the merge

def read_records(folders) -> list:
    """The task records in ``folders`` (each a folder of :func:`run_task`'s record files; hidden and temporary files and
    JSON files that are not task records are left out) → ``[(path, record file)]``, sorted by path. ``ValueError`` for
    a folder that does not exist. Chapters 04–08."""
    folders = check_folders(folders, "record")
    found = []
    for path in sorted(p for f in folders for p in f.glob("*.json") if not p.name.startswith(".")):
        data = _read_json(path)
        if isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("record"), (dict, list)):
            found.append((path, data))
    return found


def _joined(values) -> object:
    """One value when every task had the same, else the distinct values joined by ", "."""
    distinct = sorted({json.dumps(v) for v in values})
    return json.loads(distinct[0]) if len(distinct) == 1 else ", ".join(str(json.loads(v)) for v in distinct)


def _chosen(chapter, files, tasks, identity) -> dict:
    """Every task's one record file: ``{(network, seed): (path, record file)}``, checked (see :func:`merge_records`)."""
    by_task = {(t.network, t.seed): t for t in tasks}
    chosen, other, strangers, twins = {}, [], [], []
    for path, data in files:
        differ = _differs(identity, data)
        if differ:
            other.append(f"{path}: {', '.join(differ)}")
            continue
        key = (data.get("network"), data.get("seed"))
        if key not in by_task:
            strangers.append(f"{path}: {key[0]!r}, seed {key[1]!r}")
        elif key in chosen and json.dumps(chosen[key][1]["record"], sort_keys=True) != json.dumps(data["record"],
                                                                                                sort_keys=True):
            twins.append(f"task {by_task[key].index} ({key[0]}, seed {key[1]}): {chosen[key][0]} and {path}")
        else:
            chosen.setdefault(key, (path, data))
    if other:
        raise ValueError(f"{len(other)} record(s) of other settings than chapter {chapter}'s {identity['profile']} run "
                         f"(these differ): " + "; ".join(other[:20]))
    if strangers:
        raise ValueError(f"{len(strangers)} record(s) of a network or seed that is not one of this run's (merge with "
                         f"the run's --seeds): " + "; ".join(strangers[:20]))
    if twins:
        raise ValueError(f"{len(twins)} task(s) with two different records (trained twice): keep one of each: "
                         + "; ".join(twins[:20]))
    absent = [t.index for t in tasks if (t.network, t.seed) not in chosen]
    if absent:
        raise ValueError(f"{len(absent)} of {len(tasks)} tasks have no record yet: run them (sbatch "
                         f"--array={array_ranges(absent)} scripts/slurm/full_runs.sbatch {chapter}) and merge again")
    return chosen


def merge_records(chapter: str, folders, profile: str = "full", seeds=None, settings=None,
                  command: str | None = None) -> dict:
    """One report from the record files of ``chapter``'s run (:func:`read_records` of ``folders``; the run as
    :func:`run_settings` gives it): ``{"provenance": ..., "runs": ...}`` (and the chapter's ``extra``), the runs in
    network and seed order and in the shape the chapter's study reads them (:class:`ChapterRun`).

    Raises ``ValueError``, naming the files, for a record of other settings, data source, precision, chapter or
    profile (records of one run all share the first's source and precision), for a record of a network or seed that is
    not the run's, for two different records of one task (the same record twice is taken once), and for a task with no
    record (naming the ``--array`` that runs the missing ones). The provenance holds the run's settings and seeds, the
    tasks' commands, their seconds summed (the compute the run took) and each task's device, torch, machine and
    threads (one value where all agree). Chapters 04–08.
    """
    settings, seeds = run_settings(chapter, profile, seeds, settings)
    run, tasks = RUNS[chapter], chapter_tasks(chapter, profile, seeds, settings)
    files = read_records(folders)
    if not files:
        raise ValueError(f"no task records of chapter {chapter}'s run in {folders}")
    first = next((data for _, data in files if data.get("chapter") == chapter and data.get("profile") == profile),
                 files[0][1])
    identity = {"chapter": chapter, "profile": profile, "settings": _settings_json(settings),
                "source": first.get("source"), "precision": first.get("precision")}
    chosen = _chosen(chapter, files, tasks, identity)
    networks = run.networks(settings)
    order = {name: k for k, name in enumerate(networks)}
    keys = sorted(chosen, key=lambda key: (order[key[0]], seeds.index(key[1])))
    parts = [chosen[key][1]["provenance"] for key in keys]
    provenance = {"command": " && ".join(sorted({p["command"] for p in parts})),
                  "merged_by": command or " ".join(sys.argv), "chapter": chapter, "profile": profile,
                  "settings": json.loads(json.dumps(asdict(settings), default=str)), "seeds": list(seeds),
                  "tasks": len(tasks), "source": identity["source"], "precision": identity["precision"],
                  "seconds": round(sum(p["seconds"] for p in parts), 1),
                  **{k: _joined(p[k] for p in parts) for k in ("device", "torch", "capsule_lab", "machine", "threads")},
                  "resumed": sum(bool(p.get("resumed")) for p in parts), "date": max(p["date"] for p in parts)}
    runs = run.runs([(networks[name], seed, chosen[(name, seed)][1]["record"]) for name, seed in keys])
    return {"provenance": provenance, "runs": runs, **(run.extra or {})}


def write_report(report: dict, path) -> Path:
    """Write a merged report (:func:`merge_records`) as JSON to ``path`` (through a temporary file and a rename);
    returns the path. Chapters 04–08."""
    if not isinstance(report, dict) or not {"provenance", "runs"} <= set(report):
        raise ValueError("report must be a merged report (merge_records), with its 'provenance' and 'runs'")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"--out {path} is a folder, not a file")
    _write_json(path, report)
    return path
