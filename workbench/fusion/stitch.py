"""The ``stitch`` planner: FusionStitching-style plan search scored by the cost model.

1. **Dominant ops.** Reductions and costly elementwise ops (``OpDef.flops`` >= 4: exp,
   erf, tanh...) anchor kernels; library calls (matmul, conv) are boundaries.
2. **Seeds.** The ``rules`` plan, and (graphs up to ``GROW_MAX_NODES`` ops) a plan
   of each region grown around the dominant ops: starting from one kernel per op,
   each dominant op's kernel absorbs neighbouring kernels while the model says the
   merge is faster, then the remaining ops merge likewise.
3. **Beam search**, region by region (:mod:`.regions`). A move is *merge* (two
   kernels joined by an edge, or siblings reading the same tensor -- LayerNorm's
   dgamma and dbeta), stitched
   into phases behind grid barriers when no single template fits (AStitch's *global*
   and *independent* schemes), or *peel-merge* (a merge that no template allows once
   one op leaves the first kernel: cross-entropy's label ``unsqueeze`` blocks joining
   the one-hot ``where`` with the log-softmax row kernel; peeled, the rest joins), or
   *split* (an op at a kernel's edge leaves it: a small broadcast operand such as an
   attention mask's cast and scale is otherwise recomputed at every element). Only
   moves the model predicts faster are taken; the ``beam`` best plans are kept per
   step and the search ends when none improves. Legality and cost are cached per node
   set (and priced once per kernel shape, :func:`.regions.region_key`), and a
   state's moves are inherited by its children except around the kernels a
   move changed, so a step costs what changed, not the whole graph. A move never
   joins ops of two regions (ops with a library call between them, or not joined at
   all) and the score is a sum, so each region is searched on its own (with the plan
   of the regions before it in place, so cycle checks see the real kernels), and a
   region identical to one already searched -- a model's repeated layers -- takes its
   plan as a copy: BERT-base from ONNX (733 ops, 73 regions, 6 distinct) plans in
   0.1-0.15 s of CPU time instead of ~40 s (546-566 s on a loaded 2-core machine; see
   benchmarks/results/planning-2026-11-23.md). Within a region
   the search is the one it always was; its plans are predicted as fast as the
   whole-graph beam's on every case measured (tests/fusion/test_stitch_speed.py).
4. **Epilogues.** On a CPU, each matmul joins the kernel consuming its result when
   that kernel is its epilogue and the joined ``gemm`` kernel is predicted faster
   (:mod:`.epilogue`).
5. **Thread mapping.** Each row-reduction kernel gets the candidate mapping (warp,
   block, split, thread) the model predicts fastest.

The result is never worse than ``rules`` by the model's own score (the rules plan is a
seed and only improving moves are taken). Every decision carries its numbers::

    fused n0 + ... + n10: n9 reduce_sum, n10 neg into the kernel of n0 reduce_max, n1
    sub, n2 exp, n3 reduce_sum, +4 more: saves 67.1 MB of traffic and 1 launch;
    predicted 0.0472 ms -> 0.0184 ms

Example::

    >>> plan, log = plan_stitch(g, CostModel.for_device(H100))   # doctest: +SKIP
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import FusionRefused
from ..ir import Graph
from ..ops import Kind, get_op
from .cost import CostModel
from ..device import Device
from .greedy import rules_partition
from .mapping import ScheduleKind
from .partition import Decision, Partition
from .plan import Group, Plan, make_group, toposort_groups
from .analysis import analyze
from .phases import analyze_stitched
from .rows import candidate_mappings
from .epilogue import absorb_epilogues
from .regions import Region, find_regions, region_key

DOMINANT_FLOPS = 4        # an elementwise op this costly anchors a kernel
BEAM = 3                  # plans kept per step
BRANCH = 3                # best moves expanded per plan and step
PEEL_MAX = 12             # peel-merge only from kernels this small
STITCH_MAX = 48           # try a stitched (multi-phase) kernel up to this many ops
EPS = 1e-9                # seconds: a gain below this is no gain
MAPPING_MIN_GAIN = 0.03   # leave the rule's thread mapping for a predicted 3% or more
# Growing from one kernel per op re-prices a kernel at every merge, quadratic on long
# chains; above this many ops the search starts from the rules plan only.
GROW_MAX_NODES = 200


def dominant_ops(g: Graph) -> list[str]:
    """Reductions and costly elementwise ops, in topological order."""
    out = []
    for n in g.nodes:
        op = get_op(n.op)
        if op.kind is Kind.reduce or (op.kind is Kind.elementwise
                                      and op.flops >= DOMINANT_FLOPS):
            out.append(n.id)
    return out


def _mb(b: float) -> str:
    return f"{b / 1e6:.1f} MB" if abs(b) >= 1e5 else f"{b / 1e3:.1f} KB"


def _ms(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s * 1e3 >= 0.01 else f"{s * 1e6:.3g} us"


@dataclass(frozen=True)
class _Move:
    kind: str                          # merge | peel | split
    a: frozenset
    b: frozenset
    peeled: str = ""                   # peel: the op that leaves a
    gain: float = 0.0                  # seconds saved (> 0)
    part: frozenset = frozenset()      # split: the ops that leave a


class _Search:
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
        # values read by more than one kernel-to-be: sibling candidates
        self.readers: dict[str, list[str]] = {}
        for n in g.nodes:
            if self.kind[n.id] is Kind.opaque:
                continue
            for i in dict.fromkeys(n.inputs):
                if g.value(i).numel > 1:
                    self.readers.setdefault(i, []).append(n.id)

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
                                    analyze_stitched(self.g, ns, device=self.device))
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
    def neighbours(self, part: Partition, gid: str) -> set[str]:
        """Kernels joined to gid by an edge, or reading a tensor it reads."""
        out = part.successors(gid) | part.predecessors(gid)
        for n in part.members[gid]:
            for i in self.g.node(n).inputs:
                for r in self.readers.get(i, ()):
                    out.add(part.owner[r])
        out.discard(gid)
        region = self.region
        return {x for x in out if not self._opaque(part, x)
                and (region is None or part.members[x][0] in region)}

    def _opaque(self, part: Partition, gid: str) -> bool:
        m = part.members[gid]
        return len(m) == 1 and self.kind[m[0]] is Kind.opaque

    def moves_between(self, a: frozenset, b: frozenset, peel: bool) -> list[_Move]:
        base = self.cost(a) + self.cost(b)
        u = a | b
        gain = base - self.cost(u)
        out = [_Move("merge", a, b, "", gain)] if gain > EPS else []
        if not peel or self._priced(u)[1]:
            return out
        # no single template fits both: maybe one fits once an op leaves
        for side, other in ((a, b), (b, a)):
            if not 2 <= len(side) <= PEEL_MAX:
                continue
            for x in side:
                rest = side - {x}
                gain = base - self.cost(rest | other) - self.cost(frozenset([x]))
                if gain > EPS:
                    out.append(_Move("peel", side, other, x, gain))
        return out

    def splits(self, a: frozenset) -> list[_Move]:
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
        for c in cands:
            gain = self.cost(a) - self.cost(a - c) - self.cost(c)
            if gain > EPS:
                out.append(_Move("split", a, a, "", gain, c))
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
                first = lambda s: min(self.index[n] for n in s)  # noqa: E731
                key = (a, b) if first(a) < first(b) else (b, a)
                if key in out:
                    continue
                dom = bool((a | b) & self.dominant)
                if only_dominant and not dom:
                    continue
                out[key] = self.moves_between(key[0], key[1], peel=dom)
        return out


@dataclass
class _State:
    part: Partition
    score: float
    moves: dict                      # (a, b) -> list[_Move], inherited and updated
    log: tuple[Decision, ...]


def _score(search: _Search, part: Partition, gids) -> float:
    """The predicted latency of these kernels of the plan (a region's: the rest of the
    plan is the same in every state of its search)."""
    return sum(search.cost(frozenset(part.members[x])) for x in gids)


def _gids(part: Partition, nodes) -> list[str]:
    """The kernels holding these ops, in order of first appearance."""
    return list(dict.fromkeys(part.owner[n] for n in nodes))


def _key(search: _Search, part: Partition) -> frozenset:
    """A plan's identity within the search: the kernels of the region being searched."""
    return frozenset(frozenset(part.members[x]) for x in _gids(part, search.region_nodes))


