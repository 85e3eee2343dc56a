"""The ``mixed`` family: a random graph of mixed dtypes, layout ops, casts, gathers and
matmuls from one seed, and inputs holding boundary values (see the package docstring)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...dtypes import DType
from ...errors import GraphError
from ...ir import Graph, GraphBuilder
from . import blocks, convs, modules, rows

F32, F16, I32, I64, B = DType.float32, DType.float16, DType.int32, DType.int64, DType.bool
BF16 = DType.bfloat16
# the narrow and unsigned integers: int8 wraps soonest, uint64 holds what no long long does
I8, U8, U64 = DType.int8, DType.uint8, DType.uint64
INTS = [I32, I64, I8, U8, U64]
FLOAT_UNARY = ["neg", "abs", "exp", "tanh", "sigmoid", "relu", "sin", "cos", "erf"]
POSITIVE_UNARY = ["log", "sqrt", "rsqrt", "reciprocal"]
FLOAT_BINARY = ["add", "sub", "mul", "max", "min", "div", "pow"]
INT_UNARY = ["neg", "abs"]
INT_BINARY = ["add", "sub", "mul", "div", "max", "min", "pow"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
REDUCE = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"]
DIMS = [0, 1, 1, 2, 3, 4, 5, 7, 16, 33]
LONG_DIMS = [128, 257, 1024, 4099]     # now and then: vector tiles, long and split rows
SCHEMES = ["local", "regional", "global"]
MAPPINGS = ["warp", "block", "split", "thread", "auto"]
PLANNERS = ["none", "xla", "rules", "stitch"]
# the families of graphs besides this module's own ("mixed"): each one's graph and
# inputs drawers
FAMILY_DRAWERS = {
    "blocks": (blocks.draw_block_graph, blocks.draw_block_inputs),
    "convs": (convs.draw_conv_graph, convs.draw_conv_inputs),
    "rows": (rows.draw_row_graph, rows.draw_row_inputs),
    "modules": (modules.draw_module_graph, modules.draw_module_inputs)}
FAMILIES = ["mixed", *FAMILY_DRAWERS]


@dataclass
class Case:
    """One drawn graph (None: drawing it failed), its inputs and what the plan edits
    did."""
    seed: int
    graph: Graph | None
    inputs: dict
    actions: list[str] = field(default_factory=list)
    plans_checked: int = 0


@dataclass(frozen=True)
class Failure:
    seed: int
    action: str
    message: str


class _Drawer:
    """Draws one graph from a seed (see the module docstring)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.b = GraphBuilder(f"fuzz{seed}")
        self.tensors: list = []
        self.exact: set[str] = set()      # values no kernel computed (inputs, moved)
        self.n_inputs = 0

    def pick(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def shape(self, rank=None) -> tuple[int, ...]:
        rank = int(self.rng.integers(1, 4)) if rank is None else rank
        dims = [int(self.pick(DIMS)) for _ in range(rank)]
        if self.rng.random() < 0.25:
            dims[-1] = int(self.pick(LONG_DIMS))
        if 0 in dims and self.rng.random() < 0.7:   # empty tensors, now and then
            dims = [d or 1 for d in dims]
        return tuple(dims)

    def input(self, shape, dtype):
        t = self.b.input(f"x{self.n_inputs}", shape, dtype)
        self.n_inputs += 1
        self.tensors.append(t)
        self.exact.add(t.name)
        return t

    def of(self, kinds: str, exact: bool = False):
        pool = [t for t in self.tensors if t.dtype.kind in kinds
                and (not exact or t.name in self.exact)]
        if not pool:
            return None
        # mostly the latest, so chains grow long and fusible
        return pool[-1] if self.rng.random() < 0.5 else self.pick(pool)

    def partner(self, t, exact: bool = False):
        """A tensor of t's dtype broadcasting with it: an earlier one (one no kernel
        computed, with ``exact``), or a fresh input."""
        ok = [o for o in self.tensors if o.dtype is t.dtype and o is not t
              and _broadcasts(o.shape, t.shape) and (not exact or o.name in self.exact)]
        if ok and self.rng.random() < 0.6:
            return self.pick(ok)
        rank = int(self.rng.integers(0, len(t.shape) + 1))
        tail = t.shape[len(t.shape) - rank:]
        return self.input(tuple(1 if self.rng.random() < 0.4 else d for d in tail) or (1,),
                          t.dtype)

    def step(self):
        kind = self.pick(["float_unary", "float_unary", "positive", "float_binary",
                          "float_binary", "int", "int", "compare", "where", "reduce",
                          "reduce", "cast", "layout", "layout", "gather", "matmul",
                          "floor"])
        return getattr(self, "_" + kind)()

    # -- one op each -------------------------------------------------------------------
    def _float_unary(self):
        x = self.of("f")
        return x and self.b.op(self.pick(FLOAT_UNARY), x)

    def _positive(self):
        x = self.of("f")
        return x and self.b.op(self.pick(POSITIVE_UNARY), self.b.op("abs", x) + 1.0)

    def _float_binary(self):
        x = self.of("f")
        if x is None:
            return None
        op = self.pick(FLOAT_BINARY)
        y = self.partner(x)
        if op == "pow":        # a positive base; a small exponent
            x = self.b.op("abs", x) + 0.5
            y = self.b.op("tanh", y) * 2.0
        elif op == "div":
            y = self.b.op("abs", y) + 0.25
        a, c = (y, x) if self.rng.random() < 0.3 else (x, y)
        return self.b.op(op, a, c)

    def _int(self):
        x = self.of("i")
        if x is None:
            return None
        if self.rng.random() < 0.3:
            return self.b.op(self.pick(INT_UNARY), x)
        return self.b.op(self.pick(INT_BINARY), x, self.partner(x))

    def _compare(self):
        x = self.of("fi", exact=True)
        return x and self.b.op(self.pick(COMPARE), x, self.partner(x, exact=True))

    def _where(self):
        c = self.of("b")
        x = self.of("fi")
        if c is None or x is None or not _broadcasts(c.shape, x.shape):
            return None
        return self.b.op("where", c, x, self.partner(x))

    def _floor(self):
        x = self.of("f", exact=True)
        return x and self.b.op(self.pick(["floor", "ceil"]), x)

    def _reduce(self):
        x = self.of("fi")
        if x is None or not x.shape:
            return None
        k = int(self.rng.integers(1, len(x.shape) + 1))
        axes = sorted(int(a) for a in self.rng.choice(len(x.shape), k, replace=False))
        op = self.pick(REDUCE)
        if op == "reduce_prod" and x.dtype.kind == "f":
            x = self.b.op("tanh", x) + 1.0      # a product of many values stays finite
        return self.b.op(op, x, axes=axes, keepdims=bool(self.rng.random() < 0.5))

    def _cast(self):
        x = self.of("fib")
        if x is None:
            return None
        to = self.pick([F32, F16, BF16, *INTS, B])
        if x.dtype.kind == "f" and to.kind in "ib" and x.name not in self.exact:
            to = F32 if x.dtype.is_half else F16
        return self.b.op("cast", x, to=to.value)

    def _layout(self):
        x = self.of("fib")
        if x is None:
            return None
        s, r = x.shape, len(x.shape)
        if r == 0:
            return self.b.op("reshape", x, shape=[1])
        how = self.pick(["transpose", "reshape", "slice", "expand", "concat", "split",
                         "squeeze"])
        if how == "transpose" and r >= 2:
            t = self.b.op("transpose", x, perm=[int(p) for p in self.rng.permutation(r)])
        elif how == "reshape":
            n = int(np.prod(s))
            t = self.b.op("reshape", x, shape=self.pick([[n], [1, n], [n, 1]]
                                                         + [[d, n // d] for d in (2, 3, 4)
                                                            if n and n % d == 0]))
        elif how == "slice":
            a = int(self.rng.integers(r))
            step = int(self.pick([1, 2, -1, -3]))
            start = int(self.rng.integers(-s[a] - 1, s[a] + 2))
            end = int(self.rng.integers(-s[a] - 1, s[a] + 2))
            t = self.b.op("slice", x, starts=[start], ends=[end], axes=[a], steps=[step])
        elif how == "expand" and r < 4:
            new = [int(self.rng.integers(1, 4))] + [int(self.rng.integers(1, 4)) if d == 1
                                                    else d for d in s]
            t = self.b.op("expand", x, shape=new)
        elif how == "concat":
            a = int(self.rng.integers(r))
            other = self.input(tuple(int(self.pick([0, 1, 3])) if i == a else d
                                     for i, d in enumerate(s)), x.dtype)
            t = self.b.op("concat", x, other, axis=a)
        elif how == "split" and s:
            a = int(self.rng.integers(r))
            cut = int(self.rng.integers(0, s[a] + 1))
            t = self.pick(self.b.op("split", x, axis=a, sizes=[cut, s[a] - cut]))
        else:
            t = self.b.op("unsqueeze", x, axes=[int(self.rng.integers(r + 1))])
        if x.name in self.exact:
            self.exact.add(t.name)
        return t

    def _gather(self):
        x = self.of("fib")
        if x is None or not x.shape:
            return None
        a = int(self.rng.integers(len(x.shape)))
        if x.shape[a] == 0:
            return None
        idx = self.input((int(self.pick([1, 3, 8])),), self.pick([I32, I64]))
        t = self.b.op("gather", x, idx, axis=a)
        if x.name in self.exact:
            self.exact.add(t.name)
        return t

    def _matmul(self):
        x = self.of("f")
        if x is None or not x.shape:
            return None
        if len(x.shape) == 1:
            x = self.b.op("unsqueeze", x, axes=[0])
        w = self.input((x.shape[-1], int(self.pick([1, 3, 8]))), x.dtype)
        return self.b.op("matmul", x, w)


def _broadcasts(small, big) -> bool:
    if len(small) > len(big):
        return False
    return all(s in (d, 1) for s, d in zip(small[::-1], big[::-1]))


def draw_graph(seed: int, max_ops: int = 10) -> Graph:
    """One random graph (see the module docstring); ops the verifier refuses for the
    drawn shapes (an empty reduction for max, say) are simply not drawn."""
    d = _Drawer(seed)
    dt = d.pick([F32, F32, F32, F16, BF16])
    d.input(d.shape(), dt)
    if d.rng.random() < 0.5:
        d.input(d.shape(), d.pick(INTS))
    if d.rng.random() < 0.3:
        d.input(d.shape(), B)
    made = []
    for _ in range(int(d.rng.integers(2, max_ops + 1))):
        try:
            t = d.step()
        except GraphError:
            continue
        if t is not None:
            d.tensors.append(t)
            made.append(t)
    if not made:
        made.append(d.b.op("neg", d.tensors[0]) if d.tensors[0].dtype.kind != "b"
                    else d.b.op("not", d.tensors[0]))
    outs = [t for t in made[:-1] if d.rng.random() < 0.3] + [made[-1]]
    for k, t in enumerate(dict.fromkeys(outs)):
        d.b.output(t, f"y{k}")
    return d.b.build()


def draw_inputs(g: Graph, seed: int) -> dict[str, np.ndarray]:
    """Inputs with boundary values mixed in: integer extremes, 0, -1; inf, NaN, signed
    zeros and large floats; gather indices past either end (by up to 2^33)."""
    rng = np.random.default_rng(seed + 7919)
    idx_of = {n.inputs[1] for n in g.nodes if n.op == "gather"}
    out = {}
    for name in g.inputs:
        v = g.value(name)
        n = v.numel
        if v.dtype.kind == "b":
            out[name] = rng.random(v.shape) < 0.5
            continue
        if name in idx_of:
            info = np.iinfo(v.dtype.np)
            edges = np.array([0, -1, 1, 2 ** 31 - 1, -(2 ** 31), info.max, info.min,
                              2 ** 32 + 1, -(2 ** 32) + 3], np.int64)
            edges = edges[(edges >= info.min) & (edges <= info.max)]
            a = rng.integers(-10, 10, n)
        elif v.dtype.kind == "i":
            info = np.iinfo(v.dtype.np)
            edges = np.array([int(info.min), int(info.max), 0, 1, int(info.min) + 1,
                              int(info.max) - 1], v.dtype.np)
            if v.dtype.signed:
                edges = np.append(edges, np.array(-1, v.dtype.np))
            a = rng.integers(-100 if v.dtype.signed else 0, 100, n).astype(v.dtype.np)
        else:
            big = 60000.0 if v.dtype is F16 else 1e30
            edges = np.array([0.0, -0.0, 1.0, -1.0, big, -big, np.inf, -np.inf, np.nan])
            a = rng.uniform(-2, 2, n)
        special = rng.random(n) < 0.08
        a = np.where(special, edges[rng.integers(len(edges), size=n)], a)
        with np.errstate(all="ignore"):
            out[name] = a.astype(v.dtype.np).reshape(v.shape)
    return out
