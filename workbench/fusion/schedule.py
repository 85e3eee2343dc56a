"""Schedules: the template a group of nodes runs as one kernel, as a value.

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
  Adaptive thread mapping (AStitch) adds ``warp`` (one warp per row, several short rows
  packed per block) and ``split`` (few long rows: each row split across several blocks,
  the partial results combined after a grid barrier). ``choose_mapping`` is the rule;
  ``candidate_mappings`` lists what a cost model may pick from; every mapping is legal
  for every row group, so a mapping is a speed choice, never a correctness one.
- ``gemm``: one float32 ``matmul`` and the elementwise ops that consume its result
  (directly or through each other) at its output shape, other operands broadcast onto
  it (a bias, a residual, scalars): the output is cut into tiles, and each tile is
  multiplied (a single-threaded BLAS sgemm on the CPU) and finished by the epilogue
  while it is in cache, so the result is written once. The epilogue may also reduce
  the product's rows (bias + residual + LayerNorm, scale + mask + softmax): then the
  tiles are whole rows and ``epilogue`` holds the row_reduce schedule run over each
  tile's rows. After such an epilogue a second matmul may take the finished rows as
  its left operand (``then``: attention's softmax(Q Kᵀ) V): each tile's rows are
  multiplied again while in cache and never written out. :class:`~.gemm_shape.GemmShape`
  holds the tiling (:mod:`.gemm_shape` the GEMM's values); :mod:`.gemm` decides
  legality and tiles.
- ``stitched``: (AStitch) a group no single template fits, run as one kernel of
  *phases*, each phase one of the templates above (never opaque), in topological
  order. A value made in one phase and read in a later one passes through global
  memory (the ``global`` stitch scheme) behind a grid-wide barrier; a phase that reads
  nothing from the phases since the last barrier needs none (``independent``). Every
  loop strides over the grid, so the grid can be capped to what is co-resident (one
  wave) and the barrier cannot deadlock.

This module holds the values; :mod:`.analysis` decides which schedule a group gets
(or why none fits), and :mod:`.geometry` how a schedule is launched on a device.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph
from .gemm_shape import GemmShape, OnlineSoftmax, SecondGemm
from .key_limit import KeyLimit
from .mapping import Mapping, ScheduleKind
from .row_tile import row_slots


@dataclass(frozen=True)
class GroupIO:
    """The values a group reads from outside and the values it must write out."""
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    internal: tuple[str, ...]


@dataclass(frozen=True)
class Schedule:
    """How one kernel runs a group (see the module docstring for the templates).

    Besides the template, a schedule holds the decisions its launch follows from:
    a row kernel's mapping, rows per block and split count (made by analysis for a
    device; see :mod:`.geometry` for the launch they give).

    Example: ``Schedule(ScheduleKind.row_reduce, (4096, 1024), (1,), Mapping.warp,
    rows_per_block=8)`` is one warp per row, eight rows per block.
    """
    kind: ScheduleKind
    domain: tuple[int, ...] = ()           # row_reduce: the reductions' input shape
    reduce_axes: tuple[int, ...] = ()
    mapping: Mapping | None = None         # row_reduce
    per_row: frozenset = frozenset()       # row_reduce: values constant along the row
    # row_reduce: element values kept on chip for the row (regional stitching) instead
    # of being recomputed by each later pass over the row, in topological order
    row_cached: tuple[str, ...] = ()
    rows_per_block: int = 1                # warp: rows packed per block; thread: 256
    splits: int = 1                        # split: blocks sharing one row
    reductions: int = 0                    # row_reduce: reductions run over each row
    phases: tuple["Phase", ...] = ()       # stitched: the phases, in order
    elements: int = 1                      # elementwise: elements of the widest loop
    cache_bytes: int = 0                   # row_reduce: shared memory of the row cache
    # row_reduce, mappings that keep a row on chip (block, warp): the threads sharing a
    # row (a block's, or a warp's 32), the elements each moves per access, and the
    # values (group inputs and costly results) each thread keeps in registers for its
    # columns, so each element is read from global memory once
    threads: int = 0
    vector: int = 1
    row_registers: tuple[str, ...] = ()
    # row_reduce, block mapping: a group input (one of row_cached) whose row neither the
    # registers nor the shared memory holds alone (65536 float32): each thread keeps its
    # tile's first ``hybrid_steps`` steps in registers, the rest in shared memory
    hybrid: str = ""
    hybrid_steps: int = 0
    # row_reduce over a window's taps (pooling): the reduced elements are gathered
    # from the input, spread over its rows, contiguous under no mapping
    gathered: bool = False
    gemm: GemmShape | None = None          # gemm: the product and its tiling
    # gemm whose epilogue reduces rows (a LayerNorm, a softmax): the row_reduce
    # schedule of the epilogue's nodes, run over each tile's rows (tiles are whole rows)
    epilogue: "Schedule | None" = None
    # gemm with a row epilogue: a second matmul of each tile's finished rows (attention)
    then: SecondGemm | None = None
    # gemm or library matmul: its products run on tensor cores (Device.on_tensor_cores
    # at the plan's matmul precision: float32 ones where the plan allows TF32, bfloat16
    # and float16 ones always), so its kernel is a TF32 one and is priced at their rate
    tensor_cores: bool = False

    @property
    def online(self) -> OnlineSoftmax | None:
        """fused attention: its online softmax (None: whole rows of scores, or no
        attention)."""
        return self.then.online if self.then is not None else None

    @property
    def key_limit(self) -> KeyLimit | None:
        """fused attention taking the softmax online: the causal limit past which it
        skips blocks of keys (None: it takes every block)."""
        return self.online.limit if self.online is not None else None

    @property
    def through_global(self) -> tuple[str, ...]:
        """stitched: values made in one phase and read by a later one (global scheme)."""
        out = []
        for p in self.phases:
            for v in p.reads_from_phases:
                if v not in out:
                    out.append(v)
        return tuple(out)

    @property
    def grid_barriers(self) -> int:
        """Grid-wide barriers the kernel needs (stitched phases; split row reductions)."""
        if self.kind is ScheduleKind.stitched:
            return sum(p.barrier for p in self.phases) + sum(
                p.schedule.grid_barriers for p in self.phases)
        if self.mapping is not None and self.mapping.info.grid_barrier_per_reduction:
            return self.reductions    # each reduction's partials meet after a barrier
        if self.mapping is not None and self.mapping.info.partials_by_rows:
            return 1                  # every reduction's partials meet after one barrier
        return 0

    @property
    def row_cache_bytes(self) -> int:
        """Shared memory of the row caches (a stitched kernel's phases each have theirs)."""
        if self.kind is ScheduleKind.stitched:
            return sum(p.schedule.row_cache_bytes for p in self.phases)
        return self.cache_bytes

    @property
    def tile_steps(self) -> int:
        """row_reduce kept on chip: the steps (per_thread) of a thread's tile of the row."""
        return row_slots(self.cols, self.threads, self.vector) // self.vector

    @property
    def cooperative(self) -> bool:
        """Whether the GPU must launch it cooperatively (all blocks co-resident)."""
        return self.grid_barriers > 0

    @property
    def rows(self) -> int:
        return int(np.prod([d for i, d in enumerate(self.domain) if i not in self.reduce_axes],
                           dtype=np.int64))

    @property
    def cols(self) -> int:
        return int(np.prod([self.domain[a] for a in self.reduce_axes], dtype=np.int64))

    @property
    def innermost(self) -> bool:
        """row_reduce: the reduced axes include the innermost (rows are contiguous) and
        are no window's taps (``gathered``: neighbouring output positions, the rows,
        are what lie near each other in memory)."""
        return (len(self.domain) - 1) in self.reduce_axes and not self.gathered

    def describe(self) -> str:
        if self.kind is ScheduleKind.row_reduce:
            cached = f", {len(self.row_cached)} cached on chip" if self.row_cached else ""
            if self.row_registers:
                cached += f", {len(self.row_registers)} in registers"
            if self.hybrid:
                cached += (f" ({self.hybrid_steps} of {self.tile_steps} steps of "
                           f"{self.hybrid} in registers)")
            how = self.mapping.info.describe(self.rows_per_block, self.splits)
            return f"row_reduce rows={self.rows} cols={self.cols} {how}{cached}"
        if self.kind is ScheduleKind.stitched:
            return (f"stitched {len(self.phases)} phases, {self.grid_barriers} grid "
                    f"barrier{'s' if self.grid_barriers != 1 else ''}: "
                    + " | ".join(p.schedule.describe() for p in self.phases))
        if self.kind is ScheduleKind.gemm:
            t = self.gemm
            batch = f"{t.batch} x " if t.batch > 1 else ""
            epi = f" + {t.epilogue_ops}-op epilogue" if t.epilogue_ops else ""
            if self.epilogue is not None:
                epi += f" reducing rows ({self.epilogue.reductions} reductions)"
            if self.then is not None:
                v = ", V packed" if self.then.packed else ""
                on = self.then.online
                how = (f", online softmax over blocks of {on.block} keys" if on else "")
                if on is not None and on.limit is not None:
                    how += f", {on.limit.describe()}"
                epi += f", then @ [{self.then.k}x{self.then.n}]{v} (fused attention{how})"
            return (f"{t.title} {batch}{t.m}x{t.n}x{t.k}{epi}, "
                    f"{t.tiles} tiles of {t.tile_m}x{t.tile_n}{t.product_text}")
        return self.kind.value


@dataclass(frozen=True)
class Phase:
    """One phase of a stitched kernel: nodes run by one template, after a grid barrier
    when it reads a value some phase since the previous barrier made."""
    nodes: tuple[str, ...]
    schedule: Schedule
    reads_from_phases: tuple[str, ...] = ()   # values made by earlier phases (global)
    after: tuple[int, ...] = ()               # indices of the phases it reads from
    barrier: bool = False                     # a grid barrier runs before it


def group_io(g: Graph, nodes: tuple[str, ...]) -> GroupIO:
    members = set(nodes)
    made = [o for nid in nodes for o in g.node(nid).outputs]
    made_set = set(made)
    inputs = {}       # (a dict: in order, and a long group's membership test stays O(1))
    for nid in nodes:
        for i in g.node(nid).inputs:
            if i not in made_set:
                inputs.setdefault(i)
    graph_outs = set(g.outputs)
    outputs = tuple(o for o in made if o in graph_outs
                    or any(c.id not in members for c in g.consumers[o]))
    internal = tuple(o for o in made if o not in outputs)
    return GroupIO(tuple(inputs), outputs, internal)
