"""Launch geometry: threads, blocks, rows per block, splits, vector width and shared
memory of a kernel, as a function of its schedule and the device -- in one place.

Analysis (the mapping's rows per block and split count), lowering (the kernel IR's
``Launch``), the renderers (the block-reduction scratch, the CPU's row tiles), the
cost model (occupancy and waves) and the GPU backend (how many blocks of a cooperative
kernel fit at once) all read it here, so they cannot drift apart.

On a CPU one thread runs one block of the GPU's schedule at a time (the C renderer's
mapping), so the same geometry holds; ``cpu_items`` is how many parallel work items
the C rendering has (a flat loop's elements, a thread-per-row kernel's row tiles).

Example::

    >>> from workbench.device import H100
    >>> co_resident_grid(256, 0, H100)
    528
"""
from __future__ import annotations

from dataclasses import dataclass

from ..device import CUDA_MAX_BLOCK_THREADS, CUDA_REGISTERS_PER_UNIT, CUDA_WARP, Device
from .mapping import Mapping, ScheduleKind
from .schedule import Schedule

FLAT_BLOCK = 256              # threads per block of flat loops and of thread per row
MAX_GRID = 65535              # blocks of a flat loop (every loop strides over the grid)
ROW_GRID_MAX = 1 << 20        # blocks of a row kernel
MAX_ROW_THREADS = 512         # threads of a block that walks one row (or chunk)
WARP_ROWS_PER_BLOCK = 8       # short rows packed per block under the warp mapping
SPLIT_CHUNK_COLS = 1024       # a split row's chunks have at least this many columns
# Block-wide reduction scratch: one double per warp (a block has at most 1024 / 32 =
# 32) plus the broadcast result, per slot
REDUCE_SLOT_WORDS = CUDA_MAX_BLOCK_THREADS // CUDA_WARP + 1
REDUCE_SLOT_BYTES = REDUCE_SLOT_WORDS * 8
# Registers per thread assumed before a kernel is compiled (the GPU backend re-checks
# co-residency with the compiled kernel's real count)
EST_REGISTERS = 64
TWO_PHASE_MIN_CHUNK = 64      # a two-phase column reduction's blocks: at least this many rows
CPU_ROW_TILE = 64             # rows a CPU thread walks together in a thread-per-row kernel
# A row kept in registers: about this many elements per thread of each cached value --
# two float4 loads in flight per thread, and registers left for three 512-thread blocks
# per SM. (On an H100, softmax 32768 x 4096 at 16 per thread reached 84% of the copy
# bandwidth; tuning found a faster launch at 95%.)
ROW_ELEMS_PER_THREAD = 8
# registers per thread a kernel keeps for its own work besides the cached row
REG_OVERHEAD = 32
REG_CACHE_MAX = 64            # at most this many cached elements per thread


def block_threads(cols: int) -> int:
    """Threads of a block that walks one row (or chunk) of ``cols`` columns: a warp,
    doubled while each thread would still get more than 4 columns, at most 512."""
    threads = CUDA_WARP
    while threads < MAX_ROW_THREADS and threads * 4 < cols:
        threads *= 2
    return threads


def row_threads(cols: int) -> int:
    """Threads of a block that keeps one row in registers (the block mapping): about
    ROW_ELEMS_PER_THREAD elements each, a power of two from a warp to 1024."""
    threads = CUDA_WARP
    while threads < CUDA_MAX_BLOCK_THREADS and threads * ROW_ELEMS_PER_THREAD < cols:
        threads *= 2
    return threads


ROW_SHIFT_MIN = 64           # columns of a row worth peeled 16-byte accesses


def row_vector(cols: int, itemsize: int = 4) -> int:
    """Elements one thread moves per access in a row kept in registers: 4 (a 16-byte
    float4 for float32), 8 when every row-long buffer is 2 bytes wide or less
    (float16, bfloat16: 16 bytes again). A row length the vector does not divide
    (GPT-2's 50257-word vocabulary) starts each row at a different alignment: its
    tile is shifted so the accesses inside the row stay aligned (``row_span``), when
    the row is long enough (ROW_SHIFT_MIN) to pay for the peeled ends; shorter ones
    move element by element. A bfloat16 row of 4k + 4 keeps its aligned 8-byte
    accesses."""
    if itemsize <= 2 and cols % 8 == 0:
        return 8
    if cols % 4 == 0:
        return 4
    if cols < ROW_SHIFT_MIN:
        return 1
    return 8 if itemsize <= 2 else 4


