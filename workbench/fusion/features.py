"""What a group's kernel must do on a device -- the cost model's features
(:class:`KernelFeatures`), counted per kernel kind at the fusion level (a
:class:`~.plan.Group` and its schedule), so planners can price plans without
generating code.

For one group on one :class:`~workbench.device.Device`, :func:`features`
counts (FusionStitching's and AStitch's terms):

- **bytes**: the elements the group reads of each value from outside, once (all of
  it, but for what a gather, slice or window skips: ``footprint.py``), each value it
  writes out once (the compulsory traffic ``codegen`` also counts), plus the intermediates a
  stitched kernel passes through global memory (written once, read once);
- **launches** (one per kernel) and **grid barriers** (stitched phases, split rows);
- **arithmetic**: ``OpDef.flops`` per element, *including recomputation*: in a row
  kernel an element value not kept on chip is recomputed by every pass over the row
  that needs it; library calls (matmul, conv) count 2 flops per multiply-add, as
  does the product of a ``gemm`` kernel (``gemm_s``: at the library's rate on a CPU,
  where it is a BLAS call or the micro-kernel per tile; at the fraction of it the
  generated GEMM is assumed to reach on a GPU), whose epilogue is priced as generated
  arithmetic;
- **occupancy** (GPU): threads per block from the schedule's thread mapping,
  registers per thread (an estimate from the group's size) and shared memory
  (block-reduction scratch and the row cache) limit the blocks per SM; too few warps
  in flight cannot hide DRAM latency, and too few blocks leave SMs idle (a partial
  last wave). On a CPU one block runs on one core, so only the second limit applies.

Each kind is counted its own way: elementwise and row kernels by their geometry
(:func:`features`), library calls by their op definitions, GEMM kernels by their tiles
(:func:`_gemm_features`, on a GPU :func:`_block_gemm_features`), stitched kernels as
their phases (:func:`_stitched_features`). :mod:`.cost` prices them.

    >>> features(g, plan.groups[0], H100).bytes_moved          # doctest: +SKIP
    8388608
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..device import Device
from ..dtypes import DType
from ..ir import Graph
from ..ops import Kind, get_op
from . import cpu_passes
from .footprint import read_bytes
from .gemm.gpu_tiles import GPU_GEMM_EFFICIENCY, GPU_TENSOR_GEMM_EFFICIENCY
from .geometry import geometry, shared_bytes
from .mapping import Mapping, ScheduleKind
from .plan import Group
from .row_cache import pass_needs
from .row_tile import row_slots
from .schedule import Schedule, group_io
from .gemm_shape import PACK_PER_RUN
from .spills import right_pack_words, spills

# Fraction of the SM's threads that must be resident for a memory-bound kernel to keep
# enough loads in flight to saturate DRAM (Little's law; ~50% on recent NVIDIA GPUs).
OCCUPANCY_FOR_PEAK = 0.5


def memory_key(s: Schedule) -> str:
    """Which memory factor prices a schedule: one per kind, and per mapping of a row
    kernel (they reach different fractions of the bandwidth)."""
    if s.kind is ScheduleKind.row_reduce:
        # a two-phase column reduction reads memory as a thread-per-row one does (a
        # thread per output, neighbours' reads contiguous): its factor, so fitted
        # models keep their factors' vector
        m = Mapping.thread if s.mapping.info.partials_by_rows else s.mapping
        return f"{s.kind.value}/{m.value}"
    return s.kind.value


MEMORY_KEYS = ((ScheduleKind.elementwise.value,)
               + tuple(f"{ScheduleKind.row_reduce.value}/{m.value}"
                       for m in (Mapping.block, Mapping.warp, Mapping.split, Mapping.thread))
               + (ScheduleKind.stitched.value, ScheduleKind.opaque.value,
                  ScheduleKind.gemm.value))


@dataclass(frozen=True)
class KernelFeatures:
    """What one group's kernel must do on one device (device-dependent: occupancy)."""
    kind: str                   # a MEMORY_KEYS entry
    bytes_read: int
    bytes_written: int
    scratch_bytes: int          # stitched: intermediates through global memory (w + r)
    flops: float                # generated arithmetic, recomputation included
    library_flops: float        # opaque library calls
    launches: int
    barriers: int
    threads: int                # per block
    blocks: int                 # blocks the work needs
    shared_bytes: int           # per block
    registers: int              # per thread (estimate)
    occupancy: float            # resident threads / max threads per unit (1 on a CPU)
    efficiency: float           # occupancy x wave (or core) utilization, in (0, 1]
    memory_s: float             # bytes / (bandwidth x efficiency)
    compute_s: float            # flops / (peak x utilization)
    library_s: float            # library flops / peak
    infeasible: str = ""        # why the kernel cannot run on this device ("" if it can)
    gemm_s: float = 0.0         # a gemm kernel's product: its flops at its rate
    # a CPU kernel's passes over its data, (memory_s, compute_s) each, priced at their
    # roofline one after another (cpu_passes.py); empty: memory and compute added
    passes: tuple[tuple[float, float], ...] = ()

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written + self.scratch_bytes


