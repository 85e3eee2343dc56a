"""Building distributed programs: a :class:`GraphBuilder` whose inputs and constants
take a placement, and whose collectives are one call each (the start and its wait).

Example::

    >>> b = DistBuilder("dp", ranks=2)
    >>> g = b.input("grad", (8, 4), placement="P(sum)")
    >>> b.output(b.all_reduce(g) * 0.5, "y")
    >>> str(b.build().placements["y"])
    'R'
"""
from __future__ import annotations

from typing import Any

from ..ir.builder import GraphBuilder, Tensor
from .placement import parse_placement
from .program import DistProgram


class DistBuilder(GraphBuilder):
    """``build()`` returns a verified :class:`DistProgram` on ``ranks`` ranks."""

    def __init__(self, name: str = "graph", ranks: int = 2, description: str = ""):
        super().__init__(name, description)
        self.ranks = ranks
        self._placed: dict[str, Any] = {}

    def input(self, name, shape, dtype="float32", range=None, placement="R") -> Tensor:
        t = super().input(name, shape, dtype, range)
        self._placed[t.name] = parse_placement(placement)
        return t

    def constant(self, data, name=None, dtype=None, placement="R") -> Tensor:
        t = super().constant(data, name, dtype)
        if str(placement) != "R":
            self._placed[t.name] = parse_placement(placement)
        return t

    def _collective(self, op: str, x: Tensor, **attrs) -> Tensor:
        started = self.op(op, x, group_size=self.ranks, **attrs)
        return self.op("wait_tensor", started)

    def all_reduce(self, x: Tensor, reduce_op: str = "sum") -> Tensor:
        return self._collective("all_reduce", x, reduce_op=reduce_op)

    def reduce_scatter(self, x: Tensor, dim: int = 0, reduce_op: str = "sum") -> Tensor:
        return self._collective("reduce_scatter", x, reduce_op=reduce_op, dim=dim)

    def all_gather(self, x: Tensor, dim: int = 0) -> Tensor:
        return self._collective("all_gather", x, dim=dim)

    def all_to_all(self, x: Tensor, split_dim: int, concat_dim: int) -> Tensor:
        return self._collective("all_to_all", x, split_dim=split_dim, concat_dim=concat_dim)

    def all_to_all_single(self, x: Tensor) -> Tensor:
        """torch's all_to_all_single, equal splits: each rank's rows in p blocks, block
        j sent to rank j (Shard(0) -> Shard(0))."""
        return self._collective("all_to_all_single", x)

    def send_recv(self, x: Tensor, dim: int = 0, shift: int = 1) -> Tensor:
        return self._collective("send_recv", x, dim=dim, shift=shift)

    def build(self) -> DistProgram:
        return DistProgram(super().build(), self.ranks, self._placed).verify()
