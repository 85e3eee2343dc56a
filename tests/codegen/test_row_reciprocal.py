"""CPU row kernels. A softmax's exp row is kept in its output's row between the passes
(test at the end). A CPU row kernel divides by a softmax's denominator once per row: the elements are
multiplied by its reciprocal (``RowLowerer._compute``; a vector division costs 3x a
product). Only that divisor, a sum of e^(x - max x), which is in [1, cols] or not
finite: a reciprocal of any other per-row divisor may be subnormal or inf, so x / sum(x)
keeps its division. The GPU's source keeps the division. Results against the NumPy
reference on fresh random rows (outputs poisoned), with masked (-inf), huge and NaN
rows, and rows whose plain sum is subnormal."""
from __future__ import annotations

import re

import numpy as np
import pytest

from workbench.ir import GraphBuilder, composites
from workbench.session import Session

F32 = np.float32


def _column_loops(src: str) -> list[str]:
    """The bodies of the kernel's column loops (``for (int col ...`` to its end)."""
    body = src[src.index("void k"):]
    out = []
    for m in re.finditer(r"for \(int col", body):
        depth, i = 0, body.index("{", m.start())
        for j in range(i, len(body)):
            depth += {"{": 1, "}": -1}.get(body[j], 0)
            if depth == 0:
                out.append(body[i:j])
                break
    return out


def _divides_in_loops(src: str) -> bool:
    return any(" / " in ln.split("/*")[0] for loop in _column_loops(src)
               for ln in loop.splitlines())


@pytest.mark.parametrize("shape", [(24, 200), (6, 3001)])
def test_softmax_multiplies_by_the_reciprocal_and_matches_numpy(shape, check_graph):
    b = GraphBuilder("softmax_rows")
    b.output(composites.softmax(b, b.input("x", shape)), "y")
    g = b.build()
    s = Session(g, backend="cpu")
    s.auto("stitch")
    (k,) = s.kernels()
    src = s.source(k.name.split("_")[0], target="c")
    assert re.search(r"float t\d+ = 1\.0f / acc\d+;", src), src[src.index("void k"):]
    assert not _divides_in_loops(src), src[src.index("void k"):]
    assert " / acc" in s.source(k.name.split("_")[0], target="cuda")   # (GPU unchanged)
    rng = np.random.default_rng()
    x = (rng.standard_normal(shape) * 8).astype(F32)
    x[0, ::3] = -np.inf                   # a masked row
    x[1] = np.finfo(F32).max / 2          # every term e^0
    x[2, 5] = np.nan                      # a NaN row: all NaN
    x[3, :] = -np.inf                     # all masked: NaN, as NumPy's
    x[4, 1] = 80.0                        # one term dominates
    check_graph(g, "stitch", inputs={"x": x})
    check_graph(g, "stitch", seed=int(rng.integers(1 << 30)))


def test_another_per_row_divisor_keeps_its_division(check_graph):
    # x / sum(x): a row of 1e-41s sums to 6.4e-40, whose reciprocal is inf
    b = GraphBuilder("normalize_rows")
    x = b.input("x", (8, 64))
    b.output(x / b.reduce_sum(x, axes=[-1], keepdims=True), "y")
    g = b.build()
    s = Session(g, backend="cpu")
    s.auto("stitch")
    (k,) = s.kernels()
    src = s.source(k.name.split("_")[0], target="c")
    assert _divides_in_loops(src), src[src.index("void k"):]
    x = np.abs(np.random.default_rng().standard_normal((8, 64))).astype(F32) + 0.1
    x[0] = 1e-41
    check_graph(g, "stitch", inputs={"x": x})


def test_a_computed_row_is_kept_in_the_output_it_becomes(check_graph):
    """Softmax's e^(x - max) is kept between the passes in the row of the output the
    last pass writes (``RowLowerer._home``), not in an array on the stack: read back
    before each element is overwritten, here in a kernel writing a LayerNorm of the
    same rows and a product too (which may not be its home). A float16 output cannot hold a float32 row: its kernel keeps the
    array."""
    b = GraphBuilder("rows_at_home")
    x, r = b.input("x", (40, 300)), b.input("r", (40, 300))
    # (outputs not computed from the exp row first: stored into the exp row's home,
    # they would have overwritten it before the softmax read it back -- 3e3 off)
    b.output(composites.layer_norm(b, x + r, b.input("g", (300,)), b.input("b", (300,))),
             "ln")
    b.output(x * 2.0, "twice")
    b.output(composites.softmax(b, x), "p")
    g = b.build()
    s = Session(g, backend="cpu")
    s.auto("stitch")
    for k in s.kernels():
        src = s.source(k.name.split("_")[0], target="c")
        body = src[src.index("void k"):]
        assert not re.search(r"float wb_reg\d+\[", body), body
        if "wb_expf" in body:
            assert re.search(r"kept in the row of out\d", body), body
    for seed in (1, 2):
        check_graph(g, "stitch", seed=seed)
    b = GraphBuilder("softmax_half_out")
    b.output(b.op("cast", composites.softmax(b, b.input("x", (8, 300))), to="float16"), "p")
    g = b.build()
    s = Session(g, backend="cpu")
    s.auto("stitch")
    (k,) = s.kernels()
    assert re.search(r"float wb_reg\d+\[300\]", s.source(k.name.split("_")[0], target="c"))
    check_graph(g, "stitch")
