"""PyTorch importer: a ``torch.nn.Module`` and example inputs to a workbench
:class:`Graph`, through ``torch.export`` decomposed to core ATen ops.

Contract:

- ``from_torch(module, example_inputs)`` exports ``module.eval()`` with
  ``torch.export.export`` and ``run_decompositions()`` (core ATen). Shapes are static,
  those of the example inputs; ``dynamic=True`` is refused (symbolic shapes are out of
  scope).
- Parameters, buffers and tensor constants become graph constants named by module path;
  user inputs become graph inputs; outputs are flattened with readable names.
- Composite ATen ops decompose through :mod:`workbench.ir.composites`
  (``native_layer_norm`` -> LayerNormalization, ``_softmax`` -> Softmax, ``gelu`` ->
  Gelu, ``addmm`` -> Gemm...), so one definition of each op serves every backend.
- Every primitive is tagged ``Origin(kind, module_path)`` from the FX node's
  ``nn_module_stack``: the module path is the namespace the graph view collapses by.
- Nodes with only constant inputs are evaluated at import (the workbench's NumPy
  references, or torch itself for ops the workbench lacks) and become constants.
- Errors are WorkbenchErrors: one UnsupportedOpError listing every unsupported ATen op
  with its FX nodes, or a GraphError naming the cause and the fix.

torch is an optional extra: ``import workbench`` does not import it;
``workbench.from_torch`` imports this package on first use.

Example::

    >>> import torch, workbench as wb                                    # doctest: +SKIP
    >>> g = wb.from_torch(torch.nn.GELU(), (torch.randn(4, 8),))         # doctest: +SKIP
    >>> {n.origin.composite for n in g.nodes}                            # doctest: +SKIP
    {'Gelu'}

Modules:

- :mod:`.common` -- the dtype table, ``_Unsupported``, the builder, the per-node context
  handed to handlers (``_Ctx``) and the handler registry (``_handles``).
- :mod:`.handlers` -- one function per core ATen op (or family).
- :mod:`.handlers_index` -- advanced indexing, gather/scatter, argmax/topk/cumsum,
  triu/tril and the no-op views (alias, detach, lift_fresh_copy...).
- :mod:`.handlers_nn` -- convolution, pooling, group/instance norm, upsampling, padding,
  fmod/remainder/round.
- :mod:`.handlers_backward` -- ``slice_scatter`` / ``select_scatter`` (backward passes).
- :mod:`.importer` -- :func:`from_torch`: export, walk, fold, check, name outputs.
- :mod:`.training` -- ``from_torch_training``: forward + backward (+ optimizer step)
  in one graph, through torch's joint export (``docs/training.md``).
"""
from __future__ import annotations

from . import handlers_backward  # noqa: F401  (registers slice/select_scatter)
from . import handlers_index  # noqa: F401  (registers the indexing handlers)
from . import handlers_nn  # noqa: F401  (registers the CNN/audio op handlers)
from .common import supported_aten_ops
from .importer import from_torch

__all__ = ["from_torch", "supported_aten_ops"]
