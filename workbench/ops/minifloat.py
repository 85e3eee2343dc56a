"""Narrow float formats held in float32: ``round_float`` rounds a float32 value to the
nearest value of an 8-bit or 4-bit float format (FP8 E4M3/E5M2 and their FNUZ
variants, FP4 E2M1, and the exponent-only E8M0 of MX block scales), still a float32.

The workbench has no storage type for them: an importer holds their values in float32
(exactly -- every such value is a float32) and a cast to one becomes this op, so a
model that quantizes to FP8 rounds here as it would on the hardware, and its
arithmetic between casts is float32's (as in the bfloat16 case, ``ops/bfloat16.py``).

Rounding is to nearest, ties to even, at the format's precision; below its smallest
normal the step stays that of the subnormals. Past the largest finite value a
saturating cast gives the largest finite value (of the sign), a non-saturating one
infinity where the format has it and NaN where it does not (E4M3FN, the FNUZ
formats); FP4 has neither and always saturates. NaN stays NaN -- also for FP4, which
has none; the caller's own FP4 conversion decides what it becomes there. The FNUZ
formats have no negative zero. E8M0 holds powers of two 2^-127..2^127 only (no sign, no zero): rounded ``up``,
``down`` or to ``nearest`` in the exponent, as ONNX defines it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import GraphError
from .registry import Helper, Kind, OpDef, attr_bool, register


@dataclass(frozen=True)
class MiniFloat:
    """One narrow float format: ``mantissa`` stored bits, ``emin`` the exponent of its
    smallest normal, ``max`` its largest finite value."""
    mantissa: int
    emin: int
    max: float
    has_inf: bool       # overflow without saturation: inf (else NaN)
    neg_zero: bool      # has a -0 (the FNUZ formats do not)
    has_nan: bool = True    # without NaN (FP4) overflow always saturates

    def saturates(self, saturate: bool) -> bool:
        return saturate or not self.has_nan


FORMATS = {
    "float8e4m3fn": MiniFloat(3, -6, 448.0, has_inf=False, neg_zero=True),
    "float8e4m3fnuz": MiniFloat(3, -7, 240.0, has_inf=False, neg_zero=False),
    "float8e5m2": MiniFloat(2, -14, 57344.0, has_inf=True, neg_zero=True),
    "float8e5m2fnuz": MiniFloat(2, -15, 57344.0, has_inf=False, neg_zero=False),
    "float4e2m1": MiniFloat(1, 0, 6.0, has_inf=False, neg_zero=True, has_nan=False),
}
E8M0 = "float8e8m0"
ROUND_MODES = ("up", "down", "nearest")     # E8M0's, in the order the C helper numbers them

# (frexpf/ldexpf scale by powers of two, which is exact, so rintf rounds the real value)
ROUND_MINI = Helper("wb_round_mini", r"""/* float32 -> a narrow float format's nearest value (ties to even), held in float32 */
WB_FN float wb_round_mini(float x, int mbits, int emin, float maxv, int has_inf, int sat,
                          int neg_zero) {
  float a = fabsf(x), r;
  int e;
  if (x != x) return x;
  if (a > 3.0e38f) {                                   /* infinity */
    r = sat ? maxv : (has_inf ? INFINITY : NAN);
  } else {
    frexpf(a, &e);                                     /* a = f 2^e, f in [0.5, 1) */
    e = e - 1 > emin ? e - 1 : emin;                   /* subnormals keep emin's step */
    r = ldexpf(rintf(ldexpf(a, mbits - e)), e - mbits);
    if (r > maxv) r = sat ? maxv : (has_inf ? INFINITY : NAN);
  }
  r = copysignf(r, x);
  return (!neg_zero && r == 0.0f) ? 0.0f : r;
}
/* float32 -> E8M0 (2^-127..2^127; NaN for NaN and inf), rounded in the exponent:
   mode 0 up, 1 down, 2 nearest; saturating: never past 2^127 */
