"""A differential fuzzer: random graphs and random plans, every kernel against NumPy.

Each case is drawn from one seed: a graph of mixed dtypes (float32, float16, bfloat16,
int8, int32, int64, uint8, uint64, bool) with empty and size-1 axes, layout ops, casts,
gathers and matmuls; inputs holding boundary values (integer extremes, 0 and -1
divisors, inf, NaN, huge and negative gather indices); and a sequence of plan edits a
user or a planner might make -- fusing neighbours or any two kernels, splitting, stitch
schemes, all four thread mappings, every planner, the launch parameters the tuner
would try (a GPU GEMM tile's tiles and stages among them), and on a GPU's plans the
matmul precision. After every accepted edit the plan is
compiled for the cpu backend and run; each kernel is checked against the NumPy reference
on the inputs it received (:mod:`workbench.measure.verify`), and integer and bool
outputs must equal the op-by-op reference exactly.

What the generator leaves out, and why: comparisons, ``floor``/``ceil`` and
float-to-int or -bool casts read only values that no kernel computed (graph inputs and
their layout moves) -- a last-ulp difference in a computed float flips them (and a
fused half-precision kernel keeps its intermediates in float32, as torch.compile's do, so
its ``tanh(x) > x`` differs from op by op), and no error bound holds a flipped bit.

``--family blocks`` draws transformer blocks instead (:mod:`workbench.fuzz_blocks`),
``--family convs`` convolutional networks (:mod:`workbench.fuzz_convs`), ``--family
rows`` row workloads at every mapping's lengths (:mod:`workbench.fuzz_rows`).
``python -m workbench.fuzz --seconds 600`` runs cases until the time is spent and
prints (or ``--out`` writes) a report; the test suite runs a fixed, bounded set of
seeds (tests/test_fuzz.py).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from . import fuzz_blocks, fuzz_convs, fuzz_rows
from .errors import FusionRefused, GraphError
from .fusion.mapping import ScheduleKind
from .ir import DType, Graph, GraphBuilder

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
    "blocks": (fuzz_blocks.draw_block_graph, fuzz_blocks.draw_block_inputs),
    "convs": (fuzz_convs.draw_conv_graph, fuzz_convs.draw_conv_inputs),
    "rows": (fuzz_rows.draw_row_graph, fuzz_rows.draw_row_inputs)}
FAMILIES = ["mixed", *FAMILY_DRAWERS]


@dataclass
class Case:
    """One drawn graph, its inputs and what the plan edits did."""
    seed: int
    graph: Graph
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


def _neighbours(g: Graph, nid: str) -> list[str]:
    n = g.node(nid)
    out = [g.producer[i].id for i in n.inputs if i in g.producer]
    out += [c.id for o in n.outputs for c in g.consumers[o]]
    return list(dict.fromkeys(out))


def _edit(s, rng) -> str | None:
    """Apply one random plan edit to session s; its description, or None when refused."""
    g = s.graph
    ids = [n.id for n in g.nodes]
    pick = lambda xs: xs[int(rng.integers(len(xs)))]     # noqa: E731
    what = pick(["fuse_edge", "fuse_edge", "fuse_any", "split", "scheme", "mapping",
                 "mapping", "auto", "launch", "launch"]
                + (["precision"] if s.backend.device.tensor_flops > 0 else []))
    a = pick(ids)
    try:
        if what == "launch":
            # one of the tuner's candidates for a's kernel (a GPU GEMM tile's stages and
            # tiles, a row kernel's threads...): what tuning would time and keep
            # (a GEMM kernel half the time where there is one: few graphs hold a matmul)
            from .measure.tune import candidates
            gemms = [gr for gr in s.plan.groups if gr.schedule.kind is ScheduleKind.gemm]
            if gemms and rng.random() < 0.5:
                a = pick(gemms).nodes[0]
            cands = candidates(s.plan.group(a))[1:]
            if not cands:
                return None
            c = pick(cands)
            if c.mapping:
                s.set_mapping(a, c.mapping)
            if c.launch:
                s.set_launch(a, **dict(c.launch))
            return f"launch {a} {c.label}"
        if what == "precision":
            p = "float32" if s.matmul_precision == "tf32" else "tf32"
            s.set_matmul_precision(p)
            return f"set_matmul_precision {p}"
        if what == "fuse_edge" and _neighbours(g, a):
            c = pick(_neighbours(g, a))
            s.fuse([a, c])
            return f"fuse {a} {c}"
        if what.startswith("fuse"):
            c = pick(ids)
            s.fuse([a, c])
            return f"fuse {a} {c}"
        if what == "split":
            s.split(a)
            return f"split {a}"
        if what == "scheme":
            inner = [v for gr in s.plan.groups if len(gr.nodes) > 1 for n in gr.nodes
                     for v in g.node(n).outputs if any(c.id in gr.nodes
                                                       for c in g.consumers[v])]
            if not inner:
                return None
            v, sc = pick(inner), pick(SCHEMES)
            s.set_scheme(v, sc)
            return f"set_scheme {v} {sc}"
        if what == "mapping":
            m = pick(MAPPINGS)
            s.set_mapping(a, m)
            return f"set_mapping {a} {m}"
        p = pick(PLANNERS)
        s.auto(p)
        return f"auto {p}"
    except FusionRefused:
        return None


def check_plan(s, inputs, refs, cuda: bool = False) -> str | None:
    """None when every kernel of s's plan matches the reference on the inputs it got and
    integer/bool outputs equal the op-by-op reference (and, with ``cuda``, its CUDA
    source compiles with NVRTC as the GPU runtime would compile it); else what went
    wrong."""
    from .measure.compare import max_rel_error
    from .measure.verify import verify_kernels
    if cuda:
        from .runtime import nvrtc
        for gr in s.plan.groups:
            k = s.kernel(gr.id)
            if k.library is None:       # library calls are cuBLAS/cuDNN's, not ours
                try:
                    nvrtc.compile_cuda(s.source(gr.id, "cuda"), k.name, "90", ptx=True)
                except nvrtc.NvrtcError as e:
                    return f"NVRTC refused {k.name}: {str(e)[:300]}"
    prog = s.program()
    env = prog.run(inputs, keep_all=True)
    bad = [c for c in verify_kernels(prog, env) if not c.within_tolerance]
    if bad:
        return "; ".join(f"kernel {c.kernel} error {c.max_rel_error:.3g}" for c in bad)
    for name in s.graph.outputs:
        if s.graph.value(name).dtype.kind in "ib" and \
                max_rel_error(env[name], refs[name]) != 0:
            return f"output {name} differs from the op-by-op reference"
    return None


def draw_case(seed: int, family: str = "mixed", max_ops: int = 10):
    """Case ``seed``'s graph and inputs from ``family``: ``mixed`` (this module's),
    ``blocks`` (transformer blocks: :mod:`workbench.fuzz_blocks`), ``convs``
    (convolutional networks: :mod:`workbench.fuzz_convs`) or ``rows`` (row workloads
    at every mapping's lengths: :mod:`workbench.fuzz_rows`)."""
    if family == "mixed":
        g = draw_graph(seed, max_ops)
        return g, draw_inputs(g, seed)
    if family not in FAMILY_DRAWERS:
        raise ValueError(f"fuzz family {family!r}; use one of {FAMILIES}")
    graph, inputs = FAMILY_DRAWERS[family]
    g = graph(seed)
    return g, inputs(g, seed)


def run_case(seed: int, edits: int = 4, max_ops: int = 10, cuda: bool = False,
             backend: str = "cpu", precision: str = "float32",
             family: str = "mixed") -> tuple[Case, list[Failure]]:
    """Draw case ``seed`` of ``family``, check the unfused plan, then each accepted
    random edit, on ``backend`` (``cuda-emu``: the plans are the GPU's and its CUDA
    kernels run in the emulator) with the session's ``matmul_precision``."""
    from .runtime import run_reference
    from .session import Session
    g, inputs = draw_case(seed, family, max_ops)
    case = Case(seed, g, inputs)
    fails: list[Failure] = []
    try:
        refs = run_reference(g, inputs)
        s = Session(g, backend=backend, seed=seed, matmul_precision=precision)
        rng = np.random.default_rng(seed + 104729)
        todo = ["none"] + [None] * edits
        for step in todo:
            action = step or _edit(s, rng)
            if action is None:
                continue
            case.actions.append(action)
            msg = check_plan(s, inputs, refs, cuda)
            case.plans_checked += 1
            if msg:
                fails.append(Failure(seed, action, msg))
                break
    except Exception as e:     # noqa: BLE001 -- a crash is the finding
        tb = traceback.extract_tb(e.__traceback__)[-1]
        fails.append(Failure(seed, case.actions[-1] if case.actions else "build",
                             f"{type(e).__name__}: {e} ({tb.filename}:{tb.lineno})"))
    return case, fails


@dataclass
class Report:
    cases: int = 0
    plans: int = 0
    ops: int = 0
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    processes: set = field(default_factory=set)     # the pids that ran cases


def fuzz(seeds, seconds: float | None = None, edits: int = 4, max_ops: int = 10,
         progress=None, cuda: bool = False, backend: str = "cpu",
         precision: str = "float32", family: str = "mixed", starting=None) -> Report:
    """Run cases for ``seeds`` in order, stopping early once ``seconds`` have passed
    (``starting(seed)`` called before each)."""
    rep, t0 = Report(), time.perf_counter()
    for seed in seeds:
        if seconds is not None and time.perf_counter() - t0 > seconds:
            break
        if starting:
            starting(int(seed))
        case, fails = run_case(int(seed), edits, max_ops, cuda, backend, precision,
                               family)
        rep.cases += 1
        rep.plans += case.plans_checked
        rep.ops += len(case.graph.nodes)
        rep.failures += fails
        if progress:
            progress(case, fails)
    rep.seconds = time.perf_counter() - t0
    rep.processes.add(os.getpid())
    return rep


# Seeds per child process of a long run: each distinct kernel's library stayed mapped in
# the process that loaded it, and one process ran out of memory maps (Linux's
# vm.max_map_count, 65530) after ~1800 graphs -- "failed to map segment from shared
# object". The CPU backend now unloads libraries whose kernels are gone
# (runtime/cc.unload_library); a fresh process per batch still confines a crash.
SEEDS_PER_PROCESS = 400


def _print_progress(case, fails):
    mark = "FAIL" if fails else "ok"
    print(f"seed {case.seed}: {len(case.graph.nodes)} ops, {case.plans_checked} plans "
          f"{mark}" + "".join(f"\n  after {f.action}: {f.message}" for f in fails),
          flush=True)


def _mark(marker: str, seed: int) -> None:
    """Note in the marker file the seed this process is about to run (what the parent
    reads if the process dies)."""
    with open(marker, "w") as f:
        f.write(str(seed))


def _batch(first: int, count: int, seconds: float, edits: int, max_ops: int,
           cuda: bool, backend: str, precision: str, family: str, marker: str) -> Report:
    return fuzz(range(first, first + count), seconds, edits, max_ops, _print_progress, cuda,
                backend, precision, family, lambda seed: _mark(marker, seed))


def _in_child(batch, args: tuple, marker: str) -> Report | None:
    """``batch(*args, marker)`` in a fresh (spawned) process: its report, or None when
    the process died. The marker file is emptied first, so that a child dying before
    its first case leaves no stale seed in it."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    with open(marker, "w"):
        pass
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
            return ex.submit(batch, *args, marker).result()
    except BrokenProcessPool:
        return None


def fuzz_in_processes(start: int, seconds: float, edits: int = 4, max_ops: int = 10,
                      cuda: bool = False, per_process: int = SEEDS_PER_PROCESS,
                      backend: str = "cpu", precision: str = "float32",
                      family: str = "mixed", batch=None) -> Report:
    """:func:`fuzz` from seed ``start`` for ``seconds``, ``per_process`` seeds in each
    fresh child process (see SEEDS_PER_PROCESS), progress printed as it goes. A case
    that kills its process (heap corruption in a kernel, a segfault) is a failure of
    its seed; the run goes on from the next one (the dead batch's other cases are
    counted, their plans and ops not). ``batch``: what a child runs (``_batch``'s
    arguments), a module-level function."""
    import tempfile
    rep, t0, first = Report(), time.perf_counter(), start
    marker = tempfile.NamedTemporaryFile(prefix="wb-fuzz-", suffix=".seed", delete=False)
    marker.close()
    try:
        while (left := seconds - (time.perf_counter() - t0)) > 0:
            part = _in_child(batch or _batch, (first, per_process, left, edits, max_ops, cuda,
                                               backend, precision, family), marker.name)
            if part is None:        # the process died running the seed the marker holds
                with open(marker.name) as f:
                    dead = int(f.read() or first)
                print(f"seed {dead}: FAIL\n  the process running it died", flush=True)
                rep.failures.append(Failure(dead, "?", "the process running it died (a crash "
                                            "in a kernel: heap corruption, a segfault); run "
                                            f"it alone: python -m workbench.fuzz --start {dead} "
                                            f"--seconds 1 --family {family}"))
                rep.cases += dead - first + 1
                first = dead + 1
                continue
            for k in ("cases", "plans", "ops"):
                setattr(rep, k, getattr(rep, k) + getattr(part, k))
            rep.failures += part.failures
            rep.processes |= part.processes
            first += per_process
            if part.cases < per_process:
                break          # the time ran out inside the batch
    finally:
        os.unlink(marker.name)
    rep.seconds = time.perf_counter() - t0
    return rep


def _markdown(rep: Report, args) -> str:
    import numpy

    from . import __version__
    from .runtime.cc import cpu_model
    lines = [f"# Differential fuzz run, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "",
             f"- machine: {cpu_model()} ({os.cpu_count()} threads), {platform.platform()}; "
             f"Python {sys.version.split()[0]}, NumPy {numpy.__version__}, "
             f"workbench {__version__}",
             f"- command: `python -m workbench.fuzz --seconds {args.seconds} --start "
             f"{args.start} --edits {args.edits} --max-ops {args.max_ops}"
             f"{' --cuda' if args.cuda else ''}"
             f"{f' --backend {args.backend}' if args.backend != 'cpu' else ''}"
             f"{' --matmul-precision tf32' if args.matmul_precision == 'tf32' else ''}"
             f"{f' --family {args.family}' if args.family != 'mixed' else ''}`",
             f"- {rep.cases} graphs ({rep.ops} ops), {rep.plans} plans compiled, run and "
             f"checked kernel by kernel, in {rep.seconds:.0f} s",
             f"- failures: {len(rep.failures)}", ""]
    for f in rep.failures:
        lines.append(f"  - seed {f.seed}, after `{f.action}`: {f.message}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.fuzz", description=__doc__.split(
        "\n")[0])
    p.add_argument("--seconds", type=float, default=300.0, help="time budget (default 300)")
    p.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--edits", type=int, default=4, help="random plan edits per graph")
    p.add_argument("--max-ops", type=int, default=10, help="ops per graph, at most")
    p.add_argument("--cuda", action="store_true",
                   help="also compile every plan's CUDA kernels with NVRTC (no GPU needed)")
    p.add_argument("--backend", default="cpu", choices=["cpu", "cuda-emu"],
                   help="where the plans run: cpu (default), or cuda-emu: the GPU's plans, "
                        "their CUDA kernels run in the CUDA emulator (no GPU needed)")
    p.add_argument("--matmul-precision", default="float32", choices=["float32", "tf32"],
                   help="the sessions' matmul precision (tf32: the GPU's tensor-core "
                        "kernels, with --backend cuda-emu)")
    p.add_argument("--family", default="mixed", choices=FAMILIES,
                   help="the graphs drawn: mixed (default: any dtypes and ops, boundary "
                        "values), blocks (transformer blocks: GEMMs with epilogues, "
                        "attention, norms, masks), convs (convolutional networks: "
                        "convolutions of every form, poolings, BatchNorm, heads) or rows "
                        "(softmax, norms, logsumexp... at every row mapping's lengths)")
    p.add_argument("--out", help="write a markdown report here")
    a = p.parse_args(argv)

    rep = fuzz_in_processes(a.start, a.seconds, a.edits, a.max_ops, a.cuda,
                            backend=a.backend, precision=a.matmul_precision,
                            family=a.family)
    text = _markdown(rep, a)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
