"""One fuzz case: draw a graph of a family, check its unfused plan, then each accepted
random plan edit, every kernel against the NumPy reference; :func:`fuzz` runs seeds."""
from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from ...errors import FusionRefused
from ...fusion.mapping import ScheduleKind
from ...ir import Graph
from ...tolerance import max_rel_error
from ...measure.tune import candidates
from ...measure.verify import verify_kernels
from ...runtime import nvrtc, run_reference
from ...session import Session
from .graphs import (FAMILIES, FAMILY_DRAWERS, MAPPINGS, PLANNERS, SCHEMES, Case, Failure,
                     draw_graph, draw_inputs)


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
    if cuda:
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
    ``blocks`` (transformer blocks: :mod:`.blocks`), ``convs``
    (convolutional networks: :mod:`.convs`) or ``rows`` (row workloads
    at every mapping's lengths: :mod:`.rows`)."""
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
    try:
        g, inputs = draw_case(seed, family, max_ops)
    except Exception as e:     # noqa: BLE001 -- a family checks its import as it draws
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return Case(seed, None, {}), [Failure(seed, "draw", f"{type(e).__name__}: {e} "
                                              f"({tb.filename}:{tb.lineno})")]
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
        rep.ops += len(case.graph.nodes) if case.graph is not None else 0
        rep.failures += fails
        if progress:
            progress(case, fails)
    rep.seconds = time.perf_counter() - t0
    rep.processes.add(os.getpid())
    return rep
