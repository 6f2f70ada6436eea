"""Chapter 07's router comparison trained to convergence on a CPU, over five seeds.

The quick profile trains each router for one epoch on 2k images of each dataset (under a minute for all six
networks); that is far from converged, and the LSTM router learns slowest. This script runs the same study
(:func:`capsule_lab.studies.learned_routing.run_routing_study`: the slim CapsNet with dynamic, similarity and
connectionist routing, and dynamic routing on the learned routers' normalised votes too,
:func:`~capsule_lab.studies.learned_routing.with_normalized_dynamic`; the quick schedule) on 6k training images of
each dataset for 15 epochs with the learning rate decayed by 0.8 per epoch (the quick profile decays by 0.9; a pilot
of 8 epochs at 0.9 left every Fashion-MNIST arm still climbing), tests on 1k, and writes
``capsule_lab/results/routing_runs.json``: provenance (command, settings, seeds, seconds, torch, machine, threads,
date) and, per dataset, router and seed, the accuracy, parameters, seconds, per-epoch training loss and accuracy and
the couplings' normalised entropy and mean largest coupling. Chapter 07 reads it with
:func:`capsule_lab.studies.learned_routing.shipped_routing_runs`.

    # the shipped run, on two cores: three parts, then merged; the first was started with --seeds 0 1 2 and stopped
    # after seed 1 (its report is written after every seed) once seed 2 ran in a part of its own (see the provenance)
    python scripts/routing_longer_run.py --seeds 0 1 --threads 1 --out /tmp/a.json
    python scripts/routing_longer_run.py --seeds 3 4 --threads 1 --out /tmp/b.json
    python scripts/routing_longer_run.py --seeds 2 --threads 1 --out /tmp/c.json
    python scripts/routing_longer_run.py --merge /tmp/a.json /tmp/b.json /tmp/c.json
    python scripts/routing_longer_run.py --quick --out /tmp/x.json   # a smoke test in seconds

About 50 minutes of compute a seed at one thread (2026-11-29), most of it the LSTM router's.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from capsule_lab.studies.learned_routing import routing_study_data, run_routing_study, with_normalized_dynamic
from capsule_lab.course.profiles import chapter_settings
from longer_run import merged, parse_arguments, write_report  # noqa: E402

OUT = ROOT / "capsule_lab" / "results" / "routing_runs.json"
LR_DECAY = 0.8          # per epoch; the quick profile's is 0.9


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if merged(argv, OUT, levels=2):
        return
    args = parse_arguments(__doc__, argv, epochs=15, train_size=6000, test_size=1000, smoke_size=128, out=OUT,
                           lr_decay=LR_DECAY)
    settings = with_normalized_dynamic(chapter_settings("07", "quick"))
    settings = replace(settings, train_size=args.train_size, test_size=args.test_size,
                       schedule=replace(settings.schedule, epochs=args.epochs,
                                        lr_decay=args.lr_decay))
    data = {name: routing_study_data(name, settings) for name in settings.datasets}
    started = time.perf_counter()
    runs = {}
    for seed in args.seeds:
        for (dataset, router), run in run_routing_study(settings, data, seed=seed).items():
            runs.setdefault(dataset, {}).setdefault(router, {})[str(seed)] = {
                "accuracy": run.accuracy, "parameters": run.parameters, "router_parameters": run.router_parameters,
                "seconds": run.seconds, "train_loss": run.history.train_loss,
                "train_accuracy": run.history.train_accuracy, "entropy": run.entropy,
                "largest": run.largest}
            print(f"seed {seed} {dataset:8} {router:26} accuracy {run.accuracy:.4f} ({run.seconds:.0f} s)", flush=True)
        write_report("routing_longer_run.py", argv, args, settings, started, runs)   # the seeds so far


if __name__ == "__main__":
    main()
