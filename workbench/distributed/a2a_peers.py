"""torch's equal-split ``all_to_all_single`` as p-1 pairs of gloo's ``isend``/``irecv``
-- used where compute is fused into its result (:mod:`.received`), so that the work
runs on each block as it lands (the rank's own block first: it never leaves the
rank), instead of after the last one. Unfused, the collective stays torch's call.

Rank r cuts its rows into p blocks and sends block j to rank j; its result holds, at
block i, what rank i sent it -- the exchange of ``ops/collective.py``'s reference.
Each block moves in ``segment``-element messages tagged with the collective's
sequence number and the segment (as :mod:`.ring`'s), so two collectives in flight
never take each other's messages; the sender's rank tells blocks apart.
"""
from __future__ import annotations

import numpy as np

from .handoff import to_torch
from .ring import _segments, _tag, buffer


class PeerAllToAll:
    """``x``'s equal-split all_to_all_single on this rank; ``wait`` gives the result."""

    def __init__(self, x: np.ndarray, rank: int, p: int, seq: int,
                 store: dict | None = None, segment: int | None = None):
        import torch.distributed as dist
        t = to_torch
        self.rank, self.p, self.shape = rank, p, x.shape
        self.src = np.ascontiguousarray(x).reshape(p, -1)     # (kept until sent)
        self.out = buffer(store, "out", self.src.shape, x.dtype)
        self.out[rank] = self.src[rank]
        self.segs = _segments(self.src.shape[1], segment)
        # (receive from r+1, r+2, ...: each peer's block for us is its first send)
        self.peers = [(rank + s) % p for s in range(1, p)]
        self.recvs = [[dist.irecv(t(self.out[j, a:b]), j, tag=_tag(seq, 0, i))
                       for i, (a, b) in enumerate(self.segs)] for j in self.peers]
        self.sends = [dist.isend(t(self.src[j, a:b]), j, tag=_tag(seq, 0, i))
                      for j in ((rank - s) % p for s in range(1, p))
                      for i, (a, b) in enumerate(self.segs)]

    def wait(self, on_chunk=None) -> np.ndarray:
        """The result; ``on_chunk(a, b)`` called on elements a:b of it (flat) as they
        are there: the own block first, then each peer's segments as they arrive."""
        n = self.out.shape[1]
        for a, b in self.segs if on_chunk and n else ():
            on_chunk(self.rank * n + a, self.rank * n + b)
        for j, works in zip(self.peers, self.recvs):
            for (a, b), w in zip(self.segs, works):
                w.wait()
                if on_chunk and b > a:
                    on_chunk(j * n + a, j * n + b)
        for w in self.sends:
            w.wait()
        return self.out.reshape(self.shape)
