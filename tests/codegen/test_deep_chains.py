"""Long fused chains lower without hitting Python's recursion limit (lowering asks for
an op's inputs' expressions recursively: 330 ops were enough to fail), and leave the
limit as they found it."""
import sys

import numpy as np

from workbench.dtypes import DType
from workbench.ir import GraphBuilder
from workbench.session import Session


def test_a_1500_op_chain_fuses_into_one_kernel_and_matches(wb):
    b = GraphBuilder("chain")
    x = b.input("x", (64,), DType.float32)
    y = x
    for i in range(1500):
        y = b.op("add" if i % 2 else "mul", y, b.op("neg", x) if i % 500 == 0 else x)
    b.output(y, "y")
    g = b.build()
    limit = sys.getrecursionlimit()
    s = Session(g, backend="cpu", seed=0)
    s.auto("rules")
    assert len(s.plan.groups) == 1
    xs = {"x": np.random.default_rng(3).uniform(0.99, 1.01, 64).astype(np.float32)}
    wb.check_outputs(s, xs, wb.reference(g, xs), "1500-op chain")
    assert "t1500" in s.source(s.plan.groups[0].id, "c")
    assert sys.getrecursionlimit() == limit
