"""How CUDA loops move 16 bytes a thread: the renderer's wide accesses.

A flat loop of ``vector`` > 1 (``vector_loop``) gives each thread ``vector``
consecutive elements a step, and the buffers read and written at the loop index --
or at a row vector's period -- move as one access of them (a float4, a uint4...);
the last ``extent % vector`` elements follow one per thread. A row kept on chip
(``tile_loop``, kir.Loop.tile) is dealt out to the row's threads as an unrolled tile of
register slots, each thread's ``vector`` columns one access where they lie inside the
row. ``r`` is the CUDA renderer printing the loop: its spellings, conversions and
statements.
"""
from __future__ import annotations

import re
from dataclasses import replace

from ...dtypes import DType
from ..kir import Buffer, Load, Loop, Scratch, Store
from .base import index_type


def tile_loop(r, s: Loop, depth: int) -> list[str]:
    """A row kept on chip: thread t of the row's ``threads`` owns columns
    (k * threads + t) * vector + v, k < per_thread, v < vector, fully unrolled so the
    register copies (indexed k * vector + v) stay in registers; unit-stride loads
    and stores of a thread's ``vector`` consecutive elements move as one 16-byte
    (or narrower) access. A shifted tile (the vector does not divide the row)
    starts ``shift`` columns before the row, where the row's offset is aligned:
    a thread's vector inside the row moves as one access, one holding an end of
    the row element by element."""
    pad, u = r.indent_unit * depth, r.indent_unit
    T, K, V, shift = s.tile
    v, n = s.var, s.extent
    tid = r.thread if s.bind == "block" else f"({r.lane})"
    first = f"({v}_k * {T} + {tid}) * {V}" + (f" - {shift}" if shift else "")
    lines = [pad + "#pragma unroll",
             pad + f"for (int {v}_k = 0; {v}_k < {K}; ++{v}_k) {{",
             pad + u + f"const {index_type(s)} {v}_b = {first};",
             pad + u + f"if ({tid} < {T} && {v}_b < {n}) {{"]
    if not shift:
        lines += _tile_vectors(r, s, depth + 2)
    else:
        lines += [pad + u + u + f"if ({v}_b >= 0 && {v}_b + {V} <= {n}) {{",
                  *_tile_vectors(r, s, depth + 3),
                  pad + u + u + "} else {  /* an end of the row */",
                  *_tile_elements(r, s, depth + 3),
                  pad + u + u + "}"]
    return lines + [pad + u + "}", pad + "}"]


def _tile_vectors(r, s: Loop, depth: int) -> list[str]:
    """A thread's ``vector`` columns of a tile, starting at ``<var>_b``, every one
    inside the row: unit-stride accesses move as one access each."""
    _, _, V, _ = s.tile
    v = s.var
    inner, u = r.indent_unit * depth, r.indent_unit
    body_pad = inner + (u if V > 1 else "")
    body = [_at_slot(x, _tile_slot(s)) for x in s.body]
    vec = {i: _vector_type(x) for i, x in enumerate(body)
           if isinstance(x, (Load, Store)) and isinstance(x.buf, Buffer) and x.vector > 1
           and _vector_type(x)}
    word = re.compile(rf"\b{re.escape(v)}\b")

    def at_base(x) -> str:
        return f"{x.buf.name} + {word.sub(f'{v}_b', x.offset)}"

    lines = []
    for i, vt in vec.items():
        x = body[i]
        if isinstance(x, Load):
            lines.append(inner + f"const {vt} {x.var}_v = "
                                 f"*reinterpret_cast<const {vt}*>({at_base(x)});")
        else:
            lines.append(inner + f"{vt} {x.buf.name}_v;")
    if V > 1:
        lines += [inner + "#pragma unroll",
                  inner + f"for (int {v}_v = 0; {v}_v < {V}; ++{v}_v) {{"]
    declared = len(lines)
    for i, x in enumerate(body):
        if i in vec and isinstance(x, Load):
            st = r.storage[x.buf.dtype]
            elem = f"reinterpret_cast<const {st}*>(&{x.var}_v)[{v}_v]"
            lines.append(body_pad + f"{x.buf.dtype.c_compute} {x.var} = "
                                    f"{r.to_compute(x.buf.dtype, elem)};")
        elif i in vec:
            st = r.storage[x.buf.dtype]
            lines.append(body_pad + f"reinterpret_cast<{st}*>(&{x.buf.name}_v)[{v}_v] = "
                                    f"{r.to_storage(x.buf.dtype, x.expr)};")
        else:
            lines += r.stmts([x], depth + (1 if V > 1 else 0))
    if any(word.search(line) for line in lines[declared:]):   # (else: unused)
        lines.insert(declared, body_pad + f"const {index_type(s)} {v} = {v}_b"
                                          + (f" + {v}_v;" if V > 1 else ";"))
    if V > 1:
        lines.append(inner + "}")
    for i, vt in vec.items():
        x = body[i]
        if isinstance(x, Store):
            lines.append(inner + f"*reinterpret_cast<{vt}*>({at_base(x)}) = "
                                 f"{x.buf.name}_v;")
    return lines


def _tile_elements(r, s: Loop, depth: int) -> list[str]:
    """A thread's ``vector`` columns of a shifted tile that hold an end of the row:
    each column inside the row on its own, element by element."""
    _, _, V, _ = s.tile
    v, n = s.var, s.extent
    pad, u = r.indent_unit * depth, r.indent_unit
    body = [_at_slot(x, _tile_slot(s)) for x in s.body]
    return [pad + "#pragma unroll",
            pad + f"for (int {v}_v = 0; {v}_v < {V}; ++{v}_v) {{",
            pad + u + f"const {index_type(s)} {v} = {v}_b + {v}_v;",
            pad + u + f"if ({v} >= 0 && {v} < {n}) {{",
            *r.stmts(body, depth + 2),
            pad + u + "}",
            pad + "}"]


