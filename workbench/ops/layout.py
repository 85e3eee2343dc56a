"""Layout ops: they move elements without arithmetic.

Each defines its *index rule* beside its shape rule: given the index of an output
element, the expression for it in terms of its input(s) at some index (see
:class:`~workbench.ops.registry.IndexContext`). Lowering follows the rules back to
loads, so layout ops fuse into elementwise kernels without materializing anything.
Each also says whether a row-reduction kernel may hold it (``row_role``): views that
reshape per-row results may; ops that move elements across a row may not.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..dtypes import DType
from .index import Index, add
from ..shapes import check_shape
from .footprint import whole_axis
from .strided import Strided
from .registry import (Helper, Kind, OpDef, RowRole, attr_int, attr_ints, broadcast_shapes,
                       check_axis, normalize_axes, register)

# (64-bit: an index into a tensor past 2^31 elements, or an int64 gather index, must
# not wrap before it is clamped)
CLAMPI = Helper("wb_clampi",
                "WB_FN long long wb_clampi(long long x, long long lo, long long hi) "
                "{ return x < lo ? lo : (x > hi ? hi : x); }\n")


def _view_index(ctx, node, k, idx: Index) -> str:
    # the same row-major data under another shape
    src = node.inputs[0]
    return ctx.at(src, idx.reshape_to(ctx.shape(src)))


def _reshape_view(x: Strided, attrs, k, shape):
    # reshape, squeeze and unsqueeze: the same row-major order under the output shape
    return x.reshape(shape)


def _contig(a):
    """A C-contiguous copy that keeps 0-d results 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(a, order="C")


def _numel(shape):
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def _target_shape(attrs, what: str) -> tuple[int, ...]:
    # a static shape attribute: integers >= 0 (no -1: shapes are resolved at import)
    return check_shape(attr_ints(attrs, "shape"), what)


def _reshape_infer(ins, attrs):
    shape = _target_shape(attrs, "reshape attr shape")
    if _numel(shape) != ins[0].numel:
        raise GraphError(f"cannot reshape {list(ins[0].shape)} to {list(shape)}: "
                         f"{ins[0].numel} elements, not {_numel(shape)}")
    return [(shape, ins[0].dtype)]


register(OpDef("reshape", Kind.layout, (1, 1), _reshape_infer,
               lambda xs, a: [xs[0].reshape(a["shape"])], None,
               "reinterpret the row-major data with a new static shape (attr shape)",
               index=_view_index, view=_reshape_view,
               row_role=RowRole.per_row_view))


def _squeeze_infer(ins, attrs):
    x = ins[0]
    axes = normalize_axes(attr_ints(attrs, "axes"), len(x.shape))
    if any(x.shape[a] != 1 for a in axes):
        raise GraphError(f"squeeze axes {list(axes)} of {list(x.shape)} are not all 1")
    return [(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)]


register(OpDef("squeeze", Kind.layout, (1, 1), _squeeze_infer,
               lambda xs, a: [np.squeeze(xs[0], axis=normalize_axes(a["axes"], xs[0].ndim))],
               None, "remove size-1 axes (attr axes)", index=_view_index,
               view=_reshape_view,
               row_role=RowRole.per_row_view))


def _unsqueeze_infer(ins, attrs):
    x = ins[0]
    axes = attr_ints(attrs, "axes")
    rank = len(x.shape) + len(axes)
    axes = normalize_axes(axes, rank)
    it = iter(x.shape)
    return [(tuple(1 if i in axes else next(it) for i in range(rank)), x.dtype)]


register(OpDef("unsqueeze", Kind.layout, (1, 1), _unsqueeze_infer,
               lambda xs, a: [xs[0].reshape(_unsqueeze_infer([_V(xs[0])], a)[0][0])],
               None, "insert size-1 axes (attr axes, positions in the output)",
               index=_view_index, view=_reshape_view,
               row_role=RowRole.per_row_view))


class _V:
    """Adapter so shape rules can run on arrays inside references."""
    def __init__(self, a):
        self.shape, self.dtype, self.numel = tuple(a.shape), DType.of(a.dtype), a.size


