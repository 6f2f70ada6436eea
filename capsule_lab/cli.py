"""The ``capsule-lab`` command: fetch data, generate exercises, grade notebooks, run benchmarks, smoke-test::

    capsule-lab data [--online] [--root DIR]        fetch every reachable dataset source (chapter 02)
    capsule-lab assign [--solutions DIR] [--exercises DIR] [--check]
                                                    exercises/ from solutions/ (all chapters)
    capsule-lab grade NOTEBOOK... [--out DIR] [--timeout S] [--task-timeout S] [--chapter NN]
                      [--jobs N] [--shard K/N] [--force] [--no-sandbox] [--memory-limit MB] [--cpu-limit S]
                      [--key FILE]
                                                    execute and score student notebooks (all chapters),
                                                    N at a time; skips those already graded in DIR;
                                                    exit 0 when every notebook was graded, 1 if not
    capsule-lab grade-merge DIR... --out DIR [--key FILE]
                                                    one grades.csv from the signed reports of shards
    capsule-lab captions NOTEBOOK...                copy each figure's alt text and caption into its cell's
                                                    metadata for the book, after executing (chapters 01-08)
    capsule-lab bench routing [--device D] [--repeats N] [--shapes S...] [--no-memory]
                                                    time routing implementations, print JSON (chapter 02)
    capsule-lab bench steps [--profile quick|full] [--device D] [--repeats N] [--batch B]
                                                    time training steps, ladder vs CapsNet r = 3, 4, 5,
                                                    print JSON (chapter 06)
    capsule-lab bench routers [--profile quick|full] [--seeds N] [--routers NAME...] [--router MODULE:NAME]
                              [--out FILE] [--cache DIR | --no-cache] [--device D] [--no-memory]
                                                    train and measure every router on one backbone,
                                                    records cached; JSON + CSV (chapter 08)
    capsule-lab smoke [--profile quick|full] [--chapters NN...] [--device auto|cpu|cuda] [--batch N]
                      [--source offline|torchvision|auto] [--router MODULE:NAME]
                                                    every chapter's networks and data pipeline: two
                                                    training steps and one evaluation batch each, one
                                                    line per network; exit 1 if any failed (chapter 08)
    capsule-lab smoke --epoch [--profile full] [--chapters NN...] [--train-size N] [--test-size N]
                      [--repeats N] [--out FILE] [--router MODULE:NAME]
                                                    one timed epoch of each chapter's main network:
                                                    seconds per epoch, peak GPU memory, test accuracy
                                                    after it, as JSON (book/setup.md; run it on a GPU)
    capsule-lab cluster tasks CHAPTER [--profile P] [--seeds S...]
                                                    a chapter's multi-seed run as tasks, one per network
                                                    and seed: their indices and the --array to submit
    capsule-lab cluster run CHAPTER [--task K] [--out DIR] [--profile P] [--seeds S...] [--device D]
                                [--source S]
                                                    train task K alone (default: $SLURM_ARRAY_TASK_ID),
                                                    resuming from its checkpoint; one record file in DIR
    capsule-lab cluster merge CHAPTER [DIR...] [--out FILE] [--profile P] [--seeds S...]
                                                    the tasks' records checked and joined into the report
                                                    the chapter reads (chapters 04-08, book/setup.md)

Each subcommand is one entry of :data:`COMMANDS`: a function that adds its arguments to a parser and a
function that runs it and returns the exit status. A new subcommand is a new entry.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


class Command(NamedTuple):
    """A subcommand: its help line, how to add its arguments, how to run it (→ exit status)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# ---------------------------------------------------------------- data

def _data_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--online", action="store_true",
                   help="also download MNIST and Fashion-MNIST with torchvision (needs the internet)")
    p.add_argument("--root", default=None,
                   help="data folder (default: $CAPSULE_LAB_DATA, else data/ in a checkout, else ~/.cache/capsule-lab)")


def _data(args: argparse.Namespace) -> int:
    from .data.sources import fetch_all

    report = fetch_all(args.root, online=args.online)
    for source, where in report.items():
        print(f"{source}: {where}")
    return 0


