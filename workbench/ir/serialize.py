"""The JSON graph format, and its exact round trip.

Format (``"format": "workbench.graph", "version": 1``)::

    {"format": "workbench.graph", "version": 1, "name": "layernorm",
     "description": "one line saying what it is",
     "inputs":    {"x": {"shape": [4096, 1024], "dtype": "float32"},
                  "v": {"shape": [1024], "dtype": "float32", "range": [0, 1]}},
     "constants": {"gamma": {"shape": [1024], "dtype": "float32", "init": INIT}},
     "nodes": [{"op": "reduce_mean", "inputs": ["x"], "outputs": ["mean"],
                "attrs": {"axes": [1], "keepdims": true},
                "name": "optional display name",
                "origin": {"composite": "LayerNormalization", "source": "ln1"}}],
     "outputs": ["y"]}

``INIT`` is one of ``{"base64": "..."}`` (raw little-endian bytes, what the writer
emits, exact), ``{"data": [...]}`` (nested lists), ``{"fill": 1.0}``, or
``{"random": {"seed": 0, "low": -1, "high": 1}}``. Node outputs have their shapes
inferred by the ops' shape rules, so a file states shapes only for inputs and
constants. Node ids are assigned in file order (``n0``, ``n1``, ...). An input's
optional ``range`` is where random test inputs are drawn from (default [-1, 1)).

Reading checks every field's type and range before anything is made: dimensions are
integers >= 0 (not 4.5, not true; at most 2^35 elements per value), attributes are
numbers, strings, booleans or lists of them and each op's shape rule validates its
own, the file is UTF-8 and not nested past Python's recursion limit. ``fill`` and
``random`` constants are made on first use, so loading and printing a graph allocate
nothing. Every fault is one :class:`GraphError` (a missing or unreadable file, a
:class:`WorkbenchError`).
"""
from __future__ import annotations

import base64
import functools
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GraphError, WorkbenchError, shown
from ..json_keys import JsonFault, bounded_int, unique_keys
from ..dtypes import DType
from .graph import Graph, LazyConstants, Node, Origin, Value, freeze_attr, infer_node
from ..shapes import check_shape, is_int
from ..ops import get_op
from .composites import random_array
from . import nested

FORMAT, VERSION = "workbench.graph", 1


def _attr_json(v: Any) -> Any:
    doc = nested.to_json(v)                 # op repeat's attr: the repeat's own JSON
    if doc is not None:
        return doc
    return [_attr_json(x) for x in v] if isinstance(v, tuple) else v


def to_json(g: Graph) -> dict:
    """The graph as a JSON-compatible dict (constants as base64, exact)."""
    def const(name):
        a = g.constants[name]
        return {"shape": list(a.shape), "dtype": DType.of(a.dtype).value,
                "init": {"base64": base64.b64encode(
                    np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
                ).decode()}}

    nodes = []
    for n in g.nodes:
        d = {"op": n.op, "inputs": list(n.inputs), "outputs": list(n.outputs)}
        if n.attrs:
            d["attrs"] = {k: _attr_json(v) for k, v in n.attrs}
        if n.name and n.name != n.id:
            d["name"] = n.name
        if n.origin:
            d["origin"] = {"composite": n.origin.composite, "source": n.origin.source}
        nodes.append(d)
    return {"format": FORMAT, "version": VERSION, "name": g.name,
            "description": g.description,
            "inputs": {i: {"shape": list(g.value(i).shape), "dtype": g.value(i).dtype.value,
                           **({"range": list(g.input_ranges[i])} if i in g.input_ranges
                              else {})}
                       for i in g.inputs},
            "constants": {c: const(c) for c in g.constants},
            "nodes": nodes, "outputs": list(g.outputs)}


def _fail(what: str, why: str) -> GraphError:
    return GraphError(f"{what}: {why}")


def _obj(x: Any, what: str) -> dict:
    if not isinstance(x, dict):
        raise _fail(what, f"must be an object, got {_kind(x)}")
    return x