def _apply(search: _Search, st: _State, mv: _Move) -> _State | None:
    part = st.part.copy()
    ga, gb = part.owner[next(iter(mv.a))], part.owner[next(iter(mv.b))]
    if mv.kind == "merge":
        new_sets = [mv.a | mv.b]
    elif mv.kind == "split":
        new_sets = [mv.a - mv.part, mv.part]
    else:
        new_sets = [(mv.a - {mv.peeled}) | mv.b, frozenset([mv.peeled])]
    added = part.replace({ga, gb}, new_sets)
    for gid in added:
        if part.cycle({gid}) is not None:
            return None
    gone = {mv.a, mv.b}
    moves = {k: v for k, v in st.moves.items() if k[0] not in gone and k[1] not in gone}
    moves.update(search.moves_for(part, added))
    return _State(part, st.score - mv.gain, moves, st.log + (_decision(search, mv),))


def _describe(search: _Search, nodes) -> str:
    ns = sorted(nodes, key=search.index.__getitem__)
    shown = ", ".join(f"{n} {search.g.node(n).op}" for n in ns[:4])
    return shown + (f", +{len(ns) - 4} more" if len(ns) > 4 else "")


def _decision(search: _Search, mv: _Move) -> Decision:
    a, b = mv.a, mv.b
    if mv.kind == "merge":
        u = a | b
        saved = search.bytes_moved(a) + search.bytes_moved(b) - search.bytes_moved(u)
        traffic = (f"saves {_mb(saved)} of traffic" if saved >= 0 else
                   f"passes {_mb(-saved)} more through global memory")
        before = search.cost(a) + search.cost(b)
        gr = search.group(u)
        stitched = isinstance(gr, Group) and gr.schedule.kind is ScheduleKind.stitched
        how = " as a stitched kernel" if stitched else ""
        first, second = sorted((a, b), key=lambda s: -len(s))
        return Decision(
            "fused", tuple(sorted(u, key=search.index.__getitem__)),
            f"{_describe(search, second)} into the kernel of "
            f"{_describe(search, first)}{how}: {traffic} and 1 launch; "
            f"predicted {_ms(before)} -> {_ms(search.cost(u))}")
    x = mv.peeled
    if mv.kind == "split":
        rest = a - mv.part
        after = search.cost(rest) + search.cost(mv.part)
        outs = [o for n in mv.part for o in search.g.node(n).outputs]
        small = max(search.g.value(o).numel for o in outs)
        width = max(search.g.value(o).numel for n in a for o in search.g.node(n).outputs)
        why = (f"computed once per element of its own {small}-element result instead of at "
               f"each of the kernel's {width} elements" if small < width else
               "predicted cheaper apart")
        return Decision("split", tuple(sorted(mv.part, key=search.index.__getitem__)),
                        f"{_describe(search, mv.part)} out of the kernel of "
                        f"{_describe(search, rest)}: {why}; predicted "
                        f"{_ms(search.cost(a))} -> {_ms(after)}")
    rest = (a - {mv.peeled}) | b
    before = search.cost(a) + search.cost(b)
    after = search.cost(rest) + search.cost(frozenset([mv.peeled]))
    x = mv.peeled
    return Decision(
        "fused", tuple(sorted(rest, key=search.index.__getitem__)),
        f"peeled {x} ({search.g.node(x).op}) into its own kernel so the rest joins "
        f"({search.single_refusal.get(a | b) or search.why_not(a | b)}); "
        f"predicted {_ms(before)} -> {_ms(after)}")


