"""A session's locks: the constraints every planner honours (:mod:`workbench.fusion.
constraints`), stated, dropped and taken from the plan as steps of the history (undo
restores them), and the guard that keeps a manual action from breaking one.

    >>> s.constrain(Cut(("n3", "n4")))        # doctest: +SKIP
    >>> s.lock("k0"); s.auto("stitch")        # k0 stays exactly as it is  # doctest: +SKIP
"""
from __future__ import annotations

from .errors import FusionRefused, WorkbenchError
from .fusion.constraints import (Constraints, Cut, FixedLaunch, FixedMapping, FixedScheme,
                                 MustFuse, Pinned, as_constraint)
from .fusion.honour import broken, check
from .fusion.plan import Plan
from .history import Step
from . import arguments as args

LOCK_HOW = ("kernel", "fusion", "mapping", "launch")


def _edge(ref) -> tuple[str, str] | None:
    if isinstance(ref, str) and "->" in ref:
        a, b = (x.strip() for x in ref.split("->", 1))
        return a, b
    if isinstance(ref, tuple) and len(ref) == 2:
        return ref
    return None


def kernel_locks(plan: Plan, ref: str, how: str = "kernel") -> list:
    """The constraints that keep the kernel holding ``ref`` as ``plan`` has it:
    ``kernel`` pins it whole; ``fusion`` keeps its ops together (and the schemes a user
    set inside it); ``mapping`` / ``launch`` keep its thread mapping / launch
    parameters."""
    if not isinstance(how, str) or how not in LOCK_HOW:
        raise WorkbenchError(f"lock how={how!r:.30}: choose one of {', '.join(LOCK_HOW)}")
    gr, g = plan.group(ref), plan.graph
    if how == "kernel":
        return [Pinned(gr.nodes, tuple((v, sc.value) for v, sc in gr.forced),
                       gr.forced_mapping, gr.forced_launch)]
    if how == "fusion":
        if len(gr.nodes) < 2:
            raise FusionRefused(f"{gr.id} has one op: there is no fusion to keep (lock "
                                "it whole with how='kernel')")
        return [MustFuse(gr.nodes)] + [
            FixedScheme((g.producer[v].id, _reader(g, gr, v)), sc.value) for v, sc in gr.forced]
    if how == "mapping":
        mapping = gr.forced_mapping or getattr(gr.schedule.mapping, "value", "")
        if not mapping:
            raise FusionRefused(f"{gr.id} is a {gr.schedule.kind.value} kernel: it has no "
                                "thread mapping to keep")
        return [FixedMapping(gr.nodes, str(mapping))]
    if not gr.forced_launch:
        raise FusionRefused(f"{gr.id} launches by the rule: no launch parameters were set "
                            "(set_launch, tune) to keep")
    return [FixedLaunch(gr.nodes, gr.forced_launch)]


def _reader(g, gr, v: str) -> str:
    return next(c.id for c in g.consumers[v] if c.id in gr.nodes)


def edge_locks(plan: Plan, edge: tuple[str, str]) -> list:
    """Keep an edge as ``plan`` has it: inside one kernel (with the scheme a user set
    there, and the kernel's fusion: a scheme is legal or not in its kernel), or cut."""
    a, b = (plan.group(n) for n in edge)
    if a.id != b.id:
        return [Cut(edge)]
    g = plan.graph
    forced = dict(a.forced)
    v = next((o for o in g.node(edge[0]).outputs if o in g.node(edge[1]).inputs), None)
    if v is not None and v in forced:
        return [MustFuse(a.nodes), FixedScheme(edge, forced[v].value)]
    return [MustFuse(edge)]


def step_locks(before: Plan, after: Plan) -> list:
    """The constraints that keep what changed from ``before`` to ``after`` (a manual
    fuse, split, scheme, mapping or launch edit): a new kernel's fusion, the edges a
    split cut, the schemes, mapping and launch parameters set."""
    g, out = after.graph, []
    old = {frozenset(gr.nodes): gr for gr in before.groups}
    for gr in after.groups:
        prev = old.get(frozenset(gr.nodes))
        if prev is None and len(gr.nodes) > 1:
            out.append(MustFuse(gr.nodes))
        for v, sc in gr.forced:
            if prev is None or dict(prev.forced).get(v) is not sc:
                out.append(MustFuse(gr.nodes))       # (the scheme's kernel: see edge_locks)
                out.append(FixedScheme((g.producer[v].id, _reader(g, gr, v)), sc.value))
        if gr.forced_mapping and (prev is None or prev.forced_mapping != gr.forced_mapping):
            out.append(FixedMapping(gr.nodes, gr.forced_mapping))
        if gr.forced_launch and (prev is None or prev.forced_launch != gr.forced_launch):
            out.append(FixedLaunch(gr.nodes, gr.forced_launch))
    new = after.group_of
    for gr in before.groups:
        for n in gr.nodes:
            for o in g.node(n).outputs:
                for c in g.consumers[o]:
                    if c.id in gr.nodes and new[n].id != new[c.id].id:
                        out.append(Cut((n, c.id)))
    return list(dict.fromkeys(out))


