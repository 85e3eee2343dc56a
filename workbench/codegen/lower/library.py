"""The opaque template: one library call (a matmul or convolution the host BLAS or
cuBLAS computes), no loops of ours."""
from __future__ import annotations

from ...device import Device
from ...fusion.plan import Group
from ...ir import Graph
from ...ops import get_op
from ..kernel import Kernel, Launch, LibraryCall
from .base import Lowerer


class LibraryCallLowerer(Lowerer):
    """An opaque group: its one node a library call."""

    def lower(self, name: str) -> Kernel:
        node = self.g.node(self.group.nodes[0])
        # a result nobody reads (a dead node) still needs somewhere to go
        outs = tuple(self.buffers.get(o) or self.workspace(o, self.g.value(o).dtype,
                                                           self.g.value(o).numel)
                     for o in node.outputs)
        # positional for the call (matmul(x, x) names x twice); params hold each once
        call = LibraryCall(node.op, node.attrs, tuple(self.buffers[i] for i in node.inputs),
                           outs)
        flops = get_op(node.op).library_flops([self.g.value(i).shape for i in node.inputs],
                                              self.g.value(node.outputs[0]).shape,
                                              node.attr_map)
        params = tuple(sorted(self.buffers.values(), key=lambda b: (b.is_output, b.name)))
        return Kernel(name, self.group.id, "opaque", params, (), Launch(1, 1), 0, call,
                      int(flops))


def lower_library_call(g: Graph, group: Group, device: Device, name: str) -> Kernel:
    """The kernel of an opaque group."""
    return LibraryCallLowerer(g, group, device).lower(name)
