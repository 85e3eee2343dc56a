"""Where a row kernel's later passes find what an earlier pass read or made: in
registers (each thread its own columns), in shared memory (AStitch's regional scheme,
within ROW_CACHE_BUDGET; an input row past the static limit where the device lets a
kernel opt in), split between the two (a hybrid row), or recomputed -- and which passes
over a row need each value (:func:`pass_needs`, which the cost model reads too).

    >>> RowDomain((4096, 1024), (1,), 4096, 1024).innermost
    True
"""
from __future__ import annotations

from dataclasses import dataclass

from ..device import Device
from ..errors import FusionRefused
from ..ops import get_op
from .geometry import REDUCE_SLOT_BYTES, register_budget
from .mapping import Mapping
from .row_tile import row_shifted, row_slots

# Shared memory a row kernel may spend keeping expensive values of its row on chip
# (a policy: the rest of the block's shared memory stays free for occupancy).
ROW_CACHE_BUDGET = 32 * 1024
# An op this costly (flops per element, see OpDef.flops) is worth not recomputing.
EXPENSIVE_FLOPS = 4


@dataclass(frozen=True)
class RowDomain:
    """The one domain a row group's reductions share: its shape, the reduced axes, and
    the rows (points of the kept axes) and columns (of the reduced ones) it holds."""
    domain: tuple[int, ...]
    axes: tuple[int, ...]
    rows: int
    cols: int
    gathered: bool = False      # the reductions read a window's taps (pooling)

    @property
    def innermost(self) -> bool:
        # a window's taps (a 3 x 3 max-pool's 9) lie on three input rows, under every
        # mapping; a thread per output position reads neighbouring positions together.
        # Measured (ResNet's max-pool, 2 cores): 0.076 ms with a SIMD loop per window
        # (block), 0.039 with SIMD over the output positions (thread)
        return (len(self.domain) - 1) in self.axes and not self.gathered


def hybrid_bytes(g, v: str, dom: RowDomain, threads: int, vector: int, steps: int) -> int:
    """Shared memory of a hybrid row copy: the tile's steps past the first ``steps``
    (those in registers), every thread's."""
    total = row_slots(dom.cols, threads, vector) // vector
    return (total - steps) * vector * threads * g.value(v).dtype.compute.itemsize


def kept_bytes(g, v: str, dom: RowDomain, rpb: int) -> int:
    """Shared memory keeping value v of a row (of each of a block's rows) takes."""
    return dom.cols * g.value(v).dtype.compute.itemsize * rpb


