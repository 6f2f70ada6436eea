"""How every widget of the course shows a figure: in its own ``Output``, replacing the previous one.

Chapters 02–05 (every explorer). Explorers that show a picture as an ``Image`` widget (a PNG the static book keeps)
render it with :func:`show_figure_png`.
"""

import io

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display

__all__ = ["show_figure", "show_figure_png"]


def show_figure(output: widgets.Output, fig):
    """Show ``fig`` in ``output`` in place of what was there; return it."""
    plt.close(fig)  # shown through the Output widget only, never twice by the inline backend
    with output:
        output.clear_output(wait=True)
        display(fig)
    return fig


def show_figure_png(image: widgets.Image, fig, dpi: int = 80):
    """Show ``fig`` in the ``image`` widget as a PNG drawn at ``dpi``, in place of what was there; return it."""
    plt.close(fig)  # shown through the Image widget only, never twice by the inline backend
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    image.value = buffer.getvalue()
    return fig
