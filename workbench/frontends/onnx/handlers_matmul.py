"""ONNX handlers of the matrix products: MatMul, a primitive, and Gemm, a composite
(:func:`workbench.ir.composites.gemm`). Conv and Einsum: :mod:`.handlers_nn`.

Importing this module registers them with :func:`~.common._handles`.
"""
from __future__ import annotations

from ...ir import composites
from .common import _Ctx, _handles


@_handles("Gemm")
def _gemm(c: _Ctx):
    return [composites.gemm(c.b, c.x(0), c.x(1), c.opt(2), alpha=float(c.attr("alpha", 1.0)),
                            beta=float(c.attr("beta", 1.0)), trans_a=int(c.attr("transA", 0)),
                            trans_b=int(c.attr("transB", 0)), source=c.display)]


@_handles("MatMul")
def _matmul(c: _Ctx):
    return [c.b.matmul(c.x(0), c.x(1))]
