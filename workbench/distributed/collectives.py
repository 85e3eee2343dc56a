"""The collectives of the IR on ``torch.distributed``: each start posts the
asynchronous operation on torch tensors that share memory with NumPy arrays, and its
wait finishes it and returns the rank's local result as a NumPy array.

Every collective maps onto one torch call that gloo (torch 2.13) runs: ``all_reduce``
(SUM, AVG, MAX), ``reduce_scatter_single`` and ``all_gather_single`` (which split and
join along dim 0: another dim is moved to the front first and back after), and
``all_to_all_single``; ``send_recv`` is an ``isend`` to rank+shift beside an ``irecv``
from rank-shift. None needs emulating on this torch (older gloo lacked reduce_scatter:
there ``reduce_scatter_single`` is missing and it is done as an all_reduce and a slice).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.graph import Node


@dataclass
class Pending:
    """A started collective: ``works`` to wait for, then ``finish()`` gives the result."""
    works: list
    finish: Callable[[], np.ndarray]

    def wait(self) -> np.ndarray:
        for w in self.works:
            w.wait()
        return self.finish()


def _front(x: np.ndarray, d: int) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(x, d, 0))


def start(node: Node, x: np.ndarray, rank: int, p: int) -> Pending:
    """Post ``node``'s collective on this rank's local array ``x``."""
    import torch
    import torch.distributed as dist
    t = torch.from_numpy
    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX}
    a = node.attr_map
    if node.op == "all_reduce":
        buf = np.array(x, copy=True)
        return Pending([dist.all_reduce(t(buf), op=ops[a["reduce_op"]], async_op=True)],
                       lambda: buf)
    if node.op == "reduce_scatter":
        d = a["dim"] % x.ndim
        src = _front(x, d)
        out = np.empty((src.shape[0] // p, *src.shape[1:]), x.dtype)
        if hasattr(dist, "reduce_scatter_single"):
            w = dist.reduce_scatter_single(t(out), t(src), op=ops[a["reduce_op"]],
                                           async_op=True)
        else:   # (older torch: gloo had no reduce_scatter)
            w = dist.all_reduce(t(src), op=ops[a["reduce_op"]], async_op=True)
        n = out.shape[0]

        def done():
            if not hasattr(dist, "reduce_scatter_single"):
                out[...] = src[rank * n:(rank + 1) * n]
            return np.ascontiguousarray(np.moveaxis(out, 0, d))
        return Pending([w], done)
    if node.op == "all_gather":
        d = a["dim"] % x.ndim
        src = _front(x, d)
        out = np.empty((src.shape[0] * p, *src.shape[1:]), x.dtype)
        w = dist.all_gather_single(t(out), t(src), async_op=True)
        return Pending([w], lambda: np.ascontiguousarray(np.moveaxis(out, 0, d)))
    if node.op == "all_to_all":
        s, c = a["split_dim"] % x.ndim, a["concat_dim"] % x.ndim
        send = np.ascontiguousarray(np.stack(np.split(x, p, axis=s)))
        recv = np.empty_like(send)
        w = dist.all_to_all_single(t(recv), t(send), async_op=True)
        return Pending([w], lambda: np.ascontiguousarray(np.concatenate(list(recv), axis=c)))
    if node.op == "send_recv":
        shift = a["shift"] % p
        if shift == 0:
            return Pending([], lambda: np.array(x, copy=True))
        src = np.ascontiguousarray(x)
        out = np.empty_like(src)
        works = [dist.isend(t(src), (rank + shift) % p), dist.irecv(t(out), (rank - shift) % p)]
        return Pending(works, lambda: out)
    raise ValueError(f"not a collective: {node.op}")
