"""Import per-rank code exported by ``torch.export`` -- tensor-parallel code that calls
``torch.distributed._functional_collectives`` -- as a :class:`DistProgram`.

The exported program is what one rank runs: its inputs have **local** shapes and its
collectives are ``_c10d_functional.all_reduce``, ``reduce_scatter_tensor``,
``all_gather_into_tensor`` (dim 0, as torch's are) and ``all_to_all_single`` (equal
splits: the IR's ``all_to_all_single``, its input placed ``S(0)``), each read through
``wait_tensor``.
The workbench's programs have **global** shapes, so the caller names each sharded input's
placement (``placements={"w1": "S(1)", "g": "P(sum)"}``, the rest replicated), and an
input sharded on dim d gets p times its local extent there. Every other op goes through
the ordinary torch importer's handlers (:mod:`workbench.frontends.torch`): the
placement rules admit only ops whose attributes read the same for local and global
shapes (elementwise, matmul, reductions over unsharded dims; layout ops on replicated
values). After the import every value's local shape under the propagated placements is
checked against the shape torch recorded on the rank: a wrong placement given for an
input is caught there, naming the value.

Refused, each with its reason (one :class:`UnsupportedOpError` listing them): a
reduction other than sum, avg or max; a collective over a group of another size than
``ranks`` or over a second process group (the workbench runs one group of all ranks);
``all_to_all_single`` with unequal split sizes (the blocks would differ from rank to
rank, which no placement states: a DTensor shard is equal on every rank); a sharded
parameter or buffer (the exported program holds one rank's slice: pass sharded weights
as inputs).

Exporting needs a process group in the exporting process; one process can stand for p
ranks with torch's fake group (its collectives return garbage, but export records
only shapes)::

    >>> from torch.testing._internal.distributed.fake_pg import FakeStore  # doctest: +SKIP
    >>> dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)  # doctest: +SKIP
    >>> d = from_export(ep, ranks=2, placements={"w1": "S(1)", "w2": "S(0)"})  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

from ..errors import GraphError
from .placement import Replicate, Shard, parse_placement
from .program import DistProgram
from .propagate import PlacementError

_REDUCE_OPS = ("sum", "avg", "max")


def from_export(module: Any, example_inputs: Any = (), *, ranks: int,
                placements: dict | None = None, name: str | None = None) -> DistProgram:
    """A ``torch.nn.Module`` (exported here, under the caller's process group) or an
    ``ExportedProgram`` of one rank's code, as a DistProgram on ``ranks`` ranks;
    ``placements``: input name -> placement (``"S(0)"``, ``"P(sum)"``...; default R)."""
    from torch.export import ExportedProgram

    from ..frontends.torch.importer import _decomposed, _export
    if isinstance(module, ExportedProgram):
        ep, label = module, "the exported program"
    else:
        label = f"module {type(module).__name__}"
        args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        ep = _export(module, args, label)
    ep = _decomposed(ep, label)
    placed = {k: parse_placement(v) for k, v in (placements or {}).items()}
    imp = _importer_class()(ep, name or type(module).__name__.replace("ExportedProgram",
                                                                       "exported_program"),
                            label, ranks, placed)
    try:
        graph = imp.run()
    except GraphError as e:
        if not placed or type(e) is not GraphError:
            raise
        raise GraphError(f"{e} -- the import's shapes are global, from the placements "
                         f"given ({ {k: str(p) for k, p in placed.items()} }): check "
                         "them") from None
    unknown = sorted(set(placed) - set(graph.inputs))
    if unknown:
        raise GraphError(f"placements name {unknown}, which are no inputs of {label} "
                         f"(inputs: {list(graph.inputs)}); a sharded weight must be an "
                         "input: the exported program holds one rank's slice of it")
    d = DistProgram(graph, ranks, {k: v for k, v in placed.items()}).verify()
    for v, want in imp.recorded.items():
        if v in d.placements and d.local_shape(v) != want:
            raise PlacementError(
                f"{label}: {v!r} is {d.placements[v]} of {list(d.graph.value(v).shape)}, "
                f"so {list(d.local_shape(v))} on each rank, but torch recorded "
                f"{list(want)} on the rank; check the placements given for the inputs "
                f"({ {k: str(p) for k, p in placed.items()} })")
    return d


def _importer_class():
    """The torch importer taught the functional collectives (built on first use: the
    torch frontend imports torch)."""
    import torch

    from ..frontends.torch.common import _Unsupported
    from ..frontends.torch.importer import _Importer

    class _DistImporter(_Importer):
        def __init__(self, ep, name, label, ranks, placed):
            super().__init__(ep, name, label)
            self.ranks, self.placed = ranks, placed
            self.recorded: dict[str, tuple] = {}   # value -> torch's local shape
            self.group: str | None = None
            plain_input = self.b.input

            def global_input(name, shape, *a, **k):   # local extent x p on a shard dim
                pl = placed.get(name, Replicate())
                if isinstance(pl, Shard):
                    shape = tuple(s * ranks if i == pl.dim % len(shape) else s
                                  for i, s in enumerate(shape))
                return plain_input(name, shape, *a, **k)
            self.b.input = global_input

        def _leaves(self):
            super()._leaves()
            for spec in self.ep.graph_signature.input_specs:
                if spec.target in self.placed and spec.arg.name not in self.placed:
                    raise GraphError(f"{self.label}: {spec.target!r} is a "
                                     f"{spec.kind.name.lower()}; the exported program holds "
                                     "one rank's slice of it -- pass a sharded weight as an "
                                     "input")

        def _result(self, node, name):
            if getattr(node.target, "namespace", "") != "_c10d_functional":
                return super()._result(node, name)
            self._start = len(self.b._nodes)
            return self._collective(node, name, list(node.args))

        def _collective(self, node, name, args):
            x = self.tensor(args[0].name)
            if name == "wait_tensor":
                return self.b.op("wait_tensor", x)
            group = args[-1]
            group = getattr(group, "group_name", group)
            if self.group is None:
                self.group = group
            elif group != self.group:
                raise _Unsupported(f"group {group!r} beside group {self.group!r}: the "
                                   "workbench runs one process group of all ranks")
            if name == "all_to_all_single":
                return self._all_to_all_single(node, x, args)
            if name in ("reduce_scatter_tensor", "all_gather_into_tensor"):
                size = args[2] if name == "reduce_scatter_tensor" else args[1]
                if size != self.ranks:
                    raise _Unsupported(f"group of {size} ranks; the program runs on "
                                       f"{self.ranks} (from_export(ranks=...))")
            if name == "all_gather_into_tensor":
                return self.b.op("all_gather", x, group_size=self.ranks, dim=0)
            op = args[1]
            if op not in _REDUCE_OPS:
                raise _Unsupported(f"reduce op {op!r}; the workbench's collectives reduce "
                                   f"by {', '.join(_REDUCE_OPS)}")
            if name == "all_reduce":
                return self.b.op("all_reduce", x, group_size=self.ranks, reduce_op=op)
            if name == "reduce_scatter_tensor":
                return self.b.op("reduce_scatter", x, group_size=self.ranks,
                                 reduce_op=op, dim=0)
            raise _Unsupported(None)

        def _all_to_all_single(self, node, x, args):
            # (torch records the split sizes it was given, or the equal ones it made for
            # None: one block of dim 0 per rank, received in rank order)
            rows = int(node.args[0].meta["val"].shape[0])
            for what, sizes in (("output", args[1]), ("input", args[2])):
                sizes = None if sizes is None else [int(v) for v in sizes]
                if sizes is not None and len(sizes) != self.ranks:
                    raise _Unsupported(f"all_to_all_single over {len(sizes)} ranks "
                                       f"({what}_split_sizes {sizes}); the program runs on "
                                       f"{self.ranks} (from_export(ranks=...))")
                if sizes is not None and len(set(sizes)) > 1 or rows % self.ranks:
                    raise _Unsupported(
                        f"all_to_all_single with unequal splits ({what}_split_sizes "
                        f"{sizes or rows / self.ranks}, {rows} rows on the rank): a "
                        "placement states equal shards on every rank, so the blocks of "
                        "each rank's rows must be equal -- pad the rows to a multiple of "
                        f"{self.ranks} and pass None (equal splits)")
            return self.b.op("all_to_all_single", x, group_size=self.ranks)

        def _bind(self, node, result):
            # (torch's shapes are the rank's, the import's global: compared after the
            # placements are propagated, in from_export)
            val = node.meta.get("val")
            if isinstance(result, (list, tuple)):
                result = [self._named(r, f"{node.name}.{i}") for i, r in enumerate(result)]
                pairs = zip(result, val if isinstance(val, (list, tuple)) else ())
            else:
                result = self._named(result, node.name)
                pairs = [(result, val)]
            for r, v in pairs:
                if isinstance(v, torch.Tensor) and hasattr(r, "name"):
                    self.recorded[r.name] = tuple(int(s) for s in v.shape)
            self.env[node.name] = result

    return _DistImporter

