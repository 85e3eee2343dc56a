"""GEMM kernels (a matmul and its epilogue in one C kernel calling the host sgemm per
tile) against the NumPy reference: graphs from the builder and from torch through ONNX,
planned by rules and stitch, on fresh random inputs, outputs poisoned before each run
(the program does it), each kernel held to float32's bound on ``|A| @ |B|``."""
import sys
from dataclasses import replace

import numpy as np
import pytest

import workbench as wb
from workbench.fusion.gemm import attention, tiles
from workbench.fusion.gemm_shape import Operand
from workbench.fusion.mapping import ScheduleKind
from workbench.ops.strided import MatrixView
from workbench.runtime.threads import blas_threads_now
from workbench.session import Session

from plan_checks import check_plan

RNG = np.random.default_rng(7)


def _online_from(monkeypatch, keys: int) -> None:
    """The CPU's online softmax (no causal mask) from ``keys`` keys, for one test."""
    rule = attention.ATTENTION
    monkeypatch.setattr(attention, "ATTENTION",
                        replace(rule, online=replace(rule.online, min_keys=keys)))


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _ffn_gelu():
    # ragged sizes: 2 x 70 rows and 300 columns cut into tiles with short edges
    b = wb.GraphBuilder("ffn_gelu")
    x = b.input("x", (2, 70, 96))
    h = b.matmul(x, b.constant(_w(96, 300), "w")) + b.constant(_w(300), "bias")
    b.output(b.gelu(h), "y")
    return b.build()


def _ffn_residual():
    b = wb.GraphBuilder("ffn_residual")
    x = b.input("x", (1, 33, 257))
    h = b.matmul(x, b.constant(_w(257, 64), "w")) + b.constant(_w(64), "bias")
    b.output(h + b.input("res", (1, 33, 64)), "y")
    return b.build()


def _attention_scores():
    # [B, H, M, K] @ [B, H, K, N], scaled: a batch of GEMMs with their own B each
    b = wb.GraphBuilder("scores")
    q = b.input("q", (2, 3, 40, 16))
    k = b.input("kt", (2, 3, 16, 24))
    b.output(b.matmul(q, k) * 0.25, "s")
    return b.build()


def _ffn_layernorm():
    # BERT's FFN down: bias, residual and LayerNorm finish whole rows of the product;
    # 2 x 37 rows (ragged tiles), 136 columns
    b = wb.GraphBuilder("ffn_layernorm")
    x = b.input("x", (2, 37, 200))
    h = b.matmul(x, b.constant(_w(200, 136), "w")) + b.constant(_w(136), "bias")
    h = h + b.input("res", (2, 37, 136))
    b.output(b.layer_norm(h, b.constant(_w(136), "gamma"), b.constant(_w(136), "beta")), "y")
    return b.build()


def _masked_scores_softmax():
    # attention scores: [B, H, M, K] @ [B, H, K, N] (one B per batch), scaled, a mask
    # broadcast over the heads added, softmax over the keys; the mask is finfo.min
    b = wb.GraphBuilder("scores_softmax")
    q = b.input("q", (2, 3, 40, 16))
    k = b.input("kt", (2, 3, 16, 24))
    mask = np.where(RNG.random((2, 1, 1, 24)) < 0.3, np.finfo(np.float32).min, 0)
    s = b.matmul(q, k) * 0.25 + b.constant(mask.astype(np.float32), "mask")
    b.output(b.softmax(s, axis=-1), "p")
    return b.build()


def _attention():
    # softmax(q kᵀ / 4 + mask) v: a masked attention over 2 x 3 heads of 70 queries
    # (ragged tiles) and 90 keys, fused into one kernel
    b = wb.GraphBuilder("attention")
    q, kt = b.input("q", (2, 3, 70, 16)), b.input("kt", (2, 3, 16, 90))
    v = b.input("v", (2, 3, 90, 24))
    mask = np.where(RNG.random((2, 1, 1, 90)) < 0.3, np.finfo(np.float32).min, 0)
    s = b.matmul(q, kt) * 0.25 + b.constant(mask.astype(np.float32), "mask")
    b.output(b.matmul(b.softmax(s, axis=-1), v), "o")
    return b.build()


