"""A fused attention skipping the keys a constant causal mask hides (fusion/key_limit.py):
which masks it recognizes, that the skipping kernel gives the reference's result --
bit for bit the kernel that takes every block -- and that the run-time checks send a
tile through every block wherever skipping would change the result (on the CPU and,
through the CUDA emulator, in the GPU's kernel)."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import workbench as wb
from workbench.fusion.gemm.attention import ATTENTION
from workbench.fusion.key_limit import KeyLimit, causal_mask, find_key_limit
from workbench.dtypes import DType
from workbench.runtime import random_inputs, run_reference
from workbench.session import Session

LOWEST = np.finfo(np.float32).min
BIG = np.finfo(np.float32).max


def _attention(s: int = 300, n: int | None = None, heads: int = 2, d: int = 16,
               form: str = "add", fill=None, scale: float | None = None, mask=None,
               dtype: str = "float32"):
    """softmax(q kᵀ x scale + causal mask) v, the mask added (as torch.onnx.export
    writes transformers' masks) or a ``where``; ``n`` keys (the first n - s of them
    cached, seen by every query); ``mask`` a boolean keep-mask of its own. A half
    ``dtype`` is a model run in it: the mask added in it, the softmax taken in float32
    (LLaMA's ``softmax(..., dtype=float32).to(dtype)``)."""
    n = n or s
    fill = ml_dtypes.finfo(dtype).min if fill is None else fill     # (its type's lowest)
    b = wb.GraphBuilder("causal")
    q, kt = b.input("q", (1, heads, s, d), dtype), b.input("kt", (1, heads, d, n), dtype)
    v = b.input("v", (1, heads, n, d), dtype)
    z = b.matmul(q, kt)
    if scale is not None:
        z = z * b.constant(np.array(scale, dtype))
    keep = np.tril(np.ones((s, n), bool), n - s)[None, None] if mask is None else mask
    if form == "add":
        z = z + b.constant(np.where(keep, 0, fill).astype(dtype), "mask")
    else:
        z = b.where(b.constant(keep, "keep"), z, b.constant(np.array(fill, dtype)))
    if dtype != "float32":
        z = b.cast(z, to="float32")
    p = b.softmax(z, axis=-1)
    b.output(b.matmul(p if dtype == "float32" else b.cast(p, to=dtype), v), "o")
    return b.build()


def _limit(g):
    s = Session(g, backend="cpu")
    s.auto("stitch")
    (gr,) = [x for x in s.plan.groups if x.schedule.then is not None]
    return gr.schedule.key_limit, s


def test_causal_masks_are_recognized():
    """Added (0 and float32's lowest, -inf or a BERT-era -10000) or chosen by
    ``where``; scaled by a multiply, a divide or not at all; cached keys first move
    the diagonal. The scores may move an added mask's logits an eighth of the way to
    zero; the rows' floor is three quarters of the way out, plus the margin."""
    lim, _ = _limit(_attention(scale=0.25))
    assert (lim.offset, lim.fill, lim.additive) == (1, float(LOWEST), True)
    assert lim.scale == pytest.approx(0.25, rel=1e-5) and lim.scale >= 0.25
    assert lim.bound == -float(LOWEST) / 8
    assert lim.floor == pytest.approx(0.75 * float(LOWEST), rel=0.02)
    lim = _limit(_attention(fill=-np.inf))[0]
    assert lim.bound == float(BIG) and lim.floor == -np.inf
    lim = _limit(_attention(fill=-1e4))[0]
    assert lim.bound == 1250 and lim.floor == -1e4 + 2500 + 1e4 * 2.0 ** -7 + 128
    lim, _ = _limit(_attention(form="where"))
    assert (lim.offset, lim.additive) == (1, False)
    # (fill + 128 is the fill in float32; a maximum above it is 2^104 above)
    assert lim.floor == float(LOWEST)
    assert KeyLimit(1, -1e4).floor == -1e4 + 128
    assert _limit(_attention())[0].scale == 1 + 2.0 ** -20     # (the scores' rounding)
    assert _limit(_attention(s=300, n=340))[0].offset == 41
    assert lim.keys(0, 300) == 1 and lim.keys(299, 300) == 300


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_shared_causal_mask_is_the_recognized_form(dtype):
    """key_limit.causal_mask (what the fuzz family ``blocks`` and the benchmarks add to
    their scores) is 0 up to each query's diagonal and the dtype's lowest past it, the
    cached keys seen by all -- the form find_key_limit recognizes."""
    m = causal_mask(3, 5, dtype)
    assert m.shape == (1, 1, 3, 5) and m.dtype == DType.of(dtype).np
    lowest = float(ml_dtypes.finfo(dtype).min)
    want = [[0, 0, 0, lowest, lowest], [0, 0, 0, 0, lowest], [0] * 5]
    assert np.array_equal(m[0, 0].astype(np.float64), np.array(want, np.float64))
    b = wb.GraphBuilder("shared_mask")
    q, kt = b.input("q", (1, 2, 40, 16), dtype), b.input("kt", (1, 2, 16, 50), dtype)
    scores = b.matmul(q, kt)
    z = scores + b.constant(causal_mask(40, 50, dtype))
    b.output(b.softmax(b.cast(z, to="float32"), axis=-1), "p")
    g = b.build()
    lim = find_key_limit(g, [g.producer[z.name].id], scores.name, z.name)
    assert (lim.offset, lim.fill, lim.additive) == (11, lowest, True)


@pytest.mark.parametrize("combine,polarity,found", [
    ("and", "keep", True), ("and_swapped", "keep", True), ("not_or", "hide", True),
    ("or", "keep", False), ("input_only", "keep", False)])
def test_a_mask_combined_with_the_users_padding_is_recognized(combine, polarity, found):
    """transformers' mask with the user's attention_mask, as exported:
    ``where(causal & padding, 0, lowest)`` added, the padding an input. Whatever the
    padding, the causal part hides the keys past the diagonal: the limit holds.
    Equivalent forms (operands swapped; the condition through ``not`` and ``or``, the
    fill on its true side) too; where the condition is not certainly false there
    (``causal | padding``, the padding alone), no limit. (A whole model, padded, runs
    in tests/frontends/test_model_zoo.py.)"""
    s = n = 300
    b = wb.GraphBuilder("padded")
    q, kt = b.input("q", (2, 2, s, 16)), b.input("kt", (2, 2, 16, n))
    pad = b.input("keep", (2, 1, 1, n), "bool")
    tril = b.constant(np.tril(np.ones((s, n), bool))[None, None])
    cond = {"and": lambda: b.op("and", tril, pad), "and_swapped": lambda: b.op("and", pad, tril),
            "not_or": lambda: b.op("not", b.op("or", b.op("not", tril), b.op("not", pad))),
            "or": lambda: b.op("or", tril, pad), "input_only": lambda: pad}[combine]()
    zero, lowest = b.constant(np.array(0, np.float32)), b.constant(np.array(LOWEST))
    mask = b.where(cond, zero, lowest) if polarity == "keep" else \
        b.where(b.op("not", cond), lowest, zero)
    scores = b.matmul(q, kt)
    scaled = scores * 0.25
    z = scaled + mask
    b.output(b.softmax(z, axis=-1), "p")
    g = b.build()
    prefix = [g.producer[v.name].id for v in (scaled, z)]
    lim = find_key_limit(g, prefix, scores.name, z.name)
    assert (lim is not None) == found
    if found:
        assert (lim.offset, lim.fill, lim.additive) == (1, float(LOWEST), True)


@pytest.mark.parametrize("why", ["random", "not_causal_everywhere", "small_fill",
                                 "nothing_masked"])
def test_other_masks_are_not(why):
    """A mask that is no causal suffix on every row and batch item, a fill too small
    to be worth it, or no key masked: every block taken."""
    s = 300
    tril = np.tril(np.ones((s, s), bool))
    mask, fill = None, LOWEST
    if why == "random":
        mask = np.random.default_rng(0).random((1, 1, s, s)) < 0.7
    elif why == "not_causal_everywhere":
        mask = np.stack([tril, np.tril(np.ones((s, s), bool), 5)])[None]
    elif why == "small_fill":
        fill = -100.0
    else:
        mask = np.ones((1, 1, s, s), bool)
    lim, _ = _limit(_attention(s=s, mask=mask, fill=fill))
    assert lim is None


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_skipping_is_exact_and_cheaper(dtype):
    """Stitch takes the online softmax with the skip from CAUSAL_MIN_KEYS keys (a model
    run in bfloat16 too: its probabilities kept in float32 inside the kernel); its
    output equals, bit for bit, the kernel's that takes every block (the skipped blocks
    add exact zeros), and both match the reference."""
    from workbench.testing.fuzz import check_plan
    g = _attention(s=300, scale=1 / math.sqrt(16), dtype=dtype)
    lim, s = _limit(g)
    assert lim is not None and "keys past row + 1 skipped" in s.plan.groups[0].schedule.describe()
    assert s.plan.groups[0].schedule.then.online.block == ATTENTION.causal.block
    assert lim.taken(300, 300, s.plan.groups[0].schedule.gemm.tile_m, ATTENTION.causal.block) < 0.9
    assert check_plan(s, s.inputs, s.reference, cuda=True) is None
    got = s.run(s.inputs)["o"]
    # (300 keys in blocks of 128: the masked blocks taken only where a check failed)
    assert "wb_kend = wb_ok ? wb_khi : 3;" in s.source(s.plan.groups[0].id, target="c")
    # the same kernel taking every block (launch skip=0: the same blocks, the same sums)
    s.set_launch(s.plan.groups[0].id, skip=0)
    assert s.plan.groups[0].schedule.key_limit is None
    assert s.plan.groups[0].schedule.then.online.block == ATTENTION.causal.block
    assert np.array_equal(s.run(s.inputs)["o"], got)
    s.undo()
    assert s.plan.groups[0].schedule.key_limit == lim


def _inputs_where_skipping_would_be_wrong(g, case: str) -> dict:
    """Fresh inputs, edited so that a skipped block would change the result:
    ``huge_key``: the last key (masked for every row but the last) is its type's
    largest value along the queries' one axis, so its masked logit, max + lowest, is
    0 and not the fill (the additive mask's bound must fail); ``fill_row``: query 0's one unmasked
    logit is -inf, so its row's maximum is the fill and NumPy's softmax spreads the
    row over the masked keys (the row check must fail); ``inf_value``: a masked key's
    value is infinite (0 x inf is NaN in the reference: the values' check must fail)."""
    ins = random_inputs(g, 3)
    q, kt, v = ins["q"], ins["kt"], ins["v"]
    if case == "huge_key":
        q[..., 0] = 1.0
        q[..., 1:] = 0.0
        kt[..., :, -1] = 0.0
        kt[..., 0, -1] = ml_dtypes.finfo(kt.dtype).max
    elif case == "fill_row":
        q[..., 0] = 0.0
        q[..., 0, :] = 0.0
        q[..., 0, 0] = 2.0
        kt[..., :, 0] = 0.0
        kt[..., 0, 0] = -2.0 ** 127      # (exact in TF32 too; 2 x it is -inf)
    else:
        v[..., v.shape[-2] - 30, 3] = np.inf
    return ins


def test_a_bert_era_mask_falls_back_where_the_scores_could_cross_it():
    """A mask of -10000 added: a masked key whose scores lift its logits to +6000
    would take the whole softmax in the reference; the bound (scale x d x max|q| x
    max|k| under 1250) fails, the tile takes every block, the output is the
    reference's; so where a row's maximum is below the floor. Ordinary inputs pass
    the checks and match too."""
    from workbench.testing.fuzz import check_plan
    g = _attention(s=300, fill=-1e4)
    lim, s = _limit(g)
    assert lim.fill == -1e4 and _would_skip(lim, s.inputs, 16)
    assert check_plan(s, s.inputs, s.reference, cuda=False) is None
    ins = random_inputs(g, 5)
    ins["q"][...] = 1.0
    ins["kt"][..., :, -1] = 1000.0           # (16 x 1000: the last key's logit +6000)
    want = run_reference(g, ins)["o"]
    assert np.allclose(want[..., :-1, :], ins["v"][..., -1:, :], atol=1e-3)
    np.testing.assert_allclose(s.run(ins)["o"], want, rtol=1e-5, atol=1e-6)
    # query 0's one unmasked logit -9990: its maximum is below the floor (the scores
    # leave the masked logits near -10000, whose exp(-10) counts in the reference)
    ins = random_inputs(g, 6)
    ins["q"][..., 0, :] = 1.0
    ins["kt"][..., :, 0] = -9990.0 / 16
    want = run_reference(g, ins)["o"]
    np.testing.assert_allclose(s.run(ins)["o"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case,form,dtype", [
    ("huge_key", "add", "float32"), ("fill_row", "where", "float32"),
    ("fill_row", "add", "float32"), ("inf_value", "add", "float32"),
    ("inf_value", "where", "float32"), ("huge_key", "add", "bfloat16"),
    ("fill_row", "where", "bfloat16"), ("inf_value", "add", "bfloat16")])
def test_checks_fall_back_to_every_block(case, form, dtype):
    """Where skipping would differ from NumPy, the tile takes every block: the output
    is the reference's (NaN where it has NaN) -- and differs from what the blocks the
    mask leaves alone give, so the check is what saves it."""
    g = _attention(s=300, form=form, dtype=dtype)
    lim, s = _limit(g)
    assert lim is not None
    ins = _inputs_where_skipping_would_be_wrong(g, case)
    if dtype != "float32":      # (the half types' bound; the difference below is 1e-1)
        want = run_reference(g, ins)["o"].astype(np.float32)
        np.testing.assert_allclose(s.run(ins)["o"].astype(np.float32), want, rtol=5e-2,
                                   atol=5e-2, equal_nan=True)
        return
    want = run_reference(g, ins)["o"]
    got = s.run(ins)["o"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    # the same inputs through a mask the kernel believes (skipping with no checks
    # would be this): the first rows come out differently
    unchecked = np.where(np.tril(np.ones((300, 300), bool)), 1.0, 0.0)
    z = np.einsum("bhqd,bhdk->bhqk", ins["q"].astype(np.float64), ins["kt"])
    z = np.where(unchecked > 0, z, -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.exp(z - z.max(-1, keepdims=True))
        skipped = (p / p.sum(-1, keepdims=True)) @ np.where(np.isinf(ins["v"]), 0, ins["v"])
    assert not np.allclose(skipped[..., :64, :], want[..., :64, :], equal_nan=True)


@pytest.mark.parametrize("case,form", [(None, "add"), ("fill_row", "where"),
                                       ("inf_value", "add")])
def test_the_gpu_kernel_skips_and_checks_in_the_emulator(case, form):
    """The GPU's fused attention (TF32 tiles, blocks of the tile's keys) with the skip:
    the block agrees on the rows' check (a block-wide AND) and sums the bounds across
    its threads; within TF32's bound of the reference, and the fallback where it must."""
    from workbench.testing.fuzz import check_plan
    from workbench.runtime.cuda_emu import CudaEmuBackend
    why = CudaEmuBackend.unavailable()
    if why:
        pytest.skip(why)
    g = _attention(s=130, form=form)
    s = Session(g, backend="cuda-emu")
    s.set_matmul_precision("tf32")
    s.auto("stitch")
    (gr,) = [x for x in s.plan.groups if x.schedule.then is not None]
    assert gr.schedule.key_limit is not None
    ins = s.inputs if case is None else _inputs_where_skipping_would_be_wrong(g, case)
    if case is None:
        assert check_plan(s, ins, s.reference, cuda=True) is None
    else:
        want = run_reference(g, ins)["o"]
        got = s.run(ins)["o"]
        # (TF32's products; skipping would be off by far more, or finite for NaN)
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2, equal_nan=True)


def _would_skip(lim: KeyLimit, ins: dict, d: int) -> bool:
    """The checks pass for these inputs (taken over all of Q and K, so stricter than
    any tile's): the skip is really taken, the test not vacuous."""
    q, k = (np.abs(ins[x].astype(np.float64)).max() for x in ("q", "kt"))
    return lim.scale * d * q * k < lim.bound and lim.floor < -1000


def _gpu_limit(g):
    from workbench.fusion import run_planner
    from workbench.device import H100
    plan, _ = run_planner("stitch", g, device=H100)
    (gr,) = [x for x in plan.groups if x.schedule.then is not None]
    return gr.schedule.key_limit


BF16_LOWEST = float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)
F16_LOWEST = float(np.finfo(np.float16).min)


def test_half_precision_models_masks_are_recognized():
    """A bfloat16 model's mask, 0 and bfloat16's lowest added in bfloat16, the sum
    widened to float32 for the softmax: the same limit, its scale bounding the
    scores' and the product's bfloat16 rounding. float16's lowest, -65504, too (the
    scores may reach 8188 there); a cast that narrows the logits rounds the fill, so
    it is not looked through."""
    lim = _gpu_limit(_attention(s=300, scale=0.125, dtype="bfloat16"))
    assert (lim.offset, lim.fill, lim.additive) == (1, BF16_LOWEST, True)
    assert lim.scale == pytest.approx(0.125 * (1 + 2.0 ** -7) ** 2, rel=1e-12)
    assert lim.bound == -BF16_LOWEST / 8
    assert _gpu_limit(_attention(s=300, fill=-np.inf, dtype="bfloat16")).bound == float(BIG)
    assert _gpu_limit(_attention(s=300, form="where", fill=F16_LOWEST,
                                 dtype="float16")).fill == F16_LOWEST
    lim = _gpu_limit(_attention(s=300, scale=0.125, dtype="float16"))
    assert (lim.fill, lim.bound) == (F16_LOWEST, 8188)
    # (the sum -65504 + 2 x 8188 rounded to float16 is off by at most 16)
    assert lim.floor == -65504 + 16376 + 65504 * 2.0 ** -7 + 128
    b = wb.GraphBuilder("narrowed")
    q, kt = b.input("q", (1, 2, 300, 16)), b.input("kt", (1, 2, 16, 300))
    keep = np.tril(np.ones((300, 300), bool))[None, None]
    z = b.cast(b.matmul(q, kt) + b.constant(np.where(keep, 0, LOWEST).astype(np.float32)),
               to="bfloat16")
    b.output(b.softmax(z, axis=-1), "p")
    g = b.build()
    (mm,) = [x for x in g.nodes if x.op == "matmul"]
    added, narrowed = g.producer[z.name].inputs[0], z.name
    prefix = [g.producer[added].id, g.producer[narrowed].id]
    assert find_key_limit(g, prefix, mm.outputs[0], narrowed) is None
    assert find_key_limit(g, prefix, mm.outputs[0], added) is not None


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case,form", [(None, "add"), ("huge_key", "add"),
                                       ("fill_row", "where"), ("inf_value", "add")])
