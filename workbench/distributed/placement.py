"""Placements: where a value's elements live across p ranks (as torch's DTensor says).

``Replicate()``: every rank holds the whole tensor. ``Shard(dim)``: rank r holds the
r-th of p equal slices along ``dim``. ``Partial(op)``: every rank holds a tensor of the
whole shape, and the value is their sum (mean, max) -- pending the reduction an
``all_reduce`` or ``reduce_scatter`` does. Text forms: ``R``, ``S(0)``, ``P(sum)``.

This module also says what each placement means for arrays: a rank's local shape, the
slice (or the addend) a rank holds of a global array, and the global array put back
together from the ranks' pieces.
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

from ..errors import GraphError
from ..ops.collective import REDUCE_OPS


@dataclass(frozen=True)
class Replicate:
    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True)
class Shard:
    dim: int

    def __str__(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True)
class Partial:
    reduce_op: str = "sum"

    def __post_init__(self):
        if self.reduce_op not in REDUCE_OPS:
            raise GraphError(f"Partial({self.reduce_op!r:.30}): a partial value is pending "
                             f"one of {', '.join(REDUCE_OPS)}")

    def __str__(self) -> str:
        return f"P({self.reduce_op})"


Placement = Union[Replicate, Shard, Partial]
_TEXT = re.compile(r"^(R|S\((-?\d+)\)|P\((\w+)\))$")


def parse_placement(x) -> Placement:
    """A placement from its text (``R``, ``S(1)``, ``P(sum)``) or as it is."""
    if isinstance(x, (Replicate, Shard, Partial)):
        return x
    m = _TEXT.match(x.replace(" ", "")) if isinstance(x, str) else None
    if not m:
        raise GraphError(f"placement {x!r:.40} is not R, S(dim) or P(sum|avg|max) "
                         "(replicated, sharded on dim, partial pending a reduction)")
    if m.group(2) is not None:
        return Shard(int(m.group(2)))
    if m.group(3) is not None:
        return Partial(m.group(3))
    return Replicate()


def check_on(pl: Placement, shape: Sequence[int], p: int, what: str) -> Placement:
    """``pl`` for a value of ``shape`` over p ranks, a Shard's dim made non-negative;
    GraphError where the dim is out of range or does not divide into p shards."""
    if isinstance(pl, Shard):
        rank = len(shape)
        if not -rank <= pl.dim < rank:
            raise GraphError(f"{what}: Shard({pl.dim}) is out of range for rank {rank}")
        d = pl.dim % rank
        if shape[d] % p:
            raise GraphError(f"{what}: Shard({d}) of {list(shape)} over {p} ranks: "
                             f"{shape[d]} does not divide by {p}; pad it or shard "
                             "another dim")
        return Shard(d)
    return pl


def local_shape(shape: Sequence[int], pl: Placement, p: int) -> tuple[int, ...]:
    """The shape one rank holds."""
    s = list(shape)
    if isinstance(pl, Shard):
        s[pl.dim] //= p
    return tuple(s)


def _addends(a: np.ndarray, op: str, p: int, key: str) -> list[np.ndarray]:
    """p arrays whose sum (mean, max) is ``a``: random, so a runner that reduced the
    wrong way (or not at all) cannot match; the same on every rank (seeded by ``key``)."""
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    if op == "max":
        # every rank below the value but one, which holds it
        owner = rng.integers(0, p, a.shape)
        gap = rng.uniform(0.1, 1.0, (p, *a.shape)).astype(a.dtype)
        return [np.where(owner == r, a, a - gap[r]).astype(a.dtype) for r in range(p)]
    noise = rng.uniform(-1, 1, (p, *a.shape)).astype(np.float64)
    noise -= noise.mean(axis=0)
    scale = p if op == "sum" else 1
    return [(a.astype(np.float64) / scale + noise[r]).astype(a.dtype) for r in range(p)]


def piece(a: np.ndarray, pl: Placement, p: int, rank: int, key: str = "") -> np.ndarray:
    """What rank ``rank`` holds of the global array ``a`` under ``pl``."""
    if isinstance(pl, Shard):
        n = a.shape[pl.dim] // p
        idx = [slice(None)] * a.ndim
        idx[pl.dim] = slice(rank * n, (rank + 1) * n)
        from .handoff import array_module     # (NumPy, or CuPy on an NCCL rank)
        return array_module(a).ascontiguousarray(a[tuple(idx)])
    if isinstance(pl, Partial):
        return _addends(a, pl.reduce_op, p, key)[rank]
    return a


def assemble(pieces: Sequence[np.ndarray], pl: Placement) -> np.ndarray:
    """The global array from every rank's piece (rank order)."""
    if isinstance(pl, Shard):
        return np.concatenate(pieces, axis=pl.dim)
    if isinstance(pl, Partial):
        stack = np.stack([np.asarray(x, np.float64) for x in pieces])
        red = {"sum": stack.sum(0), "avg": stack.mean(0), "max": stack.max(0)}
        return red[pl.reduce_op].astype(pieces[0].dtype)
    return pieces[0]
