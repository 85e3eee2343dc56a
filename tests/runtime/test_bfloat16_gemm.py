"""bfloat16 GEMM kernels: a bfloat16 matmul with its epilogue (bias, GELU, residual,
LayerNorm), alone, or as a fused attention, in one C kernel whose micro-kernel takes A
and B two bfloat16 rows of k at a time (B packed in pairs; AVX512-BF16's dot product
where the CPU has it), accumulates in float32 and rounds once where it stores
(codegen/microkernel.py, fusion/gemm/legality.py GEMM_DTYPES).

Each graph runs under every planner on fresh random inputs, outputs poisoned
(``Session.measure`` checks each kernel against the reference on its own inputs); a
plan that fuses everything into one kernel is also held to the float32 computation of
the same graph (bfloat16-exact constants and inputs) rounded once: within one
bfloat16 ulp of the output's largest magnitude. ``PACK_MIN_VECTOR_BYTES`` is lifted
so that the micro-kernel runs whatever this machine's vectors (as in
test_gemm_kernel.py); the rule on narrower vectors is tested in tests/fusion."""
from __future__ import annotations

import re
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from workbench.codegen.render import CRenderer
from workbench.fusion.gemm import attention, tiles
from workbench.fusion.mapping import ScheduleKind
from workbench.ir import GraphBuilder
from workbench.tolerance import output_error
from workbench.runtime import random_inputs, run_reference
from workbench.session import Session

BF16 = ml_dtypes.bfloat16
ULP = 2.0 ** -8
# the micro-kernel taking bfloat16 A and B two rows of k at a time
PAIRS = re.compile(r"wb_gemm_packed_pairs\(")


def _online_from(monkeypatch, keys: int) -> None:
    """The CPU's online softmax (no causal mask) from ``keys`` keys, for one test."""
    rule = attention.ATTENTION
    monkeypatch.setattr(attention, "ATTENTION",
                        replace(rule, online=replace(rule.online, min_keys=keys)))


def _graph(kind: str, dtype: str = "bfloat16"):
    """One workload in ``dtype`` on constants exact in bfloat16 (so the float32 twin
    computes on the very values the bfloat16 graph holds)."""
    rng = np.random.default_rng(11)
    b = GraphBuilder(f"{kind}_{dtype}")

    def const(name, *shape, scale=1.0):
        a = (rng.standard_normal(shape) * scale).astype(BF16)
        return b.constant(a.astype(np.float32).astype(BF16) if dtype == "bfloat16"
                          else a.astype(np.float32), name)
    if kind in ("attention", "long_attention"):
        keys = 90 if kind == "attention" else 600
        q, kt = b.input("q", (2, 3, 40, 16), dtype), b.input("kt", (2, 3, 16, keys), dtype)
        v = b.input("v", (2, 3, keys, 24), dtype)
        mask = np.where(rng.random((2, 1, 1, keys)) < 0.3, -1e4, 0).astype(BF16)
        z = b.matmul(q, kt) * 0.25 + b.constant(
            mask if dtype == "bfloat16" else mask.astype(np.float32), "mask")
        b.output(b.matmul(b.softmax(z, axis=-1), v), "o")
        return b.build()
    x = b.input("x", (2, 70, 96), dtype)
    h = b.matmul(x, const("w", 96, 136, scale=0.1))
    if kind == "lone":
        b.output(h, "y")
        return b.build()
    if kind == "product_and_gelu":       # the product is read outside the kernel too
        h = b.output(h, "h")
    h = h + const("bias", 136)
    if kind in ("gelu", "product_and_gelu"):
        y = b.gelu(h)
    elif kind == "to_float32":           # the epilogue ends in float32: finished in place
        y = b.cast(b.gelu(h), to="float32")
    else:                                # the BERT FFN's tail: residual and LayerNorm
        h = h + b.input("res", (2, 70, 136), dtype)
        if kind == "layernorm_and_sum":
            h = b.output(h, "h")
        y = b.layer_norm(h, const("gamma", 136), const("beta", 136))
    b.output(y, "y")
    return b.build()


KINDS = ["gelu", "product_and_gelu", "to_float32", "layernorm", "layernorm_and_sum", "lone",
         "attention", "long_attention"]


@pytest.mark.parametrize("kind", KINDS)
def test_bfloat16_gemm_kernels_match_the_reference(kind, monkeypatch):
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    if kind == "long_attention":
        _online_from(monkeypatch, 512)     # the online softmax
    g = _graph(kind)
    s = Session(g, backend="cpu", seed=5)
    ins = random_inputs(g, 17)
    assert all(a.dtype == BF16 for a in ins.values())
    twin = _graph(kind, "float32")
    exact = run_reference(twin, {k: v.astype(np.float32) for k, v in ins.items()})
    for planner in ("none", "rules", "stitch"):
        s.auto(planner)
        gemms = [gr for gr in s.plan.groups if gr.schedule.kind is ScheduleKind.gemm]
        assert gemms, (planner, [gr.schedule.describe() for gr in s.plan.groups])
        for k in s.kernels():
            if k.schedule.startswith("gemm"):
                body = CRenderer().kernel(k)
                assert "wb_sgemm" not in body and not k.blas     # the micro-kernel only
                assert PAIRS.search(body), body                  # two rows of k a step
        m = s.measure(warmup=1, repeats=1)
        assert m.within_tolerance, (planner, m.per_kernel)
        out = s.program().run(ins)
        for name, y in out.items():
            assert y.dtype == g.value(name).dtype.np, name
        if len(s.plan.groups) == 1:
            # one kernel: float32 throughout, rounded once as it stores
            for name, y in out.items():
                err = output_error(g.value(name).dtype, y.astype(np.float32), exact[name])
                assert err <= ULP, (planner, name, err)


def test_a_fused_bfloat16_attention_is_one_kernel():
    """Short rows of keys too: a bfloat16 attention packs K and V by every run (sgemm
    would read float32), so it is fused whatever the key count."""
    gemm_min = tiles.PACK_MIN_VECTOR_BYTES
    try:
        tiles.PACK_MIN_VECTOR_BYTES = 0
        s = Session(_graph("attention"), backend="cpu")
        s.auto("rules")
        (gr,) = s.plan.groups
        assert gr.schedule.then is not None and gr.schedule.then.packed
    finally:
        tiles.PACK_MIN_VECTOR_BYTES = gemm_min


def test_a_bfloat16_gemm_artifact_runs_as_the_session(tmp_path, monkeypatch):
    """The exported artifact ships the GEMM kernel's C source (the pairs micro-kernel
    in its prelude) and runs bit for bit as the session does, its packed weight made
    on the artifact's own first run."""
    from workbench.artifact import load_artifact
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    g = _graph("layernorm")
    s = Session(g, backend="cpu")
    s.auto("stitch")
    assert any(gr.schedule.kind is ScheduleKind.gemm for gr in s.plan.groups)
    s.export(tmp_path / "ffn")
    model = load_artifact(tmp_path / "ffn", backend="cpu")
    ins = random_inputs(g, 3)
    for _ in range(2):          # (the first run packs the weight, the second reads it)
        y = model(**ins)["y"]
        assert y.dtype == BF16
        np.testing.assert_array_equal(y.view(np.uint16), s.run(ins)["y"].view(np.uint16))
