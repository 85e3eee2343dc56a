"""C and CUDA source for a repeat (``ir/repeat.py``): one step per call, or F steps fused.

Three sources from one emitter of the body's arithmetic (each op's own scalar
expression from the op registry, scalar constants inlined as literals, so every form
computes the same operations in the same order and agrees bit for bit):

- :func:`step_source` (C): one step per call, the state read from and written back to
  memory -- the unfused program launches it once per step from a host loop.
- :func:`fused_source` (C): F steps per call (F a run-time argument). Environments are
  cut into tiles sized to the L1 cache; within a tile the time loop is outside and the
  environment loop inside, vectorized (``omp simd``), the carried state in tile-local
  arrays that stay in L1 from step to step -- the order the issue's measurement says is
  the fast one on a CPU. Tiles run in parallel (``omp parallel for``).
- :func:`fused_cuda_source`: one thread per environment, the time loop inside, the
  state in registers.

Legality (:func:`refusal`) is kept apart from the code: the body must be elementwise
over the environments. A reduction across the batch axis mixes environments, so a step
could not start before every environment finished the last one (a grid-wide barrier
per step); that and every other form this emitter does not take is refused with the
reason.
"""
from __future__ import annotations

import math
import re

import numpy as np

from ..dtypes import DType, c_literal
from ..ops import Kind, get_op
from ..ir.repeat import Repeat
from .render.c import _VECTOR_MATH as VECTOR_MATH, CRenderer
from .render.cuda import CudaRenderer

# per-environment bytes of a tile kept in L1: half of a 32 KiB L1d, the rest left to
# the stacked inputs and outputs streaming through it
L1_TILE_BYTES = 16 * 1024
MIN_TILE, MAX_TILE = 64, 4096
CUDA_BLOCK = 256


def refusal(r: Repeat) -> str | None:
    """Why the repeat cannot be fused into one kernel, or None where it can."""
    g, ax = r.body, r.batch_axis
    shape = g.value(r.carried[0][0]).shape
    for n in g.nodes:
        op = get_op(n.op)
        if n.op == "reshape" and g.value(n.inputs[0]).numel == g.value(n.outputs[0]).numel:
            continue            # the same elements in the same order: a copy
        if op.kind is not Kind.elementwise:
            axes = n.attr("axes")
            if op.kind is Kind.reduce and (axes is None or ax in axes):
                return (f"node {n.id} ({n.op}) reduces across the batch axis {ax}: a step "
                        "would need every environment's previous step done (a grid-wide "
                        "barrier per step), so the steps cannot be fused; keep the "
                        "reduction outside the repeat")
            return (f"node {n.id} ({n.op}) is a {op.kind.value} op: fused steps take "
                    "bodies of elementwise ops over the environments")
    for v in g.values:
        if v.shape not in (shape, ()):
            return (f"value {v.name!r} of shape {list(v.shape)} is neither the state's "
                    f"shape {list(shape)} nor a scalar: fused steps take bodies whose "
                    "values are all of the state's shape")
        if v.dtype is not DType.float32 and v.dtype.kind == "f":
            return (f"value {v.name!r} is {v.dtype.value}: fused steps compute float32 "
                    "and integer bodies")
    for c in g.constants:
        a = np.asarray(g.constants[c])
        if a.size and not (a == a.flat[0]).all():
            return (f"constant {c!r} is an array of different values: fused steps inline "
                    "constants as literals; pass it as an invariant input")
    return None


def _literal(g, c: str) -> str:
    """A constant as a literal: scalars, and arrays of one value (an importer's folded
    ``ones_like``), which ``refusal`` lets through."""
    return c_literal(np.asarray(g.constants[c]).flat[0], g.value(c).dtype)


def tile_for(r: Repeat) -> int:
    """Environments per tile: what fits L1_TILE_BYTES, a multiple of 16 (whole vectors)."""
    per_env = sum(r.body.value(n).dtype.itemsize for n in (
        *r.carried_inputs, *r.stacked_inputs, *r.stacked_outputs, *r.invariant_inputs)
        if r.body.value(n).shape != ())
    t = L1_TILE_BYTES // max(per_env, 1) // 16 * 16
    return max(MIN_TILE, min(MAX_TILE, t))


def elements(r: Repeat) -> int:
    """Elements of the carried state: every environment's whole state variable."""
    return math.prod(r.body.value(r.carried[0][0]).shape)


