"""Planning around constraints: :func:`plan_constrained` runs any planner of the
registry and honours a :class:`~.constraints.Constraints` set in its plan.

The planner plans the whole graph first, unchanged (so with no constraints its plan
is exactly today's, and every planner -- ``rules``, ``xla``, ``stitch`` and any added
later -- honours constraints the same way). Then, on that plan:

1. **Carve.** Each exact kernel (pinned, fixed mapping or launch) takes its ops out
   of the planner's kernels. Each must-fuse set (with its fixed-scheme edges) is kept
   where one planner kernel already holds it; where it spans several, they are joined
   if the joined kernel is legal, acyclic and crosses no cut, else the set is taken out
   as a kernel of its own.
2. **Repair.** A kernel left with a cut inside it, or no longer legal once ops left
   it, falls apart into one kernel per op (a must-fuse set inside it stays together);
   if the kernels would wait on each other in a cycle, every changed kernel falls
   apart, and at worst the plan is the *floor* :func:`.honour.check` proved legal.
3. **Regrow.** The kernels the repair changed join neighbouring kernels again, best
   predicted gain first, where the joined kernel is legal, acyclic, crosses no cut,
   leaves exact kernels alone and the cost model predicts it faster. A candidate a
   constraint rules out is logged ("not fused n3 + n4: cut n3->n4 locked by user").

``none`` plans the floor: the fixed kernels and one kernel per other op.

**Never worse than the user's plan.** Given ``fallback`` (the session's current plan)
that honours the constraints, the result is the planner's plan around them or the
fallback, whichever the cost model predicts faster: a user who locks their hand fusion
never gets a plan predicted slower than that hand plan alone (a decision says so when
the fallback is kept).
"""
from __future__ import annotations

from ..errors import FusionRefused
from ..ir import Graph
from ..device import DEFAULT_DEVICE, Device
from .beam import time_text
from .constraints import Constraints
from .cost import CostModel
from .honour import Checked, check, violations
from .partition import Decision, Partition
from .plan import Group, Plan, make_group, toposort_groups
from .planners import run_planner


def _cut_in(checked: Checked, nodes) -> tuple[str, str] | None:
    ns = set(nodes)
    for a, b in checked.cuts:
        if a in ns and b in ns:
            return (a, b)
    return None


