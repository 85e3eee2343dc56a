"""Whether a set of constraints can be met on a graph (:func:`check`, asked when they
are stated) and whether a plan meets them (:func:`violations`).

:func:`check` reduces the constraints to *fixed kernels* (:class:`Fixed`): each
must-fuse set and fixed-scheme edge joins the ops it names (overlapping ones become one
set, which a plan's kernel must contain), and each pinned, fixed-mapping or
fixed-launch kernel is an exact node set. A set of constraints is refused, with the
constraint and the reason, when a fixed kernel cannot be made (a library call, an
illegal scheme, a launch parameter out of range, a resource limit), two exact kernels
overlap, a cut lies inside a fixed kernel, or the fixed kernels -- with one kernel per
other op -- would wait on each other in a cycle. That last plan (the *floor*) is then
legal, and is what every constrained plan can fall back to.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import FusionRefused
from ..ir import Graph
from ..device import Device
from .constraints import (Constraints, Cut, FixedLaunch, FixedMapping, FixedScheme,
                          MustFuse, Pinned)
from .partition import Partition
from .plan import Group, Plan, StitchScheme, make_group


@dataclass(frozen=True)
class Fixed:
    """A kernel the constraints fix: its ops (``exact``: exactly these, else at least
    these), the schemes forced on its edges, its mapping and launch parameters, and the
    constraints that make it (as the user reads them)."""
    nodes: frozenset
    exact: bool
    forced: tuple[tuple[str, StitchScheme], ...]
    mapping: str
    launch: tuple[tuple[str, int], ...]
    why: tuple[str, ...]

    @property
    def text(self) -> str:
        return ", ".join(self.why)

    def make(self, g: Graph, nodes, device: Device, tf32: bool) -> Group:
        """A group of ``nodes`` (these ops, or a kernel holding them) made as fixed."""
        return make_group(g, nodes, True, self.mapping or None, self.forced,
                          device=device, launch=self.launch, tf32=tf32)


@dataclass(frozen=True)
class Checked:
    """What :func:`check` found: the fixed kernels, the cut edges (node pairs) and the
    floor plan's node sets."""
    fixed: tuple[Fixed, ...]
    cuts: tuple[tuple[str, str], ...]
    floor: tuple[frozenset, ...]

    def fixed_of(self, n: str) -> Fixed | None:
        for f in self.fixed:
            if n in f.nodes:
                return f
        return None


def edge_value(g: Graph, edge: tuple[str, str]) -> str:
    """The value ``edge[0]`` makes that ``edge[1]`` reads, or why there is none."""
    a, b = (_node(g, n) for n in edge)
    vals = [o for o in a.outputs if o in b.inputs]
    if not vals:
        raise FusionRefused(f"{edge[0]}->{edge[1]} is no edge of graph {g.name}: "
                            f"{edge[1]} ({b.op}) reads nothing {edge[0]} ({a.op}) makes")
    return vals[0]


def _node(g: Graph, n: str):
    if n not in g.node_map:
        raise FusionRefused(f"no node {n!r} in graph {g.name}; its nodes are "
                            f"{', '.join(x.id for x in g.nodes[:8])}"
                            + ("..." if len(g.nodes) > 8 else ""))
    return g.node_map[n]


