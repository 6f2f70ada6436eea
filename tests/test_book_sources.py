"""The book's sources keep the properties the browser test cannot see alone (no build, no browser needed).

- The repository URL is set once, in _config.yml, and every copy (Colab install lines and links in the
  notebooks, README.md, book/) agrees with it: `scripts/sync_repository_url.py --check`; the script
  rewrites a fork's URL everywhere and nothing else.
- The chapter map on the intro page marks exactly the chapters not yet in _toc.yml as "(coming)".
- book/references.bib prints every arXiv id and DOI once (no entry repeats one, no two entries share one).
- Chapter figures are drawn for the text column: at most 800 px wide as stored (7.5 in at 100 dpi).
- Widget views become the static-book note, progress bars disappear (book/_ext/static_widgets.py).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import shutil
import struct
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MAX_FIGURE_PX = 800


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


sync = _load(ROOT / "scripts" / "sync_repository_url.py", "sync_repository_url")


def test_every_copy_of_the_repository_url_agrees_with_config(capsys):
    status = sync.main(["--check"])
    assert status == 0, "copies of the repository URL disagree with _config.yml:\n" + capsys.readouterr().out


def _fake_checkout(tmp_path: Path, url: str) -> Path:
    (tmp_path / "chapters").mkdir()
    (tmp_path / "_config.yml").write_text(f"repository:\n  url: {url}\n  branch: dev\n", encoding="utf8")
    notebook = (ROOT / "chapters" / "05_rem.ipynb")
    shutil.copy(notebook, tmp_path / "chapters" / notebook.name)
    (tmp_path / "README.md").write_text(
        'pip install "capsule-lab @ git+https://github.com/capsule-lab/capsule-lab"\n'
        "Colab: https://colab.research.google.com/github/capsule-lab/capsule-lab/blob/main/chapters/01_capsules.ipynb\n"
        "Script: https://github.com/capsule-lab/capsule-lab/blob/main/scripts/rem_longer_run.py\n"
        "Other project: https://github.com/pytorch/captum\n", encoding="utf8")
    return tmp_path


def test_sync_writes_a_forks_url_everywhere_and_nothing_else(tmp_path: Path, capsys):
    root = _fake_checkout(tmp_path, "https://github.com/someone/capsule-fork")
    targets = ["README.md", "chapters"]
    assert sync.main(["--check", "--root", str(root), *targets]) == 1
    assert sync.main(["--root", str(root), *targets]) == 0
    assert sync.main(["--check", "--root", str(root), *targets]) == 0
    readme = (root / "README.md").read_text(encoding="utf8")
    assert 'git+https://github.com/someone/capsule-fork"' in readme
    assert "colab.research.google.com/github/someone/capsule-fork/blob/dev/chapters/01_capsules.ipynb" in readme
    assert "https://github.com/someone/capsule-fork/blob/dev/scripts/rem_longer_run.py" in readme
    assert "https://github.com/pytorch/captum" in readme
    before = (ROOT / "chapters" / "05_rem.ipynb").read_text(encoding="utf8")
    after = (root / "chapters" / "05_rem.ipynb").read_text(encoding="utf8")
    expected = (before.replace("git+https://github.com/capsule-lab/capsule-lab", "git+https://github.com/someone/capsule-fork")
                .replace("github/capsule-lab/capsule-lab/blob/main/", "github/someone/capsule-fork/blob/dev/")
                .replace("github.com/capsule-lab/capsule-lab/blob/main/", "github.com/someone/capsule-fork/blob/dev/"))
    assert after == expected, "the sync changed something other than the URL"
    json.loads(after)


def test_sync_refuses_a_config_without_a_github_url(tmp_path: Path):
    root = _fake_checkout(tmp_path, "git@github.com:someone/fork.git")
    with pytest.raises(ValueError, match="repository.url"):
        sync.main(["--check", "--root", str(root), "README.md"])


def test_chapter_map_marks_exactly_the_unpublished_chapters():
    toc = (ROOT / "_toc.yml").read_text(encoding="utf8")
    published = set(re.findall(r"chapters/(\d\d)_", toc))
    rows = re.findall(r"^\|\s*(\d\d)( \(coming\))?\s*\|", (ROOT / "book" / "intro.md").read_text("utf8"), re.M)
    assert rows, "no chapter map found in book/intro.md"
    for number, coming in rows:
        if number in published:
            assert not coming, f"chapter {number} is published but marked (coming) in the chapter map"
        else:
            assert coming, f"chapter {number} is not in _toc.yml yet: mark it '(coming)' in the chapter map"


def test_bibliography_prints_each_identifier_once():
    text = (ROOT / "book" / "references.bib").read_text(encoding="utf8")
    entries = re.findall(r"@\w+\{([^,]+),(.*?)\n\}", text, re.S)
    assert entries
    owners: dict[str, str] = {}
    for key, body in entries:
        ids = re.findall(r"\b(\d{4}\.\d{4,5})\b", body) + re.findall(r"\b(10\.\d{4,}/\S+?)[},]", body)
        for identifier in set(ids):
            assert ids.count(identifier) == 1, f"{key} prints {identifier} more than once"
            assert identifier not in owners, f"{key} and {owners.get(identifier)} both cite {identifier}"
            owners[identifier] = key


def _png_width(data: str) -> int:
    raw = base64.b64decode(data)
    return struct.unpack(">I", raw[16:20])[0]


@pytest.mark.parametrize("notebook", sorted((ROOT / "chapters").glob("*.ipynb")), ids=lambda p: p.stem)
def test_chapter_figures_are_drawn_for_the_column(notebook: Path):
    cells = json.loads(notebook.read_text(encoding="utf8"))["cells"]
    for index, cell in enumerate(cells):
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                width = _png_width(png)
                assert width <= MAX_FIGURE_PX, (
                    f"{notebook.name} cell {index}: a figure {width} px wide is shrunk in the book until its "
                    f"text is unreadable; draw it at most 7.5 in wide (CONTRIBUTING.md, Notebooks)")


def test_static_widgets_drop_progress_bars_and_keep_other_widgets():
    static_widgets = _load(ROOT / "book" / "_ext" / "static_widgets.py", "static_widgets")
    state = {
        "bar": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_html", "IPY_MODEL_progress"]}},
        "progress": {"model_name": "FloatProgressModel", "state": {}},
        "html": {"model_name": "HTMLModel", "state": {}},
        "explorer": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_slider"]}},
        "slider": {"model_name": "IntSliderModel", "state": {}},
    }
    assert static_widgets.is_progress_bar("bar", state)
    assert static_widgets.is_progress_bar("progress", state)
    assert not static_widgets.is_progress_bar("explorer", state)
    assert not static_widgets.is_progress_bar("missing", state)
    with pytest.raises(ValueError):
        static_widgets.is_progress_bar("bar", None)


def test_config_repository_is_the_one_the_script_reads():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
    repo = sync.read_repository(ROOT / "_config.yml")
    assert repo.url == config["repository"]["url"].rstrip("/")


def test_chapters_link_the_repository_files_a_pip_install_lacks():
    """A student on Colab has the package, not the repository: a chapter that names a file under scripts/ or
    tests/ links it, in the same cell, to the repository set in _config.yml, and the file exists."""
    repo = sync.read_repository(ROOT / "_config.yml")
    named = 0
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf8"))["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            text = "".join(cell["source"])
            for file in set(re.findall(r"\b((?:scripts|tests)/[\w./]+\.py)\b", text)):
                named += 1
                assert f"]({repo.file_prefix()}{file})" in text, (path.name, file)
                assert (ROOT / file).is_file(), (path.name, file)
    assert named >= 7


def test_colab_links_between_notebooks_become_book_links():
    """book/_ext/own_notebook_links.py: a Colab link to a notebook the book has becomes a link to its page (with
    its fragment); one to a notebook the book does not publish (solutions/) stays a Colab link."""
    links = _load(ROOT / "book" / "_ext" / "own_notebook_links.py", "own_notebook_links")
    colab = "https://colab.research.google.com/github/capsule-lab/capsule-lab/blob/main/"
    docs = {"chapters/02_dynamic_routing", "exercises/02_dynamic_routing"}
    assert links.book_page(colab + "chapters/02_dynamic_routing.ipynb", docs) == ("chapters/02_dynamic_routing", "")
    assert links.book_page(colab + "exercises/02_dynamic_routing.ipynb#task-1", docs) == (
        "exercises/02_dynamic_routing", "#task-1")
    assert links.book_page(colab + "solutions/02_dynamic_routing.ipynb", docs) is None
    assert links.book_page("https://github.com/capsule-lab/capsule-lab/blob/main/chapters/02_dynamic_routing.ipynb",
                           docs) is None


def test_notebooks_link_each_other_through_colab_not_a_relative_path():
    """A notebook opened on its own (Colab) has no ../chapters/ or ../book/ beside it."""
    relative = []
    for folder in ("chapters", "exercises", "solutions"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            for cell in json.loads(path.read_text(encoding="utf8"))["cells"]:
                text = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
                relative += [f"{folder}/{path.name}: {m}" for m in re.findall(r"\]\((\.\.?/[^)]*|\w+\.(?:ipynb|md))\)",
                                                                              text)]
    assert relative == []


def test_a_tagged_multiline_equation_reaches_mathjax_as_written():
    """book/_ext/tagged_math.py: Sphinx would wrap an equation with a line break in ``split``, where MathJax refuses
    ``\\tag``; such an equation goes out as written between ``\\[`` and ``\\]``, any other is left to Sphinx."""
    from docutils import nodes
    from docutils.utils import new_document
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser

    tagged = _load(ROOT / "book" / "_ext" / "tagged_math.py", "tagged_math")
    doc = new_document("test", get_default_settings(Parser))
    aligned = "\\begin{aligned} a &= 1 \\\\ b &= 2 \\end{aligned} \\tag{2.7}"
    blocks = [nodes.math_block(text, text) for text in (aligned, "c = 3 \\tag{2.8}", "d \\\\ e")]
    for block in blocks:
        block["nowrap"] = False
        doc += block
    tagged._as_written(None, doc)
    assert blocks[0]["nowrap"] and blocks[0].astext() == "\\[" + aligned + "\\]"
    assert not blocks[1]["nowrap"] and not blocks[2]["nowrap"] and blocks[2].astext() == "d \\\\ e"
