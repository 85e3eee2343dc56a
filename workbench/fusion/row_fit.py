"""Whether two groups the rules planner would merge still fit the row_reduce template,
answered from what the merge changes instead of analysing the merged group afresh.

The rules planner grows a row kernel op by op; re-analysing the whole group at each
merge (:func:`.analysis.analyze`: its inputs and outputs, every op's row role, the
storage sweep) made planning quadratic: 1,005 analyses of a growing LayerNorm stack at
22 ms each. :class:`RowFit` keeps, per group with reductions, what that analysis
decides op by op -- the domain, which values are constant along a row (the per-row
values), the ops and outputs it would refuse -- and on a merge re-decides only the ops
whose inputs changed side: those reading across the two groups, those it refused
before, and those downstream of a value whose per-row status changed (a reshape of a
reduction that reads it from inside now). That is :func:`.rows.row_node` and
:func:`.rows.check_row_output`, the analysis's own checks, asked per op.

It only ever answers "fits" or "ask the analysis": a merge it cannot prove -- a
refusal (whose wording the analysis gives), a window, a library call, a value past
64-bit indexing, or a block whose shared memory could pass the device's with the most
:func:`.row_cache.row_storage` can keep -- is analysed as before, so the plan and
every decision's text are the same. tests/fusion/test_row_fit.py compares each answer
and each group's incremental record with a from-scratch one on random graphs.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from ..device import Device
from ..errors import FusionRefused
from ..ir import Graph
from ..ops import Kind, get_op
from .analysis import INDEX_LIMIT, check_resources
from .mapping import ScheduleKind
from .partition import Partition
from .row_cache import EXPENSIVE_FLOPS, RowDomain, cache_bytes_bound
from .rows import check_row_output, row_domain, row_launch, row_node, row_schedule
from .schedule import Schedule, group_io


@dataclass
class RowFacts:
    """What the row analysis decides, op by op, about one group with reductions (a
    working record, updated in place when its group absorbs another)."""
    dom: RowDomain
    per_row: dict[str, bool]    # each value an accepted op makes: constant along a row
    bad: set[str]               # ops row_node refuses here
    odd: set[str]               # outputs check_row_output refuses
    risky: int                  # ops this check leaves to the analysis (module docstring)
    passes: "Passes"            # the storage sweep's passes, were every candidate kept


@dataclass
class Passes:
    """Of a row group's element values (not constant along a row): whether each is
    costly to recompute, the passes over the row that need it (bit: the reduction's
    graph position; ``RowFit.final``: the pass writing the outputs) and which would be
    kept on chip, as :func:`.row_cache.row_storage`'s sweep finds them when it keeps
    every candidate -- which it does while they all fit its shared budget -- and which
    of those stay stored once the cheap ones next to kept values are recomputed. A
    working record, or a merge's changes to the records it joins."""
    costly: dict[str, bool]
    need: dict[str, int]
    kept: set[str]              # kept by the sweep
    stored: set[str]            # ... and not recomputed after it (the sweep's last step)
    dropped: set[str]           # (changes only) values no longer kept
    unstored: set[str]          # (changes only) values no longer stored
    itemsize: int               # bytes per element of the values stored, summed


@dataclass(frozen=True)
class Fit:
    """A merge :meth:`RowFit.check` proved fits: the merged group's record, to keep if
    the merge is made."""
    dom: RowDomain
    changed: dict               # per-row status of the values re-decided
    passes: Passes              # the changes to the passes


# Below this many ops in the merged group, analysing it afresh costs less than keeping
# records (a transformer layer's row kernels: BERT-base's rules plan took 31 ms
# analysed, 50 ms with records kept from the first op)
MIN_OPS = 48


class _Unproved(Exception):
    """The merge is left to the analysis."""


