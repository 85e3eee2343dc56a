"""An activation B packed into the micro-kernel's panels once per run where many row
tiles read it (fusion/gemm/right_pack.py: a training step's weight gradients, dy^T @
x), or with one row tile by each tile before its product: which kernels do, their results against NumPy on fresh random inputs (checked
runs: outputs poisoned first), and the pack counted alike by the cost model's features
and the kernel IR."""
from dataclasses import replace

import numpy as np
import pytest

import workbench as wb
from workbench.codegen import lower_plan
from workbench.codegen.microkernel import MICRO_KERNEL_C
from workbench.device import assumed_cpu
from workbench.fusion.analysis import analyze
from workbench.fusion.features import features
from workbench.fusion.features import L2_SPEEDUP
from workbench.fusion.gemm import right_pack, transposed
from workbench.fusion.gemm.left_pack import left_pack_words
from workbench.fusion.plan import Group
from workbench.fusion.gemm_shape import PACK_ONCE, PACK_PER_RUN
from workbench.fusion.gemm.tiles import micro_kernel_fits

from tests.codegen.gemm_cases import one_gemm



@pytest.fixture(autouse=True)
def _b_packed_not_transposed(monkeypatch):
    """This module's subject is B packed per run; a product of one row tile is made
    transposed instead where that rule is on (tests/codegen/test_transposed_product.py),
    so it is off here."""
    monkeypatch.setattr(transposed, "TRANSPOSED",
                        replace(transposed.TRANSPOSED, enabled=False))


# 256-bit vectors or wider: B packed, the micro-kernel multiplies (fusion/gemm/tiles.py)
WIDE = assumed_cpu("test cpu", 2).with_(vector_bytes=64)
NARROW = assumed_cpu("test cpu", 2).with_(vector_bytes=16)


def _product(m, k, n, batch=(), ta=False, tb=False, epilogue=False, const_b=False):
    """a @ b, both graph inputs (a training step's activations and weights), each
    optionally read through a transpose; optionally relu after."""
    g = wb.GraphBuilder("product")
    nb = len(batch)
    swap = [*range(nb), nb + 1, nb]
    a = g.input("a", (*batch, k, m) if ta else (*batch, m, k))
    if const_b:
        b = g.constant(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32), "b")
    else:
        b = g.input("b", (*batch, n, k) if tb else (*batch, k, n))
    y = g.matmul(g.op("transpose", a, perm=swap) if ta else a,
                 g.op("transpose", b, perm=swap) if tb and not const_b else b)
    g.output(g.relu(y) if epilogue else y, "y")
    return g.build()


def _packed(g, device=WIDE):
    return analyze(g, tuple(n.id for n in g.nodes), device=device).gemm.packed_b


@pytest.mark.parametrize("m,k,n,kw,packed", [
    (768, 128, 768, dict(ta=True), PACK_PER_RUN),      # dW of a projection: 6 row tiles
    (3072, 128, 768, dict(ta=True), PACK_PER_RUN),     # dW of the FFN: 24 row tiles
    (520, 24, 70, dict(batch=(2,)), PACK_PER_RUN),     # a B per batch item, 5 row tiles each
    (128, 768, 3072, dict(tb=True), PACK_PER_RUN),     # one row tile, W^T: 8 x 8 blocks
    (128, 768, 3072, {}, PACK_PER_RUN),                # ... W untransposed (dy @ W)
    (128, 768, 768, dict(tb=True), PACK_PER_RUN),      # ... 4 column tiles of W^T
    (128, 768, 768, {}, ""),                           # ... of W untransposed: sgemm
    (128, 3072, 768, dict(tb=True), PACK_PER_RUN),     # ... W^T packed 256 rows of k at a time
    (128, 3072, 768, {}, ""),                          # ... W, 4 column tiles: sgemm
    (384, 64, 256, {}, ""),                            # three row tiles: too few
    (768, 128, 768, dict(const_b=True), PACK_ONCE),    # a constant: packed once for good
])
def test_which_products_pack_b_per_run(m, k, n, kw, packed):
    g = _product(m, k, n, **kw)
    assert _packed(g) == packed
    # where the micro-kernel does not run (128-bit vectors: sgemm per tile), never
    assert not micro_kernel_fits(NARROW) and _packed(g, NARROW) == ""