def _long_attention(dead=False, merged=False, normalize=None):
    """softmax(q kᵀ / 4 + mask) v over 2 x 2 heads of 50 queries and 600 keys (blocks
    of the online softmax, the last one ragged) with 70 values per head (V in two
    panels). ``dead``: batch 0's first 300 keys masked with -inf (whole blocks with no
    finite logit before the first finite one) and one query of batch 1 masked on every
    key (its softmax is 0/0, NaN, as NumPy's). ``merged``: the heads merged back after
    it ([2, 50, 140]). ``normalize``: the row epilogue instead of the softmax."""
    b = wb.GraphBuilder("long_attention")
    q, kt = b.input("q", (2, 2, 50, 16)), b.input("kt", (2, 2, 16, 600))
    v = b.input("v", (2, 2, 600, 70))
    mask = np.where(RNG.random((2, 1, 50, 600)) < 0.3, np.finfo(np.float32).min, 0)
    mask = mask.astype(np.float32)
    if dead:
        mask[0, :, :, :300] = -np.inf
        mask[1, :, 7, :] = -np.inf
    z = b.matmul(q, kt) * 0.25 + b.constant(mask, "mask")
    o = b.matmul(normalize(b, z) if normalize else b.softmax(z, axis=-1), v)
    if merged:
        o = b.op("reshape", b.op("transpose", o, perm=[0, 2, 1, 3]), shape=[2, 50, 140])
    b.output(o, "o")
    return b.build()


@pytest.mark.parametrize("case", ["plain", "dead_blocks", "merged_heads"])
def test_online_softmax_attention_matches_reference(case, monkeypatch):
    """The online softmax (a block of keys at a time) against NumPy's softmax on fresh
    inputs: within float32's bound of the magnitudes summed, the NaN of a row masked
    on every key where NumPy has it, and nowhere else."""
    from workbench.tolerance import max_rel_error, tolerance
    from workbench.runtime import random_inputs, run_reference
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    _online_from(monkeypatch, 512)
    g = _long_attention(dead=case == "dead_blocks", merged=case == "merged_heads")
    s = Session(g, backend="cpu")
    s.auto("rules")
    (gr,) = s.plan.groups
    assert gr.schedule.then.online is not None, gr.schedule.describe()
    assert "online softmax over blocks of 256 keys" in gr.schedule.describe()
    prog = s.program()
    for seed in (0, 1):
        ins = random_inputs(g, seed)
        got, want = prog.run(ins)["o"], run_reference(g, ins)["o"]
        assert np.array_equal(np.isnan(got), np.isnan(want))
        assert np.isnan(want).any() == (case == "dead_blocks")
        z = (ins["q"] @ ins["kt"]).astype(np.float64) * 0.25 + g.constants["mask"]
        with np.errstate(invalid="ignore"):
            e = np.exp(z - z.max(axis=-1, keepdims=True))
            mags = (e / e.sum(axis=-1, keepdims=True)) @ np.abs(ins["v"])
        if case == "merged_heads":
            mags = mags.transpose(0, 2, 1, 3).reshape(2, 50, 140)
        ok = ~np.isnan(want)
        assert max_rel_error(got[ok], want[ok], mags[ok]) <= tolerance(g.value("o").dtype)


@pytest.mark.parametrize("seed,shape", list(enumerate([
    (2, 3, 1, 1, 1, 8), (1, 2, 5, 135, 12, 20), (2, 1, 7, 256, 64, 13),
    (1, 1, 62, 257, 129, 57), (1, 3, 89, 594, 150, 7), (2, 1, 130, 700, 40, 70)])))
