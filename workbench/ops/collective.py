"""Collective ops over a group of p ranks, as torch's functional collectives are.

Each collective is an asynchronous *start* (``all_reduce``, ``reduce_scatter``,
``all_gather``, ``all_to_all``, ``all_to_all_single``, ``send_recv``: torch's
``_c10d_functional.*``) whose
result may be read only after its *wait* (``wait_tensor``). Shapes are the *global*
(logical) shapes of the unsharded program, as DTensor states them: a collective changes
where a value's elements live and how they are pending (its placement, checked by
``workbench.distributed.placement``), not the logical tensor. So on one process -- the
single-process reference of the whole program -- every collective but ``send_recv`` is
the identity, and a plain session runs a graph holding them as it runs any other (with
one rank, a collective moves nothing). Two move elements of the logical tensor:
``send_recv`` moves each rank's shard to the rank ``shift`` further along the ring, a
roll by ``shift`` shards along ``dim``; ``all_to_all_single`` (torch's, equal splits)
cuts each rank's dim-0 shard into p blocks and sends block j to rank j, which on the
logical tensor seen as p x p blocks along dim 0 is the transpose of the block grid
(rank r's block j becomes rank j's block r; doing it twice gives the tensor back).

What each does on p ranks is ``workbench.distributed.runner``'s: ``dist.all_reduce``,
``reduce_scatter_single``, ``all_gather_single``, ``all_to_all_single`` and
``isend``/``irecv`` on gloo (NCCL on GPUs).

Fusion never puts them in a group with other ops (they are opaque), so a kernel never
spans a collective.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from .registry import Kind, OpDef, attr_int, check_axis, register

# the reductions a collective (and a Partial placement) may hold -- torch's ReduceOp
# names SUM, AVG and MAX; gloo runs all three
REDUCE_OPS = ("sum", "avg", "max")

# collective op -> the attributes it takes (besides group_size), for the printer and docs
COLLECTIVES = {
    "all_reduce": ("reduce_op",),
    "reduce_scatter": ("reduce_op", "dim"),
    "all_gather": ("dim",),
    "all_to_all": ("split_dim", "concat_dim"),
    "all_to_all_single": (),
    "send_recv": ("dim", "shift"),
}
WAIT = "wait_tensor"
# a replicated value's own slice on each rank (DTensor's Replicate -> Shard): no
# communication, so no start and wait
SHARD_LOCAL = "shard_local"


def group_size(attrs) -> int:
    p = attr_int(attrs, "group_size")
    if p < 1:
        raise GraphError(f"attr group_size must be >= 1 (the number of ranks), got {p}")
    return p


def reduce_op(attrs) -> str:
    op = attrs.get("reduce_op", "sum")
    if op not in REDUCE_OPS:
        raise GraphError(f"attr reduce_op must be one of {', '.join(REDUCE_OPS)}, "
                         f"got {op!r:.40}")
    return op


def _divisible(shape, dim: int, p: int, what: str) -> None:
    if shape[dim] % p:
        raise GraphError(f"{what}: dim {dim} of {list(shape)} ({shape[dim]}) does not divide "
                         f"into {p} equal shards; pad it to a multiple of {p} or shard "
                         "another dim")


def _infer(name):
    def infer(ins, attrs):
        (x,) = ins
        p = group_size(attrs)
        rank = len(x.shape)
        if name in ("all_reduce", "reduce_scatter"):
            reduce_op(attrs)
        if x.dtype.kind != "f":
            raise GraphError(f"{name} moves float tensors; cast {x.dtype.value} first")
        for key in COLLECTIVES[name]:
            if key.endswith("dim"):
                d = check_axis(attr_int(attrs, key), rank, key)
                _divisible(x.shape, d, p, name)
        if name == "send_recv":
            attr_int(attrs, "shift")
        if name == "all_to_all_single" and (rank == 0 or x.shape[0] % (p * p)):
            raise GraphError(f"all_to_all_single: dim 0 of {list(x.shape)} must split into "
                             f"{p} x {p} equal blocks (each of {p} ranks' shards cut into "
                             f"one block per rank); pad it to a multiple of {p * p}")
        return [(x.shape, x.dtype)]
    return infer


def _identity(xs, attrs):
    return [np.array(xs[0], copy=True)]


def _send_recv_ref(xs, attrs):
    x = xs[0]
    d = attr_int(attrs, "dim") % x.ndim
    chunk = x.shape[d] // group_size(attrs)
    return [np.roll(x, attr_int(attrs, "shift") * chunk, axis=d)]


def _all_to_all_single_ref(xs, attrs):
    # (rank r's shard is block row r of the p x p grid, its block j goes to rank j: the
    # grid transposed; the definition a p-rank NumPy simulation is checked against in
    # tests/distributed/test_all_to_all_single.py)
    x, p = xs[0], group_size(attrs)
    grid = x.reshape(p, p, x.shape[0] // (p * p), *x.shape[1:])
    return [np.ascontiguousarray(grid.swapaxes(0, 1)).reshape(x.shape)]


# the reference of each collective on the logical tensor (the rest: the identity)
_MOVES = {"send_recv": _send_recv_ref, "all_to_all_single": _all_to_all_single_ref}


def _library(ref):
    def lib(xp, xs, attrs):
        if xp is np:
            return ref(xs, attrs)
        return [xp.asarray(r) for r in ref([xp.asnumpy(x) for x in xs], attrs)]
    return lib


def _moved(ref):
    return lambda xs, attrs: ref([np.abs(xs[0])], attrs)[0]


_DOCS = {
    "all_reduce": "start an AllReduce (reduce_op sum/avg/max) of a Partial value over "
                  "group_size ranks: Partial(op) -> Replicate once waited",
    "reduce_scatter": "start a ReduceScatter along dim: Partial(op) -> Shard(dim)",
    "all_gather": "start an AllGather along dim: Shard(dim) -> Replicate",
    "all_to_all": "start an AllToAll: Shard(concat_dim) -> Shard(split_dim)",
    "all_to_all_single": "start torch's all_to_all_single with equal splits: each rank's "
                         "Shard(0) cut into group_size blocks, block j sent to rank j, "
                         "received in rank order: Shard(0) -> Shard(0), the logical "
                         "tensor's p x p block grid along dim 0 transposed",
    "send_recv": "start a ring exchange: each rank sends its Shard(dim) to rank+shift and "
                 "receives from rank-shift (isend/irecv); the logical tensor rolls by "
                 "shift shards",
}

for _name in COLLECTIVES:
    _ref = _MOVES.get(_name, _identity)
    register(OpDef(_name, Kind.opaque, (1, 1), _infer(_name), _ref, None,
                   _DOCS[_name] + " (global shapes; read its result through wait_tensor)",
                   library=_library(_ref), library_flops=lambda i, o, a: 0.0,
                   # (the op moves elements: their error moves with them)
                   error_scale=_moved(_ref)))


def _wait_infer(ins, attrs):
    return [(ins[0].shape, ins[0].dtype)]


register(OpDef(WAIT, Kind.opaque, (1, 1), _wait_infer, _identity, None,
               "wait for a collective started by the op producing its input; its result",
               library=_library(_identity), library_flops=lambda i, o, a: 0.0,
               error_scale=lambda xs, attrs: np.abs(xs[0])))


def _shard_local_infer(ins, attrs):
    (x,) = ins
    d = check_axis(attr_int(attrs, "dim"), len(x.shape), "dim")
    _divisible(x.shape, d, group_size(attrs), SHARD_LOCAL)
    return [(x.shape, x.dtype)]


register(OpDef(SHARD_LOCAL, Kind.opaque, (1, 1), _shard_local_infer, _identity, None,
               "each rank keeps its slice along dim of a replicated value: Replicate -> "
               "Shard(dim), no communication",
               library=_library(_identity), library_flops=lambda i, o, a: 0.0,
               error_scale=lambda xs, attrs: np.abs(xs[0])))
