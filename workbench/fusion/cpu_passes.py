"""A CPU kernel's passes over its data, each priced at its roofline: the cost model's
per-pass split of a CPU kernel's memory and arithmetic (``features.py``), which
``cost.py`` prices as the sum over passes of max(memory, compute).

Why passes: within one loop over its data a core overlaps its loads with its
arithmetic (an exp kernel alone runs at the slower of its bytes and its exps: 0.59 ms
fastest for 4M floats, where the sum of the two was priced at 1.87), but a row kernel
walks each row again for every reduction, one pass after another (``codegen/lower/
rows.py``: a softmax reads its row for the max, exponentiates it for the sum, scales
it), and a later pass cannot start before the one before it ends. So:

- an elementwise kernel is one pass: its bytes and its arithmetic;
- a row kernel makes one pass per reduction, then the final pass that writes the
  outputs. Each input is read in the first pass that needs it; a value is computed in
  every pass that needs it (once, where it is kept: ``Schedule.row_registers`` /
  ``row_cached``), a reduction's combines in its own pass, per-row values in the
  final pass, and the outputs (and a split row's partials) written there;
- a further pass re-reads its row's inputs from a core's own cache where what the
  pass walks fits there (``CPU_CORE_CACHE``): free beside its arithmetic (LayerNorm's
  three passes over rows of 4 KB run at the bytes of one); where it does not -- a
  column reduction's strip of ``CPU_ROW_TILE`` columns by every row, 1 MB an input
  at 4,096 rows -- every further pass reads it from DRAM again;
- a thread that sums a whole column alone sums it with compensation (Kahan: the
  renderer's ``col_bind == "serial"``), ``COMPENSATED_FLOPS`` operations an element
  where a plain sum takes one.

    >>> row_passes(g, group.nodes, io, sched, read, written, 0, bw, price)  # doctest: +SKIP
    ((0.000447, 2.1e-05), (0.0, 0.001013), (0.000447, 2.1e-05))  # softmax 4096 x 1024
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from ..ir import Graph
from ..ops import Kind, get_op
from .geometry import CPU_ROW_TILE
from .row_cache import pass_needs
from .schedule import Schedule

# the cache one core has to itself (L2: 1 MB on the EPYC the results were taken on,
# 0.5-2 MB on current x86 servers); a fixed figure, not the local machine's, so a
# plan for an assumed CPU is the same wherever it is made
CPU_CORE_CACHE = 1 << 20

# one element of a compensated sum: y = e - c, t = acc + y, c = (t - acc) - y, and
# the finiteness test that drops c (codegen/lower/rows.py), where a plain sum adds once
COMPENSATED_FLOPS = 5


def row_values(g: Graph, nodes: Sequence[str], io, s: Schedule):
    """A row kernel's full-row inputs, the values it keeps (row cache, registers), and
    the passes each value is needed in (``row_cache.pass_needs``: a bit per pass)."""
    ns = [g.node(n) for n in nodes]
    reduces = [n for n in ns if get_op(n.op).kind is Kind.reduce]
    element = {o for n in ns for o in n.outputs if o not in s.per_row}
    full = [i for i in io.inputs if g.value(i).shape == tuple(s.domain)]
    kept = set(s.row_cached) | set(s.row_registers)
    need = pass_needs(ns, reduces, element | set(full), io.outputs, kept)
    return full, kept, need


def _walks_columns(s: Schedule) -> bool:
    """One thread walks whole rows of the reduced axes alone, a tile of rows at once
    (thread per row, and the column partials of ``partials_by_rows``)."""
    return s.mapping is not None and s.mapping.info.col_bind == "serial"


def _bits(mask: int) -> list[int]:
    return [j for j in range(mask.bit_length()) if mask >> j & 1]


def row_passes(g: Graph, nodes: Sequence[str], io, s: Schedule, read: dict[str, float],
               written: float, spilled: float, bandwidth: float,
               price: Callable[[dict, float], float]) -> tuple[tuple[float, float], ...]:
    """(memory seconds, compute seconds) of each pass a CPU row kernel makes over its
    rows (module docstring), in order: the reductions' passes, then the final pass
    that writes the outputs. ``read`` holds the bytes of each input the kernel loads,
    ``bandwidth`` the bytes a second its memory traffic moves at, ``price(counts,
    flops)`` the seconds of arithmetic (``features.arith_seconds``)."""
    ns = [g.node(n) for n in nodes]
    reduces = [n for n in ns if get_op(n.op).kind is Kind.reduce]
    final = len(reduces)
    full, kept, need = row_values(g, nodes, io, s)
    domain = math.prod(s.domain)
    mem = [0.0] * (final + 1)
    counts: list[dict[str, float]] = [{} for _ in mem]
    flops = [0.0] * (final + 1)
    # each input's bytes in the first pass that reads it (a small one, a gamma, in the
    # first); read again from DRAM by each further pass where the walk outgrows a core
    walked = [v for v in full if v not in kept] + [v for v in kept if v in g.value_map]
    per_row = s.cols * sum(g.value(v).dtype.itemsize for v in walked)
    spills_cache = (CPU_ROW_TILE if _walks_columns(s) else 1) * per_row > CPU_CORE_CACHE
    for i, b in read.items():
        passes = _bits(need.get(i, 0)) or [0]
        mem[passes[0]] += b
        if spills_cache and i in full and i not in kept:
            for p in passes[1:]:
                mem[p] += g.value(i).nbytes
    mem[final] += written + spilled
    for j, r in enumerate(reduces):
        flops[j] += domain * (COMPENSATED_FLOPS if _compensated(g, r, s) else 1)
    for n in ns:
        op = get_op(n.op)
        if op.kind in (Kind.layout, Kind.reduce):
            continue
        o = n.outputs[0]
        if o in s.per_row:
            at, c = [final], float(s.rows)
        else:
            at = _bits(need.get(o, 0)) or [final]
            at, c = (at[:1] if o in kept else at), float(domain)
        for p in at:
            counts[p][n.id] = c
            flops[p] += op.flops * c
    return tuple((m / bandwidth, price(counts[p], flops[p])) for p, m in enumerate(mem))


def _compensated(g: Graph, n, s: Schedule) -> bool:
    """A reduction the renderer sums with compensation: a float sum one thread takes
    over a whole row alone (codegen/lower/rows.py)."""
    return (_walks_columns(s) and get_op(n.op).combiner.simd_op[0] == "+"
            and g.value(n.outputs[0]).dtype.kind == "f")


def compensated_extra(g: Graph, nodes: Sequence[str], s: Schedule) -> float:
    """The operations a CPU row kernel's compensated sums take beyond the one add an
    element its reductions are counted at elsewhere (``KernelFeatures.flops``)."""
    if s.mapping is None or not s.reductions:
        return 0.0
    sums = sum(1 for n in nodes if get_op(g.node(n).op).kind is Kind.reduce
               and _compensated(g, g.node(n), s))
    return float(sums * (COMPENSATED_FLOPS - 1) * math.prod(s.domain))
