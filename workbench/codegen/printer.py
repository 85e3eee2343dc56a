"""A readable, target-neutral text form of one kernel IR (like a jaxpr).

``format_kernel(k)`` is a pure function of the kernel: a header line (name, group,
schedule), the params (identifier, role, dtype and element count, and the graph value
each holds), the scratch arrays, the launch, then the body, one statement per line and
indented by nesting. It never raises on a kernel the lowering produces; an unknown
statement type prints as ``? <TypeName>``.

Everything printed is what the IR holds. Identifiers and expressions are generated;
the one field that carries model text is a buffer's (or scratch array's) ``value``,
the graph value's name. It is escaped (non-printable characters as ``\\n``,
``\\x1b``...), cut to 40 characters, and printed only in a trailing ``#`` comment.
As a last guard every output line has its non-printable characters escaped, so a
statement is always exactly one line whatever its fields hold.

Example (the layernorm sample, 4096 x 1024, under planner rules; body shortened)::

    >>> plan, _ = run_planner("rules", load("sample_graphs/layernorm.json"))  # doctest: +SKIP
    >>> print(format_kernel(lower_plan(plan)[0]))          # doctest: +SKIP
    kernel k0_reduce_mean_sub_mul_etc  group k0  row_reduce rows=4096 cols=1024 block per row
    params:
      in        in0: f32[4194304]  # x
      in        in1: f32[1024]  # gamma
      in        in2: f32[1024]  # beta
      out       out0: f32[4194304]  # y
    launch: grid=4096 block=256 block/row  shared=528 B
    body:
      loop row in [0, 4096) grid:
        # reduce_mean over [1]
        let acc0: f32 = 0.0f
        loop col in [0, 1024) block reduce(+: acc0):
          load t1 = in0[row * 1024 + col]
          acc0 = (acc0 + t1)
        block_reduce acc0 (block, slot 0)
        ...
"""
from __future__ import annotations

from typing import Callable

from ..dtypes import DType
from .kir import (Assign, BlockReduce, Buffer, Comment, ConvLanes, DeclareScratch,
                  DepthwiseLanes, Gemm, GridSync, If, Let, Load, Loop, OncePerBlock,
                  OnlineStep, PackA, PackB, Scratch, Store, ThreadTile, WidenOnce)
from .kernel import Kernel

INDENT = "  "
VALUE_CHARS = 40      # model text is display only: a name, never a paragraph

def _dtype(dt) -> str:
    return dt.short if isinstance(dt, DType) else str(dt)


def _escape(text: str) -> str:
    """Non-printable characters (newlines, ESC, bidi overrides, U+2028...) as Python
    escapes, so text from a model file can neither break a line nor restyle one."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def _value_note(value) -> str:
    """A graph value name as a trailing comment: escaped, then cut to VALUE_CHARS."""
    v = _escape(value)
    if not v:
        return ""
    if len(v) > VALUE_CHARS:
        v = v[:VALUE_CHARS - 1] + "…"
    return f"  # {v}"


def _bare(expr: str) -> str:
    """An expression without the parentheses wrapping all of it ("(a + b)" -> "a + b",
    "(a) + (b)" unchanged): offsets read as in the renderers' comments."""
    e = str(expr)
    while len(e) >= 2 and e[0] == "(" and e[-1] == ")":
        depth = 0
        for i, c in enumerate(e):
            depth += (c == "(") - (c == ")")
            if depth == 0 and i < len(e) - 1:
                return e           # the first "(" closes before the end
        e = e[1:-1]
    return e


def _ref(buf, offset) -> str:
    return f"{buf.name}[{_bare(offset)}]"


def _shape(x: Scratch) -> str:
    return f"{x.rows} x {x.numel}" if x.rows > 1 else f"{x.numel}"


# -- one function per statement type: (stmt, pad) -> lines ---------------------------

def _let(s: Let, pad: str) -> list[str]:
    return [f"{pad}let {s.var}: {_dtype(s.dtype)} = {s.expr}"]


def _assign(s: Assign, pad: str) -> list[str]:
    return [f"{pad}{s.var} = {s.expr}"]


def _load(s: Load, pad: str) -> list[str]:
    return [f"{pad}load {s.var} = {_ref(s.buf, s.offset)}"]


def _store(s: Store, pad: str) -> list[str]:
    return [f"{pad}store {_ref(s.buf, s.offset)} = {s.expr}"]