def _exact_kernels(g: Graph, cs: Constraints) -> dict[frozenset, dict]:
    """The exact kernels, one entry per node set, their settings combined (refused
    where two set one thing differently or two overlap)."""
    out: dict[frozenset, dict] = {}
    for c in cs:
        if not isinstance(c, (Pinned, FixedMapping, FixedLaunch)):
            continue
        for n in c.nodes:
            _node(g, n)
        key = frozenset(c.nodes)
        for other, e in out.items():
            if other != key and other & key:
                raise FusionRefused(f"{c} and {e['why'][0]} name overlapping kernels "
                                    f"(both hold {sorted(other & key)[0]}): a kernel is "
                                    "fixed by one node set")
        e = out.setdefault(key, {"mapping": "", "launch": {}, "forced": {}, "why": [],
                                 "pinned": ""})
        if isinstance(c, Pinned):
            e["pinned"] = str(c)
            new = {"mapping": c.mapping, "launch": dict(c.launch),
                   "forced": dict(c.schemes)}
        elif isinstance(c, FixedMapping):
            new = {"mapping": c.mapping}
        else:
            new = {"launch": dict(c.params)}
        for k, v in new.items():
            if k == "mapping":
                if e[k] and v and e[k] != v:
                    raise FusionRefused(f"{c} contradicts {e['why'][0]}: mapping "
                                        f"{v} against {e[k]}")
                e[k] = e[k] or v
            else:
                clash = [x for x in v if x in e[k] and e[k][x] != v[x]]
                if clash:
                    raise FusionRefused(f"{c} contradicts {e['why'][0]} on {clash[0]}")
                e[k].update(v)
        e["why"].append(str(c))
        if isinstance(c, Pinned):
            e.setdefault("pins", []).append(c)
    for e in out.values():          # a pinned kernel keeps what it had: nothing added
        # (every pin: two pins of one kernel, one by the rule's mapping and one by
        # another, contradict each other too)
        for pin in e.get("pins", ()):
            if e["mapping"] != pin.mapping \
                    or tuple(sorted(e["launch"].items())) != pin.launch:
                other = next((w for w in e["why"] if w != str(pin)), f"another {pin}")
                raise FusionRefused(
                    f"{other} contradicts {pin} (mapped {pin.mapping or 'by the rule'}, "
                    f"launch {dict(pin.launch) or 'by the rule'}): a pinned kernel keeps "
                    "the mapping and launch parameters it had (unpin it first)")
    return out


def _min_sets(g: Graph, cs: Constraints) -> list[tuple[set, list[str]]]:
    """The must-fuse sets and fixed-scheme edges, overlapping ones joined."""
    sets: list[tuple[set, list[str]]] = []
    for c in cs:
        if isinstance(c, MustFuse):
            ns = set(c.nodes)
            for n in ns:
                _node(g, n)
        elif isinstance(c, FixedScheme):
            edge_value(g, c.edge)
            ns = set(c.edge)
        else:
            continue
        why = [str(c)]
        for s, w in [x for x in sets if x[0] & ns]:
            sets.remove((s, w))
            ns |= s
            why = w + why
        sets.append((ns, why))
    return sets


