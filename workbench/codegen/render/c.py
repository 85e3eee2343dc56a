"""The C renderer: one kernel IR as C99 + OpenMP, for the CPU.

A GPU block's work runs on one CPU thread: ``flat`` and ``grid`` loops run in parallel
(OpenMP), ``block`` and ``lane`` loops serially under ``omp simd`` (a block's threads
become SIMD lanes), block reductions vanish (one thread saw the whole row), a grid
barrier is the end of a parallel loop, and a thread-per-row kernel walks tiles of rows
with the row loop innermost. GEMM tiles call the host BLAS or the generated
micro-kernel (``codegen/microkernel.py``), whose C the prelude carries.
"""
from __future__ import annotations

import copy
import re
from dataclasses import replace

from ...dtypes import DType
from ...fusion.geometry import CPU_ROW_TILE
from ...ops import Helper
from ...ops.elementwise import BF16
from ..kernel import Kernel
from ..kir import (Assign, BlockReduce, Comment, ConvLanes, DeclareScratch, DepthwiseLanes,
                   Gemm, GridSync, Let, Load, Loop, OncePerBlock, OnlineStep, PackA, PackB,
                   Scratch, Store, ThreadTile, WidenOnce)
from ..microkernel import MICRO_KERNEL_C, a_tile_stride

# the declared NaN-keeping float reductions whose row loops render as a fast max/min
# plus a NaN flag: reduction -> (its combiner's function, the one-instruction form)
NAN_SPLIT = {"wbmax": ("wb_fmax", "wb_fmax_num"), "wbmin": ("wb_fmin", "wb_fmin_num")}
from .c_access import host_load, host_store
from .c_exp_rows import split_exp_loop
from .c_lanes import lane_loop
from .base import CStyleRenderer, element, index_type, node_tag, op_helpers, tile_slots

# the GEMM micro-kernel and convolution lanes, as one prelude helper: the kernels that
# call one of its entry points (GEMM, packing, convolution statements) hold it
MICRO_KERNEL = Helper("wb_micro_kernel", MICRO_KERNEL_C, cuda="", calls=(BF16,))

# name -> arity; powf too, or one powf call would keep a whole fused loop scalar
_VECTOR_MATH = {"expf": 1, "logf": 1, "erff": 1, "tanhf": 1, "sinf": 1, "cosf": 1,
                "powf": 2}


# The host BLAS routines a kernel may call, as the parameter it takes them by: ILP64
# CBLAS (64-bit integers), as NumPy's bundled OpenBLAS exports it (runtime/blas.py).
_BLAS_PARAMS = {
    "sgemm": "void (*wb_sgemm)(int, int, int, long long, long long, long long, float, "
             "const float*, long long, const float*, long long, float, float*, long long)",
}


def _steps(w) -> str:
    """A 2-D window's strides, dilations and begin pads, as the C helpers take them
    (``wb_depthwise_lanes``, ``wb_conv_lanes``)."""
    return ", ".join(str(v) for v in (*w.strides, *w.dilations, *w.pads))