# ---------------------------------------------------------------- assign

def _assign_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--solutions", default="solutions", help="folder of master notebooks (default: solutions)")
    p.add_argument("--exercises", default="exercises", help="folder of student notebooks (default: exercises)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the exercises are out of date with the solutions")


def _assign(args: argparse.Namespace) -> int:
    from .grading.notebooks.assign import assign, out_of_date

    if args.check:
        stale = out_of_date(args.solutions, args.exercises)
        for path in stale:
            print(f"out of date: {path}")
        if stale:
            print("run `capsule-lab assign` to regenerate the exercises", file=sys.stderr)
            return 1
        print(f"{args.exercises} is up to date with {args.solutions}")
        return 0
    for path in assign(args.solutions, args.exercises):
        print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- grade

GRADE_EPILOG = """\
Each notebook runs in a fresh kernel (for its outputs and errors); then the student's functions are
scored in a separate process the grader starts and kills, on inputs and reference answers the grader
computed itself. The check(...) cells in a notebook are the student's feedback and count for nothing.
Writes OUT/<notebook>.json the moment each notebook is graded, and OUT/grades.csv rebuilt from every
report in OUT (also for one notebook). --jobs N grades N notebooks at a time, each in a worker process.
A notebook whose report in OUT has the same content (sha256), grader and settings is skipped, so an
interrupted run resumes when run again; --force grades everything again. --shard K/N grades every N-th
notebook of the sorted paths, starting at the K-th (a job array); `capsule-lab grade-merge` then builds
one grades.csv from the shards' folders.

exit status: 0 when every notebook was graded, whatever the scores; 1 when grading itself failed for
at least one notebook (unreadable, chapter unknown, no kernel or evaluation process could start: see
the "graded" and "grading_error" columns); 2 for bad arguments; 130 when interrupted (Ctrl-C,
SIGTERM), the reports written so far kept; 3 when no sandbox can start here (the message names the fix).

The kernel and the scoring process run in an OS sandbox (bubblewrap, Linux: read-only files, a private
/tmp, no network, their own processes only, another user, no new processes; the reference answers, the
reports and your files are not there). --no-sandbox grades without one, with your rights: only for
notebooks you trust; every report then says "sandbox": "none", and so does grades.csv.

Every report is signed (an HMAC) with the instructor's key: --key FILE, else $CAPSULE_LAB_GRADER_KEY, else
~/.config/capsule-lab/grader.key, made on first use (mode 0600; never inside OUT). A report in OUT that the
key did not sign is refused (named), left out of grades.csv, and its notebook graded again; grade-merge
takes only signed reports. Shards on several machines need the same key file on each."""


def _grade_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = GRADE_EPILOG
    p.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="student notebooks (.ipynb)")
    p.add_argument("--out", default="reports", help="folder for the JSON reports and grades.csv (default: reports)")
    p.add_argument("--timeout", type=float, default=120, help="seconds each cell may run (default: 120)")
    p.add_argument("--task-timeout", type=float, default=None,
                   help="seconds each task's function may run when scored (default: --timeout)")
    p.add_argument("--memory-limit", type=float, default=None, metavar="MB",
                   help="megabytes of data the kernel and the scoring process may each use (default: 4096; 0: none)")
    p.add_argument("--cpu-limit", type=float, default=None, metavar="S",
                   help="CPU-seconds the kernel and the scoring process may each use (default: 10 × the longer "
                        "of --timeout and --task-timeout, at least 600; 0: none)")
    p.add_argument("--chapter", default=None,
                   help="the chapter NN of every notebook (default: each notebook's metadata, else its name)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="notebooks graded at a time, each by a worker process (default: the CPUs this "
                        "process may use)")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="grade only shard K of N (1 <= K <= N): every N-th notebook of the sorted paths, "
                        "from the K-th; merge the shards' folders with `capsule-lab grade-merge`")
    p.add_argument("--force", action="store_true",
                   help="grade every notebook again, also those already graded in OUT with the same content")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run the notebooks' code without the OS sandbox, with your rights (where bubblewrap cannot "
                        "start: macOS, a container without namespaces); the reports say so")
    _key_argument(p)