def _loop(s: Loop, pad: str) -> list[str]:
    head = f"{pad}loop {s.var} in [{s.start or 0}, {s.stop or s.extent}) {s.bind}"
    if s.vector > 1:
        head += f" vector={s.vector}"
    if s.per_block > 1:
        head += f" per_block={s.per_block}"
    if s.reduction is not None:
        acc, op = s.reduction
        # no operator: the lanes' partials must be combined in order
        head += f" reduce({op or 'ordered'}: {acc})"
    return [head + ":"] + _body(s.body, pad + INDENT)


def _block_reduce(s: BlockReduce, pad: str) -> list[str]:
    return [f"{pad}block_reduce {s.var} ({s.width}, slot {s.slot})"]


def _once_per_block(s: OncePerBlock, pad: str) -> list[str]:
    return [f"{pad}once per {s.width}:"] + _body(s.body, pad + INDENT)


def _if(s: If, pad: str) -> list[str]:
    return [f"{pad}if {_bare(s.cond)}:"] + _body(s.body, pad + INDENT)


def _grid_sync(s: GridSync, pad: str) -> list[str]:
    return [f"{pad}grid_sync" + (f"  # {s.reason}" if s.reason else "")]


def _comment(s: Comment, pad: str) -> list[str]:
    return [f"{pad}# {s.text}"]


def _declare_scratch(s: DeclareScratch, pad: str) -> list[str]:
    x = s.scratch
    return [f"{pad}scratch {x.name}: {_dtype(x.dtype)}[{_shape(x)}]"]


def _gemm(s: Gemm, pad: str) -> list[str]:
    # one tile's product (sgemm on the CPU, or the micro-kernel against packed panels),
    # its extents as C expressions
    ta, tb = ("ᵀ" if t else "" for t in (s.trans_a, s.trans_b))
    how = ("micro-kernel, B packed" + (" in bfloat16 pairs" if s.pairs else "")
           + (", A packed once" if s.a_packed else "")
           + (f", the tile's panels packed from {_ref(s.packs_b.b, str(s.packs_b.b_off))} "
              f"[{s.packs_b.k} x {s.packs_b.n}, strides {s.packs_b.row_stride}/"
              f"{s.packs_b.col_stride}] first" if s.packs_b else "")
           if s.packed
           else f"ld {s.lda}/{s.ldb}, block tile {_block(s.block)}" if s.block
           else f"ld {s.lda}/{s.ldb}/{s.ldc}")
    op = "+=" if s.accumulate else "="
    if s.transposed:   # (wb_gemm_packed_t: the positions the rows, the filters packed)
        return [f"{pad}gemm {_ref(s.c, s.c_off)} = ({_ref(s.a, s.a_off)}ᵀ @ "
                f"{_ref(s.b, s.b_off)})ᵀ  [{_bare(s.rows)} x {_bare(s.cols)} x {s.k}, "
                "micro-kernel, the filters packed, made transposed]"]
    return [f"{pad}gemm {_ref(s.c, s.c_off)} {op} {_ref(s.a, s.a_off)}{ta} @ "
            f"{_ref(s.b, s.b_off)}{tb}"
            f"  [{_bare(s.rows)} x {_bare(s.cols)} x {s.k}, {how}]"]


def _block(b) -> str:
    return (f"{b.m}x{b.n}, {b.thread_m}x{b.thread_n} per thread, panels {b.depth} deep "
            "in shared memory")


def _thread_tile(s: ThreadTile, pad: str) -> list[str]:
    # the elements of a GPU GEMM tile each thread holds (codegen: render ThreadTile)
    b = s.block
    return [f"{pad}for each of this thread's {b.thread_m}x{b.thread_n} elements (r, col) "
            f"in rows {_bare(s.r0)}..{_bare(s.r1)}, columns {_bare(s.c0)}..{_bare(s.c1)}, "
            "slot wb_s:"] + _body(s.body, pad + INDENT)


def _online_step(s: OnlineStep, pad: str) -> list[str]:
    return [f"{pad}online softmax step: {s.s.name} (keys < {_bare(s.valid)}) -> "
            f"{s.p.name}, running max {s.m.name} and sum {s.l.name}, {s.o.name} rescaled"]