def transpose_perm(attrs, rank: int) -> tuple[int, ...]:
    """A transpose node's permutation: its attr perm, or the axes reversed (ONNX's and
    NumPy's default)."""
    return tuple(attr_ints(attrs, "perm", None) or reversed(range(rank)))


def _transpose_infer(ins, attrs):
    x = ins[0]
    perm = transpose_perm(attrs, len(x.shape))
    if sorted(perm) != list(range(len(x.shape))):
        raise GraphError(f"perm {list(perm)!r:.80} is not a permutation of the axes "
                         f"0..{len(x.shape) - 1} (the input has rank {len(x.shape)})")
    return [(tuple(x.shape[p] for p in perm), x.dtype)]


def _transpose_index(ctx, node, k, idx: Index) -> str:
    src = node.inputs[0]
    return ctx.at(src, idx.transpose(transpose_perm(node.attr_map, len(ctx.shape(src)))))


register(OpDef("transpose", Kind.layout, (1, 1), _transpose_infer,
               lambda xs, a: [_contig(np.transpose(xs[0], transpose_perm(a, xs[0].ndim)))],
               None, "permute axes (attr perm)", index=_transpose_index,
               view=lambda x, a, k, shape: x.permute(transpose_perm(a, len(shape))),
               row_role=RowRole.never))


def _expand_infer(ins, attrs):
    target = _target_shape(attrs, "expand attr shape")
    shape = broadcast_shapes(ins[0].shape, target)
    return [(check_shape(shape, "expand result"), ins[0].dtype)]


def _expand_index(ctx, node, k, idx: Index) -> str:
    src = node.inputs[0]
    return ctx.at(src, idx.broadcast_to(ctx.shape(src)))


# (a broadcast is an element of the row like any elementwise op's result)
register(OpDef("expand", Kind.layout, (1, 1), _expand_infer,
               lambda xs, a: [_contig(np.broadcast_to(
                   xs[0], _expand_infer([_V(xs[0])], a)[0][0]))],
               None, "broadcast to a shape (attr shape, NumPy rules)", index=_expand_index,
               view=lambda x, a, k, shape: x.broadcast(shape),
               row_role=RowRole.element))


