"""The code an instructor copies from book/instructors.md runs as it stands (each block after the ones above it);
the grading commands it shows parse with the command's own parser, the flags it names exist, and its Slurm array
and CI matrix grade shards 1..N of N, then merge them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_pages_python_blocks_run():
    text = (ROOT / "book" / "instructors.md").read_text(encoding="utf8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "book/instructors.md", "exec"), namespace)    # noqa: S102 — the page's own examples
    assert tuple(namespace["mine"](namespace["torch"].rand(4, 1, 28, 28)).lengths.shape) == (4, 10)
    assert namespace["net"].router.normalize_over == "inputs"


# ---------------------------------------------------------------- grading a class: the commands it shows

TEXT = (ROOT / "book" / "instructors.md").read_text(encoding="utf8")
SHELL_VARIABLES = {"$SLURM_ARRAY_TASK_ID": "3", "$SLURM_CPUS_PER_TASK": "4", "${{ matrix.shard }}": "2"}


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", TEXT, flags=re.S)


def _commands() -> list[list[str]]:
    """Every ``capsule-lab ...`` command of the page's bash and YAML blocks, variables filled in, as argv."""
    import shlex

    commands = []
    for block in _blocks("bash") + _blocks("yaml"):
        for line in block.replace("\\\n", " ").splitlines():
            for match in re.finditer(r"capsule-lab ([^\"\n]*)", line):
                text = match.group(1)
                for name, value in SHELL_VARIABLES.items():
                    text = text.replace(name, value)
                commands.append(shlex.split(text))
    return commands


def test_the_pages_grading_commands_parse():
    """Each grade and grade-merge command the page shows is accepted by the command's parser as written."""
    from capsule_lab.cli import build_parser
    from capsule_lab.grading.notebooks.batch import parse_shard

    parser = build_parser()
    shown = set()
    for argv in _commands():
        if argv[0] in ("grade", "grade-merge", "gradebook"):
            args = parser.parse_args(argv)        # SystemExit (a failed test) for a flag the command lacks
            if argv[0] == "grade" and args.shard:
                parse_shard(args.shard)
            shown.add(argv[0])
    assert shown == {"grade", "grade-merge", "gradebook"}


def test_the_flags_the_page_names_exist():
    from capsule_lab.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    options = {o for name in ("grade", "grade-merge", "gradebook") for a in sub[name]._actions
               for o in a.option_strings}
    prose = re.sub(r"```.*?```", "", TEXT, flags=re.S)
    spans = [span for span in re.findall(r"`([^`\n]+)`", prose) if span.startswith(("--", "capsule-lab grade"))]
    named = {flag for span in spans for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", span)}
    assert {"--jobs", "--shard", "--force", "--out"} <= named
    assert named <= options, sorted(named - options)


def test_the_slurm_array_and_the_ci_matrix_grade_every_shard_then_merge():
    import yaml

    (slurm,) = [b for b in _blocks("bash") if "#SBATCH --array" in b]
    first, last = map(int, re.search(r"#SBATCH --array=(\d+)-(\d+)", slurm).groups())
    (shards,) = re.findall(r"--shard \$SLURM_ARRAY_TASK_ID/(\d+)", slurm)
    assert (first, last) == (1, int(shards))                     # task K grades shard K of N, for K = 1..N
    (submit,) = [b for b in _blocks("bash") if "--dependency" in b]
    assert "--dependency=afterany:" in submit and "grade-merge reports/shard-*" in submit
    assert "--out reports/shard-$SLURM_ARRAY_TASK_ID" in slurm   # the folders the merge reads

    (ci,) = _blocks("yaml")
    workflow = yaml.safe_load(ci)
    grade, merge = workflow["jobs"]["grade"], workflow["jobs"]["merge"]
    (run,) = [s["run"] for s in grade["steps"] if "capsule-lab grade " in s.get("run", "")]
    n = int(re.search(r"--shard \$\{\{ matrix.shard \}\}/(\d+)", run).group(1))
    assert grade["strategy"]["matrix"]["shard"] == list(range(1, n + 1))
    upload = next(s for s in grade["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    download = next(s for s in merge["steps"] if s.get("uses", "").startswith("actions/download-artifact"))
    assert merge["needs"] == "grade" and upload["with"]["name"] == "reports-${{ matrix.shard }}"
    assert download["with"]["pattern"] == "reports-*"
    assert any(f"grade-merge {download['with']['path']}/reports-*" in s.get("run", "") for s in merge["steps"])
