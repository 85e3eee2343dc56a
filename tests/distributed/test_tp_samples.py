"""The Megatron tensor-parallel attention block and the sharded LAMB step: their
single-process references against NumPy's attention and the unsharded LAMB, and runs
on gloo ranks against the reference (4 ranks in the slow tier)."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.distributed.runner import run_ranks
from workbench.distributed.samples import dp_lamb, dp_lamb_sharded, tp_attention
from workbench.runtime.reference import random_inputs, run_reference


def _attention(x, c, heads):
    """Multi-head attention (heads-first weights), + bias, + x, LayerNorm, in NumPy."""
    X, d = x["x"].astype(np.float64), x["wq"].shape[-1]
    y = 0.0
    for h in range(heads):
        s = (X @ x["wq"][h]) @ (x["wk_t"][h] @ X.T) / np.sqrt(d)
        e = np.exp(s - s.max(-1, keepdims=True))
        y = y + (e / e.sum(-1, keepdims=True)) @ (X @ x["wv"][h]) @ x["wo"][h]
    z = y + c["bo"] + X
    z = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
    return z * c["gamma"] + c["beta"]


def test_tp_attention_reference_is_multi_head_attention():
    d = tp_attention(8, 16, 4, 2)
    heads_sum = next(n for n in d.graph.nodes if n.op == "reduce_sum"
                     and list(n.attr("axes")) == [0])      # over the rank's heads
    assert str(d.placements[heads_sum.outputs[0]]) == "P(sum)"
    x = random_inputs(d.graph, 2)
    np.testing.assert_allclose(run_reference(d.graph, x)["out"],
                               _attention(x, d.graph.constants, 4), rtol=1e-4, atol=1e-4)


def test_sharded_lamb_is_the_unsharded_step():
    a, s = dp_lamb(8, 4, 2), dp_lamb_sharded(8, 4, 2)
    assert [n.op for n in s.graph.nodes].count("all_reduce") == 2     # the two norms
    x = random_inputs(a.graph, 4)
    ra, rs = run_reference(a.graph, x), run_reference(s.graph, x)
    for k in ra:
        np.testing.assert_array_equal(ra[k], rs[k])


@pytest.mark.parametrize("ranks", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_attention_and_sharded_lamb_on_ranks(ranks):
    for d in (tp_attention(8, 16, 4, ranks), dp_lamb_sharded(8, 4, ranks)):
        run = run_ranks(d, seed=6)
        assert run.ok, (d.graph.name, run.errors)
