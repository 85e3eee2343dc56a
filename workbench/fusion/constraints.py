"""Constraints a user states and every planner honours ("locks").

As in scheduling with injected constraints (CGO'22), something outside the planner --
here the person at the workbench, or the tuner's measurements -- says what must hold,
and the planner plans the rest around it:

- :class:`MustFuse` -- these ops share one kernel (it may hold more);
- :class:`Cut` -- the edge ``producer -> consumer`` is never inside one kernel;
- :class:`FixedScheme` -- the edge is inside one kernel, passed by this stitch scheme;
- :class:`FixedMapping` -- the kernel of exactly these ops maps rows to threads so;
- :class:`FixedLaunch` -- the kernel of exactly these ops launches with these parameters;
- :class:`Pinned` -- the kernel of exactly these ops, left as it is (schemes, mapping
  and launch parameters included).

Kernels are named by their ops, never by kernel ids (``k3``), which change with every
plan. An edge is ``(producer node, consumer node)``. Each constraint is a frozen value
that prints as a user reads it (``cut n3->n4``) and round-trips through JSON;
:class:`Constraints` is an ordered set of them. Whether a set can be met on a graph is
:func:`workbench.fusion.honour.check` (refused with the reason when it is stated);
how planners honour it is :func:`workbench.fusion.honour.plan_constrained`.

    >>> cs = Constraints().add(Cut(("n3", "n4"))).add(MustFuse(("n0", "n1")))
    >>> str(cs)
    'cut n3->n4; must-fuse n0 n1'
    >>> Constraints.from_json(cs.to_json()) == cs
    True
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Iterator, Union

from ..errors import WorkbenchError

SCHEME_NAMES = ("local", "regional", "global")


def _nodes(nodes, what: str) -> tuple[str, ...]:
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(n, str) for n in nodes):
        raise WorkbenchError(f"{what} takes a list of node ids like ['n0', 'n1'], got "
                             f"{nodes!r:.60}")
    out = tuple(dict.fromkeys(nodes))
    if not out:
        raise WorkbenchError(f"{what} names no nodes: give at least one node id")
    return out


def _edge(edge, what: str) -> tuple[str, str]:
    if isinstance(edge, str) and "->" in edge:
        edge = tuple(x.strip() for x in edge.split("->"))
    if (not isinstance(edge, (list, tuple)) or len(edge) != 2
            or not all(isinstance(n, str) for n in edge)):
        raise WorkbenchError(f"{what} takes an edge as (producer, consumer) node ids, "
                             f"e.g. ('n3', 'n4') or 'n3->n4', got {edge!r:.60}")
    return (edge[0], edge[1])


def _pairs(pairs, what: str) -> dict:
    """``pairs`` (a dict, or (name, value) pairs) as a dict, or the error saying so."""
    try:
        if isinstance(pairs, (dict, list, tuple)):
            return dict(pairs)
    except (TypeError, ValueError):
        pass
    raise WorkbenchError(f"{what} takes a dict or (name, value) pairs, got {pairs!r:.60}")


def _params(params, what: str) -> tuple[tuple[str, int], ...]:
    items = _pairs(params, what).items()
    for k, v in items:
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int):
            raise WorkbenchError(f"{what} takes launch parameters as name=int "
                                 f"(threads=128), got {k!r:.30}={v!r:.30}")
    if not items:
        raise WorkbenchError(f"{what} names no launch parameter (threads=128, ...)")
    return tuple(sorted(items))


@dataclass(frozen=True)
class MustFuse:
    """These ops run in one kernel; the planner may add others to it."""
    nodes: tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "nodes", _nodes(self.nodes, "must-fuse"))
        if len(self.nodes) < 2:
            raise WorkbenchError("must-fuse needs at least two nodes (one op is always "
                                 "in one kernel)")

    def __str__(self) -> str:
        return "must-fuse " + " ".join(self.nodes)


@dataclass(frozen=True)
class Cut:
    """The value ``edge[0]`` makes and ``edge[1]`` reads leaves its kernel: the two ops
    are never in one kernel."""
    edge: tuple[str, str]

    def __post_init__(self):
        object.__setattr__(self, "edge", _edge(self.edge, "cut"))

    def __str__(self) -> str:
        return f"cut {self.edge[0]}->{self.edge[1]}"


@dataclass(frozen=True)
class FixedScheme:
    """The edge is inside one kernel and passed by ``scheme`` (local, regional, global)."""
    edge: tuple[str, str]
    scheme: str

    def __post_init__(self):
        object.__setattr__(self, "edge", _edge(self.edge, "a fixed scheme"))
        sc = getattr(self.scheme, "value", self.scheme)
        if sc not in SCHEME_NAMES:
            raise WorkbenchError(f"unknown stitch scheme {self.scheme!r:.30} for edge "
                                 f"{self.edge[0]}->{self.edge[1]}; choose one of "
                                 + ", ".join(SCHEME_NAMES))
        object.__setattr__(self, "scheme", sc)

    def __str__(self) -> str:
        return f"scheme {self.edge[0]}->{self.edge[1]} {self.scheme}"


@dataclass(frozen=True)
class FixedMapping:
    """The kernel of exactly these ops maps its rows to threads by ``mapping``."""
    nodes: tuple[str, ...]
    mapping: str

    def __post_init__(self):
        object.__setattr__(self, "nodes", _nodes(self.nodes, "a fixed mapping"))
        mapping = getattr(self.mapping, "value", self.mapping)
        if not isinstance(mapping, str) or not mapping:
            raise WorkbenchError(f"a fixed mapping is a name (warp, block, split, thread, "
                                 f"auto), got {self.mapping!r:.40}")
        object.__setattr__(self, "mapping", mapping)

    def __str__(self) -> str:
        return f"mapping {' '.join(self.nodes)} {self.mapping}"


@dataclass(frozen=True)
class FixedLaunch:
    """The kernel of exactly these ops launches with ``params`` (threads,
    rows_per_block, splits, a GEMM's tiles...: what ``Plan.set_launch`` takes)."""
    nodes: tuple[str, ...]
    params: tuple[tuple[str, int], ...]

    def __post_init__(self):
        object.__setattr__(self, "nodes", _nodes(self.nodes, "fixed launch parameters"))
        object.__setattr__(self, "params", _params(self.params, "fixed launch parameters"))

    def __str__(self) -> str:
        return (f"launch {' '.join(self.nodes)} "
                + " ".join(f"{k}={v}" for k, v in self.params))


@dataclass(frozen=True)
class Pinned:
    """The kernel of exactly these ops, as it was when pinned: its user-set schemes
    ((value, scheme) pairs), mapping ("" for the rule's) and launch parameters."""
    nodes: tuple[str, ...]
    schemes: tuple[tuple[str, str], ...] = ()
    mapping: str = ""
    launch: tuple[tuple[str, int], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "nodes", _nodes(self.nodes, "pinned"))
        schemes = tuple((v, getattr(sc, "value", sc))
                        for v, sc in _pairs(self.schemes, "pinned schemes").items())
        if not all(isinstance(v, str) and sc in SCHEME_NAMES for v, sc in schemes):
            raise WorkbenchError(f"pinned schemes are (value, scheme) pairs with a scheme "
                                 f"of {', '.join(SCHEME_NAMES)}, got {self.schemes!r:.60}")
        object.__setattr__(self, "schemes", schemes)
        if not isinstance(self.mapping, str):
            raise WorkbenchError(f"a pinned mapping is a name or '', got {self.mapping!r:.40}")
        object.__setattr__(self, "launch", _params(self.launch, "pinned launch parameters")
                           if self.launch else ())

    def __str__(self) -> str:
        return "pinned " + " ".join(self.nodes)


Constraint = Union[MustFuse, Cut, FixedScheme, FixedMapping, FixedLaunch, Pinned]
KINDS = {"must_fuse": MustFuse, "cut": Cut, "scheme": FixedScheme,
         "mapping": FixedMapping, "launch": FixedLaunch, "pinned": Pinned}
_KIND_OF = {cls: name for name, cls in KINDS.items()}


def as_constraint(c) -> Constraint:
    if type(c) not in _KIND_OF:
        raise WorkbenchError(f"not a constraint: {c!r:.60}; use MustFuse, Cut, FixedScheme, "
                             "FixedMapping, FixedLaunch or Pinned (workbench.fusion.constraints)")
    return c


def to_dict(c: Constraint) -> dict:
    d = {"kind": _KIND_OF[type(c)]}
    for k, v in vars(c).items():
        d[k] = [list(x) if isinstance(x, tuple) else x for x in v] \
            if isinstance(v, tuple) else v
    return d


def from_dict(d: dict) -> Constraint:
    try:
        cls = KINDS[d["kind"]]
        fields = {k: (tuple(tuple(x) if isinstance(x, list) else x for x in v)
                      if isinstance(v, list) else v)
                  for k, v in d.items() if k != "kind"}
        return cls(**fields)
    except (KeyError, TypeError, ValueError) as e:
        raise WorkbenchError(f"not a constraint: {json.dumps(d)[:80]} ({e}); kinds are "
                             + ", ".join(KINDS)) from None


@dataclass(frozen=True)
class Constraints:
    """An ordered set of constraints (stating one twice keeps one)."""
    items: tuple = ()

    def __iter__(self) -> Iterator[Constraint]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, c) -> bool:
        return c in self.items

    def __str__(self) -> str:
        return "; ".join(map(str, self.items)) or "no constraints"

    def add(self, *cs: Constraint) -> "Constraints":
        new = [as_constraint(c) for c in cs if c not in self.items]
        return Constraints(self.items + tuple(dict.fromkeys(new)))

    def remove(self, *cs: Constraint) -> "Constraints":
        cs = tuple(as_constraint(c) for c in cs)
        missing = [str(c) for c in cs if c not in self.items]
        if missing:
            raise WorkbenchError(f"no such constraint: {', '.join(missing)}; the "
                                 f"constraints are: {self}")
        return Constraints(tuple(c for c in self.items if c not in cs))

    def of(self, cls) -> list:
        return [c for c in self.items if isinstance(c, cls)]

    def to_json(self) -> str:
        return json.dumps([to_dict(c) for c in self.items])

    @staticmethod
    def from_json(text: str) -> "Constraints":
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as e:
            raise WorkbenchError(f"constraints JSON could not be read: {e}") from None
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            raise WorkbenchError("constraints JSON is a list of objects with a 'kind'")
        return Constraints(tuple(from_dict(d) for d in data))

    @staticmethod
    def of_items(cs: Iterable) -> "Constraints":
        return Constraints().add(*cs)