def _key_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", default=None, metavar="FILE",
                   help="the instructor's key that signs the reports (default: $CAPSULE_LAB_GRADER_KEY, else "
                        "~/.config/capsule-lab/grader.key; `grade` makes it on first use)")


def _print_refused(refused: list, command: str) -> None:
    if refused:
        print(f"capsule-lab {command}: refused {len(refused)} report(s) not signed with this grader's key (written "
              f"by someone else, or with another key): {', '.join(map(str, refused))}", file=sys.stderr)


def _print_report(r: dict, width: int) -> None:
    notes = []
    if not r["graded"]:
        notes.append(f"NOT GRADED: {r['grading_error']}")
    if r["timed_out"]:
        notes.append(f"cell timeout in cell {', '.join(map(str, r['timeout_cells']))}")
    if r["cell_errors"]:
        notes.append(f"{len(r['cell_errors'])} cell error(s)")
    if r.get("limit_cells"):
        notes.append("limit hit in cell " + ", ".join(f"{c['cell']} ({c['limit']})" for c in r["limit_cells"]))
    if r["kernel_restarts"]:
        notes.append(f"kernel restarted after cell {', '.join(str(k['cell']) for k in r['kernel_restarts'])}")
    if r["aborted"]:
        notes.append(r["aborted"])
    written = [w for w in (r.get("written") or {}).values() if isinstance(w, dict)]
    if written:
        answered = sum(w.get("status") == "answered" for w in written)
        points = sum(w.get("max_points") or 0 for w in written)
        notes.append(f"{answered} of {len(written)} written answers answered ({points} points to score by hand, not "
                     "in this score: `capsule-lab gradebook` writes written.csv)")
    print(f"{r['notebook']:<{width}}  {r['score']:>2}/{r['max_score']:<2}  {'; '.join(notes)}".rstrip())
    for task, t in r["tasks"].items():
        mark = "✔" if t["passed"] else "✘"
        print(f"    {mark} {task:<30} {t['points']}/{t['max_points']}  {t['status']}"
              + ("" if t["passed"] else f"  {t['message'][:100]}"))
    sys.stdout.flush()


