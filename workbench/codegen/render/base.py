"""The C-style renderer both targets share: one kernel IR printed as C-like source.

:class:`CStyleRenderer` walks a kernel's statements (``stmts``) and prints what every
target prints alike -- ``Let``, ``Assign``, ``If``, comments, loads and stores through
the target's storage types and conversions -- and the kernel around them: its header
comment (the source map's node ids), signature and body. A target subclasses it
(``c.py``, ``cuda.py``), sets how it spells types and qualifiers, and prints the
statements that meet the hardware: loops, reductions, barriers, GEMM tiles, scratch
arrays (the methods below that raise). The scalar expressions inside come from the op
registry and are printed as they are.
"""
from __future__ import annotations

import re

from ...dtypes import C_STORAGE, DType
from ...ops import all_helpers
from ..kernel import Kernel
from ..kir import (Assign, BlockReduce, Comment, ConvLanes, DeclareScratch, DepthwiseLanes,
                   Gemm, GridSync, If, Let, Load, Loop, OncePerBlock, OnlineStep, PackA,
                   PackB, Store, ThreadTile, WidenOnce)
from .helpers import helper_text

# A node id as it may appear in a comment: the workbench's own sanitized ids (n12).
# Anything else (a model's text) is never printed into generated code.
_NODE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
NODES_PER_LINE = 16


def node_tag(node: str) -> str:
    """The trailing comment naming the node a statement computes (the source map)."""
    return f"  /* {node} */" if node and _NODE_ID.match(node) else ""


def nodes_comment(nodes) -> str:
    """Header lines naming every node a kernel implements, 16 to a line."""
    ids = [n for n in nodes if _NODE_ID.match(n)]
    return "".join(" * nodes " + " ".join(ids[i:i + NODES_PER_LINE]) + "\n"
                   for i in range(0, len(ids), NODES_PER_LINE))


def op_helpers(target: str, uses: str | None = None, extra=()) -> str:
    """The ops' prelude helpers (ops/*.py) and then ``extra`` (the renderer's own) that
    the code ``uses`` calls, as the target spells them; every one for ``uses=None``
    (helpers.py)."""
    return helper_text(all_helpers() + tuple(extra), target, uses)


