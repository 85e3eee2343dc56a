"""Fused attention as one GEMM kernel: two matmuls, the first with an epilogue reducing
rows (a scale, a mask, a softmax), the second taking that epilogue's result as its left
operand (``softmax(Q Kᵀ) V``), its output written through the transposes and reshapes
after it (the heads merged back) -- or why not.

On the CPU each tile of rows holds whole rows of scores, or with the softmax's online
form (:mod:`.softmax`) a block of keys at a time, the blocks a causal mask hides
skipped; K and V are packed for the micro-kernel by every run where the rows are long,
else multiplied by sgemm. On a GPU a block of 64 queries takes 64 keys at a time
(FlashAttention's recurrence). The tuned sizes are one frozen :class:`CpuAttention`,
``ATTENTION``, whose rule picks the softmax's blocks by the mask.

    >>> ATTENTION.blocks(causal=True).block, ATTENTION.blocks(causal=False).min_keys
    (128, 1024)
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...device import Device
from ...dtypes import DType
from ...errors import FusionRefused
from ...ir import Graph
from ...ops import get_op
from ..gemm_shape import PACK_PER_RUN, GemmShape, OnlineSoftmax, Operand, SecondGemm
from ..mapping import ScheduleKind
from ..schedule import GroupIO, Schedule, group_io
from .gpu_tiles import gpu_tiles, staged
from .launch import GemmLaunch, set_tile
from .legality import RowAnalysis, takes_dtype
from .matmul import analyze_matmul
from .operands import (not_stored, operand, operand_chain, problem, prologue, result_views,
                       written_through)
from .softmax import online_softmax
from .tiles import CPU_TILES, PANEL, packs, rows_per_tile


@dataclass(frozen=True)
class SoftmaxBlocks:
    """The online softmax's blocks on the CPU: ``block`` keys at a time, in place of
    whole rows of scores per tile from ``min_keys`` keys."""
    block: int
    min_keys: int


@dataclass(frozen=True)
class CpuAttention:
    """A fused attention's tuned sizes on the CPU (``ATTENTION``)."""
    # the fewest keys for which a fused attention packs K and V by every run (see
    # analyze_attention), and the rows per tile of sgemm's whole rows of scores below
    # that (fewer where the rows are long, see cpu_tiling): LLaMA's attention (128
    # keys) 0.257 ms in tiles of 64 rows, 0.305 in one of 128; BERT, GPT-2 and Whisper
    # within 3% either way; ViT (65 keys) 0.115 in two tiles, 0.105 in one
    pack_min_keys: int = 256
    rows: int = 64
    # keys per block of the online softmax (four panels of the packed Kᵀ), and the
    # fewest keys for which it replaces whole rows of scores per tile. Measured on 2
    # cores (4 heads of 64, side by side): whole rows 146 ms at 4096 keys against 126
    # online (124 in blocks of 512, 131 in blocks of 128), 34.0 against 32.0 at 2048,
    # 8.5 against 8.2 at 1024; at 512 and 639 (Wav2Vec2) the two are within the noise
    online: SoftmaxBlocks = SoftmaxBlocks(block=4 * PANEL, min_keys=1024)
    # under a causal mask (fusion/key_limit.py) the online softmax skips the blocks
    # past the diagonal, and so takes over from whole rows at fewer keys, in smaller
    # blocks. Measured on 2 cores (8 heads of 64, causal, side by side): whole rows
    # 1.16 ms at 256 keys against 0.93 online in blocks of 128 (1.12 in blocks of 256:
    # one block, nothing skipped); 4.03 against 3.04 at 512; at 128 keys whole rows win
    # (0.30 against 0.38)
    causal: SoftmaxBlocks = SoftmaxBlocks(block=2 * PANEL, min_keys=256)

    def blocks(self, causal: bool) -> SoftmaxBlocks:
        """The online softmax's blocks: smaller under a causal key limit."""
        return self.causal if causal else self.online


ATTENTION = CpuAttention()

# a GPU's fused attention: a block of 64 queries takes 64 keys at a time (the scores'
# block in registers, 4 x 4 a thread; the probabilities through 17 KB of shared memory
# to the second product), its output rows up to 128 values (8 a thread) in registers
GPU_ATTENTION_SHAPE = (64, 64)      # (its tile in GPU_GEMM_TILES or GPU_TENSOR_TILES)
GPU_ATTENTION_MAX_VALUES = 128


@dataclass(frozen=True)
class _Fused:
    """A fused attention's parts: the first product's kernel (its nodes and what it
    reads and writes) and schedule, the two matmuls, V read in place, the layout ops
    the output is written through, and every view the kernel reads through."""
    first: tuple
    io: GroupIO
    sub: Schedule
    mm1: object
    mm2: object
    b: Operand
    after: list
    views: tuple


