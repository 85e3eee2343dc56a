"""Running a repeat on the CPU: one step per call from a host loop, or F steps per call.

:class:`RepeatProgram` compiles the repeat's C (``codegen/repeat_c.py``) with the
system compiler and runs it on NumPy arrays. ``steps_per_call=None`` is the unfused
program (the step kernel called once per step, the state through memory);
``steps_per_call=F`` calls the fused kernel ceil(trips / F) times, F steps each (the
last call the remainder), the state in L1 between the steps of one call. The state
moves between calls through two buffers in turn, the last call writing the run's
output.

Checked runs (``checked=True``, or ``$WB_CHECKED_RUNS=1`` as the tests set) poison
every output first (NaN, or 0x5A bytes for integers and masks), so an element a kernel
forgets to write fails the comparison.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
from typing import Mapping

import numpy as np

from ..errors import GraphError
from ..ir.repeat import Repeat, check_repeat_inputs, repeat_to_json
from ..codegen.repeat_c import fused_source, refusal, step_source, tile_for
from .cc import build_shared, cflags, find_compiler, link_flags, load_library

# GCC merges sinf(x) and cosf(x) of one x into one sincos call, which has no vector
# variant: a CartPole step (both of theta) stayed scalar, 2-3x slower. Without the
# builtins each is its own call, vectorized through libmvec's variants.
NO_SINCOS = ("-fno-builtin-sinf", "-fno-builtin-cosf")


def checked_default() -> bool:
    return os.environ.get("WB_CHECKED_RUNS", "") == "1"


def poison(a: np.ndarray) -> None:
    if a.dtype.kind == "f":
        a.fill(np.nan)
    else:
        a.view(np.uint8).fill(0x5A)


class RepeatProgram:
    """A repeat compiled for the CPU; ``run(inputs)`` returns its outputs."""

    def __init__(self, r: Repeat, steps_per_call: int | None = None, tile: int | None = None):
        r.verify()
        if steps_per_call is not None:
            if isinstance(steps_per_call, bool) or not isinstance(steps_per_call, int) \
                    or not 1 <= steps_per_call <= r.trips:
                raise GraphError(f"fuse steps: F must be an integer in [1, {r.trips}] "
                                 f"(the trip count), got {steps_per_call!r:.40}")
            why = refusal(r)
            if why:
                raise GraphError(f"cannot fuse the steps of repeat {r.name!r}: {why}")
        self.repeat, self.steps_per_call = r, steps_per_call
        self.tile = tile or tile_for(r)
        # the kernel's name from what it computes (a C identifier; the cache's key)
        key = hashlib.sha256(repr((sorted(repeat_to_json(r).items(), key=str),
                                   steps_per_call is None, self.tile)).encode()).hexdigest()
        self.name = f"wb_repeat_{'step' if steps_per_call is None else 'fused'}_{key[:16]}"
        self.source = (step_source(r, self.name, self.tile) if steps_per_call is None
                       else fused_source(r, self.name, self.tile))
        lib = load_library(build_shared(
            self.name, self.source, compiler=find_compiler(), flags=(*cflags(), *NO_SINCOS),
            link=link_flags(), origin=f"repeat {r.name}"))
        self._fn = getattr(lib, self.name)
        self._fn.restype = None
        self._lib = lib
        self.calls = r.trips if steps_per_call is None else -(-r.trips // steps_per_call)

    def new_outputs(self) -> dict[str, np.ndarray]:
        r = self.repeat
        return {o: np.empty(r.value(o).shape, r.value(o).dtype.np) for o in r.outputs}

    def run(self, inputs: Mapping[str, np.ndarray], out: dict | None = None,
            checked: bool | None = None) -> dict[str, np.ndarray]:
        r = self.repeat
        args = check_repeat_inputs(r, inputs)
        out = out if out is not None else self.new_outputs()
        if checked_default() if checked is None else checked:
            for a in out.values():
                poison(a)
        # the state moves through two buffers in turn; the last call writes ``out``
        spare = {o: np.empty_like(out[o]) for o in r.carried_outputs}
        step = self.steps_per_call or 1
        starts = list(range(0, r.trips, step))
        cur = {o: args[i] for i, o in r.carried}
        p = lambda a: ctypes.c_void_p(a.ctypes.data)
        fixed = [p(args[s]) for s in r.stacked_inputs] + \
            [p(out[s]) for s in r.stacked_outputs] + [p(args[s]) for s in r.invariant_inputs]
        for k, t0 in enumerate(starts):
            dst = out if (len(starts) - 1 - k) % 2 == 0 else spare
            n = min(step, r.trips - t0)
            self._fn(*[p(cur[o]) for o in r.carried_outputs],
                     *[p(dst[o]) for o in r.carried_outputs], *fixed,
                     ctypes.c_int64(t0), ctypes.c_int64(n))
            cur = {o: dst[o] for o in r.carried_outputs}
        return out