def _grade(args: argparse.Namespace) -> int:
    from .grading.engine.sandbox import problem as sandbox_problem
    from .grading.notebooks.batch import default_jobs, grade_batch, parse_shard

    if args.timeout <= 0:
        raise ValueError("--timeout must be a positive number of seconds")
    if args.task_timeout is not None and args.task_timeout <= 0:
        raise ValueError("--task-timeout must be a positive number of seconds")
    if args.memory_limit is not None and not args.memory_limit >= 0:
        raise ValueError("--memory-limit must be a number of megabytes >= 0 (0: no limit)")
    if args.cpu_limit is not None and not args.cpu_limit >= 0:
        raise ValueError("--cpu-limit must be a number of CPU-seconds >= 0 (0: no limit)")
    missing = [p for p in args.notebooks if not Path(p).is_file()]
    if missing:
        raise ValueError(f"notebook(s) not found: {', '.join(missing)}")
    jobs = default_jobs() if args.jobs is None else args.jobs
    shard = parse_shard(args.shard) if args.shard is not None else None
    if not args.no_sandbox and sandbox_problem() is not None:
        print(f"capsule-lab grade: {sandbox_problem()}", file=sys.stderr)
        return 3
    # every grading option of grade_notebook, passed on to each notebook's grading
    options = dict(timeout=args.timeout, task_timeout=args.task_timeout, chapter=args.chapter,
                   sandbox=not args.no_sandbox)
    options.update({k: v for k, v in (("memory_limit_mb", args.memory_limit), ("cpu_limit_s", args.cpu_limit))
                    if v is not None})  # the limits, when given (else grade_notebook's defaults)
    width, done = 8, []

    def start(todo: list, skipped: list) -> None:
        nonlocal width
        width = max([8, *map(len, todo)])
        where = f"shard {args.shard}: " if shard else ""
        print(f"{where}grading {len(todo)} notebook(s), {min(jobs, len(todo))} at a time"
              + (" WITHOUT A SANDBOX (--no-sandbox)" if args.no_sandbox else "") if todo
              else f"{where}nothing to grade", end="")
        print(f"; skipped {len(skipped)} already graded (same content, grader and settings; --force grades them "
              "again)" if skipped else "")
        if todo:
            print(f"{'notebook':<{width}}  score  notes")
        sys.stdout.flush()

    def show(report: dict) -> None:
        done.append(report)
        _print_report(report, width)

    try:
        batch = grade_batch(args.notebooks, args.out, jobs=jobs, shard=shard, force=args.force, on_start=start,
                            on_report=show, key_file=args.key, **options)
    except KeyboardInterrupt:
        print(f"capsule-lab grade: interrupted after {len(done)} notebook(s); their reports are in {Path(args.out)}/ "
              "— run the same command again to grade the rest", file=sys.stderr)
        return 130
    _print_refused(batch.refused, "grade")
    print(f"reports written to {Path(args.out)}/")
    failed = [r["notebook"] for r in batch.reports if not r["graded"]]
    if failed:
        print(f"capsule-lab grade: {len(failed)} notebook(s) could not be graded: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


def _grade_merge_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = ("Copies every report of the DIRs signed with the instructor's key (--key) into --out, signed again, "
                "and rebuilds its grades.csv; reports the key did not sign are refused and named. exit status: 0 "
                "when every notebook there was graded and no report was refused, 1 when one was not graded or a "
                "report was refused, 2 for bad arguments, no key, a notebook graded with different contents in "
                "two DIRs, or reports of different graders.")
    p.add_argument("folders", nargs="+", metavar="DIR", help="report folders of `capsule-lab grade` (its --out)")
    p.add_argument("--out", required=True,
                   help="folder for the merged reports and grades.csv (may be one of the DIRs)")
    _key_argument(p)


def _grade_merge(args: argparse.Namespace) -> int:
    from .grading.engine.signing import existing_key
    from .grading.notebooks.folder import merge_reports

    refused: list = []
    reports = merge_reports(args.folders, args.out, key=existing_key(args.key, outside=[args.out]), refused=refused)
    print(f"{len(reports)} report(s) from {len(args.folders)} folder(s): {Path(args.out) / 'grades.csv'}")
    _print_refused(refused, "grade-merge")
    failed = [r["notebook"] for r in reports if not r["graded"]]
    if failed:
        print(f"capsule-lab grade-merge: {len(failed)} notebook(s) could not be graded: {', '.join(failed)}",
              file=sys.stderr)
    return 1 if failed or refused else 0


# ---------------------------------------------------------------- gradebook

GRADEBOOK_EPILOG = """\
The loop: `capsule-lab grade ... --out reports`, then `capsule-lab gradebook reports`: it writes
reports/written.csv (one row per student and hand-scored answer: the question, its rubric, the answer and an
empty points cell) and reports/gradebook.csv (one row per student, every item of the chosen chapters, always in
course order). Fill in the points of written.csv and run `capsule-lab gradebook reports` again: the points come
into the totals (a point above an item's maximum, for an unknown student or item, or given twice is refused, with
its line, and nothing is written); written.csv is made again with every point kept whose answer is unchanged.
--export canvas|moodle writes the platform's import CSV (one column per chapter, blank where a chapter has no
complete total), --html a one-page class summary.

exit status: 0 when written, 2 for bad arguments, a pattern that names no student in some notebook, two notebooks
of one student for one chapter, or refused rows in written.csv; 1 when a report was refused (not signed with the
key)."""


def _gradebook_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = GRADEBOOK_EPILOG
    p.add_argument("reports", metavar="DIR", help="the report folder of `capsule-lab grade` (its --out)")
    p.add_argument("--student", default=None, metavar="PATTERN",
                   help="who each notebook belongs to: file:REGEX on the file name (group 'student', else the first "
                        "group), folder (the notebook's folder), or metadata:KEY.KEY (default: the file name before "
                        "_NN_, as in alice_05_rem.ipynb)")
    p.add_argument("--chapters", nargs="+", default=None, metavar="NN",
                   help="the chapters whose items are columns (default: every chapter of the course)")
    p.add_argument("--per", choices=["course", "chapter"], default="course",
                   help="one row per student across the chapters (default), or per student and chapter")
    p.add_argument("--out", default=None, metavar="FILE", help="the gradebook CSV (default: DIR/gradebook.csv)")
    p.add_argument("--written", default=None, metavar="FILE",
                   help="the hand-scored points CSV (default: DIR/written.csv; made when absent)")
    p.add_argument("--export", choices=["canvas", "moodle"], default=None,
                   help="also write a learning platform's grade import (DIR/<platform>.csv)")
    p.add_argument("--html", default=None, metavar="FILE", help="also write the class's one-page summary")
    _key_argument(p)


def _gradebook(args: argparse.Namespace) -> int:
    from .grading.engine.signing import existing_key
    from .grading.notebooks.class_summary import write_class_summary
    from .grading.notebooks.folder import read_reports
    from .grading.notebooks.gradebook import (DEFAULT_STUDENT, GRADEBOOK_CSV, WRITTEN_CSV, items, read_written_csv,
                                              students, write_export, write_gradebook, write_written_csv)

    folder = Path(args.reports)
    if not folder.is_dir():
        raise ValueError(f"no report folder {folder}")
    items(args.chapters)                                           # checks the chapters
    found = read_reports(folder, existing_key(args.key, outside=[]))
    if not found:
        raise ValueError(f"no grading reports signed with this grader's key in {folder}")
    by_student = students([report for _, report in found.values()], args.student or DEFAULT_STUDENT)
    written = Path(args.written) if args.written else folder / WRITTEN_CSV
    if written.is_file():
        read_written_csv(written, by_student, args.chapters)      # refuses wrong points before anything is written
    written, dropped = write_written_csv(by_student, written, args.chapters)
    hand = read_written_csv(written, by_student, args.chapters)   # the points kept: answers unchanged since scored
    out = write_gradebook(by_student, hand, Path(args.out) if args.out else folder / GRADEBOOK_CSV, args.chapters,
                          args.per)
    names = sorted({s for s, _ in by_student})
    print(f"{len(names)} student(s), {len(by_student)} notebook(s): {out}")
    print(f"hand-scored points: {len(hand)} entered, in {written}")
    for student, item in dropped:
        print(f"  dropped the points of {student}, {item}: the answer changed since it was scored")
    if args.export:
        print(f"{args.export} import: {write_export(by_student, hand, folder / f'{args.export}.csv', args.export, args.chapters)}")
    if args.html:
        print(f"class summary: {write_class_summary(by_student, hand, args.html, args.chapters)}")
    _print_refused(found.refused, "gradebook")
    return 1 if found.refused else 0


# ---------------------------------------------------------------- bench

def _bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["routing", "steps", "routers"],
                   help="routing: the routing implementations; steps: whole training steps, ladder vs CapsNet; "
                        "routers: every router trained and measured on one backbone (chapter 08)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per measurement; the median is reported")
    p.add_argument("--shapes", nargs="+", default=["sabour", "slim"], help="named shapes (default: sabour slim)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    p.add_argument("--profile", choices=["quick", "full"], default=None,
                   help="steps: slim networks (quick, the default) or the papers' sizes (full); routers: the "
                        "chapter 08 settings (default: $CAPSULE_LAB_PROFILE, else gpu with CUDA, whose bench is the "
                        "quick one, and quick without)")
    p.add_argument("--batch", type=int, default=100, help="steps: images per training step (the paper: 100)")
    p.add_argument("--seeds", type=int, default=None, metavar="N",
                   help="routers: seeds 0 … N-1 (default: the profile's)")
    p.add_argument("--routers", nargs="+", default=None, metavar="NAME",
                   help="routers: which (default: all; names as in capsule_lab.studies.bench.settings.ROUTERS_08, or any "
                        "registered kind of router)")
    p.add_argument("--router", action="append", default=None, metavar="MODULE:NAME",
                   help="routers: a router of your own, imported from MODULE (a Router subclass or a builder NAME, or "
                        "a kind MODULE registers); repeatable; with it alone, only these routers run")
    p.add_argument("--out", default="router_bench.json",
                   help="routers: the JSON file of records; the CSV goes beside it (default: router_bench.json)")
    p.add_argument("--cache", default=None,
                   help="routers: the folder of cached records (default: $CAPSULE_LAB_CACHE/router-bench, else "
                        "~/.cache/capsule-lab/router-bench)")
    p.add_argument("--no-cache", action="store_true", help="routers: train every record, read and write no cache")


