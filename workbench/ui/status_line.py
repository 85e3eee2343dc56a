"""The app's status line: the last thing the app said, as a line of HTML, marked
``wb-refused`` when it is a refusal (the reason an action changed nothing).

Both the kernel's thread and a job's worker thread say things, so the text and its
class change together under one lock.

Example::

    >>> line = StatusLine()                                  # doctest: +SKIP
    >>> line.say("would create a cycle through n12", refused=True)   # doctest: +SKIP
    >>> line.text, "wb-refused" in line.widget._dom_classes  # doctest: +SKIP
    ('would create a cycle through n12', True)
"""
from __future__ import annotations

import html
import threading

import ipywidgets as w


class StatusLine:
    """``widget`` shows ``text``, escaped; ``say`` sets both."""

    def __init__(self):
        self.widget = w.HTML()
        self.widget.add_class("wb-message")
        self._lock = threading.Lock()
        self.text = ""
        self.refused = False    # (what is shown is a refusal)

    def say(self, text: str, refused: bool = False) -> None:
        # (a job's thread and the kernel's both say things: the text and its class
        # change together, or a refusal could lose its class to the other thread)
        with self._lock:
            self.text, self.refused = text, refused
            self.widget.value = html.escape(text)
            if refused:
                self.widget.add_class("wb-refused")
            else:
                self.widget.remove_class("wb-refused")
