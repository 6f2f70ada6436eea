"""One text for the book and for Jupyter: no MyST role or directive shows raw where a chapter is opened on its own.

Jupyter and Colab render a notebook's Markdown without MyST. Each chapter is rendered here through nbconvert's
Markdown path (what Jupyter's own export shows) and must contain none of MyST's constructs: no ``{cite}`` or
``{eq}`` role, no ``$$ … $$ (label)``, no ```` ```{directive} ```` fence. Its internal links (citations, equation
references) must land on an anchor of the same notebook, its numbered equations run (N.1), (N.2), … in the
order they appear, and its reference list is the one ``scripts/chapter_text.py`` writes from
``book/references.bib``. The browser half (Chromium on the same rendering) is in tests/test_book.py.
"""

from __future__ import annotations

import html
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
from nbconvert.filters.markdown import markdown2html
from nbformat.v4 import new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
NOTEBOOKS = CHAPTERS + sorted((ROOT / "exercises").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))

_spec = importlib.util.spec_from_file_location("chapter_text", ROOT / "scripts" / "chapter_text.py")
chapter_text = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(chapter_text)

# What shows raw in Jupyter, in the text a reader sees: a MyST role or directive name ({cite}, {eq},
# {admonition}, {bibliography}: not LaTeX's \\text{...} or ^{...}, which math renders), a labelled $$ block,
# a target line, a directive's option line.
MYST_CONSTRUCTS = {
    "role or directive": re.compile(r"(?<![\\\w^_}\])])\{[a-z]+(?:[:-][a-z]+)*\}"),
    "labelled equation": re.compile(r"\$\$\s*\([A-Za-z0-9_:-]+\)"),
    "target": re.compile(r"^\s*\([A-Za-z0-9_-]+\)=\s*$", re.M),
    "directive option": re.compile(r"^\s*:(class|filter|list|label|name|all):", re.M),
}


def rendered(nb) -> str:
    """The notebook's Markdown cells as Jupyter's nbconvert renders them to HTML, one after the other."""
    return "\n".join(markdown2html(cell.source) for cell in nb.cells if cell.cell_type == "markdown")


def shown_text(page_html: str) -> str:
    """What a reader sees: tags removed, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page_html))


def myst_left(nb) -> list[str]:
    text = shown_text(rendered(nb))
    return [f"{kind}: {match.group(0)!r}" for kind, pattern in MYST_CONSTRUCTS.items()
            for match in pattern.finditer(text)]


def test_the_finder_sees_every_myst_construct_the_chapters_used():
    """The check below can fail: the constructs the chapters held before are each found."""
    nb = new_notebook(cells=[new_markdown_cell(source) for source in [
        "See {cite}`sabour2017dynamic` and {eq}`eq-squash`.",
        "$$\nv = s\n$$ (eq-squash)",
        "```{admonition} A known bug\n:class: warning\nText.\n```",
        "## References\n\n```{bibliography}\n:filter: docname in docnames\n```",
        "(sec-routing)=\n## Routing",
    ]])
    kinds = {problem.split(":")[0] for problem in myst_left(nb)}
    assert kinds == set(MYST_CONSTRUCTS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_myst_construct_shows_in_jupyter(path):
    assert myst_left(nbformat.read(path, as_version=4)) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_internal_link_lands_in_the_same_notebook(path):
    page = rendered(nbformat.read(path, as_version=4))
    anchors = set(re.findall(r'\bid="([^"]+)"', page))
    targets = re.findall(r'href="#([^"]+)"', page)
    assert [target for target in targets if target not in anchors] == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_equations_are_numbered_per_chapter_in_order(path):
    nb = nbformat.read(path, as_version=4)
    source = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    number = int(path.name[:2])
    # The anchored equations: (N.1), (N.2), ... in order. (Some chapters also tag an equation with its paper's
    # number, "(1)" for Jeong et al.'s eq. 1, "(S1)" for a step of a derivation: no anchor, not renumbered.)
    anchored = re.findall(r'<a id="(eq-[^"]+)"></a>\s*\$\$(.*?)\$\$', source, re.S)
    tag_of = {anchor: "".join(re.findall(r"\\tag\{([^}]*)\}", body)) for anchor, body in anchored}
    assert list(tag_of.values()) == [f"{number}.{i}" for i in range(1, len(anchored) + 1)]
    assert not [tag for tag in re.findall(r"\\tag\{([^}]*)\}", source) if tag.startswith(f"{number}.")
                and tag not in tag_of.values()], "a chapter-numbered tag without its anchor"
    # Each reference shows the number of the equation its anchor sits on.
    for target, shown in re.findall(r'<a href="#(eq-[^"]+)">\(([^)]*)\)</a>', source):
        assert tag_of[target] == shown, (target, shown)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_reference_list_holds_exactly_the_cited_works(path):
    nb = nbformat.read(path, as_version=4)
    source = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    cited = set(re.findall(r'href="#ref-([^"]+)"', source))
    listed = set(re.findall(r'<a id="ref-([^"]+)"></a>', source))
    assert cited and cited == listed
    assert nb.cells[-1].source.startswith("## References")


def test_chapters_are_up_to_date_with_the_bibliography_and_their_numbering(capsys):
    assert chapter_text.main(["--check"]) == 0, capsys.readouterr().out


def test_renumbering_a_hand_made_chapter():
    """Two equations, the second one first referenced before it: numbered by position, references follow."""
    nb = new_notebook(cells=[new_markdown_cell(source) for source in [
        'As <a href="#eq-b">(9.9)</a> shows [<a href="#ref-sabour2017dynamic">?</a>],\n\n'
        '<a id="eq-a"></a>\n\n$$\na = 1\n$$',
        '<a id="eq-b"></a>\n\n$$\nb = 2 \\tag{7}\n$$\n\nand <a href="#eq-a">(0)</a>.',
        "## References",
    ]])
    changes = chapter_text.renumber(nb, 3)
    assert changes
    assert nb.cells[0].source == ('As <a href="#eq-b">(3.2)</a> shows [<a href="#ref-sabour2017dynamic">Sabour et '
                                  'al., 2017</a>],\n\n<a id="eq-a"></a>\n\n$$\na = 1 \\tag{3.1}\n$$')
    assert nb.cells[1].source == '<a id="eq-b"></a>\n\n$$\nb = 2 \\tag{3.2}\n$$\n\nand <a href="#eq-a">(3.1)</a>.'
    assert nb.cells[2].source.splitlines()[-1].startswith(
        '- <a id="ref-sabour2017dynamic"></a>**Sabour et al., 2017.** Sara Sabour, Nicholas Frosst')
    assert chapter_text.renumber(nb, 3) == []  # a second pass changes nothing


@pytest.mark.parametrize("source, message", [
    ('<a href="#eq-missing">(1)</a>', "does not have"),
    ('[<a href="#ref-nobody2099">?</a>]', "not in book/references.bib"),
])
def test_renumbering_refuses_what_points_nowhere(source, message):
    nb = new_notebook(cells=[new_markdown_cell(source), new_markdown_cell("## References")])
    with pytest.raises(ValueError, match=message):
        chapter_text.renumber(nb, 1)