def test_online_softmax_on_random_shapes(seed, shape, monkeypatch):
    """Shapes (batch, heads, queries, keys, values, depth) from one key to several
    blocks, fewer queries than a register block, values over three panels, ragged
    everything; masks -inf at random and (odd seeds) over the first half of the keys:
    NaNs where NumPy has them, the rest within float32's bound of the magnitudes
    summed."""
    from workbench.tolerance import max_rel_error, tolerance
    from workbench.runtime import random_inputs, run_reference
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    _online_from(monkeypatch, 1)
    monkeypatch.setattr(attention, "ATTENTION",          # K and V packed: online
                        replace(attention.ATTENTION, pack_min_keys=1))
    rng = np.random.default_rng(100 + seed)
    n, h, q, keys, d, dk = shape
    scale = float(rng.uniform(0.05, 1.0))
    mask = np.where(rng.random((n, 1, q, keys)) < 0.2, -np.inf, 0).astype(np.float32)
    if seed % 2:
        mask[..., : keys // 2] = -np.inf
    b = wb.GraphBuilder("attention_shapes")
    z = (b.matmul(b.input("q", (n, h, q, dk)), b.input("kt", (n, h, dk, keys))) * scale
         + b.constant(mask, "mask"))
    b.output(b.matmul(b.softmax(z, axis=-1), b.input("v", (n, h, keys, d))), "o")
    g = b.build()
    s = Session(g, backend="cpu")
    s.auto("rules")
    assert [gr.schedule.then.online is not None for gr in s.plan.groups] == [True]
    ins = random_inputs(g, seed)
    got, want = s.program().run(ins)["o"], run_reference(g, ins)["o"]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    zz = (ins["q"].astype(np.float64) @ ins["kt"]) * scale + mask
    with np.errstate(invalid="ignore"):
        e = np.exp(zz - zz.max(axis=-1, keepdims=True))
        mags = (e / e.sum(axis=-1, keepdims=True)) @ np.abs(ins["v"])
    ok = ~np.isnan(want)
    if ok.any():
        assert max_rel_error(got[ok], want[ok], mags[ok]) <= tolerance(g.value("o").dtype)


def test_online_softmax_is_taken_only_where_it_fits(monkeypatch):
    """Rows of ONLINE_MIN_KEYS keys or more, the epilogue exactly a softmax of the
    logits, K and V packed by the micro-kernel (which the rule does from
    CpuAttention.pack_min_keys keys); else whole rows of scores per tile."""
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)

    def online(g):
        s = Session(g, backend="cpu")
        s.auto("rules")
        return [gr.schedule.then.online for gr in s.plan.groups if gr.schedule.then]

    assert online(_long_attention()) == [None]          # 600 keys: below the rule
    _online_from(monkeypatch, 512)
    (o,) = online(_long_attention())
    assert o.block == attention.ATTENTION.online.block and len(o.prefix) == 2   # scale, mask
    assert online(_attention()) == [None]               # 90 keys

    def plain_sum(b, z):         # a row epilogue that is no softmax: z / sum(z)
        return z / b.op("reduce_sum", z, axes=[3], keepdims=True)

    assert online(_long_attention(normalize=plain_sum)) == [None]
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 1 << 30)     # sgemm per tile
    assert online(_long_attention()) == [None]


def test_attention_packs_k_and_v_only_for_long_rows(monkeypatch):
    """K and V packed by every run from CpuAttention.pack_min_keys keys (each pack then
    serves many row tiles); below, sgemm per tile in tiles of at most CpuAttention.rows
    whole rows (what measured faster in the zoo's models)."""
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    for make, packed in [(_attention, ""), (_long_attention, "per run")]:
        s = Session(make(), backend="cpu")
        s.auto("rules")
        sched = _gemm_groups(s)[0].schedule
        assert (sched.gemm.packed_b, sched.then.packed) == (packed, packed), make.__name__
        if not packed:    # (the packed one runs in the online-softmax tests above)
            assert sched.gemm.tile_m <= attention.ATTENTION.rows < sched.gemm.m
            _check(s)


def _attention_scale(g, ins) -> dict:
    """|softmax(scores)| @ |v|: the magnitudes the output's rounding is bounded by (the
    product's signed terms cancel, so |o| itself can be far smaller)."""
    z = (ins["q"] @ ins["kt"]).astype(np.float64) * 0.25 + g.constants["mask"]
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    return {"o": (p / p.sum(axis=-1, keepdims=True)) @ np.abs(ins["v"])}


def _conv1d_gelu():
    # GPT-2's Conv1D: rows flattened, matmul + bias, the batch shape given back, GELU
    # (tanh form), a residual -- both reshapes keep the rows: the first is read in
    # place (a prologue view), the second joins the epilogue
    b = wb.GraphBuilder("conv1d_gelu")
    x = b.input("x", (2, 35, 48))
    h = b.matmul(b.op("reshape", x, shape=[70, 48]), b.constant(_w(48, 96), "w"))
    h = b.op("reshape", h + b.constant(_w(96), "bias"), shape=[2, 35, 96])
    b.output(b.gelu(h, approximate="tanh") + b.input("res", (2, 35, 96)), "y")
    return b.build()


