"""A GEMM whose epilogue reduces rows keeps its product in an output's buffer until
the epilogue overwrites it there. A training graph's forward + backward made a row
kernel whose final loop stored that output (a LayerNorm's) before recomputing another
output from the product (the GELU gradient at the pre-LayerNorm value): it read the
LayerNorm output back as the product. The store now follows the last read."""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.ir import GraphBuilder
from workbench.runtime import run_reference
from workbench.tolerance import max_rel_error, tolerance
from workbench.dtypes import DType


def _graph():
    b = GraphBuilder("ln_and_grad_of_product")
    x = b.input("x", (4, 16))
    w = b.input("w", (16, 32))
    bias = b.input("bias", (32,))
    h = b.matmul(x, w) + bias
    # (LayerNorm of GELU(h): the row the kernel keeps on chip is GELU's, and the
    # product is read from memory again in the final loop)
    b.output(b.layer_norm(b.gelu(h)), "ln")
    # (an elementwise function of the product, stored after the LayerNorm's output)
    b.output(b.exp(h * h * -0.5) * h + b.erf(h * 0.7071), "dgelu_like")
    return b.build()


@pytest.mark.parametrize("planner", ["rules", "stitch"])
def test_product_is_read_before_the_output_holding_it_is_written(planner):
    g = _graph()
    s = wb.Session(g, backend="cpu")
    s.auto(planner)
    # (the case: one kernel holds the matmul and both outputs)
    assert any(len(gr.nodes) == len(g.nodes) for gr in s.plan.groups)
    rng = np.random.default_rng(7)
    feeds = {k: rng.standard_normal(g.value(k).shape).astype(np.float32) for k in g.inputs}
    got, want = s.run(feeds), run_reference(g, feeds)
    for k in g.outputs:
        assert max_rel_error(got[k], want[k]) <= tolerance(DType.float32), k
