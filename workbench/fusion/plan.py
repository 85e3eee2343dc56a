"""Fusion plans: an immutable partition of a graph's nodes into kernels.

A :class:`Plan` is a value. ``fuse`` and ``split`` return a new plan or raise
:class:`~workbench.errors.FusionRefused` with a reason; the old plan is untouched,
which is what makes undo and redo free.

Example::

    >>> p = Plan.singletons(g)                       # doctest: +SKIP
    >>> p2 = p.fuse(["n0", "n1"]); len(p2.groups)    # doctest: +SKIP
"""
from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

from ..errors import FusionRefused, WorkbenchError
from ..ir import Graph
from .cycles import cycle_reason, cycle_via
from ..device import Device
from .mapping import Mapping, ScheduleKind
from .analysis import analyze
from .phases import analyze_stitched
from .schedule import Schedule


class StitchScheme(enum.Enum):
    """How an intermediate passes between two ops inside one kernel (FusionStitching)."""
    independent = "independent"   # no dependency: unrelated ops packed into one kernel
    local = "local"               # same thread, registers
    regional = "regional"         # same block: shared memory + block barrier
    global_ = "global"            # global memory + grid barrier (one wave only)


@dataclass(frozen=True)
class Group:
    """One kernel: its nodes (topological order), schedule, and each internal edge's
    stitch scheme as (value name, scheme) pairs. ``forced`` and ``forced_mapping``
    record what a user set (``Plan.set_scheme`` / ``set_mapping``), so the group can be
    rebuilt with them."""
    id: str
    nodes: tuple[str, ...]
    schedule: Schedule
    schemes: tuple[tuple[str, StitchScheme], ...] = ()
    forced: tuple[tuple[str, StitchScheme], ...] = ()
    forced_mapping: str = ""       # what a user asked for: a mapping's name, or "auto"
    forced_launch: tuple[tuple[str, int], ...] = ()   # launch parameters set (tuning)

    def scheme(self, value: str) -> StitchScheme | None:
        return dict(self.schemes).get(value)

    @property
    def stitched(self) -> bool:
        return self.schedule.kind is ScheduleKind.stitched


def _crosses_threads(g: Graph, o: str, sched: Schedule, members) -> bool:
    """A per-row result read by element-level code, in a mapping where a row's
    elements are spread over several threads (everything but thread per row)."""
    return (sched.kind is ScheduleKind.row_reduce and sched.mapping.info.col_bind != "serial"
            and o in sched.per_row
            and any(c.id in members and all(x not in sched.per_row for x in c.outputs)
                    for c in g.consumers[o]))


def _schemes(g: Graph, nodes: tuple[str, ...], sched: Schedule):
    """Edges inside a group: a per-row result read by element-level code in a row
    kernel whose row spans several threads crosses threads, and a value the schedule
    keeps on chip for the row's later passes lives in shared memory (both regional);
    a value made in one phase of a stitched kernel and read in a later one goes
    through global memory (global); everything else stays in the thread that made it
    (local)."""
    if sched.kind is ScheduleKind.stitched:
        out = {}
        for p in sched.phases:
            out.update(_schemes(g, p.nodes, p.schedule))
        for v in sched.through_global:
            out[v] = StitchScheme.global_
        order = {o: i for i, nid in enumerate(nodes) for o in g.node(nid).outputs}
        return tuple(sorted(out.items(), key=lambda kv: order[kv[0]]))
    members = set(nodes)
    out = []
    for nid in nodes:
        for o in g.node(nid).outputs:
            if not any(c.id in members for c in g.consumers[o]):
                continue
            regional = o in sched.row_cached or _crosses_threads(g, o, sched, members)
            out.append((o, StitchScheme.regional if regional else StitchScheme.local))
    return tuple(out)