class _Names:
    """Parameter names (generated, never the model's): ``in``/``out`` the state before
    and after, ``xs``/``ys`` stacked inputs and outputs, ``inv`` invariant inputs."""

    def __init__(self, r: Repeat):
        self.r = r
        self.state_in = {i: f"in{k}" for k, i in enumerate(r.carried_inputs)}
        self.state_out = {o: f"out{k}" for k, o in enumerate(r.carried_outputs)}
        self.xs = {s: f"xs{k}" for k, s in enumerate(r.stacked_inputs)}
        self.ys = {s: f"ys{k}" for k, s in enumerate(r.stacked_outputs)}
        self.inv = {s: f"inv{k}" for k, s in enumerate(r.invariant_inputs)}
        self.local = {i: f"s{k}" for k, i in enumerate(r.carried_inputs)}

    def params(self, rd, int64: str) -> str:
        g, q = self.r.body, rd.restrict
        st = lambda n: rd.storage[g.value(n).dtype]
        ps = [f"const {st(n)}* {q} {p}" for n, p in self.state_in.items()]
        ps += [f"{st(n)}* {q} {p}" for n, p in self.state_out.items()]
        ps += [f"const {st(n)}* {q} {p}" for n, p in self.xs.items()]
        ps += [f"{st(n)}* {q} {p}" for n, p in self.ys.items()]
        ps += [f"const {st(n)}* {q} {p}" for n, p in self.inv.items()]
        return ", ".join(ps + [f"{int64} t0", f"{int64} steps"])