def _inlined(g: Graph, v: str, sched: Schedule) -> bool:
    # codegen inlines scalar constants as literals (library calls take arrays)
    return (sched.kind is not ScheduleKind.opaque and v in g.constants
            and g.value(v).numel == 1)


def library_flops(g: Graph, nid: str) -> float:
    """A library op's arithmetic, by its op definition."""
    n = g.node(nid)
    return float(get_op(n.op).library_flops([g.value(i).shape for i in n.inputs],
                                            g.value(n.outputs[0]).shape, n.attr_map))


def _widening(g: Graph, io) -> tuple[int, int]:
    """What a library call's bfloat16 values cost besides their own bytes, and the copies
    that move them: no library here computes in bfloat16 (NumPy, CuPy), so each bfloat16
    input is widened into a float32 copy first (2 bytes read and 4 written an element,
    and the call reads 4 where 2 are counted) and each bfloat16 output is computed in
    float32 and rounded after (the call writes 4 where 2 are counted, then 4 read and
    2 written): 4x the value's bytes either way (``Backend.widen``, ``Backend.hold``)."""
    half = [v for v in (*io.inputs, *io.outputs) if g.value(v).dtype is DType.bfloat16]
    return sum(4 * g.value(v).nbytes for v in half), len(half)


def _library_rate(g: Graph, nid: str, device: Device, s: Schedule) -> float:
    """The flop/s a library op of a kernel of schedule ``s`` is priced at: a matmul's by
    its dtype, on tensor cores where ``s`` says it runs there (Device.matmul_rate),
    anything else's at the float32 peak."""
    n = g.node(nid)
    return (device.matmul_rate(g.value(n.inputs[0]).dtype, s.tensor_cores)
            if n.op == "matmul" else device.peak_flops)


def _pass_counts(g: Graph, nodes: Sequence[str], s: Schedule) -> dict[str, int]:
    """How many passes over the row compute each element value of a row kernel: each
    reduction's pass and the final write need what they read, and a value not kept on
    chip is recomputed by each (cached values are computed once)."""
    ns = [g.node(n) for n in nodes]
    reduces = [n for n in ns if get_op(n.op).kind is Kind.reduce]
    element = {o for n in ns for o in n.outputs if o not in s.per_row}
    cached = set(s.row_cached) | set(s.row_registers)
    need = pass_needs(ns, reduces, element, group_io(g, tuple(nodes)).outputs, cached)
    return {v: (1 if v in cached else max(1, bin(m).count("1"))) for v, m in need.items()}


def _computed(g: Graph, nodes: Sequence[str], s: Schedule) -> dict[str, float]:
    """How many times the kernel computes each generated op's value (layout ops and
    reductions aside): an elementwise kernel every value at each index of its loop
    (a broadcast value once per element that reads it), a row kernel a per-row value
    once per row and an element value once per pass over the row that needs it."""
    ops = {n: get_op(g.node(n).op) for n in nodes}
    live = [n for n in nodes if ops[n].kind not in (Kind.layout, Kind.reduce)]
    if s.kind is ScheduleKind.elementwise:
        return {n: float(s.elements) for n in live}
    passes = _pass_counts(g, nodes, s)
    domain = math.prod(s.domain)
    out = {}
    for n in live:
        o = g.node(n).outputs[0]
        out[n] = float(s.rows) if o in s.per_row else float(domain * passes.get(o, 1))
    return out


