"""One rule for compute in ``auto``: fusing compute into a received tensor prices the
compute as chunking the sharded step does -- the fusion cost model's prediction of the
planner's plan of the segment (``chunk_price.segment_pricer``), no longer its bytes
over DRAM bandwidth -- and the decisions on the samples are the ones the bytes rule
made (compared over every sample, 2 and 4 ranks, three links, when the rule changed:
none differed). Priced on a fixed device model; planned only, never run."""
from __future__ import annotations

import re

import pytest

from workbench.device import Device
from workbench.distributed.chunk_price import segment_pricer
from workbench.distributed.local import local_steps
from workbench.distributed.samples import SAMPLES, moe_ep
from workbench.distributed.session import DistSession, _nbytes

CORE = Device("fast core (model)", "cpu", 20e9, 5e-6, 2, 100e9)


def _fuse_notes(graph, link):
    s = DistSession(graph, ranks=2, link=link, device=CORE)
    s.auto("stitch")
    return s, [x for x in s.step.decisions if "into its arrival" in x
               or "fuse compute into a received tensor" in x]


def test_fusing_into_an_arrival_prices_compute_by_the_cost_model():
    s, notes = _fuse_notes(moe_ep(capacity=64, hidden=256, ffn=1024), "nvlink")
    applied = [x for x in notes if x.startswith("applied")]
    assert len(applied) == 1, notes
    before, after = map(float, re.search(r"model: ([\d.e+-]+) ms -> ([\d.e+-]+) ms",
                                         applied[0]).groups())
    d = s.program
    seg = next(t for t in local_steps(d) if getattr(t, "on_arrival", ""))
    comb = next(n for n in d.graph.nodes if n.op == "all_to_all_single"
                and n.outputs[0] == next(m.inputs[0] for m in d.graph.nodes
                                         if m.op == "wait_tensor"
                                         and m.outputs[0] == seg.on_arrival))
    comp = segment_pricer("stitch", CORE)(seg.graph)
    comm = s.link.time(comb.op, _nbytes(d, comb.inputs[0]), d.ranks)
    assert before == pytest.approx((comm + comp) * 1e3, rel=5e-3)
    assert after < before


@pytest.mark.parametrize("link,applies", [("gloo", set()), ("nvlink", {"moe_ep.json"})])
def test_the_samples_decisions(link, applies):
    got = set()
    for name, (build, sizes) in SAMPLES.items():
        _, notes = _fuse_notes(build(**sizes), link)
        assert notes, name      # (considered and listed, never silent)
        if any(x.startswith("applied") for x in notes):
            got.add(name)
    assert got == applies
