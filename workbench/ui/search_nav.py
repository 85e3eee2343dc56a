"""Next / previous through the search box's matches (Model Explorer's): the search
selects every match and centres the first; these step the view through the others,
each revealed (the collapsed boxes hiding it opened) and centred, with "3 of 12".

    >>> app.select("softmax"); app.search_nav.next()      # doctest: +SKIP
    'n212'
"""
from __future__ import annotations

import ipywidgets as w


class SearchNav(w.HBox):
    """◀ / ▶ buttons and the "k of n" read-out; ``set_hits`` from ``app.select``."""

    def __init__(self, app):
        self.app = app
        self.hits: list[str] = []
        self.index = 0
        self.prev_button = w.Button(icon="chevron-left", tooltip="previous match",
                                    layout=w.Layout(width="32px"))
        self.next_button = w.Button(icon="chevron-right", tooltip="next match",
                                    layout=w.Layout(width="32px"))
        self.label = w.HTML("", layout=w.Layout(min_width="56px"))
        self.prev_button.on_click(lambda _: self.previous())
        self.next_button.on_click(lambda _: self.next())
        super().__init__([self.prev_button, self.label, self.next_button],
                         layout=w.Layout(flex="0 0 auto"))
        self.add_class("wb-search-nav")
        self._show()

    def set_hits(self, hits: list[str]) -> None:
        """The matches of a new search, the first one shown."""
        self.hits, self.index = list(hits), 0
        self._show()

    def next(self) -> str | None:
        return self._step(1)

    def previous(self) -> str | None:
        return self._step(-1)

    def _step(self, d: int) -> str | None:
        if not self.hits:
            return None
        self.index = (self.index + d) % len(self.hits)
        node = self.hits[self.index]
        self.app.view.focus_on(node)        # (opens the boxes hiding it, centres it)
        g = self.app.session.graph
        self.app._set_message(f"match {self.index + 1} of {len(self.hits)}: {node} "
                              f"({g.node(node).op}, kernel "
                              f"{self.app.session.plan.group(node).id})")
        self._show()
        return node

    def _show(self) -> None:
        n = len(self.hits)
        self.label.value = f"{self.index + 1} of {n}" if n else ""
        self.prev_button.disabled = self.next_button.disabled = n < 2
