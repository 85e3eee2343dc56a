"""A GEMM kernel's left operand packed into the micro-kernel's slivers once per run where
many column tiles read it (fusion/gemm/left_pack.py): which kernels do, their results
against NumPy on fresh random inputs (checked runs: outputs and the pack poisoned
first), and the pack counted alike by the cost model's features and the kernel IR."""
import numpy as np
import pytest

import workbench as wb
from workbench.codegen.microkernel import MICRO_KERNEL_C
from workbench.codegen import lower_plan
from workbench.device import assumed_cpu
from workbench.fusion.analysis import analyze
from workbench.fusion.features import features
from workbench.fusion.gemm import left_pack
from workbench.fusion.gemm.left_pack import left_pack_words, packs_a_per_run
from workbench.fusion.gemm.tiles import micro_kernel_fits

# 256-bit vectors or wider: B packed, the micro-kernel multiplies (fusion/gemm/tiles.py)
WIDE = assumed_cpu("test cpu", 2).with_(vector_bytes=64)


def own_calls(src: str, call: str) -> int:
    """How often the kernel's own code (not the micro-kernel prelude) writes ``call``."""
    return src.count(call) - MICRO_KERNEL_C.count(call)


def _linear(m, k, n, batch=(), transposed_a=False, epilogue=False, seed=0):
    """x @ W (W a constant, as an exported Linear's weight), x [*batch, m, k] (or read
    through a transpose of [*batch, k, m]), optionally + bias then relu."""
    rng = np.random.default_rng(seed)
    b = wb.GraphBuilder("linear")
    if transposed_a:
        x = b.op("transpose", b.input("x", (*batch, k, m)),
                 perm=[*range(len(batch)), len(batch) + 1, len(batch)])
    else:
        x = b.input("x", (*batch, m, k))
    w = b.constant((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w")
    y = b.matmul(x, w)
    if epilogue:
        y = b.relu(y + b.constant(rng.standard_normal(n).astype(np.float32), "bias"))
    b.output(y, "y")
    return b.build()


def _gemm(g, device=WIDE):
    return analyze(g, tuple(n.id for n in g.nodes), device=device)


@pytest.mark.parametrize("m,k,n,batch,packs", [
    (128, 256, 32000, (), True),      # an LM head: 125 column tiles
    (128, 768, 3072, (), True),       # BERT's FFN up: 12 column tiles
    (40, 256, 1100, (3,), True),      # batch items A's own, one B: rows of one product
    (13, 70, 1100, (), False),        # 6 column tiles, too few copies saved (4.5K floats)
    (128, 256, 192, (), False),       # one column tile: nothing copied twice
    (4096, 512, 4096, (), False),     # the pack would outgrow a core's L2
    (2, 1280, 1000, (), False),       # a classifier: 4 column tiles, too few copies saved
    (1, 256, 32000, (), False),       # one token's LM head: its row's 124 copies are 32K floats
])
def test_which_products_pack_a_per_run(m, k, n, batch, packs):
    s = _gemm(_linear(m, k, n, batch))
    assert packs_a_per_run(_linear(m, k, n, batch), s.gemm, s.then, s.online) is packs
    # where the micro-kernel does not run (128-bit vectors: sgemm per tile), never
    narrow = assumed_cpu("test cpu", 2).with_(vector_bytes=16)
    g = _linear(m, k, n, batch)
    s = _gemm(g, narrow)
    assert not micro_kernel_fits(narrow) and not packs_a_per_run(g, s.gemm, s.then, s.online)


@pytest.fixture
def small_products(monkeypatch):
    """The rule as it is but for the copies a pack must save: the tests' products are
    small (they run in milliseconds) yet take the packed form."""
    monkeypatch.setattr(left_pack, "LEFT_PACK", left_pack.LeftPack(min_saved=0))


def test_the_rule_reads_its_config(monkeypatch):
    g = _linear(40, 256, 1100)
    s = _gemm(g)
    monkeypatch.setattr(left_pack, "LEFT_PACK", left_pack.LeftPack(min_col_tiles=s.gemm.col_tiles + 1))
    assert not packs_a_per_run(g, s.gemm, s.then, s.online)


@pytest.mark.parametrize("case", [
    dict(m=13, k=70, n=1100),                         # 2 full slivers and a 1-row one
    dict(m=13, k=300, n=1100, batch=(2,)),            # k in two blocks of the sliver
    dict(m=300, k=40, n=1000),                        # three row tiles of 100
    dict(m=20, k=33, n=900, batch=(2, 3), transposed_a=True),   # A's columns strided
    dict(m=13, k=70, n=1100, epilogue=True),          # an elementwise epilogue after
])
def test_results_match_numpy_on_fresh_inputs(case, small_products):
    g = _linear(**case)
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    (gr,) = s.plan.groups
    if not micro_kernel_fits(s.device):
        pytest.skip("this CPU's vectors are too narrow for the micro-kernel")
    assert packs_a_per_run(g, gr.schedule.gemm, gr.schedule.then, gr.schedule.online)
    prog = s.program()
    src = prog.compiled[0].source
    # (the micro-kernel in the prelude defines and calls them too: the kernel's own
    # loop packs A once per run)
    assert own_calls(src, "wb_pack_a_sliver(") and own_calls(src, "wb_gemm_packed_a(")
    w = g.constants["w"].astype(np.float64)
    for seed in (1, 2):          # fresh inputs, each run checked (outputs poisoned first)
        x = np.random.default_rng(seed).standard_normal(g.value("x").shape).astype(np.float32)
        got = prog.run({"x": x}, checked=True)["y"]
        xa = np.swapaxes(x, -1, -2) if case.get("transposed_a") else x
        want = xa.astype(np.float64) @ w
        if case.get("epilogue"):
            want = np.maximum(want + g.constants["bias"], 0)
        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert err < 1e-5, err


def test_the_pack_is_counted_alike_by_features_and_the_kernel(small_products):
    g = _linear(13, 70, 1100, batch=(2,))
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    plan = s.plan
    (gr,) = plan.groups
    t = gr.schedule.gemm
    if not packs_a_per_run(g, t, gr.schedule.then, gr.schedule.online):
        pytest.skip("this CPU's vectors are too narrow for the micro-kernel")
    (kernel,) = lower_plan(plan)
    words = left_pack_words(t)
    assert any(b.numel == words and not b.persistent for b in kernel.workspace)
    assert features(g, gr, plan.device).scratch_bytes == kernel.scratch_bytes
    assert kernel.scratch_bytes >= 2 * 4 * words


def test_runs_at_once_from_threads_each_pack_their_own(small_products):
    """Two runs of one program at once (the second without the reused intermediates)
    write workspaces of their own: the pack of A is per run, never shared."""
    import threading
    g = _linear(64, 96, 2000)
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    if not micro_kernel_fits(s.device):
        pytest.skip("this CPU's vectors are too narrow for the micro-kernel")
    prog = s.program()
    assert own_calls(prog.compiled[0].source, "wb_pack_a_sliver(")
    w, wrong = g.constants["w"], []

    def runs(seed):
        rng = np.random.default_rng(seed)
        for _ in range(100):
            x = rng.standard_normal((64, 96)).astype(np.float32)
            if np.abs(prog.run({"x": x})["y"] - x @ w).max() > 1e-3:
                wrong.append(seed)
    threads = [threading.Thread(target=runs, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
