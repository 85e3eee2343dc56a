"""Reopening a session file (:mod:`workbench.session_file` reads and checks it): a
:class:`~workbench.session.Session` with the saved graph, every step, the position and
the app's view. Its own module because it makes a Session, and the session imports
the file's writer (``Session.save``).

    >>> s = open_session("bert.wbsession.json")                    # doctest: +SKIP
"""
from __future__ import annotations

import json

from .errors import WorkbenchError
from .fusion.constraints import Constraints
from .history import History, Step
from .session import Session
from .session_file import _fail, _field, _graph, _plan, read_json


def open_session(path, backend: str | None = None):
    """The Session saved in ``path``: the same graph, every step (undo and redo work),
    the same position; ``session.view_state`` holds the saved view. ``backend``:
    another backend than the saved one (plans are made again for its device)."""
    d = read_json(path)
    graph = _graph(path, _field(path, d, "graph", dict, "the file"))
    backend = backend or _field(path, d, "backend", str, "the file")
    s = Session(graph, backend=backend, seed=_field(path, d, "seed", int, "the file"))
    steps = _field(path, d, "steps", list, "the file")
    if not steps:
        raise _fail(path, "has no steps")
    history = None
    for i, st in enumerate(steps):
        plan = _plan(path, s, st, i, d["version"])
        try:
            cons = Constraints.from_json(json.dumps(_field(path, st, "constraints", list,
                                                           f"steps[{i}]")))
        except WorkbenchError as e:
            raise _fail(path, f"steps[{i}].constraints: {str(e)[:200]}") from None
        step = Step(_field(path, st, "action", str, f"steps[{i}]"), plan, (), cons)
        if history is None:
            history = History(step)
        else:
            history.push(step)
    pos = _field(path, d, "position", int, "the file")
    if not 0 <= pos < len(steps):
        raise _fail(path, f"position {pos} is not a step (0..{len(steps) - 1})")
    history.position = pos
    s._history = history
    s.view_state = _field(path, d, "view", dict, "the file")
    return s
