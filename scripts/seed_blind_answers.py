"""How often an answer blind to the seed passes a mini-experiment's drawn cases (book/instructors.md, issue 47).

The mini-experiments of exercises 05–08 run every case but seed 0's on seeds drawn afresh by each check and each
grading (``registry.case_seed``). A student who gathered numbers instead of running the experiment has the seed-0
answers exactly and, at best, a typical value for every other case. This script plays that student: for each
drawn case (its arguments without the seed) the "typical value" is the reference's mean over the first ``--draws``
draws; it then counts, over ``--draws`` further draws, how often every drawn case of a case group lands within the
task's band, and prints each group's count with the spread (standard deviation) of each case's value over all draws.

    python scripts/seed_blind_answers.py                                   # 05, 06 and 07, 20 draws each way
    python scripts/seed_blind_answers.py 06.activity_under_noise --draws 30

08's experiment trains networks (two per case): its measurement is on the instructors' page (16 seeds).
"""

from __future__ import annotations

import argparse
import statistics

from capsule_lab.grading import get_task
from capsule_lab.grading.tasks.registry import drawn

FIRST_DRAW = 1000       # the draws used are FIRST_DRAW, FIRST_DRAW + 1, …: any numbers not used elsewhere


def drawn_values(task, draw: int) -> list:
    """``[(arguments without the seed, group, reference value)]`` of the task's drawn cases under ``draw``."""
    with drawn(draw):
        cases = [c for c in task.cases() if c.args[-1] != 0]
    return [(c.args[:-1], c.group, task.reference(*c.args)) for c in cases]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=["05.entropy_vs_iterations", "06.activity_under_noise",
                                                     "07.entropy_vs_lambda"])
    parser.add_argument("--draws", type=int, default=20, help="draws to learn the typical values, and as many to test")
    args = parser.parse_args(argv)
    for task_id in args.tasks:
        task = get_task(task_id)
        if task.kind != "experiment":
            parser.error(f"{task_id} is not a mini-experiment")
        learn = [drawn_values(task, FIRST_DRAW + k) for k in range(args.draws)]
        test = [drawn_values(task, FIRST_DRAW + args.draws + k) for k in range(args.draws)]
        keys = sorted({a for values in learn for a, _, _ in values})
        typical = {a: statistics.mean(v for values in learn for b, _, v in values if b == a) for a in keys}
        spread = {a: statistics.stdev(v for values in learn + test for b, _, v in values if b == a) for a in keys}
        for group in sorted({g for values in test for _, g, _ in values}):
            passed = sum(all(abs(typical[a] - v) <= task.atol for a, g, v in values if g == group) for values in test)
            print(f"{task_id} | {group}: passed {passed} of {args.draws} draws (band ±{task.atol:g}); sd per case "
                  + ", ".join(f"{a}: {spread[a]:.4f}" for a in keys), flush=True)


if __name__ == "__main__":
    main()
