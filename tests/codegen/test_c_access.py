"""Where a row kernel's loads and stores land on the CPU (codegen/render/c_access.py),
and the C renderer's decisions made from it: a register copy of an input is read again
from the input, a row kept in an output's row is written there, and the explicit lanes
of render/c_lanes.py take only loops whose loads, so performed, are float32."""
from __future__ import annotations

from workbench.codegen.kir import Assign, Buffer, Load, Loop, Scratch, Store
from workbench.codegen.render.c import CRenderer
from workbench.codegen.render.c_access import host_load, host_store
from workbench.codegen.render.c_lanes import lane_loop
from workbench.dtypes import DType

F32, BF16 = DType.float32, DType.bfloat16


def _row(dtype: DType, out: bool = False) -> Buffer:
    return Buffer("out0" if out else "in0", "y" if out else "x", dtype, 64 * 32, out)


def test_a_register_copy_is_read_again_and_a_home_row_written_there():
    x, y = _row(BF16), _row(F32, out=True)
    copy = Scratch("wb_r0", "x", F32, 32, space="register", slots=8, source=x)
    home = Scratch("wb_h0", "t", F32, 32, space="register", slots=8, home=y)
    plain = Scratch("wb_s0", "t", F32, 32)
    assert host_load(Load("a", copy, "c", src_offset="(row * 32 + col)")) == \
        Load("a", x, "(row * 32 + col)")
    assert host_load(Load("a", home, "c", src_offset="(row * 32 + col)")) == \
        Load("a", y, "(row * 32 + col)")
    assert host_load(Load("a", plain, "col")) == Load("a", plain, "col")
    assert host_store(Store(copy, "c", "a")) is None
    assert host_store(Store(home, "c", "a", node="n3", dst_offset="(row * 32 + col)")) == \
        Store(y, "(row * 32 + col)", "a", node="n3")
    # the renderer prints what these say: the bfloat16 input converted, nothing stored
    r = CRenderer()
    assert r.load(Load("a", copy, "c", src_offset="(row * 32 + col)")) == \
        "float a = wb_bf16_load(in0[(row * 32 + col)]);"
    assert r.store(Store(copy, "c", "a")) == ""
    assert r.store(Store(home, "c", "a", dst_offset="(row * 32 + col)")) == \
        "out0[(row * 32 + col)] = (float)(a);"


def test_lanes_only_for_loops_loading_float32_as_the_cpu_loads():
    """A sum over a register copy of a row: float32 in the IR either way, but a
    bfloat16 input is read again as bfloat16 (GCC found "no vectype" for such loads
    and left the lanes scalar), so only the float32 input's loop gets its lanes."""
    r = CRenderer()
    for dtype, lanes in ((F32, True), (BF16, False)):
        copy = Scratch("wb_r0", "x", F32, 32, space="register", slots=8,
                       source=_row(dtype))
        loop = Loop("col", 32, "block", (Load("a", copy, "col", src_offset="(row * 32 + col)"),
                                         Assign("acc0", "(acc0 + a)")),
                    reduction=("acc0", "+"))
        got = lane_loop(r, loop, 1, [("acc0", "+")], {"acc0": "float"})
        assert (got is not None) == lanes, dtype
