"""How the app's parts are laid out: two toolbar rows of controls (each control beside
its button, wrapping together), the status line, the graph view beside the code panel,
and the app's CSS (``static/app.css``) as a ``<style>`` element of its own.

The CSS classes set here (``wb-toolbar``, ``wb-main``, ``wb-style``) are what
``app.css`` lays out."""
from __future__ import annotations

import functools

import ipywidgets as w


def toolbars(search, buttons, planner, matmuls, export_path, overlay, collapse_toggle,
             edge, scheme, mapping) -> tuple[w.HBox, w.HBox]:
    """The two toolbar rows: editing, planning, measuring and export first; what is
    drawn, and the selected kernel's schemes and mapping, second."""
    b = buttons
    # a control and its button wrap together (a lone "Set mapping" took a row)
    together = lambda *cs: w.HBox(list(cs), layout=w.Layout(flex_flow="row nowrap",
                                                             flex="0 0 auto"))
    toolbar = w.HBox([together(search, b["Fuse"], b["Split"]),
                      together(planner, b["Auto"], matmuls, b["Undo"],
                               b["Redo"]),
                      together(b["Measure"], b["Tune"], b["Cancel"]),
                      together(export_path, b["Export"], b["Overwrite"])],
                     layout=w.Layout(flex_flow="row wrap"))
    toolbar2 = w.HBox([together(overlay, collapse_toggle),
                       together(edge, scheme, b["Set scheme"]),
                       together(mapping, b["Set mapping"])],
                      layout=w.Layout(flex_flow="row wrap"))
    toolbar.add_class("wb-toolbar")
    toolbar2.add_class("wb-toolbar")
    return toolbar, toolbar2


def status_row(progress: w.IntProgress, message: w.HTML) -> w.HBox:
    """The progress bar (shown while something runs), the message line, the CSS."""
    return w.HBox([progress, message, _app_style()])


def main_row(view: w.DOMWidget, code: w.DOMWidget) -> w.HBox:
    """The graph view beside the code panel, sharing the row 3 : 2."""
    view.layout = w.Layout(flex="3 1 0%", min_width="0")
    code.layout = w.Layout(flex="2 1 0%", min_width="0")
    main = w.HBox([view, code])
    main.add_class("wb-main")   # (CSS: the two panels share one height)
    return main


@functools.lru_cache(maxsize=1)
def _app_css() -> str:
    from pathlib import Path
    return (Path(__file__).parent / "static" / "app.css").read_text(encoding="utf-8")


def _app_style() -> w.HTML:
    """The app's layout CSS (static/app.css) as a <style> element of its own."""
    style = w.HTML(f"<style>{_app_css()}</style>", layout=w.Layout(width="0", height="0"))
    style.add_class("wb-style")
    return style
