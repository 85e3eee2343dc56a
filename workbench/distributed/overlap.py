"""The one rule by which ``DistSession.auto`` prices overlap of communication and
compute: every decision that hopes to hide a transfer behind a kernel -- chunking a
matmul with its AllReduce, chunking a sharded step (:mod:`.chunk_price`), fusing the
compute that consumes a received tensor into its arrival (:mod:`.received`) -- asks
:func:`overlaps` whether the link can run beside the kernels at all, and prices its
pieces with :func:`pipelined`.

A link whose transfers run on the cores the kernels run on (``shares_cores``: gloo on
loopback, whose bytes the CPU copies) overlaps nothing: a kernel running while a
collective is in flight slows it by as much as it runs, so k pieces cost the sum of
their parts (measured: ``benchmarks/chunk_auto.py`` -- chunking 0.25-0.73x on gloo
here, where a model with overlap said 1.08x faster).
"""
from __future__ import annotations


def overlaps(link) -> bool:
    """Whether compute can run while ``link`` moves bytes (False where its transfers
    share the kernels' cores)."""
    return not getattr(link, "shares_cores", False)


def pipelined(link, first_s: float, second_s: float, k: int) -> float:
    """Seconds for k pieces through two stages, ``first_s`` and ``second_s`` a piece
    each (a piece's matmul then its AllReduce; a segment arriving then its kernel):
    beside the link, piece i's second stage runs during piece i+1's first -- the
    first piece's first stage, k-1 times the longer stage, the last piece's second
    stage; on a link that shares the cores, every stage of every piece in turn."""
    if not overlaps(link):
        return k * (first_s + second_s)
    return first_s + (k - 1) * max(first_s, second_s) + second_s


def no_overlap(link) -> str:
    """The reason named where :func:`overlaps` is False."""
    return f"{link.name} runs on the cores the kernels run on: nothing overlaps"
