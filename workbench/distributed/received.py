"""Fuse the compute that consumes a received tensor into the collective's last local
work (CoCoNet's fused ReduceScatter + optimizer): the elementwise nodes right after the
wait of a ReduceScatter or AllGather run on each segment of the result as it is
finished -- for the ring ReduceScatter as its last step reduces it, for the ring
AllGather as it arrives (the rank's own shard first) -- instead of after the whole
collective. The kernel on segment i then runs while segment i+1 is still in flight.

In the program it is two attributes of the wait: ``fused`` (the values the fused
nodes make) and ``fuse_segment`` (elements per segment: the ring's message size for
that collective). The nodes are placed right after the wait, so :mod:`.local` makes
them a segment of their own, and the runner compiles that segment for one segment's
length (and the last, shorter one) and calls it per segment from inside the ring.

An ``all_to_all_single``'s result arrives block by block (:mod:`.a2a_peers`: the
rank's own block first, then each peer's): the work after its wait -- the residual and
gate of an expert-parallel layer's combine -- runs on each block as it lands.

Legal where the nodes are elementwise, each operand either the received value, a
fused node's result, a value of the same local shape made before the wait, a scalar
(the same element for every segment), or an input broadcast along the received
value's rows -- one value per row (a router's gate, ``[tokens, 1]``) or one row for
all (a bias) -- where every segment holds whole rows; and a ReduceScatter or
AllGather splits along dim 0 (another dim is moved to the front for the ring, so a
segment would not be a contiguous piece of the result). Refused otherwise, with the
reason.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..errors import FusionRefused
from ..ir.graph import Graph
from ..ops import Kind, get_op
from ..ops.collective import COLLECTIVES, SHARD_LOCAL, WAIT
from .program import DistProgram
from .rewrite import renumbered
from .ring import SEGMENT
from .transforms import _start, _wait_of

FUSABLE = ("reduce_scatter", "all_gather", "all_to_all_single")


def _size(d: DistProgram, v: str) -> int:
    return math.prod(d.local_shape(v))


def fuse_received(d: DistProgram, ref: str, segment: int | None = None
                  ) -> tuple[DistProgram, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The elementwise work after ``ref``'s wait (a reduce_scatter, all_gather or
    all_to_all_single, its wait, or the value it makes) fused into the collective per
    ``segment`` elements (default: the ring's message, cut to whole rows of the
    received value). Returns the program, the values the fused nodes make and each node
    after the wait left unfused with the reason; FusionRefused where nothing can be
    fused."""
    g = d.graph
    n = _start(d, ref, FUSABLE, "only a ReduceScatter's, AllGather's or "
               "all_to_all_single's result arrives in segments that compute can consume")
    if segment is None:     # (whole rows: an operand may be broadcast along them)
        row = math.prod(d.local_shape(n.outputs[0])[1:])
        segment = SEGMENT - SEGMENT % row if row <= SEGMENT else SEGMENT
    if not isinstance(segment, int) or segment < 1:
        raise FusionRefused(f"segment={segment!r}: give a positive number of elements")
    if n.op != "all_to_all_single" and n.attr("dim") % len(g.value(n.inputs[0]).shape):
        raise FusionRefused(f"{n.name} splits dim {n.attr('dim')}: the ring runs it on "
                            "that dim moved to the front, so its segments are no "
                            "contiguous pieces of the result; split along dim 0")
    w = _wait_of(d, n)
    if w.attr("fused"):
        raise FusionRefused(f"the compute after {n.name} is already fused into it")
    recv = w.outputs[0]
    size = _size(d, recv)
    at = g.nodes.index(w)
    run = []
    for m in g.nodes[at + 1:]:      # the compute right after the wait, to the next comm
        if m.op in COLLECTIVES or m.op in (WAIT, SHARD_LOCAL):
            break
        run.append(m)
    made_before = set(g.inputs) | set(g.constants) | \
        {o for m in g.nodes[:at + 1] for o in m.outputs}
    fused, avail, left = [], {recv}, []
    for m in run:
        why = None
        if get_op(m.op).kind is not Kind.elementwise:
            why = f"{m.op} is not elementwise: a segment holds no whole rows"
        elif _size(d, m.outputs[0]) != size:
            why = "its result is not the received value's size"
        else:
            for v in m.inputs:
                if v not in avail and v not in made_before:
                    why = f"it reads {v!r}, made after the wait by work left unfused"
                elif v not in avail and _size(d, v) not in (1, size):
                    why = _broadcast_refusal(d, v, recv, segment)
                elif v not in avail and _size(d, v) == size and \
                        d.local_shape(v) != d.local_shape(recv):
                    why = f"it reads {v!r}, laid out differently from the received value"
                if why:
                    break
        if why:
            left.append((f"{m.outputs[0]} ({m.op})", why))
        else:
            fused.append(m)
            avail.update(m.outputs)
    touches = {recv}
    for m in fused:     # (fused work that never meets the received value waits for nothing)
        if touches.intersection(m.inputs):
            touches.update(m.outputs)
    need = set()        # (and the fused work those read: leaf-only work, m * beta1)
    for m in reversed(fused):
        if touches.intersection(m.outputs) or need.intersection(m.outputs):
            need.update(m.inputs)
            need.update(m.outputs)
    fused = [m for m in fused if need.intersection(m.outputs)]
    if not fused:
        # (the first nodes say why: the rest of a run, an expert's MLP after a
        # dispatch, is refused for the same cause)
        raise FusionRefused(f"nothing after {n.name} can be fused into it: " + (
            "; ".join(f"{a}: {why}" for a, why in left[:3]) + (
                f"; and {len(left) - 3} more" if len(left) > 3 else "")
            if left else "no compute reads its result before the next collective"))
    ids = {m.id for m in fused}
    wait = dataclasses.replace(w, attrs=tuple(sorted(
        {**w.attr_map, "fused": tuple(o for m in fused for o in m.outputs),
         "fuse_segment": segment}.items())))
    order = [*g.nodes[:at], wait, *fused, *[m for m in g.nodes[at + 1:] if m.id not in ids]]
    out = DistProgram(renumbered(g, order), d.ranks, d.leaves)
    said = {a for a, _ in left}
    left = [(f"{m.outputs[0]} ({m.op})", "it does not read the received value")
            for m in run if m.id not in ids and f"{m.outputs[0]} ({m.op})" not in said] + left
    return out.verify(), tuple(m.outputs[0] for m in fused), tuple(left)


