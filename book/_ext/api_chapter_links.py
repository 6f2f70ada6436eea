"""The API reference links every documented name to the chapter that teaches it, and resolves the
docstrings' short cross-references.

Every public docstring in ``capsule_lab`` names its chapter ("Chapter 02.", "chapters 02 and 03", "Chapters
03 and 04."). While autodoc reads a docstring, each chapter number in such a phrase becomes a link to that
chapter's page (``chapters/NN_*.ipynb``), so an instructor reading the reference reaches the lesson in one
click. A number with no chapter page stays plain text.

Docstrings refer to names as their module sees them (``:func:`dynamic_routing``` in ``capsule_lab.layers``,
``:func:`capsule_lab.routing.dynamic_routing``` for a re-export), while the reference documents each object
once, under the module that defines it. A cross-reference Sphinx cannot find is looked up as Python would:
imported from the current module (or as written), then linked to the page that documents the object. Names
from other libraries (torch, numpy, matplotlib) have no page here and stay plain text.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from sphinx.util.nodes import make_refnode

# "Chapter 02", "chapters 02 and 03", "Chapters 02–04", "chapter 02's": the phrase, then each number in it.
PHRASE = re.compile(r"\b([Cc]hapters?)\s+(\d\d(?:(?:\s*(?:,|and|or|–|-)\s*)\d\d)*)(?!\d)")
NUMBER = re.compile(r"\d\d")
TABLE_RULE = re.compile(r"^\s*=+(\s+=+)+\s*$")
LITERAL = re.compile(r"(``.*?``|(?::[\w:-]+:)?`[^`]*`)")


def chapter_pages(srcdir: str | Path) -> dict[str, str]:
    """``{"02": "chapters/02_dynamic_routing", ...}`` for the chapters in ``srcdir/chapters``."""
    return {p.name[:2]: f"chapters/{p.stem}" for p in sorted(Path(srcdir, "chapters").glob("[0-9][0-9]_*.ipynb"))}


def link_chapters(line: str, pages: dict[str, str]) -> str:
    """``line`` with every chapter number in a chapter phrase turned into a ``:doc:`` link (reST)."""
    def numbers(match: re.Match) -> str:
        word, group = match.groups()
        if group in pages:                        # one chapter: the whole phrase is the link
            return f":doc:`{word} {group} </{pages[group]}>`"
        return word + " " + NUMBER.sub(lambda n: f":doc:`{n.group(0)} </{pages[n.group(0)]}>`"
                                       if n.group(0) in pages else n.group(0), group)

    # Literals and roles (``...``, :role:`...`, `...`) are left as they are; the text between them is linked.
    parts = LITERAL.split(line)
    return "".join(part if k % 2 else PHRASE.sub(numbers, part) for k, part in enumerate(parts))


def literal_blocks(lines: list[str]) -> list[str]:
    """Indented blocks after a line ending in ":" (shapes, equations in the docstrings) as plain-text blocks.

    The docstrings are written to be read as plain text, where such a block keeps its lines and columns; as
    reST it would be a block quote with its lines run together. Fields (``:param x:``) are left alone.
    """
    out = []
    for k, line in enumerate(lines):
        following = next((n for n in lines[k + 1:] if n.strip()), "")
        indent = len(line) - len(line.lstrip())
        bullet = 2 if line.lstrip()[:2] in ("- ", "* ") else 0      # a list item's text continues 2 further in
        if (line.rstrip().endswith(":") and not line.rstrip().endswith("::") and not line.lstrip().startswith(":")
                and len(following) - len(following.lstrip()) > indent + bullet):
            out += [line, "", " " * indent + ".. code-block:: text", ""]
            continue
        out.append(line)
    return out


def in_literal_blocks(lines: list[str]) -> set[int]:
    """The indices of the lines inside literal blocks (the indented lines after a line ending in "::")."""
    inside, indent = set(), None
    for k, line in enumerate(lines):
        if indent is not None and line.strip() and len(line) - len(line.lstrip()) <= indent:
            indent = None
        if indent is not None:
            inside.add(k)
        elif line.rstrip().endswith("::") or line.lstrip().startswith(".. code-block::"):
            indent = len(line) - len(line.lstrip())
    return inside


def find_object(dotted: str, module: str | None):
    """The object ``dotted`` names, seen from ``module`` (its own names and imports) or as an absolute path:
    the longest importable prefix, then attributes. None if there is none."""
    for path in ([f"{module}.{dotted}"] if module else []) + [dotted]:
        parts = path.split(".")
        for split in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            try:
                for attr in parts[split:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                break
            return obj
    return None


def defining_name(obj) -> str | None:
    """``module.qualname`` where ``obj`` is defined (and documented), or None."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(obj, type(importlib)):
        return obj.__name__
    return f"{module}.{qualname}" if module and qualname else None


def resolve_short_reference(app, env, node, contnode):
    """Sphinx's ``missing-reference`` hook: a py reference to a capsule_lab object, linked where it is documented."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    obj = find_object(target, node.get("py:module"))
    name = defining_name(obj) if obj is not None else None
    domain = env.get_domain("py")
    if name is None:                          # not importable from here: the one documented object of that name
        matches = [full for full in domain.objects if full.startswith("capsule_lab.") and full.endswith("." + target)]
        name = matches[0] if len(matches) == 1 else None
    if not name or not name.startswith("capsule_lab"):
        return None
    found = domain.objects.get(name) or domain.modules.get(name)
    if found is None:
        return None
    return make_refnode(app.builder, node["refdoc"], found.docname, found.node_id if hasattr(found, "node_id")
                        else f"module-{name}", contnode, name)


def setup(app):
    def process(app, what, name, obj, options, lines):
        pages = chapter_pages(app.srcdir)
        text = literal_blocks(lines)
        rules = [k for k, line in enumerate(text) if TABLE_RULE.match(line)]
        # A simple table's columns are fixed widths, and a literal block is shown as written: both are left as
        # they are; chapter phrases elsewhere become links.
        keep = set(range(rules[0], rules[-1] + 1) if len(rules) >= 2 else ()) | in_literal_blocks(text)
        lines[:] = [line if k in keep else link_chapters(line, pages) for k, line in enumerate(text)]

    app.connect("autodoc-process-docstring", process)
    app.connect("missing-reference", resolve_short_reference)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
