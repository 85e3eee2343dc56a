"""ONNX ``Loop`` and ``Scan`` as repeats (``ir/repeat.py``).

A model whose graph is one ``Loop`` or ``Scan`` (with ``Constant`` nodes and
initializers around it for the trip count) imports as a :class:`Repeat`: the body
subgraph through the ordinary ONNX importer, its loop-carried values as the carried
state, ``Scan``'s scanned inputs as stacked inputs and the scan outputs as stacked
outputs. Values the body reads from the outer graph are invariant inputs (graph inputs)
or constants (initializers). The repeat's inputs and outputs are named as the body
names them.

What is taken, and the reason for what is not:

- ``Loop``: a constant trip count ``M`` (an initializer or a ``Constant``); the
  condition empty or a constant true, and the body's condition output a constant true,
  its condition input passed through, or computed from the iteration counter and
  constants only (a ``while i < n`` loop: the count is where it first turns false,
  found by running that computation with onnx's reference evaluator). A body that
  reads the counter for anything else is refused: a repeat's steps do not see their
  index.
- ``Scan``: scanned along axis 0, forwards (``scan_input_axes``,
  ``scan_output_axes`` and ``directions`` at their defaults); the trip count is the
  scanned inputs' length.

Example::

    >>> r = load_onnx_repeat("cartpole_rollout.onnx", batch_axis=0)   # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import GraphError
from ..ir.repeat import MAX_TRIPS, Repeat
from .onnx.importer import load_onnx
from .onnx.reading import read_model

# how far a counter-driven condition is followed when the Loop gives no M
MAX_COUNTED = 1 << 20


def _refuse(label: str, why: str) -> GraphError:
    return GraphError(f"{label}: cannot import the loop as a repeat: {why}")


def _shape_of(vi: onnx.ValueInfoProto) -> list[int] | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return None if None in dims else dims


def _needed(body: onnx.GraphProto, outputs: list[str]) -> list[onnx.NodeProto]:
    """The body's nodes the given outputs depend on, in order."""
    want, keep = set(outputs), []
    for n in reversed(body.node):
        if want & set(n.output):
            keep.append(n)
            want |= {i for i in n.input if i}
    return keep[::-1]


def _reads(nodes) -> set[str]:
    made = {o for n in nodes for o in n.output}
    return {i for n in nodes for i in n.input if i and i not in made}


def load_onnx_repeat(model, batch_axis: int = 0) -> Repeat:
    """The model's one ``Loop`` or ``Scan`` as a verified :class:`Repeat`;
    ``batch_axis``: the axis of the carried values along which the environments (or
    sequences) are independent."""
    proto, label = read_model(model)
    g = proto.graph
    loops = [n for n in g.node if n.op_type in ("Loop", "Scan")]
    others = sorted({n.op_type for n in g.node if n.op_type not in ("Loop", "Scan",
                                                                    "Constant")})
    if len(loops) != 1 or others:
        raise _refuse(label, f"a repeat is a model whose graph is one Loop or Scan (and "
                             f"Constants); this one has {len(loops)} loops"
                      + (f" and {', '.join(others)[:120]} nodes" if others else "")
                      + "; export the loop on its own")
    node = loops[0]
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    shapes = {vi.name: _shape_of(vi) for vi in g.input}
    body = next(a.g for a in node.attribute if a.name == "body")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Loop":
        return _loop(label, proto, node, body, consts, shapes, batch_axis)
    return _scan(label, proto, node, body, attrs, consts, shapes, batch_axis)


def _outer_shape(label, name: str, shapes, consts, what: str) -> list[int]:
    if name in consts:
        raise _refuse(label, f"{what} {name!r} is a constant; a repeat's state and "
                             "stacked inputs are graph inputs")
    s = shapes.get(name)
    if s is None:
        raise _refuse(label, f"{what} {name!r} is not a graph input of static shape; pass "
                             "it as an input with a fixed shape")
    return s


def _loop(label, proto, node, body, consts, shapes, batch_axis) -> Repeat:
    m_name, c_name, inits = node.input[0], node.input[1] if len(node.input) > 1 else "", \
        list(node.input[2:])
    it_in, cond_in = body.input[0].name, body.input[1].name
    carried_in = [vi.name for vi in body.input[2:]]
    cond_out = body.output[0].name
    outs = [vi.name for vi in body.output[1:]]
    carried_out, scan_out = outs[:len(carried_in)], outs[len(carried_in):]
    if not carried_in:
        raise _refuse(label, "the Loop carries no values from step to step")
    if c_name:
        c = consts.get(c_name)
        if c is None or not bool(np.asarray(c).reshape(-1)[0]):
            raise _refuse(label, f"the Loop's condition {c_name!r} is "
                                 f"{'computed' if c is None else 'false'}: a repeat "
                                 "runs a count known when it is built")
    trips = None
    if m_name:
        if m_name not in consts:
            raise _refuse(label, f"the trip count {m_name!r} is computed at run time; "
                                 "export it as a constant")
        trips = int(np.asarray(consts[m_name]).reshape(-1)[0])
    trips = _counted(label, proto, body, it_in, cond_in, cond_out, trips, consts)
    if not 1 <= trips <= MAX_TRIPS:
        raise _refuse(label, f"the trip count is {trips}; a repeat runs 1 to {MAX_TRIPS}")
    nodes = _needed(body, outs)
    if it_in in _reads(nodes):
        raise _refuse(label, "the body reads the iteration counter; a repeat's steps do "
                             "not see their index (pass what it computes as a stacked "
                             "input)")
    if cond_in in _reads(nodes):
        raise _refuse(label, "the body reads the loop condition")
    in_shapes = {b: _outer_shape(label, o, shapes, consts, "initial value")
                 for b, o in zip(carried_in, inits)}
    body_graph = _import_body(label, proto, body, nodes, carried_in, in_shapes, outs, consts,
                              shapes)
    return Repeat(body.name or "loop", body_graph, trips,
                  tuple(zip(carried_in, carried_out)), (), batch_axis).verify()


