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

On a GPU (a float32 matmul with an elementwise epilogue only, the GPU's block GEMM)
only under a cost model: ``rules`` leaves the GPU's matmuls to cuBLAS, which outruns
the generated GEMM; ``stitch`` joins where the saved round trip of the product
outweighs that. A GPU's GEMM kernel takes no row epilogue, so there the second
matmul of an attention joins its softmax kernel and the scores' kernel in one step
(``_scores_kernel``; the fused attention, online softmax).

    >>> log = absorb_epilogues(g, part, cpu)             # doctest: +SKIP
    >>> print(log[0])                                     # doctest: +SKIP
    fused n0 + n1 + n2: n1 add, n2 gelu into the GEMM of n0 matmul: ...

Before and after that, the layout ops giving a GEMM kernel's operands (reshapes,
transposes, slices, splits: prologue views, :func:`.gemm.operands.operand`) move into
it, which then reads the operand in place: the heads split out of a QKV projection for
attention, GPT-2's reshapes. They leave the kernel they were in (their copies are
gone); what is left of it is cut into its connected parts, and each part that is the
epilogue of a lone matmul's product joins that matmul (the bias add left behind when
a projection's heads are read in place). Under a cost model the whole move is taken
only when the kernels it touches are predicted faster after it. A lone matmul whose
left operand a GEMM kernel with a row epilogue computes (the softmax over attention
scores) may join that kernel as its second product (fused attention,
:func:`.gemm.attention.analyze_attention`), tried after its consumers.
"""
from __future__ import annotations

import math
from typing import Callable

from ..errors import FusionRefused
from ..ir import Graph
from ..ops.conv import CONVS
from .analysis import analyze
from .gemm.operands import INVERTIBLE, prologue, view_chain
from ..device import Device
from .partition import Decision, Partition

GEMM_OPS = ("matmul",) + CONVS      # library ops the gemm template takes

# seconds a kernel of these nodes is predicted to take (math.inf when none fits)
Price = Callable[[frozenset], float]


def absorb_epilogues(g: Graph, part: Partition, device: Device,
                     price: Price | None = None) -> list[Decision]:
    """Merge each lone matmul of ``part`` with the first kernel reading its result that
    is its epilogue, or else with the kernel computing its left operand when that is a
    GEMM with a row epilogue (attention: softmax(Q Kᵀ) then @ V), each only when
    legal (and, given ``price``, predicted faster joined); returns the log. ``part``
    is changed in place."""
    if device.is_gpu and price is None:
        # on a GPU the library GEMM (cuBLAS) outruns the generated one
        # (gemm.gpu_tiles.GPU_GEMM_EFFICIENCY), so a GEMM kernel wins only where the
        # epilogue's round trip through memory costs more than that: only a cost model
        # says where
        return []
    log: list[Decision] = []
    _take_views(g, part, device, price, log)
    for node in g.nodes:
        if node.op not in GEMM_OPS or not _lone(g, part, node):
            continue
        mine = part.owner[node.id]
        readers = dict.fromkeys(part.owner[c.id] for c in g.consumers[node.outputs[0]])
        left = g.producer.get(node.inputs[0])
        attention = None
        if (node.op == "matmul" and left is not None
                and part.owner[left.id] not in readers | {mine: None}):
            attention = part.owner[left.id]
            readers[attention] = None            # (tried last)
        for theirs in readers:
            joined = {theirs}
            if theirs == attention and device.is_gpu:
                scores = _scores_kernel(g, part, theirs)
                if scores is None:
                    continue
                what = (f"{node.id} matmul, the softmax kernel of {part.first(theirs)} and "
                        f"the scores' kernel of {part.first(scores)} as one fused attention "
                        "(online softmax): scores and probabilities never leave the chip")
                joined = {theirs, scores}
            elif theirs == attention:
                what = (f"{node.id} matmul into the GEMM kernel of {part.first(theirs)} as "
                        "fused attention: each tile's probabilities are multiplied while in "
                        "cache, never written and read back")
            else:
                what = (_ops(g, part.members[theirs], part, 3) + f" into the GEMM of "
                        f"{node.id} {node.op}: each tile of the product is finished in "
                        "cache, never written and read back")
            if _join(g, part, node, joined, device, price, log, what):
                break
    _take_views(g, part, device, price, log)      # (V's, now that attention is one kernel)
    _take_result_views(g, part, device, price, log)
    return log


def _take_result_views(g: Graph, part: Partition, device: Device, price: Price | None,
                       log: list[Decision]) -> None:
    """A fused attention's kernel takes the kernel after it when that only moves its
    output (the heads merged back: a transpose and a reshape): the second product is
    written where they would put it (:func:`.gemm.operands.result_views`)."""
    for node in g.nodes:
        if node.op != "matmul" or node.inputs[0] not in g.producer:
            continue
        mine = part.owner[node.id]
        if part.owner[g.producer[node.inputs[0]].id] != mine:
            continue                       # not the second product of a kernel
        for c in g.consumers[node.outputs[0]]:
            theirs = part.owner[c.id]
            if theirs == mine or any(g.node(n).op not in INVERTIBLE
                                     for n in part.members[theirs]):
                continue
            _join(g, part, node, {theirs}, device, price, log,
                  _ops(g, part.members[theirs], part) + f" into the GEMM kernel of "
                  f"{node.id} matmul: its product is written where they put it, the "
                  "copy is gone")


def _take_views(g: Graph, part: Partition, device: Device, price: Price | None,
                log: list[Decision]) -> None:
    """Move into each GEMM kernel the layout ops outside it that give its matmuls'
    operands as strided views of values in memory (see the module docstring)."""
    for node in g.nodes:
        if node.op != "matmul":
            continue
        mine = part.owner[node.id]
        chain = _outside_views(g, part, mine)
        if not chain:
            continue
        trial = part.copy()
        touched = {trial.owner[n] for n in chain} | {mine}
        # the kernels the views leave, in graph order (not the set's hash order: it
        # orders the parts left behind, so which joins a GEMM first and the log)
        left = [[n for n in trial.members[x] if n not in chain]
                for x in sorted(touched - {mine}, key=lambda x: int(x[1:]))]
        rest = trial.replace(touched, [set(trial.members[mine]) | chain] + [
            c for nodes in left for c in _components(g, nodes)])
        kernel, parts = rest[0], rest[1:]
        why = _refusal(g, trial, {kernel}, trial.members[kernel], device)
        views = _ops(g, chain, part)
        if why is not None:
            log.append(Decision("not fused", (node.id, min(chain, key=part.index.get)), why))
            continue
        steps: list[Decision] = []
        for gid in parts:                 # a part that is a lone matmul's epilogue joins it
            ms = {g.producer[i] for n in trial.members.get(gid, ()) for i in g.node(n).inputs
                  if i in g.producer and g.producer[i].op == "matmul"}
            for m in sorted(ms, key=lambda m: part.index[m.id]):
                if gid in trial.members and _lone(g, trial, m):
                    _join(g, trial, m, {gid}, device, price, steps,
                          f"{_ops(g, trial.members[gid], part)} into the GEMM of {m.id} "
                          "matmul (left when the views moved out of their kernel)")
        gain = ""
        if price is not None:
            old = set(part.key())
            now_groups = [frozenset(v) for v in trial.members.values()
                          if frozenset(v) not in old]
            was_groups = sorted({part.owner[n] for nodes in now_groups for n in nodes},
                                key=lambda x: int(x[1:]))
            was = sum(price(frozenset(part.members[x])) for x in was_groups)
            now = sum(price(nodes) for nodes in now_groups)
            if not now < was:
                log.append(Decision("not fused", (node.id, min(chain, key=part.index.get)),
                                    f"reading {views} in place is predicted no faster "
                                    f"({_us(was)} -> {_us(now)})"))
                continue
            gain = f"; predicted {_us(was)} -> {_us(now)}"
        part.adopt(trial)
        log.append(Decision("fused", tuple(sorted(chain | {node.id}, key=part.index.get)),
                            f"{views} into the GEMM of {node.id} matmul: the kernel reads "
                            f"the operands in place, the copies are gone{gain}"))
        log.extend(d for d in steps if d.action == "fused")


def _outside_views(g: Graph, part: Partition, gid: str) -> frozenset:
    """The layout ops outside kernel ``gid`` on the paths from its matmuls' operands back
    to values in memory (ops with a view rule only), when nothing else reads them."""
    members = set(part.members[gid])
    found: set[str] = set()
    for m in (g.node(n) for n in members):
        if m.op != "matmul":
            continue
        for i in m.inputs:
            found.update(p.id for p in view_chain(g, i) if p.id not in members)
    # only whole chains whose every value stays inside the kernel
    inside = members | found
    while True:
        bad = {n for n in found for o in g.node(n).outputs
               if o in g.outputs or any(c.id not in inside for c in g.consumers[o])}
        if not bad:
            return frozenset(found)
        found -= bad
        inside -= bad
        # (what fed a dropped op only is dropped next round: its reader is outside now)


def _components(g: Graph, nodes: list[str]) -> list[list[str]]:
    """The weakly connected parts of a node set (edges: values between its nodes), each
    found from its first node in graph order (a set's pop would order them by hash)."""
    left, out = set(nodes), []
    for start in sorted(nodes, key=g.position.__getitem__):
        if start not in left:
            continue
        left.remove(start)
        todo, part = [start], []
        while todo:
            n = todo.pop()
            part.append(n)
            node = g.node(n)
            near = [g.producer[i].id for i in node.inputs if i in g.producer]
            near += [c.id for o in node.outputs for c in g.consumers[o]]
            for x in near:
                if x in left:
                    left.remove(x)
                    todo.append(x)
        out.append(part)
    return out


def _lone(g: Graph, part: Partition, node) -> bool:
    """Whether the matmul's kernel holds nothing but it and the views giving its
    operands."""
    members = set(part.members[part.owner[node.id]])
    if node.op != "matmul":
        return members == {node.id}
    try:
        views = {p.id for p in prologue(g, node, members)}
    except FusionRefused:
        return False
    return members <= {node.id} | views


def _join(g, part, node, others: set, device, price, log, what: str) -> bool:
    """Merge the matmul's kernel with kernels ``others`` when legal (and, given
    ``price``, predicted faster); log it either way."""
    mine = part.owner[node.id]
    gids = others | {mine}
    nodes = sorted((n for x in gids for n in part.members[x]), key=part.index.__getitem__)
    why = _refusal(g, part, gids, nodes, device)
    gain = ""
    if why is None and price is not None:
        apart = sum(price(frozenset(part.members[x])) for x in gids)
        joined = price(frozenset(nodes))
        if not joined < apart:
            why = f"the GEMM kernel is predicted no faster ({_us(apart)} apart -> {_us(joined)})"
        gain = f"; predicted {_us(apart)} -> {_us(joined)}"
    if why is not None:
        first = min((part.first(x) for x in others), key=part.index.__getitem__)
        log.append(Decision("not fused", (node.id, first), why))
        return False
    part.merge(gids)
    log.append(Decision("fused", tuple(nodes), what + gain))
    return True


def _scores_kernel(g, part, softmax: str) -> str | None:
    """The kernel whose matmul gives kernel ``softmax`` its scores (a fused attention
    on a GPU takes both at once: the GPU's GEMM kernel takes no row epilogue to
    stand between), or None unless exactly one does."""
    mine = set(part.members[softmax])
    owners = {part.owner[p.id] for n in mine for i in g.node(n).inputs
              if (p := g.producer.get(i)) is not None and p.id not in mine}
    scores = [x for x in owners if any(g.node(n).op == "matmul" for n in part.members[x])]
    return scores[0] if len(scores) == 1 else None


def _refusal(g, part, gids: set, nodes, device) -> str | None:
    """Why kernels ``gids`` of ``part`` cannot be one kernel of ``nodes`` (a cycle, or
    no template fits), or None."""
    why = part.cycle(gids)
    if why is None:
        try:
            analyze(g, tuple(sorted(nodes, key=part.index.__getitem__)), device=device)
        except FusionRefused as e:
            why = str(e)
    return why


def _ops(g, nodes, part, limit: int | None = None) -> str:
    """``n4 add, n5 reshape, ..`` in graph order (the first ``limit``, then a count)."""
    ops = sorted(nodes, key=part.index.__getitem__)
    more = f", +{len(ops) - limit} more" if limit and len(ops) > limit else ""
    return ", ".join(f"{n} {g.node(n).op}" for n in ops[:limit]) + more


def _us(seconds: float) -> str:
    return "no kernel" if math.isinf(seconds) else f"{seconds * 1e6:.3g} us"
