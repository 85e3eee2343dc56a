"""A CPU row kernel's exp pass, split around one call that takes e^x of the whole row.

GCC vectorizes a row pass's ``omp simd`` loop with ``wb_expf`` inlined, but its
vectorized e^x costs 27 vector instructions per 16 floats, where AVX-512 needs 16
(``vscalefps`` takes 2^n in one, and no C spelling reaches it through the vectorizer:
ops/elementwise.py's ``wb_expf_n``). So a column loop computing ``t = wb_expf(a)`` is
printed as three steps over a row array on the stack (rows of up to ``MAX_COLS``
columns; a longer row keeps its fused loop):

    for col: <the statements up to a>; wb_ex_[col] = a;     (omp simd)
    wb_expf_n(wb_ex_, n);                                    (in place, intrinsics)
    for col: t = wb_ex_[col]; <the loop's statements>        (omp simd, its reduction)

The second loop keeps every statement of the original (GCC drops those only the
argument needed), so what it stores and accumulates is unchanged; the row array stays
in L1 (4 KB). The bits are the same as the fused loop's: ``wb_expf_n`` gives
``wb_expf``'s (tests/codegen/test_exp_rows.py). Softmax 8192 x 512, one thread, the
kernel: 1.79 -> 1.56 ms (AVX-512, GCC 12; the first loop and the array cost 0.2 ms of
the 0.45 the intrinsics save; docs/decisions/row-exp.md).

Only a loop whose statements before the exp are loads and lets (nothing it assigns or
stores is read back by the argument) and that holds one ``wb_expf`` call, alone in its
let, is split; any other is printed as before. The loads, stores and output row are
recognised in the kernel IR, as the CPU performs them (render/c_access.py), never in
the C printed for them: a change in how a load prints cannot turn the split off.
"""
from __future__ import annotations

import re
from dataclasses import replace

from ...dtypes import DType
from ..kir import Assign, Comment, If, Let, Load, Loop, Store
from .base import index_type
from .c_access import host_load, host_store

# the longest row split with a loop left after the call, or its array on the stack (4
# KB). A longer row keeps the fused loop, whose output lines come from memory while it
# computes: split, the second loop waits on them with nothing to compute (512 x 32000,
# one thread: 13.5 -> 22 ms) -- unless the call is the whole pass, reading the row and
# writing e^x straight into the output's row (512 x 32000, one thread, CPU time:
# 8.6-9.0 -> 7.7-8.0 ms; docs/decisions/row-exp.md)
MAX_COLS = 1024
_EXP = re.compile(r"wb_expf\((\w+)\)")


def exp_position(s: Loop) -> int | None:
    """The index of the loop's one ``Let t = wb_expf(a)`` if the loop can be split
    there, else None."""
    hits = [i for i, x in enumerate(s.body)
            if isinstance(x, Let) and _EXP.fullmatch(x.expr)]
    text = " ".join(getattr(x, "expr", "") for x in s.body)
    if len(hits) != 1 or text.count("wb_expf(") != 1 or s.start or s.stop \
            or s.body[hits[0]].dtype.c_compute != "float":
        return None
    if s.reduction is not None and not s.reduction[1]:
        return None      # (lanes may not be combined: the loop is not simd at all)
    if not all(isinstance(x, (Load, Let, Comment)) for x in s.body[:hits[0]]):
        return None
    return hits[0]


def split_exp_loop(r, s: Loop, depth: int) -> list[str] | None:
    """The loop as the three steps above, or None where ``exp_position`` refuses it.
    ``r``: the C renderer (its ``stmts`` prints the statements)."""
    at = exp_position(s)
    if at is None:
        return None
    ex: Let = s.body[at]
    arg = _EXP.fullmatch(ex.expr).group(1)
    pad, u, v, n = r.indent_unit * depth, r.indent_unit, s.var, s.extent
    head = f"for ({index_type(s)} {v} = 0; {v} < {n}; ++{v}) {{"
    rest = s.body[at + 1:]
    home = _output_row(r, s, ex.var)
    if home is None:
        row = f"float wb_ex_[{n}];  /* e^x of the row */"
    else:       # (the store of e^x dropped: the call leaves it there)
        row = f"float* const wb_ex_ = {home[1]};  /* e^x of the row, in the output's */"
        rest = tuple(x for x in rest if x is not home[0])
    lines = [pad + "{", pad + u + row]
    shift = _shifted_row(r, s, at, arg)
    acc = _row_sum(s, rest, ex.var)
    if n > MAX_COLS and (home is None or shift is None or acc is None):
        return None        # (a longer row split only where the call is the whole pass)
    if shift is None:      # (the argument written into the row first)
        lines += ([pad + u + "#pragma omp simd", pad + u + head]
                  + r.stmts(s.body[:at], depth + 2)
                  + [pad + u + u + f"wb_ex_[{v}] = {arg};", pad + u + "}"])
        shift = ("wb_ex_", "0.0f")       # (x - 0 is x, to the bit)
    call = f"wb_expf_shift_n(wb_ex_, {shift[0]}, {shift[1]}, {n})"
    if acc is not None:    # (the loop's only work left: the sum, which the call takes)
        return lines + [pad + u + f"{acc} = {acc} + {call};  /* (render/c_exp_rows.py) */",
                        pad + "}"]
    body = s.body[:at] + (Let(ex.var, ex.dtype, f"wb_ex_[{v}]", ex.node),) + rest
    # (the last loop as the renderer prints any loop: a reduction's lanes, c_lanes.py)
    return (lines + [pad + u + f"{call};  /* (render/c_exp_rows.py) */"]
            + r.loop(replace(s, body=body), depth + 1) + [pad + "}"])