def analyze_attention(g: Graph, ns, io: GroupIO, device: Device, rows: RowAnalysis | None,
                      mms, lc: GemmLaunch = GemmLaunch(), tf32: bool = False) -> Schedule:
    """Two matmuls: the first with an epilogue reducing rows, the second reading that
    epilogue's result (``softmax(Q Kᵀ) V``) as its left operand, which no one outside
    the kernel reads: the first's gemm schedule with ``then``, or FusionRefused."""
    members = {n.id for n in ns}
    mm2, v_views = _second_product(g, mms, members, io)
    mm1 = next(m for m in mms if m is not mm2)
    first, io1, after = _first_kernel(g, ns, io, members, mm1, mm2, v_views)
    # K and V packed by every run for the micro-kernel where the rows are long (each
    # pack then serves a head's many row tiles; the online softmax needs it), else
    # multiplied by sgemm per tile. Side by side in the zoo's models (2 cores, small
    # size), the fused attention kernel: 65 keys (ViT) 0.177 ms packed, 0.115 by sgemm
    # (K's second panel held one key); 128 keys 2-28% faster by sgemm (BERT, GPT-2,
    # Whisper, LLaMA); 639 keys (Wav2Vec2) 6.81 packed, 7.3 by sgemm
    keys = g.value(mm1.outputs[0]).shape[-1]
    half = g.value(mm2.outputs[0]).dtype is not DType.float32   # (packed: see GEMM_DTYPES)
    per_run = lc.online == 1 or keys >= ATTENTION.pack_min_keys or half
    p = mm2.inputs[0]
    if device.is_gpu:
        sub = _gpu_scores(g, first, mm1, p, lc, device, tf32)
    else:
        # (the first product's tiles are set below, once the softmax's form is known)
        sub = analyze_matmul(g, first, io1, device, mm1, rows,
                             replace(lc, tile_m=0, online=-1, skip=-1), per_run=per_run,
                             tf32=tf32)
        if sub.epilogue is None or sub.gemm.dest != p:
            raise FusionRefused(f"{mm2.id} (matmul) joins a GEMM kernel only after an "
                                f"epilogue reducing rows whose result {p} it reads "
                                "(attention)")
    b = _values(g, mm1, mm2, sub.gemm, members, device, tf32)
    t = sub.gemm
    views = t.views + tuple(x.id for x in v_views + after if x.id not in t.views)
    f = _Fused(first, io1, sub, mm1, mm2, b, after, views)
    if device.is_gpu:
        return _on_gpu(g, f, lc)
    return _on_cpu(g, f, lc, device, per_run, half)


def _second_product(g: Graph, mms, members, io: GroupIO) -> tuple:
    """The matmul reading the other's row epilogue (the one whose left operand the
    kernel computes) and V's views, or FusionRefused: V read from memory through
    views that nothing outside reads, the probabilities kept in the tile."""
    def computed(m) -> bool:       # the left operand is made in the kernel, not a view
        p = g.producer.get(m.inputs[0])
        return p is not None and p.id in members and get_op(p.op).view is None

    inside = [m for m in mms if computed(m)]
    if len(inside) != 1:
        raise FusionRefused(f"{mms[1].id} (matmul) is a second library call in the kernel; "
                            "two matmuls share one only as attention (the second reading "
                            "the first's row epilogue)")
    mm2 = inside[0]
    p, v = mm2.inputs
    try:
        v_views = operand_chain(g, v, members)
    except FusionRefused:
        raise FusionRefused(f"{mm2.id} (matmul): its right operand {v} is computed inside "
                            "the kernel; a fused attention reads V from memory (through "
                            "views only)") from None
    if p in io.outputs:
        raise FusionRefused(f"{mm2.id} (matmul): {p} is read outside the kernel too; a "
                            "fused attention keeps the probabilities in the tile")
    not_stored(v_views, io)
    return mm2, v_views


def _first_kernel(g: Graph, ns, io: GroupIO, members, mm1, mm2, v_views) -> tuple:
    """The first product's kernel -- all but the second matmul, V's own views (a split
    giving Q, K and V is the first's view too) and the views after the second -- and
    what it reads and writes: what only V's views read from it is read in the kernel,
    not written out, and the probabilities are its output. Also the views after."""
    own = [x for x in v_views if x not in prologue(g, mm1, members)]
    after = result_views(g, mm2, members, io)
    first = tuple(n for n in ns if n is not mm2 and n not in own and n not in after)
    io1 = group_io(g, tuple(n.id for n in first))
    mine = {x.id for x in own}
    p = mm2.inputs[0]
    io1 = replace(io1, outputs=tuple(o for o in io1.outputs if o in g.outputs or any(
        c.id not in members or (c.id not in mine and c is not mm2) for c in g.consumers[o])
        or o == p))
    return first, io1, after


