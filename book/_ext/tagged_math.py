"""Numbered multi-line equations: the chapters' ``$$ \\begin{aligned} … \\end{aligned} \\tag{2.7} $$`` in the book.

The chapters number their equations with ``\\tag{N.k}`` inside ``$$ … $$`` (``scripts/chapter_text.py``), which
Jupyter's MathJax renders as written. Sphinx does not pass a display equation through as written: one with a line
break (``\\\\``) is wrapped in ``\\begin{split} … \\end{split}``, and MathJax refuses a ``\\tag`` inside ``split``
("TeX error"). This hands such an equation to MathJax as written, between ``\\[`` and ``\\]``, as Jupyter does.
"""

from __future__ import annotations

from docutils import nodes


def _as_written(app, doctree) -> None:
    for block in doctree.findall(nodes.math_block):
        text = block.astext()
        if "\\tag" in text and "\\\\" in text and not block.get("nowrap"):
            block["nowrap"] = True
            block.children = [nodes.Text(f"\\[{text}\\]")]


def setup(app):
    app.connect("doctree-read", _as_written)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
