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
let, is split; any other is printed as before.
"""
from __future__ import annotations

import re
from dataclasses import replace

from ..kir import Comment, Let, Load, Loop, Store
from .base import index_type

# the longest row split: its array is 4 KB on the stack. A longer row keeps the fused
# loop, whose output lines come from memory while it computes: split, the second loop
# waits on them with nothing to compute (512 x 32000, one thread: 13.5 -> 22 ms)
MAX_COLS = 1024
_EXP = re.compile(r"wb_expf\((\w+)\)")


def exp_position(s: Loop) -> int | None:
    """The index of the loop's one ``Let t = wb_expf(a)`` if the loop can be split
    there, else None."""
    hits = [i for i, x in enumerate(s.body)
            if isinstance(x, Let) and _EXP.fullmatch(x.expr)]
    text = " ".join(getattr(x, "expr", "") for x in s.body)
    if len(hits) != 1 or text.count("wb_expf(") != 1 or s.start or s.stop \
            or s.extent > MAX_COLS or s.body[hits[0]].dtype.c_compute != "float":
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
    home = _output_row(r, s, ex.var, depth)
    if home is None:
        row = f"float wb_ex_[{n}];  /* e^x of the row */"
    else:       # (the store of e^x dropped: wb_expf_n leaves it there)
        row = f"float* const wb_ex_ = {home[1]};  /* e^x of the row, in the output's */"
        rest = tuple(x for x in rest if x is not home[0])
    body = s.body[:at] + (Let(ex.var, ex.dtype, f"wb_ex_[{v}]", ex.node),) + rest
    # (the last loop as the renderer prints any loop: a reduction's lanes, c_lanes.py)
    return ([pad + "{", pad + u + row,
             pad + u + "#pragma omp simd", pad + u + head]
            + r.stmts(s.body[:at], depth + 2)
            + [pad + u + u + f"wb_ex_[{v}] = {arg};", pad + u + "}",
               pad + u + f"wb_expf_n(wb_ex_, {n});  /* (render/c_exp_rows.py) */"]
            + r.loop(replace(s, body=body), depth + 1) + [pad + "}"])


def _output_row(r, s: Loop, t: str, depth: int) -> tuple[Store, str] | None:
    """(the store, the address of the row's first element) where the loop stores its
    e^x ``t`` unchanged, as float, into a row of a buffer it reads nowhere else, one
    column per element: there the row array can be that row, which saves the copy
    (a store and a load per element; softmax 8192 x 512, one thread: 1.47 -> 1.39 ms,
    docs/decisions/row-exp.md); else None."""
    col = re.compile(rf"\b{re.escape(s.var)}\b")
    hits = []
    for x in s.body:
        if isinstance(x, Store):
            m = _STORE.fullmatch(r.store(x))
            if m and m.group(3) == t:
                hits.append((x, m))
    if len(hits) != 1:
        return None
    st, m = hits[0]
    buf, off = m.group(1), m.group(2)
    lead = re.fullmatch(rf"\((.+) \+ {re.escape(s.var)}\)", off)
    if lead is None or col.search(lead.group(1)):
        return None
    # the buffer read or written by nothing else in the loop (its other statements
    # printed, the store left out)
    others = r.stmts(tuple(x for x in s.body if x is not st), depth)
    if any(re.search(rf"\b{re.escape(buf)}\b", line) for line in others):
        return None
    return st, f"{buf} + {lead.group(1)}"


# a store printed as ``buf[offset] = (float)(t);``
_STORE = re.compile(r"(\w+)\[(.+)\] = \(float\)\((\w+)\);")
