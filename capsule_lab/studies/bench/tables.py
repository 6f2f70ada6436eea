"""Chapter 08's result tables: the bench's records and summary shown as tables, the papers' numbers beside them.

Taught in chapter 08 (``chapters/08_routing_bench.ipynb``), which shows them for the quick bench and for its longer
run; they live here, not in the notebook, so that a script or a cluster job that ran the bench
(:func:`~capsule_lab.studies.bench.runner.run_router_bench`) gets the same tables:

- :func:`bench_tables` — the error of every router beside the MNIST error its paper reports (:data:`PAPER_ERROR`),
  and what each costs: a training step, an inference batch, a step's peak memory, parameters;
- :func:`routing_table` — how each routes: parse-tree entropy and keys, routing dynamics, dead capsules;
- :func:`pair_table` — pairs of routers (:data:`PAIRS`): the paired t test over seeds and McNemar's test pooled over
  the seeds' images;
- :func:`convergence_table` — whether each router had converged: the change of its training accuracy over the last
  epoch, per seed.

Every table is a :class:`~capsule_lab.evidence.tables.Table` of the summary :func:`summarize_records` makes (mean,
standard deviation and standard error over seeds), printed as mean ± standard error.
"""

from __future__ import annotations

from ...evidence.claims import CONVERGENCE, convergence
from ...evidence.stats import binomial_standard_error, paired_t_test, pooled_mcnemar_test
from ...evidence.tables import Table

__all__ = ["PAPER_ERROR", "PAIRS", "plus_minus", "error_entry", "bench_tables", "routing_table", "pair_table",
           "convergence_table"]

#: The MNIST test error (%) each router's paper reports, at the paper's own scale, and where.
PAPER_ERROR = {
    "dynamic r=1": ("0.34", "Sabour, Table 1, no decoder"), "dynamic r=3": ("0.35", "Sabour, Table 1, no decoder"),
    "rem-pruned": ("0.44", "REM, Table 9"), "ladder": ("0.50-0.80", "ladder, Table 2"),
    "similarity": ("1.0", "Faria, Table 3"), "connectionist": ("0.53", "Faria, Table 3"),
    "self-attention": ("0.26", "Efficient-CapsNet")}

#: The pairs of routers :func:`pair_table` compares: dynamic routing (r = 3) against each change of it, and Faria's two
#: learned routers against each other.
PAIRS = (("dynamic r=3", "uniform"), ("dynamic r=3", "dynamic r=1"), ("dynamic r=3", "dynamic r=5"),
         ("dynamic r=3", "detached"), ("dynamic r=3", "rem-pruned"), ("dynamic r=3", "self-attention"),
         ("dynamic r=3", "dynamic r=3 normed"), ("dynamic r=3", "ladder"), ("connectionist", "similarity"))


def plus_minus(entry, scale: float = 1.0, digits: int = 1) -> str:
    """A summary entry ``(mean, sd, se)`` as ``"mean ± se"`` (the mean alone with one seed), scaled. Chapter 08."""
    mean, _, se = entry
    return f"{scale * mean:.{digits}f}" + (f" ± {scale * se:.{digits}f}" if se is not None else "")


def error_entry(entry) -> tuple:
    """An accuracy's summary entry ``(mean, sd, se)`` as the error's, in percent: ``(mean, None, se)``. Chapter 08."""
    mean, _, se = entry
    return (100 * (1 - mean), None, None if se is None else 100 * se)


def _seeds(summary: dict) -> int:
    if not isinstance(summary, dict) or not summary:
        raise ValueError("summary must be the non-empty dict summarize_records returns")
    return max(row["seeds"] for row in summary.values())


