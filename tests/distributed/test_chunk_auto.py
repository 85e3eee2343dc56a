"""``auto`` considers chunking the sharded step (``chunk_sharded``): priced by the
model of ``distributed/chunk_price.py`` against the unchunked pair, applied where the
model says faster, otherwise every k listed with its reason and both times -- on fixed
device and link models, so the decisions do not depend on this machine's probe."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.device import Device
from workbench.distributed.chunk_price import segment_pricer, step_seconds
from workbench.distributed.cost import GLOO_LOOPBACK, Link
from workbench.distributed.session import DistSession
from workbench.runtime.reference import random_inputs, run_reference

from sharded_steps import KEEP, sharded  # noqa: E402

# a core whose arithmetic, not its memory, bounds AdamW's update (2 GFLOP/s: the
# sharded work costs more than the bytes the pieces' cuts and joins copy) and one
# whose memory does (100 GFLOP/s); both 20 GB/s
SLOW_CORE = Device("slow core (model)", "cpu", 20e9, 5e-6, 1, 2e9)
FAST_CORE = Device("fast core (model)", "cpu", 20e9, 5e-6, 2, 100e9)
ETHERNET = Link("10 GbE (model)", 20e-6, 1 / 1.25e9)     # beside the cores
FAST_LINK = Link("20 GB/s (model)", 10e-6, 1 / 20e9)


def _auto(link, device, rows=512, cols=512):
    s = DistSession(sharded(2, rows, cols).program, ranks=2, link=link, device=device)
    before = s.program
    s.auto("stitch", keep_sharded=KEEP)
    return s, before, [x for x in s.step.decisions if " chunk n" in x]


def test_applied_where_the_link_is_slow_and_the_work_arithmetic_bound():
    s, before, notes = _auto(ETHERNET, SLOW_CORE)
    applied = [x for x in notes if x.startswith("applied")]
    assert len(applied) == 1, notes
    k = int(applied[0].split(" into ")[1].split()[0])
    ops = [n.op for n in s.graph.nodes]
    assert ops.count("reduce_scatter") == ops.count("all_gather") == k
    # the other ks listed, each with its reason and times
    assert len(notes) == 3 and all("ms -> " in x for x in notes), notes
    price = segment_pricer("stitch", SLOW_CORE)
    whole = step_seconds(before, ETHERNET, price)
    assert step_seconds(s.program, ETHERNET, price) < 0.9 * whole
    x = random_inputs(before.graph, 2)
    for name, r in run_reference(before.graph, x).items():
        np.testing.assert_array_equal(run_reference(s.graph, x)[name], r)
    s.undo()
    assert s.program is before


@pytest.mark.parametrize("link, device, why", [
    # (loopback: the link is the cores: nothing overlaps, the copies are added)
    (GLOO_LOOPBACK, SLOW_CORE, "runs on the cores the kernels run on: nothing overlaps"),
    # (a fast link: little communication to hide the cuts and joins behind)
    (FAST_LINK, FAST_CORE, "the cuts and joins copy more than the overlap hides")])
def test_listed_with_the_reason_where_it_does_not_pay(link, device, why):
    s, before, notes = _auto(link, device)
    assert [n.op for n in s.graph.nodes].count("reduce_scatter") == 1
    assert len(notes) == 3 and all(x.startswith("not applied") and why in x
                                   for x in notes), notes


def test_refusals_and_one_rank_are_listed():
    s, _, notes = _auto(ETHERNET, SLOW_CORE, rows=8, cols=6)     # 6 columns: k = 4, 8
    assert sum("splits into" in x for x in notes) == 2, notes
    one = DistSession(sharded(1).program, ranks=1, link=ETHERNET, device=SLOW_CORE)
    one.auto("stitch", keep_sharded=KEEP)
    assert any(x.startswith("not applied: pipelining a sharded step (chunk_sharded): one "
                            "rank")
               for x in one.step.decisions), one.step.decisions


def test_offered_by_the_app_with_its_effect_or_refusal():
    from workbench.ui.dist_actions import candidates, effect_line
    s = DistSession(sharded(2, 8, 6).program, ranks=2, link=ETHERNET, device=SLOW_CORE)
    offers = {o.label: o for o in candidates(s, keep_sharded=KEEP)
              if o.method == "chunk_sharded"}
    rs = next(n.id for n in s.graph.nodes if n.op == "reduce_scatter")
    two, four = offers[f"chunk_sharded {rs} k 2"], offers[f"chunk_sharded {rs} k 4"]
    assert two.legal and "nodes; model" in effect_line(s, two)
    assert not four.legal and "splits into 4 equal pieces" in effect_line(s, four)
    two.apply(s)
    assert s.step.action == f"chunk_sharded {rs} k 2"
