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
"""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GraphError
from .dtypes import DType
from .graph import Graph, Node, Origin, Value, freeze_attr

FORMAT, VERSION = "workbench.graph", 1


def _attr_json(v: Any) -> Any:
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


def _init(name: str, spec: dict) -> np.ndarray:
    from .composites import random_array
    shape = tuple(int(d) for d in spec["shape"])
    dt = DType.of(spec.get("dtype", "float32")).np
    init = spec.get("init", {"random": {}})
    if "base64" in init:
        raw = base64.b64decode(init["base64"])
        a = np.frombuffer(raw, dtype=dt.newbyteorder("<")).astype(dt)
        if a.size != int(np.prod(shape, dtype=np.int64)):
            raise GraphError(f"constant {name!r}: base64 data has {a.size} elements, "
                             f"shape {list(shape)} needs {int(np.prod(shape))}")
        return a.reshape(shape)
    if "data" in init:
        a = np.asarray(init["data"], dtype=dt)
        if a.shape != shape:
            a = a.reshape(shape) if a.size == int(np.prod(shape, dtype=np.int64)) else None
        if a is None:
            raise GraphError(f"constant {name!r}: data does not match shape {list(shape)}")
        return a
    if "fill" in init:
        return np.full(shape, init["fill"], dtype=dt)
    if "random" in init:
        r = init["random"] or {}
        return random_array(shape, dt, int(r.get("seed", 0)), float(r.get("low", -1.0)),
                            float(r.get("high", 1.0)))
    raise GraphError(f"constant {name!r}: init must have one of base64, data, fill, random")


def from_json(d: dict) -> Graph:
    """Build and verify a graph from the JSON dict; GraphError names what is wrong."""
    from ..ops import get_op
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise GraphError(f"not a workbench graph: expected \"format\": \"{FORMAT}\"")
    if int(d.get("version", 0)) > VERSION:
        raise GraphError(f"graph format version {d.get('version')} is newer than this "
                         f"workbench reads ({VERSION}); upgrade fusion-workbench")
    try:
        values: dict[str, Value] = {}
        inputs = []
        ranges = {n: (float(sp["range"][0]), float(sp["range"][1]))
                  for n, sp in d.get("inputs", {}).items() if "range" in sp}
        for name, spec in d.get("inputs", {}).items():
            values[name] = Value(name, tuple(int(x) for x in spec["shape"]),
                                 DType.of(spec.get("dtype", "float32")))
            inputs.append(name)
        consts = {}
        for name, spec in d.get("constants", {}).items():
            consts[name] = _init(name, spec)
            values[name] = Value(name, consts[name].shape, DType.of(consts[name].dtype))
        nodes = []
        for i, nd in enumerate(d["nodes"]):
            op = get_op(nd["op"])
            ins = []
            for x in nd["inputs"]:
                if x not in values:
                    raise GraphError(f"node {i} ({nd['op']}) reads undefined value {x!r}")
                ins.append(values[x])
            attrs = {k: freeze_attr(v) for k, v in nd.get("attrs", {}).items()}
            specs = op.infer(ins, attrs)
            outs = list(nd["outputs"])
            if len(outs) != len(specs):
                raise GraphError(f"node {i} ({nd['op']}) lists {len(outs)} outputs, the op "
                                 f"has {len(specs)}")
            for o, (shape, dt) in zip(outs, specs):
                if o in values:
                    raise GraphError(f"value {o!r} is defined twice")
                values[o] = Value(o, shape, dt)
            org = nd.get("origin")
            nodes.append(Node.make(f"n{i}", nd["op"], nd["inputs"], outs, attrs,
                                   nd.get("name", ""),
                                   Origin(org["composite"], org["source"]) if org else None))
        g = Graph(str(d.get("name", "graph")), tuple(values.values()), tuple(nodes),
                  tuple(inputs), tuple(d["outputs"]), consts, str(d.get("description", "")),
                  ranges)
    except GraphError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise GraphError(f"malformed graph JSON: {type(e).__name__}: {e}") from None
    return g.verify()


def save_json(g: Graph, path: str | Path) -> None:
    Path(path).write_text(json.dumps(to_json(g), indent=1))


def load_json(path: str | Path) -> Graph:
    try:
        d = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise GraphError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); "
                         "fix the file or re-export it") from None
    return from_json(d)