def slice_params(shape, attrs):
    """Per-axis (start, step, length) of a slice, all static and normalized.

    starts and ends clamp as Python's slices do (any integer is fine); axes must be in
    range and not repeated, steps non-zero, and axes/steps (when given) have one entry
    per start, as ends do."""
    rank = len(shape)
    starts, ends = attr_ints(attrs, "starts"), attr_ints(attrs, "ends")
    axes = attr_ints(attrs, "axes", None) or tuple(range(len(starts)))
    steps = attr_ints(attrs, "steps", None) or (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise GraphError(f"slice needs one entry per sliced axis in starts, ends, axes and "
                         f"steps, got {len(starts)}, {len(ends)}, {len(axes)}, {len(steps)}")
    norm = [check_axis(a, rank, "slice axis") for a in axes]
    if len(set(norm)) != len(norm):
        raise GraphError(f"repeated axis in slice axes {list(axes)}")
    out = [(0, 1, d) for d in shape]
    for s, e, a, st in zip(starts, ends, norm, steps):
        d = shape[a]
        if st == 0:
            raise GraphError("slice step 0 is not allowed")
        idx = range(*slice(s, e, st).indices(d))
        out[a] = (idx.start if len(idx) else 0, st, len(idx))
    return tuple(out)


def _slice_infer(ins, attrs):
    p = slice_params(ins[0].shape, attrs)
    return [(tuple(n for _, _, n in p), ins[0].dtype)]


def _slice_ref(xs, attrs):
    p = slice_params(xs[0].shape, attrs)
    # a negative step that reaches index 0 stops at -1, which Python would read as
    # "the last element": spell that stop as None
    sl = tuple(slice(s, s + st * n if s + st * n >= 0 else None, st) if n else slice(0, 0)
               for s, st, n in p)
    return [_contig(xs[0][sl])]


def _slice_index(ctx, node, k, idx: Index) -> str:
    src = node.inputs[0]
    shape = ctx.shape(src)
    return ctx.at(src, idx.slice_of(shape, slice_params(shape, node.attr_map)))


def _slice_view(x: Strided, attrs, k, shape):
    for axis, (start, step, n) in enumerate(slice_params(x.shape, attrs)):
        if (start, step, n) != (0, 1, x.shape[axis]):
            x = x.narrow(axis, start, step, n)
            if x is None:
                return None
    return x


def _slice_reads(shapes, attrs, k, consts):
    # A slice reads the elements it selects. (Mostly followed as a strided view of its
    # input instead; this serves where it is none: a slice of an axis a reshape merged
    # from axes a transpose had moved apart.)
    return tuple(whole_axis(np.sort(np.arange(n, dtype=np.int64) * step + start), d)
                 for (start, step, n), d in zip(slice_params(shapes[0], attrs), shapes[0]))


register(OpDef("slice", Kind.layout, (1, 1), _slice_infer, _slice_ref,
               None, "static strided slice (attrs starts, ends, axes, steps)",
               index=_slice_index, view=_slice_view, row_role=RowRole.never,
               reads=_slice_reads))


def _concat_infer(ins, attrs):
    rank = len(ins[0].shape)
    axis = check_axis(attr_int(attrs, "axis"), rank)
    base = ins[0].shape
    for v in ins:
        if len(v.shape) != rank or any(d != b for i, (d, b) in enumerate(zip(v.shape, base))
                                       if i != axis):
            raise GraphError(f"concat inputs {[list(v.shape) for v in ins]} differ "
                             f"off axis {axis}")
    dts = {v.dtype for v in ins}
    if len(dts) != 1:
        raise GraphError("concat needs inputs of one dtype")
    shape = tuple(sum(v.shape[axis] for v in ins) if i == axis else d
                  for i, d in enumerate(base))
    # the kernels read every part (branch-free, at a clamped index): a part with no
    # elements would be read at index -1
    empty = [k for k, v in enumerate(ins) if v.shape[axis] == 0]
    if empty and _numel(shape):
        raise GraphError(f"concat input {empty[0]} has length 0 along axis {axis}; drop "
                         "inputs with no elements (they add nothing)")
    return [(shape, ins[0].dtype)]


def _concat_index(ctx, node, k, idx: Index) -> str:
    axis = int(node.attr("axis")) % len(idx.shape)
    part = ctx.part(node.id)
    if part is not None:
        # the loop was split at the parts: this one's input alone
        start = sum(ctx.shape(v)[axis] for v in node.inputs[:part])
        src = node.inputs[part]
        return ctx.at(src, idx.offset_axis(axis, start, ctx.shape(src)))
    # Branch-free: read every part at a clamped (always valid) index, then select
    # (a GPU's threads stay together; a loop split on the CPU reads one part instead)
    d = idx.digits()
    parts, off = [], 0
    for name in node.inputs:
        shape = ctx.shape(name)
        n = shape[axis]
        dd = list(d)
        dd[axis] = f"wb_clampi({add(d[axis], str(-off))}, 0, {n - 1})"
        parts.append((off, ctx.at(name, Index.from_digits(dd, shape))))
        off += n
    expr = parts[-1][1]
    for (o, var), (o_next, _) in reversed(list(zip(parts[:-1], parts[1:]))):
        expr = f"({d[axis]} < {o_next} ? {var} : {expr})"
    return ctx.let(ctx.dtype(node.outputs[0]).compute, expr)


register(OpDef("concat", Kind.layout, (1, 64), _concat_infer,
               lambda xs, a: [np.concatenate(xs, axis=int(a["axis"]))], None,
               "join along attr axis", helpers=(CLAMPI,), index=_concat_index,
               row_role=RowRole.never))


def _split_infer(ins, attrs):
    x = ins[0]
    axis = check_axis(attr_int(attrs, "axis"), len(x.shape))
    sizes = attr_ints(attrs, "sizes")
    d = x.shape[axis]
    if not sizes:
        raise GraphError("split needs at least one size (attr sizes)")
    if any(not 0 <= s <= d for s in sizes):
        raise GraphError(f"split sizes {list(sizes)!r:.120} must each be in [0, {d}] (the "
                         f"length of axis {axis})")
    if sum(sizes) != d:
        raise GraphError(f"split sizes {list(sizes)} do not add up to {d}")
    return [(tuple(s if i == axis else d for i, d in enumerate(x.shape)), x.dtype)
            for s in sizes]


def _split_ref(xs, attrs):
    axis = int(attrs["axis"]) % xs[0].ndim
    cuts = np.cumsum(attrs["sizes"])[:-1]
    return [_contig(p) for p in np.split(xs[0], cuts, axis=axis)]


def _split_index(ctx, node, k, idx: Index) -> str:
    src = node.inputs[0]
    shape = ctx.shape(src)
    axis = int(node.attr("axis")) % len(shape)
    start = int(sum(node.attr("sizes")[:k]))
    d = idx.digits()
    d[axis] = add(d[axis], str(start))
    return ctx.at(src, Index.from_digits(d, shape))


register(OpDef("split", Kind.layout, (1, 1), _split_infer, _split_ref,
               None, "cut along attr axis into attr sizes", index=_split_index,
               view=lambda x, a, k, shape: x.narrow(
                   int(a["axis"]) % len(shape), int(sum(a["sizes"][:k])), 1, shape[
                       int(a["axis"]) % len(shape)]),
               row_role=RowRole.never))


def _gather_infer(ins, attrs):
    data, idx = ins
    if idx.dtype not in (DType.int32, DType.int64):
        raise GraphError(f"gather indices must be int32 or int64, got {idx.dtype.value}")
    axis = check_axis(attr_int(attrs, "axis", 0), len(data.shape))
    shape = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
    if data.shape[axis] == 0 and _numel(shape):
        # nothing to take: the kernels' clamped index would be -1
        raise GraphError(f"gather from axis {axis} of length 0 (data {list(data.shape)}) "
                         "has nothing to take")
    return [(check_shape(shape, "gather result"), data.dtype)]


def _gather_ref(xs, attrs):
    data, idx = xs
    axis = int(attrs.get("axis", 0)) % data.ndim
    n = data.shape[axis]
    # out-of-range indices are clamped, as the kernels do (ONNX leaves them undefined)
    idx = np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1)
    return [_contig(np.take(data, idx, axis=axis))]


