"""Linear layers over flattened rows done over the axes they came from: ``reshape``
(merging the leading axes into rows) -> 2-D ``matmul`` -> elementwise epilogue ->
``reshape`` (splitting the rows again), as ``torch.export`` decomposes
``nn.Linear`` and GPT-2's ``Conv1D`` (``view`` -> ``addmm`` -> ``view``), rewritten
as the matmul and its epilogue over the original leading axes.

Why: the GEMM template takes a following row reduction (a residual add and
LayerNorm) into its epilogue only when the epilogue reads the product where it is;
a row kernel cannot read element data through a reshape. BERT from ``from_torch``
planned to 23 kernels where its ONNX export -- MatMul over 3-D activations --
planned to 17: per layer, its two LayerNorms and a copy of the flattened
activations stayed kernels of their own.

:func:`fold_row_reshapes` finds, for each 2-D ``matmul`` whose left operand is a
reshape of ``X`` whose leading axes ``L`` merge into the rows (and whose remaining
axes into the depth), the elementwise ops after it that read only its rows, values
of the same rows, and operands that broadcast along the last axis (bias, scalars).
Where everything else that reads these values is a reshape, it rewrites them over
``L``: ``X`` reshaped to ``L + (K,)``, the matmul and each op computed with shape
``L + (N,)``, each old value a reshape of its new one; the reshape chains then fold
(``reshape_chains.py``), and what nothing reads is dropped. Elsewhere the graph is
left as it is: a reshape the rewrite would strand before a row reduction would
cost more than it saves. Row-major data makes each step exact.

    >>> g2 = fold_row_reshapes(g)        # doctest: +SKIP
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from ...ir.graph import Graph, Node, Value
from .reshape_chains import fresh, rebuild
from ...ops import Kind, get_op


@dataclass(frozen=True)
class _Rows:
    """One matmul's rewrite: the tensor its rows came from, the leading axes they
    merge, and the elementwise ops (node ids) rewritten with it."""
    source: str
    lead: tuple[int, ...]
    ops: frozenset[str]


def fold_row_reshapes(g: Graph) -> Graph:
    """``g`` with its linear layers over flattened rows done over the leading axes
    (see the module docstring); ``g`` itself where there is none."""
    values = {v.name: v for v in g.values}
    producer = {o: n for n in g.nodes for o in n.outputs}
    readers: dict[str, list[Node]] = {}
    for n in g.nodes:
        for i in dict.fromkeys(n.inputs):
            readers.setdefault(i, []).append(n)
    outputs = set(g.outputs)
    position = {n.id: k for k, n in enumerate(g.nodes)}

    def elementwise(n: Node) -> bool:
        return get_op(n.op).kind is Kind.elementwise

    plans = {}
    for n in g.nodes:
        rows = _rows_of(n, values, producer, readers, position, outputs, elementwise)
        if rows is not None:
            plans[n.id] = rows
    if not plans:
        return g

    new: dict[str, str] = {}         # old (rows, N) value -> its L + (N,) value
    nodes: list[Node] = []
    for_op = {op: r for r in plans.values() for op in r.ops}

    def emit(n: Node, inputs: tuple[str, ...], lead: tuple[int, ...]) -> None:
        old = values[n.outputs[0]]
        v = Value(fresh(f"{old.name}_rows", values), lead + old.shape[-1:], old.dtype)
        values[v.name] = v
        new[old.name] = v.name
        nodes.append(Node(n.id, n.op, inputs, (v.name,), n.attrs, n.name, n.origin))
        nodes.append(Node.make(f"{n.id}_r", "reshape", (v.name,), (old.name,),
                               {"shape": list(old.shape)}, n.name, n.origin))

    for n in g.nodes:
        if n.id in plans:
            r = plans[n.id]
            depth = values[n.inputs[0]].shape[1]
            a = r.source
            if values[a].shape != r.lead + (depth,):
                a = fresh(f"{n.inputs[0]}_rows", values)
                values[a] = Value(a, r.lead + (depth,), values[n.inputs[0]].dtype)
                nodes.append(Node.make(f"{n.id}_a", "reshape", (r.source,), (a,),
                                       {"shape": list(values[a].shape)}, n.name,
                                       n.origin))
            emit(n, (a, n.inputs[1]), r.lead)
        elif n.id in for_op:
            r = for_op[n.id]
            emit(n, tuple(_over_lead(i, r.lead, values, producer, new) or i
                          for i in n.inputs), r.lead)
        else:
            nodes.append(n)
    return rebuild(g, nodes, values)


def _rows_of(n: Node, values: dict, producer: dict, readers: dict, position: dict,
             outputs: set, elementwise) -> _Rows | None:
    """The rewrite of matmul ``n`` over its rows' leading axes, or None where ``n`` is
    not a 2-D matmul of flattened rows or what reads its epilogue is not all
    reshapes."""
    if n.op != "matmul" or len(n.inputs) != 2:
        return None
    a, b = (values[i] for i in n.inputs)
    p = producer.get(a.name)
    if len(a.shape) != 2 or len(b.shape) != 2 or p is None or p.op != "reshape":
        return None
    x = values[p.inputs[0]]
    lead = _leading(x.shape, a.shape)
    if lead is None or n.outputs[0] in outputs:
        return None
    rows = values[n.outputs[0]].shape
    region = {n.outputs[0]}
    ops: set[str] = set()
    # The readers in topological order, so that every input of an op is decided
    # (in the region or not) before the op is.
    pending = [(position[r.id], r.id, r) for r in readers.get(n.outputs[0], ())]
    heapq.heapify(pending)
    seen: set[str] = set()
    while pending:
        _, rid, r = heapq.heappop(pending)
        if rid in seen or r.op == "reshape":
            continue
        seen.add(rid)
        if not elementwise(r) or len(r.outputs) != 1 \
                or values[r.outputs[0]].shape != rows \
                or not all(i in region or _over_lead(i, lead, values, producer, {})
                           or len(values[i].shape) <= 1 for i in r.inputs):
            return None
        out = r.outputs[0]
        if out in outputs:
            return None
        ops.add(rid)
        region.add(out)
        for q in readers.get(out, ()):
            heapq.heappush(pending, (position[q.id], q.id, q))
    return _Rows(x.name, lead, frozenset(ops))


def _leading(xshape: tuple[int, ...], rows: tuple[int, ...]) -> tuple[int, ...] | None:
    """The leading axes of ``xshape`` that merge into ``rows[0]`` where the rest merge
    into ``rows[1]`` and there are at least two of them (else nothing to unflatten);
    else None."""
    for i in range(2, len(xshape)):
        if math.prod(xshape[:i]) == rows[0] and math.prod(xshape[i:]) == rows[1]:
            return tuple(xshape[:i])
    return None


def _over_lead(name: str, lead: tuple[int, ...], values: dict, producer: dict,
               new: dict) -> str | None:
    """``name`` (a rows x N value) as a value over ``lead + (N,)``: its rewrite, or the
    tensor it is a reshape of where that has that shape; else None."""
    if name in new:
        return new[name]
    p = producer.get(name)
    v = values[name]
    if p is not None and p.op == "reshape" and len(v.shape) == 2 \
            and values[p.inputs[0]].shape == lead + v.shape[-1:]:
        return p.inputs[0]
    return None