def _bench(args: argparse.Namespace) -> int:
    from .measures.cost import main_routing, main_steps

    if args.what == "routers":
        return _bench_routers(args)
    if args.what == "steps":
        print(main_steps(args.profile or "quick", args.device, args.repeats, args.batch))
    else:
        print(main_routing(args.device, args.repeats, tuple(args.shapes), not args.no_memory))
    return 0


def _bench_routers(args: argparse.Namespace) -> int:
    import json

    from .course.profiles import chapter_settings, get_profile
    from .studies.bench.runner import default_cache, run_router_bench, summarize_records, write_results
    from .routing import import_router

    profile = get_profile(args.profile, args.device)     # the chapter's precision: mixed on CUDA in the full profile
    settings = chapter_settings("08", profile)
    if args.seeds is not None and args.seeds < 1:
        raise ValueError(f"--seeds must be a positive integer, got {args.seeds}")
    seeds = tuple(range(args.seeds)) if args.seeds is not None else None
    cache = None if args.no_cache else (args.cache or default_cache())
    routers = args.routers
    if args.router:
        routers = [*(routers or ()), *(import_router(reference) for reference in args.router)]
    records = run_router_bench(settings, routers, seeds, cache=cache, device=profile.device, amp=profile.amp,
                               memory=not args.no_memory)
    json_path, csv_path = write_results(records, args.out)
    summary = {name: {k: (v[0] if isinstance(v, tuple) else v) for k, v in row.items()}
               for name, row in summarize_records(records).items()}
    print(json.dumps({"records": str(json_path), "table": str(csv_path), "cache": str(cache) if cache else None,
                      "trained": sum(not r["cached"] for r in records), "read": sum(r["cached"] for r in records),
                      "means": summary}, indent=2))
    return 0


