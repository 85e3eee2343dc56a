"""What a fusion would recompute: an expensive value computed again for every element
of a wider loop.

An elementwise kernel computes each value at every index of its loop, so a value
narrower than the loop (a per-channel or per-token value broadcast over a wider one)
is recomputed once per element that reads it. For cheap arithmetic that costs less
than the round trip through memory the fusion saves; for an expensive op (exp, log,
erf, tanh, pow...: ``OpDef.expensive``) it can cost far more: issue 44's selective
scan fused softplus (an exp and a log per value) into a loop 16 times wider, and that
kernel ran 17x slower than the two kernels it replaced. XLA's fusion refuses an
expensive producer whose consumer reuses its elements; here the refusal is priced: the
recomputation's arithmetic (at the rates the device measured: ``features.arith_seconds``)
against what fusing saves (the value's write and read, and a kernel's launch).

    >>> recompute_refusal(g, ["n1", "n2"], ["n3"], device)      # doctest: +SKIP
    'log would be computed 16x per value ...'
"""
from __future__ import annotations

from typing import Sequence

from ..device import Device
from ..ir import Graph
from ..ops import Kind, get_op
from .features import arith_seconds


def _loop(g: Graph, nodes: Sequence[str]) -> int:
    """The elements an elementwise kernel of ``nodes`` loops over: its widest value."""
    return max(g.value(o).numel for n in nodes for o in g.node(n).outputs)


def recompute_refusal(g: Graph, producer: Sequence[str], consumer: Sequence[str],
                      device: Device) -> str | None:
    """Why the elementwise kernel of ``producer`` should not join the wider one of
    ``consumer`` (None where it should): its expensive ops would be computed again for
    every element of the wider loop, at a price above what the fusion saves."""
    ops = {n: get_op(g.node(n).op) for n in producer}
    if not any(op.expensive for op in ops.values()):
        return None
    before, after = _loop(g, producer), _loop(g, [*producer, *consumer])
    if after <= before:
        return None
    extra = {n: float(after - before) for n, op in ops.items()
             if op.kind is not Kind.layout}
    flops = float(sum(ops[n].flops for n in extra) * (after - before))
    cost = arith_seconds(g, extra, flops, device)
    joined = set(consumer)
    crossing = {o for n in producer for o in g.node(n).outputs
                if any(c.id in joined for c in g.consumers.get(o, ()))}
    saved = (2 * sum(g.value(v).nbytes for v in crossing) / device.dram_bandwidth
             + device.launch_overhead)
    if cost <= saved:
        return None
    worst = max((n for n in ops if ops[n].expensive), key=lambda n: ops[n].flops)
    return (f"{ops[worst].name} ({worst}) would be computed {after / before:.3g}x per "
            f"value, once per element of a {after}-element loop: "
            f"{cost * 1e6:.3g} us of recomputation against {saved * 1e6:.3g} us the "
            f"fusion saves (an expensive producer stays in its own kernel)")


__all__ = ["recompute_refusal"]