def check(g: Graph, cs: Constraints, device: Device, tf32: bool = False) -> Checked:
    """The fixed kernels of ``cs`` on ``g`` (see the module docstring), or
    FusionRefused naming the constraint and why it cannot be met."""
    exact = _exact_kernels(g, cs)
    schemes: dict[str, tuple[StitchScheme, str]] = {}
    for c in cs.of(FixedScheme):
        v = edge_value(g, c.edge)
        sc = StitchScheme(c.scheme)
        if v in schemes and schemes[v][0] is not sc:
            raise FusionRefused(f"{c} contradicts {schemes[v][1]}: {v} is one value, "
                                "passed by one scheme")
        schemes[v] = (sc, str(c))
    fixed: list[Fixed] = []
    for ns, why in _min_sets(g, cs):
        home = [k for k in exact if k & ns]
        if home:
            k = home[0]
            if not ns <= k or len(home) > 1:
                raise FusionRefused(f"{why[0]} reaches outside the kernel fixed by "
                                    f"{exact[k]['why'][0]} (exactly "
                                    f"{' '.join(sorted(k, key=g.position.get))})")
            exact[k]["why"].extend(why)
            continue
        forced = tuple((v, sc) for v, (sc, _) in schemes.items()
                       if g.producer[v].id in ns)
        fixed.append(Fixed(frozenset(ns), False, forced, "", (), tuple(why)))
    for k, e in exact.items():
        forced = {v: StitchScheme(s) for v, s in e["forced"].items()}
        for v, (sc, text) in schemes.items():
            if g.producer[v].id not in k:
                continue
            if e["pinned"] and forced.get(v) is not sc:
                raise FusionRefused(f"{text} contradicts {e['pinned']}: a pinned kernel "
                                    "keeps the schemes it had (unpin it, or lock its "
                                    "fusion only)")
            forced[v] = sc
        fixed.append(Fixed(k, True, tuple(forced.items()), e["mapping"],
                           tuple(sorted(e["launch"].items())), tuple(e["why"])))
    cuts = []
    for c in cs.of(Cut):
        edge_value(g, c.edge)
        for f in fixed:
            if set(c.edge) <= f.nodes:
                raise FusionRefused(f"{c} lies inside the kernel {f.why[0]} asks for: "
                                    "drop one of the two")
        cuts.append(c.edge)
    # each fixed kernel must be makeable, and all of them together acyclic
    part = Partition(g)
    for f in sorted(fixed, key=lambda f: min(g.position[n] for n in f.nodes)):
        try:
            f.make(g, f.nodes, device, tf32)
        except FusionRefused as e:
            raise FusionRefused(f"{f.why[0]}: {e}") from None
        gids = {part.owner[n] for n in f.nodes}
        why = part.cycle(gids)
        if why is not None:
            raise FusionRefused(f"{f.text}: {why}")
        part.merge(gids)
    return Checked(tuple(fixed), tuple(cuts),
                   tuple(frozenset(m) for m in part.members.values()))


def broken(plan: Plan, cs: Constraints) -> list:
    """The constraints of ``cs`` that ``plan`` breaks."""
    return [c for c in cs if violations(plan, Constraints((c,)))]


def violations(plan: Plan, cs: Constraints) -> list[str]:
    """Each constraint ``plan`` breaks, with how (empty: the plan honours them all)."""
    g, owner = plan.graph, plan.group_of
    out = []
    for c in cs:
        try:
            if isinstance(c, MustFuse):
                kernels = {owner[n].id for n in c.nodes}
                if len(kernels) > 1:
                    out.append(f"{c}: its ops are in kernels {', '.join(sorted(kernels))}")
            elif isinstance(c, Cut):
                a, b = (owner[n] for n in c.edge)
                if a.id == b.id:
                    out.append(f"{c}: both ops are in kernel {a.id}")
            elif isinstance(c, FixedScheme):
                a, b = (owner[n] for n in c.edge)
                v = edge_value(g, c.edge)
                if a.id != b.id:
                    out.append(f"{c}: the edge leaves kernel {a.id} for {b.id}")
                elif a.scheme(v) is not StitchScheme(c.scheme):
                    got = a.scheme(v)
                    out.append(f"{c}: {v} is passed {got.value if got else 'not at all'}")
            else:
                gr = owner[c.nodes[0]]
                if set(gr.nodes) != set(c.nodes):
                    out.append(f"{c}: its kernel {gr.id} holds {' '.join(gr.nodes)}")
                elif isinstance(c, FixedMapping) and gr.forced_mapping != c.mapping:
                    out.append(f"{c}: {gr.id} is mapped {gr.forced_mapping or 'by the rule'}")
                elif isinstance(c, FixedLaunch) and not set(c.params) <= set(gr.forced_launch):
                    out.append(f"{c}: {gr.id} launches with "
                               f"{dict(gr.forced_launch) or 'the rule'}")
                elif isinstance(c, Pinned) and (
                        c.mapping != gr.forced_mapping or c.launch != gr.forced_launch
                        or dict(c.schemes) != {v: sc.value for v, sc in gr.forced}):
                    out.append(f"{c}: {gr.id}'s schemes, mapping or launch changed")
        except (KeyError, FusionRefused) as e:
            out.append(f"{c}: {e}")
    return out