# ---------------------------------------------------------------- smoke

def _smoke_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", choices=["quick", "gpu", "full"], default="full",
                   help="the profile whose networks and data are built (default: full)")
    p.add_argument("--chapters", nargs="+", default=None, metavar="NN",
                   help="chapters to smoke (default: 02 03 04 05 06 07 08)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto, CUDA if available)")
    p.add_argument("--batch", type=int, default=2,
                   help="images per training step and in the evaluation batch (default: 2)")
    p.add_argument("--source", choices=["offline", "torchvision", "auto"], default=None,
                   help="data source for every dataset (default: each chapter's own; an absent torchvision "
                        "dataset is replaced by the offline one, never downloaded)")
    p.add_argument("--epoch", action="store_true",
                   help="instead: train one whole epoch of each chapter's main network and print seconds per epoch, "
                        "peak GPU memory and the test accuracy after it as JSON (capsule_lab.course.epoch_timing)")
    p.add_argument("--train-size", type=int, default=None,
                   help="--epoch: training images of the epoch (default: the profile's, 60,000 in the full profile)")
    p.add_argument("--test-size", type=int, default=None,
                   help="--epoch: test images the accuracy is measured on (default: the profile's)")
    p.add_argument("--repeats", type=int, default=5, help="--epoch: timed training steps, after one warm-up")
    p.add_argument("--out", default=None, help="--epoch: also write the JSON report to this file")
    p.add_argument("--router", action="append", default=None, metavar="MODULE:NAME",
                   help="run this router (a registered kind, or MODULE:NAME of your own) in the chapters that compare "
                        "routers (07, 08) instead of theirs; repeatable")


