"""The code an instructor copies from book/instructors.md runs as it stands (each block after the ones above it)."""

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