def _gather_index(ctx, node, k, idx: Index) -> str:
    data, ind = ctx.shape(node.inputs[0]), ctx.shape(node.inputs[1])
    axis = int(node.attr("axis", 0)) % len(data)
    d = idx.digits()
    r = len(ind)
    i = ctx.at(node.inputs[1], Index.from_digits(d[axis:axis + r], ind))
    n = data[axis]
    # negative indices count from the end; out-of-range ones are clamped
    sel = ctx.let(DType.int64,
                  f"wb_clampi((long long)({i} < 0 ? {i} + {n}LL : {i}), 0, {n - 1})")
    return ctx.at(node.inputs[0], Index.from_digits(d[:axis] + [sel] + d[axis + r:], data))


def _gather_reads(shapes, attrs, k, consts):
    # An embedding lookup loads the table rows its indices select, not the table (128
    # tokens of BERT's 30522-row table: 0.4 of 94 MB). With constant indices those rows
    # are known; otherwise, at worst, each index selects a row of its own. Every index
    # is loaded (once per output row).
    if k == 1:
        return None
    data, ind = shapes
    axis = int(attrs.get("axis", 0)) % len(data)
    n = data[axis]
    if consts[1] is not None:
        i = np.asarray(consts[1], dtype=np.int64)
        along = whole_axis(np.unique(np.clip(np.where(i < 0, i + n, i), 0, n - 1)), n)
    else:
        along = min(_numel(ind), n)
        along = None if along == n else along
    return tuple(along if a == axis else None for a in range(len(data)))


register(OpDef("gather", Kind.layout, (2, 2), _gather_infer,
               _gather_ref, None, "take along attr axis at integer indices",
               helpers=(CLAMPI,), index=_gather_index, row_role=RowRole.never,
               reads=_gather_reads))
