"""Measure how much a notebook's printed numbers move between runs: the evidence behind its tolerance bands.

CPU kernels differ between processors (and with the thread count), so a chapter's training numbers differ in
their last digits from machine to machine; a new seed moves them further. This script executes a notebook
under such variations and reports, cell by cell, every printed number that changed and by how much.

    # one execution: the kernel inherits this process's environment (thread count, ATen/oneDNN/MKL ISA)
    python scripts/notebook_spread.py run chapters/03_routing_gradients.ipynb --out spread/avx2 \
        [--seed-offset 10]
    # compare executions of the same notebook (the committed one may be among them)
    python scripts/notebook_spread.py compare chapters/03_routing_gradients.ipynb
    spread/*/chapters/03_routing_gradients.ipynb

``--seed-offset K`` runs the notebook as if every seed in it were K larger: ``setup(seed=0)``, ``manual_seed(0)``
and ``seed=0`` become K, and a function taking a ``seed`` argument adds K to it on entry. The rewritten
sources are only executed, never written back over the chapter.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
SEED_LITERAL = re.compile(r"(\bsetup\(seed=|\bmanual_seed\(|\bseed=)0\b")
SEED_FUNCTION = re.compile(r"^(?P<indent>\s*)def \w+\((?P<args>[^)]*\bseed\b[^)]*)\)\s*(->[^:]*)?:\s*$")


def offset_seeds(source: str, offset: int) -> str:
    """``source`` with every seed moved by ``offset`` (see the module docstring)."""
    lines = []
    for line in SEED_LITERAL.sub(lambda m: f"{m.group(1)}{offset}", source).splitlines():
        lines.append(line)
        match = SEED_FUNCTION.match(line)
        if match:
            lines.append(f"{match.group('indent')}    seed = seed + {offset}")
    return "\n".join(lines)


def execute(path: Path, out_dir: Path, seed_offset: int, timeout: int) -> Path:
    nb = nbformat.read(path, as_version=4)
    if seed_offset:
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.source = offset_seeds(cell.source, seed_offset)
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    target = out_dir / path.parent.name / path.name        # chapters/ and solutions/ share file names
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    print(f"{path} executed in {time.perf_counter() - start:.1f} s -> {target}")
    return target


def cell_text(cell) -> str:
    """The text nbval compares: streams and text/plain results (not images, not widget views)."""
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            data = output.get("data", {})
            if "text/plain" in data and not ({"image/png", "application/vnd.jupyter.widget-view+json"} & set(data)):
                parts.append(data["text/plain"])
        elif output.output_type == "error":
            parts.append(f"ERROR {output.ename}: {output.evalue}")
    return "".join(parts)


def as_float(token: str) -> float:
    return float(token.replace(",", ""))


def compare(paths: list[Path]) -> int:
    """Print, per code cell, the numbers that differ between the executions; return the count of such cells."""
    notebooks = [nbformat.read(p, as_version=4) for p in paths]
    n_cells = {len(nb.cells) for nb in notebooks}
    if len(n_cells) != 1:
        raise SystemExit(f"the notebooks have different cell counts: {sorted(n_cells)}")
    varying = 0
    code_index = 0
    for index in range(n_cells.pop()):
        cells = [nb.cells[index] for nb in notebooks]
        if cells[0].cell_type != "code":
            continue
        code_index += 1
        texts = [cell_text(c) for c in cells]
        if len(set(texts)) == 1:
            continue
        varying += 1
        tags = cells[0].metadata.get("tags", [])
        print(f"--- cell {index} (code cell {code_index}) tags={tags}: {cells[0].source.splitlines()[0][:90]!r}")
        skeletons = [NUMBER.sub("#", t) for t in texts]
        if len(set(skeletons)) != 1:
            print("    the text around the numbers differs too (not only digits)")
            for p, t in zip(paths, texts):
                print(f"    {p}: {t[:300]!r}")
            continue
        columns = list(zip(*(NUMBER.findall(t) for t in texts)))
        for position, tokens in enumerate(columns):
            if len(set(tokens)) == 1:
                continue
            values = [as_float(t) for t in tokens]
            context = skeletons[0].split("#")
            before = context[position][-40:].replace("\n", "⏎") if position < len(context) else ""
            spread = max(values) - min(values)
            sd = statistics.pstdev(values) if len(values) > 1 else 0.0
            print(f"    #{position:3d} …{before!s:>40} values {', '.join(tokens)}  range {spread:.4g}  sd {sd:.4g}")
    print(f"{varying} code cells differ between {len(paths)} executions")
    return varying


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute a notebook and save the executed copy")
    run.add_argument("notebook", type=Path)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--seed-offset", type=int, default=0)
    run.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    cmp = sub.add_parser("compare", help="report the printed numbers that differ between executions")
    cmp.add_argument("notebooks", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command == "run":
        execute(args.notebook, args.out, args.seed_offset, args.timeout)
        return 0
    compare(args.notebooks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
