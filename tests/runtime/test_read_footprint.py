"""Bytes counted as the kernel reads them: for every kernel kind (elementwise with a
broadcast bias, a row reduction, an embedding lookup, slices and a split, pooling with
padding and gaps between windows, convolutions with halos and strides, a GEMM, a
stitched kernel, a fused attention), planned for the H100 and run in the CUDA
emulator on random inputs, each input's distinct bytes the emulator saw loaded equal
the bytes the kernel IR counts (``Buffer.read_bytes``) and the cost model's features
count (``fusion/footprint.py``, the one rule both use), and each output byte is
written; per kernel, the distinct bytes read and written in all equal the IR's and the
features' totals, spills included (``fusion/spills.py``: a split row's partials, the
values between stitched phases, an output a later phase reads back; on the CPU, where
no emulator runs C, the operands packed by every run are held IR to features). Exceptions, by their reason: a gather whose index values are not known
counts each index as a row of its own (the worst case), so repeated indices read
fewer distinct bytes than counted; a GEMM re-reads its operands' panels per tile, but
its distinct bytes are still each operand once (re-reads are priced apart)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import workbench as wb
from workbench.fusion import run_planner
from workbench.ir.composites_nn import max_pool
from workbench.fusion.features import features
from workbench.fusion.footprint import read_elements
from workbench.fusion.schedule import group_io
from workbench.runtime import random_inputs, run_reference
from workbench.runtime.cuda_emu import CudaEmuBackend, counting
from workbench.session import Session

EMU_MISSING = None if os.environ.get("WB_REQUIRE_CUDA_EMU") else CudaEmuBackend.unavailable()
pytestmark = pytest.mark.skipif(EMU_MISSING is not None, reason=str(EMU_MISSING))

RNG = np.random.default_rng(44)


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _elementwise():
    b = wb.GraphBuilder("bias_gelu")
    x = b.input("x", (37, 100))
    b.output(b.gelu(x + b.constant(_w(100), "bias")), "y")   # the bias broadcast
    return b.build()


def _row():
    b = wb.GraphBuilder("layernorm")
    x = b.input("x", (13, 300))
    b.output(b.layer_norm(x, b.constant(_w(300), "g"), b.constant(_w(300), "beta")), "y")
    return b.build()


def _embedding(ids=None):
    # BERT's lookup in small: 24 tokens of a 500-row table, then scaled
    b = wb.GraphBuilder("embedding")
    table = b.input("table", (500, 64))
    idx = b.constant(ids, "ids") if ids is not None else b.input("ids", (24,), "int64")
    b.output(b.op("gather", table, idx, axis=0) * 2.0, "y")
    return b.build()


def _slices():
    # every third row and a strided band of columns, and of a [24, 96] QKV the first
    # and last thirds (a split whose middle part no one reads)
    b = wb.GraphBuilder("slices")
    x = b.input("x", (64, 96))
    s = b.op("slice", x, starts=[1, 8], ends=[64, 72], steps=[3, 2])
    b.output(b.op("relu", s), "y")
    qkv = b.input("qkv", (24, 96))
    q, _, v = b.op("split", qkv, axis=1, sizes=[32, 32, 32])
    b.output(q + v, "qv")
    return b.build()


def _views():
    # a slice of a reshape (one merged axis sliced: no strided view, its offsets
    # enumerated), a transpose then a slice, and a pad that crops one axis and mirrors
    # another
    b = wb.GraphBuilder("views")
    x = b.op("reshape", b.input("x", (8, 6, 16)), shape=[48, 16])
    b.output(b.op("relu", b.op("slice", x, starts=[5], ends=[40], steps=[2], axes=[0])), "a")
    t = b.op("transpose", b.input("z", (24, 40)), perm=[1, 0])
    b.output(b.op("slice", t, starts=[3, 2], ends=[30, 20], axes=[0, 1]) * 3.0, "b")
    m = b.op("reshape", b.op("transpose", b.input("m", (6, 8, 4)), perm=[1, 0, 2]),
             shape=[48, 4])       # (rows 8 x 6 from two strides: no one-stride slice)
    b.output(b.op("neg", b.op("slice", m, starts=[3], ends=[30], axes=[0])), "d")
    p = b.op("pad", b.input("p", (20, 12)), pads=[-4, 2, -3, 2], mode="reflect")
    b.output(p + 1.0, "c")
    return b.build()


def _embedding_layernorm():
    # the lookup, a positional add and a LayerNorm: one row kernel, or stitched
    b = wb.GraphBuilder("embedding_layernorm")
    table = b.input("table", (300, 64))
    e = b.op("gather", table, b.constant(RNG.integers(0, 300, (2, 12)), "ids"), axis=0)
    e = e + b.constant(_w(12, 64), "pos")
    b.output(b.layer_norm(e, b.constant(_w(64), "g"), b.constant(_w(64), "beta")), "y")
    return b.build()


def _pool():
    # a 2 x 2 max pool of stride 3 (a row and column of each 3 never read), padded
    b = wb.GraphBuilder("pool")
    x = b.input("x", (2, 3, 17, 17))
    b.output(max_pool(b, x, kernel=(2, 2), strides=(3, 3), pads=(1, 1, 0, 0)), "y")
    return b.build()


def _conv(kernel, stride, pad, channels=8, size=15):
    b = wb.GraphBuilder(f"conv{kernel}s{stride}")
    x = b.input("x", (1, channels, size, size))
    y = b.op("conv", x, b.constant(_w(16, channels, kernel, kernel), "w"), strides=[stride] * 2,
             pads=[pad] * 4)
    b.output(b.op("relu", y), "y")
    return b.build()


def _gemm():
    b = wb.GraphBuilder("gemm")
    x = b.input("x", (40, 72))
    b.output(b.op("relu", b.matmul(x, b.constant(_w(72, 56), "w"))
                  + b.constant(_w(56), "bias")), "y")
    return b.build()


def _attention():
    b = wb.GraphBuilder("attention")
    q, k, v = (b.input(n, (1, 2, 40, 16)) for n in "qkv")
    z = b.matmul(q, b.op("transpose", k, perm=[0, 1, 3, 2])) * 0.25
    b.output(b.matmul(b.softmax(z, axis=-1), v), "o")
    return b.build()


def _stitched():
    # a softmax whose two reductions and normalization are stitched through global
    # memory (AStitch's global scheme)
    b = wb.GraphBuilder("softmax")
    b.output(b.softmax(b.input("x", (6, 200)), axis=-1), "y")
    return b.build()


def _split_rows():
    # two rows of 20,000 columns: each row split over blocks, partials in a workspace
    b = wb.GraphBuilder("long_rows")
    b.output(b.softmax(b.input("x", (2, 20000)), axis=-1), "y")
    return b.build()


def _stitched_output():
    # a softmax that also returns its row maxima: stitched globally, the maxima a later
    # phase reads are a graph output, written once and read back (no workspace)
    b = wb.GraphBuilder("softmax_max")
    x = b.input("x", (6, 200))
    m = b.op("reduce_max", x, axes=[1], keepdims=True)
    e = b.exp(x - m)
    b.output(m, "m")
    b.output(e / b.op("reduce_sum", e, axes=[1], keepdims=True), "y")
    return b.build()


def _plans(s, planners=("none", "stitch")):
    return [run_planner(p, s.graph, device=s.device)[0] for p in planners]


def _fused(s):
    s.fuse([n.id for n in s.graph.nodes])
    return [s.plan]


def _global_stitch(s):
    (plan,) = _plans(s, ("stitch",))
    for v, _ in plan.groups[0].schemes:
        plan = plan.set_scheme(v, "global")
    return [plan]


CASES = {
    "elementwise": (_elementwise, _plans, "elementwise"),
    "row": (_row, _plans, "row_reduce"),
    "gather": (lambda: _embedding(RNG.integers(0, 500, 24)), _plans, "elementwise"),
    "slice": (_slices, _plans, "elementwise"),
    "pool": (_pool, _plans, "row_reduce"),
    "views": (_views, _plans, "elementwise"),
    "embedding_layernorm": (_embedding_layernorm, lambda s: _plans(s) + _global_stitch(s),
                            "row_reduce"),
    "gemm": (_gemm, _plans, "gemm"),
    "stitched": (_stitched, _global_stitch, "stitched"),
    "stitched_output": (_stitched_output, _global_stitch, "stitched"),
    "split_rows": (_split_rows, _plans, "row_reduce"),
    "attention": (_attention, _fused, "gemm"),
}


def _check(s, plans, inputs=None):
    """Run each plan in the emulator and hold each kernel's reads to the count."""
    kinds = set()
    inputs = inputs if inputs is not None else s.inputs
    want = run_reference(s.graph, inputs)
    for plan in plans:
        prog = s.program(plan)
        got = prog.run(inputs)
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w, rtol=2e-4, atol=2e-4)
        groups = {gr.id: gr for gr in plan.groups}
        for ck in prog.compiled:
            k, gr = ck.kernel, groups[ck.kernel.group]
            kinds.add(gr.schedule.kind.value)
            _same_count(s.graph, gr, s.device, k)
            if k.library is not None or not counting():
                continue
            for b, a in zip(k.params, ck.accesses):
                if b.workspace:       # a spill: written once, read once
                    assert a.written_distinct == a.read_distinct == b.nbytes, (k.name, b, a)
                elif b.is_output:
                    assert a.written_distinct == b.nbytes, (k.name, b, a)
                else:
                    assert a.read_distinct == b.read_bytes, (k.name, b, a)
            # and in all, outputs read back included, what the IR and the model count
            assert (sum(a.read_distinct for a in ck.accesses),
                    sum(a.written_distinct for a in ck.accesses)) == (
                k.bytes_read, k.bytes_written), k.name
    return kinds


