"""The kernel IR: a small structured program both renderers print.

Loops are bound to the hardware (``flat``: every thread of the grid strides over the
range; ``grid``: one block per iteration; ``block``: the threads of a block stride
over it; ``serial``). Statements are loads and stores (where storage types and
conversions differ by target), ``Let``/``Assign`` of target-neutral C expressions, a
block-wide reduction and a once-per-block region. The C renderer runs ``flat`` and
``grid`` loops in parallel with OpenMP and ``block`` loops serially, so the CPU runs
the same schedule the GPU does, with one thread per block.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from ..ir import DType


@dataclass(frozen=True)
class Buffer:
    """A kernel parameter: ``name`` is a sanitized identifier, ``value`` the graph value."""
    name: str
    value: str
    dtype: DType
    numel: int
    is_output: bool

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass(frozen=True)
class Scratch:
    """On-chip storage for one value across a row (regional stitching): shared memory
    on the GPU, a per-thread array on the CPU. Indexed by the column."""
    name: str
    value: str
    dtype: DType          # compute type
    numel: int


@dataclass(frozen=True)
class DeclareScratch:
    scratch: Scratch


@dataclass(frozen=True)
class Let:
    var: str
    dtype: DType          # compute type
    expr: str             # target-neutral C


@dataclass(frozen=True)
class Assign:
    var: str
    expr: str


@dataclass(frozen=True)
class Load:
    var: str
    buf: "Buffer | Scratch"
    offset: str


@dataclass(frozen=True)
class Store:
    buf: "Buffer | Scratch"
    offset: str
    expr: str


@dataclass(frozen=True)
class BlockReduce:
    """Combine ``var`` across the threads of a block; every thread gets the result."""
    var: str
    dtype: DType
    combine: str          # "{0}" and "{1}" stand for the two partials
    identity: str
    slot: int             # which shared-memory scratch array to use


@dataclass(frozen=True)
class OncePerBlock:
    body: tuple["Stmt", ...]


@dataclass(frozen=True)
class Comment:
    text: str


@dataclass(frozen=True)
class Loop:
    var: str
    extent: int
    bind: str             # flat | grid | block | serial
    body: tuple["Stmt", ...]
    vector: int = 1       # elements per thread per step (flat loops)
    # (accumulator, OpenMP operator) when the loop reduces; operator "" if lanes
    # may not be combined in any order
    reduction: tuple[str, str] | None = None


Stmt = Union[Let, Assign, Load, Store, BlockReduce, OncePerBlock, Comment, Loop,
             DeclareScratch]


@dataclass(frozen=True)
class Launch:
    """How the GPU launches the kernel (the CPU ignores it)."""
    grid: int
    block: int

    def __str__(self) -> str:
        return f"grid={self.grid} block={self.block}"


@dataclass(frozen=True)
class LibraryCall:
    """An opaque op run by the host library (NumPy on the CPU, CuPy on the GPU)."""
    op: str
    attrs: tuple
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]


@dataclass(frozen=True)
class Kernel:
    name: str
    group: str                      # the plan group it implements
    schedule: str                   # human description of the template and mapping
    params: tuple[Buffer, ...]
    body: tuple[Stmt, ...] = ()
    launch: Launch = Launch(1, 1)
    reductions: int = 0             # shared scratch arrays the block reductions need
    library: LibraryCall | None = None
    flops: int = 0
    scratch: tuple[Scratch, ...] = field(default=())

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.params if not b.is_output)

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.params if b.is_output)

    @property
    def bytes_read(self) -> int:
        """Compulsory global-memory reads: each input buffer once."""
        return sum(b.nbytes for b in self.inputs)

    @property
    def bytes_written(self) -> int:
        return sum(b.nbytes for b in self.outputs)

    @property
    def shared_bytes(self) -> int:
        return self.reductions * 33 * 8 + sum(x.numel * x.dtype.itemsize for x in self.scratch)