def _search(search: _Search, seeds: list[_State], beam: int, branch: int) -> _State:
    states = {_key(search, s.part): s for s in seeds}
    frontier = sorted(states.values(), key=lambda s: s.score)[:beam]
    best = frontier[0]
    while frontier:
        children = {}
        for st in frontier:
            cands = sorted((m for ms in st.moves.values() for m in ms),
                           key=lambda m: -m.gain)
            made, cyclic = 0, set()
            for mv in cands:          # the best `branch` moves that keep it acyclic
                if made == branch:
                    break
                child = _apply(search, st, mv)
                if child is None:
                    cyclic.add(mv)
                    continue
                made += 1
                key = _key(search, child.part)
                if key not in states and key not in children:
                    children[key] = child
            if cyclic:                # not retried from this plan
                st.moves = {k: [m for m in v if m not in cyclic]
                            for k, v in st.moves.items()}
        frontier = sorted(children.values(), key=lambda s: s.score)[:beam]
        states.update((_key(search, s.part), s) for s in frontier)
        if frontier and frontier[0].score < best.score - EPS:
            best = frontier[0]
    return best


def _grow(search: _Search, base: Partition) -> _State:
    """The dominant-op seed of the region being searched: one kernel per op, then greedy
    improving merges around the dominant ops first, then anywhere."""
    part = base.copy()
    nodes = search.region_nodes
    part.replace(_gids(part, nodes), [[n] for n in nodes])
    st = _State(part, _score(search, part, _gids(part, nodes)), {}, (Decision(
        "seed", nodes[:1] + nodes[-1:],
        "one kernel per op, grown around the dominant ops"),))
    for only_dom in (True, False):
        st.moves = search.moves_for(st.part, _gids(st.part, nodes), only_dominant=only_dom)
        st = _search(search, [st], beam=1, branch=1)
    return st


