"""``same_outputs``: the one check the graph-rewrite tests share (``ir/batched_matmul``,
``matmul_rows``, ``constant_folding``, ``pad_folding``; imported by name: ``tests/`` is
on sys.path while pytest runs)."""
from __future__ import annotations

import numpy as np

from workbench.runtime import random_inputs, run_reference


def same_outputs(g, f, exact: bool = True, seeds=(0, 1)) -> None:
    """The rewritten graph ``f`` computes what ``g`` does on fresh random inputs, by the
    reference: bit for bit where ``exact`` (a rewrite that only moves reshapes or
    evaluates what the reference would), else within 1e-6 (a convolution summing in
    another order)."""
    assert f.outputs == g.outputs
    for seed in seeds:
        ins = random_inputs(g, seed)
        want, got = run_reference(g, ins), run_reference(f, ins)
        for o in g.outputs:
            assert got[o].shape == want[o].shape, o
            if exact:
                assert np.array_equal(got[o], want[o]), o
            else:
                np.testing.assert_allclose(got[o], want[o], rtol=1e-6, atol=1e-6, err_msg=o)