def _same_count(g, gr, device, k):
    """The cost model's features count what the kernel IR does: each input's elements
    loaded, and the spills (fusion/spills.py: workspaces, outputs read back)."""
    f = features(g, gr, device)
    assert f.bytes_read == sum(b.read_bytes for b in k.inputs), (k.name, f)
    assert (f.scratch_bytes, f.bytes_moved) == (k.scratch_bytes,
                                                k.bytes_read + k.bytes_written), (k.name, f)


@pytest.mark.parametrize("case", sorted(CASES))
def test_counted_bytes_are_the_distinct_bytes_the_kernel_loads(case):
    make, plans, kind = CASES[case]
    s = Session(make(), backend="cuda-emu", seed=3)
    assert kind in _check(s, plans(s))


def test_a_gather_of_unknown_indices_counts_each_index_a_row_at_worst():
    """With run-time indices, 24 distinct ones read exactly the 24 rows counted; with
    repeats the kernel reads fewer (the count is the worst case, never less)."""
    g = _embedding()
    s = Session(g, backend="cuda-emu", seed=3)
    (gr,) = run_planner("stitch", g, device=s.device)[0].groups
    assert read_elements(g, gr.nodes, "table", group_io(g, gr.nodes).outputs) == 24 * 64
    table = random_inputs(g, 1)["table"]
    distinct = {"table": table, "ids": RNG.choice(500, 24, replace=False).astype(np.int64)}
    _check(s, _plans(s, ("stitch",)), distinct)
    if counting():
        repeated = {"table": table, "ids": np.repeat(np.arange(6, dtype=np.int64), 4)}
        prog = s.program(run_planner("stitch", g, device=s.device)[0])
        prog.run(repeated)
        (ck,) = prog.compiled
        (a,) = [a for b, a in zip(ck.kernel.params, ck.accesses) if b.value == "table"]
        assert a.read_distinct == 6 * 64 * 4 < ck.kernel.inputs[0].read_bytes


