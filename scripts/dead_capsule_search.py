"""Search for the conditions under which capsules die in deep CapsNets, at a scale a CPU can train (chapter 04).

Mitterreiter et al. (2023, Table 2) report dead rates of 0.07, 0.56, 0.63 in the hidden layers 2–4 of a CapsNet
with four routing layers; chapter 04's quick profile (squash_exp, Adam 3e-3, one epoch on 3k digits) kills no
capsule. This script trains :class:`~capsule_lab.models.DeepCapsNet`\\ s over a grid of settings (squash, optimiser,
learning rate, initial spread of W and of the routing priors b, training length, affine training data, depth)
with :func:`capsule_lab.studies.depth.train_depth_run`, and appends one CSV row per run: the settings, depth,
seed, test accuracy, per layer the dead rate cdr, dead count cds and mean norm cnm, the run's time, the torch
version and the machine. Rows already in the CSV are skipped, so an interrupted search resumes where it stopped.

    python scripts/dead_capsule_search.py run --grid screen          # 1 seed, many settings: which factors matter
    python scripts/dead_capsule_search.py run --grid confirm         # the deciding factors, 3 seeds, depths 1-6
    python scripts/dead_capsule_search.py plot                       # capsule_lab/results/dead_capsule_search.png
    python scripts/dead_capsule_search.py ship --depths 2 3 4 5 6 --seeds 0 1 2 3 4 --track 4 0
        # capsule_lab/results/dead_capsule_runs.json (chapter 04, section 4; 15 min on 1 thread)
    python scripts/dead_capsule_search.py ship --label "longer, 5 iterations" --depths 4 6 --seeds 0 1 2 3 4 \
        --track 9 9 --out capsule_lab/results/dead_capsule_runs_longer.json   # chapter 04's verdicts (33 min)
    python scripts/dead_capsule_search.py run --quick --csv /tmp/x.csv   # a smoke test in seconds

Every number in ``capsule_lab/results/`` comes from these commands; run them one at a time (each uses ``--threads``,
default 1, CPU threads).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from capsule_lab.studies.depth import depth_study_data, hidden_dead_rate, train_depth_run
from capsule_lab.course.profiles import chapter_settings
from capsule_lab.evidence.stats import correct_string

CSV_PATH = ROOT / "capsule_lab" / "results" / "dead_capsule_search.csv"
PNG_PATH = ROOT / "capsule_lab" / "results" / "dead_capsule_search.png"
JSON_PATH = ROOT / "capsule_lab" / "results" / "dead_capsule_runs.json"
MAX_DEPTH = 8                                   # routing layers; the CSV has per-layer columns for 1 … MAX_DEPTH + 1
LAYERS = range(1, MAX_DEPTH + 2)

#: The settings of one run besides depth and seed; the defaults are chapter 04's quick profile.
BASE = dict(routing="dynamic", squash="exp", optimizer="adam", momentum=0.0, lr=3e-3, lr_decay=0.95, epochs=1,
            train_size=3000, test_size=1000, batch_size=64, init_std=1.0, prior_std=0.0, affine=False, iterations=3)
SETTING_KEYS = tuple(BASE)
RESULT_KEYS = (("accuracy", "hidden_cdr", "hidden_cds", "min_hidden_cnm", "min_hidden_mean")
               + tuple(f"{m}_{l}" for m in ("cdr", "cds", "cnm") for l in LAYERS))
COLUMNS = ("grid", "label") + SETTING_KEYS + ("depth", "seed") + RESULT_KEYS + (
    "seconds", "threads", "torch", "machine", "finished")


def setting(**changes) -> dict:
    unknown = set(changes) - set(BASE)
    if unknown:
        raise ValueError(f"unknown setting(s) {sorted(unknown)}: expected some of {list(BASE)}")
    return {**BASE, **changes}


# Each grid: (label, settings, depths, seeds). The screen varies one factor at a time from the quick profile
# (and from a longer run, where death had time to happen); the confirm grid repeats the deciding ones.
LONG = dict(epochs=5, train_size=8000, lr_decay=0.9)
GRIDS = {
    "quick": [("smoke", setting(epochs=1, train_size=64, test_size=32, batch_size=32), (1, 2), (0,)),
              ("smoke sgd", setting(epochs=1, train_size=64, test_size=32, batch_size=32, optimizer="sgd",
                                    momentum=0.9, lr=0.01), (2,), (0,))],
    "screen": [
        ("quick profile", setting(), (4, 6), (0,)),
        ("sabour squash", setting(squash="sabour"), (4,), (0,)),
        ("sabour squash, W std 2", setting(squash="sabour", init_std=2.0), (4,), (0,)),
        ("sabour squash, W std 4", setting(squash="sabour", init_std=4.0), (4,), (0,)),
        ("SGD 0.1", setting(optimizer="sgd", lr=0.1), (4,), (0,)),
        ("SGD 0.03 + momentum 0.9", setting(optimizer="sgd", lr=0.03, momentum=0.9), (4,), (0,)),
        ("W std 0.5", setting(init_std=0.5), (4,), (0,)),
        ("W std 2", setting(init_std=2.0), (4,), (0,)),
        ("prior std 1", setting(prior_std=1.0), (4,), (0,)),
        ("prior std 3", setting(prior_std=3.0), (4,), (0,)),
        ("lr 1e-2", setting(lr=1e-2), (4,), (0,)),
        ("lr 1e-3", setting(lr=1e-3), (4,), (0,)),
        ("affine data", setting(affine=True), (4,), (0,)),
        ("uniform routing", setting(routing="uniform"), (4,), (0,)),
        ("long", setting(**LONG), (4, 6), (0,)),
        ("long, affine", setting(**LONG, affine=True), (4,), (0,)),
        ("long, sabour, W std 2", setting(**LONG, squash="sabour", init_std=2.0), (4,), (0,)),
        ("long, SGD 0.03 + momentum 0.9", setting(**LONG, optimizer="sgd", lr=0.03, momentum=0.9), (4,), (0,)),
        ("long, prior std 3", setting(**LONG, prior_std=3.0), (4,), (0,)),
        ("long, lr 1e-2", setting(**LONG, lr=1e-2), (4,), (0,)),
    ],
    # Second screen, after the first: only random priors (and long votes) killed capsules in a network that
    # trained. Which spread, which budget, which optimiser, which squash?
    "screen2": [
        ("prior std 2, lr 1e-3", setting(prior_std=2.0, lr=1e-3), (4,), (0,)),
        ("prior std 3, lr 1e-3", setting(prior_std=3.0, lr=1e-3), (4,), (0,)),
        ("W std 1.5, lr 1e-3", setting(init_std=1.5, lr=1e-3), (4,), (0,)),
        ("prior std 3, lr 1e-3, 3 epochs", setting(prior_std=3.0, lr=1e-3, epochs=3, lr_decay=0.9), (4,), (0,)),
        ("sabour squash, W std 3", setting(squash="sabour", init_std=3.0), (4,), (0,)),
        ("5 iterations", setting(iterations=5), (4,), (0,)),
        ("long, prior std 1", setting(**LONG, prior_std=1.0), (4,), (0,)),
        ("long, prior std 2", setting(**LONG, prior_std=2.0), (4,), (0,)),
        ("long, prior std 3", setting(**LONG, prior_std=3.0), (6,), (0,)),
        ("long, prior std 3, lr 1e-3", setting(**LONG, prior_std=3.0, lr=1e-3), (4,), (0,)),
        ("long, prior std 3, SGD 0.03 + momentum 0.9",
         setting(**LONG, prior_std=3.0, optimizer="sgd", lr=0.03, momentum=0.9), (4,), (0,)),
        ("long, prior std 3, affine", setting(**LONG, prior_std=3.0, affine=True), (4,), (0,)),
        ("long, prior std 3, sabour, W std 3", setting(**LONG, prior_std=3.0, squash="sabour", init_std=3.0),
         (4,), (0,)),
        ("long, W std 1.5", setting(**LONG, init_std=1.5), (4,), (0,)),
        ("long, W std 2", setting(**LONG, init_std=2.0), (4,), (0,)),
        ("long, sabour, W std 3", setting(**LONG, squash="sabour", init_std=3.0), (4,), (0,)),
        ("long, 5 iterations", setting(**LONG, iterations=5), (4,), (0,)),
    ],
    # Third screen: GradientTracker on "long, 5 iterations" showed the deaths happen in the first ~10 steps, when
    # the capsules saturate and RBA's softmax over the outputs leaves some capsules no incoming coupling.
    # So the routing's sharpness (iterations, vote length) is the suspect; at the quick budget, 2 seeds.
    "screen3": [
        ("5 iterations, lr 1e-3", setting(iterations=5, lr=1e-3), (4, 6), (0, 1)),
        ("5 iterations", setting(iterations=5), (4, 6), (0, 1)),
        ("4 iterations, lr 1e-3", setting(iterations=4, lr=1e-3), (4,), (0, 1)),
        ("5 iterations, lr 1e-3, 3 epochs", setting(iterations=5, lr=1e-3, epochs=3, lr_decay=0.9), (4,), (0, 1)),
        ("5 iterations, W std 1.5, lr 1e-3", setting(iterations=5, init_std=1.5, lr=1e-3), (4,), (0, 1)),
        ("5 iterations, SGD 0.03 + momentum 0.9", setting(iterations=5, optimizer="sgd", lr=0.03, momentum=0.9),
         (4,), (0, 1)),
        ("5 iterations, SGD 0.1", setting(iterations=5, optimizer="sgd", lr=0.1), (4,), (0, 1)),
        ("5 iterations, lr 1e-3, affine", setting(iterations=5, lr=1e-3, affine=True), (4,), (0, 1)),
        ("lr 1e-3", setting(lr=1e-3), (4, 6), (0, 1)),
    ],
    # Confirmation: the setting that killed most capsules in a network that trained ("long, 5 iterations") over
    # 3 seeds and depths 2, 4, 6; "long" and "long, prior std 3" at depth 4 over the same seeds for comparison.
    "confirm": [
        ("long, 5 iterations", setting(**LONG, iterations=5), (2, 4, 6), (0, 1, 2)),
        ("long", setting(**LONG), (4,), (0, 1, 2)),
        ("long, prior std 3", setting(**LONG, prior_std=3.0), (4,), (0, 1, 2)),
    ],
    # Does death spread with training time (the paper trains ~14k steps; "long" is 625)? Four times longer,
    # with Sabour's 3 iterations and with the 5 that kill early, at depth 4.
    "longer": [
        ("longer", setting(**{**LONG, "epochs": 20, "lr_decay": 0.95}), (4,), (0,)),
        ("longer, 5 iterations", setting(**{**LONG, "epochs": 20, "lr_decay": 0.95}, iterations=5), (4,), (0,)),
    ],
}


# ------------------------------------------------------------------------------------------ running

def machine() -> str:
    """The CPU model (from /proc/cpuinfo where there is one) and its number of cores."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()}"


