"""A kernel as codegen hands it on: its parameters, body, launch and the bytes it moves.

A :class:`Kernel` is one plan group lowered (``lower.lower_group``): its buffers
(:class:`~workbench.codegen.kir.Buffer`), its body of kernel IR statements
(``codegen/kir.py``), how the GPU launches it (:class:`Launch`, from the schedule's
geometry on the plan's device) or the host library call that replaces it
(:class:`LibraryCall`). The renderers print it, the backends compile and run it, the
artifact's manifest records it; the bytes it reads and writes are counted here, from
its buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping as MappingType

from ..device import PORTABLE_SHARED_PER_BLOCK
from ..fusion.geometry import REDUCE_SLOT_BYTES
from ..fusion.mapping import Mapping
from .kir import Buffer, Scratch, Stmt


@dataclass(frozen=True)
class Launch:
    """How the GPU launches the kernel (the CPU ignores it; it runs one thread per
    block): its geometry (``fusion.geometry``) on the plan's device. ``mapping`` is a
    row reduction's thread mapping, ``rows_per_block`` the rows one block takes (warp:
    several short rows), ``splits`` the blocks sharing one row (split); ``stitched``
    marks a multi-phase kernel; ``cooperative`` kernels have grid barriers, so their
    grid is capped to what is co-resident on the device (the GPU backend re-checks it
    against the real one and the compiled kernel).

    >>> str(Launch(512, 256, Mapping.warp, 8))
    'grid=512 block=256 warp/row x8 rows/block'
    """
    grid: int
    block: int
    mapping: Mapping | None = None
    rows_per_block: int = 0
    cooperative: bool = False
    splits: int = 1
    shared_bytes: int = 0      # static shared memory per block
    stitched: bool = False
    # blocks per SM the compiler keeps registers for (``__launch_bounds__``' second
    # argument): 2 for a GPU GEMM kernel (128 registers a thread, no spills), whose
    # second block hides the first's panel loads; 1 elsewhere (part of the source text,
    # so the manifest need not record it)
    resident: int = 1

    def __str__(self) -> str:
        s = f"grid={self.grid} block={self.block}"
        if self.mapping is not None:
            s += " " + self.mapping.info.launch_text(self.rows_per_block, self.splits)
        elif self.stitched:
            s += " stitched"
        if self.cooperative:
            s += " cooperative"
        return s

    def to_json(self) -> dict[str, Any]:
        """The artifact manifest's form (``mapping`` names the mapping, or "stitched")."""
        mapping = "stitched" if self.stitched else (self.mapping.value if self.mapping
                                                     else "")
        return {"grid": self.grid, "block": self.block, "mapping": mapping,
                "rows_per_block": self.rows_per_block, "cooperative": self.cooperative,
                "splits": self.splits, "shared_bytes": self.shared_bytes}

    @staticmethod
    def from_json(d: MappingType[str, Any]) -> "Launch":
        d = dict(d)
        name = d.pop("mapping", "")
        return Launch(**d, mapping=Mapping(name) if name and name != "stitched" else None,
                      stitched=name == "stitched")


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
    phases: int = 1                 # stitched: phases; split rows: passes over the row
    grid_barriers: int = 0
    nodes: tuple[str, ...] = ()     # the graph nodes it implements (sanitized ids)
    # a host BLAS routine the kernel calls, passed as a function pointer after its
    # buffers ("sgemm": a gemm kernel's tiles); "" for none
    blas: str = ""

    # the kernel runs on the CPU only (a GEMM kernel: the C micro-kernel or the host
    # BLAS; it has no CUDA rendering), whether or not it calls ``blas``
    host_only: bool = False
    # its matmuls run on tensor cores (Device.on_tensor_cores: float32 ones where the
    # plan allows TF32, bfloat16 and float16 ones always): cuBLAS in TF32 for a library
    # call, tensor cores for a GPU GEMM tile
    tf32: bool = False
    # how far its operands' rounding on the way in may take each of its matmuls' products,
    # relative to |A| @ |B| (0: exact; tolerance.TF32_PRODUCT_ERROR, HALF_PRODUCT_ERROR):
    # the check widens their bounds by it (measure.verify)
    product_error: float = 0.0
    # bytes of its graph outputs it reads back (a stitched kernel's value passed between
    # phases that is a graph output anyway: fusion/spills.py)
    reread: int = 0

    @property
    def tensor_cores(self) -> bool:
        """Its GEMM tiles run on tensor cores (a GPU GEMM kernel allowed TF32): its CUDA
        source needs the WMMA prelude."""
        return self.tf32 and self.library is None and not self.host_only

    # (cached: a program asks for them on every launch of every run, and the kernel is
    # a frozen value)
    @cached_property
    def inputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.params if not b.is_output)

    @cached_property
    def outputs(self) -> tuple[Buffer, ...]:
        """Graph values the kernel writes (workspace excluded)."""
        return tuple(b for b in self.params if b.is_output and not b.workspace)

    @cached_property
    def workspace(self) -> tuple[Buffer, ...]:
        """Global memory the kernel owns: values between phases, split partials."""
        return tuple(b for b in self.params if b.workspace)

    @property
    def _workspace_bytes(self) -> int:
        # a persistent buffer (a packed constant) counts nothing: it is read in place
        # of the constant it copies, whose bytes the inputs count
        return sum(b.nbytes for b in self.workspace if not b.persistent)

    @property
    def scratch_bytes(self) -> int:
        """Global-memory traffic besides the graph inputs and outputs (the cost model's
        ``scratch_bytes``, fusion/spills.py): each workspace buffer written once and
        read once (values between phases, split partials, operands packed by every
        run), and outputs read back; included in bytes_read/bytes_written."""
        return 2 * self._workspace_bytes + self.reread

    @property
    def bytes_read(self) -> int:
        """Global-memory reads: the elements of each input the kernel loads, each once
        (``Buffer.read_bytes``), plus each workspace buffer once and each output read
        back."""
        return sum(b.read_bytes for b in self.inputs) + self._workspace_bytes + self.reread

    @property
    def bytes_written(self) -> int:
        return sum(b.nbytes for b in self.outputs) + self._workspace_bytes

    @property
    def compulsory_bytes(self) -> int:
        """Graph inputs read once and graph outputs written once (no workspace)."""
        return self.bytes_read + self.bytes_written - self.scratch_bytes

    @property
    def shared_bytes(self) -> int:
        """Block-reduction slots plus shared row caches (what the CUDA source declares)."""
        return self.reductions * REDUCE_SLOT_BYTES + sum(x.numel * x.rows * x.dtype.itemsize
                                                         for x in self.scratch
                                                         if x.space != "register")

    @property
    def dynamic_shared(self) -> dict[str, int]:
        """Where each shared row cache starts in dynamic shared memory, when the kernel's
        shared memory passes the static limit (48 KB: a row too long for registers
        kept in shared memory): the launch then sizes it (``dynamic_shared_bytes``)
        and the kernel opts in to it. Empty otherwise (static ``__shared__`` arrays)."""
        return self._dynamic_layout[0]

    @property
    def dynamic_shared_bytes(self) -> int:
        """Bytes of dynamic shared memory a launch of this kernel passes (0: none)."""
        return self._dynamic_layout[1]

    @cached_property
    def _dynamic_layout(self) -> tuple[dict[str, int], int]:
        """(offset of each shared row cache, bytes in all), each cache 16-byte aligned;
        ({}, 0) within the static limit."""
        if self.shared_bytes <= PORTABLE_SHARED_PER_BLOCK:
            return {}, 0
        at, out = 0, {}
        for x in self.scratch:
            if x.space != "register":
                out[x.name] = at
                at += -(-x.numel * x.rows * x.dtype.itemsize // 16) * 16
        return out, at