def _per_row(shape, rows: tuple) -> bool:
    return len(shape) == len(rows) and shape[0] == rows[0] > 1


def _broadcast_refusal(d: DistProgram, v: str, recv: str, segment: int) -> str | None:
    """Why operand ``v``, broadcast over received value ``recv``, cannot be cut with
    it; None where every segment gets its rows (or all of it)."""
    vs, rs = d.local_shape(v), d.local_shape(recv)
    try:
        fits = np.broadcast_shapes(vs, rs) == tuple(rs)
    except ValueError:
        fits = False
    if not fits or len(rs) < 1:
        return (f"it reads {v!r} of local shape {vs}, broadcast over the received value "
                f"{rs}: a segment would cut it")
    row = math.prod(rs[1:])
    if _per_row(vs, rs) and v in d.graph.constants:
        return (f"it reads constant {v!r} one value per row: each segment would need "
                "its own slice of it; pass it as an input")
    if segment % row:
        return (f"it reads {v!r} of local shape {vs}, broadcast along the received "
                f"value's rows of {row} elements, which segments of {segment} elements "
                f"cut: give a segment that is a multiple of {row}")
    return None


@dataclass(frozen=True)
class Cut:
    """How a fused segment's values are cut into pieces of the received value (``size``
    elements): flat (``rows`` None: every value the received value's size or a scalar)
    or by whole rows (``rows``: the received value's local shape, where an operand is
    broadcast along them -- one value per row, cut with them, or one row for all)."""
    size: int
    rows: tuple | None = None

    @staticmethod
    def of(seg: Graph, size: int) -> "Cut":
        full = [v.shape for v in seg.values if math.prod(v.shape) == size]
        odd = any(math.prod(v.shape) not in (1, size) for v in seg.values)
        return Cut(size, tuple(full[0]) if odd and full else None)

    def shape(self, shape: tuple, length: int) -> tuple:
        n = math.prod(shape)
        if self.rows is None:
            return (length,) if n == self.size else ()
        rows, per = self.rows, self.size // self.rows[0]
        if n == self.size or _per_row(shape, rows):
            return (length // per, *(rows if n == self.size else shape)[1:])
        return () if n == 1 else tuple(shape)

    def part(self, a: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """Array ``a``'s part for elements lo:hi of the received value (a view)."""
        if a.size == self.size:
            return a.reshape(-1)[lo:hi].reshape(self.shape(a.shape, hi - lo))
        if self.rows is not None and _per_row(a.shape, self.rows):
            per = self.size // self.rows[0]
            return a[lo // per:hi // per]
        return a.reshape(()) if a.size == 1 else a


def chunk_graph(seg: Graph, size: int, length: int) -> Graph:
    """Segment graph ``seg`` (local shapes; its full values hold ``size`` elements) for
    one piece of ``length`` elements (:class:`Cut`): full values 1-D of that length,
    scalars 0-D (the same element for every piece) -- or, where an operand is broadcast
    along the rows, full values and per-row operands ``length`` elements' rows."""
    cut = Cut.of(seg, size)
    shape = lambda v: cut.shape(v.shape, length)
    values = tuple(dataclasses.replace(v, shape=shape(v)) for v in seg.values)
    consts = {k: np.asarray(c).reshape(shape(seg.value(k))) for k, c in seg.constants.items()}
    return dataclasses.replace(seg, name=f"{seg.name}.piece{length}", values=values,
                               constants=consts, input_ranges={}).verify()


def arriving_pieces(d: DistProgram, seg) -> int:
    """How many pieces ``seg`` (a segment fused into a received value, as
    :func:`.local.local_steps` gives it) runs on as they arrive: an AllGather's and an
    all_to_all_single's result comes shard by shard, block by block (the own one first,
    then the segments of the others'), a ReduceScatter's in its ring's segments."""
    g = d.graph
    start = g.producer[g.producer[seg.on_arrival].inputs[0]]
    size = _size(d, seg.on_arrival)
    blocks = 1 if start.op == "reduce_scatter" else d.ranks
    return blocks * -(-size // blocks // seg.fuse_segment)


def pieces(n: int, segment: int) -> list[tuple[int, int]]:
    return [(a, min(a + segment, n)) for a in range(0, n, segment)]