def row_storage(g, ns, reduces, io, per_row, dom: RowDomain, mapping: Mapping, rpb: int,
                 threads: int, vector: int, device: Device, regional: set, local: set
                 ) -> tuple[tuple[str, ...], tuple[str, ...], str, int]:
    """Where the row's later passes find what an earlier pass read or made: (values in
    registers, values in shared memory, the hybrid input, its register steps), each in
    topological order (group inputs first). Only mappings that keep a row in one block
    keep anything.

    One backward sweep over the group (consumers before producers), so each value's
    set of passes is complete when it is decided: a full-row value that two or more
    passes need -- a group input, or a costly result (an exp, erf, tanh... in what it
    is computed from) -- is kept: in registers while the register budget lasts (each
    thread keeps its own columns, so each element is read from global memory once),
    else, if costly, in shared memory within the row-cache budget (AStitch's regional
    scheme). A kept value is needed upstream only by the pass that first computes it,
    so what it is computed from is not kept too. Inputs come first: when one that two
    passes read finds no register left, the latest result kept in registers gives its
    place up (recomputing is cheaper than reading the row again) and the sweep runs
    again. The user's ``regional`` values go to shared memory; their ``local`` ones
    are recomputed. Refused when a user's ``regional`` cannot be kept."""
    on_chip = mapping.info.on_chip
    if not on_chip or dom.cols == 0:      # (an empty row has nothing to keep)
        if regional and dom.cols:
            raise FusionRefused(f"regional {sorted(regional)[0]}: the {mapping.value} "
                                "mapping does not keep a row in one block, so there is no "
                                "block-shared memory to keep it in; use mapping block or "
                                "warp")
        return (), (), "", 0
    made = {o: n for n in ns for o in n.outputs}
    element = {o for o in made if o not in per_row}
    # on a CPU a later pass reads an input row again from the cache the first pass
    # brought it into (a kept input renders as a read of its buffer: codegen/lower/
    # rows.py), so an input takes no register a costly result could keep
    full_inputs = [] if device.kind == "cpu" else [
        i for i in io.inputs if g.value(i).shape == dom.domain
        and not (i in g.constants and g.value(i).numel == 1)]
    costly = _costly(ns, element)
    slots, reg_budget = row_slots(dom.cols, threads, vector), register_budget(threads, device)
    no_registers: set[str] = set()
    input_budget, spill_budget = 0, input_cache_budget(device, threads)
    while True:
        registers, shared, shared_total, starved = _sweep(
            g, ns, reduces, io, per_row, dom, rpb, made, element, full_inputs, costly, slots,
            reg_budget, regional, local, no_registers, input_budget)
        results = [v for v in registers if v in made and v not in regional]
        if starved and results and not input_budget:
            no_registers.add(results[-1])
            continue
        if starved and not input_budget and spill_budget:
            # no register left for an input even with every result recomputed: keep
            # it in shared memory past the static limit (the results keep registers)
            input_budget, no_registers = spill_budget, set()
            continue
        break
    hybrid, steps = "", 0
    if starved and input_budget and mapping is Mapping.block:
        # a row neither holds alone (65536 float32: 64 slots a thread, 32 registers
        # left; 256 KB): the tile's first steps in the registers left, the rest in
        # shared memory -- the row still read from global memory once
        # (a shifted tile's two paths hold more registers: ptxas spilled 52-64 bytes a
        # thread at 65537 and 70001 columns with 8 steps in registers, 16 at 70001 with
        # 6, none with 5)
        total = slots // vector
        steps = min(total - 1, (reg_budget - slots * len(registers)) // vector
                    - (3 if row_shifted(dom.cols, vector) else 0))
        if steps > 0 and shared_total + hybrid_bytes(g, starved, dom, threads, vector,
                                                      steps) <= input_budget:
            hybrid = starved
            shared = shared + [starved]
        else:
            steps = 0
    shared_used = sum(kept_bytes(g, v, dom, rpb) for v in shared if v in made)
    if shared_used > ROW_CACHE_BUDGET:
        v = next(x for x in shared if x in regional)
        raise FusionRefused(f"regional {v}: shared memory {shared_used // 1024} KB > "
                            f"{ROW_CACHE_BUDGET // 1024} KB row-cache budget "
                            f"({dom.cols} columns x {rpb} rows x "
                            f"{g.value(v).dtype.compute.itemsize} B per cached value)")
    order = {o: i for i, n in enumerate(ns) for o in n.outputs}
    order.update({i: -len(full_inputs) + k for k, i in enumerate(full_inputs)})
    return (tuple(sorted(registers, key=order.__getitem__)),
            tuple(sorted(shared, key=order.__getitem__)), hybrid, steps)


def cache_bytes_bound(dom: RowDomain, mapping: Mapping, rpb: int, threads: int,
                      device: Device, candidates: int | None = None) -> int:
    """The most shared memory :func:`row_storage` can give a row kernel's cache (its
    ``cache_bytes``) when the user names no ``regional`` value, whatever its ops: a
    result is kept only while everything kept fits ROW_CACHE_BUDGET, an input (and a
    hybrid row's shared steps) only within :func:`input_cache_budget`, and removals
    only lower the total; nothing where the mapping keeps no row on chip.

    ``candidates``, on a CPU (which keeps no input): the bytes per element, summed, of
    the values the sweep keeps if it keeps every candidate it meets (each mask is then
    fixed: :class:`.row_fit.Passes`). While those all fit ROW_CACHE_BUDGET the sweep
    does keep every candidate -- in order, each finds room -- so the cache holds at most
    them. What lets the rules planner skip the sweep while the bound fits the device
    (:mod:`.row_fit`)."""
    if not mapping.info.on_chip or dom.cols == 0:
        return 0
    if candidates is not None and device.kind == "cpu":
        most = dom.cols * rpb * candidates
        if most <= ROW_CACHE_BUDGET:
            return most
    return max(ROW_CACHE_BUDGET, input_cache_budget(device, threads))