WB_FN float wb_round_e8m0(float x, int mode, int sat) {
  union { float f; unsigned int u; } v; v.f = x;
  unsigned int e = (v.u >> 23) & 0xffu, frac = v.u & 0x7fffffu;
  int up;
  if (e == 0xffu) return NAN;
  up = mode == 0 ? frac != 0u :
       (mode == 2 ? ((frac & 0x400000u) != 0u && ((frac & 0x3fffffu) != 0u || e > 0u)) : 0);
  if (up && !(sat && e == 0xfeu)) e += 1u;
  if (e == 0xffu) return NAN;
  v.u = e == 0u ? 0x00400000u : (e << 23);           /* 2^-127 is a float32 subnormal */
  return v.f;
}
""")


def _format(attrs) -> str:
    fmt = attrs.get("format")
    if fmt not in FORMATS and fmt != E8M0:
        raise GraphError(f"round_float: attr format {fmt!r:.40} is not one of "
                         f"{', '.join([*FORMATS, E8M0])}")
    return fmt


def _round_mode(attrs) -> int:
    mode = attrs.get("round_mode", "up")
    if mode not in ROUND_MODES:
        raise GraphError(f"round_float: attr round_mode {mode!r:.40} is not one of "
                         f"{', '.join(ROUND_MODES)}")
    return ROUND_MODES.index(mode)


def _infer(ins, attrs):
    _format(attrs)
    _round_mode(attrs)
    attr_bool(attrs, "saturate", True)
    if ins[0].dtype.value != "float32":
        raise GraphError(f"round_float needs a float32 input (narrow floats are held in "
                         f"float32), got {ins[0].dtype.value}; cast first")
    return [(ins[0].shape, ins[0].dtype)]


def _scalar(args, in_dt, out_dt, attrs):
    fmt, sat = _format(attrs), int(attr_bool(attrs, "saturate", True))
    if fmt == E8M0:
        return f"wb_round_e8m0({args[0]}, {_round_mode(attrs)}, {sat})"
    f = FORMATS[fmt]
    return (f"wb_round_mini({args[0]}, {f.mantissa}, {f.emin}, {f.max!r}f, "
            f"{int(f.has_inf)}, {int(f.saturates(bool(sat)))}, {int(f.neg_zero)})")


def round_mini(x: np.ndarray, fmt: MiniFloat, saturate: bool) -> np.ndarray:
    """The NumPy twin of ``wb_round_mini`` (float64 inside: every step is exact)."""
    x = np.asarray(x, np.float32)
    a = np.abs(x.astype(np.float64))
    with np.errstate(all="ignore"):
        _, e = np.frexp(a)
        e = np.maximum(e - 1, fmt.emin)
        r = np.ldexp(np.rint(np.ldexp(a, fmt.mantissa - e)), e - fmt.mantissa)
        over = np.inf if fmt.has_inf else np.nan
        r = np.where(r > fmt.max, fmt.max if fmt.saturates(saturate) else over, r)
        r = np.copysign(r, x)
        if not fmt.neg_zero:
            r = np.where(r == 0, 0.0, r)
        r = np.where(np.isnan(x), x, r)
    return r.astype(np.float32)


def round_e8m0(x: np.ndarray, mode: str, saturate: bool) -> np.ndarray:
    """The NumPy twin of ``wb_round_e8m0``."""
    u = np.asarray(x, np.float32).view(np.uint32)
    e = ((u >> 23) & 0xFF).astype(np.uint32)
    frac = u & 0x7FFFFF
    special = e == 0xFF
    if mode == "up":
        up = frac != 0
    elif mode == "nearest":
        up = ((frac & 0x400000) != 0) & (((frac & 0x3FFFFF) != 0) | (e > 0))
    else:
        up = np.zeros(e.shape, bool)
    if saturate:
        up &= e != 0xFE
    e = e + up.astype(np.uint32)
    bits = np.where(e == 0, np.uint32(0x00400000), e << 23).astype(np.uint32)
    r = bits.view(np.float32).copy()
    r[special | (e >= 0xFF)] = np.nan
    return r.reshape(np.shape(x))


def _reference(xs, attrs):
    fmt, sat = _format(attrs), attr_bool(attrs, "saturate", True)
    if fmt == E8M0:
        return [round_e8m0(xs[0], ROUND_MODES[_round_mode(attrs)], sat)]
    return [round_mini(xs[0], FORMATS[fmt], sat)]


register(OpDef("round_float", Kind.elementwise, (1, 1), _infer, _reference, _scalar,
               "round float32 to a narrow float format's nearest value (attr format: "
               f"{', '.join([*FORMATS, E8M0])}; saturate, default true; round_mode for "
               "float8e8m0: up, down or nearest), held in float32", flops=8,
               helpers=(ROUND_MINI,), slopes=lambda xs, y: (1.0,)))
