"""What the tests of the sharded optimizer's later steps (chunking the pair, fusing
into the received tensor) start from: the data-parallel AdamW step with its AllReduce
split and the optimizer moved onto the shard."""
from __future__ import annotations

from workbench.distributed.samples import dp_adamw
from workbench.session import Session

KEEP = ["m_out", "v_out"]


def first(s, op: str) -> str:
    """The id of the session's first node of ``op``."""
    return next(n.id for n in s.graph.nodes if n.op == op)


def sharded(ranks: int, rows: int = 8, cols: int = 6):
    """A ``Session(..., ranks=ranks)`` of dp_adamw after split_all_reduce + shard_after."""
    s = Session(dp_adamw(rows, cols, ranks), ranks=ranks)
    s.split_all_reduce("n0")
    s.shard_after(first(s, "all_gather"), keep_sharded=KEEP)
    return s