def make_group(g: Graph, nodes: Iterable[str], stitch: bool = False,
               mapping: "Mapping | str | None" = None,
               forced: Iterable[tuple[str, StitchScheme]] = (), *,
               device: Device, launch: Iterable[tuple[str, int]] = (),
               tf32: bool = False) -> Group:
    """The group of these nodes on ``device``, or FusionRefused.

    With ``stitch=False`` one template must fit (what the ``rules`` planner uses).
    With ``stitch=True``, when none fits, the nodes become a stitched multi-phase
    kernel (see ``phases.analyze_stitched``). ``mapping`` forces a row reduction's
    thread mapping; ``forced`` holds (value, scheme) pairs a user chose -- a ``global``
    one always stitches -- and a group that cannot honour one is refused with why.
    ``tf32``: the plan lets float32 matmuls round to TF32 (``Plan.tf32``).

    >>> make_group(g, ["n0", "n1"], stitch=True, device=H100).schedule.kind   # doctest: +SKIP
    'stitched'
    """
    order = g.position
    ns = tuple(sorted(set(nodes), key=order.__getitem__))
    forced = tuple(dict(forced).items())
    launch = tuple(sorted(dict(launch).items()))
    want = dict(forced)
    through = {v for v, sc in forced if sc is StitchScheme.global_}
    regional = {v for v, sc in forced if sc is StitchScheme.regional}
    local = {v for v, sc in forced if sc is StitchScheme.local}
    if through:
        if mapping is not None or launch:
            raise FusionRefused("a thread mapping or launch parameters apply to a "
                                "row-reduction or elementwise kernel; a global scheme "
                                "makes this one a stitched kernel")
        sched = analyze_stitched(g, ns, through, regional, local, device=device)
    else:
        try:
            sched = analyze(g, ns, mapping, regional, local, device=device, launch=launch,
                            tf32=tf32)
        except FusionRefused:
            if not stitch or mapping is not None or launch:
                raise
            if (regional or local) and _fits(g, ns, device, tf32):
                raise    # the user's scheme is what does not fit: say so, do not stitch
            # (when stitching refuses too, its reason -- a library call, shared
            # memory -- is the one that matters)
            sched = analyze_stitched(g, ns, (), regional, local, device=device)
    schemes = _schemes(g, ns, sched)
    have = dict(schemes)
    for v, sc in want.items():
        if have.get(v) is not sc:
            raise FusionRefused(_why_not(g, v, sc, have.get(v), sched))
    return Group(f"k{order[ns[0]]}", ns, sched, schemes, forced, str(mapping or ""), launch)


def _fits(g: Graph, ns, device: Device, tf32: bool) -> bool:
    try:
        analyze(g, ns, device=device, tf32=tf32)
        return True
    except FusionRefused:
        return False


def _why_not(g: Graph, v: str, want: StitchScheme, got, sched: Schedule) -> str:
    """Why value v cannot use scheme ``want`` in this group (it got ``got``)."""
    got_s = got.value if got else "none"
    if want is StitchScheme.local and got is StitchScheme.regional:
        return (f"local {v}: it is one value per row, made by a reduction over threads "
                "of the row and read by all of them, so it must pass through shared "
                "memory (regional) -- or use mapping thread, one thread per row")
    if want is StitchScheme.local and got is StitchScheme.global_:
        return (f"local {v}: its maker and its readers cannot share one template, so "
                "it must pass through global memory (global)")
    if want is StitchScheme.regional and sched.kind is ScheduleKind.elementwise:
        return (f"regional {v}: an elementwise kernel has no row shared by a block; "
                "each thread computes its own elements (local)")
    if (want is StitchScheme.regional and sched.kind is ScheduleKind.row_reduce
            and v in sched.per_row):
        return (f"regional {v}: it is one value per row read by no thread but its "
                "maker, so there is nothing to share (local)")
    if want is StitchScheme.regional:
        return (f"regional {v}: only a full row of element values (or a per-row "
                f"result read across threads) can be kept in shared memory; it stays "
                f"{got_s} here")
    return f"{want.value} {v}: not possible in this kernel; it stays {got_s}"


# "float32": exact, the default; "tf32": float32 matmuls' operands rounded to TF32 (10
# mantissa bits) on tensor cores, as torch.backends.cuda.matmul.allow_tf32 allows
MATMUL_PRECISIONS = ("float32", "tf32")


