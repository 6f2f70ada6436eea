"""Links between the course's notebooks: to Colab in a notebook, to the book's own page in the book.

An exercise opened on its own in Colab has no ``../chapters/`` beside it, so the notebooks link to each other
through Colab (``https://colab.research.google.com/github/OWNER/NAME/blob/BRANCH/chapters/02_….ipynb``, kept in
step with ``_config.yml`` by ``scripts/sync_repository_url.py``). In the book, a reader would rather stay in the
book: this turns every such link whose notebook is a page of the book into a link to that page. The "Open in
Colab" badge (a link around an image) is left alone: it is meant to open Colab.
"""

from __future__ import annotations

import re

from docutils import nodes

COLAB_NOTEBOOK = re.compile(r"^https://colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/(?P<doc>.+)\.ipynb"
                            r"(?P<fragment>#.*)?$")


def book_page(uri: str, docnames) -> tuple[str, str] | None:
    """``(docname, fragment)`` of the book page a Colab link to one of the book's notebooks opens, else None."""
    match = COLAB_NOTEBOOK.match(uri or "")
    if match is None or match.group("doc") not in docnames:
        return None
    return match.group("doc"), match.group("fragment") or ""


def _link_to_pages(app, doctree, docname) -> None:
    for reference in doctree.findall(nodes.reference):
        if any(isinstance(child, nodes.image) for child in reference.findall()):
            continue
        page = book_page(reference.get("refuri", ""), app.env.found_docs)
        if page is not None:
            reference["refuri"] = app.builder.get_relative_uri(docname, page[0]) + page[1]
            reference["internal"] = True
            reference["classes"] = [c for c in reference.get("classes", []) if c != "external"] + ["internal"]


def setup(app):
    app.connect("doctree-resolved", _link_to_pages)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