def _pack_b(s: PackB, pad: str) -> list[str]:
    which = (f"panel {s.panel}" if s.panel else "first run only") + (
        ", bfloat16 pairs" if s.pairs else "")
    dst = _ref(s.packed, s.packed_off) if s.panel else s.packed.name
    return [f"{pad}pack_b {dst} = {_ref(s.b, str(s.b_off))} "
            f"[{s.k} x {s.n}, strides {s.row_stride}/{s.col_stride}, {which}]"]


def _pack_a(s: PackA, pad: str) -> list[str]:
    which = f"tile {s.tile}, sliver {s.sliver}" if s.sliver else "first run only"
    dst = _ref(s.packed, s.packed_off) if s.sliver else s.packed.name
    return [f"{pad}pack_a {dst} = {_ref(s.a, str(s.a_off))} "
            f"[{s.m} x {s.k}, strides {s.row_stride}/{s.col_stride}, slivers of tiles of "
            f"{s.tile_m} rows, {which}]"]


def _widen_once(s: WidenOnce, pad: str) -> list[str]:
    return [f"{pad}widen {s.dst.name} = float32({s.src.name}) [{s.n}, first run only]"]


def _window(w) -> str:
    """A 2-D window's planes, taps and strides, in words."""
    return (f"{w.spatial[0]}x{w.spatial[1]} -> {w.out[0]}x{w.out[1]}, taps "
            f"{w.kernel[0]}x{w.kernel[1]}, strides {w.strides[0]}/{w.strides[1]}")


def _depthwise_lanes(s, pad: str) -> list[str]:
    return [f"{pad}depthwise {_ref(s.c, s.c_off)} = {_ref(s.x, s.x_off)} * "
            f"{_ref(s.f, s.f_off)}  [{_bare(s.channels)} channels in lanes, "
            f"{_window(s.window)}]"]


def _conv_lanes(s, pad: str) -> list[str]:
    return [f"{pad}conv {_ref(s.c, s.c_off)} = {_ref(s.x, s.x_off)} * {s.f.name}  "
            f"[filters {_bare(s.f0)}..{_bare(s.f1)} in lanes, output rows "
            f"{_bare(s.oy0)}..{_bare(s.oy1)}, {s.window.channels} channels "
            f"{_window(s.window)}, direct]"]


def _unknown(s, pad: str) -> list[str]:
    # a statement type added to kir.py but not here: visible, never fatal
    return [f"{pad}? {type(s).__name__}"]


STATEMENTS: dict[type, Callable[[object, str], list[str]]] = {
    Let: _let, Assign: _assign, Load: _load, Store: _store, Loop: _loop,
    BlockReduce: _block_reduce, OncePerBlock: _once_per_block, If: _if,
    GridSync: _grid_sync, Comment: _comment, DeclareScratch: _declare_scratch,
    Gemm: _gemm, PackA: _pack_a, PackB: _pack_b, WidenOnce: _widen_once,
    DepthwiseLanes: _depthwise_lanes, ConvLanes: _conv_lanes, ThreadTile: _thread_tile,
    OnlineStep: _online_step,
}


def _body(stmts, pad: str) -> list[str]:
    return [line for s in stmts for line in STATEMENTS.get(type(s), _unknown)(s, pad)]


# -- the kernel -----------------------------------------------------------------------

def _role(b: Buffer) -> str:
    return "workspace" if b.workspace else "out" if b.is_output else "in"


def _param(b: Buffer) -> str:
    return (f"{INDENT}{_role(b):<9} {b.name}: {_dtype(b.dtype)}[{b.numel}]"
            + _value_note(b.value))


def format_kernel(k: Kernel) -> str:
    """The kernel IR as text: header, params, scratch, launch, body (see the module)."""
    lines = [f"kernel {k.name}  group {k.group}  {k.schedule}", "params:"]
    lines += [_param(b) for b in k.params] or [INDENT + "-"]
    if k.scratch:
        lines.append("scratch:")
        lines += [f"{INDENT}{x.name}: {_dtype(x.dtype)}[{_shape(x)}]" + _value_note(x.value)
                  for x in k.scratch]
    if k.library is not None:
        c = k.library
        # opaque: no generated code, so no launch and no body of our own
        lines.append(f"library {c.op}({', '.join(b.name for b in c.inputs)}) -> "
                     + ", ".join(b.name for b in c.outputs))
    else:
        lines.append(f"launch: {k.launch}  shared={k.launch.shared_bytes} B"
                     + (f"  calls host {k.blas}" if k.blas else ""))
        lines.append("body:")
        lines += _body(k.body, INDENT)
    return "\n".join(map(_escape, lines))
