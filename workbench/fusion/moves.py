"""The stitch planner's moves and their prices: legality and cost per node set, cached
across every plan the search visits (:class:`Search`: a kernel's group or the reason
none fits, priced once per kernel shape), and the moves between kernels it proposes --
*merge* two kernels (stitched into phases when no one template fits), *peel-merge*
(a merge once one op leaves the first kernel), *split* (part of a kernel leaves it) --
each with the seconds the model says it saves. The search itself: :mod:`.beam`.

    >>> Search(g, CostModel.for_device(H100), stitch=True).cost(frozenset({"n0"}))  # doctest: +SKIP
    1.2e-05
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import FusionRefused
from ..ir import Graph
from ..ops import Kind, get_op
from .analysis import analyze
from .cost import CostModel
from .mapping import ScheduleKind
from .memo import AnalysisMemo
from .partition import Partition
from .phases import analyze_stitched
from .plan import Group, make_group
from .regions import region_key

DOMINANT_FLOPS = 4        # an elementwise op this costly anchors a kernel
PEEL_MAX = 12             # peel-merge only from kernels this small
STITCH_MAX = 48           # try a stitched (multi-phase) kernel up to this many ops
EPS = 1e-9                # seconds: a gain below this is no gain


def dominant_ops(g: Graph) -> list[str]:
    """Reductions and costly elementwise ops, in topological order."""
    out = []
    for n in g.nodes:
        op = get_op(n.op)
        if op.kind is Kind.reduce or (op.kind is Kind.elementwise
                                      and op.flops >= DOMINANT_FLOPS):
            out.append(n.id)
    return out


@dataclass(frozen=True)
class Move:
    """A change the search may make to a plan: ``kind`` merge (``a`` and ``b`` joined),
    peel (``peeled`` leaves ``a``, the rest joins ``b``) or split (``part`` leaves
    ``a``), saving ``gain`` seconds by the model."""
    kind: str                          # merge | peel | split
    a: frozenset
    b: frozenset
    peeled: str = ""                   # peel: the op that leaves a
    gain: float = 0.0                  # seconds saved (> 0)
    part: frozenset = frozenset()      # split: the ops that leave a
    # graph positions naming the move (first op of a, of b, the peeled op, the split
    # part's ops): equal gains are common -- kernels of one shape are priced alike --
    # and are ranked by this, never by the hash order of sets of names, which differs
    # per process (PYTHONHASHSEED) and made a plan a coin toss per process
    order: tuple = ()


# a constant smaller than this (an L1 cache's worth) makes no sibling candidates
SIBLING_CONSTANT_MIN_BYTES = 32 * 1024


class Search:
    """Legality and cost per node set, cached across every plan the search visits."""

    def __init__(self, g: Graph, model: CostModel, stitch: bool, tf32: bool = False):
        self.g, self.model, self.stitch, self.tf32 = g, model, stitch, tf32
        self.device = model.device
        self.index = g.position
        self.kind = {n.id: get_op(n.op).kind for n in g.nodes}
        self._groups: dict[frozenset, Group | str] = {}
        self.single_refusal: dict[frozenset, str] = {}   # why no one template fits
        self._costs: dict[frozenset, tuple[float, bool]] = {}
        self._by_shape: dict[tuple, tuple[float, bool]] = {}
        self.dominant = set(dominant_ops(g))
        self.region: set[str] | None = None     # the ops of the region being searched
        self.region_nodes: tuple[str, ...] = ()
        self.analyses = 0                       # node sets analysed (a work count)
        self.memo = AnalysisMemo()              # the phases' analyses, shared by every cut
        # values read by more than one kernel-to-be: sibling candidates. A small
        # constant is not one: reading it twice costs next to nothing, and exporters
        # share one initializer among every layer whose weights are equal (torch's
        # dynamo exporter does, for a model's untrained LayerNorm weights and zero
        # biases), which would join every layer into one region to search
        # (their readers: ``constant_readers``, joined after the search where predicted
        # faster: fusion/siblings.py)
        self.readers: dict[str, list[str]] = {}
        self.constant_readers: dict[str, list[str]] = {}
        for n in g.nodes:
            if self.kind[n.id] is Kind.opaque:
                continue
            for i in dict.fromkeys(n.inputs):
                v = g.value(i)
                if v.numel <= 1:
                    continue
                small = g.is_constant(i) and v.nbytes < SIBLING_CONSTANT_MIN_BYTES
                (self.constant_readers if small else self.readers).setdefault(
                    i, []).append(n.id)

    # -- legality and cost ------------------------------------------------------------
    def group(self, nodes: frozenset) -> Group | str:
        """A group of these nodes to price (its schedule; no stitch schemes), or the
        reason none fits. (``analyze`` directly: ``make_group`` rebuilds a node index
        of the whole graph per call, which dominated planning time on 1000 ops.)"""
        hit = self._groups.get(nodes)
        if hit is None:
            self.analyses += 1
            ns = tuple(sorted(nodes, key=self.index.__getitem__))
            try:
                hit = Group(f"k{self.index[ns[0]]}", ns,
                            analyze(self.g, ns, device=self.device, tf32=self.tf32))
            except FusionRefused as e:
                hit = self.single_refusal[nodes] = str(e)
                if (self.stitch and len(ns) <= STITCH_MAX
                        and not any(self.kind[n] is Kind.opaque for n in ns)):
                    try:
                        hit = Group(f"k{self.index[ns[0]]}", ns,
                                    analyze_stitched(self.g, ns, device=self.device,
                                                     memo=self.memo))
                    except FusionRefused:
                        pass
            self._groups[nodes] = hit
        return hit

    def final(self, nodes) -> Group:
        """The plan's Group of these nodes (with its stitch schemes)."""
        gr = self.group(frozenset(nodes))
        if isinstance(gr, str):       # every group of a visited plan was legal
            raise FusionRefused(gr)
        return make_group(self.g, gr.nodes, stitch=gr.schedule.kind is ScheduleKind.stitched,
                          device=self.device, tf32=self.tf32)

    def _priced(self, nodes: frozenset) -> tuple[float, bool]:
        """(predicted seconds, whether one template fits) of a kernel of these nodes,
        shared by kernels of the same shape (:func:`.regions.region_key`: the model and
        analysis see nothing else), so a layer repeated inside one region -- a chain of
        identical blocks with no library call between them -- is analysed once."""
        hit = self._costs.get(nodes)
        if hit is None:
            key = region_key(self.g, sorted(nodes, key=self.index.__getitem__))
            hit = self._by_shape.get(key)
            if hit is None:
                gr = self.group(nodes)
                hit = self._by_shape[key] = (
                    (math.inf, False) if isinstance(gr, str) else
                    (self.model.estimate(self.g, gr).seconds,
                     gr.schedule.kind is not ScheduleKind.stitched))
            self._costs[nodes] = hit
        return hit

    def cost(self, nodes: frozenset) -> float:
        return self._priced(nodes)[0]

    def bytes_moved(self, nodes: frozenset) -> int:
        gr = self.group(nodes)
        return 0 if isinstance(gr, str) else \
            self.model.features(self.g, gr).bytes_moved

    def why_not(self, nodes: frozenset) -> str:
        gr = self.group(nodes)
        if isinstance(gr, str):
            return gr
        f = self.model.features(self.g, gr)
        return f.infeasible

    # -- moves ------------------------------------------------------------------------
    def neighbours(self, part: Partition, gid: str) -> list[str]:
        """Kernels joined to gid by an edge, or reading a tensor it reads, in graph order
        (of their first ops: a kernel's id is ``k<that position>``)."""
        out = part.successors(gid) | part.predecessors(gid)
        for n in part.members[gid]:
            for i in self.g.node(n).inputs:
                for r in self.readers.get(i, ()):
                    out.add(part.owner[r])
        out.discard(gid)
        region = self.region
        return sorted((x for x in out if not self._opaque(part, x)
                       and (region is None or part.members[x][0] in region)),
                      key=lambda x: int(x[1:]))

    def _opaque(self, part: Partition, gid: str) -> bool:
        m = part.members[gid]
        return len(m) == 1 and self.kind[m[0]] is Kind.opaque

    def first(self, nodes) -> int:
        """The graph position of the first of these ops."""
        return min(map(self.index.__getitem__, nodes))

    def moves_between(self, a: frozenset, b: frozenset, peel: bool) -> list[Move]:
        base = self.cost(a) + self.cost(b)
        u = a | b
        gain = base - self.cost(u)
        fa, fb = self.first(a), self.first(b)
        out = [Move("merge", a, b, "", gain, order=(fa, fb))] if gain > EPS else []
        if not peel or self._priced(u)[1]:
            return out
        # no single template fits both: maybe one fits once an op leaves
        for side, other in ((a, b), (b, a)):
            if not 2 <= len(side) <= PEEL_MAX:
                continue
            for x in sorted(side, key=self.index.__getitem__):
                rest = side - {x}
                gain = base - self.cost(rest | other) - self.cost(frozenset([x]))
                if gain > EPS:
                    out.append(Move("peel", side, other, x, gain,
                                    order=(self.first(side), self.first(other),
                                           self.index[x])))
        return out

    def splits(self, a: frozenset) -> list[Move]:
        """Parts of a kernel predicted faster on their own: an op reading nothing made
        inside it, or a small broadcast operand with what it is computed from inside
        (an attention mask's cast and scale, recomputed at every element when fused)."""
        if not 2 <= len(a) <= PEEL_MAX:
            return []
        g = self.g
        made = {o: n for n in a for o in g.node(n).outputs}
        width = max(g.value(o).numel for o in made)
        cands = set()
        for x in a:
            if not any(i in made for i in g.node(x).inputs):
                cands.add(frozenset([x]))
            if all(g.value(o).numel < width for o in g.node(x).outputs):
                part, stack = {x}, [x]
                while stack:        # x and its producers inside the kernel
                    for i in g.node(stack.pop()).inputs:
                        if i in made and made[i] not in part:
                            part.add(made[i])
                            stack.append(made[i])
                if len(part) < len(a):
                    cands.add(frozenset(part))
        out = []
        fa = self.first(a)
        for c in sorted(tuple(sorted(map(self.index.__getitem__, c))) for c in cands):
            part = frozenset(self.g.nodes[k].id for k in c)
            gain = self.cost(a) - self.cost(a - part) - self.cost(part)
            if gain > EPS:
                out.append(Move("split", a, a, "", gain, part, order=(fa, fa) + c))
        return out

    def moves_for(self, part: Partition, gids, only_dominant: bool = False) -> dict:
        out = {}
        for gid in gids:
            if gid not in part.members or self._opaque(part, gid):
                continue
            a = frozenset(part.members[gid])
            if not only_dominant:
                out[(a, a)] = self.splits(a)
            for nb in self.neighbours(part, gid):
                b = frozenset(part.members[nb])
                key = (a, b) if self.first(a) < self.first(b) else (b, a)
                if key in out:
                    continue
                dom = bool((a | b) & self.dominant)
                if only_dominant and not dom:
                    continue
                out[key] = self.moves_between(key[0], key[1], peel=dom)
        return out
