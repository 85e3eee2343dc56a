"""The collectives of the IR on ``torch.distributed``: each start posts the
asynchronous operation on torch tensors that share memory with the rank's arrays
(NumPy on gloo, CuPy on NCCL: :mod:`.handoff`), and its wait finishes it and returns
the rank's local result as an array of the same module.

``all_reduce`` (SUM, AVG, MAX) and ``all_to_all_single`` are torch's calls (the IR's
``all_to_all`` re-shards through it, the IR's ``all_to_all_single`` is it -- but with
compute fused into its result, pairs of sends and receives, :mod:`.a2a_peers`);
``send_recv`` is an ``isend`` to rank+shift beside an ``irecv`` from rank-shift.
ReduceScatter and AllGather split and join along dim 0 (another dim is moved to the
front first and back after). On gloo they run as rings of gloo's ``isend``/``irecv``
(:mod:`.ring`): torch 2.13's gloo has ``reduce_scatter_single`` and
``all_gather_single`` but they take ~3x its AllReduce of the same buffer, where a ring
takes about half. On any other backend (NCCL) they are torch's
``reduce_scatter_single`` / ``all_gather_single``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import itertools

import numpy as np

from ..ir.graph import Node
from .a2a_peers import PeerAllToAll
from .handoff import array_module, to_torch
from .ring import RingAllGather, RingReduceScatter, buffer

# collectives started by this process: the ring's message tags (every rank starts the
# same collectives in the same order, so the numbers agree across ranks)
_SEQ = itertools.count()


@dataclass
class Pending:
    """A started collective: ``works`` to wait for, then ``finish()`` gives the result."""
    works: list
    finish: Callable[..., np.ndarray]
    ring: object = None     # (a ring's own wait calls on_chunk per segment as it lands:
                            # then finish() maps the ring's result back to the layout)

    def wait(self, on_chunk=None) -> np.ndarray:
        """The result; ``on_chunk(a, b)`` (a ring only) called on each flat piece a:b of
        it as the ring makes it final."""
        for w in self.works:
            w.wait()
        if self.ring is not None:
            return self.finish(self.ring.wait(on_chunk))
        return self.finish()


def _front(x, d: int):
    xp = array_module(x)
    return xp.ascontiguousarray(xp.moveaxis(x, d, 0))


def start(node: Node, x: np.ndarray, rank: int, p: int, store: dict | None = None,
          segment: int | None = None) -> Pending:
    """Post ``node``'s collective on this rank's local array ``x``. ``store``: this
    node's buffers, kept by the caller from step to step (a result is then valid until
    the node runs again, as with NCCL's and DDP's persistent buffers); None: fresh.
    ``segment``: the ring's elements per message (compute fused into the result runs
    per segment)."""
    import torch.distributed as dist
    t, xp = to_torch, array_module(x)     # (the gloo-only paths below stay NumPy)
    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX}
    a = node.attr_map
    if node.op == "all_reduce":
        buf = buffer(store, "out", x.shape, x.dtype, xp)
        xp.copyto(buf, x)
        return Pending([dist.all_reduce(t(buf), op=ops[a["reduce_op"]], async_op=True)],
                       lambda: buf)
    gloo = dist.get_backend() == "gloo"
    if node.op == "reduce_scatter":
        d = a["dim"] % x.ndim
        src = _front(x, d)
        back = lambda out: xp.ascontiguousarray(xp.moveaxis(out, 0, d)) if d else out
        if gloo:
            ring = RingReduceScatter(src, a["reduce_op"], rank, p, next(_SEQ), store,
                                     segment)
            return Pending([], back, ring)
        out = xp.empty((src.shape[0] // p, *src.shape[1:]), x.dtype)
        w = dist.reduce_scatter_single(t(out), t(src), op=ops[a["reduce_op"]],
                                       async_op=True)
        return Pending([w], lambda: back(out))
    if node.op == "all_gather":
        d = a["dim"] % x.ndim
        src = _front(x, d)
        back = lambda out: xp.ascontiguousarray(xp.moveaxis(out, 0, d)) if d else out
        if gloo:
            ring = RingAllGather(src, rank, p, next(_SEQ), store, segment)
            return Pending([], back, ring)
        out = xp.empty((src.shape[0] * p, *src.shape[1:]), x.dtype)
        w = dist.all_gather_single(t(out), t(src), async_op=True)
        return Pending([w], lambda: back(out))
    if node.op == "all_to_all":
        s, c = a["split_dim"] % x.ndim, a["concat_dim"] % x.ndim
        send = xp.ascontiguousarray(xp.stack(xp.split(x, p, axis=s)))
        recv = xp.empty_like(send)
        w = dist.all_to_all_single(t(recv), t(send), async_op=True)
        return Pending([w], lambda: xp.ascontiguousarray(xp.concatenate(list(recv), axis=c)))
    if node.op == "all_to_all_single":
        # (equal splits: torch cuts the send buffer's dim 0 into p blocks, block j to
        # rank j, and fills the receive buffer's block r from rank r)
        if gloo and segment is not None:    # (compute fused into it: block by block)
            ring = PeerAllToAll(x, rank, p, next(_SEQ), store, segment)
            return Pending([], lambda out: out, ring)
        src = xp.ascontiguousarray(x)
        out = buffer(store, "out", x.shape, x.dtype, xp)
        w = dist.all_to_all_single(t(out), t(src), async_op=True)
        return Pending([w], lambda: out)
    if node.op == "send_recv":
        shift = a["shift"] % p
        if shift == 0:
            return Pending([], lambda: xp.array(x, copy=True))
        src = xp.ascontiguousarray(x)
        out = xp.empty_like(src)
        works = [dist.isend(t(src), (rank + shift) % p), dist.irecv(t(out), (rank - shift) % p)]
        return Pending(works, lambda: out)
    raise ValueError(f"not a collective: {node.op}")