def check_precision(matmul_precision) -> None:
    """A matmul precision a plan can be made at, or one WorkbenchError line saying which
    there are."""
    if not isinstance(matmul_precision, str) or matmul_precision not in MATMUL_PRECISIONS:
        raise WorkbenchError(f"matmul_precision must be one of {', '.join(MATMUL_PRECISIONS)} "
                             f"(float32: exact; tf32: tensor cores, operands rounded to 10 "
                             f"mantissa bits), got {matmul_precision!r:.40}")


@dataclass(frozen=True, eq=False)
class Plan:
    """A partition of ``graph``'s nodes into groups, in a topological order of groups,
    made for ``device`` (its schedules are sized for it; see :mod:`.geometry`) at a
    ``matmul_precision`` (what its float32 matmuls may round their operands to: the
    user's choice, ``Session(matmul_precision=)``, ``--matmul-precision``)."""
    graph: Graph
    groups: tuple[Group, ...]
    planner: str
    device: Device
    matmul_precision: str = "float32"

    def __post_init__(self):
        check_precision(self.matmul_precision)

    @property
    def tf32(self) -> bool:
        """Whether the plan lets float32 matmuls run on tensor cores in TF32 (where the
        device has them: ``Device.on_tensor_cores``)."""
        return self.matmul_precision == "tf32"

    @staticmethod
    def singletons(g: Graph, device: Device, matmul_precision: str = "float32") -> "Plan":
        """One kernel per op (the ``none`` planner)."""
        tf32 = matmul_precision == "tf32"
        return Plan(g, tuple(make_group(g, [n.id], device=device, tf32=tf32)
                             for n in g.nodes), "none", device, matmul_precision)

    def __eq__(self, other) -> bool:
        return isinstance(other, Plan) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    @cached_property
    def key(self) -> tuple:
        # user-set schemes, mappings and launches are part of a plan's identity (caches
        # key on it), and so is the device its schedules are sized for, with the
        # precision its matmuls may round to
        return (self.device.name, self.matmul_precision) + tuple(sorted(
            (gr.nodes, gr.forced_mapping, tuple((v, sc.value) for v, sc in gr.forced),
             gr.forced_launch) for gr in self.groups))

    @cached_property
    def group_of(self) -> dict[str, Group]:
        return {n: gr for gr in self.groups for n in gr.nodes}

    def group(self, ref: str) -> Group:
        """A group by its id (``k3``) or by any node id in it (``n3``)."""
        if not isinstance(ref, str):
            raise FusionRefused(f"a kernel or node id is a string like 'k0' or 'n3', not "
                                f"{type(ref).__name__} {ref!r:.40}")
        for gr in self.groups:
            if gr.id == ref:
                return gr
        if ref in self.group_of:
            return self.group_of[ref]
        raise FusionRefused(f"no group or node {ref!r}; groups are "
                            + ", ".join(gr.id for gr in self.groups[:12])
                            + ("..." if len(self.groups) > 12 else ""))

    def __repr__(self) -> str:
        return f"Plan({self.graph.name!r}, {len(self.groups)} kernels, planner={self.planner!r})"

    # -- transformations -------------------------------------------------------
    def fuse(self, refs: Iterable[str], planner: str = "manual", stitch: bool = True) -> "Plan":
        """Merge the groups holding these nodes/groups into one kernel, if legal.

        When no single template fits, the kernel is stitched from phases (its
        schedule's kind says ``stitched``); ``stitch=False`` refuses instead. Refused
        with a reason when an op is a library call, the merge would make a cycle, or
        resources run out."""
        refs = list(refs)
        if not refs:
            raise FusionRefused("nothing selected: pick at least two nodes to fuse")
        merged = {self.group(r).id: self.group(r) for r in refs}
        if len(merged) < 2:
            raise FusionRefused("the selection is already one kernel")
        nodes = {n for gr in merged.values() for n in gr.nodes}
        self._check_acyclic(set(merged))
        new = make_group(self.graph, nodes, stitch, device=self.device,   # or refused
                         tf32=self.tf32)
        return self._replace(set(merged), [new], planner)

    def set_scheme(self, value: str, scheme: "StitchScheme | str",
                   planner: str = "manual") -> "Plan":
        """The plan with ``value`` (an edge inside one kernel) passed by ``scheme``:
        ``local`` (recompute / keep in the thread), ``regional`` (keep the row in shared
        memory), ``global`` (split the kernel into phases at a grid barrier). Refused
        with a reason when illegal, e.g. ``local`` for a per-row result read across the
        threads of a row, ``regional`` past the shared-memory budget.

        >>> plan.set_scheme("t3", "global").group("n0").schedule.kind   # doctest: +SKIP
        'stitched'
        """
        sc = _as_scheme(scheme)
        g = self.graph
        if value not in g.value_map:
            raise FusionRefused(f"no value {value!r} in graph {g.name}")
        maker = g.producer.get(value)
        if maker is None:
            raise FusionRefused(f"{value} is a graph input or constant; a stitch scheme "
                                "applies to a value made and read inside one kernel")
        gr = self.group_of[maker.id]
        readers = [c.id for c in g.consumers[value] if c.id in gr.nodes]
        if not readers:
            others = sorted({self.group_of[c.id].id for c in g.consumers[value]})
            raise FusionRefused(f"{value} leaves kernel {gr.id}"
                                + (f" for {', '.join(others)}" if others else "")
                                + "; a stitch scheme applies to an edge inside one kernel "
                                "(fuse its maker and readers first)")
        if sc is StitchScheme.independent:
            raise FusionRefused(f"independent {value}: independent is how unrelated ops "
                                f"share a kernel; {value} is an edge from {maker.id} to "
                                f"{readers[0]}, so it needs local, regional or global")
        forced = dict(gr.forced)
        forced[value] = sc
        new = make_group(g, gr.nodes, True, gr.forced_mapping or None,
                         tuple(forced.items()), device=self.device, launch=gr.forced_launch,
                         tf32=self.tf32)
        return self._replace({gr.id}, [new], planner)

    def set_mapping(self, ref: str, mapping: str, planner: str = "manual") -> "Plan":
        """The plan with the row-reduction kernel holding ``ref`` mapped to threads by
        ``mapping`` (warp, block, split, thread; or auto for the rule).

        >>> plan.set_mapping("k0", "warp").group("k0").schedule.mapping  # doctest: +SKIP
        'warp'
        """
        gr = self.group(ref)
        if mapping != "auto":
            mapping = Mapping.parse(mapping)     # refuses an unknown name
        if gr.schedule.kind is not ScheduleKind.row_reduce:
            raise FusionRefused(f"{gr.id} is a {gr.schedule.kind.value} kernel; a thread "
                                "mapping applies to a row-reduction kernel")
        new = make_group(self.graph, gr.nodes, True, mapping, gr.forced, device=self.device,
                         tf32=self.tf32)
        return self._replace({gr.id}, [new], planner)

    def set_launch(self, ref: str, planner: str = "manual", **params: int) -> "Plan":
        """The plan with the kernel holding ``ref`` launched with these parameters
        (``threads``, ``rows_per_block``, ``splits`` of a row or flat kernel; a GEMM
        kernel's ``tile_m``, ``tile_n``, ``blas``, ``online``, ``stages`` and ``skip``, see
        :class:`~.gemm.launch.GemmLaunch`; what the tuner searches), its mapping and schemes
        kept; refused with why when the kernel has no such parameter or a value is out
        of range.

        >>> plan.set_launch("k0", threads=128).group("k0").schedule.threads  # doctest: +SKIP
        128
        """
        gr = self.group(ref)
        new = make_group(self.graph, gr.nodes, True, gr.forced_mapping or None, gr.forced,
                         device=self.device, launch=params, tf32=self.tf32)
        return self._replace({gr.id}, [new], planner)

    def remade(self, device: Device, matmul_precision: str) -> "Plan":
        """The plan's kernels made again for ``device`` at ``matmul_precision``: the same
        partition, with the schemes, mappings and launch parameters set by the user or
        the tuner; a kernel that cannot be made so is refused with the reason."""
        check_precision(matmul_precision)
        groups = []
        for gr in self.groups:
            try:
                groups.append(make_group(self.graph, gr.nodes, True, gr.forced_mapping or None,
                                         gr.forced, device=device, launch=gr.forced_launch,
                                         tf32=matmul_precision == "tf32"))
            except FusionRefused as e:
                raise FusionRefused(f"{gr.id} cannot be made with matmul precision "
                                    f"{matmul_precision}: {e}") from None
        return Plan(self.graph, tuple(groups), self.planner, device, matmul_precision)

    def describe(self) -> str:
        """One line per kernel (id, schedule and mapping, its ops), then its internal
        edges with their stitch schemes (and a stitched kernel's phases)."""
        g = self.graph
        lines = []
        for gr in self.groups:
            lines.append(f"{gr.id}: {gr.schedule.describe()}: "
                         + " ".join(f"{n}:{g.node(n).op}" for n in gr.nodes))
            if gr.stitched:
                for k, p in enumerate(gr.schedule.phases):
                    how = ("after a grid barrier" if p.barrier else
                           "independent (no barrier)" if k else "first")
                    lines.append(f"  phase {k} ({how}): {' '.join(p.nodes)}")
            user = dict(gr.forced)
            for v, sc in gr.schemes:
                readers = [c.id for c in g.consumers[v] if c.id in gr.nodes]
                mark = " (set by user)" if v in user else ""
                lines.append(f"  {v}: {g.producer[v].id} -> {','.join(readers)} "
                             f"{sc.value}{mark}")
        return "\n".join(lines)

    def split(self, ref: str, planner: str = "manual") -> "Plan":
        """Break the group holding ref back into one kernel per op."""
        gr = self.group(ref)
        if len(gr.nodes) == 1:
            raise FusionRefused(f"{gr.id} has one op; there is nothing to split")
        return self._replace({gr.id}, [make_group(self.graph, [n], device=self.device,
                                                  tf32=self.tf32)
                                       for n in gr.nodes], planner)

    def _replace(self, drop: set[str], add: list[Group], planner: str) -> "Plan":
        keep = [gr for gr in self.groups if gr.id not in drop] + add
        return Plan(self.graph, toposort_groups(self.graph, keep), planner, self.device,
                    self.matmul_precision)

    def _check_acyclic(self, gids: set[str]) -> None:
        """Refuse when merging these groups would make kernels depend on each other in
        a cycle (:mod:`.cycles`)."""
        g, owner = self.graph, self.group_of
        by_id = {gr.id: gr for gr in self.groups}

        def successors(gid):
            return {owner[c.id].id for n in by_id[gid].nodes for o in g.node(n).outputs
                    for c in g.consumers[o]} - {gid}

        via = cycle_via(gids, successors)
        if via is not None:
            gr = by_id[via]
            raise FusionRefused(cycle_reason(gr.nodes[0], gr.id, len(gr.nodes)))