def test_the_rule_follows_views_and_joins_overlapping_reads_exactly():
    """Two overlapping slices of one input (rows 0..40 and 20..60 of 64) read 60 rows,
    not 80 nor 64; a transpose then a slice reads the slice's elements, and so does a
    slice of an axis merged from two strides (no strided view: its offsets marked); a
    library call reads all of its input."""
    b = wb.GraphBuilder("overlap")
    x = b.input("x", (64, 8))
    a = b.op("slice", x, starts=[0], ends=[40], axes=[0])
    c = b.op("slice", x, starts=[20], ends=[60], axes=[0])
    b.output(a + c, "y")
    t = b.op("slice", b.op("transpose", b.input("z", (16, 32)), perm=[1, 0]),
             starts=[0], ends=[8], axes=[0])
    b.output(b.op("relu", t), "w")
    m = b.op("reshape", b.op("transpose", b.input("m", (6, 8, 4)), perm=[1, 0, 2]),
             shape=[48, 4])
    b.output(b.op("slice", m, starts=[3], ends=[30], axes=[0]) + 1.0, "v")
    g = b.build()
    nodes = tuple(n.id for n in g.nodes)
    outs = group_io(g, nodes).outputs
    assert read_elements(g, nodes, "x", outs) == 60 * 8
    assert read_elements(g, nodes, "z", outs) == 8 * 16
    assert read_elements(g, nodes, "m", outs) == 27 * 4
    assert read_elements(g, nodes, "x", outs, library=True) == 64 * 8