class CStyleRenderer:
    """What C and CUDA C print alike; a target sets the attributes and prints the
    statements that meet its hardware."""

    target = ""
    storage = dict(C_STORAGE)     # the C type each dtype is stored as
    kernel_prefix = "void"        # what a kernel's signature starts with
    restrict = "restrict"         # how a parameter promises it does not alias
    indent_unit = "  "

    # -- what a target prints its own way ----------------------------------------
    def prelude(self, tensor: bool = False, uses: str | None = None) -> str:
        """What a kernel's source starts with (``tensor``: a kernel with GEMM tiles
        on tensor cores follows; ``uses``: the code that follows, whose helpers only it
        holds -- None: every helper)."""
        raise NotImplementedError

    def loop(self, s: Loop, depth: int) -> list[str]:
        """A loop, bound to the hardware as ``s.bind`` says (kir.Loop)."""
        raise NotImplementedError

    def block_reduce(self, s: BlockReduce, depth: int) -> list[str]:
        raise NotImplementedError

    def grid_sync(self, s: GridSync, depth: int) -> list[str]:
        raise NotImplementedError

    def gemm(self, s: Gemm, depth: int) -> list[str]:
        raise NotImplementedError

    def thread_tile(self, s: ThreadTile, depth: int) -> list[str]:
        raise NotImplementedError

    def online_step(self, s: OnlineStep, depth: int) -> list[str]:
        raise NotImplementedError

    def declare_scratch(self, s: DeclareScratch, depth: int) -> list[str]:
        raise NotImplementedError

    def helper_call(self, s) -> str:
        """A call into the C prelude's micro-kernel helpers (PackA, PackB, WidenOnce,
        DepthwiseLanes, ConvLanes: statements of CPU plans only), without its tag."""
        raise TypeError(f"unknown statement {s!r}")

    # -- what every target prints alike, unless it says otherwise ----------------
    def params(self, k: Kernel) -> str:
        return ", ".join(f"{'' if b.is_output else 'const '}{self.storage[b.dtype]}* "
                         f"{self.restrict} {b.name}" for b in k.params)

    def signature(self, k: Kernel) -> str:
        return f"{self.kernel_prefix} {k.name}({self.params(k)})"

    def supports(self, k: Kernel) -> bool:
        """Whether this target can run the kernel (a GPU has no host BLAS to call)."""
        return True

    def load(self, s: Load) -> str:
        ct = s.buf.dtype.c_compute
        return f"{ct} {s.var} = {self.to_compute(s.buf.dtype, f'{s.buf.name}[{s.offset}]')};"

    def store(self, s: Store) -> str:
        return f"{s.buf.name}[{s.offset}] = {self.to_storage(s.buf.dtype, s.expr)};"

    def to_compute(self, dtype: DType, src: str) -> str:
        """A stored element converted to its compute type."""
        if dtype is DType.bfloat16:     # (its bits, in an unsigned short)
            return f"wb_bf16_load({src})"
        return f"({dtype.c_compute}){src}"

    def to_storage(self, dtype: DType, expr: str) -> str:
        """A computed value converted to its storage type."""
        if dtype is DType.bfloat16:
            return f"wb_bf16_store({expr})"
        return f"({self.storage[dtype]})({expr})"

    def once_per_block(self, s: OncePerBlock, depth: int) -> list[str]:
        return self.stmts(s.body, depth)

    def shared_decls(self, k: Kernel) -> list[str]:
        return []

    def stmts(self, body, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        out: list[str] = []
        for s in body:
            if isinstance(s, Let):
                out.append(f"{pad}{s.dtype.c_compute} {s.var} = {s.expr};{node_tag(s.node)}")
            elif isinstance(s, Assign):
                out.append(f"{pad}{s.var} = {s.expr};{node_tag(s.node)}")
            elif isinstance(s, (Load, Store)):
                line = self.load(s) if isinstance(s, Load) else self.store(s)
                if line:
                    out.append(pad + line + (node_tag(s.node) if isinstance(s, Store) else ""))
            elif isinstance(s, Loop):
                out += self.loop(s, depth)
            elif isinstance(s, BlockReduce):
                out += self.block_reduce(s, depth)
            elif isinstance(s, OncePerBlock):
                out += self.once_per_block(s, depth)
            elif isinstance(s, Comment):
                out.append(f"{pad}/* {s.text} */")
            elif isinstance(s, DeclareScratch):
                out += self.declare_scratch(s, depth)
            elif isinstance(s, If):
                out += [f"{pad}if ({s.cond}) {{"] + self.stmts(s.body, depth + 1) + [f"{pad}}}"]
            elif isinstance(s, GridSync):
                out += self.grid_sync(s, depth)
            elif isinstance(s, Gemm):
                out += self.gemm(s, depth)
            elif isinstance(s, ThreadTile):
                out += self.thread_tile(s, depth)
            elif isinstance(s, OnlineStep):
                out += self.online_step(s, depth)
            elif isinstance(s, (DepthwiseLanes, ConvLanes, WidenOnce, PackA, PackB)):
                out.append(f"{pad}{self.helper_call(s)}{node_tag(s.node)}")
            else:
                raise TypeError(f"unknown statement {s!r}")
        return out

    def header_comment(self, k: Kernel) -> str:
        ins = ", ".join(f"{b.name}={b.dtype.value}[{b.numel}]" for b in k.inputs)
        outs = ", ".join(f"{b.name}={b.dtype.value}[{b.numel}]" for b in k.outputs)
        ws = (f" ({k.scratch_bytes} B of it workspace and outputs read back)" if k.reread
              else f" ({k.scratch_bytes} B of it workspace)" if k.workspace else "")
        return (f"/* kernel {k.name}: group {k.group}, {k.schedule}\n"
                f"{nodes_comment(k.nodes)}"
                f" * launch {k.launch}; reads {k.bytes_read} B, writes {k.bytes_written} B"
                f"{ws}\n"
                f" * inputs {ins or '-'}; outputs {outs or '-'} */")

    def kernel(self, k: Kernel) -> str:
        """The kernel's function (no prelude); a comment saying why, for a kernel this
        target cannot run."""
        if not self.supports(k):
            return (f"/* kernel {k.name}: {k.schedule}\n{nodes_comment(k.nodes)}"
                    " * runs on the host only (a form of the CPU's: its GEMM kernels, which "
                    "may call the host BLAS, and its poolings a plane at a time), so there "
                    "is no CUDA source */\n")
        if k.library is not None:
            args = ", ".join(b.name for b in k.library.inputs)
            outs = ", ".join(b.name for b in k.library.outputs)
            return (f"/* kernel {k.name}: library call {k.library.op}({args}) -> {outs};\n"
                    f"{nodes_comment(k.nodes)}"
                    " * run by the host library (NumPy/BLAS on the CPU, CuPy/cuBLAS on the "
                    "GPU) */\n")
        lines = [self.header_comment(k), self.signature(k) + " {"]
        lines += self.shared_decls(k)
        lines += self.stmts(k.body, 1)
        lines.append("}")
        return "\n".join(lines) + "\n"

    def module(self, kernels) -> str:
        """A complete translation unit: prelude plus every kernel."""
        code = "\n".join(self.kernel(k) for k in kernels)
        return self.prelude(any(k.tensor_cores for k in kernels), code) + "\n" + code

    def source(self, k: Kernel) -> str:
        """A self-contained source: the kernel and the prelude it needs."""
        code = self.kernel(k)
        return self.prelude(k.tensor_cores, code) + "\n" + code


def element(buf, off: str, ld: int, trans: bool, row: str, col: str) -> str:
    """Element (row, col) of a matrix at ``off`` in ``buf``, row-major with leading
    dimension ``ld`` (``trans``: stored column-major)."""
    return (f"{buf.name}[{off} + {col} * {ld} + {row}]" if trans
            else f"{buf.name}[{off} + {row} * {ld} + {col}]")


def index_type(loop: Loop) -> str:
    """The C type of a loop's index arithmetic (64 bits where offsets can pass 2^31)."""
    return "long long" if loop.wide else "int"


def tile_slots(body: list[str], pad: str, slot: str, row_slot: str, ix: str) -> list[str]:
    """A ThreadTile's bindings of ``wb_s`` (the element's slot) and ``wb_si`` (its
    row's), each where the body uses it."""
    text = "\n".join(body)
    return [pad + f"const {ix} {v} = {e};" for v, e in (("wb_s", slot), ("wb_si", row_slot))
            if re.search(rf"\b{v}\b", text)]