def _as_scheme(scheme) -> StitchScheme:
    if isinstance(scheme, StitchScheme):
        return scheme
    for sc in StitchScheme:
        if scheme == sc.value:
            return sc
    raise FusionRefused(f"unknown stitch scheme {scheme!r}; choose one of "
                        + ", ".join(sc.value for sc in StitchScheme))


def toposort_groups(g: Graph, groups: list[Group]) -> tuple[Group, ...]:
    """Order groups so every group runs after the groups it reads from (Kahn's
    algorithm; among ready groups the one with the earliest node goes first, so the
    order is deterministic and close to the graph's)."""
    owner = {n: gr.id for gr in groups for n in gr.nodes}
    by_id = {gr.id: gr for gr in groups}
    succ: dict[str, set[str]] = {gr.id: set() for gr in groups}
    indeg = dict.fromkeys(by_id, 0)
    for gr in groups:
        for n in gr.nodes:
            for i in g.node(n).inputs:
                p = g.producer.get(i)
                if p is not None and owner[p.id] != gr.id and gr.id not in succ[owner[p.id]]:
                    succ[owner[p.id]].add(gr.id)
                    indeg[gr.id] += 1
    key = lambda k: int(k[1:])
    ready = [(key(k), k) for k, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(by_id[k])
        for nxt in succ[k]:
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                heapq.heappush(ready, (key(nxt), nxt))
    if len(order) != len(groups):
        raise FusionRefused("the plan's kernels depend on each other in a cycle")
    return tuple(order)
