"""Adaptive thread mapping of row reductions (warp / block / split / thread).

Every mapping runs on the CPU backend (the C rendering runs the GPU's schedule with
one CPU thread per block) against the NumPy reference, at sizes on both sides of the
warp (32) and block boundaries, and its CUDA source compiles with nvcc.
"""

import numpy as np
import pytest

from workbench.codegen import RENDERERS, lower_plan, render_kernel
from workbench.codegen.kernel import Launch
from workbench.errors import FusionRefused
from workbench.device import A100, H100, Device
from workbench.fusion import (MAPPINGS, Mapping, Plan, candidate_mappings, choose_mapping,
                              run_planner)
from workbench.fusion.geometry import co_resident_grid
from workbench.ir import GraphBuilder
from workbench.session import Session


# odd sizes: rows and columns off multiples of 32 and of the block; one long row;
# enough rows (>= 8 x 132) that the warp mapping packs 8 rows per block
SIZES = [(1, 1), (3, 33), (37, 45), (1057, 31), (5, 2500), (2, 9000)]


def _norm(kind: str, rows: int, cols: int):
    b = GraphBuilder(f"{kind}_{rows}x{cols}")
    x = b.input("x", (rows, cols))
    if kind == "layer_norm":
        y = b.layer_norm(x, b.input("gamma", (cols,)), b.input("beta", (cols,)))
    elif kind == "softmax":
        y = b.softmax(x, axis=-1)
    else:
        y = b.reduce_max(x, axes=[1], keepdims=True)
        b.output(b.reduce_sum(x, axes=[1]), "s")      # a per-row output of another shape
    b.output(y, "y")
    return b.build()


def _run_mapping(wb, g, mapping):
    s = Session(g, backend="cpu", seed=5)
    s.auto("rules")
    if len(s.plan.groups) > 1:          # sibling reductions: rules fuses only edges
        s.fuse([n.id for n in g.nodes])
    assert len(s.plan.groups) == 1 and s.plan.groups[0].schedule.kind == "row_reduce"
    s.set_mapping("k0", mapping)
    gr = s.plan.groups[0]
    assert gr.schedule.mapping == mapping
    ins = wb.make_inputs(g, seed=5)
    wb.check_outputs(s, ins, wb.reference(g, ins), f"mapping {mapping}")
    m = s.measure(repeats=1, warmup=1)
    assert m.within_tolerance, m.per_kernel
    return s


@pytest.mark.parametrize("rows, cols", SIZES, ids=lambda v: str(v))
@pytest.mark.parametrize("kind", ["layer_norm", "softmax", "max_and_sum"])
# (two_phase is a column reduction's form, refused where a reduction reads another's
# result or an output is per element: tests/codegen/test_two_phase_columns.py)
@pytest.mark.parametrize("mapping", [m for m in MAPPINGS if not m.info.partials_by_rows])
def test_every_mapping_matches_reference(wb, kind, rows, cols, mapping):
    # (thread per row sums a long row serially: compensated summation keeps it within
    # float32's bound, so every mapping takes every size)
    s = _run_mapping(wb, _norm(kind, rows, cols), mapping)
    k = s.kernels()[0]
    assert k.launch.mapping == mapping
    if kind == "softmax":
        y = s.run(s.inputs)["y"]
        np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=0, atol=1e-5)


def test_launch_shows_the_mapping():
    g = _norm("softmax", 4096, 768)
    plan, _ = run_planner("rules", g)
    warp = lower_plan(plan.set_mapping("k0", "warp"))[0].launch
    assert (warp.mapping, warp.rows_per_block, warp.block, warp.grid) == ("warp", 8, 256, 512)
    assert str(warp) == "grid=512 block=256 warp/row x8 rows/block"
    split = lower_plan(plan.set_mapping("k0", "split"))[0]
    assert split.launch.cooperative and split.launch.splits >= 2
    assert "split x" in str(split.launch) and "cooperative" in str(split.launch)
    # the partials of each reduction go through the kernel's own global memory
    assert split.workspace and split.scratch_bytes > 0 and split.grid_barriers == 2
    assert str(Launch(4, 128)) == "grid=4 block=128"


def test_plans_are_sized_for_their_device():
    """The mapping rule and the launch follow the device a plan is made for: a 96 x
    16384 LayerNorm is split three ways over an H100's 132 SMs (two 512-thread blocks
    per SM: grid 264) and over an A100's 108 (grid 216), and on a 2-core CPU, where 96
    rows already give every core work, it is one block per row."""
    g = _norm("layer_norm", 96, 16384)
    cpu = Device("a 2-core CPU", "cpu", 20e9, 5e-6, 2, 1e11)
    got = {}
    for dev in (H100, A100, cpu):
        plan = Plan.singletons(g, dev).fuse([n.id for n in g.nodes]).set_mapping("k0", "auto")
        k = lower_plan(plan)[0]
        got[dev.name] = (plan.groups[0].schedule.mapping, k.launch.splits, k.launch.grid)
    assert got[H100.name] == (Mapping.split, 3, 264)
    assert got[A100.name] == (Mapping.split, 3, 216)
    assert got[cpu.name] == (Mapping.block, 1, 96)