def _list(x: Any, what: str) -> list:
    if not isinstance(x, list):
        raise _fail(what, f"must be a list, got {_kind(x)}")
    return x


def _name(x: Any, what: str) -> str:
    if not isinstance(x, str):
        raise _fail(what, f"a value name must be a string, got {_kind(x)}")
    return x


def _kind(x: Any) -> str:
    return f"{type(x).__name__} {x!r:.40}" if not isinstance(x, (dict, list)) else \
        ("an object" if isinstance(x, dict) else "a list")


def _number(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise _fail(what, f"must be a finite number, got {_kind(x)}")
    return float(x)


def _dtype(spec: dict, what: str) -> DType:
    try:
        return DType.of(spec.get("dtype", "float32"))
    except GraphError as e:
        raise _fail(what, str(e)) from None


# attribute values: numbers, strings, booleans, null, and lists of them (nested a little)
_ATTR_SCALARS = (bool, int, float, str, type(None))
_ATTR_DEPTH = 3


def _attr(v: Any, what: str) -> Any:
    is_doc, doc = nested.from_json(v)       # op repeat's attr: a repeat's JSON
    if is_doc:
        return doc
    stack = [(v, 0)]
    while stack:      # (iterative: a hostile file may nest lists deep)
        x, depth = stack.pop()
        if isinstance(x, list):
            if depth >= _ATTR_DEPTH:
                raise _fail(what, f"lists nested more than {_ATTR_DEPTH} deep; attributes "
                                  "are numbers, strings, booleans or lists of them")
            stack.extend((y, depth + 1) for y in x)
        elif not isinstance(x, _ATTR_SCALARS):
            raise _fail(what, f"{_kind(x)} is not an attribute value; attributes are "
                              "numbers, strings, booleans or lists of them")
    return freeze_attr(v)


def _init(name: str, shape: tuple[int, ...], dt: DType, init: Any):
    """A constant's data: an array (base64, data: held in the file) or a maker of it
    (fill, random: made on first use, so a graph loads and prints without them).
    Every parameter is checked here, before anything is made."""
    what = f"constant {name!r}"
    npdt = dt.np
    numel = math.prod(shape)
    init = _obj(init, f"{what} init")
    if "base64" in init:
        text = init["base64"]
        if not isinstance(text, str):
            raise _fail(what, f"init base64 must be a string, got {_kind(text)}")
        try:
            raw = base64.b64decode(text)
        except ValueError:
            raise _fail(what, "init base64 is not valid base64; re-export the graph") from None
        if len(raw) != numel * npdt.itemsize:
            raise _fail(what, f"base64 data has {len(raw) / npdt.itemsize:g} elements, "
                              f"shape {list(shape)} needs {numel}")
        return np.frombuffer(raw, dtype=npdt.newbyteorder("<")).astype(npdt).reshape(shape)
    if "data" in init:
        try:
            a = np.asarray(init["data"], dtype=npdt)
        except (TypeError, ValueError, OverflowError):
            raise _fail(what, f"data must be a (nested) list of {dt.value} numbers with "
                              f"shape {list(shape)}") from None
        if a.size != numel:
            raise _fail(what, f"data does not match shape {list(shape)}")
        return a.reshape(shape)
    if "fill" in init:
        fill = init["fill"]
        ok = isinstance(fill, (bool, int, float)) and (
            dt.is_float or (not isinstance(fill, float) or (math.isfinite(fill)
                                                            and fill.is_integer())))
        if ok and dt.kind == "i":
            info = np.iinfo(npdt)
            ok = info.min <= fill <= info.max
        if not ok:
            raise _fail(what, f"init fill must be a number a {dt.value} can hold, got "
                              f"{_kind(fill)}")
        value = np.asarray(fill, dtype=npdt)
        return functools.partial(np.full, shape, value, npdt)
    if "random" in init:
        r = _obj(init["random"] if init["random"] is not None else {}, f"{what} init random")
        seed = r.get("seed", 0)
        if not is_int(seed) or seed < 0:
            raise _fail(what, f"init random seed must be an integer >= 0, got {_kind(seed)}")
        low = _number(r.get("low", -1.0), f"{what} init random low")
        high = _number(r.get("high", 1.0), f"{what} init random high")
        try:       # one element, to check the parameters now rather than at first use
            random_array((1,), npdt, int(seed), low, high)
        except (TypeError, ValueError, OverflowError) as e:
            raise _fail(what, f"init random {{low: {low:g}, high: {high:g}}} cannot make "
                              f"{dt.value} values ({e})") from None
        return functools.partial(random_array, shape, npdt, int(seed), low, high)
    raise _fail(what, "init must have one of base64, data, fill, random")


def check_envelope(d: Any, fmt: str, version: int, what: str) -> None:
    """The envelope every workbench JSON document starts with (a graph, a repeat, a
    distributed program): ``"format"`` names the kind and ``"version"`` (an integer,
    absent meaning the current one) is one this workbench reads -- older ones are read
    as they are, a newer one asks for an upgrade."""
    if not isinstance(d, dict) or d.get("format") != fmt:
        raise GraphError(f"not a {what}: expected \"format\": \"{fmt}\"")
    v = d.get("version", version)
    if not is_int(v):
        raise GraphError(f"{what} format version must be an integer, got {_kind(v)}")
    if v > version:
        raise GraphError(f"{what} format version {v} is newer than this "
                         f"workbench reads ({version}); upgrade fusion-workbench")


def from_json(d: dict) -> Graph:
    """Build and verify a graph from the JSON dict; GraphError names what is wrong.

    Every field is checked for its type and range before anything is made; ``fill``
    and ``random`` constants are made on first use (see :class:`LazyConstants`)."""
    check_envelope(d, FORMAT, VERSION, "workbench graph")
    try:
        g = _from_json(d)
    except GraphError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, OverflowError, AttributeError,
            RecursionError) as e:   # a net under the checks above
        text = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        raise GraphError(f"malformed graph JSON: {type(e).__name__}"
                         f"{': ' + shown(text) if text else ''}") from None
    return g.verify()


