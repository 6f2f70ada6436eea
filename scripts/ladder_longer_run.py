"""Chapter 06's comparison trained longer than the quick profile allows, on a CPU, over five seeds.

The quick profile trains each network for 2 epochs on 4k expanded digits (under a minute for all four); that is
far from converged. This script runs the same study (:func:`capsule_lab.ladder_study.run_ladder_study`: the slim
L-CapsNets with K = 16, 32, 64 and the matched slim CapsNet, the quick schedule) on all 8k offline training
digits for 8 epochs, tests on all 2k offline test digits (clean and affine), for the seeds given, and writes
``capsule_lab/results/ladder_runs.json``: provenance (command, settings, torch, machine, threads, date), and per
network and seed the accuracies, parameters, seconds, per-epoch training loss and accuracy, and the activity profile
of the primary capsules on the training images of digit 0 (the paper's Figure 4). Chapter 06 reads it with
:func:`capsule_lab.ladder_study.shipped_ladder_runs`.

    python scripts/ladder_longer_run.py --seeds 0 1 2 3 4 --threads 1   # the shipped run: 48 min on 1 CPU thread
    python scripts/ladder_longer_run.py --quick --out /tmp/x.json   # a smoke test in seconds
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

from capsule_lab.ladder_study import activity_profiles, ladder_study_data, run_ladder_study  # noqa: E402
from capsule_lab.profiles import chapter_settings, seed_everything  # noqa: E402
from longer_run import parse_arguments, write_report  # noqa: E402

OUT = ROOT / "capsule_lab" / "results" / "ladder_runs.json"


def main(argv=None) -> None:
    args = parse_arguments(__doc__, argv, epochs=8, train_size=8000, test_size=2000, smoke_size=256, out=OUT)
    settings = chapter_settings("06", "quick")
    settings = replace(settings, train_size=args.train_size, test_size=args.test_size,
                       schedule=replace(settings.schedule, epochs=args.epochs))
    data = ladder_study_data(settings)
    started = time.perf_counter()
    runs = {}
    for seed in args.seeds:
        seed_everything(seed)
        networks = run_ladder_study(settings, data, seed=seed)
        profiles = activity_profiles(networks, data[0], settings.profile_digit, settings.profile_top)
        for name, net in networks.items():
            runs.setdefault(name, {})[str(seed)] = {
                "clean_accuracy": net.clean_accuracy, "affine_accuracy": net.affine_accuracy,
                "parameters": net.parameters, "seconds": net.seconds, "train_loss": net.history.train_loss,
                "train_accuracy": net.history.train_accuracy,
                "activity_profile": [round(float(a), 5) for a in profiles[name]]}
            print(f"seed {seed} {name:12} clean {net.clean_accuracy:.4f} affine {net.affine_accuracy:.4f} "
                  f"({net.seconds:.0f} s)", flush=True)
    write_report("ladder_longer_run.py", argv, args, settings, started, runs)


if __name__ == "__main__":
    main()