def test_split_grid_fits_one_wave():
    g = _norm("layer_norm", 4, 65536)
    plan, _ = run_planner("rules", g)
    k = lower_plan(plan.set_mapping("k0", "split"))[0]
    assert k.launch.grid <= co_resident_grid(k.launch.block, k.shared_bytes, H100)
    assert k.launch.grid <= 4 * k.launch.splits


def test_rule_picks_by_rows_cols_and_device():
    assert choose_mapping(4096, 1024, True, 132) is Mapping.warp
    assert choose_mapping(4096, 4096, True, 132) is Mapping.block
    assert choose_mapping(8, 65536, True, 132) is Mapping.split
    assert choose_mapping(8, 65536, True, 4) is Mapping.block    # enough rows for 4 SMs
    assert choose_mapping(4096, 1024, False, 132) is Mapping.thread
    g = _norm("layer_norm", 8, 65536)
    plan, _ = run_planner("rules", g)
    assert plan.groups[0].schedule.mapping == "block"          # rules: unchanged default
    assert plan.set_mapping("k0", "auto").groups[0].schedule.mapping == "split"
    cands = candidate_mappings(plan.groups[0].schedule, H100)
    assert cands[0] == "split" and set(cands) == set(MAPPINGS) - {Mapping.two_phase}
    ew = GraphBuilder("ew")
    ew.output(ew.exp(ew.input("x", (4, 4))), "y")
    assert candidate_mappings(run_planner("rules", ew.build())[0].groups[0].schedule, H100) == ()
    col = GraphBuilder("col")
    col.output(col.reduce_sum(col.input("x", (64, 8)), axes=[0]), "y")
    col_sched = run_planner("rules", col.build())[0].groups[0].schedule
    # only the coalesced choice (two-phase too where the outputs fill whole warps:
    # tests/codegen/test_two_phase_columns.py)
    assert candidate_mappings(col_sched, H100) == ("thread",)


def test_mapping_refusals_have_reasons():
    ew = GraphBuilder("ew")
    ew.output(ew.exp(ew.input("x", (4, 4))), "y")
    plan, _ = run_planner("rules", ew.build())
    with pytest.raises(FusionRefused, match="row-reduction kernel"):
        plan.set_mapping("k0", "warp")
    plan, _ = run_planner("rules", _norm("softmax", 4, 64))
    with pytest.raises(FusionRefused, match="unknown mapping 'diagonal'"):
        plan.set_mapping("k0", "diagonal")


def test_warp_mapping_keeps_its_rows_in_registers():
    """Each lane keeps its columns of the row (x, and exp(x - max)) in registers; a
    value the user marks regional goes to shared memory, one row slice per warp."""
    g = _norm("softmax", 2048, 700)
    plan, _ = run_planner("rules", g)
    warp = plan.set_mapping("k0", "warp")
    k = lower_plan(warp)[0]
    assert [x.space for x in k.scratch] == ["register", "register"]
    assert k.scratch[0].source is not None and k.scratch[0].slots == 24   # 700/32 -> 6 x 4
    cuda = RENDERERS["cuda"].kernel(k)
    assert "__shfl_xor_sync" in cuda and "float wb_reg0[24];" in cuda
    assert "__syncthreads" not in cuda         # a warp needs no block barrier
    exp_value = warp.groups[0].schedule.row_registers[1]
    shared = lower_plan(warp.set_scheme(exp_value, "regional"))[0]
    assert [x.space for x in shared.scratch] == ["shared", "register"]
    assert shared.scratch[0].rows == 8
    assert "(threadIdx.x >> 5) * 700" in render_kernel(shared, "cuda")


def test_every_mapping_compiles_with_nvrtc(compile_cuda):
    r = RENDERERS["cuda"]
    kernels = []
    for kind in ("layer_norm", "softmax", "max_and_sum"):
        g = _norm(kind, 1057, 2500)
        plan, _ = run_planner("rules", g)
        if len(plan.groups) > 1:
            plan = plan.fuse([n.id for n in g.nodes])
        for m in MAPPINGS:
            if m.info.partials_by_rows and kind != "max_and_sum":
                continue        # (refused: a reduction reads another's, outputs per element)
            k = lower_plan(plan.set_mapping("k0", m))[0]
            kernels.append(k.__class__(**{**k.__dict__, "name": f"{kind}_{m}"}))
    compile_cuda(r.module(kernels), [k.name for k in kernels], "mappings")
