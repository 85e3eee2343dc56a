"""The elementwise template: flat loops over a group's outputs, one per distinct shape.

On a CPU two forms move elements more cheaply than one flat index: a loop over rows
apart from the last axis where a layout op moves elements (``_row_loop``), and a loop
split at a concat's parts, each part's rows reading that part alone (``_split_concat``).
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ...device import Device
from ...fusion.gemm.legality import VIEWS
from ...fusion.geometry import flat_vector
from ...fusion.plan import Group
from ...ir import Graph
from ...ops import Index, Kind, get_op
from ...ops.index import mod
from ..kernel import Kernel
from ..kir import If, Let, Load, Loop, Store
from .base import Lowerer, Scope

# an elementwise kernel moving elements loops over rows apart from columns only when a
# row is at least this long (a shorter inner loop costs more than the divisions it saves)
ROW_LOOP_MIN = 16
# a concat's loop is split at its parts where the run after its axis is at least this
CONCAT_SPLIT_RUN = 4


class ElementwiseLowerer(Lowerer):
    """An elementwise group (or a stitched kernel's elementwise phase)."""

    def lower_body(self) -> list:
        return self._elementwise()

    def _elementwise(self):
        # One loop per distinct shape ("independent" packing when >1), see _loops.
        by_shape = self._loops()
        body = []
        for k, (shape, outs) in enumerate(by_shape.items()):
            n = int(np.prod(shape, dtype=np.int64)) if shape else 1
            var = "i" if len(by_shape) == 1 else f"i{k}"
            concat = self._split_concat(shape)
            if concat is not None:
                body.append(self._split_at_concat(concat, shape, outs, var))
                continue
            scope = Scope()
            rows = self._row_loop(shape)
            if rows:
                # rows apart, the last axis innermost: what the layout ops read is found
                # once per row, and a row of a transposed or sliced input is contiguous
                # (one flat index would need a division per element and per axis)
                r, c = f"r{var}", f"c{var}"
                idx = Index.from_runs(shape, [(r, list(range(len(shape) - 1))),
                                              (c, [len(shape) - 1])])
            else:
                idx = Index.flat(var, shape)
            for o, v in outs:
                e = self.at(scope, v, idx)
                scope.stmts.append(Store(self.buffers[o], idx.offset() if rows else var, e,
                                         node=self._made_by(o)))
            if rows:
                body.append(Loop(r, rows, "grid", (Loop(c, shape[-1], "block",
                                                        tuple(scope.stmts)),)))
            else:
                body.append(Loop(var, n, "flat", tuple(scope.stmts), self._flat_vector(
                    n, scope.stmts, var)))
        return body

    def _loops(self) -> dict[tuple, list[tuple[str, str]]]:
        """The group's outputs by the shape of the loop storing them, each paired with
        the value computed for it: one loop per distinct shape, an output computed as
        itself -- except where several outputs are views (reshape, squeeze, unsqueeze)
        of one value, or it and its views. Those are all stored from one loop over that
        value's shape, each its element: a view keeps the row-major order, so the
        offsets agree, and the value is computed once per element (BERT's GELU backward
        stored ``mul_16`` and its reshape ``view_25`` from two loops, erf and exp twice:
        0.47 ms against 0.15 ms for the chain once)."""
        sources = {o: self._view_source(o) for o in self.io.outputs}
        shared = Counter(sources.values())
        loops: dict[tuple, list[tuple[str, str]]] = {}
        for o, src in sources.items():
            v = src if shared[src] > 1 else o
            loops.setdefault(self.g.value(v).shape, []).append((o, v))
        return loops

    def _view_source(self, v: str) -> str:
        """The value ``v`` is a view of, through the group's view ops (``v`` itself
        when no view op of the group made it)."""
        n = self.producer.get(v)
        while n is not None and n.op in VIEWS:
            v = n.inputs[0]
            n = self.producer.get(v)
        return v

    @staticmethod
    def _flat_vector(n: int, stmts, var: str) -> int:
        """A flat loop's vector, by geometry.flat_vector's rule over the buffers the loop
        moves at its own index. (The launch is sized by the schedule's, the same rule
        over the group's values: they differ only where a stitched phase also moves a
        wider workspace buffer, and then the grid-stride loop covers the difference.)"""
        at = [x.buf.dtype.itemsize for x in stmts
              if isinstance(x, (Load, Store)) and x.offset == var]
        return flat_vector(n, max(at, default=4))

    def _split_concat(self, shape):
        """The concat an elementwise loop over ``shape`` is split at on a CPU (None:
        not split): one whose result has that shape, joined along an axis before the
        last, whose every consumer in the group is elementwise at that shape (so the
        loop's index is its index). Unsplit, each element reads every part and keeps
        one: DenseNet's concat of 25 parts, then BatchNorm and ReLU, read 25 times its
        data (2 ms a kernel at 224 px; onnxruntime copies each part once)."""
        if self.device.is_gpu or len(shape) < 2:
            return None
        g = self.g
        best = None
        for nid in self.group.nodes:
            n = g.node(nid)
            if n.op != "concat" or g.value(n.outputs[0]).shape != tuple(shape):
                continue
            axis = int(n.attr("axis")) % len(shape)
            if axis == len(shape) - 1 or math.prod(shape[axis + 1:]) < CONCAT_SPLIT_RUN:
                continue
            if all(self._elementwise_downstream(o, shape) for o in n.outputs) and \
                    (best is None or len(n.inputs) > len(best.inputs)):
                best = n
        return best

    def _elementwise_downstream(self, v: str, shape) -> bool:
        """Every op of the group reading ``v``, and what reads theirs, is elementwise
        with a result of ``shape`` (each op looked at once: a chain of diamonds, x *
        sigmoid(x) after x * sigmoid(x), would double the paths at each)."""
        todo, seen = [v], set()
        while todo:
            for n in self.g.consumers.get(todo.pop(), ()):
                if n.id not in self.members or n.id in seen:
                    continue
                seen.add(n.id)
                if get_op(n.op).kind is not Kind.elementwise or \
                        any(self.g.value(o).shape != tuple(shape) for o in n.outputs):
                    return False
                todo.extend(n.outputs)
        return True

    def _split_at_concat(self, concat, shape, outs, var: str) -> Loop:
        """The loop over ``shape`` with a row per index up to the concat's axis and the
        rest of the index contiguous within it: each row falls in one part, and the
        row's elements are computed by that part's loop, reading that input alone."""
        axis = int(concat.attr("axis")) % len(shape)
        r, c = f"r{var}", f"c{var}"
        idx = Index.from_runs(shape, [(r, list(range(axis + 1))),
                                      (c, list(range(axis + 1, len(shape))))])
        at = self.fresh()
        body: list = [Let(at, self.index_dtype, mod(r, shape[axis]), concat.id)]
        cols = math.prod(shape[axis + 1:])
        start = 0
        for part, src in enumerate(concat.inputs):
            n = self.g.value(src).shape[axis]
            scope = Scope()
            self.concat_part[concat.id] = part
            for o, v in outs:
                e = self.at(scope, v, idx)
                scope.stmts.append(Store(self.buffers[o], idx.offset(), e,
                                         node=self._made_by(o)))
            body.append(If(f"{at} >= {start} && {at} < {start + n}",
                           (Loop(c, cols, "block", tuple(scope.stmts)),)))
            start += n
        del self.concat_part[concat.id]
        return Loop(r, math.prod(shape[:axis + 1]), "grid", tuple(body))

    def _row_loop(self, shape) -> int:
        """Rows of an elementwise kernel looped apart from its last axis (0: one flat
        loop): on a CPU, when a layout op moves elements (a transpose, slice, concat..:
        index arithmetic per axis) or an operand broadcasts (:meth:`_broadcasts`), and
        the rows are long enough to vectorize. A GPU keeps the flat grid-stride loop
        (coalesced either way)."""
        if self.device.is_gpu or len(shape) < 2 or shape[-1] < ROW_LOOP_MIN:
            return 0
        moves = any(get_op(self.g.node(n).op).kind is Kind.layout
                    and self.g.node(n).op not in VIEWS for n in self.group.nodes)
        rows = math.prod(shape[:-1])
        return rows if (moves or self._broadcasts(shape)) and rows > 1 else 0

    def _broadcasts(self, shape) -> bool:
        """Whether an elementwise op of the loop over ``shape`` reads an operand
        broadcast over some of its axes (a bias over the rows, a per-row scale). In one
        flat loop its element is found per element, ``i % 4096`` (a gather in the
        vectorized loop: the fused GELU-with-bias loop ran 2x slower than its erf
        alone); with the rows outer, a bias row is read with plain contiguous loads and
        a per-row value once per row. (A scalar is loop-invariant either way.)"""
        for nid in self.group.nodes:
            n = self.g.node(nid)
            if get_op(n.op).kind is not Kind.elementwise or \
                    self.g.value(n.outputs[0]).shape != tuple(shape):
                continue
            if any(1 < self.g.value(v).numel < math.prod(shape) for v in n.inputs):
                return True
        return False


def lower_elementwise(g: Graph, group: Group, device: Device, name: str) -> Kernel:
    """The kernel of an elementwise group."""
    return ElementwiseLowerer(g, group, device).lower(name)