def _arith(g: Graph, nodes: Sequence[str], s: Schedule, device: Device
           ) -> tuple[float, dict[str, float]]:
    """Generated-kernel flops, at the index each value is computed at, and how many
    times each op's value is computed (:func:`_computed`)."""
    counts = _computed(g, nodes, s)
    if s.kind is ScheduleKind.elementwise:
        return float(sum(get_op(g.node(n).op).flops for n in counts) * s.elements), counts
    # combining a row's partials across its threads: shuffles and barriers over every
    # thread that shares the row (a warp, a block, a split row's blocks; none serially)
    # (on a CPU one thread owns a row: nothing to combine)
    sharing = s.mapping.info.combine_threads if device.is_gpu else 0
    if sharing is None:
        sharing = geometry(s, device).threads * max(1, s.splits)
    reductions = sum(1 for n in nodes if get_op(g.node(n).op).kind is Kind.reduce)
    total = float(s.rows * reductions * sharing)
    domain = math.prod(s.domain)
    for nid in nodes:
        op = get_op(g.node(nid).op)
        if op.kind is Kind.reduce:
            total += domain           # one combine per element
        elif nid in counts:
            total += op.flops * counts[nid]
    return total, counts


def arith_seconds(g: Graph, counts: dict[str, float], flops: float, device: Device,
                  util: float = 1.0) -> float:
    """Seconds of generated arithmetic with ``util`` of ``device``'s units busy: each op
    the device measured (``Device.op_rates``: a CPU's exp, log, erf, tanh, pow... as its
    compiler builds them) at its measured rate, ``counts[n]`` times; the rest of
    ``flops`` at the peak rate."""
    util = max(util, 1e-9)
    if not device.op_rates:
        return flops / (device.peak_flops * util)
    measured = 0.0
    for n, c in counts.items():
        op = g.node(n).op
        rate = device.op_rate(op)
        if rate:
            measured += c / rate
            flops -= get_op(op).flops * c
    return (measured + max(flops, 0.0) / device.peak_flops) / util


L2_SPEEDUP = 2.0   # L2 serves re-reads about this much faster than DRAM (H100, A100)


def _reread_bytes(g: Graph, nodes: Sequence[str], io, s: Schedule) -> int:
    """Bytes a row kernel reads again: each full-row input, once per further pass over
    the row that needs it, unless it is kept in registers."""
    if s.kind is not ScheduleKind.row_reduce or not s.reductions:
        return 0
    full, kept, need = cpu_passes.row_values(g, nodes, io, s)
    return sum((bin(need.get(i, 0)).count("1") - 1) * g.value(i).nbytes
               for i in full if i not in kept and need.get(i, 0))


def _scatter(g: Graph, s: Schedule, device: Device) -> float:
    """How much more a kernel's reads cost than their bytes: neighbouring threads (GPU)
    or consecutive iterations (CPU) must touch neighbouring elements. A row kernel whose
    row is spread over threads (warp, block, split) reads coalesced only when the
    reduced axes are innermost; a thread-per-row kernel only when they are not.
    Otherwise each element costs a whole transaction (sector or cache line)."""
    if s.kind is not ScheduleKind.row_reduce or s.mapping.info.innermost == s.innermost:
        return 1.0
    return max(1.0, device.transaction_bytes / 4)


def _registers(g: Graph, nodes: Sequence[str], io, s: Schedule, device: Device) -> int:
    """Registers per thread, estimated: a base, two per buffer pointer/index, two per
    value read by more than one op inside the group (held live), a few per reduction
    accumulator, and a row's register copies; capped at the device's most per
    thread."""
    members = set(nodes)
    shared = sum(1 for n in nodes for o in g.node(n).outputs
                 if sum(1 for c in g.consumers[o] if c.id in members) > 1)
    reduces = sum(1 for n in nodes if get_op(g.node(n).op).kind is Kind.reduce)
    regs = 24 + 2 * (len(io.inputs) + len(io.outputs)) + 2 * shared + 6 * reduces
    if s.row_registers:     # each thread's columns of the values kept in registers
        regs += len(s.row_registers) * row_slots(s.cols, s.threads, s.vector)
    regs += s.hybrid_steps * s.vector      # (a hybrid row copy's register part)
    return min(device.max_registers_per_thread or regs, regs)


