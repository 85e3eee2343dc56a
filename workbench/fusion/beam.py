"""The stitch planner's beam search over the plans of one region: a state is a plan
(its :class:`~.partition.Partition`), its predicted seconds, the moves it may make
(inherited by its children but around the kernels a move changed) and its log; each
step expands the ``branch`` best moves of the ``beam`` best states, keeping those that
leave the kernels acyclic, until none improves. Each move taken logs a
:class:`~.partition.Decision` with its numbers; :func:`grow_seed` is the dominant-op
seed.

    >>> time_text(0.0000213), time_text(0.000004), size_text(67.1e6)
    ('0.0213 ms', '4 us', '67.1 MB')
"""
from __future__ import annotations

from dataclasses import dataclass

from .mapping import ScheduleKind
from .moves import EPS, Move, Search
from .partition import Decision, Partition
from .plan import Group


def size_text(b: float) -> str:
    """Bytes as a decision says them (MB, or KB below 0.1 MB)."""
    return f"{b / 1e6:.1f} MB" if abs(b) >= 1e5 else f"{b / 1e3:.1f} KB"


def time_text(s: float) -> str:
    """Seconds as a decision says them (ms, or us below 0.01 ms)."""
    return f"{s * 1e3:.3g} ms" if s * 1e3 >= 0.01 else f"{s * 1e6:.3g} us"


@dataclass
class State:
    """One plan the search holds: its partition, its region's predicted seconds, the
    moves it may make and the decisions that made it."""
    part: Partition
    score: float
    moves: dict                      # (a, b) -> list[Move], inherited and updated
    log: tuple[Decision, ...]


def seconds_of(search: Search, part: Partition, gids) -> float:
    """The predicted latency of these kernels of the plan (a region's: the rest of the
    plan is the same in every state of its search)."""
    return sum(search.cost(frozenset(part.members[x])) for x in gids)


def kernels_of(part: Partition, nodes) -> list[str]:
    """The kernels holding these ops, in order of first appearance."""
    return list(dict.fromkeys(part.owner[n] for n in nodes))


def plan_key(search: Search, part: Partition) -> frozenset:
    """A plan's identity within the search: the kernels of the region being searched."""
    return frozenset(frozenset(part.members[x]) for x in kernels_of(part, search.region_nodes))


def apply_move(search: Search, st: State, mv: Move) -> State | None:
    """The state after ``mv`` (its moves inherited but around the kernels it changed,
    its decision logged), or None where it makes kernels wait on each other in a
    cycle."""
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
    return State(part, st.score - mv.gain, moves, st.log + (move_decision(search, mv),))


def describe_ops(search: Search, nodes) -> str:
    ns = sorted(nodes, key=search.index.__getitem__)
    shown = ", ".join(f"{n} {search.g.node(n).op}" for n in ns[:4])
    return shown + (f", +{len(ns) - 4} more" if len(ns) > 4 else "")


def move_decision(search: Search, mv: Move) -> Decision:
    a, b = mv.a, mv.b
    if mv.kind == "merge":
        u = a | b
        saved = search.bytes_moved(a) + search.bytes_moved(b) - search.bytes_moved(u)
        traffic = (f"saves {size_text(saved)} of traffic" if saved >= 0 else
                   f"passes {size_text(-saved)} more through global memory")
        before = search.cost(a) + search.cost(b)
        gr = search.group(u)
        stitched = isinstance(gr, Group) and gr.schedule.kind is ScheduleKind.stitched
        how = " as a stitched kernel" if stitched else ""
        first, second = sorted((a, b), key=lambda s: -len(s))
        return Decision(
            "fused", tuple(sorted(u, key=search.index.__getitem__)),
            f"{describe_ops(search, second)} into the kernel of "
            f"{describe_ops(search, first)}{how}: {traffic} and 1 launch; "
            f"predicted {time_text(before)} -> {time_text(search.cost(u))}")
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
                        f"{describe_ops(search, mv.part)} out of the kernel of "
                        f"{describe_ops(search, rest)}: {why}; predicted "
                        f"{time_text(search.cost(a))} -> {time_text(after)}")
    rest = (a - {mv.peeled}) | b
    before = search.cost(a) + search.cost(b)
    after = search.cost(rest) + search.cost(frozenset([mv.peeled]))
    x = mv.peeled
    return Decision(
        "fused", tuple(sorted(rest, key=search.index.__getitem__)),
        f"peeled {x} ({search.g.node(x).op}) into its own kernel so the rest joins "
        f"({search.single_refusal.get(a | b) or search.why_not(a | b)}); "
        f"predicted {time_text(before)} -> {time_text(after)}")


def beam_search(search: Search, seeds: list[State], beam: int, branch: int) -> State:
    states = {plan_key(search, s.part): s for s in seeds}
    frontier = sorted(states.values(), key=lambda s: s.score)[:beam]
    best = frontier[0]
    while frontier:
        children = {}
        for st in frontier:
            # equal gains in graph order (Move.order), not in the moves' dict order
            cands = sorted((m for ms in st.moves.values() for m in ms),
                           key=lambda m: (-m.gain, m.order))
            made, cyclic = 0, set()
            for mv in cands:          # the best `branch` moves that keep it acyclic
                if made == branch:
                    break
                child = apply_move(search, st, mv)
                if child is None:
                    cyclic.add(mv)
                    continue
                made += 1
                key = plan_key(search, child.part)
                if key not in states and key not in children:
                    children[key] = child
            if cyclic:                # not retried from this plan
                st.moves = {k: [m for m in v if m not in cyclic]
                            for k, v in st.moves.items()}
        frontier = sorted(children.values(), key=lambda s: s.score)[:beam]
        states.update((plan_key(search, s.part), s) for s in frontier)
        if frontier and frontier[0].score < best.score - EPS:
            best = frontier[0]
    return best


def grow_seed(search: Search, base: Partition) -> State:
    """The dominant-op seed of the region being searched: one kernel per op, then greedy
    improving merges around the dominant ops first, then anywhere."""
    part = base.copy()
    nodes = search.region_nodes
    part.replace(kernels_of(part, nodes), [[n] for n in nodes])
    st = State(part, seconds_of(search, part, kernels_of(part, nodes)), {}, (Decision(
        "seed", nodes[:1] + nodes[-1:],
        "one kernel per op, grown around the dominant ops"),))
    for only_dom in (True, False):
        st.moves = search.moves_for(st.part, kernels_of(st.part, nodes), only_dominant=only_dom)
        st = beam_search(search, [st], beam=1, branch=1)
    return st
