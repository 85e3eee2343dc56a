"""What every model importer (ONNX, PyTorch) shares: the builder that keeps the
model's own value names, and the signal a handler raises for an op it cannot import.
"""
from __future__ import annotations

from ..ir import GraphBuilder, Node, Tensor, Value


class Unsupported(Exception):
    """A handler cannot import this use of an op; the reason (None: the op itself) is
    collected into the one UnsupportedOpError the import raises."""

    def __init__(self, reason: str | None):
        super().__init__(reason)
        self.reason = reason


class ImportBuilder(GraphBuilder):
    """A GraphBuilder whose invented names never take a name the model uses, that can
    give a freshly made value the model's name, and label new nodes with it.

    Handlers emit primitives through composites, which invent value names; once a
    model op is imported, its outputs take the model's names (``rename_recent``), so
    the graph reads like the model it came from."""

    def __init__(self, name: str, description: str, reserved: set[str]):
        super().__init__(name, description)
        self._reserved = reserved

    def _fresh(self, prefix: str) -> str:
        while True:
            name = super()._fresh(prefix)
            if name not in self._reserved:
                return name

    def rename_recent(self, old: str, new: str, since: int) -> Tensor:
        """Rename a value made by nodes[since:] (only those can refer to it yet)."""
        v = self._values.pop(old)
        self._values[new] = Value(new, v.shape, v.dtype)
        sub = lambda names: tuple(new if n == old else n for n in names)  # noqa: E731
        for i in range(since, len(self._nodes)):
            n = self._nodes[i]
            if old in n.inputs or old in n.outputs:
                self._nodes[i] = Node(n.id, n.op, sub(n.inputs), sub(n.outputs), n.attrs,
                                      n.name, n.origin)
        return Tensor(self, new)

    def made_since(self, name: str, since: int) -> bool:
        return any(name in n.outputs for n in self._nodes[since:])

    def label_since(self, since: int, label: str) -> None:
        """Give nodes[since:] the model's node name (for display)."""
        for i in range(since, len(self._nodes)):
            n = self._nodes[i]
            self._nodes[i] = Node(n.id, n.op, n.inputs, n.outputs, n.attrs, label, n.origin)