def register_budget(threads: int, device: Device) -> int:
    """Cached row elements a thread may hold in registers: what the SM's register file
    leaves a block of this size besides its own work (a CPU device is held to a GPU's
    64K, since every kernel also renders as CUDA)."""
    regs = device.registers_per_unit or CUDA_REGISTERS_PER_UNIT
    return max(0, min(REG_CACHE_MAX, regs // threads - REG_OVERHEAD))


FLAT_VECTOR_MIN = 1024       # elements of a flat loop worth 16-byte accesses


def flat_vector(n: int, itemsize: int = 4) -> int:
    """Elements per thread per step of a flat loop over ``n`` elements, once it is long
    (FLAT_VECTOR_MIN): a 16-byte access of each buffer the loop moves at its own index
    -- 4 of a 4-byte type, 8 where every such buffer's elements are 2 bytes or less
    (float16, bfloat16, bool, 8-bit integers); ``itemsize`` is the widest of them. The
    last ``n % vector`` elements go one by one (the loop's tail)."""
    if n < FLAT_VECTOR_MIN:
        return 1
    return 8 if itemsize <= 2 else 4


def rows_per_block(mapping: Mapping, rows: int, units: int) -> int:
    """Rows one block handles: warp packs up to 8 short rows (fewer when rows are too
    few to give every unit a block), thread takes 256, block and split one."""
    if mapping is Mapping.warp:
        r = WARP_ROWS_PER_BLOCK
        while r > 1 and rows < r * units:
            r //= 2
        return r
    return FLAT_BLOCK if mapping in (Mapping.thread, Mapping.two_phase) else 1


def two_phase_splits(rows: int, cols: int, units: int) -> int:
    """Blocks of a two-phase column reduction's reduced axis: enough for every unit to
    take two blocks of threads, each block at least TWO_PHASE_MIN_CHUNK long, and a
    divisor of the axis (every block the same length: a CPU thread's tile of outputs
    then walks one run of rows); 1 where no divisor from 2 fits (no two phases)."""
    want = max(2, -(-2 * units * FLAT_BLOCK // max(rows, 1)))
    most = min(want, cols // TWO_PHASE_MIN_CHUNK)
    return next((s for s in range(most, 1, -1) if cols % s == 0), 1)


def split_count(rows: int, cols: int, units: int) -> int:
    """Blocks per row for the split mapping: enough to give every unit two blocks, each
    chunk at least SPLIT_CHUNK_COLS columns, and never fewer than two."""
    want = -(-2 * units // max(rows, 1))
    most = max(2, cols // SPLIT_CHUNK_COLS)
    return max(2, min(want, most))


def co_resident_grid(threads: int, shared_bytes: int, device: Device,
                     registers: int = EST_REGISTERS) -> int:
    """Blocks that fit on the GPU at once (one wave): what a kernel with a grid barrier
    may launch. CUDA's occupancy rules: blocks, threads and registers (allocated per
    warp in the device's unit) per SM, and shared memory per SM with the driver's
    reservation per block."""
    warps = -(-threads // device.warp)
    unit = device.register_alloc_unit
    per_warp = -(-registers * device.warp // unit) * unit
    per_sm = min(device.max_blocks_per_unit, device.max_threads_per_unit // threads,
                 device.registers_per_unit // (per_warp * warps))
    if shared_bytes:
        per_sm = min(per_sm, device.shared_per_unit
                     // (shared_bytes + device.reserved_shared_per_block))
    return max(1, per_sm) * device.units


def reduce_slots(s: Schedule) -> int:
    """Shared block-reduction scratch arrays: per the mapping's table row (one per
    reduction, one reused, none); a stitched kernel's phases share theirs."""
    if s.kind is ScheduleKind.stitched:
        return max((reduce_slots(p.schedule) for p in s.phases), default=0)
    if s.kind is not ScheduleKind.row_reduce or not s.mapping.info.shared_slot:
        return 0
    return s.reductions if s.mapping.info.slots_per_reduction else 1


def shared_bytes(s: Schedule) -> int:
    """Static shared memory per block: block-reduction slots plus the row caches."""
    return reduce_slots(s) * REDUCE_SLOT_BYTES + s.row_cache_bytes


@dataclass(frozen=True)
class Geometry:
    """How a kernel meets the hardware. ``blocks`` is what the work needs, ``grid``
    what is launched (capped; a cooperative kernel's to one wave of the device)."""
    threads: int              # per block
    blocks: int
    grid: int
    rows_per_block: int = 0   # warp: rows per block; thread: 256; block/split: 1
    splits: int = 1           # split: blocks sharing one row
    reduce_slots: int = 0     # shared block-reduction scratch arrays
    shared_bytes: int = 0     # static shared memory per block
    cooperative: bool = False
    cpu_items: int = 1        # parallel work items of the C rendering


def geometry(s: Schedule, device: Device) -> Geometry:
    """The geometry of a schedule on a device (library calls: one item)."""
    if s.kind is ScheduleKind.elementwise:
        n, threads = s.elements, s.threads or FLAT_BLOCK
        blocks = max(1, -(-n // (threads * s.vector)))
        return Geometry(threads, blocks, min(MAX_GRID, blocks), cpu_items=max(1, n))
    if s.kind is ScheduleKind.row_reduce:
        return _row_geometry(s, device)
    if s.kind is ScheduleKind.stitched:
        phases = [geometry(p.schedule, device) for p in s.phases]
        threads = max(p.threads for p in phases)
        grid = max(p.grid for p in phases)
        shared = shared_bytes(s)
        if s.cooperative and device.is_gpu:
            grid = min(grid, co_resident_grid(threads, shared, device))
        return Geometry(threads, max(p.blocks for p in phases), max(1, grid), 0, 1,
                        reduce_slots(s), shared, s.cooperative,
                        max(p.cpu_items for p in phases))
    if s.kind is ScheduleKind.gemm:     # one work item per output tile
        t = s.gemm
        if t.block is not None:         # (a GPU: a thread block per tile)
            shared = t.block.shared_bytes
            if s.then is not None:      # (attention: the second product's panels and the
                #                          probabilities between the two)
                shared += t.block.over(s.then.n).shared_bytes + t.block.rows_bytes
            return Geometry(t.block.threads, t.tiles, min(MAX_GRID, t.tiles),
                            shared_bytes=shared, cpu_items=t.tiles)
        return Geometry(1, t.tiles, t.tiles, cpu_items=t.tiles)
    return Geometry(1, 1, 1)


def _row_geometry(s: Schedule, device: Device) -> Geometry:
    m, rows, cols = s.mapping, s.rows, s.cols
    slots, shared = reduce_slots(s), shared_bytes(s)
    if m is Mapping.thread:
        blocks = max(1, -(-rows // FLAT_BLOCK))
        return Geometry(FLAT_BLOCK, blocks, min(MAX_GRID, blocks), FLAT_BLOCK, 1, slots,
                        shared, False, max(1, -(-rows // CPU_ROW_TILE)))
    if m is Mapping.two_phase:
        # phase one: S blocks of rows for every block of outputs; phase two reads back
        # the partials after a grid barrier
        S = s.splits
        blocks = max(1, -(-rows // FLAT_BLOCK)) * S
        grid = min(blocks, co_resident_grid(FLAT_BLOCK, shared, device)) if device.is_gpu \
            else blocks
        return Geometry(FLAT_BLOCK, blocks, grid, FLAT_BLOCK, S, slots, shared, True,
                        max(1, -(-rows * S // CPU_ROW_TILE)))
    if m is Mapping.warp:
        rpb = s.rows_per_block
        blocks = max(1, -(-rows // rpb))
        return Geometry(CUDA_WARP * rpb, blocks, min(blocks, ROW_GRID_MAX), rpb, 1, slots,
                        shared, False, blocks)
    if m is Mapping.split:
        S = s.splits
        threads = s.threads or block_threads(-(-cols // S))
        blocks = max(1, rows * S)
        grid = min(blocks, co_resident_grid(threads, shared, device)) if device.is_gpu \
            else blocks
        return Geometry(threads, blocks, grid, 1, S, slots, shared, True, blocks)
    blocks = max(1, rows)
    return Geometry(s.threads or row_threads(cols), blocks, min(blocks, ROW_GRID_MAX), 1, 1,
                    slots, shared, False, blocks)
