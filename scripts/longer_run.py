"""What the longer-run scripts share: their command line and the provenance of the report they write.

``scripts/rem_longer_run.py`` (chapter 05), ``scripts/ladder_longer_run.py`` (chapter 06) and
``scripts/routing_longer_run.py`` (chapter 07) each run a chapter's quick study on more data, for more epochs and
over several seeds, on a CPU, and write a JSON report that the chapter reads beside its own quick numbers. They take
the same options (seeds, epochs, training and test
sizes, threads, ``--quick`` for a smoke test, ``--out``) and record the same provenance, so it lives here.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import torch


def parse_arguments(doc: str, argv, *, epochs: int, train_size: int, test_size: int, smoke_size: int,
                    out: Path, lr_decay: float | None = None) -> argparse.Namespace:
    """The options of a longer run, parsed from ``argv`` (None: ``sys.argv``). ``--quick`` replaces the seeds,
    epochs and sizes by a smoke test's: seed 0, 1 epoch, ``smoke_size`` training and test images. ``--lr-decay``
    (default ``lr_decay``: the script's own; None leaves the schedule's) replaces the schedule's per-epoch decay. The
    thread count is applied to torch here.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--train-size", type=int, default=train_size)
    parser.add_argument("--test-size", type=int, default=test_size)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lr-decay", type=float, default=lr_decay,
                        help="the learning rate's decay per epoch (default: "
                             + ("the schedule's own)" if lr_decay is None else f"{lr_decay})"))
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke test: {smoke_size} images, 1 epoch, seed 0")
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.epochs, args.train_size, args.test_size = [0], 1, smoke_size, smoke_size
    torch.set_num_threads(args.threads)
    return args


def write_report(script: str, argv, args: argparse.Namespace, settings, started: float, runs: dict) -> None:
    """Write ``{"provenance": …, "runs": runs}`` to ``args.out``: the command (``script`` and its arguments), the
    settings trained with, the seeds, the seconds since ``started`` (a ``time.perf_counter()``), torch's version,
    the machine, the threads and the date (UTC).
    """
    report = {"provenance": {"command": f"python scripts/{script} " + " ".join(argv or sys.argv[1:]),
                             "settings": ({k: asdict(v) for k, v in settings.items()} if isinstance(settings, dict)
                                          else asdict(settings)), "seeds": args.seeds,
                             "seconds": round(time.perf_counter() - started, 1), "torch": torch.__version__,
                             "machine": platform.processor() or platform.machine(), "threads": args.threads,
                             "date": datetime.now(timezone.utc).isoformat(timespec="seconds")},
              "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


def merged(argv: list, default_out: Path, levels: int = 1) -> bool:
    """If ``argv`` is ``--merge PART PART … [--out PATH]``, merge those reports (:func:`merge_reports`, into
    ``default_out`` unless ``--out`` says otherwise) and return True; otherwise do nothing and return False."""
    if not argv or argv[0] != "--merge":
        return False
    end = argv.index("--out") if "--out" in argv else len(argv)
    out = Path(argv[end + 1]) if end < len(argv) else default_out
    merge_reports([Path(p) for p in argv[1:end]], out, levels=levels)
    return True


def merge_reports(paths: list, out: Path, levels: int = 1) -> None:
    """Merge the reports of one longer run split by seeds over several processes (each ``write_report``'s output)
    into one at ``out``: the runs of every seed, and a provenance whose ``command`` lists each part's command (joined
    by " && "), ``seeds`` the seeds the runs hold (a part stopped before its last seed names more than it ran), ``seconds`` the sum of the parts' (the compute the run took, whether or not
    parts ran side by side) and ``parts`` the seconds of each; the settings, torch, machine and threads must agree.
    ``levels`` is how many names key a run before its seed: 1 for ``runs[network][seed]`` (chapter 06), 2 for
    ``runs[dataset][router][seed]`` (chapter 07).
    """
    if levels < 1:
        raise ValueError(f"levels must be at least 1, got {levels}")
    reports = [json.loads(Path(p).read_text()) for p in paths]
    if len(reports) < 2:
        raise SystemExit("--merge needs two or more reports")
    first = reports[0]["provenance"]
    for other in reports[1:]:
        for key in ("settings", "torch", "machine", "threads"):
            if other["provenance"][key] != first[key]:
                raise SystemExit(f"the reports differ in {key}: they are not parts of one run")

    def leaves(tree: dict, depth: int, names: tuple = ()):       # ((name, ..., seed), run) pairs
        for key, value in tree.items():
            yield from (leaves(value, depth - 1, names + (key,)) if depth else [(names + (key,), value)])

    runs: dict = {}
    for report in reports:
        for names, run in leaves(report["runs"], levels):
            if names in runs:
                raise SystemExit(f"{', '.join(names[:-1])}, seed {names[-1]} is in two reports")
            runs[names] = run
    nested: dict = {}                      # names in the order the lowest seed's report has them; seeds sorted
    for names in sorted(runs, key=lambda n: int(n[-1])):
        node = nested
        for name in names[:-2]:
            node = node.setdefault(name, {})
        node.setdefault(names[-2], {})[names[-1]] = runs[names]
    parts = [r["provenance"]["seconds"] for r in reports]
    provenance = dict(first, command=" && ".join(r["provenance"]["command"] for r in reports),
                      seeds=sorted({int(names[-1]) for names in runs}), seconds=round(sum(parts), 1),
                      parts=parts, date=max(r["provenance"]["date"] for r in reports))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": provenance, "runs": nested}, indent=1) + "\n")
    print(f"wrote {out}")