def _from_json(d: dict) -> Graph:
    for key in ("nodes", "outputs"):
        if key not in d:
            raise GraphError(f"graph JSON has no \"{key}\" list")
    values: dict[str, Value] = {}
    inputs, ranges = [], {}
    for name, spec in _obj(d.get("inputs", {}), "graph inputs").items():
        what = f"input {name!r}"
        spec = _obj(spec, what)
        values[name] = Value(name, check_shape(spec.get("shape"), what), _dtype(spec, what))
        inputs.append(name)
        if "range" in spec:
            r = spec["range"]
            if not isinstance(r, list) or len(r) != 2:
                raise _fail(what, f"range must be [low, high], got {_kind(r)}")
            ranges[name] = (_number(r[0], f"{what} range"), _number(r[1], f"{what} range"))
    arrays, makers, order = {}, {}, []
    for name, spec in _obj(d.get("constants", {}), "graph constants").items():
        what = f"constant {name!r}"
        if name in values:
            raise _fail(what, "an input has the same name; value names are unique")
        spec = _obj(spec, what)
        shape, dt = check_shape(spec.get("shape"), what), _dtype(spec, what)
        data = _init(name, shape, dt, spec.get("init", {"random": {}}))
        if isinstance(data, np.ndarray):
            arrays[name] = data
        else:
            makers[name] = (shape, dt.np, data)
        order.append(name)
        values[name] = Value(name, shape, dt)
    nodes = []
    for i, nd in enumerate(_list(d["nodes"], "graph nodes")):
        nd = _obj(nd, f"node {i}")
        op_name = nd.get("op")
        if not isinstance(op_name, str):
            raise GraphError(f"node {i}: op must be an op name, got {_kind(op_name)}")
        where = f"node {i} ({op_name})"
        try:
            op = get_op(op_name)
        except GraphError as e:
            raise _fail(f"node {i}", str(e)) from None
        ins = [_name(x, f"{where} inputs") for x in _list(nd.get("inputs", []),
                                                          f"{where} inputs")]
        for x in ins:
            if x not in values:
                raise GraphError(f"{where} reads undefined value {x!r}")
        attrs = {k: _attr(v, f"{where} attr {k}")
                 for k, v in _obj(nd.get("attrs", {}), f"{where} attrs").items()}
        specs = infer_node(op, [values[x] for x in ins], attrs, where)
        outs = [_name(o, f"{where} outputs") for o in _list(nd.get("outputs"),
                                                            f"{where} outputs")]
        if len(outs) != len(specs):
            raise GraphError(f"{where} lists {len(outs)} outputs, the op has {len(specs)}")
        for o, (shape, dt) in zip(outs, specs):
            if o in values:
                raise GraphError(f"value {o!r} is defined twice")
            values[o] = Value(o, check_shape(shape, f"{where} output {o!r}"), dt)
        label = nd.get("name", "")
        if not isinstance(label, str):
            raise _fail(where, f"name must be a string, got {_kind(label)}")
        org = nd.get("origin")
        if org is not None:
            org = _obj(org, f"{where} origin")
            if not all(isinstance(org.get(k), str) for k in ("composite", "source")):
                raise _fail(where, "origin must be {\"composite\": text, \"source\": text}")
            org = Origin(org["composite"], org["source"])
        nodes.append(Node.make(f"n{i}", op_name, ins, outs, attrs, label, org))
    outputs = [_name(o, "graph outputs") for o in _list(d["outputs"], "graph outputs")]
    return Graph(str(d.get("name", "graph")), tuple(values.values()), tuple(nodes),
                 tuple(inputs), tuple(outputs), LazyConstants(arrays, makers, order),
                 str(d.get("description", "")), ranges)


