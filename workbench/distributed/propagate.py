"""Placement propagation: every value's placement from its producer's inputs', each
illegal combination refused with the reason (the distributed verifier).

The rules are DTensor's sharding propagation, restricted to what a rank can compute on
its own piece with the ops of the registry:

* elementwise: all replicated; or every non-replicated input sharded on the same
  (broadcast-aligned) dim, replicated operands of extent 1 there; Partial only through
  ops linear in it (add/sub of two partials of one reduction, neg).
* reductions: ``reduce_sum``/``reduce_mean``/``reduce_max`` over a sharded dim give
  ``Partial(sum|avg|max)`` (each rank's result one addend; an all_reduce finishes it);
  any other reduction must not reduce a sharded dim (a row would be split across
  ranks); ``reduce_sum``/``reduce_mean`` of a ``Partial(sum|avg)`` stay partial.
* matmul: ``R @ S(-1)`` -> ``S(-1)`` (column-parallel), ``S(-1) @ S(-2)`` -> ``P(sum)``
  (row-parallel), ``R @ S(batch)`` -> ``S(batch)`` (per-rank heads), ``S(rows) @ R`` ->
  ``S(rows)``, ``S(batch) @ S(batch)``
  -> ``S(batch)`` (a pipeline stage per rank), ``R @ R`` -> ``R``.
* slice: along dims a shard does not split (a Partial slices with its addends);
  reshape and concat of Partial values of one reduction stay Partial; a reshape of
  ``S(0)`` to a dim 0 that divides by p stays ``S(0)`` (each rank's piece of the
  row-major data is the same); a concat of
  values sharded on one dim, along another dim, stays sharded.
* other layout and library ops: replicated inputs only (their attributes are written
  for the global shape).
* collectives: ``all_reduce`` ``P(op)`` -> ``R``; ``reduce_scatter`` ``P(op)`` ->
  ``S(dim)``; ``all_gather`` ``S(dim)`` -> ``R``; ``all_to_all`` ``S(concat_dim)`` ->
  ``S(split_dim)``; ``all_to_all_single`` ``S(0)`` -> ``S(0)`` (each rank's rows cut
  into p blocks, block j to rank j); ``send_recv`` ``S(dim)`` -> ``S(dim)``; each result read only
  through its ``wait_tensor``. ``shard_local`` (no communication): ``R`` -> ``S(dim)``.
"""
from __future__ import annotations

from typing import Mapping

from ..errors import GraphError
from ..ir.graph import Graph, Node
from ..ops import Kind, get_op, normalize_axes
from ..ops.collective import COLLECTIVES, SHARD_LOCAL, WAIT
from ..ops.registry import attr_bool
from .placement import Partial, Placement, Replicate, Shard, check_on

# elementwise ops a Partial value may flow through: linear in every partial operand
_LINEAR = {"add", "sub", "neg"}
# reductions over a sharded dim whose per-rank results are addends of the whole (equal
# shards: the mean of the ranks' means is the mean)
_PARTIAL_OF = {"reduce_sum": "sum", "reduce_mean": "avg", "reduce_max": "max"}


class PlacementError(GraphError):
    """A placement no rank can compute, with the reason and the fix."""


def propagate(g: Graph, leaves: Mapping[str, Placement], p: int) -> dict[str, Placement]:
    """Every value's placement: ``leaves`` for inputs and constants (Replicate where
    absent), each node's outputs by the rules above; PlacementError naming the node."""
    out: dict[str, Placement] = {}
    for name in (*g.inputs, *g.constants):
        out[name] = check_on(leaves.get(name, Replicate()), g.value(name).shape, p,
                             f"value {name!r}")
    started: dict[str, Node] = {}      # a collective's result -> its start node
    for n in g.nodes:
        for i in n.inputs:
            if i in started and n.op != WAIT:
                raise PlacementError(
                    f"node {n.name!r} ({n.op}) reads {i!r}, the result of "
                    f"{started[i].op} {started[i].name!r}, before its wait_tensor; read "
                    "the wait's result")
        ins = [out[i] for i in n.inputs]
        try:
            res = _rule(g, n, ins, p)
        except PlacementError as e:
            raise PlacementError(f"node {n.name!r} ({n.op}): {e}") from None
        if n.op in COLLECTIVES:
            started[n.outputs[0]] = n
        elif n.op == WAIT:
            if n.inputs[0] not in started:
                raise PlacementError(f"node {n.name!r} waits on {n.inputs[0]!r}, which no "
                                     "collective started")
            del started[n.inputs[0]]
        for o in n.outputs:
            out[o] = res
    if started:
        name = next(iter(started))
        raise PlacementError(f"{started[name].op} {started[name].name!r} is never waited "
                             f"on; add wait_tensor({name})")
    return out