def _counted(label, proto, body, it_in, cond_in, cond_out, trips, consts) -> int:
    """The trip count with the body's condition taken into account."""
    nodes = _needed(body, [cond_out])
    known = {t.name: numpy_helper.to_array(t) for t in body.initializer}
    known.update({k: v for k, v in consts.items() if k not in known})
    reads = _reads(nodes) - set(known)
    if cond_out == cond_in:
        pass                                # passed through: true while it starts true
    elif cond_out in known or reads <= {cond_in}:
        feeds = {cond_in: np.array(True)}
        value = known[cond_out] if cond_out in known else \
            _evaluate(proto, nodes, cond_out, feeds, known)
        if not bool(np.asarray(value).reshape(-1)[0]):
            return 1            # the first step runs; the condition stops the second
    elif reads <= {it_in, cond_in}:
        limit = trips if trips is not None else MAX_COUNTED
        for i in range(limit):
            feeds = {it_in: np.array(i, np.int64), cond_in: np.array(True)}
            if not bool(_evaluate(proto, nodes, cond_out, feeds, known)):
                return i + 1
        if trips is None:
            raise _refuse(label, f"the condition is still true after {MAX_COUNTED} steps")
    else:
        raise _refuse(label, f"the body's condition depends on the state "
                             f"({', '.join(sorted(reads - {it_in, cond_in}))[:120]}): the "
                             "count is known only at run time")
    if trips is None:
        raise _refuse(label, "the Loop has neither a trip count nor a condition over its "
                             "counter: it never stops")
    return trips


def _evaluate(proto, nodes, out: str, feeds: dict, known: dict):
    """``out`` of the condition's nodes, by onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator
    used = _reads(nodes)
    feeds = {k: v for k, v in feeds.items() if k in used}
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), [])
           for k, v in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in known.items() if k in used]
    g = helper.make_graph(list(nodes), "cond", ins,
                          [helper.make_tensor_value_info(out, onnx.TensorProto.BOOL, None)],
                          inits)
    m = helper.make_model(g, opset_imports=list(proto.opset_import))
    return np.asarray(ReferenceEvaluator(m).run(None, feeds)[0]).reshape(-1)[0]


def _import_body(label, proto, body, nodes, inputs, in_shapes, outs, consts, outer_shapes):
    """The body's nodes for ``outs`` as a workbench Graph: ``inputs`` (with shapes) and
    every outer graph input it reads as inputs, outer constants as initializers."""
    own = {vi.name for vi in body.input} | {t.name for t in body.initializer}
    outer = sorted(_reads(nodes) - own)
    inits = list(body.initializer)
    extra = []
    for name in outer:
        if name in consts:
            inits.append(numpy_helper.from_array(np.asarray(consts[name]), name))
        elif outer_shapes.get(name) is not None:
            extra.append(name)
            in_shapes[name] = outer_shapes[name]
        else:
            raise _refuse(label, f"the body reads {name!r} from the outer graph, which is "
                                 "neither a graph input of static shape nor a constant")
    elem = {vi.name: vi.type.tensor_type.elem_type for vi in
            (*body.input, *proto.graph.input)}
    ins = [helper.make_tensor_value_info(n, elem[n], in_shapes[n]) for n in (*inputs, *extra)]
    declared = {vi.name: vi for vi in body.output}
    out_vi = [declared[o] for o in outs]
    g = helper.make_graph(list(nodes), body.name or "body", ins, out_vi, inits)
    m = helper.make_model(g, opset_imports=list(proto.opset_import),
                          ir_version=proto.ir_version)
    try:
        return load_onnx(m)
    except GraphError as e:
        raise GraphError(f"{label}: the loop body: {e}") from None


def _scan(label, proto, node, body, attrs, consts, shapes, batch_axis) -> Repeat:
    k = attrs.get("num_scan_inputs")
    n_state = len(node.input) - k
    for key in ("scan_input_axes", "scan_output_axes", "scan_input_directions",
                "scan_output_directions"):
        if any(attrs.get(key, [])):
            raise _refuse(label, f"Scan's {key} is {list(attrs[key])}: a repeat scans "
                                 "axis 0 forwards; export the loop over the first axis")
    if n_state == 0:
        raise _refuse(label, "the Scan carries no state")
    state_in = [vi.name for vi in body.input[:n_state]]
    slices = [vi.name for vi in body.input[n_state:]]
    outs = [vi.name for vi in body.output]
    in_shapes = {b: _outer_shape(label, o, shapes, consts, "initial state")
                 for b, o in zip(state_in, node.input[:n_state])}
    lengths = set()
    for b, o in zip(slices, node.input[n_state:]):
        s = _outer_shape(label, o, shapes, consts, "scanned input")
        lengths.add(s[0])
        in_shapes[b] = s[1:]
    if len(lengths) != 1:
        raise _refuse(label, f"the scanned inputs have different lengths {sorted(lengths)}")
    nodes = _needed(body, outs)
    body_graph = _import_body(label, proto, body, nodes, state_in + slices, in_shapes, outs,
                              consts, shapes)
    return Repeat(body.name or "scan", body_graph, lengths.pop(),
                  tuple(zip(state_in, outs[:n_state])), tuple(slices), batch_axis).verify()
