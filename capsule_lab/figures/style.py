"""The course's figure style: how wide a figure may be, and the colours of the output capsules.

Figures are drawn for the book's text column (CONTRIBUTING.md, "Widgets and figures in the book"): at most
:data:`MAX_FIGURE_WIDTH` inches wide at the notebooks' 100 dpi, so that text of at least 8 pt stays >= 9 px
on screen. Chapters 02–04.
"""

__all__ = ["MAX_FIGURE_WIDTH", "OUTPUT_COLORS"]

#: The widest a figure may be, in inches at the notebooks' 100 dpi.
MAX_FIGURE_WIDTH = 7.5
#: One colour per output capsule j in the toy pictures (colour-blind safe — blue, orange, green, purple, ...).
OUTPUT_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")
