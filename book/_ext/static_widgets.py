"""Widgets in the static book: a one-line note instead of controls that cannot move anything.

The course's widgets (routing explorer, pose explorer, ...) compute their figures in Python, so the stored
ipywidgets state cannot make their sliders do anything without a kernel; and every widget cell is followed
by a cell that draws the widget's default figure. In the book, each stored widget view therefore becomes
the note ``WIDGET_NOTE`` (the static figure follows it), and a progress bar (tqdm's notebook bar: a box
holding a progress model, hidden once training ends) is dropped, as it would only leave a blank gap.
In Jupyter and Colab the notebooks are unchanged: the widgets and progress bars work there.
"""

from __future__ import annotations

import json

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

WIDGET_VIEW_MIMETYPE = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE_MIMETYPE = "application/vnd.jupyter.widget-state+json"
PROGRESS_MODELS = {"FloatProgressModel", "IntProgressModel"}
WIDGET_NOTE = ("Interactive in Jupyter or Colab: run this notebook there and move the sliders. "
               "The figure below is the widget's default state.")


def is_progress_bar(model_id: str, state: dict) -> bool:
    """True when the widget model ``model_id`` is a progress model or a box holding one."""
    if not isinstance(state, dict):
        raise ValueError("state must be the notebook's widget-state dict {model_id: {...}}")
    model = state.get(model_id, {})
    if model.get("model_name") in PROGRESS_MODELS:
        return True
    children = model.get("state", {}).get("children", []) or []
    for child in children:
        child_id = child.removeprefix("IPY_MODEL_") if isinstance(child, str) else ""
        if state.get(child_id, {}).get("model_name") in PROGRESS_MODELS:
            return True
    return False


def _widget_state(env, docname: str) -> dict:
    """The stored widget models of a notebook page ({} for other pages)."""
    path = env.doc2path(docname)
    if not str(path).endswith(".ipynb"):
        return {}
    with open(path, encoding="utf8") as handle:
        metadata = json.load(handle).get("metadata", {})
    return metadata.get("widgets", {}).get(WIDGET_STATE_MIMETYPE, {}).get("state", {}) or {}


def _model_id(bundle: nodes.Element) -> str | None:
    for child in bundle.children:
        if child.get("mime_type") == WIDGET_VIEW_MIMETYPE:
            for raw in child.findall(nodes.raw):
                text = raw.astext()
                start = text.find("{")
                if start >= 0:
                    body = text[start:text.rfind("}") + 1].replace("<\\/", "</")
                    try:
                        return str(json.loads(body).get("model_id", ""))
                    except ValueError:
                        return ""
            return ""
    return None


class StaticWidgets(SphinxPostTransform):
    """Replace stored widget views by ``WIDGET_NOTE``; drop progress bars (before myst-nb picks mime types)."""

    default_priority = 3  # myst-nb's SelectMimeType runs at 4
    formats = ("html",)

    def run(self, **kwargs) -> None:
        bundles = [node for node in self.document.findall(nodes.container)
                   if node.get("nb_element") == "mime_bundle"]
        state = None
        for bundle in bundles:
            model_id = _model_id(bundle)
            if model_id is None:
                continue
            if state is None:
                state = _widget_state(self.env, self.env.docname)
            if is_progress_bar(model_id, state):
                bundle.parent.remove(bundle)
                continue
            note = nodes.paragraph("", WIDGET_NOTE, classes=["widget-note"])
            bundle.replace_self(note)
        # Output areas left empty (a cell whose only outputs were progress bars) would still draw a gap.
        for output in [node for node in self.document.findall(nodes.container)
                       if node.get("nb_element") == "cell_code_output" and not node.children]:
            output.parent.remove(output)


def setup(app):
    app.add_post_transform(StaticWidgets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
