"""Chapter 06's comparison trained to convergence on a CPU, over five seeds.

The quick profile trains each network for 2 epochs on 3k expanded digits, far from converged. This script runs the
same study (:func:`capsule_lab.studies.ladder.run_ladder_study`: the slim L-CapsNets with K = 16, 32, 64, the slim
CapsNet and the CapsNet with as many parameters as the main L-CapsNet) on all 8k offline training digits for 15 epochs
with the learning rate decayed by 0.8 per epoch (the quick profile decays by 0.9; the faster decay lets every network
meet the course's convergence criterion within 15 epochs), and tests on all 2k offline test digits, clean and affine.
For every seed it writes, per network: the accuracies and which test images it got right, parameters, seconds,
per-epoch training loss and accuracy, the clean and affine test accuracy after every epoch (to compare networks
where their training accuracies meet), the activity profile of the primary capsules on the training images of digit
0 (the paper's Figure 4) and, image by image, where the activity falls below one half and how many capsules are
middling (:func:`capsule_lab.measures.activity.activity_drop`), the median of 10 timed training steps on 100 of the
training digits (Table 3) with the device and thread count, and for each CapsNet the lengths and couplings of its 100
most active primary capsules averaged over the clean test images of digit 0 (Figure 1). The report is
``capsule_lab/results/ladder_runs.json``;
chapter 06 reads it with :func:`capsule_lab.studies.ladder.shipped_ladder_runs`.

    # the shipped run, on two cores: two parts side by side, then merged (see the provenance)
    python scripts/ladder_longer_run.py --seeds 0 1 2 --threads 1 --out /tmp/a.json
    python scripts/ladder_longer_run.py --seeds 3 4 --threads 1 --out /tmp/b.json
    python scripts/ladder_longer_run.py --merge /tmp/a.json /tmp/b.json
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

from capsule_lab.studies.ladder import ladder_study_data, run_ladder_study, run_record
from capsule_lab.course.profiles import chapter_settings, seed_everything
from longer_run import merged, parse_arguments, write_report  # noqa: E402

OUT = ROOT / "capsule_lab" / "results" / "ladder_runs.json"
LR_DECAY = 0.8          # per epoch; the quick profile's is 0.9
STEP_REPEATS = 10       # timed training steps on 100 training digits (Table 3's batch)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if merged(argv, OUT):
        return
    args = parse_arguments(__doc__, argv, epochs=15, train_size=8000, test_size=2000, smoke_size=256, out=OUT,
                           lr_decay=LR_DECAY)
    settings = chapter_settings("06", "quick")
    settings = replace(settings, train_size=args.train_size, test_size=args.test_size,
                       schedule=replace(settings.schedule, epochs=args.epochs, lr_decay=args.lr_decay))
    data = ladder_study_data(settings)
    started = time.perf_counter()
    runs = {}
    for seed in args.seeds:
        seed_everything(seed)
        for name, net in run_ladder_study(settings, data, seed=seed, track_test=True).items():
            run = run_record(net, settings, data, step_repeats=STEP_REPEATS)
            runs.setdefault(name, {})[str(seed)] = run
            curve = net.history.train_accuracy
            change = 100 * (curve[-1] - curve[-2]) if len(curve) > 1 else 0.0
            print(f"seed {seed} {name:15} clean {net.clean_accuracy:.4f} affine {net.affine_accuracy:.4f} "
                  f"last-epoch change {change:+.2f} step {1000 * run['step_seconds']:.0f} ms ({net.seconds:.0f} s)",
                  flush=True)
    write_report("ladder_longer_run.py", argv, args, settings, started, runs)


if __name__ == "__main__":
    main()