def save_json(g: Graph, path: str | Path) -> None:
    Path(path).write_text(json.dumps(to_json(g), indent=1))


def load_json(path: str | Path) -> Graph:
    """Read and verify a graph file; every fault (missing, a directory, not UTF-8, not
    JSON, nested too deeply, malformed) is one WorkbenchError naming the file."""
    if not isinstance(path, (str, os.PathLike)):
        raise WorkbenchError(f"load_json takes a path to a .json file, got "
                             f"{type(path).__name__}")
    path = Path(path)
    label = shown(path)
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise WorkbenchError(f"{label} is a directory, not a graph file; pass the "
                             ".json file") from None
    except FileNotFoundError:
        raise WorkbenchError(f"file not found: {label}; check the path") from None
    except (OSError, ValueError) as e:     # permissions, a name too long, a NUL byte
        why = getattr(e, "strerror", None) or str(e)
        raise WorkbenchError(f"cannot read {label} ({shown(why)}); check the path") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise GraphError(f"{label} is not UTF-8 text (byte {e.start} is "
                         f"{raw[e.start:e.start + 1]!r}); save the JSON as UTF-8") from None
    try:
        d = json.loads(text, object_pairs_hook=unique_keys, parse_int=bounded_int)
    except JsonFault as e:
        raise GraphError(f"{label}: {e}; fix the file or re-export it") from None
    except json.JSONDecodeError as e:
        # (e.msg may end in "at", as in "Unterminated string starting at")
        where = f"line {e.lineno}, column {e.colno}"
        msg = e.msg[:-3] if e.msg.endswith(" at") else e.msg
        raise GraphError(f"{label}: not valid JSON ({msg} at {where}); "
                         "fix the file or re-export it") from None
    except RecursionError:
        raise GraphError(f"{label}: JSON nested too deeply to be a workbench graph; fix "
                         "the file or re-export it") from None
    return from_json(d)
