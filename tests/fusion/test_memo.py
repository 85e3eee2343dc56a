"""The planner's remembered analyses (fusion/memo.py) and kernel keys (regions.py):
the same answers as computing them afresh, each computed once per graph, and forgotten
when the graph changes."""
from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import pytest

from workbench.device import H100, assumed_cpu
from workbench.errors import FusionRefused
from workbench.fusion import analyze, analyze_stitched
from workbench.fusion import regions
from workbench.fusion.memo import AnalysisMemo
from workbench.fusion.regions import region_key

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_graphs"))
from make_samples import (bias_gelu_residual_layernorm, cross_entropy, softmax,  # noqa: E402
                          transformer_stack)

CPU = assumed_cpu("test cpu", 2)


def _answer(f):
    try:
        return f()
    except FusionRefused as e:
        return f"refused: {e}"


def _prefixes(g):
    """Every run of consecutive ops of g (up to 8): legal groups and refused ones."""
    ids = [n.id for n in g.nodes]
    return [tuple(ids[i:j]) for i in range(len(ids))
            for j in range(i + 1, min(len(ids), i + 8) + 1)]


@pytest.mark.parametrize("device", [H100, CPU], ids=["h100", "cpu"])
def test_memo_answers_as_analyze_does_and_computes_each_once(device):
    g = transformer_stack(60)
    memo = AnalysisMemo()
    sets = _prefixes(g)
    for ns in sets:
        assert _answer(lambda: memo.analyze(g, ns, device=device)) == \
            _answer(lambda: analyze(g, ns, device=device)), ns
    refused = [ns for ns in sets if isinstance(_answer(lambda: analyze(g, ns, device=device)), str)]
    assert refused and len(refused) < len(sets)     # both kinds of answer were checked
    done = memo.computed
    assert done == len(set(sets))
    for ns in sets:                                  # asked again: nothing recomputed
        _answer(lambda: memo.analyze(g, ns, device=device))
    assert memo.computed == done


def test_memo_keys_on_forced_values_and_device():
    g = bias_gelu_residual_layernorm(64, 256)
    ns = tuple(n.id for n in g.nodes)
    memo = AnalysisMemo()
    inner = [o for n in g.nodes[:-1] for o in n.outputs]
    for regional, local, device in [((), (), H100), ((), inner[:1], H100),
                                    (inner[-1:], (), H100), ((), (), CPU)]:
        assert _answer(lambda: memo.analyze(g, ns, regional, local, device=device)) == \
            _answer(lambda: analyze(g, ns, regional=regional, local=local, device=device))
    assert memo.computed == 4


def test_memo_forgets_when_the_graph_changes():
    # the same node ids and ops on other shapes: the first graph's answers do not hold
    small, big = softmax(64, 256), softmax(8, 65536)
    assert [n.id for n in small.nodes] == [n.id for n in big.nodes]
    ns = tuple(n.id for n in small.nodes)
    memo = AnalysisMemo()
    a = memo.analyze(small, ns, device=H100)
    b = memo.analyze(big, ns, device=H100)
    assert memo.computed == 2
    assert a == analyze(small, ns, device=H100)
    assert b == analyze(big, ns, device=H100)
    assert a != b                                    # (so the test can tell them apart)
    memo.analyze(small, ns, device=H100)             # back to the first: computed again
    assert memo.computed == 3


def test_stitched_phases_with_a_shared_memo_are_the_ones_made_afresh():
    g = transformer_stack(60)
    memo = AnalysisMemo()
    for ns in _prefixes(g):
        assert _answer(lambda: analyze_stitched(g, ns, device=H100, memo=memo)) == \
            _answer(lambda: analyze_stitched(g, ns, device=H100)), ns


def test_region_keys_follow_the_graph():
    small, big = softmax(64, 256), softmax(8, 65536)
    ns = [n.id for n in small.nodes]
    k_small, k_big = region_key(small, ns), region_key(big, ns)
    assert k_small != k_big                           # shapes are part of the key
    assert region_key(small, ns) == k_small
    assert small in regions._PARTS and big in regions._PARTS
    gone = weakref.ref(big)
    del big
    gc.collect()                       # the table does not keep a graph alive
    assert gone() is None



def _stitched_groups(g, device):
    """The stitched kernels of g's stitch plan and of every run of its ops."""
    from workbench.fusion import make_group, run_planner
    from workbench.fusion.cost import CostModel
    plan, _ = run_planner("stitch", g, model=CostModel.for_device(device))
    out = [gr for gr in plan.groups if gr.schedule.kind.value == "stitched"]
    for ns in _prefixes(g):
        try:
            gr = make_group(g, ns, stitch=True, device=device)
        except FusionRefused:
            continue
        if gr.schedule.kind.value == "stitched":
            out.append(gr)
    return out


def test_stitched_kernels_priced_from_cached_phases_as_from_fresh_ones():
    from workbench.fusion.cost import CostModel
    from workbench.fusion.features import features
    # (cross entropy's stitch plan is a stitched kernel; the same ids on other shapes)
    small, big = cross_entropy(64, 512), cross_entropy(8, 50257)
    model = CostModel.for_device(H100)
    seen = 0
    for g in (small, big, small):       # the second graph's phases are its own
        for gr in _stitched_groups(g, H100):
            assert model.features(g, gr) == features(g, gr, H100)
            seen += 1
    assert seen >= 3
    a = _stitched_groups(small, H100)[0]
    assert model.features(small, a) != model.features(big, a)
