"""Every sample graph, at small sizes, under every planner, thread mapping and stitch
scheme -- the matrix the NVRTC check compiles (tests/codegen/test_cuda_compile.py) --
run in the CUDA emulator with the H100's plans, each kernel checked against the NumPy
reference on fresh random inputs with its outputs poisoned; and each kernel's global
memory accesses, counted by the emulator, against what the kernel IR and the cost model
say it does: every output byte written once, every input's distinct bytes read as
counted (Buffer.read_bytes: in full, but for what a slice or gather skips), a row
kernel's row-long inputs read again exactly as often as the cost model prices it (each element
once where the row stays on chip), a vectorized row's buffers moved only in accesses
of its vector's width (16 bytes: 4 float32, 8 bfloat16), an elementwise loop's
outputs stored in accesses of its vector's width but for the tail; and the warp-wide
requests coalesced (at most one 32-byte sector a request beyond its bytes) for an
elementwise loop's outputs and the inputs it reads at its index or broadcasts along it,
and for a row kernel's row-long buffers exactly where the cost model's scatter factor
says. Where a sample has more
than MAX_PLANS variants (the ONNX BERT layer: 228), a seeded sample of them runs, the
planners' own plans always among them. The sizes keep the shapes' character (odd row
counts, rows not a multiple of the vector width -- 1002 and 3001, their tiles shifted --
long rows, a BERT block with its matmuls) at a few thousand elements per row at most."""
from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.fusion import run_planner
from workbench.fusion.features import _reread_bytes, _scatter
from workbench.device import DEFAULT_DEVICE
from workbench.fusion.mapping import ScheduleKind
from workbench.fusion.schedule import group_io
from workbench.measure import verify_kernels
from workbench.codegen.kir import Load, Loop
from workbench.runtime.cuda_emu import WIDTHS, CudaEmuBackend, counting
from workbench.session import Session

from budget import limit
from plan_checks import plan_variants

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_graphs"))
import make_onnx_samples  # noqa: E402
import make_samples  # noqa: E402

# (CI sets WB_REQUIRE_CUDA_EMU: there these fail rather than skip)
EMU_MISSING = None if os.environ.get("WB_REQUIRE_CUDA_EMU") else CudaEmuBackend.unavailable()
pytestmark = pytest.mark.skipif(EMU_MISSING is not None, reason=str(EMU_MISSING))

SMALL = {"layernorm": dict(rows=37, cols=1000), "rmsnorm": dict(rows=19, cols=2052),
         "softmax": dict(rows=37, cols=1000),
         "attention_softmax": dict(batch=1, heads=2, seq=40),
         "bias_gelu": dict(rows=9, cols=772),
         "bias_gelu_residual_layernorm": dict(rows=13, cols=1000),
         "bias_gelu_residual_layernorm_bf16": dict(rows=13, cols=1002),
         "cross_entropy": dict(rows=11, classes=3001), "adam": dict(rows=7, cols=999),
         "bias_grad": dict(rows=300, cols=77), "layernorm_param_grad": dict(rows=300, cols=77),
         "bert_chain": dict(tokens=24, hidden=64, ffn=256),
         # the ONNX samples, imported from files as they are
         "bert_chain.onnx": dict(batch=1, seq=16, hidden=64, heads=4, ffn=128),
         "layernorm_gelu.onnx": dict(tokens=24, hidden=96)}


# (CI: 32, drawn by the same seed; WB_FULL_TESTS=1: 80 -- tests/budget.py)
MAX_PLANS = limit(80, 32)


def test_every_sample_is_covered():
    files = {p.name for p in Path("sample_graphs").glob("*.json")} | {
        p.name for p in Path("sample_graphs").glob("*.onnx")}
    assert {n if n.endswith(".onnx") else n + ".json" for n in SMALL} == files


def _small(name: str, tmp_path):
    if name.endswith(".onnx"):
        import onnx
        model = getattr(make_onnx_samples, name[:-5])(**SMALL[name])[0]
        onnx.save(model, tmp_path / name)
        return str(tmp_path / name)
    return getattr(make_samples, name)(**SMALL[name])


