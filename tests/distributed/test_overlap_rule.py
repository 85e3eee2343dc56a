"""One overlap rule (``distributed/overlap.py``) for every decision of ``auto`` that
hopes to hide a transfer behind a kernel: on a link that shares the kernels' cores
(loopback) neither chunking the sharded step nor fusing the optimizer into the
ReduceScatter's arrival is applied, each listed naming that reason; on the same link
beside the cores the fusion is applied. Priced on fixed device and link models."""
from __future__ import annotations

import dataclasses

import pytest

from workbench.device import Device
from workbench.distributed.cost import Link
from workbench.distributed.local import local_steps
from workbench.distributed.overlap import overlaps, pipelined
from workbench.distributed.session import DistSession

from sharded_steps import KEEP, sharded  # noqa: E402

CORE = Device("fast core (model)", "cpu", 20e9, 5e-6, 2, 100e9)
BESIDE = Link("20 GB/s (model)", 10e-6, 1 / 20e9)
SHARED = dataclasses.replace(BESIDE, name="20 GB/s loopback (model)", shares_cores=True)


def test_pipelined_overlaps_only_beside_the_cores():
    assert overlaps(BESIDE) and not overlaps(SHARED)
    assert pipelined(BESIDE, 1.0, 3.0, 4) == pytest.approx(1 + 3 * 3 + 3)
    assert pipelined(SHARED, 1.0, 3.0, 4) == pytest.approx(16)


def _decisions(link):
    # (planned only, never run: 2M elements in each rank's shard, two ring segments)
    s = DistSession(sharded(2, 4096, 1024).program, ranks=2, link=link, device=CORE)
    s.auto("stitch", keep_sharded=KEEP)
    fuse = [x for x in s.step.decisions if "fuse the compute after" in x]
    chunk = [x for x in s.step.decisions if " chunk n" in x]
    return s, fuse, chunk


def test_a_link_that_shares_the_cores_overlaps_nothing_in_either_decision():
    s, fuse, chunk = _decisions(SHARED)
    why = "20 GB/s loopback (model) runs on the cores the kernels run on: nothing overlaps"
    assert len(fuse) == 2 and len(chunk) == 3, s.step.decisions
    rs = next(x for x in fuse if "(reduce_scatter)" in x)
    assert rs.startswith("not applied") and why in rs and "2 segments" in rs, rs
    assert all(x.startswith("not applied") and why in x for x in chunk), chunk
    assert not any(getattr(t, "on_arrival", "") for t in local_steps(s.program))


def test_the_same_link_beside_the_cores_fuses_into_the_arrival():
    s, fuse, chunk = _decisions(BESIDE)
    rs = next(x for x in fuse if "(reduce_scatter)" in x)
    assert rs.startswith("applied") and "2 segments" in rs, rs
    assert all(x.startswith("not applied") and "nothing overlaps" not in x
               for x in chunk), chunk
    assert any(getattr(t, "on_arrival", "") for t in local_steps(s.program))


def test_the_step_model_prices_a_fused_arrival_by_the_same_rule():
    from workbench.distributed.chunk_price import segment_pricer, step_seconds
    from workbench.distributed.received import fuse_received
    d = sharded(2, 4096, 1024).program
    rs = next(n.id for n in d.graph.nodes if n.op == "reduce_scatter")
    f, _, _ = fuse_received(d, rs)
    price = segment_pricer("stitch", CORE)
    assert step_seconds(f, SHARED, price) == pytest.approx(step_seconds(d, SHARED, price))
    assert step_seconds(f, BESIDE, price) < 0.99 * step_seconds(d, BESIDE, price)
