"""torch.export graphs holding ``scan`` or ``while_loop`` as repeats (``ir/repeat.py``).

torch keeps the body of its control-flow higher-order ops as plain FX subgraphs
(``torch.ops.higher_order.scan(combine_graph, init, xs, additional_inputs)``,
``torch.ops.higher_order.while_loop(cond_graph, body_graph, carried, additional)``).
A module whose exported graph is one of them (its inputs straight from the module's,
a counter made by ``torch.zeros``/``torch.tensor`` beside it) imports as a
:class:`Repeat`; the body goes through the ordinary torch importer
(:func:`~workbench.frontends.torch.from_torch`), so the body's inputs and outputs are
named as it names them (``args_0``..., ``output.0``...).

- ``scan`` (forwards along dim 0): carries are the carried state, ``xs`` the stacked
  inputs, ``ys`` the stacked outputs, additional inputs invariant.
- ``while_loop`` over a counter: one carried scalar integer starting from a constant,
  stepped by the body from itself alone, the condition reading it alone; the trip count
  is found by running the condition and the counter's step with torch. A body whose
  other outputs read the counter, or a condition that reads the state, is refused:
  the count would be known only at run time.

Example::

    >>> r = repeat_from_torch(Rollout(), (x, v, forces))   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx

from ..errors import GraphError
from ..ir.repeat import MAX_TRIPS, Repeat
from .torch.importer import from_torch

MAX_COUNTED = 1 << 20


def _refuse(why: str) -> GraphError:
    return GraphError(f"cannot import the loop as a repeat: {why}")


class _Body(torch.nn.Module):
    """A HOP's body subgraph as a module to export: ``drop`` leading outputs and
    inputs (a while_loop's counter) left out, fed with ``fixed`` in their place."""

    def __init__(self, gm: torch.fx.GraphModule, fixed: tuple = ()):
        super().__init__()
        self.gm = gm
        for i, t in enumerate(fixed):
            self.register_buffer(f"counter{i}", t.clone())
        self.drop = len(fixed)

    def forward(self, *args):
        lead = [getattr(self, f"counter{i}") for i in range(self.drop)]
        out = self.gm(*lead, *args)
        out = out if isinstance(out, (list, tuple)) else (out,)
        return tuple(out[self.drop:])


def repeat_from_torch(module: Any, example_inputs: Any, *, batch_axis: int = 0,
                      name: str | None = None) -> Repeat:
    """The module's one ``scan`` or ``while_loop`` as a verified :class:`Repeat`."""
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    ep = torch.export.export(module.eval() if hasattr(module, "eval") else module, args)
    gm = ep.graph_module
    hops = [n for n in gm.graph.nodes if n.op == "call_function" and
            n.target in (torch.ops.higher_order.scan, torch.ops.higher_order.while_loop)]
    other = sorted({str(n.target) for n in gm.graph.nodes if n.op == "call_function"
                    and n not in hops and n.target.__name__ != "getitem"
                    and not _is_constant_maker(n)})
    if len(hops) != 1 or other:
        raise _refuse(f"a repeat is a module whose exported graph is one scan or "
                      f"while_loop; this one has {len(hops)}"
                      + (f" and {', '.join(other)[:160]}" if other else "")
                      + "; export the loop on its own")
    node = hops[0]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = {p: a for p, a in zip(placeholders, args)}
    name = name or type(module).__name__.lower()
    if node.target is torch.ops.higher_order.scan:
        return _scan(gm, node, values, batch_axis, name)
    return _while(gm, node, values, batch_axis, name)


def _is_constant_maker(n) -> bool:
    return getattr(n.target, "__name__", "").split(".")[0] in (
        "zeros", "ones", "full", "scalar_tensor", "lift_fresh_copy", "_to_copy")


def _value(n, values: dict):
    """The example value of a graph input, or the tensor a constant maker makes."""
    if n in values:
        return values[n]
    if n.op == "call_function" and _is_constant_maker(n):
        return n.target(*n.args, **n.kwargs)
    raise _refuse(f"{n.name} is computed before the loop; the loop's inputs must be the "
                  "module's inputs (or constants)")


def _body_graph(sub, example: list, name: str, fixed: tuple = ()):
    try:
        return from_torch(_Body(sub, fixed), tuple(example), name=f"{name}_step")
    except GraphError as e:
        raise GraphError(f"the loop body: {e}") from None


def _scan(gm, node, values, batch_axis, name) -> Repeat:
    combine, init, xs, extra = node.args[:4]
    if node.kwargs.get("reverse") or (len(node.args) > 4 and node.args[4]):
        raise _refuse("a reversed scan; a repeat runs its steps forwards")
    sub = getattr(gm, combine.target)
    init_v = [_value(n, values) for n in init]
    xs_v = [_value(n, values) for n in xs]
    extra_v = [_value(n, values) for n in extra]
    lengths = {x.shape[0] for x in xs_v}
    if len(lengths) != 1:
        raise _refuse(f"the scanned inputs have lengths {sorted(lengths)}")
    g = _body_graph(sub, [*init_v, *[x[0] for x in xs_v], *extra_v], name)
    k, s = len(init_v), len(xs_v)
    carried = tuple(zip(g.inputs[:k], g.outputs[:k]))
    return Repeat(name, g, lengths.pop(), carried, tuple(g.inputs[k:k + s]),
                  batch_axis).verify()


def _depends(sub: torch.fx.GraphModule, out_index: int | None, on: int) -> bool:
    """Whether output ``out_index`` (None: every output) of ``sub`` reads placeholder
    ``on``."""
    ph = [n for n in sub.graph.nodes if n.op == "placeholder"]
    out = next(n for n in sub.graph.nodes if n.op == "output").args[0]
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    roots = outs if out_index is None else [outs[out_index]]
    seen, stack = set(), [r for r in roots if isinstance(r, torch.fx.Node)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack += [a for a in n.all_input_nodes]
    return ph[on] in seen


def _while(gm, node, values, batch_axis, name) -> Repeat:
    cond_n, body_n, carried, extra = node.args[:4]
    cond, body = getattr(gm, cond_n.target), getattr(gm, body_n.target)
    carried_v = [_value(n, values) for n in carried]
    extra_v = [_value(n, values) for n in extra]
    k = len(carried_v)
    counters = [i for i, v in enumerate(carried_v) if v.dim() == 0 and
                not v.is_floating_point() and carried[i] not in values]
    cond_reads = [i for i in range(k) if _depends(cond, 0, i)]
    if len(counters) != 1 or cond_reads != counters or counters[0] != 0:
        raise _refuse("the condition must read only a counter: the first carried value, a "
                      "scalar integer made by the module (torch.zeros(()) ...); here it "
                      f"reads carried values {cond_reads}")
    if any(_depends(body, 0, i) for i in range(1, k)):
        raise _refuse("the counter's step reads the state: the count is known only at "
                      "run time")
    if any(_depends(body, j, 0) for j in range(1, k)):
        raise _refuse("the body reads the counter; a repeat's steps do not see their index")
    i, trips = carried_v[0].clone(), 0
    with torch.no_grad():
        while bool(cond(i, *carried_v[1:], *extra_v)):
            trips += 1
            if trips > min(MAX_COUNTED, MAX_TRIPS):
                raise _refuse(f"the condition is still true after {trips - 1} steps")
            i = body(i, *carried_v[1:], *extra_v)[0]
    if trips == 0:
        raise _refuse("the condition is false before the first step: nothing repeats")
    g = _body_graph(body, [*carried_v[1:], *extra_v], name, fixed=(carried_v[0],))
    pairs = tuple(zip(g.inputs[:k - 1], g.outputs[:k - 1]))
    return Repeat(name, g, trips, pairs, (), batch_axis).verify()
