"""Statistics of one constant (weight) tensor, as Netron shows them: shape, dtype,
size, range, mean and standard deviation, zeros, NaN and infinities, the first values.

Computed on demand for the tensor the property panel shows (a lazy constant is made
then, not when the graph loads), and only this summary -- a few numbers and at most
``FIRST_VALUES`` elements -- goes to the browser, never the weight itself.

Example::

    >>> s = tensor_stats({"w": np.array([0.0, 1.0, np.nan], np.float32)}, "w")
    >>> s.zeros, s.nan, s.min, s.max
    (1, 1, 0.0, 1.0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..dtypes import DType
from ..ir.graph import constant_spec

FIRST_VALUES = 6        # elements previewed


@dataclass(frozen=True)
class TensorStats:
    dtype: str                      # the workbench's name (float32, bfloat16, int64...)
    shape: tuple[int, ...]
    size: int
    nbytes: int
    # of the finite values (None where there is none, or for bool)
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    zeros: int
    nan: int
    inf: int
    first: tuple[float | int | bool, ...]

    @property
    def head(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"

    def preview(self) -> str:
        vals = ", ".join(num(x) for x in self.first)
        return f"[{vals}{', …' if self.size > len(self.first) else ''}]"

    def line(self) -> str:
        """``float32[64]  min -0.31  max 0.29  mean 0.01  std 0.1  [0.0496, ...]``."""
        if self.size == 0:
            return f"{self.head}  empty"
        parts = [self.head]
        if self.min is not None:
            parts.append(f"min {num(self.min)}  max {num(self.max)}")
        if self.mean is not None:
            parts.append(f"mean {num(self.mean)}  std {num(self.std)}")
        bad = self.nan + self.inf
        if bad:
            parts.append(f"{bad} non-finite ({self.nan} NaN)")
        if self.zeros:
            parts.append(f"{self.zeros:,} zero{'s' * (self.zeros != 1)}")
        parts.append(self.preview())
        return "  ".join(parts)

    def rows(self) -> tuple[tuple[str, str], ...]:
        """The panel's rows for this tensor."""
        r = [("tensor", self.head),
             ("size", f"{self.size:,} elements, {_bytes(self.nbytes)}")]
        if self.size == 0:
            return tuple(r)
        if self.min is not None:
            r.append(("range", f"min {num(self.min)}  max {num(self.max)}"))
        if self.mean is not None:
            r.append(("mean, std", f"{num(self.mean)}, {num(self.std)}"))
        r.append(("zeros", f"{self.zeros:,} ({100 * self.zeros / self.size:.3g}%)"))
        if self.nan or self.inf:
            r.append(("NaN, inf", f"{self.nan:,}, {self.inf:,}"))
        r.append(("first values", self.preview()))
        return tuple(r)


def num(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.6g}"


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def tensor_stats(constants: Mapping[str, np.ndarray], name: str,
                 first: int = FIRST_VALUES) -> TensorStats:
    """The statistics of constant ``name`` (makes its data if lazy)."""
    shape, _ = constant_spec(constants, name)
    a = np.asarray(constants[name])
    dt = DType.of(a.dtype)
    flat = a.reshape(-1)
    if a.dtype == DType.bfloat16.np:     # (ml_dtypes' type: NumPy's kind is "V")
        flat = flat.astype(np.float32)
    size = int(flat.size)
    lo = hi = mean = std = None
    nan = inf = 0
    if size and flat.dtype.kind == "f":
        isnan = np.isnan(flat)
        nan = int(isnan.sum())
        inf = int(np.isinf(flat).sum())
        finite = flat[~isnan & np.isfinite(flat)] if nan or inf else flat
        if finite.size:
            lo, hi = float(finite.min()), float(finite.max())
            # float64 accumulation: a float32 sum of 23M embedding values drifts
            mean = float(finite.mean(dtype=np.float64))
            std = float(finite.std(dtype=np.float64))
    elif size and flat.dtype.kind in "iu":
        lo, hi = int(flat.min()), int(flat.max())
        mean = float(flat.mean(dtype=np.float64))
        std = float(flat.std(dtype=np.float64))
    elif size and flat.dtype.kind == "b":
        lo, hi = bool(flat.min()), bool(flat.max())
    zeros = int(size - np.count_nonzero(flat)) if size else 0
    return TensorStats(dt.value, tuple(int(d) for d in shape), size, int(a.nbytes),
                       lo, hi, mean, std, zeros, nan, inf,
                       tuple(x.item() for x in flat[:first]))
