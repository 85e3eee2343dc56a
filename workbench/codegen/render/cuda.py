"""The CUDA renderer: one kernel IR as CUDA C++ for NVRTC (CuPy's RawModule).

:class:`CudaRenderer` is the C-style renderer with CUDA's spellings set as attributes
-- the thread's and block's indices, a thread's lane and warp, the block barrier, the
shared-memory declarations, the launch bounds -- and with the statements that meet the
hardware printed its own way: loops bound to blocks and threads (a row kept on chip
unrolled over registers, flat loops moving 16 bytes a thread), block reductions by warp
shuffles and shared memory, GEMM tiles and the online softmax by the prelude's C++
helpers (``include/*.cuh``), grid barriers by its spin barrier, and half-precision
storage. Every index the generated code spells comes from the attributes, so the warp
is the device table's.
"""
from __future__ import annotations

from ...device import GPUS
from ...dtypes import C_STORAGE, DType
from ...errors import WorkbenchError
from ...fusion.geometry import REDUCE_SLOT_WORDS
from ..include import source
from ..kernel import Kernel
from ..kir import (BlockReduce, DeclareScratch, Gemm, GridSync, Load, Loop,
                   OncePerBlock, OnlineStep, Scratch, Store, ThreadTile)
from .base import CStyleRenderer, element, index_type, node_tag, op_helpers, tile_slots
from .cuda_vectors import tile_loop, vector_loop


def _warp() -> int:
    """The warp of every GPU in the device table (CUDA's warpSize): one CUDA source
    serves them all, so they must agree; a power of two, as the lane (``& (warp -
    1)``) and warp (``>> log2(warp)``) spellings take it."""
    warps = sorted({d.warp for d in GPUS.values()})
    if len(warps) != 1 or warps[0] & (warps[0] - 1):
        raise ValueError(f"the GPUs' warps {warps}: one power of two expected")
    return warps[0]


# the prelude's C++ (include/*.cuh): the start of every source, the grid barrier, a
# thread block's GEMM tile and online softmax step, and the tensor cores' tile
PRELUDE = source("prelude.cuh")
GRID_SYNC = source("grid_sync.cuh")
GEMM_TILE = source("gemm_tile.cuh")
GEMM_TENSOR = source("gemm_tensor.cuh")

# the C++ type of a tensor tile's panels (BlockTile.operands; float is read as TF32)
TENSOR_OPERANDS = {DType.float32: "float", DType.bfloat16: "__nv_bfloat16",
                   DType.float16: "__half"}

# a block reduction's slot for its result, after one partial per warp
_BROADCAST = REDUCE_SLOT_WORDS - 1


