"""Chapter 05's Q-against-REM study trained longer than the quick profile allows, on a CPU, over several seeds.

The quick profile trains for 4 epochs on 3k images and prunes 87.5 % in three halvings: REM then loses points that
the paper's REM does not, and the couplings have not polarised. This script runs the same study
(:func:`capsule_lab.studies.rem.run_rem`: the quick profile's slim CapsNet, its optimiser and learning-rate decay) in
the regime the paper's central claim is about: 24 epochs, 4 dense, then 8 rounds of 2 epochs that each prune a
fifth of the remaining weights (1 − 0.8⁸ = 83.2 % sparse, inside the paper's 80.7–87.3 %), then 4 epochs without
pruning (so that REM's last epoch is not a recovery from its last cut), on test sets where keys can repeat:
Fashion-MNIST (the first ``--train-size`` training images after 3,000 for validation; all 10,000 test images),
the offline MNIST digits (7,200 to train, 800 to validate, 2,000 to test) and the same digits on chapter 06's
40 × 40 canvas (``expanded``: Q and REM are also tested on chapter 06's affine digits, the paper's Table 2).
Q's model is the dense epoch with the lowest validation loss, REM's the last epoch (App. B.2); both are quantised
at inference with K = 11. For each dataset and seed it writes a :func:`capsule_lab.studies.rem.run_record` (every
epoch's numbers) with :func:`capsule_lab.studies.rem.model_extras` (accuracy and entropy against K, saliency on the
object and its shuffled baseline, emptied W_ij, affine accuracy) to ``--out`` with its provenance. Chapter 05
reads it with :func:`capsule_lab.studies.rem.shipped_rem_runs`.

    # the shipped runs: seeds 0-2, then seeds 3 and 4 in another session, merged (see each file's provenance)
    python scripts/rem_longer_run.py --datasets fashion --seeds 0 1 2 --threads 1 --out /tmp/f012.json   # 57 min
    python scripts/rem_longer_run.py --datasets fashion --seeds 3 4 --threads 1 --out /tmp/f34.json
    python scripts/rem_longer_run.py --merge /tmp/f012.json /tmp/f34.json --out capsule_lab/results/rem_runs_fashion.json
    python scripts/rem_longer_run.py --datasets mnist expanded --seeds 0 1 2 --threads 1 --out /tmp/m012.json  # 58 min
    python scripts/rem_longer_run.py --datasets mnist expanded --seeds 3 4 --threads 1 --out /tmp/m34.json
    python scripts/rem_longer_run.py --merge /tmp/m012.json /tmp/m34.json               # rem_runs.json
    python scripts/rem_longer_run.py --quick --out /tmp/x.json    # a smoke test in seconds
    python scripts/rem_longer_run.py --merge a.json b.json --out c.json   # parts that differ only in their seeds
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from capsule_lab.course.profiles import chapter_settings, seed_everything
from capsule_lab.studies.rem import model_at, model_extras, rem_affine_data, rem_study_data, run_record, run_rem
from longer_run import parse_arguments, write_report  # noqa: E402

OUT = ROOT / "capsule_lab" / "results" / "rem_runs.json"
VAL_SIZE = {"fashion": 3000, "mnist": 800, "expanded": 800}


def settings_for(dataset: str, args):
    """The quick profile's settings with this script's schedule and ``dataset``'s sizes."""
    quick = chapter_settings("05", "quick")
    capsnet = replace(quick.capsnet, image_size=40) if dataset == "expanded" else quick.capsnet
    if args.quick:
        return replace(quick, capsnet=capsnet, datasets=(dataset,), train_size=args.train_size, val_size=64,
                       test_size=args.test_size, schedule=replace(quick.schedule, epochs=3, lr_decay=args.lr_decay or quick.schedule.lr_decay),
                       warmup_epochs=1,
                       rounds=2, epochs_per_round=1, amount=0.2, seeds=tuple(args.seeds), keep_every_step=False)
    return replace(quick, capsnet=capsnet, datasets=(dataset,), val_size=VAL_SIZE[dataset],
                   train_size=args.train_size if dataset == "fashion" else None,
                   test_size=None, schedule=replace(quick.schedule, epochs=args.epochs,
                                                    lr_decay=args.lr_decay or quick.schedule.lr_decay),
                   warmup_epochs=4, rounds=8, epochs_per_round=2, tune_epochs=args.epochs - 20, amount=0.2,
                   seeds=tuple(args.seeds), keep_every_step=False, threads=args.threads)


