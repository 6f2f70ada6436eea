"""Chapter 07's router comparison trained longer than the quick profile allows, on a CPU, over three seeds.

The quick profile trains each router for one epoch on 2k images of each dataset (under a minute for all six
networks); that is far from converged, and the LSTM router learns slowest. This script runs the same study
(:func:`capsule_lab.routing_study.run_routing_study`: the slim CapsNet with dynamic, similarity and connectionist
routing, the quick schedule) on 6k training images of each dataset for 3 epochs, tests on 1k, for seeds 0, 1 and 2,
and writes ``capsule_lab/results/routing_runs.json``: provenance (command, settings, torch, machine, threads, date)
and, per dataset, router and seed, the accuracy, parameters, seconds, per-epoch training loss and the couplings'
normalised entropy and mean largest coupling. Chapter 07 reads it with
:func:`capsule_lab.routing_study.shipped_routing_runs`.

    python scripts/routing_longer_run.py                     # ~15-20 min on 2 CPU cores
    python scripts/routing_longer_run.py --quick --out /tmp/x.json   # a smoke test in seconds
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from capsule_lab.profiles import chapter_settings  # noqa: E402
from capsule_lab.routing_study import routing_study_data, run_routing_study  # noqa: E402

OUT = ROOT / "capsule_lab" / "results" / "routing_runs.json"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=6000)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a smoke test: 128 images, 1 epoch, seed 0")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.epochs, args.train_size, args.test_size = [0], 1, 128, 128
    torch.set_num_threads(args.threads)
    settings = replace(chapter_settings("07", "quick"), train_size=args.train_size, test_size=args.test_size,
                       epochs=args.epochs)
    data = {name: routing_study_data(name, settings) for name in settings.datasets}
    started = time.perf_counter()
    runs = {}
    for seed in args.seeds:
        for (dataset, router), run in run_routing_study(settings, data, seed=seed).items():
            runs.setdefault(dataset, {}).setdefault(router, {})[str(seed)] = {
                "accuracy": run.accuracy, "parameters": run.parameters, "router_parameters": run.router_parameters,
                "seconds": run.seconds, "train_loss": run.history.train_loss, "entropy": run.entropy,
                "largest": run.largest}
            print(f"seed {seed} {dataset:8} {router:13} accuracy {run.accuracy:.4f} ({run.seconds:.0f} s)", flush=True)
    report = {"provenance": {"command": "python scripts/routing_longer_run.py " + " ".join(argv or sys.argv[1:]),
                             "settings": asdict(settings), "seeds": args.seeds,
                             "seconds": round(time.perf_counter() - started, 1), "torch": torch.__version__,
                             "machine": platform.processor() or platform.machine(), "threads": args.threads,
                             "date": datetime.now(timezone.utc).isoformat(timespec="seconds")},
              "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
