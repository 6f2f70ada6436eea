"""How every widget of the course shows a figure: in its own ``Output``, replacing the previous one.

Chapters 02–04 (every explorer).
"""

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display

__all__ = ["show_figure"]


def show_figure(output: widgets.Output, fig):
    """Show ``fig`` in ``output`` in place of what was there; return it."""
    plt.close(fig)  # shown through the Output widget only, never twice by the inline backend
    with output:
        output.clear_output(wait=True)
        display(fig)
    return fig