def _search_region(search: _Search, part: Partition, region: Region, beam: int,
                   branch: int) -> tuple[Partition, list[Decision], float, float]:
    """The best plan of one region the search finds from the plan ``part`` (the rules
    plan's kernels there, earlier regions already planned), its decisions, the
    predicted seconds of the rules plan's kernels there and what the plan saves on
    them; ``part`` itself (no decisions) when nothing is predicted faster."""
    search.region, search.region_nodes = set(region.nodes), region.nodes
    gids = _gids(part, region.nodes)
    seed = _State(part, _score(search, part, gids), {}, ())
    seed.moves = search.moves_for(part, gids)
    # each seed searched on its own: one beam over both would let the seed that starts
    # lower crowd out the other's lineage, which may end lower still; on a tie the
    # rules lineage wins: its log is the shorter story
    best = _search(search, [seed], beam, branch)
    if 1 < len(region.nodes) and len(search.g.nodes) <= GROW_MAX_NODES:
        grown = _grow(search, part)
        grown.moves = search.moves_for(grown.part, _gids(grown.part, region.nodes))
        other = _search(search, [grown], beam, branch)
        if other.score < best.score - EPS:
            best = other
    if best.score >= seed.score - EPS:
        return part, [], seed.score, 0.0
    return best.part, list(best.log), seed.score, seed.score - best.score


def _copy_plan(part: Partition, src: Region, sets: list[tuple[int, ...]],
               region: Region) -> Partition | None:
    """``part`` with the region's ops grouped as the kernels ``sets`` (positions in
    ``src``, a region of the same key), or None when that makes kernels wait on each
    other in a cycle (through kernels elsewhere in the plan)."""
    want = [[region.nodes[k] for k in ks] for ks in sets]
    gids = _gids(part, region.nodes)
    if {frozenset(w) for w in want} == {frozenset(part.members[x]) for x in gids}:
        return part          # the plan there already (the rules plan was kept)
    out = part.copy()
    added = out.replace(gids, want)
    if any(out.cycle({gid}) is not None for gid in added):
        return None
    return out


def _choose_mappings(search: _Search, plan: Plan) -> tuple[Plan, list[Decision]]:
    """Each row kernel mapped to threads the way the model predicts fastest (decided
    once per kernel shape: copies of a kernel, by :func:`.regions.region_key`, are
    priced alike, so they take the same mapping)."""
    g, model = plan.graph, search.model
    groups, log = [], []
    chosen: dict[tuple, object] = {}
    for gr in plan.groups:
        if not candidate_mappings(gr.schedule, search.device)[1:]:
            groups.append(gr)
            continue
        key = region_key(g, gr.nodes)
        if key in chosen:
            m = chosen[key]
            groups.append(gr if m is None else
                          make_group(g, gr.nodes, mapping=m, device=search.device,
                                     tf32=search.tf32))
            continue
        best, best_t = gr, model.estimate(g, gr).seconds
        for m in candidate_mappings(gr.schedule, search.device):
            if m is gr.schedule.mapping:
                continue
            try:
                cand = make_group(g, gr.nodes, mapping=m, device=search.device,
                                  tf32=search.tf32)
            except FusionRefused:
                continue
            t = model.estimate(g, cand).seconds
            if t < best_t * (1 - MAPPING_MIN_GAIN):
                best, best_t = cand, t
        chosen[key] = None if best is gr else best.schedule.mapping
        if best is not gr:
            log.append(Decision(
                "mapped", gr.nodes[:1] + gr.nodes[-1:] if len(gr.nodes) > 1 else gr.nodes,
                f"{gr.id} {best.schedule.describe()} instead of {gr.schedule.mapping}: "
                f"predicted {_ms(model.estimate(g, gr).seconds)} -> {_ms(best_t)}"))
        groups.append(best)
    return Plan(g, toposort_groups(g, groups), plan.planner, plan.device,
                plan.matmul_precision), log


