"""The transformations that apply to a selection, each with its predicted effect.

Like DaCe's optimizer view: for the nodes (or kernels) a user selected, every action
the plan offers -- fuse the selection, fuse a kernel with a neighbour, split it, each
stitch scheme on each edge inside it, each thread mapping of a row kernel, tuning --
is tried on the plan (plans are values, so trying changes nothing) and either gives
the plan it would make, priced by the cost model (kernels, bytes, predicted ms), or
the reason it is refused. A preview is the ``plan`` of a legal action; applying it is
pushing that plan (``Session.apply``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..errors import FusionRefused
from .cost import CostModel
from .mapping import MAPPINGS, ScheduleKind
from .plan import Plan, StitchScheme

# schemes a user can set on an edge inside a kernel (independent is not an edge's)
EDGE_SCHEMES = (StitchScheme.local, StitchScheme.regional, StitchScheme.global_)
# neighbours offered for "fuse with" per selected kernel: enough to choose from, few
# enough that pricing them stays interactive on a 1,000-op graph
MAX_NEIGHBOURS = 8


@dataclass(frozen=True)
class Effect:
    """What a plan costs by the model: kernels, bytes moved (counted), predicted ms."""
    kernels: int
    bytes_moved: int
    predicted_ms: float


@dataclass(frozen=True)
class Action:
    """One transformation of ``base`` (the plan it was offered for). ``call`` is the
    Session method and its arguments (``("fuse", (("n1", "n2"),))``); ``plan`` and
    ``effect`` are None when the action is refused (``reason`` says why) or cannot be
    priced without running (tuning, whose effect is measured)."""
    label: str
    call: tuple[str, tuple]
    base: Plan
    legal: bool
    reason: str = ""
    plan: Plan | None = None
    effect: Effect | None = None

    def delta(self, before: Effect) -> str:
        """The change from ``before``, as a user reads it: "-1 kernel, -33.6 MB,
        0.052 -> 0.031 ms"."""
        if self.effect is None:
            return self.reason
        e = self.effect
        dk = e.kernels - before.kernels
        db = (e.bytes_moved - before.bytes_moved) / 1e6
        return (f"{dk:+d} kernel{'s' if abs(dk) != 1 else ''}, {db:+.3g} MB, "
                f"{before.predicted_ms:.4g} -> {e.predicted_ms:.4g} ms")


def effect(plan: Plan, model: CostModel) -> Effect:
    est = model.predict(plan)
    return Effect(len(plan.groups),
                  sum(e.features.bytes_moved for _, e in est.groups), est.ms)


def internal_edges(plan: Plan, gid: str) -> list[str]:
    """The values made and read inside one kernel (the edges a scheme applies to)."""
    gr, g = plan.group(gid), plan.graph
    members = set(gr.nodes)
    out = []
    for nid in gr.nodes:
        for v in g.node_map[nid].outputs:
            if any(c.id in members for c in g.consumers.get(v, ())):
                out.append(v)
    return out


def edge_text(g, group, value: str) -> str:
    """An edge inside ``group`` as the drawing shows it: ``reduce_mean n0 → sub n1``
    (its other readers inside the kernel counted: ``+1``)."""
    maker = g.producer[value]
    readers = list(dict.fromkeys(c.id for c in g.consumers.get(value, ())
                                 if c.id in group.nodes))
    more = f" +{len(readers) - 1}" if len(readers) > 1 else ""
    first = f"{g.node(readers[0]).op} {readers[0]}" if readers else "?"
    return f"{maker.op} {maker.id} → {first}{more}"


def neighbours(plan: Plan, gid: str) -> list[str]:
    """The kernels that feed or read this one, in plan order."""
    g, gr = plan.graph, plan.group(gid)
    near = set()
    for nid in gr.nodes:
        node = g.node_map[nid]
        for v in node.inputs:
            p = g.producer.get(v)
            if p is not None:
                near.add(plan.group_of[p.id].id)
        for v in node.outputs:
            near.update(plan.group_of[c.id].id for c in g.consumers.get(v, ()))
    near.discard(gr.id)
    return [x.id for x in plan.groups if x.id in near]


def candidates(plan: Plan, refs: Iterable[str]) -> list[tuple[str, tuple[str, tuple],
                                                               Callable[[], Plan] | None]]:
    """(label, call, make) for every action on the selection, in a stable order;
    ``make`` builds the plan (raising FusionRefused), None for an unpriced action."""
    refs = list(dict.fromkeys(refs))
    gids = list(dict.fromkeys(plan.group(r).id for r in refs))   # refuses unknown refs
    out = []
    if len(gids) >= 2:
        out.append((f"fuse {' '.join(refs)}", ("fuse", (tuple(refs),)),
                    lambda: plan.fuse(refs)))
    for gid in gids:
        gr = plan.group(gid)
        for nb in neighbours(plan, gid)[:MAX_NEIGHBOURS]:
            if nb not in gids:
                out.append((f"fuse {gid} with {nb}", ("fuse", ((gid, nb),)),
                            lambda gid=gid, nb=nb: plan.fuse([gid, nb])))
        if len(gr.nodes) > 1:
            out.append((f"split {gid}", ("split", (gid,)), lambda gid=gid: plan.split(gid)))
        for v in internal_edges(plan, gid):
            now = gr.scheme(v)
            for sc in EDGE_SCHEMES:
                if sc is not now:
                    out.append((f"scheme {v} ({edge_text(plan.graph, gr, v)}) -> {sc.value}",
                                ("set_scheme", (v, sc.value)),
                                lambda v=v, sc=sc: plan.set_scheme(v, sc)))
        if gr.schedule.kind is ScheduleKind.row_reduce:
            current = gr.schedule.mapping
            for m in MAPPINGS:
                # (two_phase is offered for a column reduction: its form)
                if m != current and not (m.info.partials_by_rows and gr.schedule.innermost):
                    out.append((f"mapping {gid} -> {m.value}", ("set_mapping", (gid, m.value)),
                                lambda gid=gid, m=m: plan.set_mapping(gid, m.value)))
            if gr.forced_mapping:
                out.append((f"mapping {gid} -> auto", ("set_mapping", (gid, "auto")),
                            lambda gid=gid: plan.set_mapping(gid, "auto")))
            out.append((f"tune {gid}", ("tune", ((gid,),)), None))
    return out


def applicable_actions(plan: Plan, refs: Iterable[str], model: CostModel) -> list[Action]:
    """Every action on the selection: legal ones first, fastest predicted first; then
    the refused ones with their reasons. Nothing in ``plan`` changes."""
    legal, refused = [], []
    for label, call, make in candidates(plan, refs):
        if make is None:
            legal.append(Action(label, call, plan, True, "measured on the backend: launch "
                                "candidates are timed, the fastest kept"))
            continue
        try:
            new = make()
        except FusionRefused as e:
            refused.append(Action(label, call, plan, False, str(e)))
            continue
        if new == plan:
            refused.append(Action(label, call, plan, False, "the plan would not change"))
            continue
        legal.append(Action(label, call, plan, True, "", new, effect(new, model)))
    legal.sort(key=lambda a: (a.effect is None, a.effect.predicted_ms if a.effect else 0.0))
    return legal + refused