def body_lines(r: Repeat, read: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The whole body for one environment element, as one block (the CUDA form's):
    ``read`` maps each body input to the C expression of its element (compute type);
    returns the lines and each value's C name. Every input is loaded once, up front;
    every node is one ``const`` local named after its node id."""
    g = r.body
    lines, names = [], {}
    for k, (i, expr) in enumerate(read.items()):
        names[i] = f"a{k}"
        lines.append(f"const {g.value(i).dtype.c_compute} a{k} = {expr};")
    for c in g.constants:
        names[c] = _literal(g, c)
    for n in g.nodes:
        var = names[n.outputs[0]] = f"v_{n.id}"
        lines.append(f"const {g.value(n.outputs[0]).dtype.c_compute} {var} = "
                     f"{_scalar(g, n, names)};  /* {n.id} */")
    return lines, names


def _reads(r: Repeat, rd, nm: _Names, stacked_at: str, env: str) -> dict:
    """The C expressions of the stacked and invariant inputs' elements, and of the
    counters (step index ``t``, element index ``env``)."""
    g = r.body
    conv = lambda n, src: rd.to_compute(g.value(n).dtype, src)
    read = {s: conv(s, f"{p}[{stacked_at}]") for s, p in nm.xs.items()}
    read.update({s: conv(s, f"{p}[{env if g.value(s).shape else '0'}]")
                 for s, p in nm.inv.items()})
    # the counters the repeat supplies: computed, never loaded (a random op's key)
    if r.step_input is not None:
        read[r.step_input] = f"({g.value(r.step_input).dtype.c_compute})t"
    if r.index_input is not None:
        read[r.index_input] = f"({g.value(r.index_input).dtype.c_compute})({env})"
    return read


def _header(r: Repeat, what: str) -> str:
    nodes = " ".join(n.id for n in r.body.nodes)
    return (f"/* repeat {what}: body of {len(r.body.nodes)} nodes, {r.trips} steps, "
            f"{elements(r)} state elements\n * nodes {nodes} */\n")


# a call into the vector math library (render/c.py declares their SIMD variants)
_CALL = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(VECTOR_MATH) + r")\(")


def _scalar(g, n, names: dict[str, str]) -> str:
    if n.op == "reshape":           # (of the same elements: refusal checked)
        return names[n.inputs[0]]
    ins = [g.value(i) for i in n.inputs]
    return get_op(n.op).scalar([names[i] for i in n.inputs], [v.dtype for v in ins],
                               g.value(n.outputs[0]).dtype, n.attr_map)


def stages(r: Repeat) -> list[list]:
    """The body's nodes cut into loops that GCC 12 can vectorize: calls into the vector
    math library (sinf, cosf...) in loops of their own, the rest (whose selects --
    where, clip, a || -- are branches until if-converted) in the loops between.
    GCC 12 if-converts no loop holding a call, and it moves a call only one arm of a
    select needs into that arm, so a loop with both stays scalar: CartPole's step
    (sinf, cosf and the reset's where) ran 2-3x slower as one loop. Even stages hold
    arithmetic, odd ones calls; each node goes to the first stage of its kind after its
    inputs'. An op whose prelude helper calls one (random_normal) is a call."""
    g = r.body
    dummy = {v.name: "x" for v in g.values}
    at: dict[str, int] = {}
    for n in g.nodes:
        s = max((at[i] for i in n.inputs if i in at), default=0)
        # (a helper that calls one counts: random_normal's Box-Muller)
        call = bool(_CALL.search(_scalar(g, n, dummy))) or \
            any(_CALL.search(h.body("c")) for h in get_op(n.op).helpers)
        at[n.outputs[0]] = s + (s % 2 == 0) if call else s + (s % 2)
    order = sorted(set(at.values()))
    return [[n for n in g.nodes if at[n.outputs[0]] == k] for k in order]


def _staged(r: Repeat, rd, read: dict[str, str], tile: int):
    """Each stage's loop body for one element (:func:`stages`), the tile arrays that
    carry values from one stage's loop to a later one, and the C names of the last
    stage's values (every body output among them)."""
    g = r.body
    groups = stages(r)
    made = {n.outputs[0]: k for k, grp in enumerate(groups) for n in grp}
    last = len(groups) - 1
    kept = {i for k, grp in enumerate(groups) for n in grp for i in n.inputs
            if made.get(i, k) < k}
    kept |= {o for o in g.outputs if made[o] < last}
    var = lambda v: f"v_{g.producer[v].id}"
    bodies, names = [], {}
    for k, grp in enumerate(groups):
        lines, names = [], {c: _literal(g, c) for c in g.constants}
        used = dict.fromkeys(i for n in grp for i in n.inputs)
        if k == last:
            used.update(dict.fromkeys(o for o in g.outputs if made[o] < last))
        # every input loaded once, up front, into a local: a load inside a select (a
        # reset's where) would be a conditional load, which GCC does not vectorize
        for j, i in enumerate(x for x in used if x in read):
            names[i] = f"a{j}"
            lines.append(f"const {g.value(i).dtype.c_compute} a{j} = {read[i]};")
        for i in used:
            if i in made and made[i] < k:
                names[i] = var(i)
                lines.append(f"const {g.value(i).dtype.c_compute} {var(i)} = w{var(i)[1:]}[e];")
        for n in grp:
            o = n.outputs[0]
            names[o] = var(o)
            lines.append(f"const {g.value(o).dtype.c_compute} {var(o)} = "
                         f"{_scalar(g, n, names)};  /* {n.id} */")
            if o in kept:
                lines.append(f"w{var(o)[1:]}[e] = {var(o)};")
        bodies.append(lines)
    decls = [f"{g.value(v).dtype.c_compute} w{var(v)[1:]}[{tile}];" for v in
             sorted(kept, key=lambda v: g.position[g.producer[v].id])]
    return bodies, decls, names


def _tiled(r: Repeat, name: str, tile: int, fused: bool, what: str) -> str:
    """The C both CPU forms share: tiles of ``tile`` environments in parallel, and in
    each the same vectorized environment loops (:func:`stages`) over the same body.
    Fused, the state is in tile-local arrays across a time loop; unfused (one step per
    call), it is read from and written to memory. One structure for both, so that each
    element takes the same path through the vectorized loops (vector body or
    remainder, where libmvec's sinf and libm's may differ in the last bit) in both, and
    they agree bit for bit."""
    rd, nm, m = CRenderer(), _Names(r), elements(r)
    g = r.body
    ct = lambda n: g.value(n).dtype.c_compute
    # (int64_t, which the prelude's stdint.h declares: size_t came only with the GEMM
    # micro-kernel's string.h, which a repeat's prelude no longer holds)
    at = f"(int64_t)t * {m}LL + base + e"
    read = {i: (f"{nm.local[i]}[e]" if fused else
                rd.to_compute(g.value(i).dtype, f"{nm.state_in[i]}[base + e]"))
            for i in r.carried_inputs}
    read.update(_reads(r, rd, nm, at, "base + e"))
    bodies, kept, names = _staged(r, rd, read, tile)
    # the new state is written in the last loop, after every read of the old one
    bodies[-1] += [f"{nm.local[i]}[e] = {names[o]};" if fused else
                   f"{nm.state_out[o]}[base + e] = "
                   f"{rd.to_storage(g.value(o).dtype, names[o])};" for i, o in r.carried]
    bodies[-1] += [f"{p}[{at}] = {rd.to_storage(g.value(s).dtype, names[s])};"
                   for s, p in nm.ys.items()]
    loops = "".join(f"      #pragma omp simd\n      for (int64_t e = 0; e < n; e++) {{\n"
                    + "".join(f"        {x}\n" for x in lines) + "      }\n"
                    for lines in bodies)
    decl = [f"    {ct(i)} {nm.local[i]}[{tile}];" for i in r.carried_inputs] if fused else []
    decl += [f"    {x}" for x in kept]
    head = (_header(r, what)
            + f"void {name}({nm.params(rd, 'int64_t')}) {{\n"
            f"  #pragma omp parallel for schedule(static)\n"
            f"  for (int64_t base = 0; base < {m}LL; base += {tile}) {{\n"
            f"    const int64_t n = {m}LL - base < {tile} ? {m}LL - base : {tile};\n"
            + "".join(x + "\n" for x in decl))
    loop = f"    for (int64_t t = t0; t < t0 + steps; t++) {{\n{loops}    }}\n"
    if not fused:
        return _with_prelude(rd, head + loop + "  }\n}\n")
    load = "\n".join(f"    for (int64_t e = 0; e < n; e++) {nm.local[i]}[e] = "
                     f"{rd.to_compute(g.value(i).dtype, nm.state_in[i] + '[base + e]')};"
                     for i in r.carried_inputs)
    save = "\n".join(f"    for (int64_t e = 0; e < n; e++) {nm.state_out[o]}[base + e] = "
                     f"{rd.to_storage(g.value(o).dtype, nm.local[i] + '[e]')};"
                     for i, o in r.carried)
    return _with_prelude(rd, head + f"{load}\n" + loop + f"{save}\n  }}\n}}\n")


def _with_prelude(rd, code: str) -> str:
    """``code`` after the prelude that holds the helpers it calls."""
    return rd.prelude(uses=code) + "\n" + code


def step_source(r: Repeat, name: str, tile: int | None = None) -> str:
    """C: one step per call (the host passes ``steps`` = 1), the state through memory."""
    tile = tile or tile_for(r)
    return _tiled(r, name, tile, False, f"step (one step per call, tiles of {tile})")


def fused_source(r: Repeat, name: str, tile: int | None = None) -> str:
    """C: ``steps`` steps from ``t0`` over tiles of ``tile`` environments, time loop
    outside, environment loop inside (vectorized), the state in tile-local arrays."""
    tile = tile or tile_for(r)
    return _tiled(r, name, tile, True, f"fused (tiles of {tile} environments)")


def fused_cuda_source(r: Repeat, name: str) -> str:
    """CUDA: one thread per environment element, ``steps`` steps from ``t0``, the
    state in registers (a grid-stride loop, so any grid is correct)."""
    rd, nm, m = CudaRenderer(), _Names(r), elements(r)
    g = r.body
    read = {i: nm.local[i] for i in r.carried_inputs}
    read.update(_reads(r, rd, nm, f"t * {m}LL + e", "e"))
    lines, names = body_lines(r, read)
    stores = [f"{nm.local[i]} = {names[o]};" for i, o in r.carried]
    stores += [f"{p}[t * {m}LL + e] = {rd.to_storage(g.value(s).dtype, names[s])};"
               for s, p in nm.ys.items()]
    inner = "\n".join("      " + x for x in lines + stores)
    load = "\n".join(f"    {g.value(i).dtype.c_compute} {nm.local[i]} = "
                     f"{rd.to_compute(g.value(i).dtype, nm.state_in[i] + '[e]')};"
                     for i in r.carried_inputs)
    save = "\n".join(f"    {nm.state_out[o]}[e] = "
                     f"{rd.to_storage(g.value(o).dtype, nm.local[i])};" for i, o in r.carried)
    code = (_header(r, "fused (one thread per environment)")
            + f"{rd.kernel_prefix} __launch_bounds__({CUDA_BLOCK}) "
            f"{name}({nm.params(rd, 'long long')}) {{\n"
            f"  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
            f"e < {m}LL; e += (long long)gridDim.x * blockDim.x) {{\n{load}\n"
            f"    for (long long t = t0; t < t0 + steps; t++) {{\n{inner}\n    }}\n"
            f"{save}\n  }}\n}}\n")
    return _with_prelude(rd, code)