class CRenderer(CStyleRenderer):
    """C99 + OpenMP: grid-level loops run in parallel, block-level loops serially."""

    target = "c"
    ROW_TILE = CPU_ROW_TILE   # rows a CPU thread walks together in a thread-per-row kernel
    # how a kernel's outermost parallel loops are spelled: each its own parallel region,
    # or, in a kernel's team form (team()), worksharing loops of a team already running
    parallel = "parallel for"

    def kernel(self, k: Kernel) -> str:
        """The kernel's function; where the kernel is nothing but parallel loops
        (:func:`team_form`), as two: ``<name>_team``, its loops shared out among the
        threads of a parallel region already running (``#pragma omp for``, each ending
        in its barrier), and ``<name>``, which opens that region and calls it. The plan
        driver (runtime/driver.py) calls a run of consecutive team kernels inside one
        region of its own: one fork and join for the run, a barrier between kernels,
        where each kernel's own region cost a fork and a join (~1.2 us each on 2 cores,
        53 in MobileNetV2 small; benchmarks/results/call-sources-*-dw44.md)."""
        self._types.clear()     # (no type of another kernel's variable carried over)
        if not team_form(k) or not self.supports(k) or k.library is not None:
            return super().kernel(k)
        args = ", ".join([b.name for b in k.params] + (["wb_sgemm"] if k.blas else []))
        team = f"void {team_symbol(k.name)}({self.params(k)})"
        # (the kernel's own function first, its body after: read as one kernel)
        return "\n".join([
            self.header_comment(k), team + ";",
            self.signature(k) + " {", "  #pragma omp parallel",
            f"  {team_symbol(k.name)}({args});", "}",
            team + " {", *self.team().stmts(k.body, 1), "}"]) + "\n"

    def team(self) -> CRenderer:
        """This renderer as it prints a team form's body (:meth:`kernel`): its outermost
        parallel loops worksharing loops of the team already running, no variable's type
        known yet. A copy of the renderer in use, so that a subclass's printing reaches
        team forms as it reaches every other kernel."""
        team = copy.copy(self)
        team.__dict__.pop("_let_types", None)
        team.parallel = "for"
        return team

    def prelude(self, tensor: bool = False, uses: str | None = None) -> str:
        """What a kernel's source starts with (``tensor``: a kernel with GEMM tiles
        on tensor cores follows, which the C rendering computes in float32; ``uses``:
        the code that follows, whose helpers only it holds -- None: every helper)."""
        return ("#include <math.h>\n#include <stdint.h>\n"
                "#ifdef WB_VECTOR_MATH\n"
                "/* glibc's libmvec has SIMD variants of these; math.h declares them only\n"
                "   under -ffast-math, which would also change NaN semantics */\n"
                + "".join(f"#pragma omp declare simd notinbranch\nfloat {f}("
                          f"{', '.join(['float'] * n)});\n" for f, n in _VECTOR_MATH.items())
                + "#endif\n"
                "#define WB_FN static inline\n"
                + op_helpers(self.target, uses, (MICRO_KERNEL,)))

    def params(self, k: Kernel) -> str:
        # the host BLAS routine a GEMM kernel calls, after its buffers
        return super().params(k) + (", " + _BLAS_PARAMS[k.blas] if k.blas else "")

    def gemm(self, s: Gemm, depth: int) -> list[str]:
        if s.block is not None:
            return self._block_gemm(s, depth)
        if s.transposed and s.a_in_place:   # B's element (column i, row r) in place
            is_, rs = (s.lda, 1) if s.trans_a else (1, s.lda)
            call = (f"wb_gemm_transposed({s.rows}, {s.cols}, {s.k}, {s.a.name} + {s.a_off}, "
                    f"{is_}, {rs}, {s.b.name} + {s.b_off}, {s.k}, {s.c.name} + {s.c_off}, "
                    f"{s.ldc})")
            return [self.indent_unit * depth + f"{call};{node_tag(s.node)}"]
        if s.transposed:  # x^T's element (position i, channel r) at i + r * lda
            call = (f"wb_gemm_packed_t({s.rows}, {s.cols}, {s.k}, {s.a.name} + {s.a_off}, 1, "
                    f"{s.lda}, {s.b.name} + {s.b_off}, {s.c.name} + {s.c_off}, {s.ldc})")
            return [self.indent_unit * depth + f"{call};{node_tag(s.node)}"]
        if s.packed:      # A's element (i, r) at i * ars + r * acs
            ars, acs = (1, s.lda) if s.trans_a else (s.lda, 1)
            if s.pairs:   # (no accumulate or panel_rows: those multiply float32 tiles)
                # (B's words: a float32 workspace, or a convolution's patches gathered
                # as bfloat16 in pairs)
                call = (f"wb_gemm_packed_pairs({s.rows}, {s.cols}, {s.k}, {s.a.name} + "
                        f"{s.a_off}, {ars}, {acs}, (const float*)({s.b.name} + {s.b_off}), "
                        f"{s.c.name} + {s.c_off}, {s.ldc})")
                return [self.indent_unit * depth + f"{call};{node_tag(s.node)}"]
            a, b, c = (f"{s.a.name} + {s.a_off}", f"{s.b.name} + {s.b_off}",
                       f"{s.c.name} + {s.c_off}")
            if s.packs_b is not None:   # B's panels packed by this tile as it goes
                pb = s.packs_b
                kind = int(pb.b.dtype is DType.bfloat16)
                left = f"0, 0, 0, {a}" if s.a_packed else f"{a}, {ars}, {acs}, 0"
                call = (f"wb_gemm_packing_b({s.rows}, {s.cols}, {s.k}, {left}, {pb.b.name} + "
                        f"{pb.b_off}, {kind}, {pb.n}, {pb.row_stride}, {pb.col_stride}, {b}, "
                        f"{pb.panel}, {c}, {s.ldc})")
            elif s.a_packed:    # (no accumulate or panel_rows: a convolution's tile)
                call = (f"wb_gemm_packed_a({s.rows}, {s.cols}, {s.k}, {a}, {b}, {c}, "
                        f"{s.ldc})")
            elif s.accumulate or s.panel_rows:
                call = (f"wb_gemm_packed_into({s.rows}, {s.cols}, {s.k}, {a}, {ars}, {acs}, "
                        f"{b}, {s.panel_rows or s.k}, {c}, {s.ldc}, {int(s.accumulate)})")
            else:
                call = (f"wb_gemm_packed({s.rows}, {s.cols}, {s.k}, {a}, {ars}, {acs}, {b}, "
                        f"{c}, {s.ldc})")
            return [self.indent_unit * depth + f"{call};{node_tag(s.node)}"]
        # CBLAS row-major (101), an operand stored column-major transposed (112, else
        # 111), C = 1 * A B + 0 * C
        ta, tb = (112 if t else 111 for t in (s.trans_a, s.trans_b))
        return [self.indent_unit * depth
                + f"wb_sgemm(101, {ta}, {tb}, {s.rows}, {s.cols}, {s.k}, 1.0f, "
                  f"{s.a.name} + {s.a_off}, {s.lda}, {s.b.name} + {s.b_off}, {s.ldb}, 0.0f, "
                  f"{s.c.name} + {s.c_off}, {s.ldc});{node_tag(s.node)}"]

    def _block_gemm(self, s: Gemm, depth: int) -> list[str]:
        """A GPU GEMM tile on the CPU (an artifact planned for a GPU, run where there is
        none): the whole tile by one thread, row-major ``block.n`` wide, each element
        summed over k in order. Correct, not fast: CPU plans use the micro-kernel."""
        pad, u = self.indent_unit * depth, self.indent_unit
        a = self.to_compute(s.a.dtype, element(s.a, s.a_off, s.lda, s.trans_a, "wb_i", "wb_p"))
        b = self.to_compute(s.b.dtype, element(s.b, s.b_off, s.ldb, s.trans_b, "wb_p", "wb_j"))
        return [pad + f"for (long long wb_i = 0; wb_i < {s.rows}; ++wb_i) {{",
                pad + u + f"for (long long wb_j = 0; wb_j < {s.cols}; ++wb_j) {{",
                pad + u * 2 + "float wb_sum = 0.0f;",
                pad + u * 2 + f"for (long long wb_p = 0; wb_p < {s.k}; ++wb_p) "
                              f"wb_sum += {a} * {b};",
                pad + u * 2 + f"{s.c.name}[wb_i * {s.block.n} + wb_j] "
                              f"{'+=' if s.accumulate else '='} wb_sum;{node_tag(s.node)}",
                pad + u + "}",
                pad + "}"]

    def thread_tile(self, s: ThreadTile, depth: int) -> list[str]:
        """Every element of the tile (one CPU thread holds the block's whole tile)."""
        pad, u = self.indent_unit * depth, self.indent_unit
        body = self.stmts(s.body, depth + 2)
        return [pad + f"for (long long r = {s.r0}; r < {s.r1}; ++r) {{",
                pad + u + f"for (long long col = {s.c0}; col < {s.c1}; ++col) {{",
                *tile_slots(body, pad + u * 2, f"(r - {s.r0}) * {s.block.n} + col - {s.c0}",
                        f"r - {s.r0}", "long long"),
                *body,
                pad + u + "}",
                pad + "}"]

    def online_step(self, s: OnlineStep, depth: int) -> list[str]:
        """The whole tile's rows, one after another (see kir.OnlineStep)."""
        pad, u = self.indent_unit * depth, self.indent_unit
        bn, on, w = s.block.n, s.out_block.n, s.block.n + s.block.PAD
        x, o, m, l, p = (v.name for v in (s.s, s.o, s.m, s.l, s.p))
        return [pad + f"for (long long wb_r = 0; wb_r < {s.block.m}; ++wb_r) {{"
                      f"{node_tag(s.node)}",
                pad + u + f"float wb_mx = {m}[wb_r], wb_sum = 0.0f;",
                pad + u + f"for (long long wb_c = 0; wb_c < {s.valid}; ++wb_c) "
                          f"wb_mx = fmaxf(wb_mx, {x}[wb_r * {bn} + wb_c]);",
                pad + u + "const float wb_base = wb_mx == -INFINITY ? 0.0f : wb_mx;",
                pad + u + f"const float wb_alpha = expf({m}[wb_r] - wb_base);",
                pad + u + f"for (long long wb_c = 0; wb_c < {bn}; ++wb_c) {{",
                pad + u * 2 + f"const float wb_e = wb_c < {s.valid} ? "
                              f"expf({x}[wb_r * {bn} + wb_c] - wb_base) : 0.0f;",
                pad + u * 2 + f"{p}[wb_r * {w} + wb_c] = wb_e;",
                pad + u * 2 + "wb_sum += wb_e;",
                pad + u + "}",
                pad + u + f"{l}[wb_r] = {l}[wb_r] * wb_alpha + wb_sum;",
                pad + u + f"{m}[wb_r] = wb_mx;",
                pad + u + f"for (long long wb_d = 0; wb_d < {on}; ++wb_d) "
                          f"{o}[wb_r * {on} + wb_d] *= wb_alpha;",
                pad + "}"]

    def load(self, s: Load) -> str:
        # (a register copy of an input read again, a row kept in an output's row read
        # there: render/c_access.py)
        return super().load(host_load(s))

    def store(self, s: Store) -> str:
        s = host_store(s)
        return "" if s is None else super().store(s)

    @property
    def _types(self) -> dict:
        """The C type of each variable a Let of the statements printed so far declared
        (a reduction's accumulator, for its lanes: render/c_lanes.py)."""
        return self.__dict__.setdefault("_let_types", {})

    def stmts(self, body, depth: int) -> list[str]:
        self._types.update((s.var, s.dtype.c_compute) for s in body if isinstance(s, Let))
        return super().stmts(body, depth)

    def loop(self, s: Loop, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        if s.bind == "flat" and depth <= 1 and any(isinstance(x, Loop) for x in s.body):
            return self._row_tiles(s, depth)
        if s.bind == "warp":
            return self._warp_rows(s, depth)
        if s.bind in ("block", "lane") and (s.reduction or ("", ""))[1] not in NAN_SPLIT \
                and (split := split_exp_loop(self, s, depth)) is not None:
            return split    # (its e^x by AVX-512's vscalefps: render/c_exp_rows.py)
        head = (f"for ({index_type(s)} {s.var} = {s.start or 0}; "
                f"{s.var} < {s.stop or s.extent}; ++{s.var}) {{")
        if s.bind in ("flat", "grid") and depth <= 1:
            # the outermost parallel loop; simd lets the compiler vectorize flat loops
            pragma = f"#pragma omp {self.parallel} simd" if s.bind == "flat" and s.vector > 1 \
                else f"#pragma omp {self.parallel} schedule(static)"
            lines = [pad + pragma, pad + head]
        elif s.bind in ("block", "lane") and s.reduction is None:
            # a block's threads become SIMD lanes: each column is independent
            lines = [pad + "#pragma omp simd", pad + head]
        elif s.bind in ("block", "lane") and s.reduction[1] in NAN_SPLIT \
                and (split := self._minmax_loop(s, depth, head)) is not None:
            return split
        elif s.bind in ("block", "lane") and s.reduction[1]:
            lanes = lane_loop(self, s, depth, [s.reduction], self._types)
            if lanes is not None:
                return lanes    # (combined in halves, not lane by lane: render/c_lanes.py)
            lines = [pad + f"#pragma omp simd reduction({s.reduction[1]}:{s.reduction[0]})",
                     pad + head]
        else:
            lines = [pad + head]
        lines += self.stmts(s.body, depth + 1)
        return lines + [pad + "}"]

    def _minmax_loop(self, s: Loop, depth: int, head: str) -> list[str] | None:
        """A float max/min over a row's columns: ``wb_fmax_num`` (one maxps) under a
        reduction declared with it, and whether any element was NaN as an OR reduction
        of its own, the NaN put back after the loop -- NumPy's semantics, where the
        NaN-keeping ``wb_fmax`` as the declared reduction's combiner left GCC's SIMD
        lanes 2.5x slower (softmax 8192 x 512, one thread: the max pass 0.77 -> 0.29 ms).
        None for a loop whose accumulation is not the plain ``acc = wb_fmax(acc, x)``
        (rendered as any other reduction)."""
        pad, acc = self.indent_unit * depth, s.reduction[0]
        fn, fast = NAN_SPLIT[s.reduction[1]]
        body, nan, hits = [], f"{acc}_nan", 0
        for st in s.body:
            if isinstance(st, Assign) and st.var == acc and st.expr.startswith(f"{fn}({acc}, ") \
                    and st.expr.endswith(")"):
                x = st.expr[len(fn) + len(acc) + 3:-1]
                body += [Assign(acc, f"{fast}({acc}, {x})", st.node),
                         Assign(nan, f"{nan} | ({x} != {x})", st.node)]
                hits += 1
            else:
                body.append(st)
        if hits != 1:
            return None
        self._types[nan] = "int"
        lanes = lane_loop(self, replace(s, body=tuple(body)), depth,
                          [(acc, s.reduction[1] + "n"), (nan, "|")], self._types)
        if lanes is not None:
            return [pad + f"int {nan} = 0;", *lanes, pad + f"if ({nan}) {acc} = NAN;"]
        return ([pad + f"int {nan} = 0;",
                 pad + f"#pragma omp simd reduction({s.reduction[1]}n:{acc}) "
                       f"reduction(|:{nan})", pad + head]
                + self.stmts(tuple(body), depth + 1)
                + [pad + "}", pad + f"if ({nan}) {acc} = NAN;"])

    def _warp_rows(self, s: Loop, depth: int) -> list[str]:
        """One warp per row, ``per_block`` rows per block: on the CPU one thread takes a
        block's rows one after another (the warp's lanes become SIMD lanes)."""
        pad, u = self.indent_unit * depth, self.indent_unit
        v, n, r, ix = s.var, s.extent, s.per_block, index_type(s)
        blocks = -(-n // r)
        return ([pad + f"#pragma omp {self.parallel} schedule(static)",
                 pad + f"for ({ix} {v}_blk = 0; {v}_blk < {blocks}; ++{v}_blk) {{",
                 pad + u + f"const {ix} {v}_end = {v}_blk * {r} + {r} < {n} ? "
                           f"{v}_blk * {r} + {r} : {n};",
                 pad + u + f"for ({ix} {v} = {v}_blk * {r}; {v} < {v}_end; ++{v}) {{"]
                + self.stmts(s.body, depth + 2) + [pad + u + "}", pad + "}"])

    def grid_sync(self, s: GridSync, depth: int) -> list[str]:
        # each phase is its own parallel loop; its implicit barrier is the grid barrier
        return [self.indent_unit * depth + f"/* grid barrier ({s.reason}): the end of the "
                "parallel loop above */"]

    def _row_tiles(self, s: Loop, depth: int) -> list[str]:
        """A thread-per-row kernel (column reduction) for the CPU.

        On a GPU, neighbouring threads take neighbouring rows, so each step of the
        column loop reads contiguous memory. One CPU thread walking one row at a time
        would stride through memory instead; so a thread takes a tile of rows, and every
        statement runs over the tile's rows innermost (under omp simd) -- the same
        computation with the loops interchanged. Row-level values become per-tile arrays.
        """
        pad, u = self.indent_unit * depth, self.indent_unit
        row, T, n = s.var, self.ROW_TILE, s.extent
        decls = {}
        for x in s.body:
            if isinstance(x, Let):
                decls[x.var] = x.dtype.c_compute
            elif isinstance(x, Load):
                decls[x.var] = x.buf.dtype.c_compute
        names = (re.compile(r"\b(" + "|".join(map(re.escape, decls)) + r")\b") if decls
                 else None)
        ren = (lambda e: names.sub(r"\1[r_]", e)) if names else (lambda e: e)

        def target(var, ctype):
            # row-level values live in the tile arrays; column-level ones are locals
            return ren(var) if var in decls else f"{ctype} {var}"

        def tiled(stmt):
            if isinstance(stmt, Let):
                return [f"{target(stmt.var, stmt.dtype.c_compute)} = {ren(stmt.expr)};"]
            if isinstance(stmt, Assign):
                return [f"{ren(stmt.var)} = {ren(stmt.expr)};"]
            if isinstance(stmt, Load):
                ct = stmt.buf.dtype.c_compute
                src = self.to_compute(stmt.buf.dtype, f"{stmt.buf.name}[{ren(stmt.offset)}]")
                return [f"{target(stmt.var, ct)} = {src};"]
            if isinstance(stmt, Store):
                return [self.store(Store(stmt.buf, ren(stmt.offset), ren(stmt.expr)))]
            if isinstance(stmt, OncePerBlock):
                return [line for x in stmt.body for line in tiled(x)]
            if isinstance(stmt, Comment):
                return [f"/* {stmt.text} */"]
            return [line.strip() for line in self.stmts([stmt], 0)]

        def over_rows(lines, d):
            p = u * d
            return ([p + "#pragma omp simd", p + "for (int r_ = 0; r_ < n_; ++r_) {",
                     p + u + f"const {index_type(s)} {row} = {row}0 + r_;"]
                    + [p + u + line for line in lines] + [p + "}"])

        out = [pad + f"#pragma omp {self.parallel} schedule(static)",
               pad + f"for ({index_type(s)} {row}0 = 0; {row}0 < {n}; {row}0 += {T}) {{",
               pad + u + f"const int n_ = {n} - {row}0 < {T} ? {n} - {row}0 : {T};"]
        out += [pad + u + f"{ct} {v}[{T}];" for v, ct in decls.items()]
        pending: list[str] = []
        for x in s.body:
            if isinstance(x, Loop):
                if pending:
                    out += over_rows(pending, depth + 1)
                    pending = []
                out.append(pad + u + f"for ({index_type(x)} {x.var} = 0; "
                                     f"{x.var} < {x.extent}; ++{x.var}) {{")
                out += over_rows([line for y in x.body for line in tiled(y)], depth + 2)
                out.append(pad + u + "}")
            else:
                pending += tiled(x)
        if pending:
            out += over_rows(pending, depth + 1)
        return out + [pad + "}"]

    def block_reduce(self, s: BlockReduce, depth: int) -> list[str]:
        # one thread per block on the CPU: the serial loop already saw every column
        return [self.indent_unit * depth + f"/* block reduce {s.var}: one thread per row */"]

    def declare_scratch(self, s: DeclareScratch, depth: int) -> list[str]:
        # one thread owns the row on the CPU: a private array in the row loop
        x = s.scratch
        if x.source is not None:
            return []        # (see load: the CPU reads the input again)
        if x.home is not None:
            return [self.indent_unit * depth + f"/* {x.name}: kept in the row of "
                    f"{x.home.name}, which the last pass overwrites */"]
        # (a half type held as it is stored: a convolution's bfloat16 patches in pairs)
        ct = self.storage[x.dtype] if x.dtype.is_half else x.dtype.c_compute
        pad = self.indent_unit * depth
        return [pad + f"{ct} {x.name}[{x.numel}];"
                f" /* {x.numel * x.dtype.itemsize} B: {s.note or 'the row kept on chip'} */"
                ] + ([pad + f"for (long long wb_q = 0; wb_q < {x.numel}; ++wb_q) "
                            f"{x.name}[wb_q] = {s.init};"] if s.init else [])

    # -- shared by all targets -------------------------------------------------

    def helper_call(self, s) -> str:
        if isinstance(s, DepthwiseLanes):
            w = s.window
            (h, wd), (kh, kw), (oh, ow) = w.spatial, w.kernel, w.out
            return (f"wb_depthwise_lanes({s.channels}, {s.x.name} + {s.x_off}, {h}, {wd}, "
                    f"{s.f.name} + {s.f_off}, {kh}, {kw}, {s.c.name} + {s.c_off}, {oh}, {ow}, "
                    f"{_steps(w)});")
        if isinstance(s, ConvLanes):
            w = s.window
            (h, wd), (kh, kw), ow = w.spatial, w.kernel, w.out[1]
            return (f"wb_conv_lanes({s.x.name} + {s.x_off}, {w.channels}, {h}, {wd}, "
                    f"{s.f.name}, {s.f0}, {s.f1}, {s.c.name} + {s.c_off}, {s.ldc}, {s.oy0}, "
                    f"{s.oy1}, {ow}, {kh}, {kw}, {_steps(w)});")
        if isinstance(s, WidenOnce):
            return f"wb_widen_once({s.src.name}, {s.n}, {s.dst.name});"
        if isinstance(s, PackA):
            args = (f"{s.a.name} + {s.a_off}, {s.m}, {s.k}, {s.row_stride}, "
                    f"{s.col_stride}, {s.tile_m}, {a_tile_stride(s.k, s.tile_m)}")
            if s.sliver:      # one sliver, by every run
                return (f"wb_pack_a_sliver({args}, {s.packed.name} + {s.packed_off}, "
                        f"{s.tile}, {s.sliver});")
            return f"wb_pack_a_once({args}, {s.packed.name});"
        if isinstance(s, PackB):
            # how the micro-kernel packs it: WB_B_PAIRS, WB_B_BF16 (widened), WB_B_F32
            kind = 2 if s.pairs else int(s.b.dtype is DType.bfloat16)
            args = (f"{s.b.name} + {s.b_off}, {kind}, {s.k}, {s.n}, {s.row_stride}, "
                    f"{s.col_stride}, {s.packed.name} + {s.packed_off}")
            return (f"wb_pack_panel({args}, {s.panel});" if s.panel
                    else f"wb_pack_b_once({args});")
        return super().helper_call(s)


TEAM_SUFFIX = "_team"


def team_symbol(name: str) -> str:
    """The function a kernel's team form is compiled as: what :meth:`CRenderer.kernel`
    defines where it decides the kernel has one, and the only sign of that decision
    the compiled library carries (runtime/cpu.py looks the symbol up)."""
    return name + TEAM_SUFFIX


def team_form(k: Kernel) -> bool:
    """Whether every thread of a region may run a kernel's body, each parallel loop's
    iterations shared out: a body of nothing but parallel loops, comments, grid
    barriers (those loops' ends) and constants made once (``wb_pack_a_once``,
    ``wb_pack_b_once``, ``wb_widen_once``: the first thread to claim one makes it, the
    others wait until it is made, as two runs at once do). Anything else at the top (a
    serial statement) would run once per thread."""
    def once(s) -> bool:
        return (isinstance(s, WidenOnce) or (isinstance(s, PackA) and not s.sliver)
                or (isinstance(s, PackB) and not s.panel))
    loops = [s for s in k.body if isinstance(s, Loop)]
    return bool(loops) and all(
        isinstance(s, (Comment, GridSync)) or once(s)
        or (isinstance(s, Loop) and s.bind in ("flat", "grid", "warp")) for s in k.body)