def _efficiency(device: Device, threads: int, blocks: int, regs: int, smem: int,
                cooperative: bool) -> tuple[float, float, str]:
    """(occupancy, efficiency, why infeasible) of a launch on the device. Shared
    memory and threads per block are legality (analysis refuses what exceeds them);
    the register count is this model's estimate, so its limit is priced here."""
    if not device.is_gpu:
        return 1.0, min(1.0, blocks / max(1, device.units)), ""
    per_unit = [device.max_blocks_per_unit, device.max_threads_per_unit // threads]
    if device.registers_per_unit:
        per_unit.append(device.registers_per_unit // max(1, regs * threads))
    if smem and device.shared_per_unit:
        per_unit.append(device.shared_per_unit // smem)
    bpu = min(per_unit)
    if bpu < 1:
        return 0.0, 0.0, (f"a block of {threads} threads x {regs} registers does not fit "
                          "one SM")
    occupancy = bpu * threads / device.max_threads_per_unit
    capacity = bpu * device.units
    if cooperative:    # grid capped to one wave; grid-stride loops share the work
        wave = min(1.0, blocks / capacity)
    else:
        waves = -(-blocks // capacity)
        wave = blocks / (waves * capacity)
    return occupancy, min(1.0, occupancy / OCCUPANCY_FOR_PEAK) * wave, ""


def features(g: Graph, group: Group, device: Device,
             phase: "Callable[[Group], KernelFeatures] | None" = None) -> KernelFeatures:
    """Count what ``group``'s kernel does on ``device`` (see the module docstring).
    ``phase`` counts a stitched kernel's phases (by default this function; the cost
    model passes its cached one: the stitch search prices thousands of stitched
    kernels made of the same few hundred phases)."""
    s = group.schedule
    nodes = group.nodes
    io = group_io(g, nodes)
    # the elements the kernel loads of each input (footprint.py: a gather's rows, a
    # slice, a window's positions), the rule the kernel IR's bytes_read counts by too
    reads = {v: read_bytes(g, nodes, v, io.outputs, s.kind is ScheduleKind.opaque)
             for v in io.inputs if not _inlined(g, v, s)}
    read = sum(reads.values())
    written = sum(g.value(v).nbytes for v in io.outputs)
    if s.kind is ScheduleKind.opaque:
        per_node = {n: library_flops(g, n) for n in nodes}
        widened, copies = _widening(g, io)
        return KernelFeatures("opaque", read, written, 0, 0.0, sum(per_node.values()),
                              1 + copies, 0, 1, 1, 0, 0, 1.0, 1.0,
                              (read + written + widened) / device.dram_bandwidth,
                              0.0, sum(f / _library_rate(g, n, device, s)
                                       for n, f in per_node.items()))
    if s.kind is ScheduleKind.stitched:
        return _stitched_features(g, group, device, io, read, written,
                                  phase or (lambda gr: features(g, gr, device)))
    # what it writes and reads back besides (the kernel IR's workspace: spills.py)
    spilled = spills(g, nodes, s, io.outputs).traffic
    if s.kind is ScheduleKind.gemm:
        return _gemm_features(g, group, device, read, written, spilled)
    geo = geometry(s, device)
    # on a CPU the parallel work items are what the cores share
    threads, blocks = (geo.threads, geo.blocks) if device.is_gpu else (1, geo.cpu_items)
    regs = _registers(g, nodes, io, s, device)
    smem = geo.shared_bytes
    barriers = s.grid_barriers
    occ, eff, bad = _efficiency(device, threads, blocks, regs, smem, barriers > 0)
    flops, counts = _arith(g, nodes, s, device)
    util = max(eff, 1e-9) if device.is_gpu else min(1.0, blocks / device.units)
    # a GPU re-reads a row's input in each pass that needs it unless each thread keeps
    # its columns in registers (a row in one block); the re-reads mostly hit L2, so they
    # cost at L2's rate (about twice DRAM's), not DRAM's. A CPU's are its passes'
    # (cpu_passes.py): from a core's cache, or from DRAM where a pass outgrows it
    reread = _reread_bytes(g, nodes, io, s) if device.is_gpu else 0
    # (a split row's partials, the one spill such a kernel has, go through DRAM)
    bandwidth = device.dram_bandwidth * max(eff, 1e-9)
    mem = ((read + written) * _scatter(g, s, device) + spilled + reread / L2_SPEEDUP
           ) / bandwidth
    comp = arith_seconds(g, counts, flops, device, util)
    passes: tuple = ()
    if not device.is_gpu:      # a CPU overlaps bytes and arithmetic within a pass only
        passes = ((mem, comp),) if s.kind is not ScheduleKind.row_reduce else \
            cpu_passes.row_passes(
                g, nodes, io, s, {v: b * _scatter(g, s, device) for v, b in reads.items()},
                written * _scatter(g, s, device), spilled, bandwidth,
                lambda c, f: arith_seconds(g, c, f, device, util))
        mem, comp = sum(p[0] for p in passes), sum(p[1] for p in passes)
        flops = float(flops + cpu_passes.compensated_extra(g, nodes, s))
    return KernelFeatures(memory_key(s), read, written, spilled, flops, 0.0, 1, barriers,
                          threads, blocks, smem, regs, occ, eff, mem, comp, 0.0, bad,
                          passes=passes)


def _gemm_features(g, group, device, read, written, packs=0) -> KernelFeatures:
    """A GEMM kernel: the product's flops at the library's rate, the epilogue's at the
    generated code's, on the cores its tiles keep busy; its operands and epilogue
    inputs read and its outputs written once (the product itself is finished in cache,
    never read back), plus the operand panels each further tile packs again (A's rows
    once per column tile, B's columns once per row tile), which mostly hit the cache
    (priced at L2's rate), as do the ``packs`` an activation B (attention's K and V)
    packed by every run moves (written once, read by the tiles: spills.py)."""
    s = group.schedule
    t = s.gemm
    mm = g.producer[t.result]             # the group's (first) matmul, or convolution
    # A and B: a convolution's A is its filters, its B the input's patches (and it may
    # have a bias)
    ins = mm.inputs[:2] if t.im2col is None else mm.inputs[1::-1]
    a, b = (g.value(i).nbytes for i in ins)
    # a matmul alone is priced as the library call it stands for on every core (whose
    # own blocking packs panels too, unpriced), and so is one with an elementwise
    # epilogue: its tiles are the lone product's (gemm.tiles.cpu_tiling, gemm.conv), so the epilogue
    # adds no repack. Whole-row tiles (an epilogue reducing rows) cost the repacks
    # (none of B where it is a constant packed once, GemmShape.packed_b). Charging an
    # elementwise epilogue for them kept each 3x3 convolution of ResNet-50's third
    # stage (2.4 MB of filters, 4 column tiles) apart from its ReLU under stitch
    if t.block is not None:
        return _block_gemm_features(g, group, device, read, written, a, b)
    b_repacks = 0 if t.packed_b else b * (t.row_tiles - 1)
    if t.packed_b == PACK_PER_RUN and t.row_tiles == 1 and s.then is None and s.online is None:
        # one row tile reads B: packed by the run (a weight, gemm/right_pack.py) it is
        # the one pack each tile's sgemm makes too, unpriced above, so its time is not
        # charged (charged, the BERT layer's FFN-down GEMM took its LayerNorm as
        # whole-row tiles, 4.46 ms against 3.66 + 0.09 apart); its bytes still count
        own = 2 * 4 * right_pack_words(t)
    else:
        own = 0
    repacked = (0 if s.epilogue is None else a * (t.col_tiles - 1) + b_repacks) + \
        _checked(g, s, a, b)
    util = min(1.0, t.tiles / max(1, device.units))
    lib = t.flops
    if s.then is not None:         # attention: the probabilities times V, per tile
        lib += 2.0 * t.batch * t.m * s.then.k * s.then.n
    epilogue = {n: float(s.elements) for n in group.nodes
                if get_op(g.node(n).op).kind is not Kind.opaque}
    flops = float(sum(get_op(g.node(n).op).flops for n in epilogue) * s.elements)
    taken = _taken(s)
    lib, flops = lib * taken, flops * taken
    epilogue = {n: c * taken for n, c in epilogue.items()}
    mem = (read + written + (repacked + packs - own) / L2_SPEEDUP) / device.dram_bandwidth
    return KernelFeatures(ScheduleKind.gemm.value, read, written, packs, flops, lib, 1, 0,
                          1, t.tiles, 0, 0, 1.0, util, mem,
                          arith_seconds(g, epilogue, flops, device, util), 0.0,
                          gemm_s=lib / (_library_rate(g, mm.id, device, s) * util))


def _taken(s) -> float:
    """The share of a fused attention's blocks of keys its tiles take: under a constant
    causal mask (fusion/key_limit.py) those up to the diagonal (the run-time checks
    passing, as they do but for degenerate inputs), else all of them."""
    if s.key_limit is None:
        return 1.0
    return s.key_limit.taken(s.gemm.m, s.gemm.n, s.gemm.tile_m, s.online.block)


def _checked(g, s, a: int, b: int) -> float:
    """The bytes a causal fused attention's run-time checks read again
    (codegen/lower/attention.py's ``_key_blocks``): each tile of queries the keys it
    skips, V's and (an added mask) K's, and then its own rows of Q."""
    if s.key_limit is None:
        return 0.0
    skipped = (1.0 - _taken(s)) * s.gemm.row_tiles
    v = g.value(s.then.b.value).nbytes
    return skipped * (v + b) + a if s.key_limit.additive else skipped * v


def _block_gemm_features(g, group, device, read, written, a, b) -> KernelFeatures:
    """A GPU GEMM kernel (a thread block per tile): the product at the fraction of the
    peak the generated GEMM is assumed to reach (GPU_GEMM_EFFICIENCY of float32's, on
    tensor cores GPU_TENSOR_GEMM_EFFICIENCY of their rate on the tile's operands
    (Device.tensor_rate: a half type's twice TF32's): cuBLAS, the library call, is
    priced at the peak), on the SMs its tiles occupy; its operands
    and epilogue inputs read and its outputs written once, plus A's rows read again by
    each further column tile and B's columns by each further row tile (from L2,
    mostly, priced at its rate). The product itself stays in registers."""
    s = group.schedule
    t = s.gemm
    geo = geometry(s, device)
    util = min(1.0, t.tiles / max(1, device.units))
    b_again, lib, taken = b * (t.row_tiles - 1), t.flops, _taken(s)
    if s.then is not None:      # attention: V read again by each further tile of queries,
        # and Q's panels staged again for each further block of keys -- K's, V's and
        # Q's panels for the blocks the tiles take (_taken)
        lib += 2.0 * t.batch * t.m * s.then.k * s.then.n
        b_again = taken * (b_again + g.value(s.then.b.value).nbytes * (t.row_tiles - 1)
                           + a * (-(-t.n // t.block.n) - 1))
    again = a * (t.col_tiles - 1) + b_again + _checked(g, s, a, b)
    flops = float(sum(get_op(g.node(n).op).flops for n in group.nodes
                      if get_op(g.node(n).op).kind is not Kind.opaque) * s.elements)
    lib, flops = lib * taken, flops * taken
    mem = (read + written + again / L2_SPEEDUP) / device.dram_bandwidth
    return KernelFeatures(ScheduleKind.gemm.value, read, written, 0, flops, lib, 1, 0,
                          geo.threads, t.tiles, geo.shared_bytes, 0, 1.0,
                          util, mem, flops / (device.peak_flops * util),
                          0.0, gemm_s=lib / (util * (device.tensor_rate(t.block.operands)
                                                     * GPU_TENSOR_GEMM_EFFICIENCY
                                                     if t.block.tensor else
                                                     device.peak_flops * GPU_GEMM_EFFICIENCY)))


def _stitched_features(g, group, device, io, read, written, phase) -> KernelFeatures:
    """A stitched kernel: its phases priced as kernels without their own launches,
    each reading and writing its own inputs and outputs (values passing between phases
    go through global memory), on a grid capped to one wave."""
    s = group.schedule
    mem = comp = flops = 0.0
    smem = regs = threads = blocks = 0
    bad = ""
    occ_min, eff_min = 1.0, 1.0
    subs = []
    for p in s.phases:
        sub = phase(Group(group.id, p.nodes, p.schedule))
        subs.append(sub)
        mem += sub.memory_s
        comp += sub.compute_s
        flops += sub.flops
        regs = max(regs, sub.registers)
        threads, blocks = max(threads, sub.threads), max(blocks, sub.blocks)
        occ_min, eff_min = min(occ_min, sub.occupancy), min(eff_min, sub.efficiency)
        bad = bad or sub.infeasible
    smem = shared_bytes(s)    # reduction slots shared by the phases, row caches summed
    scratch = spills(g, group.nodes, s, io.outputs).traffic
    # on a CPU every phase is a parallel loop of its own (codegen/render/c.py), dependent
    # on the one before or not: each after the first is a barrier there
    barriers = s.grid_barriers if device.is_gpu else (
        len(s.phases) - 1 + sum(p.schedule.grid_barriers for p in s.phases))
    # (on a CPU the phases run one after another, each its own passes)
    passes = () if device.is_gpu or not all(x.passes for x in subs) else \
        tuple(p for x in subs for p in x.passes)
    return KernelFeatures("stitched", read, written, scratch, flops, 0.0, 1,
                          barriers, threads, blocks, smem, regs, occ_min, eff_min,
                          mem, comp, 0.0, bad, passes=passes)
