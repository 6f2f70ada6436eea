"""Chapter 08's bench trained long enough for its verdicts, on a CPU, over five seeds.

The quick bench (3 epochs on 6k digits, 3 seeds) is what the chapter trains and reads in a minute; at 3 epochs no
router has converged (the ladder is at 17.5 % error) and three seeds give a t test 2 degrees of freedom. This script
runs the same bench (:func:`capsule_lab.studies.bench.runner.run_router_bench`: every router of the quick profile, its
controls included, on the slim backbone and the quick data) for ``--epochs`` epochs over ``--seeds`` and caches one
record per router and seed in ``capsule_lab/results/router_bench_long/`` (so an interrupted run resumes where it
stopped). It then writes ``capsule_lab/results/router_bench_long.json``: provenance (command, settings, torch,
machine, threads, date, seconds) and the records' keys. Chapter 08 reads it with
:func:`capsule_lab.studies.bench.runner.shipped_longer_run`.

    python scripts/router_bench_longer_run.py --epochs 12      # ~90 min on 2 CPU cores
    python scripts/router_bench_longer_run.py --epochs 20 --routers ladder "ladder matched" \
        --out capsule_lab/results/router_bench_long_ladder.json  # the ladders, until they converge (~25 min)
    python scripts/router_bench_longer_run.py --quick --out /tmp/x.json   # a smoke test in a minute
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from capsule_lab.studies.bench.runner import LONGER_RUN, longer_run_settings, run_router_bench
from capsule_lab.studies.bench.entries import bench_data
from longer_run import parse_arguments, write_report  # noqa: E402


def main(argv=None) -> None:
    routers = None
    argv = list(sys.argv[1:] if argv is None else argv)
    command = [shlex.quote(a) for a in argv]      # the provenance's command, as typed
    if "--routers" in argv:                       # a subset of the bench's routers (e.g. the ladders, trained longer)
        at = argv.index("--routers")
        end = next((k for k in range(at + 1, len(argv)) if argv[k].startswith("--")), len(argv))
        routers, argv = tuple(argv[at + 1:end]), argv[:at] + argv[end:]
    args = parse_arguments(__doc__, argv, epochs=10, train_size=6000, test_size=2000, smoke_size=128,
                           out=LONGER_RUN.with_suffix(".json"))
    if args.seeds == [0, 1, 2] and not args.quick and "--seeds" not in argv:
        args.seeds = [0, 1, 2, 3, 4]
    settings = longer_run_settings(args.epochs, args.train_size, args.test_size, args.seeds, routers, args.lr_decay)
    cache = LONGER_RUN if not args.quick else args.out.with_suffix("")
    started = time.perf_counter()
    records = run_router_bench(settings, data=bench_data(settings), cache=cache, device="cpu")
    for r in records:
        print(f"{r['router']:20} seed {r['seed']}: accuracy {r['accuracy']:.4f}, affine {r['affine_accuracy']:.4f}, "
              f"{r['train_seconds']:.0f} s{' (cached)' if r['cached'] else ''}", flush=True)
    runs = {"records": [r["key"] for r in records], "cache": str(cache.relative_to(ROOT)) if not args.quick else
            str(cache), "train_seconds": round(sum(r["train_seconds"] for r in records), 1)}
    write_report("router_bench_longer_run.py", command, args, settings, started, runs)


if __name__ == "__main__":
    main()
