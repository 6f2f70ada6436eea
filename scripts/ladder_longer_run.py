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

    # the shipped run, on two cores: parts side by side, two at a time, then merged (see the provenance)
    python scripts/ladder_longer_run.py --seeds 0 1 --threads 1 --out /tmp/a.json
    python scripts/ladder_longer_run.py --seeds 2 --threads 1 --out /tmp/b.json
    python scripts/ladder_longer_run.py --seeds 3 --threads 1 --out /tmp/s3.json
    python scripts/ladder_longer_run.py --seeds 4 --threads 1 --out /tmp/s4.json
    python scripts/ladder_longer_run.py --merge /tmp/a.json /tmp/b.json /tmp/s3.json /tmp/s4.json
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

from capsule_lab.measures.cost import training_step_seconds
from capsule_lab.studies.ladder import (activity_drops, activity_profiles, coupling_profile, ladder_study_data,
                                       run_ladder_study)
from capsule_lab.course.profiles import chapter_settings, seed_everything
from longer_run import merge_reports, parse_arguments, write_report  # noqa: E402

OUT = ROOT / "capsule_lab" / "results" / "ladder_runs.json"
LR_DECAY = 0.8          # per epoch; the quick profile's is 0.9
STEP_BATCH, STEP_REPEATS = 100, 10


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--merge":
        out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else OUT
        parts = [Path(p) for p in argv[1:argv.index("--out") if "--out" in argv else len(argv)]]
        merge_reports(parts, out)
        return
    args = parse_arguments(__doc__, argv, epochs=15, train_size=8000, test_size=2000, smoke_size=256, out=OUT)
    settings = chapter_settings("06", "quick")
    settings = replace(settings, train_size=args.train_size, test_size=args.test_size,
                       schedule=replace(settings.schedule, epochs=args.epochs, lr_decay=LR_DECAY))
    data = ladder_study_data(settings)
    train, clean, _ = data
    zeros = clean.tensors[0][clean.tensors[1] == settings.profile_digit]
    step_images, step_labels = train.tensors[0][:STEP_BATCH], train.tensors[1][:STEP_BATCH]
    started = time.perf_counter()
    runs = {}
    for seed in args.seeds:
        seed_everything(seed)
        networks = run_ladder_study(settings, data, seed=seed, track_test=True)
        profiles = activity_profiles(networks, train, settings.profile_digit, settings.profile_top)
        drops = activity_drops(networks, train, settings.profile_digit)
        for name, net in networks.items():
            timing = training_step_seconds(net.model(), step_images, step_labels, repeats=STEP_REPEATS)
            run = {"clean_accuracy": net.clean_accuracy, "affine_accuracy": net.affine_accuracy,
                   "clean_correct": net.clean_correct, "affine_correct": net.affine_correct,
                   "parameters": net.parameters, "seconds": net.seconds, "train_loss": net.history.train_loss,
                   "train_accuracy": net.history.train_accuracy,
                   "clean_by_epoch": net.history.test_accuracy, "affine_by_epoch": net.history.epoch_end,
                   "activity_profile": [round(float(a), 5) for a in profiles[name]],
                   "drop_rank": drops[name]["drop_rank"].tolist(), "middling": drops[name]["middling"].tolist(),
                   "step_seconds": timing["median_s"], "device": timing["device"], "threads": timing["threads"]}
            if not net.is_ladder:
                lengths, couplings = coupling_profile(net.model(), zeros, settings.profile_digit, settings.coupling_top)
                run["coupling_lengths"] = [round(float(a), 5) for a in lengths]
                run["couplings"] = [round(float(c), 6) for c in couplings]
            runs.setdefault(name, {})[str(seed)] = run
            curve = net.history.train_accuracy
            change = 100 * (curve[-1] - curve[-2]) if len(curve) > 1 else 0.0
            print(f"seed {seed} {name:15} clean {net.clean_accuracy:.4f} affine {net.affine_accuracy:.4f} "
                  f"last-epoch change {change:+.2f} step {1000 * timing['median_s']:.0f} ms ({net.seconds:.0f} s)",
                  flush=True)
    write_report("ladder_longer_run.py", argv, args, settings, started, runs)


if __name__ == "__main__":
    main()