class _Builder:
    """The plan being made: a partition, the groups made of it (cached per node set),
    and the log of what the constraints changed."""

    def __init__(self, g: Graph, checked: Checked, device: Device, tf32: bool,
                 model: CostModel):
        self.g, self.checked, self.device, self.tf32, self.model = g, checked, device, tf32, model
        self._made: dict[frozenset, Group | str] = {}
        self._costs: dict[frozenset, float] = {}
        self.log: list[Decision] = []
        self.loose: set[frozenset] = set()      # node sets the repair changed
        self.ruled: set[tuple] = set()          # candidates already logged as ruled out
        self.reduction_ends_kernel = False      # the xla planner's own rule, kept

    def make(self, nodes) -> Group | str:
        """The group of these nodes with the constraints' settings, or why none."""
        key = frozenset(nodes)
        if key not in self._made:
            fs = {f for n in key if (f := self.checked.fixed_of(n)) is not None}
            forced = tuple(x for f in fs for x in f.forced)
            exact = [f for f in fs if f.exact]
            try:
                if exact and (len(fs) > 1 or exact[0].nodes != key):
                    raise FusionRefused(f"{exact[0].text} locked by user: its kernel "
                                        "stays exactly as it is")
                if exact:
                    self._made[key] = exact[0].make(self.g, key, self.device, self.tf32)
                else:
                    self._made[key] = make_group(self.g, key, True, None, forced,
                                                 device=self.device, tf32=self.tf32)
            except FusionRefused as e:
                self._made[key] = str(e)
        return self._made[key]

    def cost(self, nodes) -> float:
        key = frozenset(nodes)
        if key not in self._costs:
            self._costs[key] = self.model.estimate(self.g, self.make(key)).seconds
        return self._costs[key]

    def carve(self, part: Partition) -> None:
        g, checked = self.g, self.checked
        for f in checked.fixed:
            gids = {part.owner[n] for n in f.nodes}
            if not f.exact and len(gids) == 1:
                continue             # one planner kernel holds it (repair checks it)
            if not f.exact:
                union = [n for x in gids for n in part.members[x]]
                blocked = (_cut_in(checked, union) or part.cycle(gids)
                           or isinstance(self.make(union), str))
                if not blocked:
                    self.loose.add(frozenset(part.members[part.merge(gids)]))
                    continue
            rest = [[n for n in part.members[x] if n not in f.nodes] for x in gids]
            added = part.replace(gids, [r for r in rest if r] + [sorted(f.nodes)])
            self.loose.update(frozenset(part.members[x]) for x in added)
            self.log.append(Decision("locked", tuple(sorted(f.nodes, key=g.position.get)),
                                     f"{f.text}: made its own kernel"))

    def apart(self, part: Partition, gid: str) -> None:
        """The kernel falls apart into one per op, its fixed sets kept whole."""
        nodes = part.members[gid]
        sets, seen = [], set()
        for n in nodes:
            f = self.checked.fixed_of(n)
            if f is not None and f.nodes <= set(nodes):
                if f.nodes not in seen:
                    seen.add(f.nodes)
                    sets.append(sorted(f.nodes))
            else:
                sets.append([n])
        added = part.replace([gid], sets)
        self.loose.update(frozenset(part.members[x]) for x in added)

    def repair(self, part: Partition) -> None:
        g = self.g
        for gid in list(part.members):
            nodes = part.members[gid]
            cut = _cut_in(self.checked, nodes)
            if cut is not None:
                self.ruled.add(cut)
                self.log.append(Decision("not fused", cut, f"cut {cut[0]}->{cut[1]} locked "
                                         f"by user: the planner's kernel {gid} "
                                         f"({len(nodes)} ops) is planned again without it"))
                self.apart(part, gid)
            elif len(nodes) > 1 and isinstance(self.make(nodes), str):
                self.log.append(Decision("split", tuple(sorted(nodes, key=g.position.get)),
                                         f"{self.make(nodes)}: planned again around the locks"))
                self.apart(part, gid)
        if self._cyclic(part):
            for gid in [x for x in list(part.members)
                        if frozenset(part.members[x]) in self.loose]:
                self.apart(part, gid)
        if self._cyclic(part):
            part.replace(list(part.members), [sorted(s) for s in self.checked.floor])
            self.loose = {frozenset(s) for s in self.checked.floor}
            self.log.append(Decision("kept", (), "the locked kernels and one kernel per "
                                     "other op: the planner's kernels around the locks "
                                     "waited on each other in a cycle"))

    def _cyclic(self, part: Partition) -> bool:
        try:
            toposort_groups(self.g, [Group(x, tuple(m), None) for x, m in part.members.items()])
            return False
        except FusionRefused:
            return True

    def regrow(self, part: Partition) -> None:
        """Join the changed kernels with neighbours while the model says it pays."""
        ruled = self.ruled
        while True:
            best = None
            for gid in sorted(part.members, key=lambda x: int(x[1:])):
                a = part.members[gid]
                if frozenset(a) not in self.loose:
                    continue
                for nb in sorted(part.successors(gid) | part.predecessors(gid),
                                 key=lambda x: int(x[1:])):
                    b = part.members[nb]
                    u = a + b
                    why = self._ruled_out(part, gid, nb, u)
                    if why is not None:
                        if why[0] not in ruled:
                            ruled.add(why[0])
                            self.log.append(Decision("not fused", why[0], why[1]))
                        continue
                    if part.cycle({gid, nb}) is not None or isinstance(self.make(u), str):
                        continue          # illegal for its own reasons (not the locks')
                    producer = gid if nb in part.successors(gid) else nb
                    if self.reduction_ends_kernel and part.has_reduce(producer):
                        continue          # xla: a reduction ends its kernel
                    gain = self.cost(a) + self.cost(b) - self.cost(u)
                    if gain > 1e-12 and (best is None or gain > best[0]):
                        best = (gain, gid, nb)
            if best is None:
                return
            gain, gid, nb = best
            before = self.cost(part.members[gid]) + self.cost(part.members[nb])
            new = part.merge({gid, nb})
            ns = part.members[new]
            self.loose.add(frozenset(ns))
            self.log.append(Decision(
                "fused", tuple(sorted(ns, key=self.g.position.get)),
                f"around the locks: predicted {time_text(before)} -> "
                f"{time_text(self.cost(ns))}"))

    def _ruled_out(self, part, gid, nb, u) -> tuple[tuple, str] | None:
        """(the candidate's nodes, why a constraint rules it out), or None."""
        cut = _cut_in(self.checked, u)
        if cut is not None:
            return cut, f"cut {cut[0]}->{cut[1]} locked by user"
        for x in (gid, nb):
            f = self.checked.fixed_of(part.members[x][0])
            if f is not None and f.exact:
                return ((part.members[gid][0], part.members[nb][0]),
                        f"{f.text} locked by user: its kernel stays exactly as it is")
        return None

    def plan(self, part: Partition, planner: str, precision: str,
             planned: Plan | None = None) -> Plan:
        """The partition's kernels; one the planner made itself (``planned``), on ops
        whose schemes, mapping and launch no lock sets, is the planner's -- with the mapping its model chose (made again,
        it would take the rule's)."""
        kept = {frozenset(gr.nodes): gr for gr in planned.groups} if planned else {}
        groups = []
        for ns in part.members.values():
            gr = self.make(ns)
            if isinstance(gr, str):       # (every kernel kept was made; say so if not)
                raise FusionRefused(gr)
            mine = kept.get(frozenset(ns))
            if mine is not None and all(_unset(self.checked.fixed_of(n)) for n in ns):
                gr = mine
            groups.append(gr)
        return Plan(self.g, toposort_groups(self.g, groups), planner, self.device, precision)


