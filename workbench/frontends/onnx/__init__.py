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
  (``_Builder``), the per-node context handed to handlers (``_Ctx``, ``_Scope``),
  ``_malformed`` and ``_axis``, and the handler registry (``_handles``,
  ``supported_op_types``).
- the handlers, one function per ONNX op type (or family) mapping a node to workbench
  primitives or composites; importing a module fills the registry:
  :mod:`.handlers_elementwise` (arithmetic, comparisons, casts, activations),
  :mod:`.handlers_reduce` (reductions, Softmax, Layer/RMS/Batch normalization),
  :mod:`.handlers_matmul` (MatMul, Gemm), :mod:`.handlers_layout` (Reshape ...
  Gather), :mod:`.handlers_constants` (Shape, Size, Constant, ConstantOfShape,
  Range), :mod:`.handlers_index` (GatherElements, GatherND, Scatter*, ArgMax/ArgMin,
  TopK, CumSum, Trilu, OneHot) and :mod:`.handlers_nn` (convolution, pooling,
  group/instance normalization, Resize, Pad, Einsum, Mod, Round);
  :mod:`.handlers_gradients` (onnxruntime-training's ``com.microsoft`` gradient ops,
  registered as ``com.microsoft.<op>``).
- :mod:`.training` -- a training graph as onnxruntime-training's ``generate_artifacts``
  writes it: its gradient accumulators unwrapped, its backward marked.
- :mod:`.reading` -- the model read and checked: ``input_shapes``, the ONNX checker,
  the opset range.
- :mod:`.importer` -- :func:`load_onnx`: walking the model's nodes (``_Importer``).
- :mod:`.folding` -- constant folding (``fold``, ``_Scratch``).
- :mod:`.inference` -- each node's result held against ONNX's shape inference.
- :mod:`.locations` -- where a refused node sits in the model (``NodeLocator``).
"""
from __future__ import annotations

# (importing a handler module registers its op handlers)
from . import handlers_constants  # noqa: F401
from . import handlers_elementwise  # noqa: F401
from . import handlers_gradients  # noqa: F401
from . import handlers_index  # noqa: F401
from . import handlers_layout  # noqa: F401
from . import handlers_matmul  # noqa: F401
from . import handlers_nn  # noqa: F401
from . import handlers_reduce  # noqa: F401
from . import handlers_sequence  # noqa: F401
from .common import MAX_OPSET, MIN_OPSET, supported_op_types
from .importer import load_onnx

__all__ = ["MAX_OPSET", "MIN_OPSET", "load_onnx", "supported_op_types"]
