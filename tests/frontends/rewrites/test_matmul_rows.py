"""ir/matmul_rows.py: a linear layer over flattened rows (reshape -> 2-D matmul ->
elementwise epilogue -> reshape, as torch.export decomposes nn.Linear) rewritten over
the leading axes -- the same values, bit for bit, on fresh random inputs -- and left
alone where a value of its epilogue is read by anything but a reshape or elementwise
op of the same rows; from_torch applies it, so a linear + residual + LayerNorm
imported from PyTorch plans to one GEMM kernel as its ONNX export does."""
import numpy as np
import pytest

import workbench as wb
from workbench.ir.composites import gelu, layer_norm
from workbench.frontends.rewrites.matmul_rows import fold_row_reshapes
from rewrite_checks import same_outputs


def _linear_block(depth_axes=(8,), outputs=("y",), read_rows=None):
    """x (2, 3, *depth_axes) -> rows (6, K) -> matmul + bias -> GELU -> back to
    (2, 3, 5) -> + residual -> LayerNorm; ``outputs`` also names the 2-D GELU
    (``"h"``) as a graph output; ``read_rows`` reads it with another op."""
    k = int(np.prod(depth_axes))
    g = wb.GraphBuilder("linear_rows")
    x = g.input("x", (2, 3, *depth_axes))
    w, bias = g.input("w", (k, 5)), g.input("bias", (5,))
    res = g.input("res", (2, 3, 5))
    h = gelu(g, g.matmul(g.reshape(x, shape=[6, k]), w) + bias)
    y = layer_norm(g, g.reshape(h, shape=[2, 3, 5]) + res)
    g.output(y, "y")
    if "h" in outputs:
        g.output(h, "h")
    if read_rows == "reduce":
        g.output(g.op("reduce_sum", h, axes=[1], keepdims=True), "rows_sum")
    elif read_rows == "rows_operand":
        g.output(h * g.input("other", (6, 5)), "other_product")
    return g.build()


@pytest.mark.parametrize("depth_axes", [(8,), (4, 2)])
def test_linear_over_flattened_rows_is_done_over_the_leading_axes(depth_axes):
    g = _linear_block(depth_axes)
    f = fold_row_reshapes(g)
    (mm,) = [n for n in f.nodes if n.op == "matmul"]
    assert f.value(mm.outputs[0]).shape == (2, 3, 5)
    # one reshape left at most: the depth axes merged into one (x (2, 3, 4, 2) ->
    # (2, 3, 8)); none between the product, its epilogue and the LayerNorm
    reshapes = [n for n in f.nodes if n.op == "reshape"]
    assert [f.value(n.outputs[0]).shape for n in reshapes] == \
        ([] if depth_axes == (8,) else [(2, 3, 8)])
    assert all(len(f.value(o).shape) == 3 for n in f.nodes for o in n.outputs)
    assert [n.id for n in f.nodes] == [f"n{i}" for i in range(len(f.nodes))]
    same_outputs(g, f)


@pytest.mark.parametrize("case", ["rows output", "reduce", "rows_operand"])
def test_rows_read_otherwise_are_left_alone(case):
    # a 2-D value of the epilogue that is a graph output, or that a row reduction or
    # an op with another 2-D operand reads, would keep a reshape before it: the
    # rewrite would move the reshape, not remove it
    g = _linear_block(outputs=("y", "h") if case == "rows output" else ("y",),
                      read_rows=None if case == "rows output" else case)
    assert fold_row_reshapes(g) is g


def test_rows_that_merge_no_leading_axes_are_left_alone():
    g = wb.GraphBuilder("plain")
    x, w = g.input("x", (6, 8)), g.input("w", (8, 5))
    y = g.input("y", (6, 2, 4))
    g.output(g.reshape(g.matmul(x, w), shape=[2, 3, 5]), "a")
    # rows (6) are the leading axis as it is: nothing to unflatten
    g.output(g.matmul(g.reshape(y, shape=[6, 8]), w), "b")
    built = g.build()
    assert fold_row_reshapes(built) is built


def test_linear_residual_layernorm_from_torch_plans_to_one_gemm_kernel():
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)
            self.norm = torch.nn.LayerNorm(32)

        def forward(self, x):
            return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))

    torch.manual_seed(0)
    block = Block().eval()
    x = torch.randn(2, 24, 32)
    g = wb.from_torch(block, (x,))
    assert [len(g.value(n.outputs[0]).shape) for n in g.nodes if n.op == "matmul"] == [3, 3]
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    # stitch: each matmul a GEMM kernel (its epilogues joined where the cost model,
    # priced with this machine's measured probe, says: a few microseconds either way
    # at this size, so which is the machine's call)
    assert all(gr.schedule.kind == "gemm" for gr in s.plan.groups
               if any(g.node(n).op == "matmul" for n in gr.nodes)), s.plan.describe()
    s.auto("rules")
    # rules: the up projection with its GELU; the down projection with the residual and
    # the LayerNorm in its epilogue
    assert len(s.plan.groups) == 2, s.plan.describe()
    assert all(gr.schedule.kind == "gemm" for gr in s.plan.groups), s.plan.describe()
    y = s.program().run({g.inputs[0]: x.numpy()})
    with torch.no_grad():
        want = block(x).numpy()
    (out,) = g.outputs
    assert np.abs(y[out] - want).max() <= 1e-5 * np.abs(want).max()
