"""The "Open in Colab" badge from the book's own files, so that it shows offline.

Every notebook's first cell links to Colab with Colab's standard badge image (``COLAB_BADGE_URL``), which
is what readers of the notebook on GitHub, in Jupyter or in Colab expect. In the book that image would be
fetched from colab.research.google.com on every page view and show as a broken image offline, so the book
draws ``book/_static/colab-badge.svg`` (ours) in its place; the link itself is unchanged.
"""

from __future__ import annotations

from docutils import nodes
from docutils.transforms import Transform

COLAB_BADGE_URL = "https://colab.research.google.com/assets/colab-badge.svg"
LOCAL_BADGE = "/book/_static/colab-badge.svg"  # relative to the book root (Sphinx's source folder)


class LocalColabBadge(Transform):
    """Point images of ``COLAB_BADGE_URL`` at ``LOCAL_BADGE`` (before Sphinx collects the images)."""

    default_priority = 400

    def apply(self, **kwargs) -> None:
        for image in self.document.findall(nodes.image):
            if image.get("uri") == COLAB_BADGE_URL:
                image["uri"] = LOCAL_BADGE
                if "candidates" in image:
                    del image["candidates"]


def setup(app):
    app.add_transform(LocalColabBadge)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