def test_whole_row_tiles_keep_sgemm_and_the_one_tile_pack_is_not_charged():
    # an epilogue reducing rows: every tile spans all 768 columns, so each reads all of
    # W^T (packed per run, read by both tiles)
    g = wb.GraphBuilder("product")
    a, w = g.input("a", (128, 768)), g.input("b", (768, 768))
    y = g.matmul(a, g.op("transpose", w, perm=[1, 0]))
    g.output(g.softmax(y, axis=-1), "y")
    g = g.build()
    s = analyze(g, tuple(n.id for n in g.nodes), device=WIDE)
    assert s.epilogue is not None and s.gemm.tile_n == 768 and s.gemm.packed_b == ""
    # the FFN's up-projection alone packs W^T per run (12 column tiles), and its memory
    # time is priced as sgemm per tile's is (which packs W^T once too, unpriced) plus
    # only A's slivers packed; its scratch bytes still count the pack, as its kernel does
    g2 = _product(128, 768, 3072, tb=True)
    group = Group("k", tuple(n.id for n in g2.nodes),
                  analyze(g2, tuple(n.id for n in g2.nodes), device=WIDE))
    sgemm = Group("k", group.nodes, analyze(g2, group.nodes, device=WIDE,
                                            launch=(("blas", 1),)))
    assert group.schedule.gemm.packed_b == PACK_PER_RUN and sgemm.schedule.gemm.packed_b == ""
    f, f1 = features(g2, group, WIDE), features(g2, sgemm, WIDE)
    a_words = left_pack_words(group.schedule.gemm)      # (A's 128 rows in slivers of 6)
    # (each tile packs 256 rows of k of its panels at a time into its part of the
    # workspace: 256 x 3072 floats in all, not 768 x 3072)
    assert f.scratch_bytes == 2 * 4 * (a_words + 256 * 3072) and f1.scratch_bytes == 0
    assert f.memory_s == pytest.approx(f1.memory_s + 2 * 4 * a_words / L2_SPEEDUP
                                       / WIDE.dram_bandwidth)
    # its tiles made whole rows would keep sgemm
    t = group.schedule.gemm
    assert right_pack.packs_b_per_run(replace(t, packed_b=""), PACK_PER_RUN)
    assert not right_pack.packs_b_per_run(replace(t, packed_b=""), PACK_PER_RUN, True)


def test_the_rule_reads_its_config_and_blas_one_keeps_sgemm(monkeypatch):
    g = _product(768, 128, 768, ta=True)
    monkeypatch.setattr(right_pack, "RIGHT_PACK", right_pack.RightPack(min_row_tiles=7))
    assert _packed(g) == ""
    w_t = _product(128, 768, 3072, tb=True)
    monkeypatch.setattr(right_pack, "RIGHT_PACK", right_pack.RightPack(one_row_tile=False))
    assert _packed(w_t) == ""
    # a tile packs its panels 256 rows of k at a time: 4 x 256 x 256 bytes of W^T
    monkeypatch.setattr(right_pack, "RIGHT_PACK",
                        right_pack.RightPack(max_tile_b_bytes=4 * 256 * 256 - 1))
    assert _packed(w_t) == ""
    monkeypatch.setattr(right_pack, "RIGHT_PACK", right_pack.RightPack(max_tile_b_bytes=1 << 18))
    assert _packed(w_t) == PACK_PER_RUN
    # ... packed before the tiles, all its 768 rows are read back at once
    monkeypatch.setattr(right_pack, "RIGHT_PACK",
                        right_pack.RightPack(max_tile_b_bytes=1 << 19, in_tile=False))
    assert _packed(w_t) == ""
    monkeypatch.setattr(right_pack, "RIGHT_PACK",
                        right_pack.RightPack(transposed_min_col_tiles=13))
    assert _packed(w_t) == ""        # (12 column tiles of W^T)
    monkeypatch.setattr(right_pack, "RIGHT_PACK", right_pack.RightPack(in_tile=False))
    t = analyze(w_t, tuple(n.id for n in w_t.nodes), device=WIDE).gemm
    assert t.packed_b == PACK_PER_RUN and not right_pack.packs_b_in_tile(t)
    monkeypatch.setattr(right_pack, "RIGHT_PACK", right_pack.RightPack())
    assert right_pack.packs_b_in_tile(t)    # (one row tile: each panel read by one tile)
    many = analyze(g, tuple(n.id for n in g.nodes), device=WIDE).gemm
    assert many.packed_b == PACK_PER_RUN and not right_pack.packs_b_in_tile(many)
    w = _product(128, 768, 3072)
    assert _packed(w) == PACK_PER_RUN
    monkeypatch.setattr(right_pack, "RIGHT_PACK",
                        right_pack.RightPack(one_tile_min_col_tiles=13))
    assert _packed(w) == ""          # (12 column tiles of W)
    # the pack's size capped: beyond it, sgemm per tile packs B a tile at a time
    monkeypatch.setattr(right_pack, "RIGHT_PACK", right_pack.RightPack(max_floats=128 * 768 - 1))
    assert _packed(g) == ""
    monkeypatch.setattr(right_pack, "RIGHT_PACK", right_pack.RightPack(max_floats=128 * 768))
    assert _packed(g) == PACK_PER_RUN
    monkeypatch.setattr(right_pack, "RIGHT_PACK", right_pack.RightPack())
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    s.set_launch(s.plan.groups[0].id, blas=1)
    assert s.plan.groups[0].schedule.gemm.packed_b == ""