def _check(s: Session, seeds=(0, 1)) -> None:
    """Run the current plan on fresh inputs (conftest's check_plan), attention's output
    measured against the magnitudes summed."""
    scale = ((lambda ins: {"o": _attention_scale(s.graph, ins)["o"]})
             if s.graph.name == "attention" else None)
    check_plan(s, scale, seeds)


def _gemm_groups(s: Session):
    return [gr for gr in s.plan.groups if gr.schedule.kind is ScheduleKind.gemm]


@pytest.mark.parametrize("planner", ["rules", "stitch"])
@pytest.mark.parametrize("make", [_ffn_gelu, _ffn_residual, _attention_scores,
                                  _ffn_layernorm, _masked_scores_softmax, _attention,
                                  _conv1d_gelu])
def test_gemm_kernel_matches_reference(make, planner, packing):
    s = Session(make(), backend="cpu")
    s.auto(planner)
    assert len(s.plan.groups) == 1 and _gemm_groups(s), s.plan.describe()
    constant_b = make in (_ffn_gelu, _ffn_residual, _ffn_layernorm, _conv1d_gelu)
    # the rule packs a weight once; an activation is sgemm's unless asked (blas=0),
    # which packs it by every run (K and V too)
    assert s.plan.groups[0].schedule.gemm.packed_b == ("once" if packing and constant_b
                                                       else "")
    if packing and not constant_b:
        s.set_launch(s.plan.groups[0].nodes[0], blas=0)
        assert s.plan.groups[0].schedule.gemm.packed_b == "per run"
    if make is _attention:      # V with K
        assert s.plan.groups[0].schedule.then.packed == ("per run" if packing else "")
    rows = make in (_ffn_layernorm, _masked_scores_softmax, _attention)
    assert (s.plan.groups[0].schedule.then is not None) == (make is _attention)
    t = s.plan.groups[0].schedule
    assert (t.epilogue is not None) == rows
    if rows:        # whole rows per tile; the row template's reductions over them
        assert t.gemm.tile_n == t.gemm.n and t.epilogue.reductions == 2
    _check(s)


def test_row_epilogue_with_the_product_read_outside():
    """The product is an output too: it stays in its own buffer, the LayerNorm's
    output in another, and both are right."""
    b = wb.GraphBuilder("both_rows")
    x = b.input("x", (30, 40))
    h = b.output(b.matmul(x, b.constant(_w(40, 64), "w")), "h")
    b.output(b.layer_norm(h, b.constant(_w(64), "g"), b.constant(_w(64), "be")), "y")
    s = Session(b.build(), backend="cpu")
    s.auto("rules")
    assert len(s.plan.groups) == 1 and s.plan.groups[0].schedule.epilogue is not None
    _check(s)


def test_product_read_outside_is_written_too():
    b = wb.GraphBuilder("both")
    x = b.input("x", (50, 40))
    h = b.matmul(x, b.constant(_w(40, 30), "w"))
    y = b.tanh(h + 1.0)
    b.output(h, "h")
    b.output(y, "y")
    s = Session(b.build(), backend="cpu")
    s.auto("rules")
    assert len(s.plan.groups) == 1 and _gemm_groups(s)
    _check(s)


def test_epilogue_ending_in_float16_keeps_a_float32_destination():
    b = wb.GraphBuilder("mixed")
    x = b.input("x", (20, 24))
    h = b.output(b.relu(b.matmul(x, b.constant(_w(24, 36), "w"))), "y")
    b.output(b.cast(h, to="float16"), "y16")
    s = Session(b.build(), backend="cpu")
    s.auto("rules")
    assert _gemm_groups(s)
    _check(s)


def test_blas_runs_one_thread_while_the_kernel_runs():
    """The kernel's OpenMP threads each call sgemm: BLAS must not start its own."""
    s = Session(_ffn_residual(), backend="cpu")
    s.auto("rules")
    seen = []
    with s.backend.running():
        seen = blas_threads_now()
    assert seen and all(n == 1 for n in seen)


