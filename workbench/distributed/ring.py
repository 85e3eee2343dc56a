"""ReduceScatter and AllGather as rings of gloo's own ``isend``/``irecv`` over one flat
buffer, cut into segments.

Why not gloo's ``reduce_scatter_single`` / ``all_gather_single``: on torch 2.13 they run,
but measured on 2 ranks over loopback with 64 MB per rank they take 2.5-3.5x gloo's
AllReduce of the same buffer (ReduceScatter ~250 ms, AllGather ~280 ms, AllReduce
~90 ms; ``benchmarks/collectives.py``), while each moves half its bytes. This ring
moves exactly the bytes of the ring algorithm (each rank sends (p-1)/p of its buffer
for a ReduceScatter, (p-1) shards for an AllGather) and measured 1.6-9x faster than
gloo's own at 4-128 MB (each still 0.6-0.9x gloo's AllReduce of the buffer, where the
algorithm says 0.5x: gloo overlaps its reductions with its transfers better). The transport is still gloo's (its point-to-point messages); only the schedule
is here, as NCCL's ring is a schedule of sends and receives.

Segments let the reduction of one segment run while later ones are still in flight.
Every message carries a tag made of the collective's sequence number on the rank
(every rank starts the same collectives in the same order) and the segment, so two
collectives in flight at once (bucketed, or a ReduceScatter beside an AllGather) never
take each other's messages.
"""
from __future__ import annotations

import numpy as np

from .handoff import to_torch

# elements per message: big enough that gloo's per-message cost (~0.1 ms measured) is
# small against the transfer, small enough that the adds keep pace with the arrivals
SEGMENT = 1 << 20
_REDUCE = {"sum": np.add, "avg": np.add, "max": np.maximum}


def buffer(store: dict | None, key, shape, dtype, xp=np) -> np.ndarray:
    """An array for ``key``: the one ``store`` kept from the last step where it has this
    shape and dtype (a fresh buffer's first touch costs page faults -- ~15 ms per 64 MB
    here), else a new one of module ``xp`` (NumPy, or CuPy on NCCL ranks), kept there."""
    a = store.get(key) if store is not None else None
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if a is None or a.shape != shape or a.dtype != dtype:
        a = xp.empty(shape, dtype)
        if store is not None:
            store[key] = a
    return a


def _segments(n: int, segment: int | None = None) -> list[tuple[int, int]]:
    k = segment or SEGMENT
    return [(a, min(a + k, n)) for a in range(0, n, k)] or [(0, 0)]


def _tag(seq: int, step: int, seg: int) -> int:
    # (gloo tags are 32-bit signed: wrap the sequence)
    return ((seq % 4096) << 19 | (step % 16) << 15 | seg % (1 << 15)) & 0x7FFFFFFF