def _rule(g: Graph, n: Node, ins: list[Placement], p: int) -> Placement:
    op = get_op(n.op)
    if n.op in COLLECTIVES or n.op in (WAIT, SHARD_LOCAL):
        return _collective(g, n, ins[0], p)
    if op.kind is Kind.elementwise:
        return _elementwise(g, n, ins)
    if op.kind is Kind.reduce:
        return _reduce(g, n, ins[0])
    if n.op == "matmul":
        return _matmul(g, n, ins)
    if n.op == "slice":
        return _slice(g, n, ins[0])
    if n.op in ("reshape", "concat") and ins and all(isinstance(x, Partial) for x in ins):
        # (moving the addends moves the sum: how bucketed collectives pack and unpack)
        if len(set(ins)) > 1:
            raise PlacementError(f"joins partials {', '.join(map(str, ins))} of different "
                                 "reductions; one message reduces one way")
        return ins[0]
    if n.op == "reshape" and ins[0] == Shard(0):
        return _reshape_rows(g, n, p)
    if n.op == "concat" and ins and isinstance(ins[0], Shard) and len(set(ins)) == 1 and \
            n.attr("axis") % len(g.value(n.outputs[0]).shape) != ins[0].dim:
        # (joined along a dim the shard does not split: each rank joins its own pieces,
        # how the chunked sharded optimizer puts its moments back together)
        return ins[0]
    if any(not isinstance(x, Replicate) for x in ins):
        raise PlacementError(
            f"inputs placed {', '.join(map(str, ins))}: a {op.kind.value} op's attributes "
            "are written for the global shape, so it runs on replicated inputs only; "
            "all_gather (or all_reduce) its input first")
    return Replicate()


def _collective(g: Graph, n: Node, x: Placement, p: int) -> Placement:
    if n.op == WAIT:
        return x
    size = n.attr("group_size")
    if size != p:
        raise PlacementError(f"group_size {size} but the program runs on {p} ranks")
    rank = len(g.value(n.inputs[0]).shape)
    dim = lambda key: n.attr(key) % rank
    if n.op == SHARD_LOCAL:
        if not isinstance(x, Replicate):
            raise PlacementError(f"takes a slice of a {x} value; it slices replicated ones")
        return Shard(dim("dim"))
    if n.op in ("all_reduce", "reduce_scatter"):
        want = Partial(n.attr("reduce_op", "sum"))
        if x != want:
            raise PlacementError(f"reduces a {x} value; it reduces {want} (one addend per "
                                 "rank) -- a replicated value would be counted p times")
        return Replicate() if n.op == "all_reduce" else Shard(dim("dim"))
    if n.op == "all_to_all_single":
        if x != Shard(0):
            raise PlacementError(
                f"sends blocks of a {x} value; it cuts each rank's own rows (Shard(0)) into "
                f"{p} blocks and sends block j to rank j, so it takes Shard(0) -- "
                + ("all_reduce or reduce_scatter it first" if isinstance(x, Partial) else
                   "shard_local it first" if isinstance(x, Replicate) else
                   "all_to_all it onto dim 0 first"))
        return x
    src = {"all_gather": "dim", "all_to_all": "concat_dim", "send_recv": "dim"}[n.op]
    if x != Shard(dim(src)):
        raise PlacementError(f"moves a {x} value; it takes Shard({dim(src)}) ({src})")
    if n.op == "all_to_all":
        return Shard(dim("split_dim"))
    return Replicate() if n.op == "all_gather" else x


def _elementwise(g: Graph, n: Node, ins: list[Placement]) -> Placement:
    out_rank = len(g.value(n.outputs[0]).shape)
    kinds = ", ".join(map(str, ins))
    partial = {x for x in ins if isinstance(x, Partial)}
    if partial:
        ok = (n.op in _LINEAR and len(partial) == 1 and all(x in partial for x in ins)
              and next(iter(partial)).reduce_op in ("sum", "avg"))
        if not ok:
            raise PlacementError(
                f"inputs placed {kinds}: a Partial value is one addend per rank, and "
                f"{n.op} of it is not the {n.op} of the reduced value (only add/sub of "
                "partials of one sum, and neg, are linear); all_reduce it first")
        return ins[0]
    dims = set()
    for i, x in zip(n.inputs, ins):
        if isinstance(x, Shard):
            dims.add(x.dim + out_rank - len(g.value(i).shape))
    if not dims:
        return Replicate()
    if len(dims) > 1:
        raise PlacementError(f"inputs placed {kinds} are sharded on different dims of the "
                             "result; all_to_all one of them onto the other's dim")
    (d,) = dims
    for i, x in zip(n.inputs, ins):
        shape = g.value(i).shape
        k = d - (out_rank - len(shape))
        if isinstance(x, Replicate) and k >= 0 and shape[k] != 1:
            raise PlacementError(
                f"input {i!r} is replicated with extent {shape[k]} along dim {d}, which "
                f"its other inputs shard: each rank would read the wrong slice; place "
                f"{i!r} Shard({k})")
    return Shard(d)