def merge_reports(paths: list, out: Path) -> None:
    """Merge reports of this script that differ only in their seeds (one run split over processes or sessions, or
    seeds added later) into one at ``out``: every run, sorted by dataset and seed; a provenance whose ``command``
    joins each part's (" && "), ``seeds`` the union, ``seconds`` the sum and ``parts`` each part's seconds; each
    dataset's settings with the union of the seeds. The settings (but the seeds), torch, machine and threads must
    agree, and no (dataset, seed) may appear twice. A setting that only some parts record (a field the settings
    gained between the parts, such as a router option dynamic routing does not read) does not refuse the merge: the
    merged settings hold it, and ``provenance["settings_only_in_some_parts"]`` lists it with the parts that have it."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    if len(reports) < 2:
        raise SystemExit("--merge needs two or more reports")

    def flat(tree, prefix=""):                   # {"dataset/field/...": value}
        items = {}
        for key, value in tree.items():
            path = f"{prefix}/{key}" if prefix else key
            items.update(flat(value, path) if isinstance(value, dict) and value else {path: value})
        return items

    datasets = [set(r["provenance"]["settings"]) for r in reports]
    parts = [{k: v for k, v in flat(r["provenance"]["settings"]).items() if k.split("/", 1)[1] != "seeds"}
             for r in reports]
    shared = set.intersection(*(set(p) for p in parts))
    clashes = sorted(k for k in shared if any(p[k] != parts[0][k] for p in parts[1:]))
    if clashes or any(d != datasets[0] for d in datasets):
        raise SystemExit("the reports differ in their settings (besides the seeds): they are not parts of one run"
                         + (f" ({', '.join(clashes)})" if clashes else ""))
    some = {k: [i for i, p in enumerate(parts) if k in p] for p in parts for k in set(p) - shared}

    def union(trees):
        merged = {}
        for tree in trees:
            for key, value in tree.items():
                merged[key] = union([merged[key], value]) if isinstance(value, dict) and key in merged else value
        return merged

    first = reports[0]["provenance"]
    for other in reports[1:]:
        for key in ("torch", "machine", "threads"):
            if other["provenance"][key] != first[key]:
                raise SystemExit(f"the reports differ in {key}: they are not parts of one run")
    runs = [run for report in reports for run in report["runs"]]
    keys = [(run["dataset"], run["seed"]) for run in runs]
    doubled = sorted({k for k in keys if keys.count(k) > 1})
    if doubled:
        raise SystemExit(f"runs in two reports: {doubled}")
    order = list(dict.fromkeys(run["dataset"] for run in runs))
    runs.sort(key=lambda run: (order.index(run["dataset"]), run["seed"]))
    seeds = sorted({s for report in reports for s in report["provenance"]["seeds"]})
    settings = {d: {**s, "seeds": sorted({x for r in reports for x in r["provenance"]["settings"][d]["seeds"]})}
                for d, s in union([r["provenance"]["settings"] for r in reports]).items()}
    seconds = [r["provenance"]["seconds"] for r in reports]
    provenance = dict(first, command=" && ".join(r["provenance"]["command"] for r in reports), seeds=seeds,
                      settings=settings, seconds=round(sum(seconds), 1), parts=seconds,
                      date=max(r["provenance"]["date"] for r in reports))
    if some:
        provenance["settings_only_in_some_parts"] = {
            k: f"part{'s' if len(v) > 1 else ''} {', '.join(str(i + 1) for i in v)} of {len(parts)}"
            for k, v in sorted(some.items())}
        print(f"settings only some parts record (kept, listed in the provenance): {', '.join(sorted(some))}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": provenance, "runs": runs}, indent=1) + "\n")
    print(f"wrote {out}")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--merge":
        out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else OUT
        paths = [a for a in argv[1:argv.index("--out")]] if "--out" in argv else argv[1:]
        merge_reports(paths, out)
        return
    datasets = ["fashion", "mnist", "expanded"]
    if "--datasets" in argv:
        at = argv.index("--datasets")
        end = next((k for k in range(at + 1, len(argv)) if argv[k].startswith("--")), len(argv))
        datasets, rest = argv[at + 1:end], argv[:at] + argv[end:]
    else:
        rest = argv
    args = parse_arguments(__doc__, rest, epochs=24, train_size=30000, test_size=10000, smoke_size=256, out=OUT)
    started = time.perf_counter()
    runs, used = [], {}
    for dataset in datasets:
        settings = settings_for(dataset, args)
        used[dataset] = settings
        data = rem_study_data(dataset, settings)
        affine = rem_affine_data(settings) if dataset == "expanded" else None
        for seed in args.seeds:
            seed_everything(seed)
            run = run_rem(dataset, settings, data, seed=seed)
            record = run_record(run, settings.levels)
            for name, step in (("Q", run.q), ("REM", run.rem)):
                record[name].update(model_extras(model_at(step, settings.capsnet), data[2], affine=affine))
            runs.append(record)
            q, rem = record["Q"], record["REM"]
            print(f"{dataset:8} seed {seed}: Q epoch {q['epoch']} {q['accuracy']:.4f} / {q['quantized_accuracy']:.4f} "
                  f"{q['entropy']:.2f} bits; REM {rem['sparsity']['overall']:.3f} sparse "
                  f"{rem['quantized_accuracy']:.4f} {rem['entropy']:.2f} bits (ceiling {q['entropy_ceiling']:.2f}); "
                  f"{run.seconds:.0f} s", flush=True)
    write_report("rem_longer_run.py", argv, args, used, started, runs)


if __name__ == "__main__":
    main()