def _routers(args: argparse.Namespace):
    """The routers ``--router`` names, each imported and registered (:func:`capsule_lab.routing.import_router`)."""
    if not args.router:
        return None
    from .routing import import_router
    return [import_router(r) if ":" in r else r for r in args.router]


def _smoke(args: argparse.Namespace) -> int:
    import time

    from .course.smoke import smoke

    if args.epoch:
        return _smoke_epoch(args)
    start = time.perf_counter()
    results = smoke(args.chapters, args.profile, args.device, args.batch, args.source, progress=True,
                    routers=_routers(args))
    failed = [r for r in results if not r.ok]
    print(f"{len(results)} network(s) in {time.perf_counter() - start:.1f} s, {len(failed)} failed")
    if failed:
        print("capsule-lab smoke: failed: " + "; ".join(f"{r.chapter} {r.model} ({r.dataset})" for r in failed),
              file=sys.stderr)
        return 1
    return 0


def _smoke_epoch(args: argparse.Namespace) -> int:
    import json
    import time
    from contextlib import redirect_stdout

    from .course.epoch_timing import epoch_report, time_epochs

    start = time.perf_counter()
    with redirect_stdout(sys.stderr):                       # the progress lines; stdout holds the JSON alone
        results = time_epochs(args.chapters, args.profile, args.device, args.source, args.train_size,
                              args.test_size, args.repeats, progress=True, routers=_routers(args))
    report = epoch_report(results, args.profile, "capsule-lab smoke " + " ".join(args.argv),
                          time.perf_counter() - start)
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf8")
    print(text)
    if report["failed"]:
        print(f"capsule-lab smoke --epoch: failed: {', '.join(report['failed'])}", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------- cluster

CLUSTER_EPILOG = """\
A chapter's full multi-seed run (chapters 04-08) as independent tasks, one per network and seed, numbered
0 ... N-1 seed by seed (capsule_lab.course.cluster): `tasks` lists them and the --array of a Slurm job array
that runs them all; `run` trains one task alone, its index from --task or $SLURM_ARRAY_TASK_ID, checkpointing
every epoch (a preempted or requeued task resumes at its last epoch; chapter 05 and chapter 08's REM-pruned
router start again) and writes one record file to DIR; a task whose record is there already returns at once.
`merge` checks the records of every task (the same settings, data source and precision; no task missing,
none twice with different records) and joins them into one JSON report in the shape the chapter reads.
Give `run` and `merge` the same --profile and --seeds, and merge's DIRs right after CHAPTER.

exit status: 0 when the task ran (or was done) or the merge was written; 2 for bad arguments or a merge
that refuses its records (the message says which and why); 1 when training failed."""


def _cluster_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = CLUSTER_EPILOG
    p.add_argument("action", choices=["tasks", "run", "merge"],
                   help="tasks: list the run's tasks; run: train one task; merge: join the tasks' records")
    p.add_argument("chapter", metavar="CHAPTER", help="the chapter whose run it is: 04, 05, 06, 07 or 08")
    p.add_argument("folders", nargs="*", metavar="DIR",
                   help="merge: the folders of the tasks' records (default: cluster-records/CHAPTER-PROFILE)")
    p.add_argument("--profile", default="full",
                   help="the chapter's settings under this profile: full (the papers', the default) or another")
    p.add_argument("--seeds", type=int, nargs="+", default=None, metavar="S",
                   help="the run's seeds (default: the settings' own; chapters 06 and 07: those of their shipped runs)")
    p.add_argument("--task", type=int, default=None, metavar="K",
                   help="run: the task's index, 0 ... N-1 (default: $SLURM_ARRAY_TASK_ID)")
    p.add_argument("--out", default=None,
                   help="run: the folder of the record files (default: cluster-records/CHAPTER-PROFILE); merge: the "
                        "report file (default: the first DIR with .json)")
    p.add_argument("--device", default=None, help="run: cpu or cuda (default: cuda if available)")
    p.add_argument("--source", choices=["offline", "torchvision", "auto"], default=None,
                   help="run: where the images come from (default: the profile's, torchvision for full: MNIST's "
                        "60,000; download it once with `capsule-lab data --online` before submitting)")


def _cluster(args: argparse.Namespace) -> int:
    from .course.cluster import array_ranges, chapter_tasks, merge_records, record_path, run_task, task_index, \
        write_report

    tasks = chapter_tasks(args.chapter, args.profile, args.seeds)
    records = f"cluster-records/{args.chapter}-{args.profile}"
    command = "capsule-lab cluster " + " ".join(args.argv)
    if args.action == "tasks":
        networks = len({t.network for t in tasks})
        print(f"chapter {args.chapter}, profile {args.profile}: {len(tasks)} tasks ({networks} networks × "
              f"{len(tasks) // networks} seeds), --array={array_ranges(t.index for t in tasks)}")
        print(f"{'task':>4}  {'seed':>4}  network")
        for t in tasks:
            print(f"{t.index:>4}  {t.seed:>4}  {t.network}")
        return 0
    if args.action == "run":
        if args.folders:
            raise ValueError(f"run takes no folders (got {' '.join(args.folders)}): give the records' folder as --out")
        k = task_index(args.task)
        done = k < len(tasks) and record_path(args.out or records, tasks[k]).exists()
        path, document = run_task(args.chapter, k, args.profile, args.seeds, out=args.out or records,
                                  device=args.device, source=args.source, command=command)
        how = ("already done" if done else
               "resumed from its checkpoint" if document["provenance"]["resumed"] else "trained")
        print(f"task {k} of {len(tasks)} ({document['network']}, seed {document['seed']}): {how}, {path}")
        return 0
    folders = args.folders or [records]
    report = merge_records(args.chapter, folders, args.profile, args.seeds, command=command)
    out = write_report(report, args.out or f"{Path(folders[0])}.json")
    p = report["provenance"]
    print(f"{p['tasks']} task record(s) of chapter {args.chapter}'s {args.profile} run merged into {out} "
          f"({p['seconds'] / 3600:.2f} h of task time, {p['precision']}, data {p['source']})")
    return 0


# ---------------------------------------------------------------- captions

def _captions_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="executed notebooks (.ipynb), changed in place")