def bench_tables(summary: dict, n_test: int, setting: str) -> tuple:
    """Two tables of the bench's summary (:func:`~capsule_lab.studies.bench.runner.summarize_records`) on ``n_test``
    test images: the errors beside the papers' MNIST errors (:data:`PAPER_ERROR`) with one run's binomial standard
    error, and the costs. ``setting`` names the run in the captions. Chapter 08."""
    seeds = _seeds(summary)
    errors = Table(["router", "error (%)", "image se", "affine error (%)", "paper's MNIST error (%)", "source"],
                   [(name, error_entry(row["accuracy"]), 100 * binomial_standard_error(row["accuracy"][0], n_test),
                     error_entry(row["affine_accuracy"]), *PAPER_ERROR.get(name, (None, None)))
                    for name, row in summary.items()],
                   caption=f"{setting}: test error per router, mean ± standard error over {seeds} seeds, beside the "
                           f"MNIST error each paper reports at its own scale",
                   formats={"error (%)": lambda e: plus_minus(e, digits=2), "image se": ".2f",
                            "affine error (%)": plus_minus})
    costs = Table(["router", "step (ms)", "inference (ms)", "memory (MB)", "parameters", "router parameters"],
                  [(name, row["train_step_ms"], row["inference_ms"], row["peak_memory_mb"], row["parameters"][0],
                    row["router_parameters"][0]) for name, row in summary.items()],
                  caption=f"{setting}: cost per router, mean ± standard error over {seeds} seeds: a training step (the "
                          f"mean over the run), an inference batch, a step's peak memory",
                  formats={"step (ms)": lambda e: plus_minus(e, digits=0),
                           "inference (ms)": lambda e: plus_minus(e, digits=0),
                           "memory (MB)": lambda e: plus_minus(e, digits=0), "parameters": ",.0f",
                           "router parameters": ",.0f"})
    return errors, costs


def routing_table(summary: dict, setting: str) -> Table:
    """The routing measures of the bench's summary, mean ± standard error over seeds: parse-tree entropy and keys per
    class, routing dynamics (dyr) and the dead primary and class capsules. Chapter 08."""
    seeds = _seeds(summary)
    return Table(["router", "entropy (bits)", "keys/class", "dyr", "dead primary %", "dead class %"],
                 [(name, row["entropy"], row["keys"], row["dyr"], row["dead_primary"], row["dead_class"])
                  for name, row in summary.items()],
                 caption=f"{setting}: parse-tree entropy, parse trees per class, routing dynamics and dead capsules "
                         f"per router, mean ± standard error over {seeds} seeds",
                 formats={"entropy (bits)": lambda e: plus_minus(e, digits=2),
                          "keys/class": lambda e: plus_minus(e, digits=0), "dyr": lambda e: plus_minus(e, digits=3),
                          "dead primary %": lambda e: plus_minus(e, 100), "dead class %": lambda e: plus_minus(e, 100)})


def pair_table(records: list, seeds, pairs=PAIRS) -> Table:
    """Each pair of routers (A, B): the mean accuracy difference over ``seeds`` with its 95 % t interval and p (the
    paired t test), and McNemar's test on the images pooled over the seeds. Chapter 08."""
    by = {(r["router"], r["seed"]): r for r in records}
    rows = []
    for x, y in pairs:
        t = paired_t_test([by[x, s]["accuracy"] for s in seeds], [by[y, s]["accuracy"] for s in seeds])
        m = pooled_mcnemar_test([(by[x, s]["correct"], by[y, s]["correct"]) for s in seeds])
        rows.append((x, y, 100 * t.mean, tuple(100 * v for v in t.interval), t.p_value, f"{m.a_only} / {m.b_only}",
                     m.p_value))
    return Table(["A", "B", "A − B (points)", "95 % interval", "t test p", "A only / B only", "McNemar p"], rows,
                 caption=f"Pairs of routers on the quick bench: the paired t test of the accuracy difference over "
                         f"{len(seeds)} seeds, and McNemar's test on the images pooled over the seeds",
                 formats={"A − B (points)": ".2f", "95 % interval": lambda i: f"[{i[0]:.2f}, {i[1]:.2f}]",
                          "t test p": ".2g", "McNemar p": ".2g"})


def convergence_table(settings, records: list, setting: str) -> Table:
    """Each router's change of the training accuracy over the last epoch of ``settings``' schedule, per seed, and
    whether it converged (every change below :data:`~capsule_lab.evidence.rules.CONVERGENCE`). Chapter 08."""
    seeds = [f"seed {s}" for s in settings.seeds]
    return Table(["router", *seeds, "converged"],
                 [(name, *(100 * c for c in changes), all(abs(c) < CONVERGENCE for c in changes))
                  for name, changes in convergence(records).items()],
                 caption=f"{setting}: change of the training accuracy over the last of {settings.schedule.epochs} "
                         f"epochs, in points, per seed; converged when every change is below "
                         f"{100 * CONVERGENCE:g} points", formats={seed: "+.2f" for seed in seeds})
