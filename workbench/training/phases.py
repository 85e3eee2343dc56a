"""Which part of a training step a node belongs to, read from its namespace
(``Origin.source``) as ``from_torch(..., training=True)`` sets it: ``backward`` and
``backward.<...>`` for the backward pass, ``optimizer`` and ``optimizer.<name>`` for the
optimizer step, anything else the forward pass. The ONNX import of a training graph
writes ``backward/<the node's scope>`` (a "/"-scoped source, as ONNX names are)."""
from __future__ import annotations

import re

from ..ir import Node

BACKWARD = "backward"    # namespace of the backward pass's nodes
OPTIMIZER = "optimizer"  # ... and of the optimizer step's


def phase(node: Node) -> str:
    """"forward", "backward" or "optimizer"."""
    head = re.split(r"[./]", node.origin.source, 1)[0] if node.origin is not None else ""
    return head if head in (BACKWARD, OPTIMIZER) else "forward"