@pytest.mark.parametrize("kernel, stride, pad", [(3, 2, 1), (1, 2, 0), (2, 3, 1), (3, 1, 1)])
def test_a_generated_convolution_counts_the_input_its_taps_reach(kernel, stride, pad):
    """A convolution is a library call on the GPU (counted whole: the emulator runs no
    library) and a GEMM kernel on the CPU, which has no CUDA rendering for the emulator
    to count; so its rule is checked against the convolution itself: the input
    positions whose value changes the output (each perturbed in turn) are exactly the
    ones counted -- halos in the padding and positions a stride skips left out."""
    from workbench.device import assumed_cpu
    from workbench.ops.conv import conv_reference
    g = _conv(kernel, stride, pad, channels=2, size=11)
    (gr,) = [gr for gr in run_planner("stitch", g, device=assumed_cpu("cpu", 2))[0].groups
             if gr.schedule.kind.value == "gemm"]
    conv = next(n for n in g.nodes if n.op == "conv")
    w = g.constants["w"].astype(np.float64) + 10.0      # no weight 0: every tap counts
    base = conv_reference([np.zeros((1, 2, 11, 11)), w], conv.attr_map)[0]
    reached = 0
    for i, j in np.ndindex(11, 11):
        x = np.zeros((1, 2, 11, 11))
        x[..., i, j] = 1.0
        reached += bool(np.any(conv_reference([x, w], conv.attr_map)[0] != base))
    counted = read_elements(g, gr.nodes, "x", group_io(g, gr.nodes).outputs)
    assert counted == reached * 2 and features(g, gr, assumed_cpu("cpu", 2)).bytes_read \
        >= counted * 4


@pytest.mark.parametrize("make", [_attention, _gemm, _split_rows])
def test_cpu_kernels_count_their_packs_as_the_cost_model_does(make):
    """On a CPU whose vectors take the micro-kernel, fused attention packs K and V into
    panels by every run (asked for here with ``blas=0``) (a workspace the C kernel writes and its tiles read): the cost
    model counts the same bytes as the kernel IR, workspace included. (No emulator
    runs C: the GPU cases above hold the IR to the accesses.)"""
    from workbench.codegen import lower_plan
    from workbench.device import assumed_cpu
    g, cpu = make(), assumed_cpu("cpu", 2).with_(vector_bytes=64)
    plan = run_planner("stitch", g, device=cpu)[0]
    if make is _attention:    # (packed from 256 keys on; blas=0 asks for it at 40)
        plan = plan.set_launch(plan.groups[0].id, blas=0)
    kernels = {k.group: k for k in lower_plan(plan)}
    for gr in plan.groups:
        _same_count(g, gr, cpu, kernels[gr.id])
    if make is _attention:
        (k,) = kernels.values()
        assert [b.name for b in k.workspace] == ["ws_pack", "ws_pack_v"]
        assert k.scratch_bytes == 2 * sum(b.nbytes for b in k.workspace) > 0
