"""The greedy planners: ``none``, ``xla`` and ``rules``.

- ``none``: one kernel per op -- the baseline every speedup is measured against.
- ``xla``: the XLA/TVM baseline. Greedy producer-into-consumer fusion in which a
  reduction ends its kernel (XLA's reduction is a fusion root; TVM's reduce group
  takes no consumers): elementwise chains, and a reduction with its elementwise
  inputs. LayerNorm is several kernels.
- ``rules``: the same greedy walk with the row-reduction template: each op tries to
  join the kernel of each of its producers; the join happens when the producer is not
  a library call and the merged group is legal (acyclic, and one schedule template
  fits: elementwise chains, a reduction with its elementwise inputs *and consumers* --
  the per-row result reaches them through shared memory, regional stitching inside
  one template -- and reductions over the same rows such as LayerNorm's two means).
  Every decision is logged with its reason. An expensive producer (exp, log, erf...)
  does not join a consumer that broadcasts it into a wider loop unless recomputing it
  there costs less than the fusion saves (:mod:`.recompute`). Then each matmul takes the kernel
  consuming its result as its epilogue wherever the ``gemm`` template fits
  (:mod:`.epilogue`; CPU devices).
"""
from __future__ import annotations

from ..errors import FusionRefused
from ..ir import Graph
from ..ops import Kind
from ..device import Device
from .partition import Decision, Partition
from .plan import Plan
from .analysis import analyze
from .epilogue import absorb_epilogues
from .recompute import recompute_refusal
from .regions import region_key
from .row_fit import RowFit


class _FittedRegions:
    """The regions that fitted, looked up by ``region_key``, whose keys are computed
    only when a region of the same size is looked up: a chain growing into one kernel
    (134 row layers) asks about a larger region at every step, never found, and its
    keys -- each a pass over the whole region -- made the planner quadratic in them.
    (A key holds one entry per node, so regions of different sizes never match.)"""

    def __init__(self):
        self._keys: set[tuple] = set()
        self._pending: dict[int, list[tuple[str, ...]]] = {}

    def add(self, nodes: tuple[str, ...]) -> None:
        self._pending.setdefault(len(nodes), []).append(nodes)

    def has(self, g: Graph, nodes: tuple[str, ...]) -> bool:
        if len(nodes) not in self._pending:
            return False
        self._keys.update(region_key(g, ns) for ns in self._pending.pop(len(nodes)))
        self._pending[len(nodes)] = []       # (this size asked about: keys made from now)
        return region_key(g, nodes) in self._keys


def plan_none(g: Graph, model, device: Device, matmul_precision: str = "float32"
              ) -> tuple[Plan, list[Decision]]:
    return Plan.singletons(g, device, matmul_precision), []


def rules_partition(g: Graph, reduction_ends_kernel: bool = False, *,
                    device: Device) -> tuple[Partition, list[Decision]]:
    """The ``rules`` planner's partition and log (see the module docstring); with
    ``reduction_ends_kernel``, the ``xla`` planner's.

    Equivalent to merging with ``make_group`` and ``check_acyclic`` at every step, but
    linear on long chains: two groups without reductions always merge into one
    elementwise kernel (so no schedule is analysed until the end; a merge with a
    reduction, or into a pooling window, is checked by ``analyze``), the groups are
    made once at the end, and the
    cycle search skips groups of nodes not yet visited -- such a group holds one op
    that reads only from earlier ops, and can only feed ops later still, never the
    selection.
    """
    part = Partition(g)
    log: list[Decision] = []
    fitted = _FittedRegions()       # the merged groups that fitted, by region_key
    rows = RowFit(g, part, device)  # row groups' checks kept per group (row_fit.py)
    for node in g.nodes:
        if part.kind[node.id] is Kind.opaque:
            continue
        here = part.index[node.id]
        for i in dict.fromkeys(node.inputs):
            prod = g.producer.get(i)
            if prod is None or part.kind[prod.id] is Kind.opaque:
                continue
            mine, theirs = part.owner[node.id], part.owner[prod.id]
            if mine == theirs:
                continue
            why = part.cycle({mine, theirs}, horizon=here)
            if why is None and reduction_ends_kernel and part.has_reduce(theirs):
                why = ("a reduction ends its kernel (XLA/TVM): its consumers start a "
                       "new one")
            # an expensive producer broadcast into a wider loop would be recomputed for
            # every element of it: joined only where the price says it pays
            if (why is None and g.value(node.outputs[0]).numel > g.value(i).numel
                    and not (part.has_reduce(mine) or part.has_reduce(theirs))):
                why = recompute_refusal(g, part.members[theirs], part.members[mine],
                                        device)
            # (a window is checked too: joined to its producer before its reduction
            # joins it, its taps would be written out -- analysis.py refuses that)
            fit = None
            if why is None and (part.has_reduce(mine) or part.has_reduce(theirs)
                                or node.op == "window"):
                # what the merge changes, checked incrementally where that proves it
                # fits (a growing row kernel: linear, not quadratic); else analysed
                fit = rows.check(mine, theirs)
                ns = () if fit is not None else tuple(sorted(
                    part.members[mine] + part.members[theirs], key=part.index.__getitem__))
                # a model's repeated layers ask again for kernels of the same shape:
                # one that fitted fits (a refusal is analysed again for its wording)
                if fit is None and not fitted.has(g, ns):
                    try:
                        analyze(g, ns, device=device)
                        fitted.add(ns)
                    except FusionRefused as e:
                        why = str(e)
            if why is not None:
                log.append(Decision("not fused", (prod.id, node.id), why))
                continue
            rows.merged(mine, theirs, part.merge({mine, theirs}), fit)
            log.append(Decision("fused", (prod.id, node.id),
                                f"{prod.op} into {node.op}: {i} stays on chip"))
    return part, log


def plan_rules(g: Graph, model, device: Device, matmul_precision: str = "float32"
               ) -> tuple[Plan, list[Decision]]:
    part, log = rules_partition(g, device=device)
    log += absorb_epilogues(g, part, device)
    return part.to_plan("rules", device, matmul_precision), log


def plan_xla(g: Graph, model, device: Device, matmul_precision: str = "float32"
             ) -> tuple[Plan, list[Decision]]:
    part, log = rules_partition(g, reduction_ends_kernel=True, device=device)
    return part.to_plan("xla", device, matmul_precision), log