def test_a_half_precision_models_attention_skips_in_the_emulator(case, form, dtype):
    """The GPU's fused attention of a model run in bfloat16 or float16 (half tiles on
    tensor cores, the logits widened to float32): the skip and its checks, within the
    type's bound of the reference, and the fallback where skipping would differ."""
    from workbench.testing.fuzz import check_plan
    from workbench.runtime.cuda_emu import CudaEmuBackend
    why = CudaEmuBackend.unavailable()
    if why:
        pytest.skip(why)
    # (unscaled where the inputs break a check: huge_key's logit must come out 0)
    g = _attention(s=130, scale=0.25 if case is None else None, form=form, dtype=dtype)
    s = Session(g, backend="cuda-emu")
    s.auto("stitch")
    (gr,) = [x for x in s.plan.groups if x.schedule.then is not None]
    lim = gr.schedule.key_limit
    assert lim is not None
    if case is None:
        assert _would_skip(lim, s.inputs, 16)
        assert check_plan(s, s.inputs, s.reference, cuda=True) is None
        return
    ins = _inputs_where_skipping_would_be_wrong(g, case)
    want = run_reference(g, ins)["o"].astype(np.float32)
    got = s.run(ins)["o"].astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=5e-2, atol=5e-2, equal_nan=True)