def _sweep(g, ns, reduces, io, per_row, dom, rpb, made, element, full_inputs, costly, slots,
           reg_budget, regional, local, no_registers, input_budget=0):
    """One backward sweep of :func:`row_storage`: (registers, shared, shared bytes,
    a full-row input two passes read that found no place on chip, or ""); an input
    finds one in shared memory within ``input_budget`` bytes (0: registers only)."""
    registers, shared = [], []
    shared_used = 0

    def keep(v: str, mask: int) -> bool:
        nonlocal shared_used
        if v in regional and v in element and g.value(v).shape == dom.domain:
            shared.append(v)
            shared_used += kept_bytes(g, v, dom, rpb)
            return True
        if (v in local or bin(mask).count("1") < 2 or g.value(v).shape != dom.domain
                or not (v not in made or costly.get(v))):
            return False
        if v not in no_registers and slots * (len(registers) + 1) <= reg_budget:
            registers.append(v)
            return True
        if shared_used + kept_bytes(g, v, dom, rpb) <= (
                ROW_CACHE_BUDGET if v in made else input_budget):
            shared.append(v)
            shared_used += kept_bytes(g, v, dom, rpb)
            return True
        return False

    need = _pass_roots(reduces, element | set(full_inputs), io.outputs)
    for n in reversed(ns):
        mask = 0
        for o in n.outputs:
            m = need.get(o, 0)
            mask |= (m & -m) if m and keep(o, m) else m   # kept: only its first pass
        if mask:
            for i in n.inputs:
                if i in need:
                    need[i] |= mask
    starved = ""
    for i in full_inputs:
        if not keep(i, need[i]) and bin(need[i]).count("1") >= 2 and i not in local:
            starved = starved or i
    # a kept result one cheap op away from kept (or per-row, or broadcast) values is
    # recomputed instead: LayerNorm's h - mean once h is kept
    for n in ns:
        for o in n.outputs:
            kept = registers if o in registers else shared if o in shared else None
            if (kept is not None and o not in regional
                    and get_op(n.op).flops < EXPENSIVE_FLOPS
                    and all(i in registers or i in shared or i in per_row
                            or g.value(i).shape != dom.domain for i in n.inputs)):
                kept.remove(o)
                if kept is shared:
                    shared_used -= kept_bytes(g, o, dom, rpb)
    return registers, shared, shared_used, starved


def input_cache_budget(device: Device, threads: int) -> int:
    """Shared memory a row kernel of ``threads`` per block may keep a group input's
    rows in when registers cannot hold them (a 50257-word vocabulary's logits): what
    the device lets a kernel opt in to past the static limit, less room for eight
    block-reduction slots, and no more than lets blocks of half the SM's threads be
    resident (a 1024-thread block may take 227 KB on an H100, a warp of 32 lanes 7 KB:
    a long row is a block's, not a warp's); 0 where there is no opt-in (a CPU plan:
    its kernels also render as CUDA within the portable static limit). The row is
    then read from global memory once, not once per pass (QuACK keeps it in shared
    memory too)."""
    if not device.is_gpu or device.shared_optin_limit <= device.shared_limit:
        return 0
    occupancy = 2 * threads * device.shared_per_unit // max(device.max_threads_per_unit, 1)
    return min(device.shared_optin_limit - 8 * REDUCE_SLOT_BYTES, occupancy)


def _costly(ns, element: set[str]) -> dict[str, bool]:
    """Whether each element value is costly to recompute: an op of OpDef.flops >=
    EXPENSIVE_FLOPS in what it is computed from (flows forward, linear)."""
    costly: dict[str, bool] = {}
    for n in ns:
        here = get_op(n.op).flops >= EXPENSIVE_FLOPS or any(
            costly.get(i, False) for i in n.inputs if i in element)
        for o in n.outputs:
            if o in element:
                costly[o] = here
    return costly


def _pass_roots(reduces, element: set[str], outputs) -> dict[str, int]:
    """The passes each value is read by directly: bit j for reduction j's input, the
    top bit for an output the final pass writes."""
    need: dict[str, int] = dict.fromkeys(element, 0)
    final = 1 << len(reduces)
    for j, r in enumerate(reduces):
        if r.inputs[0] in element:
            need[r.inputs[0]] |= 1 << j
    for o in outputs:
        if o in element:
            need[o] |= final
    return need


def pass_needs(ns, reduces, element: set[str], outputs, kept=frozenset()
               ) -> dict[str, int]:
    """Which passes over a row need each element value, as a bit mask: bit j for
    reduction j's pass, the top bit for the final pass that writes the outputs. Flows
    backward from each pass's roots, so it is linear in the group. A ``kept`` value
    (in registers or shared memory) needs what it is computed from only in the pass
    that first computes it."""
    need = _pass_roots(reduces, element, outputs)
    for n in reversed(ns):
        mask = 0
        for o in n.outputs:
            m = need.get(o, 0)
            mask |= (m & -m) if o in kept else m
        if mask:
            for i in n.inputs:
                if i in element:
                    need[i] |= mask
    return need
