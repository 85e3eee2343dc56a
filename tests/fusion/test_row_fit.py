"""The rules planner's incremental row check (fusion/row_fit.py) against the analysis it
stands in for: every merge it proves fits is one ``analyze`` accepts, each group's
record kept merge by merge equals one made from scratch, the storage bound it proves
with holds the cache the sweep really takes, and the plans and decisions are the ones
the planner makes analysing every merge."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.device import H100, assumed_cpu
from workbench.fusion import row_fit
from workbench.errors import FusionRefused
from workbench.fusion.analysis import analyze
from workbench.fusion.greedy import rules_partition
from workbench.fusion.partition import Partition
from workbench.fusion.row_cache import ROW_CACHE_BUDGET
from workbench.fusion.row_fit import RowFit
from workbench.fusion.rows import row_schedule as _row_schedule
from workbench.frontends import load
from workbench.ir.builder import GraphBuilder
from workbench.ops import Kind
from workbench.testing.fuzz.graphs import draw_graph

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "ui"))
from test_large_graphs import layer_stack  # noqa: E402

CPU = assumed_cpu("cpu", 2)
DEVICES = [CPU, H100]


def rms_stack(layers: int, rows: int = 8, cols: int = 16):
    b = GraphBuilder(f"rms{layers}")
    x = b.input("x", (rows, cols))
    for i in range(layers):
        x = b.rms_norm(x, b.constant(np.ones(cols, np.float32), f"w{i}"), eps=1e-6)
    b.output(x, "y")
    return b.build()


def graphs():
    out = {f"fuzz{s}": (lambda s=s: draw_graph(s, max_ops=24)) for s in range(60)}
    out.update({p.stem: (lambda p=p: load(p)) for p in sorted((ROOT / "sample_graphs")
                                                             .glob("*.json"))})
    out["layer_stack(12)"] = lambda: layer_stack(12)
    out["rms_stack(16)"] = lambda: rms_stack(16)
    return out


GRAPHS = graphs()


def _records_equal(a, b) -> None:
    """Two records of one group: the same decisions (values absent and False alike)."""
    assert a.dom == b.dom
    assert {v for v, p in a.per_row.items() if p} == {v for v, p in b.per_row.items() if p}
    assert a.bad == b.bad and a.odd == b.odd
    pa, pb = a.passes, b.passes
    assert {v for v, c in pa.costly.items() if c} == {v for v, c in pb.costly.items() if c}
    assert {v: m for v, m in pa.need.items() if m} == {v: m for v, m in pb.need.items() if m}
    assert pa.kept == pb.kept and pa.stored == pb.stored
    assert pa.itemsize == pb.itemsize


class Audited(RowFit):
    """RowFit checking itself against the analysis and a from-scratch record."""
    n_proved = n_merged = 0

    def check(self, a, b):
        fit = super().check(a, b)
        if fit is not None:
            Audited.n_proved += 1
            ns = tuple(sorted(self.part.members[a] + self.part.members[b],
                              key=self.part.index.__getitem__))
            sched = analyze(self.g, ns, device=self.device)   # refused: the test fails
            rec = [f for f in (self.facts.get(a), self.facts.get(b)) if f is not None]
            stored = sum(f.passes.itemsize for f in rec) + fit.passes.itemsize
            most = fit.dom.cols * sched.rows_per_block * stored
            if self.device.kind == "cpu" and most <= ROW_CACHE_BUDGET:
                assert sched.cache_bytes <= most, (ns, sched.cache_bytes, most)
        return fit

    def merged(self, a, b, gid, fit):
        super().merged(a, b, gid, fit)
        if gid in self.facts:
            Audited.n_merged += 1
            fresh = RowFit(self.g, self.part, self.device)
            _records_equal(self.facts[gid], fresh.record(gid))


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d.name.split()[0])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_incremental_check_matches_the_analysis(name, device, monkeypatch):
    _audit(name, device, monkeypatch)


def _audit(name, device, monkeypatch) -> int:
    """Plan ``name`` with the audited check, plainly and analysing every merge; the
    merges the check proved."""
    g = GRAPHS[name]()
    plain = rules_partition(g, device=device)
    Audited.n_proved = Audited.n_merged = 0
    monkeypatch.setattr("workbench.fusion.greedy.RowFit", Audited)
    monkeypatch.setattr(row_fit, "MIN_OPS", 0)      # records kept from the first op
    audited = rules_partition(g, device=device)
    monkeypatch.setattr(row_fit.RowFit, "check", lambda self, a, b: None)
    monkeypatch.setattr("workbench.fusion.greedy.RowFit", RowFit)
    analysed = rules_partition(g, device=device)
    # the same kernels and the same decisions, word for word, as analysing every merge
    for got in (plain, audited):
        assert got[0].key() == analysed[0].key()
        assert [str(d) for d in got[1]] == [str(d) for d in analysed[1]]
    if name.startswith(("layer_stack", "rms_stack")):
        assert Audited.n_proved > 20 and Audited.n_merged > 20
    return Audited.n_proved


def test_the_check_proves_merges_on_random_graphs(monkeypatch):
    """The audit above is not vacuous on the random graphs: the check proves merges
    there too (reductions with their neighbours)."""
    proved = 0
    for s in range(20):
        with monkeypatch.context() as mp:
            proved += _audit(f"fuzz{s}", CPU, mp)
    assert proved > 20


@pytest.mark.slow
def test_the_shared_memory_limit_cuts_a_long_stack_where_the_analysis_does(monkeypatch):
    """90 LayerNorm layers overflow the CPU rendering's 48 KB of block-reduction slots
    and row cache: the check proves the merges below the limit (the bound on the row
    cache from the passes, not the 32 KB budget), and the cut falls where analysing
    every merge puts it."""
    g = layer_stack(90)
    Audited.n_proved = 0
    calls = []
    monkeypatch.setattr(row_fit, "row_schedule", lambda *a, **k: calls.append(1) or
                        _row_schedule(*a, **k))
    part, log = rules_partition(g, device=CPU)
    sizes = sorted(len(m) for m in part.members.values())
    assert len(sizes) >= 2 and sizes[-1] > 1000
    assert len(calls) < 20            # the storage sweep run near the limit only
    monkeypatch.setattr(row_fit.RowFit, "check", lambda self, a, b: None)
    analysed, analysed_log = rules_partition(g, device=CPU)
    assert part.key() == analysed.key()
    assert [str(d) for d in log] == [str(d) for d in analysed_log]


# (seeds 91, 134, 275, 331 and 389 merge a value out of the stored or kept set)
@pytest.mark.parametrize("seed", [*range(40), 91, 134, 275, 331, 389])
def test_records_follow_random_merges(seed, monkeypatch):
    """Groups merged in a random order (producer into consumer and back, not only the
    rules planner's walk): every merge the check proves, the analysis accepts, and the
    merged record equals one made from scratch."""
    rng = np.random.default_rng(seed)
    g = draw_graph(seed, max_ops=24) if seed % 4 else layer_stack(3 + seed % 5)
    device = DEVICES[seed % 2]
    monkeypatch.setattr(row_fit, "MIN_OPS", 0)
    part = Partition(g)
    fit_check = RowFit(g, part, device)
    edges = [(g.producer[i].id, n.id) for n in g.nodes for i in n.inputs
             if i in g.producer]
    proved = 0
    for k in rng.permutation(len(edges)):
        p, c = edges[k]
        a, b = part.owner[p], part.owner[c]
        if a == b or part.kind[p] is Kind.opaque or part.kind[c] is Kind.opaque \
                or part.cycle({a, b}) is not None:
            continue
        ns = tuple(sorted(part.members[a] + part.members[b], key=part.index.__getitem__))
        fit = fit_check.check(a, b) if part.has_reduce(a) or part.has_reduce(b) else None
        try:
            analyze(g, ns, device=device)
        except FusionRefused:
            assert fit is None, ns
            continue
        proved += fit is not None
        gid = part.merge({a, b})
        fit_check.merged(a, b, gid, fit)
        if part.has_reduce(gid):
            _records_equal(fit_check.record(gid), RowFit(g, part, device).record(gid))
    if seed % 4 == 0:
        assert proved > 5