def test_the_skip_is_a_launch_parameter_the_tuner_tries():
    """``skip=0`` takes every block (what the tuner measures beside the skip: on a GPU
    the checks' reads may cost what it saves); ``skip=1`` where there is no key limit,
    or ``skip`` on a kernel with no softmax, is refused with the reason."""
    from workbench.errors import FusionRefused
    from workbench.measure.tune import _gemm_candidates
    lim, s = _limit(_attention(s=300))
    gid = s.plan.groups[0].id
    assert (("skip", 0),) in _gemm_candidates(s.plan.groups[0].schedule)
    s.set_launch(gid, skip=0)
    assert (("skip", 0),) not in _gemm_candidates(s.plan.groups[0].schedule)
    s.set_launch(gid, skip=1)
    assert s.plan.groups[0].schedule.key_limit == lim
    with pytest.raises(FusionRefused, match="skip=1: the softmax before .* no causal key"):
        s.plan.set_launch(gid, skip=1, online=0)
    with pytest.raises(FusionRefused, match="skip=2 is out of range"):
        s.plan.set_launch(gid, skip=2)
    b = wb.GraphBuilder("gemm")
    w = b.constant(np.ones((32, 48), np.float32))
    b.output(b.gelu(b.matmul(b.input("x", (64, 32)), w)), "y")
    lone = Session(b.build(), backend="cpu")
    lone.auto("rules")
    with pytest.raises(FusionRefused, match="skip applies to a fused attention"):
        lone.plan.set_launch(lone.plan.groups[0].id, skip=0)


