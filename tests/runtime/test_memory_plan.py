"""Memory planning (runtime/memory_plan.py): a CPU program's reused intermediates share
one arena where their lifetimes do not overlap. The plan itself on hand-made orders
(sharing, never between a kernel's inputs and outputs, alignment), then real compiled
programs: the same outputs as one buffer per value, the reference matched, no two
values alive at once in the same bytes, and on the first run every shared array
poisoned as its kernel is about to run."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.ir.composites_nn import max_pool
from workbench.runtime import random_inputs
from workbench.runtime.memory_plan import ALIGN, MEMORY_PLAN_ENV, lifetimes, plan_memory

SAMPLES = Path(__file__).resolve().parents[2] / "sample_graphs"


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


def test_values_whose_lifetimes_do_not_overlap_share_memory():
    # x -> a -> b -> c -> y: a dies when c is made, so c takes a's place
    order = [(("x",), ("a",)), (("a",), ("b",)), (("b",), ("c",)), (("c",), ("y",))]
    sizes = {"a": 1000, "b": 1000, "c": 1000}
    plan = plan_memory(order, sizes)
    assert lifetimes(order, set(sizes)) == {"a": (0, 1), "b": (1, 2), "c": (2, 3)}
    assert plan.offsets["c"] == plan.offsets["a"] != plan.offsets["b"]
    assert plan.size == 2 * 1024      # two buffers, each rounded up to whole cache lines


def test_a_kernels_inputs_and_outputs_never_share():
    # a residual: a is read by the second kernel and the third, so neither b nor c (the
    # third kernel's output: a kernel's inputs and outputs are alive together) takes its
    # place; d, made after the last reader of a and b, takes one of theirs
    order = [(("x",), ("a",)), (("a",), ("b",)), (("b", "a"), ("c",)), (("c",), ("d",))]
    sizes = {v: 256 for v in "abcd"}
    plan = plan_memory(order, sizes)
    span = lifetimes(order, set(sizes))
    for u in sizes:
        for v in sizes:
            if u < v and span[u][0] <= span[v][1] and span[v][0] <= span[u][1]:
                ou, ov = plan.offsets[u], plan.offsets[v]
                assert not _overlap((ou, ou + 256), (ov, ov + 256)), (u, v, plan)
    assert plan.offsets["d"] in (plan.offsets["a"], plan.offsets["b"])


def test_random_orders_never_place_live_values_together():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(2, 30))
        names = [f"v{i}" for i in range(n)]
        order = []
        for i in range(n):
            reads = tuple(names[j] for j in rng.choice(i, size=min(i, int(rng.integers(0, 3))),
                                                       replace=False)) if i else ("x",)
            order.append((reads, (names[i],)))
        sizes = {v: int(rng.integers(1, 5000)) for v in names}
        plan = plan_memory(order, sizes)
        span = lifetimes(order, set(sizes))
        assert all(off % ALIGN == 0 for off in plan.offsets.values())
        for u in names:
            for v in names:
                if u < v and span[u][0] <= span[v][1] and span[v][0] <= span[u][1]:
                    a = (plan.offsets[u], plan.offsets[u] + sizes[u])
                    b = (plan.offsets[v], plan.offsets[v] + sizes[v])
                    assert not _overlap(a, b), (u, v)
        assert plan.size <= sum(-(-s // ALIGN) * ALIGN for s in sizes.values())


def _cnn():
    """A small CNN of many kernels: convolutions, a max pool, a concat, a residual."""
    rng = np.random.default_rng(3)
    b = wb.GraphBuilder("cnn")
    x = b.input("x", (1, 8, 24, 24))

    def conv(t, c_in, c_out, k):
        w = b.constant((rng.standard_normal((c_out, c_in, k, k)) / (c_in * k * k) ** 0.5
                        ).astype(np.float32))
        return b.relu(b.op("conv", t, w, pads=[k // 2] * 4))
    a = conv(x, 8, 16, 3)
    p = max_pool(b, a, [2, 2], strides=[2, 2])
    c1, c2 = conv(p, 16, 16, 1), conv(p, 16, 16, 3)
    cat = b.op("concat", c1, c2, axis=1)
    r = b.op("add", conv(cat, 32, 16, 1), p)
    b.output(conv(r, 16, 8, 3), "y")
    return b.build()


@pytest.mark.parametrize("graph", ["cnn", "bert_chain.json", "cross_entropy.json"])
def test_programs_share_memory_and_match_one_buffer_per_value(monkeypatch, graph):
    g = _cnn() if graph == "cnn" else wb.load(SAMPLES / graph)
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    prog = s.program()
    mp = prog._memory
    assert mp is not None
    sizes = {name: int(np.prod(shape)) * dtype.itemsize
             for specs in prog._output_specs.values()
             for name, shape, dtype, poolable in specs if poolable}
    assert mp.size <= sum(-(-n // ALIGN) * ALIGN for n in sizes.values())
    if graph == "cnn":          # (bert_chain's three intermediates are alive together)
        assert mp.size < sum(sizes.values()), (mp.size, sizes)
    feeds = random_inputs(g, 0)
    got = [prog.run(feeds), prog.run(feeds)]            # the first run, then the driver
    pool = prog._pool
    # the arena the plan's size, on a cache line, so every value at its offset is too
    assert pool.arena.nbytes == mp.size and pool.arena.ctypes.data % ALIGN == 0
    assert all(a.ctypes.data % ALIGN == 0 for a in pool.values()), list(pool)
    alive = lifetimes([(tuple(b.value for b in ck.kernel.inputs),
                        tuple(b.value for b in ck.kernel.outputs)) for ck in prog.compiled],
                      set(pool))
    for u in pool:
        for v in pool:
            if u < v and alive[u][0] <= alive[v][1] and alive[v][0] <= alive[u][1]:
                assert not np.shares_memory(pool[u], pool[v]), (u, v)
    monkeypatch.setenv(MEMORY_PLAN_ENV, "0")
    plain = wb.runtime.program.Program(s.plan, prog.backend, kernels=prog.kernels,
                                       compiled=prog.compiled)
    assert plain._memory is None
    want = plain.run(feeds)
    for out in got:
        for k in want:
            np.testing.assert_array_equal(out[k], want[k])
    if graph != "bert_chain.json":   # (its matmuls' bound needs their magnitudes; the
        from plan_checks import check_plan   # outputs equal the unplanned ones above)
        check_plan(s)


def test_the_first_run_poisons_each_shared_array_as_its_kernel_starts():
    """What a kernel forgets to write must read as poison on the first run even where
    its memory held another value earlier in that run: each pooled output is all NaN
    when its kernel launches."""
    s = wb.Session(_cnn(), backend="cpu")
    s.auto("stitch")
    prog = s.program()
    seen = []
    real = prog._launch

    def spy(ck, env):
        for name, _, dtype, poolable in prog._output_specs[id(ck)]:
            if poolable and dtype.is_float:
                seen.append((name, bool(np.isnan(env[name]).all())))
        real(ck, env)
    prog._launch = spy
    prog.run(random_inputs(s.graph, 1))
    assert len(seen) >= 5 and all(ok for _, ok in seen), seen
    shared = {n for n, _ in seen}
    offsets = [prog._memory.offsets[n] for n in shared]
    assert len(set(offsets)) < len(offsets)      # (some of them did share memory)
