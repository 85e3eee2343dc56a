"""A shareable session file: the graph (or a reference to its model file and that
file's SHA-256), every step of the plan history (undone ones too, so Undo and Redo
work after reopening), the position, and the app's view (collapsed containers,
selection) -- JSON, versioned, checked field by field on load.

A step is stored as what identifies its plan (``Plan.key``): each kernel's nodes and
the choices a user or the tuner made in it (stitch schemes, thread mapping, launch
parameters), the planner's name and the matmul precision, with the locks in force;
reopening makes each kernel again with ``make_group`` for this machine's device, as
``Plan.remade`` does. A planner's decision log is not stored (its reasons are text
about the graph at planning time; reopened steps show none).

A step's plan partitions the graph its step holds: the graph as loaded, or that graph
with saved activations recomputed (``Session.recompute``, :mod:`.session_saved`). The
file stores the graph as loaded once and, per step, the values recomputed
(``"recompute"``, version 2); reopening rewrites the loaded graph for each set again
(``rematerialize`` is deterministic: the same node ids), once per set as the session
does. A version 1 file (before recompute steps could be saved) reads as recomputing
nothing.

    >>> s.save("bert.wbsession.json", model="bert.onnx")      # doctest: +SKIP
    >>> s2 = open_session("bert.wbsession.json"); s2.plan == s.plan   # doctest: +SKIP
    True
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .errors import FusionRefused, WorkbenchError
from .fusion.plan import MATMUL_PRECISIONS, Plan, StitchScheme, make_group
from .json_keys import bounded_int, strict_loads

FORMAT = "workbench.session"
VERSION = 2
READS = (1, 2)     # version 1: no recompute steps (no "recompute" per step)
MAX_BYTES = 1 << 30        # an embedded graph with its weights may be large


class SessionFileError(WorkbenchError):
    """A session file that cannot be read as saved (the message names the field)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _group_json(gr) -> dict:
    return {"nodes": list(gr.nodes), "mapping": gr.forced_mapping,
            "schemes": [[v, sc.value] for v, sc in gr.forced],
            "launch": {k: v for k, v in gr.forced_launch}}


def session_json(session, model: str | os.PathLike | None = None,
                 view: dict | None = None) -> dict:
    """The file's content (see the module docstring). ``model``: the .onnx/.json file
    the graph was loaded from, stored by path (relative to nothing: as given, made
    absolute) and hash instead of the graph itself."""
    from .ir.serialize import to_json
    loaded = session.loaded_graph
    recomputed = {id(g): sorted(k) for k, g in session._rewritten().items()}
    if any(id(st.plan.graph) not in recomputed for st in session.history):
        # (every step's graph is the loaded one or a recompute step's rewrite of it)
        raise WorkbenchError("a step of this session plans a graph that is neither the "
                             "one loaded nor a recompute step's, which a session file "
                             "cannot describe; save from a session that made its steps")
    if model is not None:
        p = Path(model).resolve()
        if not p.is_file():
            raise WorkbenchError(f"model file {str(model)[:200]!r} does not exist; pass the "
                                 ".onnx or .json file the session's graph came from, or "
                                 "model=None to store the graph in the session file")
        graph: dict[str, Any] = {"file": str(p), "sha256": _sha256(p)}
    else:
        graph = {"embedded": to_json(loaded)}
    steps = [{"action": st.action, "planner": st.plan.planner,
              "matmul_precision": st.plan.matmul_precision,
              "recompute": recomputed[id(st.plan.graph)],
              "groups": [_group_json(gr) for gr in st.plan.groups],
              "constraints": json.loads(st.constraints.to_json())}
             for st in session.history]
    return {"format": FORMAT, "version": VERSION, "graph": graph,
            "backend": session.backend.name, "seed": session.seed,
            "position": session.position, "steps": steps, "view": dict(view or {})}


def save_session(session, path, model=None, view: dict | None = None) -> Path:
    path = Path(path)
    text = json.dumps(session_json(session, model, view), indent=1)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)      # (atomic: a reader never sees half a file)
    return path


# -- reading -----------------------------------------------------------------------------
def _fail(path, what: str) -> SessionFileError:
    return SessionFileError(f"session file {str(path)[:200]}: {what}; save the session "
                            "again (Session.save) or fix the file")


