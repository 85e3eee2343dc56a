"""A distributed program: a graph of global shapes, the number of ranks, and the
placements of its inputs and constants (every other value's follows by propagation).

JSON form (``"format": "workbench.distributed"``)::

    {"format": "workbench.distributed", "version": 1, "ranks": 2,
     "placements": {"grad": "P(sum)", "w1": "S(1)"},     # absent: R
     "graph": {"format": "workbench.graph", ...}}         # the graph's own JSON

The printer shows each value's placement beside its global type, and each rank's
local shape where it differs.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Mapping

from ..errors import GraphError
from ..ir.graph import Graph
from ..ir.serialize import (check_envelope, from_json as graph_from_json,
                             to_json as graph_to_json)
from ..arguments import count
from .placement import Placement, Replicate, local_shape, parse_placement
from .propagate import propagate

FORMAT, VERSION = "workbench.distributed", 1
MAX_RANKS = 1 << 16


@dataclass(frozen=True, eq=False)
class DistProgram:
    """``graph`` (global shapes) run on ``ranks`` ranks, its leaves placed by
    ``leaves`` (value name -> placement; absent: replicated)."""
    graph: Graph
    ranks: int
    leaves: Mapping[str, Placement] = field(default_factory=dict)

    def __post_init__(self):
        count(self.ranks, "ranks", 1, MAX_RANKS)
        leaves = {k: parse_placement(v) for k, v in dict(self.leaves).items()}
        for k in leaves:
            if k not in self.graph.inputs and k not in self.graph.constants:
                raise GraphError(f"placement given for {k!r}, which is no input or constant "
                                 f"of graph {self.graph.name!r}")
        object.__setattr__(self, "leaves", leaves)

    @cached_property
    def placements(self) -> dict[str, Placement]:
        """Every value's placement (PlacementError where one is illegal)."""
        return propagate(self.graph.verify(), self.leaves, self.ranks)

    def verify(self) -> "DistProgram":
        self.placements
        return self

    def local_shape(self, name: str) -> tuple[int, ...]:
        return local_shape(self.graph.value(name).shape, self.placements[name], self.ranks)

    def with_ranks(self, ranks: int) -> "DistProgram":
        """The same program on another number of ranks (its collectives' group size
        follows)."""
        from .rewrite import set_group_size
        return DistProgram(set_group_size(self.graph, ranks), ranks, self.leaves)

    def __str__(self) -> str:
        return format_program(self)

    def __repr__(self) -> str:
        return f"DistProgram({self.graph.name!r}, ranks={self.ranks})"


_LINE = re.compile(r"^(  n\d+: )(.+?)(: \w+\[[^\]]*\])( = .*)$")


def format_program(d: DistProgram) -> str:
    """The graph's text with ``@placement`` after every value's type (and ``local
    [..]`` where a rank holds less than the whole)."""
    pl = d.placements

    def tag(name: str) -> str:
        loc = d.local_shape(name)
        extra = f" local{list(loc)}" if loc != d.graph.value(name).shape else ""
        return f" @{pl[name]}{extra}"

    lines = str(d.graph).splitlines()
    head = [f"// {d.ranks} ranks"] + [
        f"//   {k}{tag(k)}" for k in (*d.graph.inputs, *d.graph.constants)
        if not isinstance(pl[k], Replicate)]
    out = []
    for line in lines:
        m = _LINE.match(line)
        if m and m.group(2) in pl:
            line = f"{m.group(1)}{m.group(2)}{m.group(3)}{tag(m.group(2))}{m.group(4)}"
        out.append(line)
    return "\n".join(head + out)


def to_json(d: DistProgram) -> dict:
    return {"format": FORMAT, "version": VERSION, "ranks": d.ranks,
            "placements": {k: str(v) for k, v in d.leaves.items()
                           if not isinstance(v, Replicate)},
            "graph": graph_to_json(d.graph)}


def from_json(obj: dict) -> DistProgram:
    check_envelope(obj, FORMAT, VERSION, "distributed program")
    pls = obj.get("placements", {})
    if not isinstance(pls, dict):
        raise GraphError("\"placements\" must map value names to R, S(dim) or P(op)")
    d = DistProgram(graph_from_json(obj.get("graph")), obj.get("ranks"), pls)
    return d.verify()


def save_json(d: DistProgram, path) -> None:
    Path(path).write_text(json.dumps(to_json(d), indent=1) + "\n")


def is_distributed_file(path) -> bool:
    """Whether ``path`` is a .json file holding a distributed program."""
    p = Path(path)
    if p.suffix != ".json" or not p.is_file():
        return False
    with open(p, "rb") as f:
        return FORMAT.encode() in f.read(256)


def load_json(path) -> DistProgram:
    try:
        obj = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise GraphError(f"cannot read distributed program {str(path)!r:.80}: "
                         f"{type(e).__name__}") from None
    return from_json(obj)