def _shifted_row(r, s: Loop, at: int, arg: str) -> tuple[str, str] | None:
    """(the address of the row's first element, c) where the exp's argument is
    ``x[col] - c``: a float load one column per element, less a value the loop does
    not change; else None."""
    lets = {x.var: x for x in s.body[:at] if isinstance(x, (Let, Load))}
    d = lets.get(arg)
    m = re.fullmatch(r"\((\w+) - (\w+)\)", d.expr) if isinstance(d, Let) else None
    if m is None or m.group(2) in lets or not isinstance(lets.get(m.group(1)), Load):
        return None
    ld = host_load(lets[m.group(1)])
    lead = _row_lead(s, ld.offset)
    if not _as_float(r, ld.buf.dtype) or lead is None:
        return None
    return f"{ld.buf.name} + {lead}", m.group(2)


def _row_sum(s: Loop, rest: tuple, t: str) -> str | None:
    """The accumulator where all the loop does after its e^x ``t`` is the float sum
    ``acc = (acc + t)`` the loop reduces; else None."""
    work = [x for x in rest if not isinstance(x, Comment)]
    if s.reduction is None or s.reduction[1] != "+" or len(work) != 1:
        return None
    acc = s.reduction[0]
    x = work[0]
    if isinstance(x, Assign) and x.var == acc and x.expr == f"({acc} + {t})":
        return acc
    return None


def _output_row(r, s: Loop, t: str) -> tuple[Store, str] | None:
    """(the store, the address of the row's first element) where the loop stores its
    e^x ``t`` unchanged, as float, into a row of a buffer it reads nowhere else, one
    column per element: there the row array can be that row, which saves the copy
    (a store and a load per element; softmax 8192 x 512, one thread: 1.47 -> 1.39 ms,
    docs/decisions/row-exp.md); else None."""
    hits = [(x, st) for x in s.body if isinstance(x, Store)
            if (st := host_store(x)) is not None and st.expr == t
            and _as_float(r, st.buf.dtype)]
    if len(hits) != 1:
        return None
    x, st = hits[0]
    lead = _row_lead(s, st.offset)
    if lead is None:
        return None
    # the buffer read or written by nothing else in the loop (the store left out)
    if _touches(tuple(y for y in s.body if y is not x), st.buf.name):
        return None
    return x, f"{st.buf.name} + {lead}"


def _as_float(r, dtype) -> bool:
    """Whether elements of ``dtype`` are stored as C floats: what the row array holds
    and ``wb_expf_shift_n`` reads and writes (a bfloat16 row converts)."""
    return dtype is not DType.bfloat16 and r.storage[dtype] == "float"


def _row_lead(s: Loop, offset: str) -> str | None:
    """``lead`` where an offset is ``(lead + col)`` with ``lead`` free of the column:
    one element per column, the row starting at ``lead``; else None."""
    m = re.fullmatch(rf"\((.+) \+ {re.escape(s.var)}\)", offset)
    if m is None or re.search(rf"\b{re.escape(s.var)}\b", m.group(1)):
        return None
    return m.group(1)


def _touches(body, buf: str) -> bool:
    """Whether the statements may read or write buffer ``buf``: a load or store of
    it as the CPU performs it, an expression or offset naming it (a gather's index
    read, say), or a statement of another kind (a call, a reduction), which might."""
    name = re.compile(rf"\b{re.escape(buf)}\b")
    for x in body:
        if isinstance(x, Comment):
            continue
        if isinstance(x, (Loop, If)):
            if _touches(x.body, buf) or name.search(getattr(x, "cond", "")):
                return True
            continue
        if not isinstance(x, (Let, Assign, Load, Store)):
            return True
        at = host_load(x) if isinstance(x, Load) else host_store(x) \
            if isinstance(x, Store) else None
        if at is not None and at.buf.name == buf:
            return True
        if any(name.search(getattr(y, f, "")) for y in (x, at) if y is not None
               for f in ("expr", "offset")):
            return True
    return False
