"""New outputs in recycled memory (runtime/outputs.py ``Recycler``): a run's new graph
outputs reuse the buffers of an earlier call's outputs that nothing holds any more, and
never one the caller still holds, however it holds it."""
import threading

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.runtime import random_inputs, run_reference
from workbench.runtime.outputs import Recycler
from workbench.runtime.program import CHECKED_ENV


@pytest.fixture(autouse=True)
def production_runs(monkeypatch):
    """Unchecked runs are the ones that make outputs unfilled (and so recycle)."""
    monkeypatch.delenv(CHECKED_ENV, raising=False)


def _program():
    """A LayerNorm-like row kernel and a second output, each 64 KB (past no threshold:
    what is tested is the bookkeeping, not the faults)."""
    b = wb.GraphBuilder("r")
    x = b.input("x", (128, 128))
    b.output(b.exp(x), "y")
    b.output(b.mul(x, x), "z")
    s = wb.Session(b.build(), backend="cpu")
    return s.graph, s.program()


def _check(g, ins, got):
    ref = run_reference(g, ins)
    for o in g.outputs:
        np.testing.assert_allclose(got[o], ref[o], rtol=1e-6)


def test_dropped_outputs_are_reused_and_held_ones_never_are():
    g, prog = _program()
    first = prog.run(random_inputs(g, 1))
    y_at = first["y"].ctypes.data
    del first                                   # dropped: its memory may come back
    again = prog.run(random_inputs(g, 2))
    assert again["y"].ctypes.data == y_at
    ins3 = random_inputs(g, 3)
    kept = prog.run(ins3)
    snapshot = {o: kept[o].copy() for o in g.outputs}
    for seed in (4, 5, 6):                      # held: each call gets new memory
        ins = random_inputs(g, seed)
        out = prog.run(ins)
        _check(g, ins, out)
        assert all(not np.shares_memory(out[o], kept[o]) for o in g.outputs)
    for o in g.outputs:
        np.testing.assert_array_equal(kept[o], snapshot[o])
    _check(g, ins3, kept)


@pytest.mark.parametrize("hold", ["slice", "torch", "memoryview", "reshape"])
def test_a_view_or_wrapper_of_an_output_keeps_its_memory(hold):
    """Whatever the caller keeps that reads an output's memory keeps it out of reuse,
    though the array the run returned is gone."""
    g, prog = _program()
    ins = random_inputs(g, 7)
    y = prog.run(ins)["y"]
    want = y.copy()
    held = {"slice": lambda a: a[3:, 5:], "torch": torch.from_numpy,
            "memoryview": memoryview, "reshape": lambda a: a.reshape(-1)}[hold](y)
    del y
    for seed in (8, 9):
        out = prog.run(random_inputs(g, seed))
        assert not np.shares_memory(out["y"], np.asarray(held))
    back = {"slice": want[3:, 5:], "torch": want, "memoryview": want,
            "reshape": want.reshape(-1)}[hold]
    np.testing.assert_array_equal(np.asarray(held), back)


def test_runs_in_two_threads_never_share_an_output():
    g, prog = _program()
    results, errors = {}, []

    def worker(seed):
        try:
            for r in range(20):
                ins = random_inputs(g, seed * 100 + r)
                out = prog.run(ins)
                results.setdefault(seed, []).append((ins, out))
        except Exception as e:              # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    outs = [out for v in results.values() for _, out in v]
    addrs = [out["y"].ctypes.data for out in outs]
    assert len(set(addrs)) == len(addrs)        # every result still held: all apart
    for v in results.values():
        for ins, out in v:
            _check(g, ins, out)


def test_kept_buffers_are_bounded():
    r = Recycler(limit=10_000, per_size=2)
    held = [r.empty((100,), np.float32) for _ in range(5)]
    assert r.kept_bytes == 2 * (400 + 64)
    big = r.empty((10_000,), np.float32)          # past the limit: not kept
    assert r.kept_bytes == 2 * (400 + 64)
    del held, big
    a = r.empty((100,), np.float32)
    assert a.ctypes.data % 64 == 0 and a.shape == (100,) and a.dtype == np.float32