def _captions(args: argparse.Namespace) -> int:
    from .figures.descriptions import caption_cells

    for path in args.notebooks:
        print(f"{path}: {caption_cells(path)} figure(s) captioned")
    return 0


#: The subcommands by name, each a :class:`Command` (help line, arguments, what runs).
COMMANDS: dict[str, Command] = {
    "data": Command("fetch the datasets (offline sources; --online also downloads)", _data_arguments, _data),
    "assign": Command("generate exercises/ from solutions/", _assign_arguments, _assign),
    "grade": Command("execute student notebooks and write score reports", _grade_arguments, _grade),
    "grade-merge": Command("merge the report folders of `grade --shard` runs into one grades.csv",
                           _grade_merge_arguments, _grade_merge),
    "gradebook": Command("one row per student from a report folder, hand-scored points merged in, exports and a "
                         "class summary", _gradebook_arguments, _gradebook),
    "captions": Command("copy figures' alt text and captions into their cells' metadata (MyST-NB reads them)",
                        _captions_arguments, _captions),
    "bench": Command("benchmark routing implementations, training steps or every router; prints JSON",
                     _bench_arguments, _bench),
    "smoke": Command("build every chapter's networks and data, two training steps and one evaluation batch each",
                     _smoke_arguments, _smoke),
    "cluster": Command("a chapter's multi-seed run as Slurm array tasks: list them, run one, merge their records",
                       _cluster_arguments, _cluster),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per entry of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(prog="capsule-lab", description="The capsule-lab course tools.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        command.add_arguments(p)
        p.set_defaults(_run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``capsule-lab``; returns the exit status (also used by ``sys.exit``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv[1:]                                    # the subcommand's own arguments, for reports
    try:
        return args._run(args)
    except ValueError as err:
        print(f"capsule-lab {args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
