"""Time claims measured by the timing rule: two networks' training steps, interleaved, 20 rounds per seed, five
seeds, at one and at two CPU threads, the machine's load recorded.

- ``--study bench`` (the default), chapter 08: the ladder's and dynamic routing's (r = 3) bench networks (the longer
  run's settings), on one training batch (:func:`capsule_lab.studies.bench.timing.time_routers`), written to
  ``capsule_lab/results/router_timing.json`` and read by :func:`capsule_lab.studies.bench.timing.shipped_timing`;
- ``--study ladder``, chapter 06 (Table 3): the study's L-CapsNet with K = 32 and its CapsNet with r = 3 (the quick
  profile's slim networks on 40×40, as the longer run trains them), on 100 training digits
  (:func:`capsule_lab.studies.ladder.time_ladder_steps`), written to ``capsule_lab/results/ladder_timing.json``.

The longer runs' records time each network while it trains, network after network; that is the steadier number for
a cost table, but it cannot decide which of two networks is faster (the machine changes between them). Each record
is one network, seed and thread count. Run it on an otherwise idle machine; the load it records says whether it was.

    python scripts/router_timing.py                 # ~2 min on 2 CPU cores
    python scripts/router_timing.py --study ladder  # chapter 06's networks
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

from capsule_lab.course.profiles import chapter_settings  # noqa: E402
from capsule_lab.studies.bench.runner import shipped_longer_run  # noqa: E402
from capsule_lab.studies.bench.timing import TIMING, time_routers  # noqa: E402
from capsule_lab.studies.common import RESULTS  # noqa: E402
from capsule_lab.studies.ladder import LADDER_TIMING, time_ladder_steps  # noqa: E402

ROUTERS = ("ladder", "dynamic r=3")
#: Chapter 06's pair: the main L-CapsNet and the CapsNet (Table 3's claim).
LADDER_NETWORKS = ("ladder K=32", "capsnet r=3")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="a smoke test: seed 0, 10 steps")
    parser.add_argument("--study", choices=("bench", "ladder"), default="bench")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = [0], 10
    started = time.perf_counter()
    if args.study == "ladder":
        settings, names = chapter_settings("06", "quick"), LADDER_NETWORKS
        records = time_ladder_steps(settings, names, args.seeds, args.threads, args.steps)
        out = args.out or Path(str(RESULTS / LADDER_TIMING))
    else:
        settings, names = shipped_longer_run()[0], ROUTERS
        records = time_routers(settings, names, args.seeds, args.threads, args.steps)
        out = args.out or Path(str(TIMING))
    for r in records:
        print(f"{r['router']:12} seed {r['seed']}, {r['threads']} thread(s): median {r['train_step_ms']:.1f} ms over "
              f"{r['timed_steps']} steps, load {r['load'][0]:.2f} → {r['load'][1]:.2f}", flush=True)
    report = {"provenance": {"command": "python scripts/router_timing.py " + " ".join(map(shlex.quote, argv)),
                             "settings": asdict(settings), "routers": list(names), "seeds": args.seeds,
                             "threads": args.threads, "steps": args.steps,
                             "seconds": round(time.perf_counter() - started, 1), "torch": torch.__version__,
                             "machine": platform.processor() or platform.machine(),
                             "date": datetime.now(timezone.utc).isoformat(timespec="seconds")},
              "records": records}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
