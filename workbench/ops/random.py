"""Counter-based random numbers: ``random_uniform`` and ``random_normal``.

Each element's number is a pure function of a key (the seed) and up to four integer
counters -- an environment's index and a step's, or the flat index of an element --
so it is the same whichever kernel computes it, in whatever order, fused or not: a
repeat's fused and unfused programs draw the same numbers (``docs/repeat.md``), and a
dropout mask needs no state kept between kernels.

The generator is **Philox-4x32-10** (Salmon, Moraes, Dror, Shaw: "Parallel random
numbers: as easy as 1, 2, 3", SC 2011; Random123): ten rounds of two 32x32->64-bit
multiplies and xors over a 128-bit counter and a 64-bit key. Why it: it passes BigCrush
for every key and counter, it is what cuRAND, PyTorch's CUDA generator and Random123
use (users know it, and its published known-answer vectors check ours:
``tests/ops/test_random.py``), it is integer-only (the NumPy reference, C and CUDA
agree bit for bit, no float rounding inside), and its multiplies vectorize on a CPU
(``vpmuludq``) and are one ``mul.hi`` each on a GPU. A weaker hash (splitmix, squares)
would be faster but has no such pedigree for arbitrary counter patterns.

Inputs (broadcast like any elementwise op): ``key`` (any integer type; its value as a
64-bit two's-complement word is Philox's two key words, low then high) and one to four
``counters`` (any integer type, each taken modulo 2^32 -- pass an index's high word as
a further counter to count past 2^32). Outputs float32:

- ``random_uniform``: the first output word's top 24 bits times 2^-24, in [0, 1) --
  exact in float32, so the float is bit for bit the same on every backend too;
- ``random_normal``: Box-Muller from the first two words, u1 = (w0 >> 8 + 1) 2^-24 in
  (0, 1] and u2 = (w1 >> 8) 2^-24, z = sqrt(-2 ln u1) cos(2 pi u2); its words are
  exact, its float result is within the libraries' logf/cosf/sqrtf rounding
  (a few eps32 (|z| + 1): ``tests/ops/test_random.py``).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import DType
from ..errors import GraphError
from .registry import Helper, Kind, OpDef, broadcast_shapes, register

# Philox-4x32's multipliers and Weyl key increments (Random123's philox.h)
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10
MAX_COUNTERS = 4

# One text both targets print (``unsigned int`` is 32 bits on both; NVRTC has no
# stdint.h). Random123's order: a round, then the key bumped by the Weyl constants, ten
# times -- written out, round r keyed (k0 + r W0, k1 + r W1): GCC 12 leaves a loop over
# the rounds in place and then vectorizes no environment loop around it (4x slower).
PHILOX = Helper("wb_philox", r"""/* Philox-4x32-10 (Salmon et al. 2011): counter (c0..c3), key (k0, k1) -> 4 words
   (ops/random.py) */