class Locks:
    """The Session methods about constraints (mixed into :class:`~.session.Session`)."""

    @property
    def constraints(self) -> Constraints:
        """The constraints in force at the current step."""
        return self.step.constraints

    def constrain(self, *cs) -> Constraints:
        """State constraints (MustFuse, Cut, FixedScheme, FixedMapping, FixedLaunch,
        Pinned) as a step; refused with the reason, changing nothing, when they cannot
        be met on this graph (a cycle, an illegal scheme, a resource limit, a clash)."""
        if len(cs) == 1 and isinstance(cs[0], Constraints):
            cs = tuple(cs[0])
        new = self.constraints.add(*(as_constraint(c) for c in cs))
        if new == self.constraints:
            return new
        check(self.graph, new, self.device, self.plan.tf32)       # or refused
        added = [str(c) for c in new if c not in self.constraints]
        self._history.push(Step(f"lock {'; '.join(added)}", self.plan, (), new))
        return new

    def unconstrain(self, *cs) -> Constraints:
        """Drop constraints (values, or their printed form ``"cut n3->n4"``); with none
        named, drop them all. A step, as stating them is."""
        have = self.constraints
        if not cs:
            cs = tuple(have)
        by_text = {str(c): c for c in have}
        for c in cs:
            if isinstance(c, str) and c not in by_text:
                raise WorkbenchError(f"no constraint {c!r:.60} in force; they are: {have}")
        cs = tuple(by_text[c] if isinstance(c, str) else as_constraint(c) for c in cs)
        new = have.remove(*cs)
        if new == have:
            return new
        self._history.push(Step(f"unlock {'; '.join(map(str, cs))}", self.plan, (), new))
        return new

    def lock(self, ref, how: str = "kernel") -> Constraints:
        """Keep the current plan's choice for a kernel (``"k3"`` or a node of it;
        ``how``: kernel, fusion, mapping or launch, see :func:`kernel_locks`) or an
        edge (``"n3->n4"``: kept inside one kernel, or cut) as constraints."""
        edge = _edge(ref)
        if edge is None:
            ref = args.ref(ref)
        elif not all(isinstance(n, str) for n in edge):
            raise WorkbenchError(f"an edge is two node ids, got {ref!r:.60}")
        cs = edge_locks(self.plan, edge) if edge else kernel_locks(self.plan, ref, how)
        return self.constrain(*cs)

    def lock_step(self) -> Constraints:
        """Keep what the current step changed (a manual fuse, split, set_scheme,
        set_mapping or set_launch) as constraints (:func:`step_locks`)."""
        if self.position == 0:
            raise WorkbenchError("the first step changed nothing to lock")
        cs = step_locks(self.history[self.position - 1].plan, self.plan)
        if not cs:
            raise WorkbenchError(f"step {self.position} ({self.step.action}) changed no "
                                 "kernel, scheme, mapping or launch to lock")
        return self.constrain(*cs)

    def lock_tuned(self) -> Constraints:
        """Keep the launch parameters and mappings the tuner (or a user) set on the
        current plan's kernels, so re-planning after an edit keeps what was measured."""
        cs = []
        for gr in self.plan.groups:
            if gr.forced_launch:
                cs.append(FixedLaunch(gr.nodes, gr.forced_launch))
            if gr.forced_mapping:
                cs.append(FixedMapping(gr.nodes, gr.forced_mapping))
        if not cs:
            raise WorkbenchError("no kernel of the current plan has tuned launch "
                                 "parameters or a set mapping: tune first (Session.tune)")
        return self.constrain(*cs)

    def _tunable(self, groups):
        """The kernels tuning may change (``groups``: ids, None for all): those whose
        launch or mapping no lock fixes (a pinned, fixed-mapping or fixed-launch
        kernel keeps its own)."""
        exact = {frozenset(c.nodes) for c in self.constraints
                 if isinstance(c, (Pinned, FixedMapping, FixedLaunch))}
        if not exact:
            return groups
        return {gr.id for gr in self.plan.groups if frozenset(gr.nodes) not in exact
                and (groups is None or gr.id in groups)}

    def _guard(self, action: str, plan: Plan) -> None:
        """Refuse an action whose plan breaks a lock the current plan keeps."""
        cs = self.constraints
        if not len(cs):
            return
        now = set(broken(self.plan, cs))
        new = [c for c in broken(plan, cs) if c not in now]
        if new:
            raise FusionRefused(f"{action} would break the lock {new[0]}; unlock it first "
                                f"(Session.unconstrain({str(new[0])!r}))")