def _unset(f) -> bool:
    """No lock sets this op's kernel's schemes, mapping or launch (a must-fuse only
    joins ops)."""
    return f is None or not (f.exact or f.forced or f.mapping or f.launch)


def plan_constrained(name: str, g: Graph, cs: Constraints, model: CostModel | None = None,
                     device: Device | None = None, matmul_precision: str = "float32",
                     fallback: Plan | None = None) -> tuple[Plan, list[Decision]]:
    """Planner ``name``'s plan of ``g`` honouring ``cs`` and its decisions (see the
    module docstring); refused (FusionRefused) when ``cs`` cannot be met on ``g``.
    With no constraints, exactly :func:`.planners.run_planner`'s plan."""
    if not len(cs):
        return run_planner(name, g, model, device, matmul_precision)
    device = device or (model.device if model is not None else DEFAULT_DEVICE)
    model = model if model is not None and model.device == device \
        else CostModel.for_device(device)
    tf32 = matmul_precision == "tf32"
    checked = check(g, cs, device, tf32)
    plan, log = run_planner(name, g, model, device, matmul_precision)
    b = _Builder(g, checked, device, tf32, model)
    if name == "none":
        part = Partition(g, [sorted(s, key=g.position.get) for s in checked.floor])
    else:
        part = Partition(g, [gr.nodes for gr in plan.groups])
        b.reduction_ends_kernel = name == "xla"
        b.carve(part)
        b.repair(part)
        b.regrow(part)
    out = b.plan(part, name, matmul_precision, None if name == "none" else plan)
    head = Decision("constraints", (), f"planned around {len(cs)} lock"
                    f"{'s' if len(cs) != 1 else ''}: {cs}")
    ruled = _overruled(log, checked)
    decisions = [head] + [d for d in log if d not in ruled] + b.log
    broken = violations(out, cs)
    if broken:          # (a bug, never a user's error: say which lock and how)
        raise FusionRefused(f"planner {name} could not honour {broken[0]}")
    if fallback is not None and fallback.graph is g and not violations(fallback, cs):
        mine, theirs = model.predict(out).ms, model.predict(fallback).ms
        if theirs < mine:
            kept = Plan(g, fallback.groups, name, fallback.device, fallback.matmul_precision)
            return kept, decisions + [Decision(
                "kept", (), f"the user's plan: predicted {theirs:.4g} ms, faster than "
                f"{name}'s plan around the locks ({mine:.4g} ms)")]
    return out, decisions


def _overruled(log: list[Decision], checked: Checked) -> set[Decision]:
    """The planner's "fused" decisions a cut overruled (the constraints' log says why)."""
    out = set()
    for d in log:
        if d.action == "fused" and _cut_in(checked, d.nodes) is not None:
            out.add(d)
    return out
