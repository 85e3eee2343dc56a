"""A product of few rows against an activation B made transposed (fusion/gemm/
transposed.py: a training step's ``x @ W^T`` and ``dy @ W``): which kernels are, their
results against NumPy on fresh random inputs (checked runs: outputs poisoned first) at
the micro-kernel's edges, A's pack counted alike by the cost model's features and the
kernel IR, and sgemm still a tuner's choice."""
from dataclasses import replace

import numpy as np
import pytest

import workbench as wb
from workbench.codegen import lower_plan
from workbench.codegen.microkernel import MICRO_KERNEL_C
from workbench.device import assumed_cpu
from workbench.fusion.analysis import analyze
from workbench.fusion.features import features
from workbench.fusion.gemm import transposed
from workbench.fusion.gemm.tiles import micro_kernel_fits
from workbench.fusion.gemm.transposed import KC_T
from workbench.fusion.gemm_shape import PACK_ONCE, PACK_PER_RUN, TRANSPOSED_PER_RUN

from tests.codegen.gemm_cases import one_gemm

WIDE = assumed_cpu("test cpu", 2).with_(vector_bytes=64)
NARROW = assumed_cpu("test cpu", 2).with_(vector_bytes=16)
CALL = "wb_gemm_transposed("


def _product(m, k, n, tb=False, epilogue=None, const_b=False, batch=(), dtype="float32"):
    """a @ b (or a @ b^T read through a transpose: ``tb``), both graph inputs (a training
    step's activations and weights) unless ``const_b``; ``epilogue``: "relu" after it,
    or "bias_gelu" (a bias row added, then GELU, as the FFN's up-projection)."""
    g = wb.GraphBuilder("product")
    nb = len(batch)
    a = g.input("a", (*batch, m, k), dtype=dtype)
    if const_b:
        b = g.constant(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32), "b")
    else:
        b = g.input("b", (n, k) if tb else (k, n), dtype=dtype)
    y = g.matmul(a, g.op("transpose", b, perm=[1, 0]) if tb and not const_b else b)
    if epilogue == "relu":
        y = g.relu(y)
    elif epilogue == "bias_gelu":
        y = g.gelu(g.add(y, g.input("bias", (n,))))
    g.output(y, "y")
    return g.build()


def _form(g, device=WIDE):
    return analyze(g, tuple(n.id for n in g.nodes), device=device).gemm.packed_b


@pytest.mark.parametrize("m,k,n,kw,form", [
    (128, 768, 768, dict(tb=True), TRANSPOSED_PER_RUN),    # x @ W^T, a projection
    (128, 768, 3072, dict(tb=True), TRANSPOSED_PER_RUN),   # the FFN's up-projection
    (128, 3072, 768, {}, TRANSPOSED_PER_RUN),              # dy @ W, W untransposed
    (1, 64, 100, {}, TRANSPOSED_PER_RUN),                  # one row
    (130, 768, 768, dict(tb=True), ""),                    # two row tiles: sgemm per tile
    (128, 768, 768, dict(const_b=True), PACK_ONCE),        # a constant: packed once
    (128, 64, 48, {}, ""),                                 # fewer columns than min_cols
    (128, 64, 256, dict(batch=(2,)), ""),                  # A's batch folded: 256 rows
])
def test_which_products_are_made_transposed(m, k, n, kw, form):
    g = _product(m, k, n, **kw)
    assert _form(g) == form
    # never where the micro-kernel does not run (128-bit vectors: sgemm per tile)
    assert not micro_kernel_fits(NARROW) and _form(g, NARROW) == ""


def test_not_for_an_epilogue_reducing_rows_nor_bfloat16_nor_when_off(monkeypatch):
    g = wb.GraphBuilder("product")
    a, w = g.input("a", (128, 768)), g.input("b", (768, 768))
    g.output(g.softmax(g.matmul(a, g.op("transpose", w, perm=[1, 0])), axis=-1), "y")
    g = g.build()
    assert _form(g) != TRANSPOSED_PER_RUN       # (its tiles span every column)
    assert _form(_product(128, 768, 768, tb=True, dtype="bfloat16")) != TRANSPOSED_PER_RUN
    monkeypatch.setattr(transposed, "TRANSPOSED",
                        replace(transposed.TRANSPOSED, enabled=False))
    assert _form(_product(128, 768, 768, tb=True)) == PACK_PER_RUN
    monkeypatch.setattr(transposed, "TRANSPOSED", replace(transposed.TRANSPOSED, max_rows=64))
    assert _form(_product(128, 768, 768, tb=True)) == PACK_PER_RUN


@pytest.mark.parametrize("case", [
    dict(m=128, k=768, n=768, tb=True),           # B's columns contiguous along k (W^T)
    dict(m=128, k=768, n=768),                    # B's rows contiguous (W)
    dict(m=100, k=37, n=250, tb=True),            # A's rows in a partial vector; n = 41 x 6 + 4
    dict(m=7, k=5, n=70),                         # one vector of A's rows, 11 x 6 + 4 columns
    dict(m=1, k=1, n=64),                         # one row, k = 1
    dict(m=65, k=KC_T + 300, n=131, tb=True),     # k in two blocks: the second added, 3 columns last
    dict(m=128, k=2 * KC_T + 5, n=64),            # three blocks
    dict(m=128, k=300, n=768, tb=True, epilogue="bias_gelu"),   # the FFN's epilogue
    dict(m=50, k=200, n=100, epilogue="relu"),
])
def test_results_match_numpy_on_fresh_inputs(case):
    g = _product(**case)
    gr, prog, src = one_gemm(g)
    assert gr.schedule.gemm.packed_b == TRANSPOSED_PER_RUN
    assert "made transposed" in gr.schedule.describe()
    assert src.count(CALL) > MICRO_KERNEL_C.count(CALL)
    for seed in (1, 2):          # fresh inputs, each run checked (outputs poisoned first)
        rng = np.random.default_rng(seed)
        feeds = {v: rng.standard_normal(g.value(v).shape).astype(np.float32) for v in g.inputs}
        got = prog.run(feeds, checked=True)["y"]
        b = feeds["b"].T if case.get("tb") else feeds["b"]
        want = feeds["a"].astype(np.float64) @ b
        if case.get("epilogue") == "relu":
            want = np.maximum(want, 0)
        elif case.get("epilogue") == "bias_gelu":
            from math import erf
            x = want + feeds["bias"]
            want = 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))
        # float32: sums of up to k products, KC_T of them in one accumulator
        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert err < 1e-5, err


def test_a_pack_is_counted_alike_by_features_and_the_kernel_and_sgemm_stays_a_choice():
    g = _product(128, 768, 768, tb=True)
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    plan = s.plan
    (gr,) = plan.groups
    if gr.schedule.gemm.packed_b != TRANSPOSED_PER_RUN:
        pytest.skip("this CPU's vectors are too narrow for the micro-kernel")
    (kernel,) = lower_plan(plan)
    # A's panels: 128 rows x 768 floats
    assert features(g, gr, plan.device).scratch_bytes == kernel.scratch_bytes >= 4 * 128 * 768
    assert kernel.blas == ""      # no sgemm in it
    rng = np.random.default_rng(3)
    feeds = {v: rng.standard_normal(g.value(v).shape).astype(np.float32) for v in g.inputs}
    made = s.program().run(feeds, checked=True)["y"]
    s.set_launch(gr.id, blas=1)           # the tuner's alternative: sgemm per tile
    assert s.plan.groups[0].schedule.gemm.packed_b == ""
    np.testing.assert_allclose(s.program().run(feeds, checked=True)["y"], made,
                               rtol=1e-4, atol=1e-4)
