"""Memory planning for a sequence's intermediates: values whose lifetimes do not overlap
share memory, so a whole model's activations cycle through a working set the caches
hold rather than one buffer each.

Why: a CPU program kept one array per intermediate between calls (``program.
KernelSequence``). SqueezeNet's 38 kernels touched ~20 MB of activations a call, more
than the caches kept, and each memory-bound kernel read what the one before it wrote
from DRAM: its first max pool ran 0.41 ms inside the whole program against 0.16 with
two kernels in the loop. onnxruntime plans its activations into shared buffers.

The plan is made once per sequence from the kernels' order: a value lives from the
kernel that writes it to the last kernel that reads it (both included: a kernel's
inputs and outputs never share memory), and takes the lowest offset of an arena
where it fits beside the values alive with it (first fit over the intervals in use;
each value 64-byte aligned). Offsets are bytes into one arena.
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64       # bytes: a cache line, and every vector width the kernels use
# set to 0: every intermediate an array of its own (to compare; benchmarks/models.py)
MEMORY_PLAN_ENV = "WB_MEMORY_PLAN"


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offset of each planned value in an arena of ``size`` bytes."""
    offsets: dict
    size: int


def lifetimes(order: list[tuple[tuple[str, ...], tuple[str, ...]]], planned: set
              ) -> dict[str, tuple[int, int]]:
    """(first, last) kernel index of each planned value: ``order`` lists each kernel's
    (inputs, outputs) by value name, in run order."""
    span: dict[str, tuple[int, int]] = {}
    for i, (ins, outs) in enumerate(order):
        for v in outs:
            if v in planned and v not in span:
                span[v] = (i, i)
        for v in ins:
            if v in span:
                span[v] = (span[v][0], i)
    return span


def plan_memory(order: list[tuple[tuple[str, ...], tuple[str, ...]]],
                sizes: dict[str, int]) -> MemoryPlan:
    """Offsets for the values of ``sizes`` (bytes each), shared where their lifetimes
    (``lifetimes`` over ``order``) do not overlap."""
    span = lifetimes(order, set(sizes))
    offsets: dict[str, int] = {}
    live: list[tuple[int, int, str]] = []      # (offset, end, value), by offset
    top = 0
    for v in sorted(span, key=lambda v: (span[v][0], -sizes[v], v)):
        first = span[v][0]
        live = [iv for iv in live if span[iv[2]][1] >= first]
        need = -(-max(sizes[v], 1) // ALIGN) * ALIGN
        at = 0
        for start, end, _ in sorted(live):
            if start - at >= need:
                break
            at = max(at, -(-end // ALIGN) * ALIGN)
        offsets[v] = at
        live.append((at, at + need, v))
        top = max(top, at + need)
    return MemoryPlan(offsets, top)
