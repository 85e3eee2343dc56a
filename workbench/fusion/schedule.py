"""Which schedule template a group of nodes gets, or why none fits.

A group is legal only if one template can run it as one kernel:

- ``opaque``: a single library op (matmul, conv2d).
- ``elementwise``: elementwise and layout ops; one flat loop per distinct output shape,
  every value computed at the loop index through index transforms (nothing between the
  ops is materialized).
- ``row_reduce``: one or more reductions over the same domain and axes, with their
  elementwise producers and consumers. One *row* is one point of the kept axes; the
  reductions run one after another over the row's *columns* (the reduced axes), and the
  per-row results are broadcast back to the row's elements. LayerNorm, softmax and
  RMSNorm are each one such kernel. ``mapping`` says how rows meet the hardware:
  ``block`` (one thread block per row, threads across the columns: coalesced when the
  reduced axes are innermost) or ``thread`` (one thread per row, a serial loop over
  columns: coalesced when the kept axes are innermost -- the column-reduction template).

Analysis lives in fusion (not codegen) because legality needs it; codegen lowers it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import FusionRefused
from ..ir import Graph
from ..ops import Kind, get_op

# Per-block shared memory a kernel may use without opting in (bytes, every CUDA GPU).
SHARED_MEMORY_LIMIT = 48 * 1024
# Words of shared memory one block-wide reduction uses (one per warp + the result).
_REDUCE_SMEM_WORDS = 33
# Shared memory a row kernel may spend keeping expensive values of its row on chip.
ROW_CACHE_BUDGET = 32 * 1024
# An op this costly (flops per element, see OpDef.flops) is worth not recomputing.
_EXPENSIVE_FLOPS = 4
INDEX_LIMIT = 2**31 - 1   # kernels index with 32-bit ints


@dataclass(frozen=True)
class GroupIO:
    """The values a group reads from outside and the values it must write out."""
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    internal: tuple[str, ...]


@dataclass(frozen=True)
class Schedule:
    kind: str                              # opaque | elementwise | row_reduce
    domain: tuple[int, ...] = ()           # row_reduce: the reductions' input shape
    reduce_axes: tuple[int, ...] = ()
    mapping: str = ""                      # row_reduce: block | thread
    per_row: frozenset = frozenset()       # row_reduce: values constant along the row
    # row_reduce: element values kept on chip for the row (regional stitching) instead
    # of being recomputed by each later pass over the row, in topological order
    row_cached: tuple[str, ...] = ()

    @property
    def rows(self) -> int:
        return int(np.prod([d for i, d in enumerate(self.domain) if i not in self.reduce_axes],
                           dtype=np.int64))

    @property
    def cols(self) -> int:
        return int(np.prod([self.domain[a] for a in self.reduce_axes], dtype=np.int64))

    def describe(self) -> str:
        if self.kind == "row_reduce":
            cached = f", {len(self.row_cached)} cached on chip" if self.row_cached else ""
            return (f"row_reduce rows={self.rows} cols={self.cols} "
                    f"{'block per row' if self.mapping == 'block' else 'thread per row'}"
                    f"{cached}")
        return self.kind


def group_io(g: Graph, nodes: tuple[str, ...]) -> GroupIO:
    members = set(nodes)
    made = [o for nid in nodes for o in g.node(nid).outputs]
    made_set = set(made)
    inputs = []
    for nid in nodes:
        for i in g.node(nid).inputs:
            if i not in made_set and i not in inputs:
                inputs.append(i)
    graph_outs = set(g.outputs)
    outputs = tuple(o for o in made if o in graph_outs
                    or any(c.id not in members for c in g.consumers[o]))
    internal = tuple(o for o in made if o not in outputs)
    return GroupIO(tuple(inputs), outputs, internal)


def _broadcasts_to(shape: tuple[int, ...], domain: tuple[int, ...]) -> bool:
    if len(shape) > len(domain):
        return False
    tail = domain[len(domain) - len(shape):]
    return all(s == d or s == 1 for s, d in zip(shape, tail))


def _is_per_row(shape, domain, axes) -> bool:
    """Broadcastable to the domain and constant along every reduced axis."""
    off = len(domain) - len(shape)
    return _broadcasts_to(shape, domain) and all(
        a < off or shape[a - off] == 1 for a in axes)


def analyze(g: Graph, nodes: tuple[str, ...]) -> Schedule:
    """The schedule for a group, or FusionRefused with a reason a person can read."""
    ns = [g.node(n) for n in nodes]
    kinds = {n.id: get_op(n.op).kind for n in ns}
    io = group_io(g, nodes)
    for name in io.inputs + io.outputs + io.internal:
        if g.value(name).numel > INDEX_LIMIT:
            raise FusionRefused(f"value {name} has {g.value(name).numel} elements, more than "
                                "32-bit kernel indexing allows")
    opaque = [n for n in ns if kinds[n.id] is Kind.opaque]
    if opaque:
        if len(ns) > 1:
            raise FusionRefused(f"{opaque[0].id} ({opaque[0].op}) is a library call and "
                                "cannot share a kernel with other ops")
        return Schedule("opaque")
    reduces = [n for n in ns if kinds[n.id] is Kind.reduce]
    if not reduces:
        return Schedule("elementwise")
    return _analyze_row_group(g, ns, kinds, reduces, io)


def _analyze_row_group(g, ns, kinds, reduces, io) -> Schedule:
    first = reduces[0]
    domain = g.value(first.inputs[0]).shape
    axes = tuple(first.attr("axes"))
    for r in reduces[1:]:
        d, a = g.value(r.inputs[0]).shape, tuple(r.attr("axes"))
        if d != domain or a != axes:
            raise FusionRefused(
                f"{r.id} reduces {list(d)} over axes {list(a)} but {first.id} reduces "
                f"{list(domain)} over {list(axes)}; one kernel needs one reduction domain")
    smem = len(reduces) * _REDUCE_SMEM_WORDS * 8
    if smem > SHARED_MEMORY_LIMIT:
        raise FusionRefused(f"shared memory {smem // 1024} KB > "
                            f"{SHARED_MEMORY_LIMIT // 1024} KB limit")
    rows = math.prod(d for i, d in enumerate(domain) if i not in axes)
    per_row = set()
    for n in ns:
        k = kinds[n.id]
        for o in n.outputs:
            shape = g.value(o).shape
            if k is Kind.reduce:
                per_row.add(o)
            elif k is Kind.layout and n.op in ("reshape", "squeeze", "unsqueeze"):
                src = g.value(n.inputs[0])
                if not (n.inputs[0] in per_row and src.numel == rows
                        and g.value(o).numel == rows):
                    raise FusionRefused(f"{n.id} ({n.op}) reshapes element data; only "
                                        "per-row results may be reshaped inside a "
                                        "reduction kernel")
                per_row.add(o)
            elif k is Kind.layout and n.op != "expand":
                raise FusionRefused(f"{n.id} ({n.op}) moves elements and cannot join a "
                                    "reduction kernel")
            elif not _broadcasts_to(shape, domain):
                raise FusionRefused(f"{n.id} ({n.op}) output {list(shape)} does not broadcast "
                                    f"to the reduction domain {list(domain)}")
            elif _is_per_row(shape, domain, axes):
                per_row.add(o)
        if k is not Kind.layout:
            for i in n.inputs:
                if i in per_row and not _broadcasts_to(g.value(i).shape, domain):
                    raise FusionRefused(f"{n.id} ({n.op}) reads the per-row result {i} "
                                        f"of shape {list(g.value(i).shape)}, which does not "
                                        f"broadcast to {list(domain)}; unsqueeze it first")
    for o in io.outputs:
        shape = g.value(o).shape
        if o not in per_row and shape != domain:
            raise FusionRefused(f"output {o} of shape {list(shape)} is neither one value per "
                                f"element nor one per row of {list(domain)}")
    # reduced axes innermost -> threads of a block walk a row contiguously
    mapping = "block" if (len(domain) - 1) in axes else "thread"
    cached = _row_cache(g, ns, reduces, io, per_row, domain, axes) if mapping == "block" \
        else ()
    return Schedule("row_reduce", tuple(domain), axes, mapping, frozenset(per_row), cached)


def _row_cache(g, ns, reduces, io, per_row, domain, axes) -> tuple[str, ...]:
    """Element values worth keeping on chip: needed by two or more passes over the row
    (the reductions' passes and the final write), full-domain, and costly to recompute
    (an exp, erf, tanh... in what they are computed from). AStitch's regional scheme.

    Linear in the group: costliness flows forward through the element values, and the
    set of passes needing each value (a bit mask) flows backward from the passes' roots.
    """
    made = {o: n for n in ns for o in n.outputs}
    element = {o for o in made if o not in per_row}
    costly: dict[str, bool] = {}
    for n in ns:
        here = get_op(n.op).flops >= _EXPENSIVE_FLOPS or any(
            costly.get(i, False) for i in n.inputs if i in element)
        for o in n.outputs:
            costly[o] = here
    need: dict[str, int] = dict.fromkeys(element, 0)
    final = 1 << len(reduces)
    for j, r in enumerate(reduces):
        if r.inputs[0] in element:
            need[r.inputs[0]] |= 1 << j
    for o in io.outputs:
        if o in element:
            need[o] |= final
    for n in reversed(ns):
        mask = 0
        for o in n.outputs:
            mask |= need.get(o, 0)
        if mask and any(o in element for o in n.outputs):
            for i in n.inputs:
                if i in element:
                    need[i] |= mask
    cols = math.prod(domain[a] for a in axes)
    chosen, budget = [], ROW_CACHE_BUDGET
    for n in ns:
        for v in n.outputs:
            if (v in element and bin(need[v]).count("1") >= 2 and costly[v]
                    and g.value(v).shape == tuple(domain) and cols * 4 <= budget):
                chosen.append(v)
                budget -= cols * 4
    return tuple(chosen)
