"""Elementwise remainder and rounding: ``mod`` (ONNX Mod, torch fmod/remainder) and
``round`` (half to even, as NumPy, ONNX and torch round)."""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from .elementwise import WRAP, _same_dtype
from .registry import Helper, Kind, OpDef, attr_bool, broadcast_shapes, register

# Integer remainders are total like the kernels' division: x % 0 is 0 (NumPy's too) and
# MIN % -1 is 0 (C would trap). floor=1 takes the divisor's sign (Python's %), floor=0
# the dividend's (C's %, fmod).
IMOD = Helper("wb_imod", r"""/* integer remainder: x % 0 = 0 and MIN % -1 = 0 (no trap); floor: the divisor's sign */
WB_FN long long wb_imod(long long a, long long b, int floor) {
  if (b == 0 || b == -1) return 0;
  long long r = a % b;
  return (floor && r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
""")
# unsigned values may not fit a long long (uint64); no sign to move, x % 0 is 0
UMOD = Helper("wb_umod", "WB_FN unsigned long long wb_umod(unsigned long long a, "
              "unsigned long long b) { return b == 0 ? 0 : a % b; }\n")
# NumPy's float remainder (npy_divmod): fmod, moved into the divisor's sign; a zero
# result takes the divisor's sign
FMOD = Helper("wb_fmod", r"""WB_FN float wb_pymod(float a, float b) {
  float r = fmodf(a, b);
  if (b == 0.0f) return r;
  return r != 0.0f ? (((r < 0.0f) != (b < 0.0f)) ? r + b : r) : copysignf(0.0f, b);
}
""")


def _fmod_attr(attrs) -> bool:
    return attr_bool(attrs, "fmod", False)


def _mod_infer(ins, attrs):
    dt = _same_dtype("mod", ins)
    _fmod_attr(attrs)
    if dt.kind not in "fi":
        raise GraphError(f"mod is not defined for {dt.value}")
    return [(broadcast_shapes(ins[0].shape, ins[1].shape), dt)]


def _mod_scalar(args, in_dt, out_dt, attrs):
    a, b = args
    if in_dt[0].kind == "f":
        return f"fmodf({a}, {b})" if _fmod_attr(attrs) else f"wb_pymod({a}, {b})"
    if not in_dt[0].signed:
        return f"(({out_dt.c_compute})wb_umod({a}, {b}))"
    return f"(({out_dt.c_compute})wb_imod({a}, {b}, {0 if _fmod_attr(attrs) else 1}))"


def _mod_ref(xs, attrs):
    a, b = xs
    with np.errstate(all="ignore"):
        if a.dtype.kind == "f":
            r = np.fmod(a, b) if _fmod_attr(attrs) else np.mod(a, b)
            return [np.asarray(r).astype(a.dtype)]
        if a.dtype.kind == "u":
            au, bu = np.broadcast_arrays(a.astype(np.uint64), b.astype(np.uint64))
            r = np.mod(au, np.where(bu == 0, np.uint64(1), bu))
            return [np.where(bu == 0, np.uint64(0), r).astype(a.dtype)]
        a64, b64 = np.broadcast_arrays(a.astype(np.int64), b.astype(np.int64))
        safe = np.where((b64 == 0) | (b64 == -1), 1, b64)
        r = np.fmod(a64, safe) if _fmod_attr(attrs) else np.mod(a64, safe)
        return [np.where((b64 == 0) | (b64 == -1), 0, r).astype(a.dtype)]


register(OpDef("mod", Kind.elementwise, (2, 2), _mod_infer, _mod_ref, _mod_scalar,
               "remainder of a / b; attr fmod true: the dividend's sign (C fmod), false: "
               "the divisor's (Python's %); integer x % 0 and MIN % -1 give 0",
               flops=4, helpers=(WRAP, IMOD, UMOD, FMOD),
               # d/da = 1; d/db = -trunc(a / b), as many times b as fits in a
               slopes=lambda xs, y: (1.0, np.abs(np.trunc(xs[0] / xs[1])))))


def _round_infer(ins, attrs):
    dt = ins[0].dtype
    if dt.kind not in "fi":
        raise GraphError(f"round is not defined for {dt.value}")
    return [(ins[0].shape, dt)]


register(OpDef("round", Kind.elementwise, (1, 1), _round_infer,
               lambda xs, attrs: [np.round(xs[0])],
               # rintf rounds in the default mode, to nearest with ties to even
               lambda args, in_dt, out_dt, attrs: f"rintf({args[0]})"
               if in_dt[0].kind == "f" else args[0],
               "round to the nearest integer, halves to even", flops=1,
               slopes=lambda xs, y: (1.0,)))
