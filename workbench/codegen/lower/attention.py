"""Fused attention: softmax(Q Kᵀ) V in one kernel, the softmax taken a block of keys at
a time (FlashAttention's online recurrence), so that the scores and probabilities never
reach memory -- a thread block per tile of query rows on a GPU (``_block_attention``),
a tile of rows per work item on a CPU, both products the micro-kernel's
(``_online_attention``). Under a causal mask the blocks of keys past a tile's last row
are skipped where a check allows (``_key_blocks``, ``fusion/key_limit.py``).

(A CPU's attention over whole rows of scores is the GEMM kernel's: ``gemm.py``.)
"""
from __future__ import annotations

from dataclasses import replace

from ...dtypes import DType, c_literal
from ...fusion.gemm.tiles import PANEL
from ...ops import get_op
from ..kernel import Kernel
from ..kir import (Assign, BlockReduce, Comment, DeclareScratch, Gemm, If, Let, Load, Loop,
                   OnlineStep, Scratch, Store, ThreadTile)
from ..microkernel import panel_rows
from .base import Scope, launch_of, make_kernel, widen
from .tiles import TileLowerer


class AttentionLowerer(TileLowerer):
    """A GEMM group whose second product takes the softmax online."""

    def lower(self, name: str) -> Kernel:
        if self.sched.gemm.block is not None:
            return self._block_attention(name)
        return self._online_attention(name)

    def _block_attention(self, name: str) -> Kernel:
        """Fused attention on a GPU (FlashAttention's online softmax): a thread block
        per tile of query rows takes the keys a block at a time -- the scores' block
        into each thread's registers (wb_gemm_tile), the prefix ops (scale, mask)
        making the logits in place, the running maximum and sum and the output rows
        rescaled with the probabilities passed through shared memory
        (wb_online_step), and the output rows += the probabilities @ V's block; at the
        end each output element divided by its row's sum and stored where the layout
        ops after the product put it. Scores and probabilities never reach memory."""
        g, t, then = self.g, self.sched.gemm, self.sched.then
        on = then.online
        mm2, v = g.producer[then.result], then.b.view
        M, N, D = t.m, t.n, then.n
        blk = t.block
        ob = blk.over(D)
        f32, i64 = DType.float32, DType.int64
        s_blk = Scratch("wb_sc", t.result, f32, blk.m * blk.n, space="register",
                        slots=blk.thread_m * blk.thread_n)
        o_acc = Scratch("wb_o", then.result, f32, ob.m * ob.n, space="register",
                        slots=ob.thread_m * ob.thread_n)
        m_run = Scratch("wb_m", on.logits, f32, blk.m, space="register", slots=blk.thread_m)
        l_run = Scratch("wb_l", then.value, f32, blk.m, space="register", slots=blk.thread_m)
        probs = Scratch("wb_probs", then.value, f32, blk.m * (blk.n + blk.PAD))
        out, o_off, ldo = self._attention_out()
        # the logits of the block, in place: the prefix ops (scale, mask) at (row, col)
        scope = Scope()
        prod, at = self.fresh(), self._at_rows(t.result)
        scope.stmts.append(Load(prod, s_blk, "wb_s"))
        scope.memo[(t.result, at.key)] = prod
        z = self.at(scope, on.logits, self._at_rows(on.logits))
        scope.stmts.append(Store(s_blk, "wb_s", z))
        logits = ThreadTile(blk, "r0", "r1", "c0", "c1",
                            (Let("row", i64, f"bt * {M} + r"), *scope.stmts))
        step = (
            Let("c0", i64, f"kb * {blk.n}"),
            Let("c1", i64, f"c0 + {blk.n} < {N} ? c0 + {blk.n} : {N}"),
            Comment("the scores' block: Q's rows @ the block of Kᵀ, in registers"),
            self._block_product(s_blk),
            Comment("the logits (the ops before the softmax), in place"), logits,
            Comment("per row: the running maximum and sum, the probabilities (to shared "
                    "memory), the output rows rescaled"),
            OnlineStep(s_blk, o_acc, m_run, l_run, probs, blk, ob, "c1 - c0",
                       self._made_by(then.value)),
            Comment(f"the output rows += the probabilities @ the block of {mm2.id}'s V"),
            Gemm(probs, self.buffers[then.b.value], o_acc, "0",
                 f"{v.batch_offset('bt')} + c0 * {v.row_stride}", "0", "r1 - r0", str(D),
                 "c1 - c0", blk.n + blk.PAD, v.ld, 0, mm2.id, trans_b=v.trans,
                 accumulate=True, block=ob))
        # (each thread checks its rows' maxima, then the block agrees)
        blocks = self._key_blocks(step, blk.n, lambda floor: (
            ThreadTile(blk, "r0", "r1", "0", "1", (
                Load("wb_mr", m_run, "wb_si"), Assign("wb_ok", f"wb_ok && wb_mr > {floor}"))),
            BlockReduce("wb_ok", DType.int32, "({0} && {1})", "1", 0)))
        div = get_op("div").scalar
        finish = ThreadTile(ob, "r0", "r1", "0", str(D), (
            Load("wb_l0", l_run, "wb_si"),
            Load("wb_y", o_acc, "wb_s"),
            Store(out, f"{o_off} + (r - r0) * {ldo} + col",
                  div(["wb_y", "wb_l0"], [f32, f32], f32, {}),
                  node=self._made_by(then.value))))
        body = (*self._tile_bounds(columns=False),
                DeclareScratch(s_blk, "this thread's scores of the block"),
                DeclareScratch(o_acc, "this thread's elements of the output rows", "0.0f"),
                DeclareScratch(m_run, "its rows' running maximum", "-INFINITY"),
                DeclareScratch(l_run, "its rows' running sum", "0.0f"),
                DeclareScratch(probs, "a block's probabilities"),
                *blocks, Comment("each output element divided by its row's sum"), finish)
        return self._block_kernel(name, Loop("tile", t.batch * t.row_tiles, "grid", body),
                                  t.flops + 2.0 * t.batch * M * N * D, (probs,),
                                  slots=int(on.limit is not None))

    def _online_attention(self, name: str) -> Kernel:
        """Fused attention with the softmax taken a block of keys at a time
        (``OnlineSoftmax``, FlashAttention's recurrence). Per tile of query rows: a
        running maximum ``wb_m`` and sum ``wb_l`` per row and the output rows ``wb_o``;
        for each block of keys the scores' block ``wb_s`` (Q's rows @ the packed Kᵀ's
        block), the prefix ops making the logits in place, then per row the new
        maximum, the probabilities ``exp(z - m_new)`` in place, ``l`` and the output
        rows rescaled by ``exp(m - m_new)``, and ``wb_o += wb_s @ V's block``; at the
        end each output row divided by its ``l``. A row whose logits are all -inf so
        far takes 0 as its base, so exp gives 0, not NaN, until a finite logit comes
        (a softmax over a row that stays all -inf is 0/0, NaN, as NumPy's)."""
        g, t, then = self.g, self.sched.gemm, self.sched.then
        on = then.online
        mm, mm2 = g.producer[t.result], g.producer[then.result]
        a = t.a.view
        M, N, K, D, BC, TM = t.m, t.n, t.k, then.n, on.block, t.tile_m
        f32, i64 = DType.float32, DType.int64
        pairs = self._pairs()
        kp, k_pack, k_off = self._pack_per_run("pack", t.b, K, N, t.batch, mm.id, pairs)
        vp, v_pack, v_off = self._pack_per_run("pack_v", then.b, then.k, D, t.batch, mm2.id)
        s_blk = Scratch("wb_s", t.result, f32, TM * BC)
        o_acc = Scratch("wb_o", then.result, f32, TM * D)
        m_run = Scratch("wb_m", on.logits, f32, TM)
        l_run = Scratch("wb_l", then.value, f32, TM)
        out, o_off, ldo = self._attention_out()
        red_max = get_op("reduce_max").combiner
        maximum = red_max.combine("f")
        exp = get_op("exp").scalar
        div = get_op("div").scalar

        def expf(x: str) -> str:
            return exp([x], [f32], f32, {})

        # the logits of the block, in place: the prefix ops (scale, mask) at (row, col)
        scope = Scope()
        prod, at = self.fresh(), self._at_rows(t.result)
        blk = f"(r - r0) * {BC} + col - c0"
        scope.stmts.append(Load(prod, s_blk, blk))
        scope.memo[(t.result, at.key)] = prod
        z = self.at(scope, on.logits, self._at_rows(on.logits))
        scope.stmts.append(Store(s_blk, blk, z))
        logits = Loop("r", M, "serial", (
            Let("row", i64, f"bt * {M} + r"),
            Loop("col", N, "block", tuple(scope.stmts), start="c0", stop="c1")),
            start="r0", stop="r1")
        cell = f"wb_ri * {BC} + wb_c"
        per_row = Loop("r", M, "serial", (
            Let("wb_ri", i64, "r - r0"),
            Load("wb_m0", m_run, "wb_ri"),
            Let("wb_mx", f32, "wb_m0"),
            Loop("wb_c", BC, "block", (Load("wb_x", s_blk, cell),
                                       Assign("wb_mx", maximum.format("wb_mx", "wb_x"))),
                 reduction=("wb_mx", red_max.simd_op[0]), stop="c1 - c0"),
            Let("wb_base", f32, "wb_mx == -INFINITY ? 0.0f : wb_mx"),
            Let("wb_alpha", f32, expf("wb_m0 - wb_base")),
            Let("wb_sum", f32, "0.0f"),
            Loop("wb_c", BC, "block", (Load("wb_x", s_blk, cell),
                                       Let("wb_e", f32, expf("wb_x - wb_base")),
                                       Store(s_blk, cell, "wb_e"),
                                       Assign("wb_sum", "wb_sum + wb_e")),
                 reduction=("wb_sum", "+"), stop="c1 - c0"),
            Load("wb_l0", l_run, "wb_ri"),
            Store(l_run, "wb_ri", "wb_l0 * wb_alpha + wb_sum"),
            Store(m_run, "wb_ri", "wb_mx"),
            Loop("wb_d", D, "block", (Load("wb_y", o_acc, f"wb_ri * {D} + wb_d"),
                                      Store(o_acc, f"wb_ri * {D} + wb_d", "wb_y * wb_alpha")))),
            start="r0", stop="r1")
        step = (
            Let("c0", i64, f"kb * {BC}"),
            Let("c1", i64, f"c0 + {BC} < {N} ? c0 + {BC} : {N}"),
            Comment("the scores' block: Q's rows @ the block of the packed keys"),
            Gemm(self.buffers[t.a.value], kp, s_blk,
                 f"{a.batch_offset('bt')} + r0 * {a.row_stride}",
                 f"{k_off} + c0 * {panel_rows(K, pairs)}", "0", "r1 - r0", "c1 - c0", K,
                 a.ld, PANEL, BC, mm.id, trans_a=a.trans, packed=True, pairs=pairs),
            Comment("the logits (the ops before the softmax), in place"), logits,
            Comment("per row: the running maximum and sum, the probabilities in place, "
                    "the output rows rescaled"), per_row,
            Comment(f"the output rows += the probabilities @ the block of {mm2.id}'s V"),
            Gemm(s_blk, vp, o_acc, "0", f"{v_off} + c0 * {PANEL}", "0", "r1 - r0", str(D),
                 "c1 - c0", BC, PANEL, D, mm2.id, packed=True, accumulate=True,
                 panel_rows=then.k))
        blocks = self._key_blocks(step, BC, lambda floor: (Loop("r", M, "serial", (
            Load("wb_mr", m_run, "r - r0"), Assign("wb_ok", f"wb_ok && wb_mr > {floor}")),
            start="r0", stop="r1"),))
        finish = Loop("r", M, "serial", (
            Let("wb_ri", i64, "r - r0"),
            Load("wb_l0", l_run, "wb_ri"),
            Loop("wb_d", D, "block", (
                Load("wb_y", o_acc, f"wb_ri * {D} + wb_d"),
                Store(out, f"{o_off} + wb_ri * {ldo} + wb_d",
                      div(["wb_y", "wb_l0"], [f32, f32], f32, {}), node=self._made_by(
                          then.value)),))),
            start="r0", stop="r1")
        per = t.row_tiles
        body = (*(DeclareScratch(x) for x in (s_blk, o_acc, m_run, l_run)),
                *self._tile_bounds(columns=False),
                Loop("r", TM, "serial", (Store(m_run, "r", "-INFINITY"),
                                         Store(l_run, "r", "0.0f"))),
                Loop("i", TM * D, "block", (Store(o_acc, "i", "0.0f"),)),
                *blocks, Comment("each output row divided by its sum"), finish)
        loop = Loop("tile", t.batch * per, "grid", body)
        flops = self.flops * g.value(t.result).numel
        k = make_kernel(name, self.group.id, self.sched.describe(), self.buffers,
                        widen([*k_pack, *v_pack, loop], self.wide),
                        launch_of(self.geometry, self.sched), int(t.flops) + flops,
                        tuple(self.scratch.values()))
        return replace(k, host_only=True)   # (both products the micro-kernel's: no sgemm)

    def _key_blocks(self, step: tuple, block: int, rows_above) -> tuple:
        """A fused attention's loop over the blocks of keys, ``step`` each: every block;
        or, under a causal mask (``OnlineSoftmax.limit``, fusion/key_limit.py), the
        blocks the tile's last row takes, then the others only where a check fails:
        before them, the skipped keys' values finite and (an additive mask) their
        scores bounded; after the last block taken, ``rows_above(floor)``, statements
        clearing ``wb_ok`` unless every row's running maximum is above ``floor``. (The
        sums come first, while the output rows hold nothing: the GPU's tile is at the
        edge of its 128 registers.) Skipped or taken, the result is the same
        (key_limit.py)."""
        t, lim = self.sched.gemm, self.sched.key_limit
        nb = -(-t.n // block)
        if lim is None:
            return (Loop("kb", nb, "serial", step),)
        f32, i32 = DType.float32, DType.int32      # (32-bit: key counts; registers)
        last = f"r1 - 1 + {lim.offset}"
        floor = c_literal(lim.floor, f32)
        skipped = (f"wb_khi * {block}", str(t.n))
        sums = self._abs_reduce("wb_tv", self.sched.then.b, skipped,
                                ("0", str(self.sched.then.n)), "+")
        ok = "wb_tv < INFINITY"
        if lim.additive:
            # (each score a sum of k products, each at most max|q| x max|k|)
            scale, bound = c_literal(lim.scale * t.k, f32), c_literal(lim.bound, f32)
            sums += (*self._abs_reduce("wb_tq", t.a, ("r0", "r1"), ("0", str(t.k)), "max"),
                     *self._abs_reduce("wb_tk", t.b, ("0", str(t.k)), skipped, "max"))
            ok += f" && {scale} * wb_tq * wb_tk < {bound}"
        check = (Comment(f"after the tile's last block: every row's maximum above {floor} "
                         "(the masked logits' exp is 0 for each), or the masked blocks "
                         "are taken too"), *rows_above(floor),
                 Assign("wb_kend", f"wb_ok ? wb_khi : {nb}"))
        # (one loop, the check inside it: a second copy of the block's step took the
        # GPU's tile past its 128 registers)
        return (Let("wb_keys", i32, f"{last} < 0 ? 0 : {last} < {t.n} ? {last} : {t.n}"),
                Let("wb_khi", i32, f"(wb_keys + {block - 1}) / {block}"),
                Let("wb_ok", i32, f"wb_khi < {nb}"),
                Comment("the keys past the tile's blocks: their values finite (0 x V adds "
                        "nothing)" + (", their scores bounded (the masked logits stay "
                                      "near the fill)" if lim.additive else "")),
                If("wb_ok", (*sums, Assign("wb_ok", ok))),
                Let("wb_kend", i32, str(nb)),
                Comment(f"the blocks of keys the tile's rows take ({lim.describe()})"),
                Loop("kb", nb, "serial", (*step, If("kb + 1 == wb_khi", check)),
                     stop="wb_kend"))

    def _abs_reduce(self, var: str, op, rows: tuple[str, str], cols: tuple[str, str],
                    how: str) -> tuple:
        """``var`` = the sum (``how`` "+", in any order: an upper bound) or the maximum
        ("max", NaN-propagating) of |x| over rows and columns [lo, hi) of GEMM operand
        ``op`` in batch item bt: on the CPU a loop along its unit stride inside one
        over the other axis (SIMD lanes); on a GPU one loop over the whole rectangle
        dealt out to the block's threads (neighbours along the unit stride), then
        combined across the block."""
        combine = "{0} + {1}" if how == "+" else "wb_fmax({0}, {1})"
        v, f32, i64 = op.view, DType.float32, DType.int64
        # (outer, inner): (variable, [lo, hi), stride, extent), the inner one the unit
        # stride's (the rows', where the operand is stored transposed)
        axes = [("wb_u", rows, v.row_stride, v.rows), ("wb_w", cols, v.col_stride, v.cols)]
        (r, (r0, r1), rs, rn), (c, (c0, c1), cs, cn) = axes[::-1] if v.trans else axes
        at = (Load("wb_x", self.buffers[op.value],
                   f"{v.batch_offset('bt')} + {r} * {rs} + {c} * {cs}"),
              Assign(var, combine.format(var, "fabsf(wb_x)")))
        if not self.device.is_gpu:
            simd = "+" if how == "+" else get_op("reduce_max").combiner.simd_op[0]
            return (Let(var, f32, "0.0f"),
                    Loop(r, rn, "serial", (Loop(c, cn, "block", at, reduction=(var, simd),
                                                start=c0, stop=c1),), start=r0, stop=r1))
        width = f"(({c1}) - ({c0}))"
        return (Let(var, f32, "0.0f"),
                Loop("wb_e", v.rows * v.cols, "block", (
                    Let(r, i64, f"{r0} + wb_e / {width}"),
                    Let(c, i64, f"{c0} + wb_e % {width}"), *at),
                     start="0", stop=f"(({r1}) - ({r0})) * {width}"),
                BlockReduce(var, f32, combine, "0.0f", 0))
