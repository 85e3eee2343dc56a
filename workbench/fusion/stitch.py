"""The ``stitch`` planner: FusionStitching-style plan search scored by the cost model.

1. **Dominant ops.** Reductions and costly elementwise ops (``OpDef.flops`` >= 4: exp,
   erf, tanh...) anchor kernels; library calls (matmul, conv) are boundaries.
2. **Seeds.** The ``rules`` plan, and (graphs up to ``GROW_MAX_NODES`` ops) a plan
   of each region grown around the dominant ops: starting from one kernel per op,
   each dominant op's kernel absorbs neighbouring kernels while the model says the
   merge is faster, then the remaining ops merge likewise.
3. **Beam search**, region by region (:mod:`.regions`; the moves and their prices:
   :mod:`.moves`; the search: :mod:`.beam`). A move is *merge* (two
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

from ..errors import FusionRefused
from ..ir import Graph
from ..device import Device
from .beam import State, beam_search, grow_seed, kernels_of, seconds_of, time_text
from .cost import CostModel
from .epilogue import absorb_epilogues
from .greedy import rules_partition
from .moves import EPS, Search, dominant_ops
from .partition import Decision, Partition
from .plan import Plan, make_group, toposort_groups
from .regions import Region, find_regions, region_key
from .rows import candidate_mappings
from .siblings import merge_constant_siblings

BEAM = 3                  # plans kept per step
BRANCH = 3                # best moves expanded per plan and step
MAPPING_MIN_GAIN = 0.03   # leave the rule's thread mapping for a predicted 3% or more
# Growing from one kernel per op re-prices a kernel at every merge, quadratic on long
# chains; above this many ops the search starts from the rules plan only.
GROW_MAX_NODES = 200


def _search_region(search: Search, part: Partition, region: Region, beam: int,
                   branch: int) -> tuple[Partition, list[Decision], float, float]:
    """The best plan of one region the search finds from the plan ``part`` (the rules
    plan's kernels there, earlier regions already planned), its decisions, the
    predicted seconds of the rules plan's kernels there and what the plan saves on
    them; ``part`` itself (no decisions) when nothing is predicted faster."""
    search.region, search.region_nodes = set(region.nodes), region.nodes
    gids = kernels_of(part, region.nodes)
    seed = State(part, seconds_of(search, part, gids), {}, ())
    seed.moves = search.moves_for(part, gids)
    # each seed searched on its own: one beam over both would let the seed that starts
    # lower crowd out the other's lineage, which may end lower still; on a tie the
    # rules lineage wins: its log is the shorter story
    best = beam_search(search, [seed], beam, branch)
    if 1 < len(region.nodes) and len(search.g.nodes) <= GROW_MAX_NODES:
        grown = grow_seed(search, part)
        grown.moves = search.moves_for(grown.part, kernels_of(grown.part, region.nodes))
        other = beam_search(search, [grown], beam, branch)
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
    gids = kernels_of(part, region.nodes)
    if {frozenset(w) for w in want} == {frozenset(part.members[x]) for x in gids}:
        return part          # the plan there already (the rules plan was kept)
    out = part.copy()
    added = out.replace(gids, want)
    if any(out.cycle({gid}) is not None for gid in added):
        return None
    return out


def _choose_mappings(search: Search, plan: Plan) -> tuple[Plan, list[Decision]]:
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
                f"predicted {time_text(model.estimate(g, gr).seconds)} -> {time_text(best_t)}"))
        groups.append(best)
    return Plan(g, toposort_groups(g, groups), plan.planner, plan.device,
                plan.matmul_precision), log


def _not_fused(search: Search, part: Partition, copied: set[str]) -> list[Decision]:
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
                                    f"{how} predicted {time_text(slower)} slower "
                                    f"({time_text(search.cost(a) + search.cost(b))} -> "
                                    f"{time_text(search.cost(u))})"))
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
    search = Search(g, model, stitch=True, tf32=matmul_precision == "tf32")
    rules, _ = rules_partition(g, device=search.device)
    # the rules plan's predicted time: its library calls here, each region's kernels
    # as the region is searched (a copy's are its original's)
    rules_score = seconds_of(search, rules,
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
            for x in kernels_of(part, region.nodes)], before, gain))
    search.region = None
    if saved <= EPS:
        part = rules
        log = [Decision("kept", (), f"the rules plan: no plan the search found is "
                        f"predicted faster ({time_text(rules_score)})")]
    else:
        for key, n in copies.items():
            src = searched[key][0]
            log.append(Decision("copied", src.nodes[:1] + src.nodes[-1:],
                                f"the plan of this region ({len(src.nodes)} ops) to its "
                                f"{n} identical copies (same ops, shapes and wiring: "
                                f"priced alike)"))
    # independent kernels reading one small constant: launched as one where predicted
    # faster (the sibling links the regions leave out)
    part, joined = merge_constant_siblings(search, part)
    log.extend(joined)
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
                    f"rules plan predicted {time_text(rules_score)}, stitch plan "
                    f"{time_text(model.plan_seconds(plan))} on {model.device.name}")
    return plan, [head] + log + mapped + _not_fused(search, part, copied)
