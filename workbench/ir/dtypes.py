"""Element types the IR supports, and how each is stored and computed.

Storage types are what sits in memory (numpy dtype, C type); the compute type is what
kernels do arithmetic in. Half precision is loaded into float, computed in float and
rounded once on store -- the usual practice for memory-bound kernels, and what keeps
the C and CUDA renderings in agreement.
"""
from __future__ import annotations

import enum

import numpy as np

from ..errors import GraphError


class UnsupportedDType(GraphError, ValueError):
    """A dtype the IR does not support (a GraphError, and a ValueError for callers that
    test for that)."""


class DType(enum.Enum):
    float32 = "float32"
    float16 = "float16"
    int32 = "int32"
    int64 = "int64"
    bool = "bool"

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.float16)

    @property
    def kind(self) -> str:
        """Compute class: 'f' float, 'i' integer, 'b' boolean."""
        return "f" if self.is_float else ("b" if self is DType.bool else "i")

    @property
    def compute(self) -> "DType":
        """The type arithmetic is done in inside a kernel."""
        return DType.float32 if self is DType.float16 else self

    @property
    def short(self) -> str:
        """The short name drawings and IR listings use (f32, f16, i32, i64, bool)."""
        return SHORT_NAMES[self]

    @property
    def c_compute(self) -> str:
        """The C type a kernel computes this dtype's values in."""
        return C_COMPUTE[self.compute]

    @staticmethod
    def of(x) -> "DType":
        """DType from a name, a numpy dtype or a DType: ``DType.of('float32')``."""
        if isinstance(x, DType):
            return x
        try:
            return DType(np.dtype(x).name)
        except Exception:   # noqa: BLE001 -- np.dtype raises TypeError, ValueError...
            raise UnsupportedDType(f"unsupported dtype {x!r:.60}; supported: "
                                   f"{', '.join(d.value for d in DType)}") from None


SHORT_NAMES = {
    DType.float32: "f32",
    DType.float16: "f16",
    DType.int32: "i32",
    DType.int64: "i64",
    DType.bool: "bool",
}

# C types: what kernels compute in (half precision in float, bool as int 0/1), and what
# sits in memory in C (a target whose storage differs, CUDA's __half, overrides it).
C_COMPUTE = {
    DType.float32: "float",
    DType.int32: "int",
    DType.int64: "long long",
    DType.bool: "int",
}
C_STORAGE = {
    DType.float32: "float",
    DType.float16: "_Float16",
    DType.int32: "int",
    DType.int64: "long long",
    DType.bool: "unsigned char",
}

# Relative error bound accepted when a kernel is compared with the NumPy reference.
# float16 rounds at every stored intermediate in the reference but only once in a
# fused kernel, so its bound is loose; integers and booleans must match exactly.
TOLERANCE = {
    DType.float32: 1e-4,
    DType.float16: 2e-2,
    DType.int32: 0.0,
    DType.int64: 0.0,
    DType.bool: 0.0,
}