def run_key(row: dict) -> tuple:
    """What identifies a run: its settings, depth and seed (formatted as the CSV stores them)."""
    return tuple(_fmt(row[k]) for k in SETTING_KEYS + ("depth", "seed"))


def _fmt(value) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def read_rows(path: Path) -> list[dict]:
    """The CSV's rows, as strings (none if the file does not exist yet)."""
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def settings_for(s: dict):
    """Chapter 04's quick DepthStudySettings with the run's data size, schedule and data."""
    base = chapter_settings("04", "quick")
    schedule = replace(base.schedule, epochs=s["epochs"], batch_size=s["batch_size"], lr=s["lr"],
                       lr_decay=s["lr_decay"])
    return replace(base, train_size=s["train_size"], test_size=s["test_size"], schedule=schedule,
                   affine_train=s["affine"])


def train_one(s: dict, depth: int, seed: int, data_cache: dict, track: bool = False):
    """Train and measure one network; returns (DepthRun, seconds)."""
    settings = settings_for(s)
    key = (s["train_size"], s["test_size"], s["affine"])
    if key not in data_cache:
        data_cache[key] = depth_study_data(settings)
    train, test = data_cache[key]
    start = time.perf_counter()
    routed = {} if s["routing"] == "uniform" else {"prior_std": s["prior_std"], "iterations": s["iterations"]}
    run = train_depth_run(settings, depth, s["routing"], seed, train, test, track=track,
                          optimizer=s["optimizer"], momentum=s["momentum"],
                          config={"squash": s["squash"], "init_std": s["init_std"], **routed})
    return run, time.perf_counter() - start