def _values(g: Graph, mm1, mm2, t: GemmShape, members, device: Device, tf32: bool) -> Operand:
    """V read in place (:func:`.operands.operand`), or FusionRefused: the second product
    in the first's dtype, a matrix product of the tiles' rows over as many batches,
    and V no constant."""
    p, v = mm2.inputs
    pv, vv, out = g.value(p), g.value(v), g.value(mm2.outputs[0])
    first_dtype = g.value(mm1.outputs[0]).dtype
    if not takes_dtype(out.dtype, device, tf32) or out.dtype is not first_dtype:
        raise FusionRefused(f"{mm2.id} (matmul) is {out.dtype.value} after a "
                            f"{first_dtype.value} product: a fused attention takes float32 "
                            "or bfloat16 (or float16 on a GPU's tensor cores) throughout")
    if len(vv.shape) < 2 or vv.shape[-2] != t.n:
        raise FusionRefused(f"{mm2.id} (matmul): {list(pv.shape)} @ {list(vv.shape)} is not "
                            "a matrix product of the tiles' rows")
    if tuple(out.shape[:-1]) != tuple(pv.shape[:-1]):
        raise FusionRefused(f"{mm2.id} (matmul): V {list(vv.shape)} broadcasts the "
                            f"probabilities {list(pv.shape)} to more batches")
    b = operand(g, mm2, v, members, out.shape)
    if b.value in g.constants:
        # (a weight after a row epilogue is a projection, not attention: LLaMA's last
        # RMSNorm then its LM head, whose 768 x 30522 weights, packed by every run and
        # read by every row tile, took 66 ms where the two kernels take 33)
        raise FusionRefused(f"{mm2.id} (matmul): its right operand {v} is a constant (a "
                            "weight); a fused attention reads V again for every tile of "
                            "rows (on the CPU: packs it by every run), its own GEMM once")
    return b


def _written(g: Graph, f: _Fused) -> Operand | None:
    """Where the second product is written: through the views after it, or in place."""
    return written_through(g, f.mm2, f.after) if f.after else None


def _second(g: Graph, f: _Fused, t: GemmShape, packed: str, online: OnlineSoftmax | None,
            out: Operand | None) -> Schedule:
    """The first product's schedule ``t`` with the second product after it."""
    p, v = f.mm2.inputs
    n, d = g.value(v).shape[-2:]
    return replace(f.sub, gemm=replace(t, views=f.views),
                   then=SecondGemm(p, f.b, n, d, f.mm2.outputs[0], out, packed, online))


def _on_gpu(g: Graph, f: _Fused, lc: GemmLaunch) -> Schedule:
    """A GPU's fused attention: the online softmax only, a block tile's columns of keys
    at a time, its output rows in registers."""
    t, mm2 = f.sub.gemm, f.mm2
    d = g.value(mm2.inputs[1]).shape[-1]
    online = online_softmax(g, f.first, f.mm1, t, mm2.inputs[0], f.io, t.block.n, cast=True)
    if online is None:
        raise FusionRefused(f"{mm2.id} (matmul): on a GPU a fused attention takes the "
                            "online softmax only (FlashAttention's): elementwise logits "
                            "then exactly a softmax over the keys, read by nothing but "
                            "the second product")
    if d > GPU_ATTENTION_MAX_VALUES:
        raise FusionRefused(f"{mm2.id} (matmul): rows of {d} values; a GPU's fused "
                            "attention keeps each thread's part of its output rows in "
                            f"registers, up to {GPU_ATTENTION_MAX_VALUES} values a row")
    out = _written(g, f)      # (where the product goes is checked before the skip)
    return _second(g, f, t, "", _skipping(online, lc, mm2), out)


