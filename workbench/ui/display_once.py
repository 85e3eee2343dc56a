"""An app widget shown once per notebook cell.

``app = wb.open(p); app`` would otherwise draw the app twice in one cell (once by
``wb.open``'s display, once as the cell's value): a second view of the same widget
model, whose front ends then fight over the selection and the scroll. Every app
(graph, distributed, repeat) takes this one rule."""
from __future__ import annotations


class ShownOncePerCell:
    """Mixin for an ipywidgets container: ``_ipython_display_`` shows it at most once per
    executed cell (outside IPython: nothing)."""

    def _ipython_display_(self) -> None:
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        count = getattr(get_ipython(), "execution_count", None)
        if count is not None and getattr(self, "_shown_in", None) == count:
            return
        self._shown_in = count
        display(self._repr_mimebundle_(), raw=True)
