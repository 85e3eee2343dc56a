"""Element types the IR supports, and how each is stored and computed.

Storage types are what sits in memory (numpy dtype, C type); the compute type is what
kernels do arithmetic in. Half precision (float16, bfloat16) is loaded into float,
computed in float and rounded once on store -- the usual practice for memory-bound
kernels, and what keeps the C and CUDA renderings in agreement.

bfloat16 arrays are ml_dtypes' (NumPy has no bfloat16 of its own; importing ml_dtypes
registers the name, so ``np.dtype("bfloat16")`` works). Kernels store it as its 16
bits (``unsigned short``) and convert by the helpers ``wb_bf16_load`` /
``wb_bf16_store`` (round to nearest even), since C compilers before GCC 13 have no
bfloat16 arithmetic type.
"""
from __future__ import annotations

import enum

import ml_dtypes  # (registers np.dtype("bfloat16"))
import numpy as np

from .errors import GraphError


class UnsupportedDType(GraphError, ValueError):
    """A dtype the IR does not support (a GraphError, and a ValueError for callers that
    test for that)."""


class DType(enum.Enum):
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    uint8 = "uint8"
    uint16 = "uint16"
    uint32 = "uint32"
    uint64 = "uint64"
    bool = "bool"

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.float16, DType.bfloat16)

    @property
    def is_half(self) -> bool:
        """A 16-bit float: stored in half precision, computed in float32."""
        return self in (DType.float16, DType.bfloat16)

    @property
    def lowest(self) -> float:
        """A float type's most negative finite value (``torch.finfo(dtype).min``: what
        transformers' exporters write where a mask hides a score)."""
        return float(ml_dtypes.finfo(self.np).min)

    @property
    def kind(self) -> str:
        """Compute class: 'f' float, 'i' integer, 'b' boolean."""
        return "f" if self.is_float else ("b" if self is DType.bool else "i")

    @property
    def signed(self) -> bool:
        """False for the unsigned integer types (whose values no 64-bit signed type
        holds: uint64 accumulates, divides and compares unsigned)."""
        return self.np.kind != "u"

    @property
    def compute(self) -> "DType":
        """The type arithmetic is done in inside a kernel."""
        return DType.float32 if self.is_half else self

    @property
    def short(self) -> str:
        """The short name drawings and IR listings use (f32, f16, i8, u8, i64, bool...)."""
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
    DType.bfloat16: "bf16",
    DType.int8: "i8",
    DType.int16: "i16",
    DType.int32: "i32",
    DType.int64: "i64",
    DType.uint8: "u8",
    DType.uint16: "u16",
    DType.uint32: "u32",
    DType.uint64: "u64",
    DType.bool: "bool",
}

# The integer types with their C type. Narrow integers compute in their own type: C
# promotes them to int for each operation and the wrapping helpers take them in 64
# bits, so storing the result back wraps it as NumPy's arithmetic in that type does.
C_INT = {
    DType.int8: "signed char",
    DType.int16: "short",
    DType.int32: "int",
    DType.int64: "long long",
    DType.uint8: "unsigned char",
    DType.uint16: "unsigned short",
    DType.uint32: "unsigned int",
    DType.uint64: "unsigned long long",
}

# C types: what kernels compute in (half precision in float, bool as int 0/1), and what
# sits in memory in C (a target whose storage differs, CUDA's __half, overrides it).
C_COMPUTE = {
    DType.float32: "float",
    **C_INT,
    DType.bool: "int",
}
C_STORAGE = {
    DType.float32: "float",
    DType.float16: "_Float16",
    DType.bfloat16: "unsigned short",   # its bits; wb_bf16_load / wb_bf16_store convert
    **C_INT,
    DType.bool: "unsigned char",
}


def c_int_literal(v: int, dt: DType) -> str:
    """An integer constant as C text of type ``dt`` (suffixed where int would not hold
    it: a 64-bit or unsigned 32-bit value)."""
    suffix = {DType.int64: "LL", DType.uint64: "ULL", DType.uint32: "U"}.get(dt, "")
    text = f"{int(v)}{suffix}"
    return f"({text})" if v < 0 else text


def c_literal(x, dt: DType) -> str:
    """A scalar constant as C text in ``dt``'s compute type (negative ones in
    parentheses, so that the text is one term wherever it is put)."""
    x = np.asarray(x).reshape(()).item()
    if dt.kind == "b":
        return "1" if x else "0"
    if dt.kind == "i":
        return c_int_literal(int(x), dt)
    f = float(np.float32(x))
    if np.isnan(f):
        return "NAN"
    if np.isinf(f):
        return "INFINITY" if f > 0 else "(-INFINITY)"
    r = repr(f)
    if "e" not in r and "." not in r:
        r += ".0"
    return f"{r}f" if not r.startswith("-") else f"({r}f)"
