"""Reductions over any set of axes, with keepdims.

Each reduction names its identity and its combine step as C text; codegen builds the
accumulation loop and (on the GPU) the block-wide tree from those two.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import GraphError
from .registry import Kind, Mapping_, OpDef, normalize_axes, register


@dataclass(frozen=True)
class Combiner:
    """How partial results merge: identity per compute kind and a binary step."""
    identity_f: str
    identity_i: str
    combine_f: str      # "{0}" accumulator, "{1}" new value
    combine_i: str
    finish_mean: bool = False
    # OpenMP reduction operator (float, integer) under which SIMD lanes may combine
    simd_op: tuple[str, str] = ("", "")

    def identity(self, kind: str, ctype: str) -> str:
        ident = self.identity_f if kind == "f" else self.identity_i
        return ident.replace("ITYPE", ctype)

    def combine(self, kind: str) -> str:
        return self.combine_f if kind == "f" else self.combine_i


COMBINERS = {
    "reduce_sum": Combiner("0.0f", "0", "({0} + {1})", "({0} + {1})", simd_op=("+", "+")),
    "reduce_mean": Combiner("0.0f", "0", "({0} + {1})", "({0} + {1})", finish_mean=True,
                            simd_op=("+", "+")),
    "reduce_prod": Combiner("1.0f", "1", "({0} * {1})", "({0} * {1})", simd_op=("*", "*")),
    # float max/min use the renderer's own declared reductions (wbmax/wbmin): OpenMP's
    # built-in max starts lanes at -FLT_MAX rather than -inf and may drop NaNs
    "reduce_max": Combiner("(-INFINITY)", "WB_MIN_ITYPE", "wb_fmax({0}, {1})",
                           "({0} > {1} ? {0} : {1})", simd_op=("wbmax", "max")),
    "reduce_min": Combiner("INFINITY", "WB_MAX_ITYPE", "wb_fmin({0}, {1})",
                           "({0} < {1} ? {0} : {1})", simd_op=("wbmin", "min")),
}


def reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _make(name, np_fn):
    def infer(ins, attrs):
        x = ins[0]
        if x.dtype.kind == "b":
            raise GraphError(f"{name} is not defined for bool; cast first")
        axes = normalize_axes(attrs.get("axes", range(len(x.shape))), len(x.shape))
        return [(reduced_shape(x.shape, axes, bool(attrs.get("keepdims", True))), x.dtype)]

    def reference(xs, attrs):
        x = xs[0]
        axes = normalize_axes(attrs.get("axes", range(x.ndim)), x.ndim)
        keep = bool(attrs.get("keepdims", True))
        # accumulate half precision in float32, as the kernels do
        acc = x.astype(np.float32) if x.dtype == np.float16 else x
        with np.errstate(all="ignore"):
            r = np_fn(acc, axis=axes, keepdims=keep)
        if np_fn is np.mean and x.dtype.kind == "i":
            r = _int_mean(acc, axes, keep)
        return [np.asarray(r).astype(x.dtype)]

    return register(OpDef(name, Kind.reduce, Mapping_.many_to_many, (1, 1), infer, reference,
                          None, f"{name[7:]} over attr axes (keepdims attr, default true)"))


def _int_mean(x, axes, keep):
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    s = np.sum(x, axis=axes, keepdims=keep)
    return np.trunc(s / n)


_make("reduce_sum", np.sum)
_make("reduce_mean", np.mean)
_make("reduce_prod", np.prod)
_make("reduce_max", np.max)
_make("reduce_min", np.min)