def test_many_row_tiles_take_column_tiles_as_wide_as_b_allows(monkeypatch):
    # a weight gradient dy^T @ x (k = 128 tokens): B's panels, packed once by the run,
    # hold 128 x 768 (or 3072) floats, within RightPack.wide_b_bytes: whole rows
    for n in (768, 3072):
        g = _product(768, 128, n, ta=True)
        t = analyze(g, tuple(x.id for x in g.nodes), device=WIDE).gemm
        assert t.packed_b == PACK_PER_RUN and (t.tile_n, t.tiles) == (n, 6)
    # a smaller budget: column tiles of as many panels as it holds, their count (with
    # the row tiles') a multiple of the cores
    monkeypatch.setattr(right_pack, "RIGHT_PACK",
                        right_pack.RightPack(wide_b_bytes=4 * 128 * 384))
    g = _product(768, 128, 768, ta=True)
    t = analyze(g, tuple(x.id for x in g.nodes), device=WIDE).gemm
    assert (t.tile_n, t.tiles) == (384, 12)
    monkeypatch.setattr(right_pack, "RIGHT_PACK", right_pack.RightPack())
    # ... where whole rows would leave a core idle (5 row tiles on 2 cores), the
    # tiling rule's (4 columns of 192: 20 tiles)
    g = _product(520, 128, 768, ta=True)
    t = analyze(g, tuple(x.id for x in g.nodes), device=WIDE).gemm
    assert (t.tile_n, t.col_tiles) == (192, 4)
    # a tile width the user (or the tuner) sets stands
    s = wb.Session(_product(768, 128, 768, ta=True), backend="cpu")
    s.auto("stitch")
    if micro_kernel_fits(s.device):
        s.set_launch(s.plan.groups[0].id, tile_n=256)
        assert s.plan.groups[0].schedule.gemm.tile_n == 256


@pytest.mark.parametrize("case", [
    dict(m=520, k=24, n=70, ta=True),                  # A read transposed, B in a partial panel
    dict(m=520, k=33, n=130, tb=True),                 # B read transposed: its pack gathers
    dict(m=520, k=24, n=70, batch=(2,), ta=True),      # a B per batch item
    dict(m=7, k=37, n=1795, tb=True),    # one row tile, W^T: 8 x 8 blocks and their edges
    dict(m=7, k=37, n=1795),             # ... W untransposed
    dict(m=130, k=64, n=2061, tb=True, epilogue=True),  # ... two row tiles, 9 column tiles
    dict(m=600, k=300, n=70, epilogue=True),           # k in two blocks, an epilogue after
    # one row tile, each tile packing its own panels: k = 300 (8 x 8 blocks, then 4
    # rows element by element), 8 column tiles, the last in a partial panel
    dict(m=100, k=300, n=2000, tb=True),
    dict(m=100, k=300, n=2000, epilogue=True),
    # ... k = 515: two whole blocks of 256 rows of k packed into the same floats, then 3
    # rows (no whole 8 x 8 block)
    dict(m=100, k=515, n=2000, tb=True),
    dict(m=100, k=515, n=2000, epilogue=True),
    # many row tiles, column tiles as wide as B's panels allow: whole rows (k = 128),
    # and two tiles of 512 (k = 1000: 4 MB of panels)
    dict(m=768, k=128, n=770, ta=True),
    dict(m=520, k=1000, n=1000, ta=True, epilogue=True),
])
def test_results_match_numpy_on_fresh_inputs(case):
    g = _product(**case)
    gr, prog, src = one_gemm(g)
    assert gr.schedule.gemm.packed_b == PACK_PER_RUN
    # (the prelude defines and calls them too: the kernel's own loop packs B, or with
    # one row tile each tile its own panels)
    in_tile = right_pack.packs_b_in_tile(gr.schedule.gemm)
    assert in_tile == (case["m"] <= 128)
    call = "wb_gemm_packing_b(" if in_tile else "wb_pack_panel("
    assert src.count(call) > MICRO_KERNEL_C.count(call)
    for seed in (1, 2):          # fresh inputs, each run checked (outputs poisoned first)
        rng = np.random.default_rng(seed)
        feeds = {v: rng.standard_normal(g.value(v).shape).astype(np.float32) for v in "ab"}
        got = prog.run(feeds, checked=True)["y"]
        a = np.swapaxes(feeds["a"], -1, -2) if case.get("ta") else feeds["a"]
        b = np.swapaxes(feeds["b"], -1, -2) if case.get("tb") else feeds["b"]
        want = a.astype(np.float64) @ b
        if case.get("epilogue"):
            want = np.maximum(want, 0)
        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert err < 1e-5, err


def test_the_pack_is_counted_alike_by_features_and_the_kernel():
    g = _product(520, 24, 70, batch=(2,), ta=True)
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    plan = s.plan
    (gr,) = plan.groups
    if gr.schedule.gemm.packed_b != PACK_PER_RUN:
        pytest.skip("this CPU's vectors are too narrow for the micro-kernel")
    (kernel,) = lower_plan(plan)
    assert features(g, gr, plan.device).scratch_bytes == kernel.scratch_bytes > 0
