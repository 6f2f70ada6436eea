"""Notebooks graded per minute by ``capsule-lab grade --jobs N`` on this machine (book/instructors.md, issue 30).

Makes a folder of ``--count`` submissions (default 24): copies of the solution and exercise notebooks of chapters
01–04 in turn, each with a comment cell naming its copy, so that every notebook's content (its sha256) differs. Then,
for each ``--jobs`` value (default 1 and 2), grades the whole folder into a fresh output folder with
``python -m capsule_lab.cli grade FOLDER/*.ipynb --out OUT --jobs N`` and times it on the wall clock. One
notebook is graded first, untimed, so that the first timed run does not pay for cold file caches alone.

Prints JSON: the machine (CPUs usable, platform, ``OMP_NUM_THREADS``), and per run the seconds, notebooks per
minute, how many notebooks were graded and the exit status; ``same_csv`` says whether every run wrote the same
``grades.csv`` (it should: grading does not depend on the number of workers).

``--no-sandbox-too`` also times each ``--jobs`` value with ``--no-sandbox`` (the sandbox's start cost per notebook;
those runs' CSVs differ in their ``sandbox`` column only, compared without it). ``--interrupt-after S`` adds, for
the last ``--jobs`` value, a run stopped with SIGTERM after S seconds and then run again with the same command: its
``grades.csv`` must be that of the uninterrupted run (``resumed_same_csv``).

    python scripts/grading_rate.py                         # 24 notebooks, --jobs 1 then --jobs 2 (minutes)
    python scripts/grading_rate.py --count 2 --jobs 1 2    # a quick check of the script itself
    python scripts/grading_rate.py --jobs 2 --no-sandbox-too --interrupt-after 60
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / folder / name for name in ("01_capsules.ipynb", "02_dynamic_routing.ipynb",
                                             "03_routing_gradients.ipynb", "04_dead_capsules.ipynb")
           for folder in ("solutions", "exercises")]


def make_class(folder: Path, count: int) -> list[Path]:
    """``count`` submissions in ``folder``: the sources in turn, each with a comment cell of its own."""
    if count < 1:
        raise ValueError(f"--count must be at least 1, got {count}")
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(count):
        source = SOURCES[k % len(SOURCES)]
        nb = nbformat.read(source, as_version=4)
        nb.cells.append(new_code_cell(f"# submission {k + 1} of {count}, a copy of {source.parent.name}/{source.name}"))
        path = folder / f"student{k + 1:02d}_{source.parent.name}_{source.name}"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def grade(paths: list[Path], out: Path, jobs: int, timeout: float, sandbox: bool = True,
          stop_after: float | None = None) -> dict:
    """Grade ``paths`` into ``out`` with ``--jobs jobs`` (and ``--no-sandbox`` unless ``sandbox``); with
    ``stop_after``, SIGTERM the grader after that many seconds. The wall-clock seconds, rate and outcome."""
    command = [sys.executable, "-m", "capsule_lab.cli", "grade", *map(str, paths), "--out", str(out),
               "--jobs", str(jobs), "--timeout", str(timeout), *([] if sandbox else ["--no-sandbox"])]
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = proc.communicate(timeout=stop_after)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate()
    seconds = time.perf_counter() - start
    rows = []
    if (out / "grades.csv").exists():
        with open(out / "grades.csv", newline="", encoding="utf8") as f:
            rows = list(csv.DictReader(f))
    return {"jobs": jobs, "sandbox": sandbox, "seconds": round(seconds, 1),
            "notebooks_per_minute": round(60 * len(paths) / seconds, 2),
            "graded": sum(r["graded"] == "yes" for r in rows), "exit_status": proc.returncode,
            "csv": (out / "grades.csv").read_text(encoding="utf8") if rows else "",
            "error_tail": stderr[-2000:] if proc.returncode not in (0, 1) else ""}


def _without_sandbox_column(text: str) -> str:
    rows = list(csv.reader(text.splitlines()))
    if not rows or "sandbox" not in rows[0]:
        return text
    k = rows[0].index("sandbox")
    return "\n".join(",".join(r[:k] + r[k + 1:]) for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=24, help="notebooks in the class (default: 24)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="--jobs values to time (default: 1 2)")
    parser.add_argument("--timeout", type=float, default=120, help="capsule-lab grade --timeout (default: 120)")
    parser.add_argument("--folder", default=None, help="work folder (default: a temporary one, removed after)")
    parser.add_argument("--no-warm-up", action="store_true", help="skip the untimed grading of one notebook")
    parser.add_argument("--out", default=None, help="also write the JSON to this file")
    parser.add_argument("--no-sandbox-too", action="store_true",
                        help="also time every --jobs value with --no-sandbox (the sandbox's start cost)")
    parser.add_argument("--interrupt-after", type=float, default=None, metavar="S",
                        help="also stop a run of the last --jobs value after S seconds and run it again")
    args = parser.parse_args(argv)
    if any(j < 1 for j in args.jobs):
        parser.error("--jobs values must be at least 1")

    with tempfile.TemporaryDirectory(prefix="grading-rate-") as scratch:
        work = Path(args.folder) if args.folder else Path(scratch)
        paths = make_class(work / "class", args.count)
        if not args.no_warm_up:
            grade(paths[:1], work / "warm-up", 1, args.timeout)
        modes = [True, False] if args.no_sandbox_too else [True]
        runs = [grade(paths, work / f"reports-{k}-jobs{jobs}-{'sandbox' if box else 'none'}", jobs, args.timeout, box)
                for k, (jobs, box) in enumerate([(j, m) for j in args.jobs for m in modes], 1)]
        resumed = None
        if args.interrupt_after is not None:
            out = work / "reports-interrupted"
            first = grade(paths, out, args.jobs[-1], args.timeout, stop_after=args.interrupt_after)
            second = grade(paths, out, args.jobs[-1], args.timeout)
            reference = next(r for r in runs if r["jobs"] == args.jobs[-1] and r["sandbox"])
            resumed = {"stopped_after_s": first["seconds"], "reports_before_stop": first["graded"],
                       "exit_status_stopped": first["exit_status"], "rerun_seconds": second["seconds"],
                       "rerun_exit_status": second["exit_status"], "graded_in_the_end": second["graded"],
                       "resumed_same_csv": second["csv"] == reference["csv"]}
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    report = {"notebooks": args.count, "sources": [f"{p.parent.name}/{p.name}" for p in SOURCES],
              "machine": {"cpus_usable": cpus, "cpu_count": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                          "load_average_after": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
              "runs": [{k: v for k, v in r.items() if k != "csv"} for r in runs],
              "same_csv": len({_without_sandbox_column(r["csv"]) for r in runs}) == 1, "interrupted": resumed}
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf8")
    print(text)
    return 0 if all(r["exit_status"] == 0 and r["graded"] == args.count for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
