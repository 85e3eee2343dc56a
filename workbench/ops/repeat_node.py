"""A repeat as a node of an ordinary graph: op ``repeat``, its attr ``repeat`` the
:class:`~workbench.ir.repeat.Repeat` (issue 46; ``docs/repeat.md``).

So a graph may mix ops before and after a rollout -- normalize the observations, run
256 simulator steps, sum the rewards -- and be verified, printed, saved and run by the
reference like any other. The node's inputs are the repeat's inputs in order
(``r.inputs``: initial state, stacked, invariant), its outputs the repeat's outputs
(``r.outputs``: final state, then the stacked outputs with their leading trips axis);
the shape rule checks each input against the repeat's declared value and names the
first that differs.

In the graph session the node is a library op run on the host by the repeat's NumPy
reference (correct, not fast, as the ordering ops): the fused C kernels of
``codegen/repeat_c.py`` run a repeat opened on its own (``wb.Session(r)``); planning a
graph's kernels around a repeat node and calling them from it is not built yet.

The op module reads the repeat only through its own methods (``inputs``, ``value``,
``reference``...), so the ops stay below the IR in the layering.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import GraphError
from .registry import Kind, OpDef, get_op, register

# (a repeat's inputs: carried, stacked and invariant; the arity's upper bound is only a
# sanity limit)
MAX_INPUTS = 1 << 16


def repeat_attr(attrs: Mapping[str, Any]):
    """The node's Repeat, verified; GraphError where the attr is missing or not one."""
    r = attrs.get("repeat")
    if r is None or type(r).__name__ != "Repeat" or not hasattr(r, "reference"):
        raise GraphError("op repeat needs attr repeat: a Repeat (wb.repeat(step, n, "
                         f"state)), got {type(r).__name__}")
    return r.verify()


def _infer(ins, attrs):
    r = repeat_attr(attrs)
    names = r.inputs
    if len(ins) != len(names):
        raise GraphError(f"repeat {r.name!r} takes {len(names)} inputs "
                         f"({', '.join(names)[:200]}), got {len(ins)}")
    for v, n in zip(ins, names):
        want = r.value(n)
        if (tuple(v.shape), v.dtype) != (want.shape, want.dtype):
            raise GraphError(f"repeat {r.name!r}: input {n!r} is given "
                             f"{v.dtype.value}{list(v.shape)}, the repeat takes "
                             f"{want.dtype.value}{list(want.shape)}"
                             + (" (stacked: one slice per step first)"
                                if n in r.stacked_inputs else ""))
    return [(r.value(o).shape, r.value(o).dtype) for o in r.outputs]


def _reference(xs, attrs):
    r = repeat_attr(attrs)
    out = r.reference(dict(zip(r.inputs, xs)))
    return [out[o] for o in r.outputs]


def _library(xp, xs, attrs):
    """On the host (CuPy arrays copied there and back): the repeat's reference."""
    import numpy as np
    if xp is np:
        return _reference(list(xs), attrs)
    return [xp.asarray(o) for o in _reference([xp.asnumpy(x) for x in xs], attrs)]


def _flops(ins, out, attrs) -> float:
    r = repeat_attr(attrs)
    per_element = sum(get_op(n.op).flops for n in r.body.nodes)
    return float(r.trips * r.body.value(r.carried[0][0]).numel * per_element)


register(OpDef("repeat", Kind.opaque, (1, MAX_INPUTS), _infer, _reference, None,
               "a repeat (attr repeat): its body run trips times, the state carried; "
               "outputs the final state and the stacked per-step outputs",
               library=_library, library_flops=_flops))