# the fast tier's samples: an elementwise chain and a column reduction (seconds); the
# others take half a minute to three minutes each in the emulator (slow)
FAST_SAMPLES = ("bias_gelu", "bias_grad")


@pytest.mark.parametrize("name", [n if n in FAST_SAMPLES else
                                  pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(SMALL)])
def test_every_variant_of_a_sample_runs_right(name, tmp_path):
    # (without GCC's -fsanitize=thread the accesses are not counted: CI has GCC)
    assert counting() or not os.environ.get("WB_REQUIRE_CUDA_EMU")
    s = Session(_small(name, tmp_path), backend="cuda-emu", seed=len(name))
    g = s.graph
    planned, variants = {}, {}
    for planner in ("none", "xla", "rules", "stitch"):
        plan, _ = run_planner(planner, g, device=s.device)
        planned.setdefault(plan, None)
        for p in plan_variants(plan) if planner in ("rules", "stitch") else []:
            variants.setdefault(p, None)
    rest = [p for p in variants if p not in planned]
    if len(planned) + len(rest) > MAX_PLANS:
        pick = np.random.default_rng(7).choice(len(rest), MAX_PLANS - len(planned), False)
        rest = [rest[i] for i in sorted(pick)]
    plans = list(planned) + rest
    for p in plans:
        prog = s.program(p)
        env = prog.run(s.inputs, keep_all=True)
        bad = [c for c in verify_kernels(prog, env) if not c.within_tolerance]
        assert not bad, (p.describe(), bad)
        groups = {gr.id: gr for gr in p.groups}
        for ck in prog.compiled:
            if ck.kernel.library is None and counting():
                _check_accesses(g, groups[ck.kernel.group], ck.kernel, ck.accesses)
    assert len(plans) >= 6