def read_json(path) -> dict:
    """Strict JSON (UTF-8, no NaN, no duplicate keys), the format and version checked."""
    p = Path(path)
    if not p.is_file():
        raise SessionFileError(f"no session file {str(path)[:200]!r}: check the path "
                               "(Session.save writes one)")
    if p.stat().st_size > MAX_BYTES:
        raise _fail(path, f"larger than {MAX_BYTES >> 20} MB")
    try:
        d = strict_loads(p.read_bytes().decode("utf-8"))
    except RecursionError:
        raise _fail(path, "nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise _fail(path, f"not valid JSON ({' '.join(str(e).split())[:160]})") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise _fail(path, f'not a session file (its "format" is not "{FORMAT}")')
    if d.get("version") not in READS or isinstance(d.get("version"), bool):
        raise _fail(path, f"version {str(d.get('version'))[:20]} (this workbench reads "
                          f"versions {', '.join(map(str, READS))})")
    return d


def _field(path, d: Any, key: str, kind, where: str):
    if not isinstance(d, dict) or key not in d:
        raise _fail(path, f"{where} has no {key!r}")
    v = d[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise _fail(path, f"{where}.{key} is {type(v).__name__}, not {name}")
    return v


def _graph(path, g: dict):
    from .frontends import load
    from .ir.serialize import from_json
    if "embedded" in g:
        return from_json(_field(path, g, "embedded", dict, "graph"))
    file = Path(_field(path, g, "file", str, "graph"))
    want = _field(path, g, "sha256", str, "graph")
    if not file.is_file():
        raise _fail(path, f"its model file {str(file)[:200]} is missing (moved or deleted): "
                          "put it back there")
    if _sha256(file) != want:
        raise _fail(path, f"its model file {str(file)[:200]} has changed since the session "
                          "was saved (SHA-256 differs): the steps name that model's nodes")
    return load(str(file))


def _step_graph(path, session, st: dict, where: str, version: int):
    """The graph a step's plan partitions: the loaded graph with the step's saved
    values recomputed, from the session's cache (one graph per set: the session tells
    a step's choice by its graph's identity, and caches kernels per graph)."""
    from .training.saved import rematerialize, saved_values
    if version == 1:
        if "recompute" in st:
            raise _fail(path, f"{where}.recompute in a version 1 file (recompute steps "
                              "came with version 2)")
        return session.loaded_graph
    values = _field(path, st, "recompute", list, where)
    if not all(isinstance(v, str) for v in values) or len(set(values)) != len(values):
        raise _fail(path, f"{where}.recompute is not a list of distinct value names")
    key, graphs = frozenset(values), session._rewritten()
    if key not in graphs:
        loaded = session.loaded_graph
        saved = {x.value: x for x in saved_values(loaded)}
        for v in sorted(key):
            if v not in saved:
                raise _fail(path, f"{where}.recompute names {v[:80]!r}, not a forward value "
                                  "the graph's backward reads")
            if saved[v].refused:
                raise _fail(path, f"{where}.recompute names {v[:80]!r}, which cannot be "
                                  f"recomputed ({saved[v].refused[:120]})")
        graphs[key] = rematerialize(loaded, key)
    return graphs[key]


def _plan(path, session, st: dict, i: int, version: int = VERSION) -> Plan:
    where = f"steps[{i}]"
    precision = _field(path, st, "matmul_precision", str, where)
    if precision not in MATMUL_PRECISIONS:
        raise _fail(path, f"{where}.matmul_precision {precision[:20]!r} is not one of "
                          f"{', '.join(MATMUL_PRECISIONS)}")
    g, groups, seen = _step_graph(path, session, st, where, version), [], set()
    for j, gr in enumerate(_field(path, st, "groups", list, where)):
        w = f"{where}.groups[{j}]"
        nodes = _field(path, gr, "nodes", list, w)
        if not nodes or not all(isinstance(n, str) and n in g.position for n in nodes):
            raise _fail(path, f"{w}.nodes names no node, or one the graph has not")
        if seen & set(nodes):
            raise _fail(path, f"{w} holds a node another kernel holds")
        seen |= set(nodes)
        mapping = _field(path, gr, "mapping", str, w)
        try:
            schemes = [(v, StitchScheme(sc)) for v, sc in _field(path, gr, "schemes", list, w)]
            launch = {str(k): bounded_int(str(v)) if isinstance(v, int) and not
                      isinstance(v, bool) else _bad_launch(v)
                      for k, v in _field(path, gr, "launch", dict, w).items()}
        except (TypeError, ValueError) as e:
            raise _fail(path, f"{w} has a bad scheme or launch ({str(e)[:120]})") from None
        try:
            groups.append(make_group(g, nodes, True, mapping or None, schemes,
                                     device=session.device, launch=launch.items(),
                                     tf32=precision == "tf32"))
        except FusionRefused as e:
            raise _fail(path, f"{w} cannot be made on {session.device.name} "
                              f"({str(e)[:200]})") from None
    if seen != set(g.position):
        raise _fail(path, f"{where} leaves {len(set(g.position) - seen)} nodes in no kernel")
    planner = _field(path, st, "planner", str, where)
    # (in the saved order: a plan's kernels run in it)
    return Plan(g, tuple(groups), planner, session.device, precision)


def _bad_launch(v):
    raise ValueError(f"launch value {str(v)[:20]} is not an integer")


class SessionFile:
    """Mixed into :class:`workbench.session.Session`: ``save``."""

    def save(self, path, model=None, view: dict | None = None) -> Path:
        """Write this session to ``path`` (JSON; see :mod:`workbench.session_file`):
        the graph embedded, or ``model`` (the .onnx/.json file it came from) by path
        and SHA-256; every step and the position; ``view``: the app's view state.
        ``workbench.open_session(path)`` (:mod:`workbench.session_open`) reopens it."""
        return save_session(self, path, model, view)