class RowFit:
    """The row records of a rules planner's groups (module docstring)."""

    def __init__(self, g: Graph, part: Partition, device: Device):
        self.g, self.part, self.device = g, part, device
        self.facts: dict[str, RowFacts] = {}
        self.graph_out = set(g.outputs)
        self.risky = {n.id for n in g.nodes if _risky(g, n)}
        self.final = 1 << len(g.nodes)       # above every reduction's bit

    def check(self, a: str, b: str) -> Fit | None:
        """The merged record if merging groups ``a`` and ``b`` provably passes
        :func:`.analysis.analyze`, else None (analyse it: it may be refused, or is
        smaller than MIN_OPS)."""
        if len(self.part.members[a]) + len(self.part.members[b]) < MIN_OPS:
            return None
        try:
            return self._check(a, b)
        except _Unproved:
            return None

    def merged(self, a: str, b: str, gid: str, fit: Fit | None) -> None:
        """Groups ``a`` and ``b`` became ``gid``: keep ``fit``'s record for it (a merge
        :meth:`check` proved), or without one (a merge analysed, or of groups without
        reductions) forget both, to be made afresh when asked."""
        fa, fb = self.facts.pop(a, None), self.facts.pop(b, None)
        self.facts.pop(gid, None)
        if fit is None:
            return
        sides = sorted((f for f in (fa, fb) if f is not None), key=lambda f: -len(f.per_row))
        keep = sides[0]
        for f in sides[1:]:
            keep.per_row.update(f.per_row)
        keep.per_row.update(fit.changed)
        keep.dom, keep.bad, keep.odd, keep.risky = fit.dom, set(), set(), 0
        ps, delta = keep.passes, fit.passes
        for f in sides[1:]:
            ps.costly.update(f.passes.costly)
            ps.need.update(f.passes.need)
            ps.kept |= f.passes.kept
            ps.stored |= f.passes.stored
        ps.costly.update(delta.costly)
        ps.need.update(delta.need)
        ps.kept -= delta.dropped
        ps.kept |= delta.kept
        ps.stored -= delta.unstored
        ps.stored |= delta.stored
        ps.itemsize = sum(f.passes.itemsize for f in sides) + delta.itemsize
        self.facts[gid] = keep

    def record(self, gid: str) -> RowFacts | None:
        """Group ``gid``'s record (made afresh where none is kept), None without
        reductions."""
        if self.part.reduces[gid] == 0:
            return None
        f = self.facts.get(gid)
        if f is None:
            nodes = sorted(self.part.members[gid], key=self.part.index.__getitem__)
            reduces = [self.g.node(n) for n in nodes if self.part.kind[n] is Kind.reduce]
            try:
                dom = row_domain(self.g, reduces)
            except FusionRefused:
                raise _Unproved from None
            changed, bad, odd, seen = self._decide(dom, (), nodes, {gid})
            passes = self._passes(dom, (), {gid}, changed, seen)
            f = RowFacts(dom, changed, bad, odd, sum(n in self.risky for n in nodes), passes)
            self.facts[gid] = f
        return f

    # -- the merge ----------------------------------------------------------------------
    def _check(self, a: str, b: str) -> Fit | None:
        part, g = self.part, self.g
        fa, fb = self.record(a), self.record(b)
        known = [f for f in (fa, fb) if f is not None]
        if not known:
            return None                  # no reduction: not a row kernel
        d = known[0].dom
        if any((f.dom.domain, f.dom.axes) != (d.domain, d.axes) for f in known):
            return None                  # two domains: refused, in the analysis's words
        dom = RowDomain(d.domain, d.axes, d.rows, d.cols, any(f.dom.gathered for f in known))
        inside = {a, b}
        # the ops to decide again: a side without reductions (all of it), ops reading
        # across (found from the smaller side), and every op refused before
        fresh = [x for x, f in ((a, fa), (b, fb)) if f is None]
        fresh_nodes = [n for x in fresh for n in part.members[x]]
        risky = sum(f.risky for f in known) + sum(n in self.risky for n in fresh_nodes)
        if risky:
            return None
        small = min((a, b), key=lambda x: len(part.members[x]))
        other = b if small == a else a
        cross = []
        for n in part.members[small]:
            node = g.node(n)
            if any(i in g.producer and part.owner[g.producer[i].id] == other
                   for i in node.inputs):
                cross.append(n)
            cross.extend(c.id for o in node.outputs for c in g.consumers[o]
                         if part.owner[c.id] == other)
        again = fresh_nodes + cross + [n for f in known for n in f.bad]
        changed, bad, odd, seen = self._decide(dom, known, again, inside)
        if bad or odd:
            return None                  # refused: the analysis says why
        passes = self._passes(dom, known, inside, changed, seen)
        kept = sum(f.passes.itemsize for f in known) + passes.itemsize
        if not self._resources_fit(dom, part.reduces[a] + part.reduces[b], kept, a, b,
                                   known, changed):
            return None                  # refused: the analysis says why
        return Fit(dom, changed, passes)

    def _decide(self, dom: RowDomain, known, nodes, inside: set[str]
                ) -> tuple[dict, set[str], set[str]]:
        """Decide ``nodes`` again (and, downstream, each op reading a value whose
        per-row status changed) for the group of the groups ``inside``, whose records
        are ``known``: (the values re-decided and their status, the ops refused, the
        outputs refused among those re-decided and those refused before)."""
        g, owner, index = self.g, self.part.owner, self.part.index
        changed: dict[str, bool] = {}

        def before(v: str) -> bool:
            for f in known:
                if v in f.per_row:
                    return f.per_row[v]
            return False                 # made outside, or by an op refused

        def is_per_row(v: str) -> bool:
            return changed[v] if v in changed else before(v)

        heap = [(index[n], n) for n in set(nodes)]
        heapq.heapify(heap)
        seen, bad = set(), set()
        while heap:
            _, n = heapq.heappop(heap)
            if n in seen:
                continue
            seen.add(n)
            node = g.node(n)
            try:
                out = row_node(g, node, dom, is_per_row)
            except FusionRefused:
                bad.add(n)
                out = {}
            for o in node.outputs:
                now = out.get(o, False)
                was = is_per_row(o)
                changed[o] = now
                if now != was:           # its readers here see another value now
                    for c in g.consumers[o]:
                        if owner[c.id] in inside and c.id not in seen:
                            heapq.heappush(heap, (index[c.id], c.id))
        odd = set()
        for o in {v for f in known for v in f.odd} | set(changed):
            p = g.producer[o].id
            if p in bad or not (o in self.graph_out or any(
                    owner[c.id] not in inside for c in g.consumers[o])):
                continue
            try:
                check_row_output(g, o, is_per_row(o), dom)
            except FusionRefused:
                odd.add(o)
        return changed, bad, odd, seen

    def _passes(self, dom: RowDomain, known, inside: set[str], changed: dict,
                seen: set[str]) -> Passes:
        """The changes to the passes (:class:`Passes`) of the groups ``inside`` (records
        ``known``) once merged, from the ops decided again (``seen``) on: costly flows
        forward to their readers, then each pass mask backward to what it is computed
        from, each only as far as it changes (the sweep's own rules: a kept value needs
        what it is made from in its first pass only)."""
        g, owner, index, kind = self.g, self.part.owner, self.part.index, self.part.kind
        out = Passes({}, {}, set(), set(), set(), set(), 0)

        def per_row(v):
            if v in changed:
                return changed[v]
            return any(f.per_row.get(v, False) for f in known)

        def element(v):
            p = g.producer.get(v)
            return p is not None and owner[p.id] in inside and not per_row(v)

        def old(table: str, v, default):
            for f in known:
                t = getattr(f.passes, table)
                if v in t:
                    return t[v]
            return default

        def costly(v):
            return out.costly[v] if v in out.costly else old("costly", v, False)

        def need(v):
            return out.need[v] if v in out.need else old("need", v, 0)

        def was_kept(v):
            return any(v in f.passes.kept for f in known)

        def kept(v):
            m = need(v)
            return (element(v) and costly(v) and m & (m - 1) != 0
                    and g.value(v).shape == dom.domain)

        def share(v):                # what v passes on to what it is computed from
            m = need(v) if element(v) else 0
            return m & -m if m and kept(v) else m

        # costly, forward (row_cache._costly)
        heap = [(index[n], n) for n in seen]
        heapq.heapify(heap)
        done: set[str] = set()
        while heap:
            _, n = heapq.heappop(heap)
            if n in done:
                continue
            done.add(n)
            node = g.node(n)
            here = get_op(node.op).flops >= EXPENSIVE_FLOPS or any(
                costly(i) for i in node.inputs if element(i))
            for o in node.outputs:
                now, then = here and element(o), costly(o)
                out.costly[o] = now
                if now != then:
                    for c in g.consumers[o]:
                        if owner[c.id] in inside and c.id not in done:
                            heapq.heappush(heap, (index[c.id], c.id))
        # pass masks, backward (row_cache._pass_roots and the sweep)
        values = {o for n in done for o in g.node(n).outputs}
        values |= {i for n in done for i in g.node(n).inputs if element(i)}
        back = [(-index[g.producer[v].id], v) for v in values]
        heapq.heapify(back)
        visited: set[str] = set()
        while back:
            _, v = heapq.heappop(back)
            if v in visited:
                continue
            visited.add(v)
            m = 0
            if element(v):
                for c in g.consumers[v]:
                    if owner[c.id] not in inside:
                        m |= self.final
                    elif kind[c.id] is Kind.reduce:
                        if c.inputs[0] == v:
                            m |= 1 << index[c.id]
                    else:
                        for o in c.outputs:
                            m |= share(o)
                if v in self.graph_out:
                    m |= self.final
            out.need[v] = m
            m0 = old("need", v, None)
            if m0 is None or share(v) != (m0 & -m0 if m0 and was_kept(v) else m0):
                # (what it passes on changed: what it is computed from, again)
                for i in g.producer[v].inputs:
                    if element(i) and i not in visited:
                        heapq.heappush(back, (-index[g.producer[i].id], i))
        for v in visited | set(out.costly):
            now, then = kept(v), was_kept(v)
            if now:
                out.kept.add(v)
            elif then:
                out.dropped.add(v)
        # the sweep's last step, forward: a kept value one cheap op away from stored,
        # per-row or broadcast values is recomputed, not stored

        def is_kept(v):
            return v in out.kept or (v not in out.dropped and was_kept(v))

        def stored(v):
            return out_stored[v] if v in out_stored else any(
                v in f.passes.stored for f in known)

        def cheap_of_stored(n) -> bool:
            node = g.node(n)
            return get_op(node.op).flops < EXPENSIVE_FLOPS and all(
                stored(i) or per_row(i) or g.value(i).shape != dom.domain
                for i in node.inputs)

        out_stored: dict[str, bool] = {}
        fwd = [(index[g.producer[v].id], v) for v in visited | set(out.costly)]
        heapq.heapify(fwd)
        while fwd:
            _, v = heapq.heappop(fwd)
            if v in out_stored:
                continue
            now = is_kept(v) and not cheap_of_stored(g.producer[v].id)
            then = any(v in f.passes.stored for f in known)
            out_stored[v] = now
            if now != then:
                if now:
                    out.stored.add(v)
                else:
                    out.unstored.add(v)
                size = g.value(v).dtype.compute.itemsize
                out.itemsize += size if now else -size
                for c in g.consumers[v]:
                    if owner[c.id] in inside:
                        for o in c.outputs:
                            if o not in out_stored:
                                heapq.heappush(fwd, (index[c.id], o))
            elif now:
                out.stored.add(v)
        return out

    def _resources_fit(self, dom: RowDomain, reductions: int, kept: int, a: str, b: str,
                       known, changed: dict) -> bool:
        """Whether the merged kernel's block fits the device (the analysis's default
        mapping and launch): at once where it does with the most shared memory its row
        cache could take; else by the analysis's own storage sweep of the merged group
        (linear in it: on a 2-core CPU's 48 KB a LayerNorm stack's 63rd to ~170th
        reductions' slots leave less than that most)."""
        mapping, _, _, rpb, threads, _ = row_launch(dom, None, False, self.device, {}, 4)
        skeleton = Schedule(ScheduleKind.row_reduce, dom.domain, dom.axes, mapping,
                            rows_per_block=rpb, reductions=reductions,
                            cache_bytes=cache_bytes_bound(dom, mapping, rpb, threads,
                                                          self.device, kept),
                            threads=threads, gathered=dom.gathered)
        try:
            check_resources(skeleton, self.device)
            return True
        except FusionRefused:
            pass
        g, part = self.g, self.part
        ns = tuple(sorted(part.members[a] + part.members[b], key=part.index.__getitem__))
        per_row = {v for f in known for v, p in f.per_row.items() if p and v not in changed}
        per_row.update(v for v, p in changed.items() if p)
        reduces = [g.node(n) for n in ns if part.kind[n] is Kind.reduce]
        try:
            check_resources(row_schedule(g, [g.node(n) for n in ns], reduces,
                                         group_io(g, ns), per_row, dom, None, False, set(),
                                         set(), self.device, {}), self.device)
        except FusionRefused:
            return False
        return True


def _risky(g: Graph, node) -> bool:
    """An op whose group this check leaves to the analysis: a library call, a window
    (whose taps must not be written out), a value past 64-bit indexing."""
    if get_op(node.op).kind is Kind.opaque or node.op == "window":
        return True
    return any(g.value(v).numel > INDEX_LIMIT for v in (*node.inputs, *node.outputs))