def coalesced(a, write: bool = False) -> bool:
    """Whether a buffer's loads (stores) coalesce: no warp-wide request touches more
    than one 32-byte sector beyond what its bytes need (summed over the requests)."""
    sectors, requests, asked = ((a.store_sectors, a.store_requests, a.written) if write
                                else (a.load_sectors, a.load_requests, a.read))
    return sectors <= -(-asked // 32) + requests


def _check_accesses(g, gr, k, accesses):
    """One launch's counted accesses (``cuda_emu.Accesses`` per parameter) against the
    kernel's and the cost model's account of them."""
    where = f"{k.name} ({k.schedule})"
    for b, a in zip(k.params, accesses):
        if b.is_output and not b.workspace:
            assert a.written == a.written_distinct == b.nbytes, (where, b.name, a)
        elif not b.is_output:
            assert a.read_distinct == b.read_bytes, (where, b.name, a)
    s = gr.schedule
    if s.kind is ScheduleKind.elementwise:
        # a flat loop's outputs are stored at its index: 16 bytes at a time (8 bytes
        # for a 2-byte type by 4 beside a 4-byte one), the tail element by element
        (loop,) = [x for x in k.body if isinstance(x, Loop) and x.bind == "flat"] or [None]
        for b, a in zip(k.params, accesses):
            if loop is None or loop.vector == 1 or not b.is_output or b.workspace:
                continue
            width = b.dtype.itemsize * loop.vector
            if width in WIDTHS and b.nbytes == loop.extent * b.dtype.itemsize:
                tail = loop.extent % loop.vector * b.dtype.itemsize
                assert a.written_by_width[WIDTHS.index(width)] == b.nbytes - tail, \
                    (where, b.name, a)
        # its outputs, the inputs read at the loop's index, and those broadcast along
        # it by a multiple of the vector (a row vector at i % C, a per-row value at
        # i / C) coalesce; a transpose's or a gather's need not
        if loop is not None:
            plain = {x.buf.name for x in loop.body if isinstance(x, Load) and (
                x.offset == loop.var or (m := re.fullmatch(rf"\({loop.var} [%/] (\d+)\)",
                                                           x.offset))
                and int(m.group(1)) % loop.vector == 0)}
            for b, a in zip(k.params, accesses):
                if b.is_output and not b.workspace:
                    assert coalesced(a, write=True), (where, b.name, a)
                elif b.name in plain:
                    assert coalesced(a), (where, b.name, a)
    if s.kind is not ScheduleKind.row_reduce:
        return
    io = group_io(g, gr.nodes)
    row_long = {v for v in (*io.inputs, *io.outputs) if g.value(v).shape == tuple(s.domain)}
    reread = sum(a.read - b.nbytes for b, a in zip(k.params, accesses)
                 if not b.is_output and b.value in row_long)
    assert reread == _reread_bytes(g, gr.nodes, io, s), (where, reread)
    # the row-long buffers coalesce exactly where the cost model says they do (its
    # scatter factor: 1 where the mapping's threads run along the reduced axis as the
    # layout does)
    # (where a request moves 64 bytes on average or more: with only a few lanes
    # active -- a handful of rows a thread each -- the two look alike)
    scattered = _scatter(g, s, DEFAULT_DEVICE) > 1
    for b, a in zip(k.params, accesses):
        asked, requests = ((a.written, a.store_requests) if b.is_output
                           else (a.read, a.load_requests))
        if b.value in row_long and not b.workspace and asked >= 64 * requests > 0:
            assert coalesced(a, write=b.is_output) != scattered, (where, b.name, a)
    if s.innermost and s.vector > 1:
        # (a shifted tile -- a row length the vector does not divide -- moves the ends
        # of each row element by element: its first (V - shift) % V elements, its last
        # (cols + shift) % V)
        V, rows = s.vector, math.prod(s.domain) // s.cols
        ends = sum((V - r * s.cols % V) % V + (s.cols + r * s.cols % V) % V
                   for r in range(rows)) if s.cols % V else 0
        for b, a in zip(k.params, accesses):
            if b.value in row_long and not b.workspace:
                width = b.dtype.itemsize * s.vector
                assert a.vector_fraction(width) == pytest.approx(
                    1 - ends / (rows * s.cols)), (where, b.name, width, a)


@pytest.mark.parametrize("kind", ["softmax", "layer_norm"])
@pytest.mark.parametrize("cols", [50257, 65536])
def test_a_row_too_long_for_registers_is_read_once_from_shared_memory(kind, cols):
    """GPT-2's logits, 50257 float32 a row: more than a block's registers hold, so the
    row is kept in dynamic shared memory (past the static 48 KB); 65536 (256 KB) fit
    neither alone, so each thread's first tile steps stay in registers and the rest
    go to shared memory. Either way the row is read from global memory once, 16 bytes
    an access but for a row's two ends, every output byte written once, and the result
    matches the reference."""
    from workbench.ir import GraphBuilder
    b = GraphBuilder(f"{kind}_{cols}")
    x = b.input("x", (3, cols))
    cols = x.shape[-1]
    y = b.softmax(x, axis=-1) if kind == "softmax" else b.layer_norm(
        x, b.constant(np.linspace(0.5, 1.5, cols, dtype=np.float32), "w"),
        b.constant(np.linspace(-0.5, 0.5, cols, dtype=np.float32), "b"))
    b.output(y, "y")
    s = Session(b.build(), backend="cuda-emu", seed=5)
    plan, _ = run_planner("rules", s.graph, device=s.device)
    prog = s.program(plan)
    env = prog.run(s.inputs, keep_all=True)
    assert all(c.within_tolerance for c in verify_kernels(prog, env))
    (ck,) = prog.compiled
    (cache,) = ck.kernel.scratch
    assert cache.space == ("shared" if cols == 50257 else "hybrid")
    assert ck.kernel.dynamic_shared_bytes >= (cols * 4 if cols == 50257 else cols * 2)
    if counting():
        _check_accesses(s.graph, plan.groups[0], ck.kernel, ck.accesses)
        (a,) = [a for p, a in zip(ck.kernel.params, ck.accesses) if p.value == "x"]
        assert a.read == a.read_distinct == 3 * cols * 4