def _vector_type(x, elems: int | None = None) -> str:
    """The type one access of ``elems`` (default x.vector) elements moves as, when
    it is one of 4, 8, 16 or 32 bytes (two 16-byte accesses); "" otherwise: element
    by element."""
    return {4: "unsigned int", 8: "uint2", 16: "uint4", 32: "wb_bytes32"}.get(
        (elems or x.vector) * x.buf.dtype.itemsize, "")


def vector_loop(r, s: Loop, depth: int) -> list[str]:
    """Each thread takes `vector` consecutive elements; buffers read and written at
    exactly the loop index move as one access of them where that is 4, 8 or 16
    bytes (a float4 for float32 by 4, a uint4 for a 2-byte type by 8, a uint2 for
    one by 4). The last ``extent % vector`` elements, if any, follow one per
    thread (the tail)."""
    pad = r.indent_unit * depth
    v, n, w = s.var, s.extent, s.vector

    base = f"{v}_base"
    ix = index_type(s)
    # a broadcast operand: a row vector read at i % C moves as one access too when
    # C is a multiple of the vector (its w elements are then side by side and
    # aligned); a per-row value read at i / C is one element for all w lanes
    periodic = {x: _broadcast_period(x.offset, v, w) for x in s.body
                if isinstance(x, Load) and isinstance(x.buf, Buffer)}
    at = {x: base if x.offset == v else f"({base} % {periodic[x][1]})"
          for x in s.body if isinstance(x, (Load, Store))
          and (x.offset == v or (periodic.get(x) or ("",))[0] == "%")}

    def vt(x) -> str:
        if x not in at:
            return ""
        return "float4" if x.buf.dtype is DType.float32 and w == 4 \
            else _vector_type(x, w)
    vec_loads = [x for x in s.body if isinstance(x, Load) and vt(x)]
    vec_stores = [x for x in s.body if isinstance(x, Store) and vt(x)]
    per_row = [x for x, p in periodic.items() if p and p[0] == "/"]
    main = n - n % w
    first = f"(({ix}){r.block} * {r.block_threads} + {r.thread})"
    stride = f"({ix}){r.grid_blocks} * {r.block_threads}"
    lines = [pad + f"for ({ix} {base} = {first} * {w}; {base} < {main}; "
                   f"{base} += {stride} * {w}) {{"]
    inner = pad + r.indent_unit
    for ld in vec_loads:
        lines.append(inner + f"const {vt(ld)} {ld.var}_v = reinterpret_cast<const "
                             f"{vt(ld)}*>({ld.buf.name})[{at[ld]} / {w}];")
    for ld in per_row:
        lines.append(inner + f"{ld.buf.dtype.c_compute} {ld.var} = " + r.to_compute(
            ld.buf.dtype, f"{ld.buf.name}[({base} / {periodic[ld][1]})]") + ";")
    for st in vec_stores:
        lines.append(inner + f"{vt(st)} {st.buf.name}_v;")
    lines.append(inner + "#pragma unroll")
    lines.append(inner + f"for (int {v}_lane = 0; {v}_lane < {w}; ++{v}_lane) {{")
    body_pad = inner + r.indent_unit
    lines.append(body_pad + f"const {ix} {v} = {base} + {v}_lane;")
    for x in s.body:
        st = r.storage[x.buf.dtype] if x in vec_loads or x in vec_stores else ""
        if x in per_row:
            continue          # (loaded once for the thread's w elements, above)
        if x in vec_loads:
            elem = f"reinterpret_cast<const {st}*>(&{x.var}_v)[{v}_lane]"
            lines.append(body_pad + f"{x.buf.dtype.c_compute} {x.var} = "
                                    f"{r.to_compute(x.buf.dtype, elem)};")
        elif x in vec_stores:
            lines.append(body_pad + f"reinterpret_cast<{st}*>(&{x.buf.name}_v)[{v}_lane] = "
                                    f"{r.to_storage(x.buf.dtype, x.expr)};")
        else:
            lines += r.stmts([x], depth + 2)
    lines.append(inner + "}")
    for st in vec_stores:
        lines.append(inner + f"reinterpret_cast<{vt(st)}*>({st.buf.name})[{at[st]} / {w}] = "
                             f"{st.buf.name}_v;")
    lines.append(pad + "}")
    if main < n:
        lines.append(pad + f"for ({ix} {v} = {main} + {first}; {v} < {n}; {v} += {stride}) "
                           "{  /* the tail */")
        lines += r.stmts(list(s.body), depth + 1)
        lines.append(pad + "}")
    return lines

def _broadcast_period(offset: str, var: str, w: int) -> tuple[str, int] | None:
    """("%", C) for an offset ``(var % C)``, ("/", C) for ``(var / C)``, where C is a
    multiple of ``w`` (else None): a row vector, or a per-row value, of a flat loop."""
    m = re.fullmatch(rf"\({re.escape(var)} ([%/]) (\d+)\)", offset)
    if m is None or int(m.group(2)) % w:
        return None
    return m.group(1), int(m.group(2))


def _tile_slot(loop: Loop) -> str:
    """The register slot of a tile's column: k * vector + v."""
    v, V = loop.var, loop.tile[2]
    return f"{v}_k * {V} + {v}_v" if V > 1 else f"{v}_k"


def _at_slot(x, slot: str):
    """A statement of a tiled loop with its register-copy accesses at the thread's
    slot (the renderer of the tile knows the slot; the IR indexes by column)."""
    if (isinstance(x, (Load, Store)) and isinstance(x.buf, Scratch)
            and x.buf.space in ("register", "hybrid")):
        return replace(x, offset=slot)
    return x
