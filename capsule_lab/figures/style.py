"""The course's figure style, set once here: width, a colour-blind-safe palette, and a marker and a line style per
series so that no plot tells its lines apart by colour alone. Chapters 01–08.

Width. Figures are drawn for the book's text column (CONTRIBUTING.md, "Widgets and figures in the book"): at most
:data:`MAX_FIGURE_WIDTH` inches wide at the notebooks' 100 dpi, so that text of at least 8 pt stays >= 9 px on
screen.

Colour. :data:`PALETTE` is Okabe and Ito's eight colours (*Color Universal Design*, 2008), which stay distinct
under the common colour-vision deficiencies (protanopia, deuteranopia, tritanopia), ordered so that the first
five have a contrast of at least 3:1 on white, what WCAG 2.1 asks of graphics (1.4.11). Orange and sky blue
(2.3:1) come after them, yellow (1.3:1, hard to see for everyone) last.

Series. Series k is drawn in ``PALETTE[k]`` with ``MARKERS[k]`` and ``LINESTYLES[k]`` (:func:`series`), so a
reader who sees no colour, or prints the page in grey, still tells the lines apart. :func:`use` makes this the
default of every ``Axes.plot`` (matplotlib's property cycle); importing :mod:`capsule_lab.figures` calls it, so
every chapter's figures, the package's and those drawn in a notebook cell, share it.
"""

from __future__ import annotations

__all__ = ["MAX_FIGURE_WIDTH", "PALETTE", "MARKERS", "LINESTYLES", "OUTPUT_COLORS", "REFERENCE_COLOR",
           "series", "use"]

#: The widest a figure may be, in inches at the notebooks' 100 dpi.
MAX_FIGURE_WIDTH = 7.5
#: The Okabe–Ito colours in this order (blue, vermillion, bluish green, reddish purple, black, orange, sky blue,
#: yellow).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000", "#E69F00", "#56B4E9", "#F0E442")
#: One marker per series, in the palette's order (filled shapes that differ in outline, not only in size).
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: One line style per series, in the palette's order (solid, dashed, dash-dot, dotted, then dash patterns).
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 2)), (0, (3, 1, 1, 1)))
#: One colour per output capsule j in the toy pictures (the palette's first six).
OUTPUT_COLORS = PALETTE[:6]
#: The colour of lines that mark a reference value, such as a paper's number or a uniform coupling (dark grey).
REFERENCE_COLOR = "0.35"


def series(k: int) -> dict:
    """Colour, marker and line style of series ``k`` (0-based; wraps after eight), as ``Axes.plot`` keywords.

    >>> series(1)["color"], series(1)["marker"], series(1)["linestyle"]
    ('#D55E00', 's', '--')
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    k %= len(PALETTE)
    return {"color": PALETTE[k], "marker": MARKERS[k], "linestyle": LINESTYLES[k]}


def use() -> None:
    """Make the course's style matplotlib's default: the palette, markers and line styles as the property cycle,
    markers small enough for curves of a few dozen points, viridis (readable in grey) for images."""
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams["axes.prop_cycle"] = (cycler(color=list(PALETTE)) + cycler(marker=list(MARKERS))
                                       + cycler(linestyle=list(LINESTYLES)))
    mpl.rcParams["lines.markersize"] = 4.0
    mpl.rcParams["image.cmap"] = "viridis"
    mpl.rcParams["legend.fontsize"] = 8