def measure(run) -> dict:
    """The CSV's result columns from a DepthRun."""
    table = run.table
    hidden = table[1:-1]                        # layers 2 … L: not the primary capsules, not the class capsules
    out = {"accuracy": run.record.accuracy,
           "hidden_cds": sum(r["cds"] for r in hidden),
           "hidden_cdr": hidden_dead_rate(table),
           "min_hidden_cnm": min((r["cnm"] for r in hidden), default=float("nan")),
           "min_hidden_mean": min((float(n.mean(0).min()) for n in run.record.norms[1:-1]), default=float("nan"))}
    for l in LAYERS:
        row = table[l - 1] if l <= len(table) else None
        for m in ("cdr", "cds", "cnm"):
            out[f"{m}_{l}"] = "" if row is None else row[m]
    return out


def run_grid(grid: str, csv_path: Path, threads: int, shard: tuple = (0, 1)) -> None:
    """Train every run of ``grid`` not yet in ``csv_path``; ``shard = (k, n)`` takes only every n-th run from the
    k-th (two processes with 1 thread each: shards 0/2 and 1/2)."""
    torch.set_num_threads(threads)
    done = {run_key(r) for r in read_rows(csv_path)}
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not csv_path.exists()
    data_cache = {}
    with csv_path.open("a", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        if new_file:
            writer.writeheader()
        index = -1
        for label, s, depths, seeds in GRIDS[grid]:
            for depth in depths:
                if not 1 <= depth <= MAX_DEPTH:
                    raise ValueError(f"depth must be in 1 … {MAX_DEPTH}, got {depth}")
                for seed in seeds:
                    index += 1
                    row = {"grid": grid, "label": label, **s, "depth": depth, "seed": seed}
                    if index % shard[1] != shard[0] or run_key(row) in done:
                        continue
                    run, seconds = train_one(s, depth, seed, data_cache)
                    row.update(measure(run), seconds=seconds, threads=threads, torch=torch.__version__,
                               machine=machine(), finished=datetime.now(timezone.utc).isoformat(timespec="seconds"))
                    writer.writerow({k: _fmt(v) for k, v in row.items()})
                    f.flush()
                    done.add(run_key(row))
                    cdr = " ".join(f"{float(row[f'cdr_{l}']):.2f}" for l in range(1, depth + 2))
                    print(f"{label:34} depth {depth} seed {seed}: acc {100 * row['accuracy']:5.1f}%  cdr {cdr}  "
                          f"min hidden mean {row['min_hidden_mean']:.4f}  {seconds:5.1f} s", flush=True)


# ------------------------------------------------------------------------------------------ plot

def _mean(rows, key):
    return float(np.mean([float(r[key]) for r in rows]))


def plot(csv_path: Path, out: Path, labels: list[str] | None = None, depth_label: str = "long, 5 iterations") -> None:
    """What decides death. Top: every setting screened at 4 routing layers, its hidden dead rate (bar, mean over
    seeds) and test accuracy (dot): capsules die where the network trained. Bottom left: the hidden dead rate of
    ``depth_label`` against depth, one dot per seed. Bottom right: the dead rate per layer at 4 routing layers
    next to the paper's Table 2. ``labels`` picks the settings of the top panel (default: all at depth 4)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_rows(csv_path) if r["grid"] != "quick"]
    by_label: dict = {}
    for r in rows:
        by_label.setdefault(r["label"], []).append(r)
    at4 = {k: [r for r in v if int(r["depth"]) == 4] for k, v in by_label.items()}
    names = [k for k in (labels or list(at4)) if at4.get(k)]
    names.sort(key=lambda k: (_mean(at4[k], "accuracy") > 0.5, _mean(at4[k], "hidden_cdr")))
    plt.rcParams.update({"font.size": 8})
    top_height = 1.4 + 0.15 * len(names)
    fig = plt.figure(figsize=(7.5, top_height + 2.6), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=(top_height, 2.6))
    ax = top.subplots()
    y = np.arange(len(names))
    dead = [_mean(at4[k], "hidden_cdr") for k in names]
    acc = [_mean(at4[k], "accuracy") for k in names]
    trained = [a > 0.5 for a in acc]
    ax.barh(y, dead, color=["tab:red" if t else "lightgray" for t in trained], label="hidden dead rate")
    ax.plot(acc, y, "k.", label="test accuracy")
    ax.set_yticks(y, [f"{k} ({len(at4[k])})" for k in names], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("4 routing layers: dead rate of layers 2-4 (bar; red: trained, accuracy > 50 %)\n"
                  "and test accuracy (dot); (n) = seeds", fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    ax.tick_params(labelsize=8)

    left, right = bottom.subplots(1, 2)
    ax = left
    runs = by_label.get(depth_label, [])
    depths = sorted({int(r["depth"]) for r in runs})
    for d in depths:
        values = [float(r["hidden_cdr"]) for r in runs if int(r["depth"]) == d]
        ax.plot([d] * len(values), values, "o", color="tab:red", alpha=0.6)
        ax.plot([d - 0.25, d + 0.25], [np.mean(values)] * 2, "k-")
    ax.set_xticks(depths or [4])
    ax.set_xlabel("routing layers")
    ax.set_ylabel("hidden dead rate")
    ax.set_title(f"{depth_label}: per seed, mean (bar)", fontsize=8)
    ax.set_ylim(-0.05, 1.0)

    ax = right
    for k, marker in ((depth_label, "o"), ("long, prior std 3", "s"), ("long", "^")):
        if at4.get(k):
            ax.plot(range(1, 6), [_mean(at4[k], f"cdr_{l}") for l in range(1, 6)], marker=marker,
                    label=f"{k} ({len(at4[k])})")
    ax.plot(range(1, 6), [0.0, 0.07, 0.56, 0.63, 0.0], "r*--", markersize=8, label="paper, Table 2")
    ax.set_xticks(range(1, 6))
    ax.set_xlabel("capsule layer (4 routing layers)")
    ax.set_ylabel("dead rate cdr")
    ax.set_ylim(-0.05, 1.0)
    ax.legend(fontsize=8)
    for a in (*top.axes, left, right):
        a.tick_params(labelsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


# ------------------------------------------------------------------------------------------ ship

def ship(label: str, depths: tuple, seeds: tuple, out: Path, threads: int, track: tuple) -> None:
    """Train chapter 04's experiment under the grid setting ``label`` (RBA and uniform routing, every depth and
    seed) and write what the chapter shows: per run the per-layer table rows, and for the tracked run
    ``track = (depth, seed)`` the per-step history of its dying and its living hidden capsule."""
    torch.set_num_threads(threads)
    s = next(s for grids in GRIDS.values() for lab, s, _, _ in grids if lab == label)
    data_cache, runs, history, start = {}, [], None, time.perf_counter()
    for routing in ("dynamic", "uniform"):
        for depth in depths:
            for seed in seeds:
                tracked = routing == "dynamic" and (depth, seed) == track
                run, seconds = train_one({**s, "routing": routing}, depth, seed, data_cache, track=tracked)
                keep = ("layer", "capsules", "alive", "cnm", "cns", "car", "cas", "cdr", "cds", "dyr", "dys")
                runs.append({"depth": depth, "routing": routing, "seed": seed, "accuracy": run.record.accuracy,
                             "train_accuracy": run.history.train_accuracy, "seconds": round(seconds, 2),
                             "correct": correct_string(run.record.predictions == run.record.labels),
                             "table": [{k: row[k] for k in keep} for row in run.table]})
                print(f"{routing:8} depth {depth} seed {seed}: acc {100 * run.record.accuracy:.1f}%  "
                      f"cdr {[round(r['cdr'], 2) for r in run.table]}  {seconds:.1f} s", flush=True)
                if tracked:
                    history = capsule_pair(run, depth, seed)
    blob = {"provenance": {"command": " ".join(sys.argv), "setting": {"label": label, **s},
                           "depths": list(depths), "seeds": list(seeds), "threads": threads,
                           "seconds": round(time.perf_counter() - start, 1), "torch": torch.__version__,
                           "machine": machine(),
                           "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")},
            "runs": runs, "capsule_history": history}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(blob, indent=1))
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} kB)")


def capsule_pair(run, depth: int, seed: int) -> dict:
    """The per-step history of one hidden capsule that is dead at the end and one that lives (the longest in the
    same layer): mean length, ‖∂L/∂u‖, ‖∂L/∂W‖ of the matrices that read it (GradientTracker)."""
    dead = [r["cds"] for r in run.table]
    layer = next((l for l in range(1, depth) if dead[l] > 0), None)
    if layer is None:
        return None
    final = run.record.norms[layer].mean(0)
    dying, living = int(final.argmin()), int(final.argmax())
    g = run.gradients

    def series(i):
        return {k: [float(f"{x:.4g}") for x in g[k][layer][:, i]] for k in ("norm", "activation", "weight")}

    return {"depth": depth, "seed": seed, "routing": "dynamic", "layer": layer + 1,
            "dying": {"capsule": dying, "test_mean_length": float(final[dying]), **series(dying)},
            "living": {"capsule": living, "test_mean_length": float(final[living]), **series(living)}}


# ------------------------------------------------------------------------------------------ CLI

def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="train a grid of settings, appending rows to the CSV (resumable)")
    p_run.add_argument("--grid", choices=sorted(GRIDS), default="screen")
    p_run.add_argument("--quick", action="store_true", help="the tiny smoke-test grid (seconds)")
    p_run.add_argument("--csv", type=Path, default=CSV_PATH)
    p_run.add_argument("--threads", type=int, default=1)
    p_run.add_argument("--shard", default="0/1", help="K/N: run only every N-th run from the K-th (parallel processes)")
    p_plot = sub.add_parser("plot", help="draw what decides death")
    p_plot.add_argument("--csv", type=Path, default=CSV_PATH)
    p_plot.add_argument("--out", type=Path, default=PNG_PATH)
    p_plot.add_argument("--labels", nargs="*", default=None, help="settings of the top panel (default: all at depth 4)")
    p_plot.add_argument("--depth-label", default="long, 5 iterations", help="the setting drawn against depth")
    p_ship = sub.add_parser("ship", help="train chapter 04's experiment under one setting; write the JSON")
    p_ship.add_argument("--label", default="long, 5 iterations")
    p_ship.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3, 4])
    p_ship.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p_ship.add_argument("--track", type=int, nargs=2, default=[4, 0], metavar=("DEPTH", "SEED"))
    p_ship.add_argument("--out", type=Path, default=JSON_PATH)
    p_ship.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.command == "run":
        k, n = (int(x) for x in args.shard.split("/"))
        if not 0 <= k < n:
            parser.error(f"--shard must be K/N with 0 <= K < N, got {args.shard}")
        run_grid("quick" if args.quick else args.grid, args.csv, args.threads, (k, n))
    elif args.command == "plot":
        plot(args.csv, args.out, args.labels, args.depth_label)
    else:
        ship(args.label, tuple(args.depths), tuple(args.seeds), args.out, args.threads, tuple(args.track))


if __name__ == "__main__":
    main()