WB_FN void wb_philox_round(unsigned int c[4], unsigned int k0, unsigned int k1) {
  const unsigned long long p0 = (unsigned long long)0xD2511F53u * c[0];
  const unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c[2];
  const unsigned int x0 = (unsigned int)(p1 >> 32) ^ c[1] ^ k0;
  const unsigned int x2 = (unsigned int)(p0 >> 32) ^ c[3] ^ k1;
  c[1] = (unsigned int)p1; c[3] = (unsigned int)p0; c[0] = x0; c[2] = x2;
}
WB_FN void wb_philox4x32(unsigned int c[4], unsigned int k0, unsigned int k1) {
  wb_philox_round(c, k0, k1);
  wb_philox_round(c, k0 + 1u * 0x9E3779B9u, k1 + 1u * 0xBB67AE85u);
  wb_philox_round(c, k0 + 2u * 0x9E3779B9u, k1 + 2u * 0xBB67AE85u);
  wb_philox_round(c, k0 + 3u * 0x9E3779B9u, k1 + 3u * 0xBB67AE85u);
  wb_philox_round(c, k0 + 4u * 0x9E3779B9u, k1 + 4u * 0xBB67AE85u);
  wb_philox_round(c, k0 + 5u * 0x9E3779B9u, k1 + 5u * 0xBB67AE85u);
  wb_philox_round(c, k0 + 6u * 0x9E3779B9u, k1 + 6u * 0xBB67AE85u);
  wb_philox_round(c, k0 + 7u * 0x9E3779B9u, k1 + 7u * 0xBB67AE85u);
  wb_philox_round(c, k0 + 8u * 0x9E3779B9u, k1 + 8u * 0xBB67AE85u);
  wb_philox_round(c, k0 + 9u * 0x9E3779B9u, k1 + 9u * 0xBB67AE85u);
}
WB_FN float wb_random_uniform(unsigned long long key, unsigned int c0, unsigned int c1,
                              unsigned int c2, unsigned int c3) {
  unsigned int c[4] = {c0, c1, c2, c3};
  wb_philox4x32(c, (unsigned int)key, (unsigned int)(key >> 32));
  return (float)(c[0] >> 8) * 5.9604644775390625e-8f;          /* 2^-24: exact */
}
""")
# Its own helper: its text calls logf and cosf, which is how a repeat's kernel
# (codegen/repeat_c.stages) knows to give it a loop of its own, apart from selects
NORMAL = Helper("wb_random_normal", r"""/* Box-Muller on Philox's first two words (ops/random.py) */
WB_FN float wb_random_normal(unsigned long long key, unsigned int c0, unsigned int c1,
                             unsigned int c2, unsigned int c3) {
  unsigned int c[4] = {c0, c1, c2, c3};
  wb_philox4x32(c, (unsigned int)key, (unsigned int)(key >> 32));
  const float u1 = (float)((c[0] >> 8) + 1u) * 5.9604644775390625e-8f;   /* (0, 1] */
  const float u2 = (float)(c[1] >> 8) * 5.9604644775390625e-8f;          /* [0, 1) */
  return sqrtf(-2.0f * logf(u1)) * cosf(6.28318548f * u2);
}
""", calls=(PHILOX,))

TWO_PI_F32 = np.float32(6.28318548)
SCALE = np.float32(2.0 ** -24)


def philox4x32(key, *counters) -> tuple[np.ndarray, ...]:
    """Philox-4x32-10's four output words (uint32 arrays, broadcast) for ``key`` (its
    64-bit two's-complement value: low word, high word) and up to four counters (each
    modulo 2^32; missing ones 0) -- the NumPy reference of the C helper above."""
    kw = np.asarray(key).astype(np.int64).astype(np.uint64)   # (two's complement)
    k0 = (kw & 0xFFFFFFFF).astype(np.uint64)
    k1 = (kw >> np.uint64(32)).astype(np.uint64)
    cs = [np.asarray(c).astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)
          for c in counters]
    cs += [np.zeros((), np.uint64)] * (MAX_COUNTERS - len(cs))
    shape = np.broadcast_shapes(k0.shape, *(c.shape for c in cs))
    c0, c1, c2, c3 = (np.broadcast_to(c, shape).copy() for c in cs)
    k0, k1 = np.broadcast_to(k0, shape).copy(), np.broadcast_to(k1, shape).copy()
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(ROUNDS):
        p0, p1 = np.uint64(M0) * c0, np.uint64(M1) * c2      # < 2^64: exact in uint64
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & mask,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & mask)
        k0, k1 = (k0 + np.uint64(W0)) & mask, (k1 + np.uint64(W1)) & mask
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def _infer(name):
    def infer(ins, attrs):
        bad = [k for k, v in enumerate(ins) if v.dtype.kind != "i"]
        if bad:
            k = bad[0]
            what = "the key" if k == 0 else f"counter {k - 1}"
            raise GraphError(f"{name}: {what} is {ins[k].dtype.value}; the key and the "
                             "counters are integers (an environment's index, a step's, "
                             "an element's flat index): cast them to int32 or uint32")
        return [(broadcast_shapes(*(v.shape for v in ins)), DType.float32)]
    return infer


def _scalar(fn):
    def scalar(args, in_dt, out_dt, attrs):
        if any(d.kind != "i" for d in in_dt):     # (the CPU probe asks with floats)
            raise GraphError(f"{fn}: the key and the counters are integers")
        key = f"(unsigned long long)({args[0]})"
        cs = [f"(unsigned int)({a})" for a in args[1:]]
        cs += ["0u"] * (MAX_COUNTERS - len(cs))
        return f"{fn}({key}, {', '.join(cs)})"
    return scalar


def uniform_reference(xs, attrs) -> list[np.ndarray]:
    w0 = philox4x32(*xs)[0]
    return [(w0 >> np.uint32(8)).astype(np.float32) * SCALE]


def normal_reference(xs, attrs) -> list[np.ndarray]:
    w0, w1 = philox4x32(*xs)[:2]
    u1 = ((w0 >> np.uint32(8)) + np.uint32(1)).astype(np.float32) * SCALE
    u2 = (w1 >> np.uint32(8)).astype(np.float32) * SCALE
    with np.errstate(all="ignore"):
        return [np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(TWO_PI_F32 * u2)]


# ten rounds of two widening multiplies and four xors per element: priced as an
# expensive op (recomputing it in a wider loop is not free)
register(OpDef("random_uniform", Kind.elementwise, (2, 1 + MAX_COUNTERS),
               _infer("random_uniform"), uniform_reference,
               _scalar("wb_random_uniform"),
               "uniform float32 in [0, 1) from (key, counters...): Philox-4x32-10",
               flops=60, helpers=(PHILOX,)))
register(OpDef("random_normal", Kind.elementwise, (2, 1 + MAX_COUNTERS),
               _infer("random_normal"), normal_reference,
               _scalar("wb_random_normal"),
               "standard normal float32 from (key, counters...): Philox-4x32-10, "
               "Box-Muller", flops=80, helpers=(PHILOX, NORMAL)))