def _reduce(g: Graph, n: Node, x: Placement) -> Placement:
    shape = g.value(n.inputs[0]).shape
    axes = normalize_axes(n.attr("axes", tuple(range(len(shape)))), len(shape))
    keep = attr_bool(n.attr_map, "keepdims", True)
    if isinstance(x, Partial):
        if n.op in ("reduce_sum", "reduce_mean") and x.reduce_op in ("sum", "avg"):
            return x
        raise PlacementError(f"{n.op} of a {x} value is not the {n.op} of the reduced "
                             "value; all_reduce it first")
    if isinstance(x, Shard):
        if x.dim in axes and n.op in _PARTIAL_OF:
            # (each rank reduces its slice: one addend per rank of the whole reduction,
            # as DTensor's sum over a sharded dim; an all_reduce finishes it)
            return Partial(_PARTIAL_OF[n.op])
        if x.dim in axes:
            raise PlacementError(
                f"reduces dim {x.dim}, which is sharded across the ranks (Shard({x.dim})): "
                "a row would be split across ranks; all_gather it first, or shard another "
                "dim")
        return Shard(x.dim if keep else x.dim - sum(a < x.dim for a in axes))
    return x


def _slice(g: Graph, n: Node, x: Placement) -> Placement:
    """A slice along dims a shard does not split takes the same slice of every rank's
    piece (its starts and ends hold for the local shape there); a Partial value's
    addends slice with it (a slice commutes with any elementwise reduction)."""
    from ..ops.layout import slice_params
    shape = g.value(n.inputs[0]).shape
    if isinstance(x, Shard):
        start, step, length = slice_params(shape, n.attr_map)[x.dim]
        if (start, step, length) != (0, 1, shape[x.dim]):
            raise PlacementError(f"slices dim {x.dim}, which is sharded across the ranks: "
                                 "each rank holds other elements of it; all_gather it "
                                 "first, or slice another dim")
    return x


def _reshape_rows(g: Graph, n: Node, p: int) -> Placement:
    # (S(0) holds rank r's r-th p-th of the row-major data; so does S(0) of any shape
    # whose dim 0 divides by p: expert parallelism's [p * p * c, h] <-> [p, p * c, h])
    out = g.value(n.outputs[0]).shape
    if out and out[0] % p == 0:
        return Shard(0)
    raise PlacementError(f"reshapes a value sharded on dim 0 to {list(out)}, whose dim 0 "
                         f"does not divide into {p} ranks' pieces of the row-major data; "
                         "all_gather it first, or keep dim 0 a multiple of the ranks")


def _matmul(g: Graph, n: Node, ins: list[Placement]) -> Placement:
    a, b = ins
    ra, rb = (len(g.value(i).shape) for i in n.inputs)
    rout = len(g.value(n.outputs[0]).shape)
    if ra >= 2 and rb >= 2:
        if isinstance(a, Replicate) and isinstance(b, Replicate):
            return Replicate()
        if isinstance(a, Replicate) and b == Shard(rb - 1):
            return Shard(rout - 1)                    # column-parallel
        if isinstance(a, Replicate) and isinstance(b, Shard) and b.dim < rb - 2:
            return Shard(b.dim + rout - rb)           # a batch of weights split (heads)
        if a == Shard(ra - 1) and b == Shard(rb - 2):
            return Partial("sum")                     # row-parallel: partial sums
        if isinstance(a, Shard) and a.dim < ra - 1 and isinstance(b, Replicate):
            return Shard(a.dim + rout - ra)           # rows (or batches) split
        if isinstance(a, Shard) and isinstance(b, Shard) and a.dim < ra - 2 \
                and b.dim < rb - 2 and a.dim + rout - ra == b.dim + rout - rb:
            return Shard(a.dim + rout - ra)           # one batch dim split in both
    raise PlacementError(
        f"inputs placed {a}, {b}: a rank can multiply R @ S(-1) (column-parallel), "
        "R @ S(batch), "
        "S(-1) @ S(-2) (row-parallel, a partial sum), S(rows) @ R, S(batch) @ S(batch) "
        "or R @ R")