def _not_fused(search: _Search, part: Partition, copied: set[str]) -> list[Decision]:
    """Why neighbouring kernels of the final plan stay apart (but for the kernels of
    ``copied`` ops: a copied region's reasons are its original's)."""
    out, seen = [], set()
    for gid in part.members:
        if search._opaque(part, gid) or part.members[gid][0] in copied:
            continue
        a = frozenset(part.members[gid])
        for nb in sorted(part.successors(gid) - {gid}):
            if nb not in part.members or search._opaque(part, nb) or (gid, nb) in seen:
                continue
            seen.add((gid, nb))
            b = frozenset(part.members[nb])
            u = a | b
            why = search.why_not(u)
            nodes = (max(a, key=search.index.get), part.first(nb))
            if why:
                out.append(Decision("not fused", nodes, why))
            elif part.cycle({gid, nb}):
                out.append(Decision("not fused", nodes, part.cycle({gid, nb})))
            else:
                slower = search.cost(u) - search.cost(a) - search.cost(b)
                single = search.single_refusal.get(u)
                how = (f"no single template fits ({single}); stitched, it is"
                       if single else "as one kernel it is")
                out.append(Decision("not fused", nodes,
                                    f"{how} predicted {_ms(slower)} slower "
                                    f"({_ms(search.cost(a) + search.cost(b))} -> "
                                    f"{_ms(search.cost(u))})"))
    return out


def plan_stitch(g: Graph, model: CostModel | None = None, device: Device | None = None,
                matmul_precision: str = "float32", beam: int = BEAM, branch: int = BRANCH,
                stats: dict | None = None) -> tuple[Plan, list[Decision]]:
    """The stitch planner's plan of g and its decisions (see the module docstring).

    ``model`` scores plans and its device is the one planned for; without one (or
    for another ``device``), the uncalibrated model of ``device``.
    ``stats``, if given, receives the search's work counts: ``analyses`` (node sets
    the search analysed and priced, kernels of one shape once; the final plan's
    groups are built after), ``regions`` and ``searched`` (regions, and those
    searched rather than copied)."""
    if model is None and device is None:
        raise ValueError("plan_stitch plans with a cost model or for a device: pass one")
    if model is None or (device is not None and device != model.device):
        model = CostModel.for_device(device)
    search = _Search(g, model, stitch=True, tf32=matmul_precision == "tf32")
    rules, _ = rules_partition(g, device=search.device)
    # the rules plan's predicted time: its library calls here, each region's kernels
    # as the region is searched (a copy's are its original's)
    rules_score = _score(search, rules,
                         [x for x in rules.members if search._opaque(rules, x)])
    part, log = rules, []
    regions = find_regions(g, search.readers)
    # per distinct region: the region searched, its plan (kernels as positions in it)
    # and the seconds that plan saves against the rules plan's kernels there
    searched: dict[tuple, tuple[Region, list[tuple[int, ...]], float, float]] = {}
    copies: dict[tuple, int] = {}
    copied: set[str] = set()
    saved = 0.0
    for region in regions:
        if region.key in searched:
            src, sets, before, gain = searched[region.key]
            plan_copy = _copy_plan(part, src, sets, region)
            if plan_copy is not None:
                part, saved, rules_score = plan_copy, saved + gain, rules_score + before
                copies[region.key] = copies.get(region.key, 0) + 1
                copied.update(region.nodes)
                continue
        part, decided, before, gain = _search_region(search, part, region, beam, branch)
        log.extend(decided)
        saved, rules_score = saved + gain, rules_score + before
        at = {n: k for k, n in enumerate(region.nodes)}
        searched.setdefault(region.key, (region, [
            tuple(at[n] for n in sorted(part.members[x], key=search.index.__getitem__))
            for x in _gids(part, region.nodes)], before, gain))
    search.region = None
    if saved <= EPS:
        part = rules
        log = [Decision("kept", (), f"the rules plan: no plan the search found is "
                        f"predicted faster ({_ms(rules_score)})")]
    else:
        for key, n in copies.items():
            src = searched[key][0]
            log.append(Decision("copied", src.nodes[:1] + src.nodes[-1:],
                                f"the plan of this region ({len(src.nodes)} ops) to its "
                                f"{n} identical copies (same ops, shapes and wiring: "
                                f"priced alike)"))
    # a matmul takes its consumer kernel as epilogue where predicted faster (CPU)
    log.extend(absorb_epilogues(g, part, search.device, search.cost))
    if stats is not None:
        stats.update(analyses=search.analyses, regions=len(regions),
                     searched=len(regions) - sum(copies.values()))
    plan = Plan(g, toposort_groups(g, [search.final(m) for m in part.members.values()]),
                "stitch", search.device, matmul_precision)
    plan, mapped = _choose_mappings(search, plan)
    dom = dominant_ops(g)
    head = Decision("dominant", tuple(dom[:8]),
                    f"{len(dom)} dominant ops (reductions, exp/erf/tanh...) anchor kernels; "
                    f"rules plan predicted {_ms(rules_score)}, stitch plan "
                    f"{_ms(model.plan_seconds(plan))} on {model.device.name}")
    return plan, [head] + log + mapped + _not_fused(search, part, copied)