class CudaRenderer(CStyleRenderer):
    """CUDA C for NVRTC (CuPy RawModule): the same statements, bound to blocks and threads."""

    target = "cuda"
    storage = {**C_STORAGE, DType.float16: "__half"}
    kernel_prefix = 'extern "C" __global__ void'
    restrict = "__restrict__"
    # how CUDA spells the hardware (the attributes tinygrad's CUDA language sets)
    thread = "threadIdx.x"             # the thread's index in its block
    block = "blockIdx.x"               # the block's in the grid
    block_threads = "blockDim.x"
    grid_blocks = "gridDim.x"
    warp = _warp()                     # lanes of a warp
    lane = f"{thread} & {warp - 1}"                        # the thread's lane in its warp
    warp_index = f"{thread} >> {warp.bit_length() - 1}"    # its warp in the block
    block_warps = f"{block_threads} >> {warp.bit_length() - 1}"  # warps in the block
    lanes_mask = f"0x{(1 << warp) - 1:x}u"                 # every lane (warp functions')
    barrier = "__syncthreads();"
    grid_barrier = "wb_grid_sync();"   # (include/grid_sync.cuh: a cooperative launch's)
    shared = "WB_SHARED"               # a shared array (prelude.cuh; the emulator's own)
    shared_dynamic = "WB_SHARED_DYN"   # one in dynamic shared memory, at a byte offset
    launch_bounds = "__launch_bounds__({threads}, {blocks})"

    def signature(self, k: Kernel) -> str:
        # the block size it is launched with (and at least one block per SM): ptxas
        # keeps registers within what a block of that size may have (a 1024-thread
        # block: 64 each) rather than failing the launch, and does not squeeze them
        # for two blocks per SM into spills
        bounds = self.launch_bounds.format(threads=k.launch.block, blocks=k.launch.resident)
        return f"{self.kernel_prefix} {bounds} {k.name}({self.params(k)})"

    def prelude(self, tensor: bool = False, uses: str | None = None) -> str:
        return (PRELUDE + GRID_SYNC + GEMM_TILE + (GEMM_TENSOR if tensor else "")
                + op_helpers(self.target, uses))

    def to_compute(self, dtype: DType, src: str) -> str:
        return f"__half2float({src})" if dtype is DType.float16 else super().to_compute(dtype, src)

    def store(self, s: Store) -> str:
        if isinstance(s.buf, Scratch) and s.buf.space == "register":
            return f"{s.buf.name}[{s.offset}] = {s.expr};"
        if isinstance(s.buf, Scratch) and s.buf.space == "hybrid":
            reg, shared = self._hybrid_at(s.buf, s.offset)
            return f"if ({s.offset} < {s.buf.slots}) {reg} = {s.expr}; else {shared} = {s.expr};"
        return super().store(Store(s.buf, self._scratch_offset(s.buf, s.offset), s.expr))

    def to_storage(self, dtype: DType, expr: str) -> str:
        if dtype is DType.float16:
            return f"__float2half({expr})"
        return super().to_storage(dtype, expr)

    def shared_decls(self, k: Kernel) -> list[str]:
        # scratch per block reduction: one partial per warp, plus the broadcast result;
        # row caches: each thread stores and reloads only its own columns, so they
        # need no barrier of their own (warp mapping: one row slice per warp)
        # (WB_SHARED: the prelude's plain __shared__ array; the CUDA emulator's own
        # checks each access for races and bounds)
        # (WB_SHARED_DYN: a cache in the dynamic shared memory the launch sizes, at its
        # byte offset, when the kernel's shared memory passes the static 48 KB)
        dyn = k.dynamic_shared
        sh, dy = self.shared, self.shared_dynamic
        return ([f"  {sh}(double, wb_red{i}, {REDUCE_SLOT_WORDS});"
                 for i in range(k.reductions)]
                + [f"  {dy}({x.dtype.c_compute}, {x.name}, {x.numel * x.rows}, "
                   f"{dyn[x.name]});" if x.name in dyn else
                   f"  {sh}({x.dtype.c_compute}, {x.name}, {x.numel * x.rows});"
                   for x in k.scratch if x.space != "register"])

    def grid_sync(self, s: GridSync, depth: int) -> list[str]:
        return [self.indent_unit * depth + f"{self.grid_barrier}  /* {s.reason} */"]

    def supports(self, k: Kernel) -> bool:
        return not (k.blas or k.host_only)

    def gemm(self, s: Gemm, depth: int) -> list[str]:
        if s.block is None:
            raise WorkbenchError("this GEMM kernel was planned for the CPU (the host BLAS "
                                 "or the C micro-kernel), so it has no CUDA rendering; "
                                 "plan for the GPU instead")
        b, pad = s.block, self.indent_unit * (depth + 2)
        flag = {True: "true", False: "false"}
        a_ij = element(s.a, s.a_off, s.lda, s.trans_a, "i", "p")
        b_ij = element(s.b, s.b_off, s.ldb, s.trans_b, "p", "j")
        return [self.indent_unit * depth
                + f"{'wb_gemm_tile_tc' if b.tensor else 'wb_gemm_tile'}<{b.m}, {b.n}, "
                  f"{b.depth}, {b.thread_m}, {b.thread_n}, "
                  f"{flag[s.trans_a]}, {flag[s.trans_b]}, {flag[s.accumulate]}, {b.stages}"
                  f"{', ' + TENSOR_OPERANDS[b.operands] if b.tensor else ''}>({s.c.name},",
                pad + "[&](long long i, long long p) -> float { return "
                    f"{self.to_compute(s.a.dtype, a_ij)}; }},",
                pad + "[&](long long p, long long j) -> float { return "
                    f"{self.to_compute(s.b.dtype, b_ij)}; }},",
                pad + f"{s.rows}, {s.cols}, {s.k});{node_tag(s.node)}"]

    def online_step(self, s: OnlineStep, depth: int) -> list[str]:
        b = s.block
        return [self.indent_unit * depth
                + f"wb_online_step<{b.m}, {b.n}, {b.thread_m}, {b.thread_n}, "
                  f"{s.out_block.thread_n}>({s.s.name}, {s.o.name}, {s.m.name}, {s.l.name}, "
                  f"{s.p.name}, {s.valid});{node_tag(s.node)}"]

    def thread_tile(self, s: ThreadTile, depth: int) -> list[str]:
        """The thread's ``thread_m x thread_n`` elements of the tile, unrolled: row i
        ``i * m / thread_m + ty``, column j ``j * n / thread_n + tx`` of the tile
        (wb_gemm_tile's layout), slot ``i * thread_n + j`` a constant."""
        pad, u = self.indent_unit * depth, self.indent_unit
        b = s.block
        across = b.n // b.thread_n
        body = self.stmts(s.body, depth + 3)
        return [pad + "#pragma unroll",
                pad + f"for (int wb_i = 0; wb_i < {b.thread_m}; ++wb_i) {{",
                pad + u + f"const long long r = {s.r0} + wb_i * {b.m // b.thread_m} + "
                          f"(int){self.thread} / {across};",
                pad + u + "#pragma unroll",
                pad + u + f"for (int wb_j = 0; wb_j < {b.thread_n}; ++wb_j) {{",
                pad + u * 2 + f"const long long col = {s.c0} + wb_j * {across} + "
                              f"(int){self.thread} % {across};",
                *tile_slots(body, pad + u * 2, f"wb_i * {b.thread_n} + wb_j", "wb_i", "int"),
                pad + u * 2 + f"if (r < {s.r1} && col < {s.c1}) {{",
                *body,
                pad + u * 2 + "}",
                pad + u + "}",
                pad + "}"]

    def _scratch_offset(self, buf, offset: str) -> str:
        if isinstance(buf, Scratch) and buf.rows > 1:
            return f"({self.warp_index}) * {buf.numel} + {offset}"
        return offset

    def _hybrid_at(self, x: Scratch, slot: str) -> tuple[str, str]:
        """A hybrid row copy's element at a thread's tile slot: (in registers, in shared
        memory) -- slots past the register part at (slot - registers) * threads + the
        thread, so a warp's lanes read 32 consecutive words."""
        return (f"{x.name}_r[{slot}]",
                f"{x.name}[({slot} - {x.slots}) * {x.threads} + {self.thread}]")

    def load(self, s: Load) -> str:
        if isinstance(s.buf, Scratch) and s.buf.space == "register":
            return f"{s.buf.dtype.c_compute} {s.var} = {s.buf.name}[{s.offset}];"
        if isinstance(s.buf, Scratch) and s.buf.space == "hybrid":
            # (the slot is a constant once the tile is unrolled: one side of the
            # choice survives, and the register array keeps constant indices)
            reg, shared = self._hybrid_at(s.buf, s.offset)
            return (f"{s.buf.dtype.c_compute} {s.var} = {s.offset} < {s.buf.slots} ? "
                    f"{reg} : {shared};")
        return super().load(Load(s.var, s.buf, self._scratch_offset(s.buf, s.offset)))

    def declare_scratch(self, s: DeclareScratch, depth: int) -> list[str]:
        x = s.scratch
        if x.space == "register":
            what = s.note or "this thread's columns of the row"
            pad = self.indent_unit * depth
            return [pad + f"{x.dtype.c_compute} {x.name}[{x.slots}];  /* {what}, in "
                          "registers */"] + ([
                pad + "#pragma unroll",
                pad + f"for (int wb_q = 0; wb_q < {x.slots}; ++wb_q) {x.name}[wb_q] = {s.init};"]
                if s.init else [])
        if x.space == "hybrid":
            return [self.indent_unit * depth + f"{x.dtype.c_compute} {x.name}_r[{x.slots}];  "
                    "/* this thread's first columns of the row, in registers (the rest "
                    "in shared memory) */"]
        return []   # declared in shared memory at the top of the kernel

    def loop(self, s: Loop, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        v, n = s.var, s.extent
        if s.bind == "flat" and s.vector > 1:
            return vector_loop(self, s, depth)
        if s.tile is not None and s.bind in ("block", "lane"):
            return tile_loop(self, s, depth)
        lo, hi, r = s.start or "0", s.stop or str(n), s.per_block
        ix = index_type(s)
        t, b, nt, nb = self.thread, self.block, self.block_threads, self.grid_blocks
        heads = {
            "flat": f"for ({ix} {v} = ({ix}){b} * {nt} + {t}; {v} < {n}; "
                    f"{v} += ({ix}){nb} * {nt}) {{",
            "grid": f"for ({ix} {v} = {b}; {v} < {n}; {v} += {nb}) {{",
            "block": f"for ({ix} {v} = {lo} + {t}; {v} < {hi}; {v} += {nt}) {{"
                     if s.start else
                     f"for ({ix} {v} = {t}; {v} < {hi}; {v} += {nt}) {{",
            # warps past per_block idle (a stitched kernel's block may be larger)
            "warp": f"for ({ix} {v} = ({ix}){b} * {r} + ({self.warp_index}); "
                    f"({self.warp_index}) < {r} && {v} < {n}; {v} += ({ix}){nb} * {r}) {{",
            "lane": f"for ({ix} {v} = ({self.lane}); {v} < {n}; {v} += {self.warp}) {{",
            "serial": f"for ({ix} {v} = {lo}; {v} < {hi}; ++{v}) {{",
        }
        return [pad + heads[s.bind]] + self.stmts(s.body, depth + 1) + [pad + "}"]

    def block_reduce(self, s: BlockReduce, depth: int) -> list[str]:
        p = self.indent_unit * depth
        ct = s.dtype.c_compute
        comb = lambda a, b: s.combine.format(a, b)

        def shuffled(fn: str) -> str:
            # the lane's partner into a variable first: a combiner may name its operand
            # twice (an integer max: a > b ? a : b), and a warp function written in one
            # arm of ?: is called by only some lanes -- undefined with a full mask (the
            # CUDA emulator found the lanes waiting for each other)
            return (f"for (int o = {self.warp // 2}; o > 0; o >>= 1) {{ "
                    f"const {ct} wb_o = {fn}({self.lanes_mask}, {s.var}, o); "
                    f"{s.var} = {comb(s.var, 'wb_o')}; }}")
        if s.width == "warp":
            # butterfly: every lane ends with the warp's result, no shared memory
            return [p + "/* warp-wide reduction */", p + shuffled("__shfl_xor_sync")]
        sh = f"wb_red{s.slot}"
        shfl = shuffled("__shfl_down_sync")
        if s.dtype.kind == "f":
            put, get = (lambda x: f"(double){x}"), (lambda x: f"({ct}){x}")
        else:   # integers pass through the double slots bit for bit (a 64-bit sum is exact)
            put = lambda x: f"__longlong_as_double((long long){x})"    # noqa: E731
            get = lambda x: f"({ct})__double_as_longlong({x})"          # noqa: E731
        t, last = self.thread, _BROADCAST
        return [
            p + "{ /* block-wide reduction: warp shuffles, then one warp over the partials */",
            p + "  " + shfl,
            p + f"  if (({self.lane}) == 0) {sh}[{self.warp_index}] = {put(s.var)};",
            p + "  " + self.barrier,
            p + f"  if ({t} < {self.warp}) {{",
            p + f"    {s.var} = {t} < ({self.block_warps}) ? {get(f'{sh}[{t}]')} "
                f": {s.identity};",
            p + "    " + shfl,
            p + f"    if ({t} == 0) {sh}[{last}] = {put(s.var)};",
            p + "  }",
            p + "  " + self.barrier,
            p + f"  {s.var} = {get(f'{sh}[{last}]')};",
            p + "}",
        ]

    def once_per_block(self, s: OncePerBlock, depth: int) -> list[str]:
        p = self.indent_unit * depth
        who = f"({self.lane}) == 0" if s.width == "warp" else f"{self.thread} == 0"
        return [p + f"if ({who}) {{"] + self.stmts(s.body, depth + 1) + [p + "}"]
