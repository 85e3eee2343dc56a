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


# ---------------------------------------------------------------------------------
# what both importers say about a node they cannot import: where it is, and the way
# around it -- worded once here, so one limit reads the same from ONNX and from torch

def data_dependent(what: str) -> str:
    """The reason for a value that must be known at import but is computed."""
    return (f"data-dependent {what} (the workbench compiles for static shapes and "
            "values; make it a constant)")


def frame_of(stack_trace: str | None) -> str:
    """``file.py:123`` of the innermost frame of a torch stack trace ('' if none)."""
    import re
    frames = re.findall(r'File "([^"]+)", line (\d+)', stack_trace or "")
    if not frames:
        return ""
    path, line = frames[-1]
    return f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}"


def located(name: str, module_path: str | None, stack_trace: str | None = None) -> str:
    """A node as an error names it: ``index in encoder.layer.0.attention.self``, with
    the source line when torch recorded one (``(modeling_bert.py:661)``)."""
    where = f"{name} in {module_path}" if module_path else f"{name} at the top level"
    frame = frame_of(stack_trace)
    return f"{where} ({frame})" if frame else where


# Ways around a missing op, by ONNX op type or ATen op (overload packet) name.
_SDPA = ('load the transformers model with attn_implementation="eager" (plain matmul '
         'and softmax attention)')
_DATA_SHAPE = ("its result's shape depends on the data; keep shapes static, e.g. "
               "torch.where(mask, x, 0) instead of x[mask]")
_TRAINING = "import the model in inference mode (model.eval())"
WORKAROUNDS = {
    "scaled_dot_product_attention": _SDPA,
    "_scaled_dot_product_flash_attention": _SDPA,
    "_scaled_dot_product_flash_attention_for_cpu": _SDPA,
    "_scaled_dot_product_efficient_attention": _SDPA,
    "_scaled_dot_product_cudnn_attention": _SDPA,
    "Attention": _SDPA,
    "NonZero": _DATA_SHAPE, "nonzero": _DATA_SHAPE, "masked_select": _DATA_SHAPE,
    "Unique": _DATA_SHAPE, "unique": _DATA_SHAPE, "_unique2": _DATA_SHAPE,
    "Compress": _DATA_SHAPE,
    "Loop": "export with static control flow: Python loops over fixed ranges unroll "
            "under torch.onnx.export; or export the loop alone (a constant trip count) "
            "and load it as a repeat: workbench.frontends.onnx_loop.load_onnx_repeat",
    "If": "export with static control flow (no branches on tensor values)",
    "Scan": "export with static control flow: Python loops over fixed ranges unroll "
            "under torch.onnx.export; or export the scan alone and load it as a "
            "repeat: workbench.frontends.onnx_loop.load_onnx_repeat",
    "native_dropout": _TRAINING, "_native_batch_norm_legit": _TRAINING,
    "_native_batch_norm_legit_functional": _TRAINING,
    "Upsample": "re-export at opset 13 or newer (Resize replaces it)",
    "Scatter": "re-export at opset 13 or newer (ScatterElements replaces it)",
}
_DOMAIN_HINT = ("export with the standard ONNX opset only (skip onnxruntime's "
                "transformer optimizer and custom-domain fusions)")


def workaround(op: str, domain: str = "") -> str | None:
    """The way around a missing op (ONNX op type or ATen name), or None."""
    if domain not in ("", "ai.onnx"):
        return _DOMAIN_HINT
    return WORKAROUNDS.get(op)
