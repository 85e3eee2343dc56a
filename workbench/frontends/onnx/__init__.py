"""ONNX importer: an ``onnx.ModelProto`` (or a .onnx file) to a workbench :class:`Graph`.

Contract:

- Default-domain opsets 13 to 28 (``MIN_OPSET``, ``MAX_OPSET``; 13-21 reviewed; 22-28
  only added element types to the ops mapped here). An older model imports when
  none of its op types changed definition between its opset and 13 (ONNX versions an
  op whenever its meaning changes); otherwise, and for newer ones, it is refused
  naming the ops that changed or the range. Attribute-vs-input changes between versions (Reduce* axes,
  Split sizes, Squeeze/Unsqueeze axes) are resolved by looking at what the node has.
- Graph inputs need static shapes; ``input_shapes`` fixes dynamic ones. Initializers
  (also those listed as graph inputs) and ``Constant`` nodes become constants.
- A node whose inputs are all constant is evaluated here and becomes a constant --
  with the workbench's own NumPy references, or ``onnx.reference`` for ops the
  workbench lacks (Shape, ConstantOfShape, Range...). ``Shape`` and ``Size`` of any
  value fold too, since every shape is static; so exported shape subgraphs vanish.
- Composites decompose through :mod:`workbench.ir.composites`; every primitive is
  tagged ``Origin(onnx_op_type, onnx_node_name)``.
- Every error is a :class:`WorkbenchError`: one :class:`UnsupportedOpError` listing
  every unsupported op type (or unsupported use of an op) with its nodes, or a
  :class:`GraphError` naming the file, value or node and the fix. A malformed model
  (an axis out of range, a Transpose perm that is no permutation, a negative Split
  size) is the model's fault and says so; only a disagreement with ONNX's own shape
  inference on a well-formed model is reported as an importer bug. Nothing else
  escapes: whatever a corrupt protobuf makes onnx or NumPy raise becomes a
  GraphError naming the model.
- Each node's output shape and dtype is checked against ONNX's own shape inference
  where that is static, so an importer mistake fails loudly instead of computing
  something else.

Example::

    >>> g = load_onnx("sample_graphs/layernorm_gelu.onnx")     # doctest: +SKIP
    >>> g.nodes[0].origin                                        # doctest: +SKIP
    Origin(composite='LayerNormalization', source='ln')

Modules:

- :mod:`.common` -- what the importer and the handlers share: ``MIN_OPSET``, the
  ONNX-to-workbench dtype table and dtype checks, ``_Unsupported``, the builder
  (``_Builder``), the per-node context handed to handlers (``_Ctx``, ``_Scope``) and
  the handler registry (``_handles``, ``supported_op_types``).
- :mod:`.handlers` -- one function per ONNX op type (or family), mapping a node to
  workbench primitives or composites; importing it fills the registry.
- :mod:`.handlers_index` -- the indexing family (GatherElements, GatherND, Scatter*,
  ArgMax/ArgMin, TopK, CumSum, Trilu, OneHot).
- :mod:`.handlers_nn` -- the handlers of CNN and audio ops: convolution, pooling,
  group/instance normalization, Resize, Pad, Einsum, Mod, Round.
- :mod:`.importer` -- :func:`load_onnx`: reading and checking the model, walking its
  nodes (``_Importer``) and constant folding (``_fold``, ``_Scratch``).
"""
from __future__ import annotations

from . import handlers_nn  # noqa: F401  (registers the CNN/audio op handlers)
from .common import MAX_OPSET, MIN_OPSET, supported_op_types
from . import handlers_index  # noqa: F401  (registers the indexing handlers)
from .importer import load_onnx

__all__ = ["MAX_OPSET", "MIN_OPSET", "load_onnx", "supported_op_types"]
