"""Einsum as a composite contraction: the equation parsed (ellipses, implicit output),
diagonals taken as strided slices, indices no one needs summed away, and each pair of
operands contracted by transposes and reshapes around one batched ``matmul``."""
from __future__ import annotations

import math
import string

from ...errors import GraphError


def _parse_einsum(equation: str, ranks):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise GraphError(f"Einsum {equation!r} names {len(terms)} operands, got {len(ranks)}")
    used = set(c for c in eq if c.isalpha())
    spare = [c for c in string.ascii_letters if c not in used]
    widths = [r - (len(t) - 3) for t, r in zip(terms, ranks) if "..." in t]
    ell = "".join(spare[:max(widths)]) if widths and max(widths) > 0 else ""
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = r - (len(t) - 3)
            # (right-aligned: a shorter ellipsis broadcasts against the longest)
            t = t.replace("...", ell[len(ell) - k:] if k > 0 else "")
        if len(t) != r or not all(c.isalpha() for c in t):
            raise GraphError(f"Einsum {equation!r}: term {t!r} does not fit an operand of "
                             f"rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:   # implicit: the ellipsis, then letters appearing once, in order
        counts = {}
        for t in out_terms:
            for ch in t:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1
                                   and c not in ell))
    return out_terms, out


def _diagonal(b, t, term):
    """Take the diagonal of every letter repeated within one operand's term."""
    while len(set(term)) < len(term):
        ch = next(c for c in term if term.count(c) > 1)
        i = term.index(ch)
        j = term.index(ch, i + 1)
        n = t.shape[i]
        rest = [a for a in range(len(term)) if a not in (i, j)]
        perm = rest + [i, j]
        t = b.transpose(t, perm=perm) if perm != list(range(len(term))) else t
        lead = [t.shape[a] for a in range(len(rest))]
        flat = b.reshape(t, shape=lead + [n * n])
        # the diagonal of an n x n block: every (n + 1)-th element
        t = b.slice(flat, starts=[0], ends=[n * n], axes=[len(lead)], steps=[n + 1])
        term = "".join(term[a] for a in rest) + ch
    return t, term


def _sum_away(b, t, term, keep):
    axes = [a for a, ch in enumerate(term) if ch not in keep]
    if not axes:
        return t, term
    t = b.reduce_sum(t, axes=axes, keepdims=False)
    return t, "".join(ch for ch in term if ch in keep)


def _arrange(b, t, term, order):
    perm = [term.index(ch) for ch in order]
    return (t if perm == list(range(len(perm))) else b.transpose(t, perm=perm)), order


def _contract(b, a, ta, c, tc, keep):
    """Two operands into one over the letters they share that ``keep`` does not."""
    batch = [ch for ch in ta if ch in tc and ch in keep]
    inner = [ch for ch in ta if ch in tc and ch not in keep]
    left = [ch for ch in ta if ch not in tc]
    right = [ch for ch in tc if ch not in ta]
    size = {ch: d for t, term in ((a, ta), (c, tc)) for ch, d in zip(term, t.shape)}
    for ch in batch + inner:
        da, dc = a.shape[ta.index(ch)], c.shape[tc.index(ch)]
        if da != dc and 1 not in (da, dc):
            raise GraphError(f"Einsum index {ch!r} has sizes {da} and {dc}")
        if da != dc:      # one of them broadcasts: expand it
            tgt = max(da, dc)
            if da == 1:
                a = b.expand(a, shape=[tgt if x == ch else size_a for x, size_a
                                       in zip(ta, a.shape)])
            else:
                c = b.expand(c, shape=[tgt if x == ch else size_c for x, size_c
                                       in zip(tc, c.shape)])
            size[ch] = tgt
    a, ta = _arrange(b, a, ta, "".join(batch + left + inner))
    c, tc = _arrange(b, c, tc, "".join(batch + inner + right))
    bs = [size[ch] for ch in batch]
    m = math.prod(size[ch] for ch in left)
    k = math.prod(size[ch] for ch in inner)
    n = math.prod(size[ch] for ch in right)
    a3 = b.reshape(a, shape=bs + [m, k]) if list(a.shape) != bs + [m, k] else a
    c3 = b.reshape(c, shape=bs + [k, n]) if list(c.shape) != bs + [k, n] else c
    r = b.matmul(a3, c3)
    full = bs + [size[ch] for ch in left] + [size[ch] for ch in right]
    if list(r.shape) != full:
        r = b.reshape(r, shape=full)
    return r, "".join(batch + left + right)


def einsum(b, equation: str, *xs, source: str = ""):
    """Einsum as transposes and reshapes around batched matmuls (operands contracted
    left to right), diagonals as strided slices, and reductions for indices that
    appear in one operand only."""
    with b.composite("Einsum", source):
        terms, out = _parse_einsum(equation, [len(x.shape) for x in xs])
        if len(set(out)) != len(out) or any(ch not in "".join(terms) for ch in out):
            raise GraphError(f"Einsum {equation!r}: output {out!r} repeats or invents an "
                             "index")
        ops = []
        for x, t in zip(xs, terms):
            x, t = _diagonal(b, x, t)
            ops.append((x, t))
        for i, (x, t) in enumerate(ops):    # indices no one else needs: sum them now
            later = out + "".join(tt for j, (_, tt) in enumerate(ops) if j != i)
            ops[i] = _sum_away(b, x, t, later)
        acc, ta = ops[0]
        for i in range(1, len(ops)):
            c, tc = ops[i]
            keep = out + "".join(tt for _, tt in ops[i + 1:])
            if not acc.dtype.is_float:
                raise GraphError("Einsum of integer operands is not supported (matmul is "
                                 "float only); cast them to float")
            acc, ta = _contract(b, acc, ta, c, tc, keep)
        acc, ta = _sum_away(b, acc, ta, out)
        acc, ta = _arrange(b, acc, ta, out)
        return acc
