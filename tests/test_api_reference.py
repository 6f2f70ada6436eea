"""The book's API reference (book/api/): complete, ordered by the package map, every entry linked to its
chapter, and the book claims only modules that exist.

- every ``capsule_lab.X`` named in book/, README.md or CONTRIBUTING.md imports;
- every module of the package map is documented on an API page (``_checks`` and the chapters' task
  registries, which hold the exercises' answers, are not), the pages in the map's order;
- every public function and class of a documented module names the chapter that teaches it in its docstring,
  and ``book/_ext/api_chapter_links.py`` turns that phrase into a link (checked on hand-written lines).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest
import yaml

import capsule_lab

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from api_chapter_links import find_object, in_literal_blocks, link_chapters, literal_blocks  # noqa: E402

NAMED = re.compile(r"\bcapsule_lab(?:\.[a-z_][a-z0-9_]*)+")
UNDOCUMENTED = re.compile(r"capsule_lab\.(_checks|grading\.tasks\.ch\d\d)$")
CHAPTER = re.compile(r"\b[Cc]hapters?\s+\d\d")


def api_pages() -> list[Path]:
    """The API pages in the order of _toc.yml."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            if chapter["file"] == "book/api/index":
                return [ROOT / "book/api/index.md"] + [ROOT / (s["file"] + ".md") for s in chapter["sections"]]
    raise AssertionError("book/api/index is not in _toc.yml")


def documented_modules() -> list[str]:
    return [m for page in api_pages() for m in re.findall(r"\.\. automodule:: (\S+)", page.read_text())]


def package_modules() -> list[str]:
    package = Path(capsule_lab.__file__).parent
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        names.append(".".join(("capsule_lab",) + (parts[:-1] if parts[-1] == "__init__" else parts)))
    return names


def test_every_capsule_lab_name_in_the_book_exists():
    texts = [p for p in (ROOT / "book").rglob("*.md")] + [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    missing = []
    for path in texts:
        for name in set(NAMED.findall(path.read_text())):
            if find_object(name, None) is None:
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, missing


def test_every_module_is_documented_once_in_the_order_of_the_map():
    documented = documented_modules()
    assert len(documented) == len(set(documented))
    expected = {m for m in package_modules() if not UNDOCUMENTED.search(m)}
    assert set(documented) == expected, (sorted(expected - set(documented)), sorted(set(documented) - expected))
    order = re.findall(r"^``(\w+)``", capsule_lab.__doc__, flags=re.M)
    ranks = [order.index(m.split(".")[1]) for m in documented if m != "capsule_lab"]
    assert ranks == sorted(ranks), "the API pages must follow the package map's order"


@pytest.mark.parametrize("module", [m for m in package_modules() if not UNDOCUMENTED.search(m)
                                    and not m.startswith(("capsule_lab.grading", "capsule_lab.cli"))])
def test_every_public_name_names_its_chapter(module):
    mod = importlib.import_module(module)
    silent = []
    for name in getattr(mod, "__all__", []):
        obj = getattr(mod, name)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == module:
            doc = inspect.getdoc(obj) or ""
            if not CHAPTER.search(doc) and not CHAPTER.search(inspect.getdoc(mod) or ""):
                silent.append(name)
    assert not silent, f"{module}: no chapter named in the docstring of {silent}"


PAGES = {"02": "chapters/02_dynamic_routing", "03": "chapters/03_routing_gradients"}


@pytest.mark.parametrize("line, linked", [
    ("Chapter 02.", ":doc:`Chapter 02 </chapters/02_dynamic_routing>`."),
    ("chapters 02 and 03", "chapters :doc:`02 </chapters/02_dynamic_routing>` and "
                           ":doc:`03 </chapters/03_routing_gradients>`"),
    ("Chapters 02–09", "Chapters :doc:`02 </chapters/02_dynamic_routing>`–09"),
    ("chapter 09 is not written", "chapter 09 is not written"),
    ("``chapter 02`` stays, chapter 03 links", "``chapter 02`` stays, :doc:`chapter 03 </chapters/03_routing_gradients>` links"),
    (":func:`the chapter 02 thing` as written", ":func:`the chapter 02 thing` as written"),
])
def test_chapter_phrases_become_links(line, linked):
    assert link_chapters(line, PAGES) == linked


def test_indented_blocks_become_text_blocks_but_lists_and_fields_do_not():
    lines = ["Shapes:", "    votes  (B, I, J, D)", "", "- item:", "  continued", ":param x: the input:", "    more"]
    out = literal_blocks(lines)
    assert out[:6] == ["Shapes:", "", ".. code-block:: text", "", "    votes  (B, I, J, D)", ""]
    assert out[6:] == lines[3:]
    assert in_literal_blocks(out) == {3, 4, 5}          # the block, with its blank lines
