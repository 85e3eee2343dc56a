"""Epilogue fusion: a matmul joins the kernel of the ops that consume its result, when
that kernel is its epilogue (the ``gemm`` template, :mod:`.gemm`).

A pass after a planner's partition, not a move inside its search: every planner
treats a library call as a boundary between independent parts of the graph
(:mod:`.regions`), and a matmul taking one whole consumer kernel as its epilogue keeps
those parts as they were. ``rules`` takes every legal epilogue (it is rule-driven);
``stitch`` takes one only when its cost model predicts the joined kernel faster than
the library call and the epilogue kernel apart. A consumer kernel that is not an
epilogue as a whole (a bias add with a LayerNorm, a reshape into attention heads)
stays apart, with the reason logged.

Only on a CPU device: on a GPU the template is refused, so nothing is tried (and
nothing is logged) there.

    >>> log = absorb_epilogues(g, part, cpu)             # doctest: +SKIP
    >>> print(log[0])                                     # doctest: +SKIP
    fused n0 + n1 + n2: n1 add, n2 gelu into the GEMM of n0 matmul: ...

Before that, a kernel that is only a reshape giving a matmul's operand (a view keeping
its rows, :func:`.gemm.prologue`) joins the matmul's kernel, which then reads the
operand in place. A lone matmul whose left operand a GEMM kernel with a row epilogue
computes (the softmax over attention scores) may join that kernel as its second
product (fused attention, :func:`.gemm._attention`), tried after its consumers.
"""
from __future__ import annotations

import math
from typing import Callable

from ..errors import FusionRefused
from ..ir import Graph
from .analysis import analyze
from .gemm import VIEWS
from .devices import Device
from .partition import Decision, Partition

# seconds a kernel of these nodes is predicted to take (math.inf when none fits)
Price = Callable[[frozenset], float]


def absorb_epilogues(g: Graph, part: Partition, device: Device,
                     price: Price | None = None) -> list[Decision]:
    """Merge each lone matmul of ``part`` with the first kernel reading its result that
    is its epilogue, or else with the kernel computing its left operand when that is a
    GEMM with a row epilogue (attention: softmax(Q Kᵀ) then @ V), each only when
    legal (and, given ``price``, predicted faster joined); returns the log. ``part``
    is changed in place."""
    if device.is_gpu:
        return []
    log: list[Decision] = []
    for node in g.nodes:       # first the reshapes giving an operand (prologue views)
        if node.op == "matmul" and _lone(g, part, node):
            for i in node.inputs:
                p = g.producer.get(i)
                if p is not None and p.op in VIEWS and len(part.members[part.owner[p.id]]) == 1:
                    _join(g, part, node, part.owner[p.id], device, price, log,
                          f"{p.id} {p.op} into the GEMM of {node.id} matmul: the kernel "
                          "reads the operand in place, the reshape's copy is gone")
    for node in g.nodes:
        if node.op != "matmul" or not _lone(g, part, node):
            continue
        mine = part.owner[node.id]
        readers = dict.fromkeys(part.owner[c.id] for c in g.consumers[node.outputs[0]])
        left = g.producer.get(node.inputs[0])
        attention = None
        if left is not None and part.owner[left.id] not in readers | {mine: None}:
            attention = part.owner[left.id]
            readers[attention] = None            # (tried last)
        for theirs in readers:
            if theirs == attention:
                what = (f"{node.id} matmul into the GEMM kernel of {part.first(theirs)} as "
                        "fused attention: each tile's probabilities are multiplied while in "
                        "cache, never written and read back")
            else:
                ops = sorted(part.members[theirs], key=part.index.__getitem__)
                more = f", +{len(ops) - 3} more" if len(ops) > 3 else ""
                what = (", ".join(f"{n} {g.node(n).op}" for n in ops[:3]) + more
                        + f" into the GEMM of {node.id} matmul: each tile of the product "
                        "is finished in cache, never written and read back")
            if _join(g, part, node, theirs, device, price, log, what):
                break
    return log


def _lone(g: Graph, part: Partition, node) -> bool:
    """Whether the matmul's kernel holds nothing but it and reshapes giving its
    operands."""
    views = {g.producer[i].id for i in node.inputs
             if i in g.producer and g.producer[i].op in VIEWS}
    return set(part.members[part.owner[node.id]]) <= {node.id} | views


def _join(g, part, node, theirs, device, price, log, what: str) -> bool:
    """Merge the matmul's kernel with kernel ``theirs`` when legal (and, given
    ``price``, predicted faster); log it either way."""
    mine = part.owner[node.id]
    nodes = sorted(part.members[theirs] + part.members[mine], key=part.index.__getitem__)
    why = part.cycle({mine, theirs})
    if why is None:
        try:
            analyze(g, tuple(nodes), device=device)
        except FusionRefused as e:
            why = str(e)
    gain = ""
    if why is None and price is not None:
        apart = price(frozenset(part.members[mine])) + price(frozenset(part.members[theirs]))
        joined = price(frozenset(nodes))
        if not joined < apart:
            why = f"the GEMM kernel is predicted no faster ({_us(apart)} apart -> {_us(joined)})"
        gain = f"; predicted {_us(apart)} -> {_us(joined)}"
    if why is not None:
        log.append(Decision("not fused", (node.id, part.first(theirs)), why))
        return False
    part.merge({mine, theirs})
    log.append(Decision("fused", tuple(nodes), what + gain))
    return True


def _us(seconds: float) -> str:
    return "no kernel" if math.isinf(seconds) else f"{seconds * 1e6:.3g} us"