def test_key_limit_describes_itself():
    lim = KeyLimit(1, float(LOWEST), 0.125, -float(LOWEST) / 8)
    assert lim.additive and "causal" in lim.describe()
    assert lim.taken(256, 256, 128, 128) == 0.75


def test_the_cost_model_prices_the_blocks_taken():
    """The products of a causal fused attention are priced at the share of key blocks
    its tiles take (the checks passing), not at every block."""
    g = _attention(s=1024, heads=1, d=64)
    lim, s = _limit(g)
    (gr,) = s.plan.groups
    (ev,) = s.plan.set_launch(gr.id, skip=0).groups
    assert ev.schedule.key_limit is None
    taken = lim.taken(1024, 1024, gr.schedule.gemm.tile_m, ATTENTION.causal.block)
    assert 0.5 < taken < 0.6
    model = s.cost_model
    assert model.estimate(g, gr).library_s == pytest.approx(
        model.estimate(g, ev).library_s * taken, rel=1e-9)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_gpt2_s_causal_attention_on_an_h100_compiles_without_spills(nvrtc_toolchain, dtype):
    """GPT-2's attention (8 x 12 x 512, 64 a head, the causal mask added) on an H100 in
    TF32, or the model run in bfloat16 or float16: stitch's one kernel skips the masked blocks, is
    predicted faster for it, and NVRTC compiles it with the runtime's options within
    128 registers, no spills, its shared memory (the block reductions' slot too) as
    geometry says."""
    from workbench.codegen import lower_plan, render_kernel
    from workbench.fusion import run_planner
    from workbench.fusion.cost import CostModel
    from workbench.device import H100
    from workbench.runtime import nvrtc
    g = _attention(s=512, heads=12, d=64, scale=0.125, dtype=dtype)
    plan, _ = run_planner("stitch", g, device=H100, matmul_precision="tf32")
    (gr,) = plan.groups
    assert gr.schedule.key_limit is not None
    every = plan.set_launch(gr.id, skip=0)
    assert every.groups[0].schedule.key_limit is None
    model = CostModel.for_device(H100)
    assert model.plan_seconds(plan) < 0.8 * model.plan_seconds(every)
    (k,) = lower_plan(plan)
    assert k.reductions == 1
    rep = nvrtc.ptxas_report(render_kernel(k, "cuda"), k.name)
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0 and rep.registers <= 128, rep.log
    assert rep.shared_bytes == k.launch.shared_bytes, rep.log