class RingReduceScatter:
    """ReduceScatter of ``x`` (front dim split into p chunks, one per rank) with
    ``reduce_op``. Step s: send the running partial of chunk (r-1-s), receive that of
    chunk (r-2-s) from rank r-1 and reduce it with the own addend; after p-1 steps the
    rank holds chunk r reduced over every rank. Step 0 is posted by the constructor
    (the start), the rest run in ``wait``. ``segment``: elements per message (default
    :data:`SEGMENT`)."""

    def __init__(self, x: np.ndarray, reduce_op: str, rank: int, p: int, seq: int,
                 store: dict | None = None, segment: int | None = None):
        self.t = to_torch
        self.rank, self.p, self.seq, self.op = rank, p, seq, reduce_op
        self.chunks = np.ascontiguousarray(x).reshape(p, -1)
        n = self.chunks.shape[1]
        self.shape = (x.shape[0] // p, *x.shape[1:])
        self.out = buffer(store, "out", n, x.dtype)
        self.recv = buffer(store, "recv", n, x.dtype) if p > 1 else None
        self.acc = buffer(store, "acc", n, x.dtype) if p > 2 else None
        self.spare = buffer(store, "spare", n, x.dtype) if p > 2 else None
        self.segs = _segments(n, segment)
        self.works = self._post(0, self.chunks[(rank - 1) % p]) if p > 1 else None

    def _post(self, step: int, send: np.ndarray):
        import torch.distributed as dist
        r, p, t = self.rank, self.p, self.t
        sends = [dist.isend(t(send[a:b]), (r + 1) % p, tag=_tag(self.seq, step, i))
                 for i, (a, b) in enumerate(self.segs)]
        recvs = [dist.irecv(t(self.recv[a:b]), (r - 1) % p, tag=_tag(self.seq, step, i))
                 for i, (a, b) in enumerate(self.segs)]
        return sends, recvs

    def wait(self, on_chunk=None) -> np.ndarray:
        """The rank's reduced chunk; ``on_chunk(a, b)`` is called as elements a:b of it
        (flat) are final -- each segment as the last step reduces it, while later
        segments still arrive (:mod:`.received`)."""
        r, p = self.rank, self.p
        if p == 1:
            self.out[...] = self.chunks[0]
            for a, b in self.segs if on_chunk else ():
                on_chunk(a, b)
        for s in range(p - 1):
            sends, recvs = self.works
            own = self.chunks[(r - 2 - s) % p]
            last = s == p - 2
            dst = self.out if last else self.acc
            for (a, b), w in zip(self.segs, recvs):
                w.wait()    # (reduce each segment while later ones still arrive)
                _REDUCE[self.op](self.recv[a:b], own[a:b], out=dst[a:b])
                if last and self.op == "avg":
                    dst[a:b] *= dst.dtype.type(1 / p)
                if last and on_chunk and b > a:
                    on_chunk(a, b)
            for w in sends:
                w.wait()
            if not last:    # (the partial just made is the next step's message)
                self.acc, self.spare = self.spare, dst
                self.works = self._post(s + 1, dst)
        return self.out.reshape(self.shape)


class RingAllGather:
    """AllGather of ``x`` along its front dim: the output holds rank q's shard at q.
    Step s: send shard (r-s) on to rank r+1, receive shard (r-s-1) from rank r-1."""

    def __init__(self, x: np.ndarray, rank: int, p: int, seq: int,
                 store: dict | None = None, segment: int | None = None):
        self.t = to_torch
        self.rank, self.p, self.seq = rank, p, seq
        src = np.ascontiguousarray(x)
        self.shape = (x.shape[0] * p, *x.shape[1:])
        self.out = buffer(store, "out", (p, src.size), x.dtype)
        self.out[rank] = src.reshape(-1)
        self.segs = _segments(src.size, segment)
        self.works = self._post(0) if p > 1 else ([], [])

    def _post(self, step: int):
        import torch.distributed as dist
        r, p, t, o = self.rank, self.p, self.t, self.out
        si, ri = (r - step) % p, (r - step - 1) % p
        sends = [dist.isend(t(o[si, a:b]), (r + 1) % p, tag=_tag(self.seq, step, i))
                 for i, (a, b) in enumerate(self.segs)]
        recvs = [dist.irecv(t(o[ri, a:b]), (r - 1) % p, tag=_tag(self.seq, step, i))
                 for i, (a, b) in enumerate(self.segs)]
        return sends, recvs

    def wait(self, on_chunk=None) -> np.ndarray:
        """The gathered result; ``on_chunk(a, b)`` is called on elements a:b of it
        (flat) as they are there: the rank's own shard first, then each segment as it
        arrives (:mod:`.received`)."""
        r, p, n = self.rank, self.p, self.out.shape[1]
        for a, b in self.segs if on_chunk and n else ():
            on_chunk(r * n + a, r * n + b)
        for s in range(p - 1):
            ri = (r - s - 1) % p
            for (a, b), w in zip(self.segs, self.works[1]):
                w.wait()
                if on_chunk and b > a:
                    on_chunk(ri * n + a, ri * n + b)
            for w in self.works[0]:
                w.wait()
            if s < p - 2:
                self.works = self._post(s + 1)
        return self.out.reshape(self.shape)
