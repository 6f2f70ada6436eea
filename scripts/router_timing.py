"""Chapter 08's time claim measured by the timing rule: the ladder's and dynamic routing's (r = 3) training steps,
interleaved, 20 rounds per seed, five seeds, at one and at two CPU threads, the machine's load recorded.

The longer run's records time each router while it trains, router after router; that is the steadier number for a
cost table, but it cannot decide which of two networks is faster (the machine changes between them). This script
builds each router's bench network for each seed (the longer run's settings), takes one training batch and times
their steps in turn (:func:`capsule_lab.studies.bench.timing.time_routers`), and writes
``capsule_lab/results/router_timing.json``: provenance (command, settings, torch, machine, date, seconds) and one
record per router, seed and thread count. Run it on an otherwise idle machine; the load it records says whether it
was. Chapter 08 reads it with :func:`capsule_lab.studies.bench.timing.shipped_timing`.

    python scripts/router_timing.py                 # ~2 min on 2 CPU cores
    python scripts/router_timing.py --quick --out /tmp/t.json   # a smoke test: seed 0, 10 steps
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from capsule_lab.studies.bench.runner import shipped_longer_run  # noqa: E402
from capsule_lab.studies.bench.timing import TIMING, time_routers  # noqa: E402

ROUTERS = ("ladder", "dynamic r=3")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="a smoke test: seed 0, 10 steps")
    parser.add_argument("--out", type=Path, default=Path(str(TIMING)))
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = [0], 10
    settings, _, _ = shipped_longer_run()
    started = time.perf_counter()
    records = time_routers(settings, ROUTERS, args.seeds, args.threads, args.steps)
    for r in records:
        print(f"{r['router']:12} seed {r['seed']}, {r['threads']} thread(s): median {r['train_step_ms']:.1f} ms over "
              f"{r['timed_steps']} steps, load {r['load'][0]:.2f} → {r['load'][1]:.2f}", flush=True)
    report = {"provenance": {"command": "python scripts/router_timing.py " + " ".join(map(shlex.quote, argv)),
                             "settings": asdict(settings), "routers": list(ROUTERS), "seeds": args.seeds,
                             "threads": args.threads, "steps": args.steps,
                             "seconds": round(time.perf_counter() - started, 1), "torch": torch.__version__,
                             "machine": platform.processor() or platform.machine(),
                             "date": datetime.now(timezone.utc).isoformat(timespec="seconds")},
              "records": records}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
