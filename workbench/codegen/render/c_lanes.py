"""A CPU row loop's reductions kept in 16 explicit lanes, combined in halves.

Under ``#pragma omp simd reduction(op:acc)`` GCC 12 keeps one vector of partial
results and, after the loop, combines its 16 lanes one after another: 15 dependent
scalar steps (a max with its NaN flag, 31 extracts and ORs besides) that the next
pass waits on, since it needs the result. On short rows that chain is a large part
of the row: softmax 8192 x 512 on one thread spent 0.14 ms of its 1.5 in the max's
and 0.08 in the sum's (a C harness, the same kernel with the combines in halves). So
a float sum, max or min (and the max's NaN flag) is printed as its own lanes:

    {acc}_l[16] = identity;                   (the lanes, on the stack)
    for col_0 in steps of 16 over the row:     (the whole 16-column steps)
      omp simd for wb_l < 16: col = col_0 + wb_l; <the loop, acc -> acc_l[wb_l]>
    for the last columns: <the same, lane col - the steps' end>
    acc = acc <op> wb_lanes_<op>(acc_l);       (lane i with i + 8, + 4, + 2, + 1)

GCC keeps the lanes in a register through the steps; ``wb_lanes_*`` (ops/reduce.py's
``LANES``) combine them in a tree of vector halves with AVX-512 and in the same tree
in scalar C without it, so the bits do not depend on the machine. The sum's order is
not the ``omp simd`` one's (lane by lane), so a sum's last bits differ from before;
every order is within the float bound the checks use (``tolerance.py``).

A loop is printed so only where every reduction is one of those, of a type known
here, its accumulator read and written only by its own combine statements, its body
flat statements that store nothing and load only float32 (as the CPU performs the
load), and its range the whole
row, a multiple of 16 columns (``start``/``stop`` unset); otherwise the
caller prints the ``omp simd`` reduction as before.
"""
from __future__ import annotations

import re

from ...dtypes import DType
from ..kir import Assign, Comment, Let, Load
from .base import index_type
from .c_access import host_load

LANES = 16
# reduction operator -> (accumulator type, lanes' identity, wb_lanes_ function, combine)
LANE_OPS = {
    "+": ("float", "0.0f", "wb_lanes_sum", "{0} + {1}"),
    "wbmaxn": ("float", "-INFINITY", "wb_lanes_maxn", "wb_fmax_num({0}, {1})"),
    "wbminn": ("float", "INFINITY", "wb_lanes_minn", "wb_fmin_num({0}, {1})"),
    "|": ("int", "0", "wb_lanes_or", "{0} | {1}"),
}


def _mentions(s, name: re.Pattern) -> bool:
    text = " ".join(str(getattr(s, f, "")) for f in ("var", "expr", "offset"))
    return bool(name.search(text))


def lane_loop(r, s, depth: int, reductions, types: dict) -> list[str] | None:
    """Loop ``s`` (a row loop over ``s.extent`` columns) with ``reductions`` ((acc,
    operator) pairs) in explicit lanes, or None where it cannot be (see the module
    docstring). ``r``: the C renderer; ``types``: accumulator -> its C type."""
    if s.start or s.stop or not reductions or s.extent % LANES:
        return None       # (rows of 1002 columns: GCC's outer-loop vectorizer found
        #                   "no vectype" for their loads and left the lanes scalar)
    # every load float32, as the CPU performs it (render/c_access.py): a register
    # copy of a bfloat16 input, float32 in the IR, reads the bfloat16 row again.
    # (one filter: it replaced a search for "bf16" in the printed lets and loads,
    # with an identical source digest, the zoo's included)
    if any(isinstance(x, Load) and host_load(x).buf.dtype is not DType.float32
           for x in s.body):
        return None       # (bfloat16 rows: in the digest's LayerNorm variants GCC left
        #                   such lanes scalar, "no vectype" for their loads; an int64
        #                   load -- cross-entropy's one-hot column index:
        #                   "no vectype" for it, the lanes scalar and the kernel 2x
        #                   slower than with the omp simd reduction)
    if not all(isinstance(x, (Let, Assign, Load, Comment)) for x in s.body):
        return None       # (a store in the nest: GCC's outer-loop vectorizer left a
        #                   bfloat16 LayerNorm's lanes scalar, "no vectype" for it)
    names = {}
    for acc, op in reductions:
        if op not in LANE_OPS or types.get(acc) != LANE_OPS[op][0]:
            return None
        names[acc] = re.compile(rf"\b{re.escape(acc)}\b")
    for x in s.body:
        hit = [a for a, pat in names.items() if _mentions(x, pat)]
        if hit and not (isinstance(x, Assign) and x.var in hit and len(hit) == 1):
            return None       # (only an accumulator's own combine may read it)

    def body(lane: str | None) -> tuple:
        out = []
        for x in s.body:
            if isinstance(x, Assign) and x.var in names:
                to = f"{x.var}_p" if lane is None else f"{x.var}_l[{lane}]"
                x = Assign(to, names[x.var].sub(to, x.expr), x.node)
            out.append(x)
        return tuple(out)

    pad, u, v, n, ix = r.indent_unit * depth, r.indent_unit, s.var, s.extent, index_type(s)
    whole = n - n % LANES
    lines = [pad + "{  /* the reductions in lanes, combined in halves (render/c_lanes.py) */"]
    lines += [pad + u + f"{LANE_OPS[op][0]} {acc}_l[{LANES}];" for acc, op in reductions]
    if whole:
        # the lane loop outside, the columns inside: GCC vectorizes the outer loop
        # and keeps each lane's partial in a register (with the column loop outside
        # and the lanes in the array, it reloaded and stored the array every 16
        # columns wherever the loop also stored a row)
        lines += [pad + u + "#pragma omp simd",
                  pad + u + f"for (int wb_l = 0; wb_l < {LANES}; ++wb_l) {{"]
        lines += [pad + u * 2 + f"{LANE_OPS[op][0]} {acc}_p = {LANE_OPS[op][1]};"
                  for acc, op in reductions]
        lines += [pad + u * 2 + f"for ({ix} {v}_0 = 0; {v}_0 < {whole}; {v}_0 += {LANES}) {{",
                  pad + u * 3 + f"const {ix} {v} = {v}_0 + wb_l;"]
        lines += r.stmts(body(None), depth + 3) + [pad + u * 2 + "}"]
        lines += [pad + u * 2 + f"{acc}_l[wb_l] = {acc}_p;" for acc, _ in reductions]
        lines += [pad + u + "}"]
    else:
        lines.append(pad + u + f"for (int wb_l = 0; wb_l < {LANES}; ++wb_l) {{ "
                     + " ".join(f"{acc}_l[wb_l] = {LANE_OPS[op][1]};" for acc, op in reductions)
                     + " }")
    if n > whole:
        lines += [pad + u + f"for ({ix} {v} = {whole}; {v} < {n}; ++{v}) {{"]
        lines += r.stmts(body(f"{v} - {whole}"), depth + 2) + [pad + u + "}"]
    for acc, op in reductions:
        fn, comb = LANE_OPS[op][2:]
        lines.append(pad + u + f"{acc} = {comb.format(acc, f'{fn}({acc}_l)')};")
    return lines + [pad + "}"]