def _on_cpu(g: Graph, f: _Fused, lc: GemmLaunch, device: Device, per_run: bool,
            half: bool) -> Schedule:
    """A CPU's fused attention: V packed with K for the micro-kernel (or both by
    sgemm), the softmax over whole rows of scores per tile or online (:func:`_online`),
    and the tiles of rows that form takes."""
    t, mm2 = f.sub.gemm, f.mm2
    d = g.value(mm2.inputs[1]).shape[-1]
    # V is packed by every run with K (never a constant: refused above)
    v_packed = (PACK_PER_RUN if lc.packs(packs(g, f.b, device), f"{mm2.id}'s V", per_run)
                else "")
    if half and not v_packed:
        raise FusionRefused(f"{mm2.id} (matmul) is {g.value(mm2.outputs[0]).dtype.value}: "
                            "only the micro-kernel multiplies it, and its V is not packed "
                            "here (blas=1, or vectors narrower than the micro-kernel's), "
                            "so the attention is not fused")
    online = _online(g, f, t, v_packed, lc)
    if online is not None:     # tiles of rows as a lone GEMM's: no whole rows to hold
        t = replace(t, tile_m=rows_per_tile(t.batch, t.m, CPU_TILES.m, device.units))
    elif not t.packed_b:       # sgemm's whole rows: at most ATTENTION.rows of them
        t = replace(t, tile_m=rows_per_tile(t.batch, t.m, min(ATTENTION.rows, t.tile_m),
                                            device.units))
    if lc.tile_m:
        t = replace(t, tile_m=set_tile("tile_m", lc.tile_m, t.m, 1))
        held = t.tile_m * ((online.block + d) if online is not None else t.n)
        if held > CPU_TILES.scratch:
            raise FusionRefused(f"tile_m={lc.tile_m}: each thread would hold {held} floats "
                                f"of scores and output rows, more than {CPU_TILES.scratch}")
    return _second(g, f, t, v_packed, online, _written(g, f))


def _online(g: Graph, f: _Fused, t: GemmShape, v_packed: str,
            lc: GemmLaunch) -> OnlineSoftmax | None:
    """The CPU's online softmax, where its epilogue has the form and K and V are packed
    (``online=1`` insists), over blocks the mask picks (``CpuAttention.blocks``: a
    causal mask's blocks past the diagonal skipped, smaller blocks skipping more), from
    as many keys as they pay for (``online=0`` declines); None: whole rows of scores."""
    mm2 = f.mm2
    online = (online_softmax(g, f.first, f.mm1, t, mm2.inputs[0], f.io,
                             ATTENTION.online.block, cast=True)
              if t.packed_b and v_packed else None)
    if lc.online == 1 and online is None:
        raise FusionRefused(f"online=1: the softmax before {mm2.id} (matmul) has no online "
                            "form here (it needs K and V packed for the micro-kernel and an "
                            "epilogue of elementwise logits then exactly a softmax over the "
                            "keys, read by nothing but the second product)")
    if online is not None:
        blocks = ATTENTION.blocks(causal=online.limit is not None)
        online = replace(online, block=blocks.block)
        if lc.online == 0 or lc.online == -1 and t.n < blocks.min_keys:
            online = None
    return _skipping(online, lc, mm2)


def _skipping(online: OnlineSoftmax | None, lc: GemmLaunch, mm2) -> OnlineSoftmax | None:
    """The online softmax as ``skip`` sets it: 0 drops its key limit (every block
    taken, the blocks as the limit chose them); 1 needs one, or FusionRefused."""
    if lc.skip == 1 and (online is None or online.limit is None):
        raise FusionRefused(f"skip=1: the softmax before {mm2.id} (matmul) has no causal "
                            "key limit here (no constant causal mask among its logits, or "
                            "no online softmax to skip blocks of)")
    return replace(online, limit=None) if lc.skip == 0 and online is not None else online


def _gpu_scores(g: Graph, first, mm, p: str, lc: GemmLaunch, device: Device,
                tf32: bool) -> Schedule:
    """The scores' product of a fused attention on a GPU (its second product and softmax
    are added by analyze_attention): a thread block per GPU_ATTENTION_SHAPE tile of
    queries, taking the keys a block tile's columns at a time (the online softmax),
    float32 (both products on tensor cores in TF32 where the device's matmuls may be)."""
    block = gpu_tiles(g, mm, device, tf32, "a GPU's fused attention")[GPU_ATTENTION_SHAPE]
    if replace(lc, stages=0, skip=-1) != GemmLaunch():
        raise FusionRefused("a GPU's fused attention takes stages and skip only (its tiles "
                            f"are {block.m} x {block.n}, its softmax online)")
    block = staged(block, lc)
    if block.stages == 2 and block.operands.is_half:
        raise FusionRefused("stages=2 on a fused attention in a half type: its next panels "
                            "in registers beside the scores, the output rows and the "
                            "fragments spill (bfloat16: 64 bytes at 128 registers)")
    members = {n.id for n in first}
    views = prologue(g, mm, members)
    shape = g.value(mm.outputs[0]).shape
    a, b = (operand(g, mm, i, members, shape) for i in mm.inputs)
    batch, m, n, k, a = problem(a, b)
    t = GemmShape(batch, m, n, k, a, b, block.m, max(n, 1), mm.outputs[0], p,
                  views=tuple(v.id for v in views), block=block)
    return Schedule(ScheduleKind.gemm, elements=g.value(mm.outputs[0]).numel, gemm=t)
