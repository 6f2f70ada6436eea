"""What a figure shows, in words: the alt text a screen reader reads and the numbered caption every reader sees.
Chapters 01–08.

Both are written from the figure's data by the code that draws it, so they say what this run's figure shows
("dynamic routing with r = 3 is the most accurate, 97.7 %"), not what kind of picture it is ("a plot"):

1. a chapter's cell draws a figure and ends with ``show(fig, alt=..., caption=...)``; a figure function of the
   package may instead have attached both with :func:`attach_description`, and the cell ends with ``show(fig)``.
   :func:`show` displays the figure with the two texts in the output's metadata (key ``capsule_lab``) and
   closes it. In Jupyter and Colab the figure shows as any other.
2. after a notebook is executed (``make notebooks``), :func:`caption_cells` copies them into the cell's metadata,
   where MyST-NB reads them (``mystnb.image.alt``, ``mystnb.figure.caption`` and ``mystnb.figure.name``): the book
   shows the image with that alt text inside a numbered figure ("Fig. 3. ..."). MyST-NB's options apply to every
   displayed output of a cell, so a figure has a cell of its own (printed text beside it is fine).

``capsule-lab captions NOTEBOOK...`` runs step 2 (``make notebooks`` does, after executing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Description", "attach_description", "description_of", "show", "check_alt_text", "is_file_name",
           "join_words", "caption_cells", "METADATA_KEY", "MIN_ALT_WORDS"]

#: The key of a figure output's metadata under which :func:`show` stores the description.
METADATA_KEY = "capsule_lab"
#: Alt text shorter than this many words cannot say what a data figure shows.
MIN_ALT_WORDS = 8
_ATTRIBUTE = "_capsule_lab_description"
_FILE_NAME = re.compile(r"^\S*\.(png|jpe?g|svg|gif|webp)$|^[./_\-\w]*[0-9a-f]{16,}[./_\-\w]*$", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"^(a |the )?(figure|image|plot|graph|chart|picture)( of .{0,12})?\.?$", re.IGNORECASE)


@dataclass(frozen=True)
class Description:
    """Alt text (what the figure shows, for a reader who cannot see it) and caption (its numbered title)."""

    alt: str
    caption: str

    def __post_init__(self):
        check_alt_text(self.alt)
        if not isinstance(self.caption, str) or not self.caption.strip():
            raise ValueError(f"caption must be a non-empty str, got {self.caption!r}")
        if self.caption.strip() == self.alt.strip():
            raise ValueError("caption and alt text are the same: the alt text says what the figure shows, "
                             "the caption titles it")


def is_file_name(text: str) -> bool:
    """Whether ``text`` looks like a file name or a hash (what MyST-NB writes as alt text when a cell gives none)."""
    return bool(_FILE_NAME.match(text.strip()))


def join_words(items, conjunction: str = "and") -> str:
    """The items in words, for a description: ``'a'``, ``'a and b'``, ``'a, b and c'`` (``conjunction="or"``:
    ``'a, b or c'``)."""
    items = [str(item) for item in items]
    if not items:
        raise ValueError("join_words needs at least one item")
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {conjunction} " + items[-1]


def check_alt_text(alt: str) -> str:
    """``alt`` if it can describe a data figure, else ValueError: not empty, not a file name or hash, not a
    placeholder ("figure", "plot of ..."), at least :data:`MIN_ALT_WORDS` words, one paragraph."""
    if not isinstance(alt, str) or not alt.strip():
        raise ValueError(f"alt text must be a non-empty str, got {alt!r}")
    text = alt.strip()
    if is_file_name(text):
        raise ValueError(f"alt text must say what the figure shows, not name a file: {text!r}")
    if _PLACEHOLDER.match(text):
        raise ValueError(f"alt text must say what the figure shows, not what kind of picture it is: {text!r}")
    if len(text.split()) < MIN_ALT_WORDS:
        raise ValueError(f"alt text must say what the figure shows in at least {MIN_ALT_WORDS} words, got "
                         f"{len(text.split())}: {text!r}")
    if "\n" in text:
        raise ValueError("alt text must be one paragraph (no line breaks): a screen reader reads it as one")
    return alt


def _check_figure(fig) -> None:
    from matplotlib.figure import Figure

    if not isinstance(fig, Figure):
        raise ValueError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")


def attach_description(fig, alt: str, caption: str):
    """Attach alt text and caption to ``fig`` (checked by :class:`Description`) and return ``fig``: what a figure
    function of the package does, so that ``show(fig)`` needs no words from the chapter. Chapters 01–08."""
    _check_figure(fig)
    setattr(fig, _ATTRIBUTE, Description(alt, caption))
    return fig


def description_of(fig) -> Description | None:
    """The description :func:`attach_description` attached to ``fig``, or None."""
    _check_figure(fig)
    return getattr(fig, _ATTRIBUTE, None)


def show(fig, alt: str | None = None, caption: str | None = None, *, name: str | None = None) -> None:
    """Display ``fig`` with its description in the output's metadata and close it.

    It returns nothing, so a cell that ends with ``show(...)`` shows the figure alone (nbval's kernel, which stores
    no history, would print a returned value even after a ``;``).

    ``alt`` and ``caption`` replace what :func:`attach_description` attached (both or neither must be given when nothing
    is attached). ``name`` is the figure's label in the book (default: numbered by the notebook's order).
    """
    _check_figure(fig)
    attached = description_of(fig)
    if alt is None and caption is None:
        if attached is None:
            raise ValueError("this figure has no description: pass alt= and caption= (what the figure shows, in "
                             "words written from its data)")
        description = attached
    else:
        description = Description(alt if alt is not None else (attached.alt if attached else ""),
                                  caption if caption is not None else (attached.caption if attached else ""))
    if name is not None and not re.fullmatch(r"[a-z0-9][a-z0-9-]*", str(name)):
        raise ValueError(f"name must be lower-case letters, digits and hyphens, got {name!r}")
    import matplotlib.pyplot as plt
    from IPython.display import display

    metadata = {"alt": description.alt.strip(), "caption": description.caption.strip()}
    if name is not None:
        metadata["name"] = name
    display(fig, metadata={METADATA_KEY: metadata})
    plt.close(fig)


def _is_image(output: dict) -> bool:
    return output.get("output_type") in ("display_data", "execute_result") and any(
        mime.startswith("image/") for mime in output.get("data", {}))


def caption_cells(path) -> int:
    """Copy each figure's description from its output's metadata into its cell's metadata (MyST-NB's
    ``mystnb.image.alt`` and ``mystnb.figure``), in place; returns the number of figures captioned.

    A cell whose figure has no description loses any stale caption; a figure beside another displayed output (a
    second figure, a table) is an error: the options apply to every displayed output of the cell. Figures without a name
    are named ``fig-<notebook>-<k>``.
    """
    path = Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"path must be an existing .ipynb file, got {str(path)!r}")
    import nbformat

    text = path.read_text(encoding="utf8")
    notebook = nbformat.reads(text, as_version=4)
    stem = re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-")
    count = 0
    for index, cell in enumerate(notebook.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        images = [o for o in cell.get("outputs", []) if _is_image(o)]
        described = [o["metadata"][METADATA_KEY] for o in images if METADATA_KEY in o.get("metadata", {})]
        mystnb = cell.setdefault("metadata", {}).get("mystnb", {})
        mystnb.pop("figure", None)
        mystnb.pop("image", None)
        rich = [o for o in cell.get("outputs", []) if o.get("output_type") in ("display_data", "execute_result")]
        if len(rich) > 1 and described:
            raise ValueError(f"{path.name}, cell {index}: a figure and {len(rich) - 1} other displayed output(s) in one "
                             "cell; MyST-NB's figure options apply to every displayed output of a cell, so show a "
                             "figure in a cell of its own (a table in the cell before it)")
        if described:
            count += 1
            meta = described[0]
            mystnb["figure"] = {"caption": meta["caption"], "name": meta.get("name", f"fig-{stem}-{count}")}
            mystnb["image"] = {"alt": meta["alt"]}
        if mystnb:
            cell["metadata"]["mystnb"] = mystnb
        else:
            cell["metadata"].pop("mystnb", None)
    new_text = nbformat.writes(notebook) + "\n"
    if new_text != text:
        path.write_text(new_text, encoding="utf8")
    return count