def test_a_program_of_packed_gemms_leaves_blas_alone(monkeypatch):
    """Every product the micro-kernel's (attention's K and V packed by the run): the
    kernel takes no sgemm and the program's runs leave BLAS's threads as they are;
    with sgemm per tile, BLAS runs one thread while the program runs."""
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s = Session(_attention(), backend="cpu")
    s.auto("rules")
    s.set_launch(s.plan.groups[0].nodes[0], blas=0)
    prog = s.program()
    assert [(ck.kernel.blas, ck.kernel.host_only) for ck in prog.compiled] == [("", True)]
    assert not prog.calls_blas
    before = blas_threads_now()
    with s.backend.running(prog.calls_blas):
        assert blas_threads_now() == before
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 1 << 30)
    s = Session(_attention(), backend="cpu")
    s.auto("rules")
    prog = s.program()
    assert [(ck.kernel.blas, ck.kernel.host_only) for ck in prog.compiled] == [("sgemm", True)]
    assert prog.calls_blas
    with s.backend.running(prog.calls_blas):
        assert all(n == 1 for n in blas_threads_now())


@pytest.fixture(scope="module")
def onnx_blocks(tmp_path_factory):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from torch import nn

    torch.manual_seed(0)

    class Up(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(48, 80)

        def forward(self, x):
            return nn.functional.gelu(self.fc(x))

    class DownResidual(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(80, 48)

        def forward(self, h, x):
            return self.fc(h) + x

    d = tmp_path_factory.mktemp("onnx")
    out = {}
    for name, mod, shapes in (("up", Up(), [(2, 9, 48)]),
                              ("down", DownResidual(), [(2, 9, 80), (2, 9, 48)])):
        args = tuple(torch.randn(*sh) for sh in shapes)
        path = d / f"{name}.onnx"
        torch.onnx.export(mod.eval(), args, str(path),
                          input_names=[f"in{i}" for i in range(len(args))],
                          output_names=["out"])
        out[name] = path
    return out


@pytest.mark.slow   # (torch blocks exported to ONNX)
@pytest.mark.parametrize("planner", ["rules", "stitch"])
@pytest.mark.parametrize("block", ["up", "down"])
def test_torch_blocks_through_onnx(onnx_blocks, block, planner):
    s = Session(str(onnx_blocks[block]), backend="cpu")
    s.auto(planner)
    assert _gemm_groups(s), s.plan.describe()
    _check(s)


def test_packed_b_is_chosen_for_a_constant_on_wide_vectors():
    """B packed only where it pays, on a CPU whose compiler targets 256-bit vectors or
    wider: once where B is a constant (a weight: packed once serves every run); where
    it is an input (the attention's keys) it could be packed by every run
    (``tiles.packs``) but the rule leaves it to sgemm (the online softmax aside) -- also
    where B's batch is broadcast in part (one pack per distinct matrix); a GPU plan has
    no GEMM kernel."""
    from workbench.device import H100
    from workbench.fusion.planners import run_planner
    from workbench.runtime.calibrate import cpu_device
    for make, pack in [(_ffn_gelu, "once"), (_attention_scores, "")]:
        g = make()
        for width, want in [(64, pack), (32, pack), (16, ""), (0, "")]:
            plan, _ = run_planner("rules", g, device=cpu_device().with_(vector_bytes=width))
            sched = next(gr.schedule for gr in plan.groups
                         if gr.schedule.kind is ScheduleKind.gemm)
            assert sched.gemm.packed_b == want, (make.__name__, width)
            assert (f"B packed {pack}" in sched.describe()) == bool(want)
    wide = cpu_device().with_(vector_bytes=64)
    kt = Operand.whole("kt", (2, 3, 16, 24))
    assert tiles.packs(_attention_scores(), kt, wide) == "per run"
    k = Operand(
        "k", MatrixView(0, ((2, 0), (3, 96 * 8)), 8, 96, 1, 8))   # [2 (broadcast), 3]
    assert tiles.packs(_attention_scores(), k, wide) == "per run"
    assert k.view.distinct.batch == ((3, 96 * 8),) and k.view.distinct_index("bt") == "bt % 3"
    assert not tiles.packs(_ffn_gelu(), Operand.whole("w", (96, 300)), H100)


@pytest.mark.parametrize("groups,rep", [(2, 2), (1, 4), (3, 2)])
def test_grouped_query_attention_packs_each_key_value_head_once(groups, rep, monkeypatch):
    """Grouped-query attention (LLaMA: K and V of ``groups`` heads, each repeated for
    ``rep`` query heads by an expand, a stride-0 view): the online softmax packs K and
    V once per key-value head, and each query head's tiles read its group's packs --
    the reference's result, and the V pack is sized per key-value head."""
    from workbench.codegen.microkernel import packed_numel
    from workbench.testing.fuzz import check_plan as check_kernels
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s, d, heads = 300, 16, groups * rep
    b = wb.GraphBuilder("gqa")
    q = b.input("q", (1, heads, s, d))
    k, v = b.input("k", (1, groups, s, d)), b.input("v", (1, groups, s, d))

    def repeat(x):              # [1, g, s, d] -> [1, g x rep, s, d], as LLaMA does
        x = b.op("expand", b.op("unsqueeze", x, axes=[2]), shape=[1, groups, rep, s, d])
        return b.op("reshape", x, shape=[1, heads, s, d])
    z = b.matmul(q, b.op("transpose", repeat(k), perm=[0, 1, 3, 2])) * 0.25
    b.output(b.matmul(b.softmax(z, axis=-1), repeat(v)), "o")
    g = b.build()
    sess = Session(g, backend="cpu")
    sess.auto("rules")
    (gr,) = [x for x in sess.plan.groups if x.schedule.then is not None]
    sess.set_launch(gr.id, online=1)
    (gr,) = [x for x in sess.plan.groups if x.schedule.then is not None]
    sc = gr.schedule
    assert sc.then.online is not None and sc.then.packed, sc.describe()
    assert any(st == 0 and e > 1 for e, st in sc.then.b.view.batch) == (rep > 1)
    assert check_kernels(sess, sess.inputs, sess.reference, cuda=True) is None
    (pack_v,) = [x for x in sess.kernel(gr.id).params if x.name.endswith("pack_v")]
    assert pack_v.numel == groups * packed_numel(s, d, once=False)


def test_packed_program_run_from_threads_at_once(monkeypatch):
    """A fresh program's first runs, four at once from Python threads: the packing is
    done by one of them while the others wait for it (its state word), so every run
    gives the reference's answer."""
    import threading
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    from workbench.runtime import random_inputs, run_reference
    g = _ffn_layernorm()
    s = Session(g, backend="cpu")
    s.auto("rules")
    assert _gemm_groups(s)[0].schedule.gemm.packed_b
    prog = s.program()
    ins = random_inputs(g, 3)
    ref = run_reference(g, ins)["y"]
    outs, start = [None] * 4, threading.Barrier(4)

    def run(i):
        start.wait()
        outs[i] = prog.run(ins, keep_all=True)["y"]
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in outs:
        np.testing.assert_allclose(o, ref, rtol=2e-5, atol=2e-5)


@pytest.fixture
def fresh_weights(monkeypatch):
    """The graphs' weights drawn from a fresh generator, whatever ran before (the
    plan-level check on a LayerNorm's output is near float32's tolerance for some
    weights; these tests are about the launch, not about those)."""
    monkeypatch.setattr(sys.modules[__name__], "RNG", np.random.default_rng(11))


def _launched(make, planner="rules", **params):
    s = Session(make(), backend="cpu")
    s.auto(planner)
    (gr,) = _gemm_groups(s)
    s.set_launch(gr.nodes[0], **params)
    (gr,) = _gemm_groups(s)
    assert dict(gr.forced_launch) == params
    return s, gr.schedule


@pytest.mark.parametrize("params", [{"tile_m": 16}, {"tile_n": 64}, {"tile_m": 5, "tile_n": 128},
                                    {"blas": 1}, {"tile_m": 1000}])
def test_gemm_launch_parameters_run_and_match(params, monkeypatch, fresh_weights):
    """What the tuner sets on a GEMM kernel (tile sizes, sgemm in place of the
    micro-kernel) gives the kernel it says, and that kernel matches the reference."""
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s, sched = _launched(_ffn_gelu, **params)
    t = sched.gemm
    assert t.packed_b == ("" if params.get("blas") == 1 else "once")
    assert t.tile_m == min(params.get("tile_m", t.tile_m), t.m)
    assert t.tile_n == params.get("tile_n", t.tile_n)
    _check(s)


def test_gemm_launch_on_whole_rows_attention_and_convolutions(monkeypatch, fresh_weights):
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s, sched = _launched(_ffn_layernorm, tile_m=8)          # whole rows: rows only
    assert sched.gemm.tile_m == 8 and sched.gemm.tile_n == sched.gemm.n
    _check(s)
    # attention: the online softmax forced below the rule's key count, and off again,
    # each with its tiles; sgemm for both products
    s, sched = _launched(_attention, online=1, tile_m=24)
    assert sched.then.online is not None and sched.gemm.tile_m == 24
    _check(s)
    s, sched = _launched(_attention, blas=1)
    assert not sched.gemm.packed_b and not sched.then.packed and sched.then.online is None
    _check(s)
    # a convolution's patches for the micro-kernel (blas=0; the rule computes this one
    # directly): its columns, its filters (each tile gathers its patches)
    s, sched = _launched(_conv1d_relu, blas=0, tile_n=7)
    assert sched.gemm.im2col is not None and sched.gemm.tile_n == 7
    _check(s)
    s, sched = _launched(_conv1d_relu, blas=0, tile_m=4)
    assert sched.gemm.tile_m == 4 and sched.gemm.row_tiles == 3
    _check(s)
    s, sched = _launched(_conv1d_relu, blas=1)              # its patches for sgemm
    assert sched.gemm.packed_b == "" and sched.gemm.im2col is not None
    _check(s)


def _conv1d_relu():
    b = wb.GraphBuilder("conv1d_relu")
    x = b.input("x", (2, 6, 40))
    b.output(b.relu(b.op("conv", x, b.constant(_w(10, 6, 3), "w"), pads=[1, 1])), "y")
    return b.build()


@pytest.mark.parametrize("make,params,why", [
    (_ffn_gelu, {"threads": 128}, "no launch parameter 'threads'"),
    (_ffn_gelu, {"tile_n": 96}, "multiple of 64"),
    (_ffn_gelu, {"tile_m": 0}, "out of range"),
    (_ffn_gelu, {"blas": 2}, "0 or 1"),
    (_ffn_gelu, {"online": 1}, "online applies to a fused attention"),
    (_ffn_layernorm, {"tile_n": 64}, "spans all columns"),
    (_attention, {"online": 1, "blas": 1}, "no online form"),
    (_conv1d_relu, {"online": 0}, "no softmax"),
    (_conv1d_relu, {"tile_n": 300_000}, None),           # the whole extent: allowed
])
def test_gemm_launch_refused_with_the_reason(make, params, why, monkeypatch):
    """A parameter the kernel does not take, or a value it cannot honour, is refused
    with the reason, and the plan stays as it was."""
    from workbench.errors import FusionRefused
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s = Session(make(), backend="cpu")
    s.auto("rules")
    before = s.plan
    if why is None:
        s.set_launch(_gemm_groups(s)[0].nodes[0], **params)
        return
    with pytest.raises(FusionRefused, match=why):
        s.set_launch(_gemm_groups(s)[0].nodes[0], **params)
    assert s.plan is before


def test_a_tile_too_large_for_a_threads_buffers_is_refused(monkeypatch):
    """A fused attention's scores live on each thread's stack: a tile_m past
    CpuTiles.scratch is refused, not a crash."""
    from workbench.errors import FusionRefused
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    monkeypatch.setattr(attention, "CPU_TILES", replace(tiles.CPU_TILES, scratch=40 * 90))
    s = Session(_attention(), backend="cpu")
    s.auto("rules")
    ref = _gemm_groups(s)[0].nodes[0]
    s.set_launch(ref, tile_m=40)
    with pytest.raises(FusionRefused, match="more than 3600"):
        s.set_launch(ref, tile_m=41)


def test_blas_0_is_refused_where_no_micro_kernel_runs(monkeypatch):
    from workbench.errors import FusionRefused
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 1 << 30)
    s = Session(_ffn_gelu(), backend="cpu")
    s.auto("rules")
    with pytest.raises(FusionRefused, match="no micro-kernel to choose"):
        s.set_launch(_gemm_groups(s)[0].nodes[0], blas=0)
