"""Multi-step fusion on a GPU: CartPole's fused CUDA kernel, F steps per launch, against
one launch per step -- issue 46's target, >= 11.3x at 4,096 environments (the paper's).

The kernel is ``codegen/repeat_c.fused_cuda_source`` (one thread per environment, the
state in registers across the F steps of a launch; F and the first step are launch
arguments, so every F runs the same machine code). F = 1 *is* one launch per step (the
state through global memory every step). Each F runs ceil(steps / F) launches, the
state moving between two buffers in turn; the rows alternate, a pause before each, and
each is the best of ``--rounds``, timed with CUDA events around all its launches.

Checks first: every F bit for bit equal to F = 1 (same code, same arithmetic), and F = 1
against the NumPy reference within 64 eps32 per step compounded (|x| + 1) over the first
``--check-steps`` steps (the tests' bound).

    python benchmarks/temporal_gpu.py                       # cupy: 4096 and 65536 envs
    python benchmarks/temporal_gpu.py --backend cuda-emu --envs 300 --steps 8 --fs 1 2 8

``--backend cuda-emu`` runs the same launches in the CUDA emulator on any machine: it
checks the script's arguments and results; its times are no GPU's (the report says so).
Writes ``benchmarks/results/temporal-gpu-<backend>-<date>.{json,md}``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, SETTLE_S, log, machine_line, write_results

EPS32 = float(np.finfo(np.float32).eps)
TARGET = 11.3          # the paper's fused-over-one-launch-per-step speedup, CartPole


class Cupy:
    """Launches on a GPU through CuPy: NVRTC's cubin for this device, CUDA events."""
    emulated = False

    def __init__(self):
        import cupy
        from workbench.runtime.nvrtc import compile_cuda
        self.cp, self.compile_cuda = cupy, compile_cuda

    def name(self) -> str:
        props = self.cp.cuda.runtime.getDeviceProperties(self.cp.cuda.Device().id)
        n = props["name"]
        return n.decode() if isinstance(n, bytes) else str(n)

    def build(self, name: str, source: str):
        arch = str(self.cp.cuda.Device().compute_capability)
        major = self.cp.cuda.runtime.runtimeGetVersion() // 1000
        module = self.cp.cuda.function.Module()
        module.load(self.compile_cuda(source, name, arch, major=major))
        fn = module.get_function(name)
        fn.module = module                        # (kept alive with the function)
        return fn

    def to_device(self, a):
        return self.cp.asarray(a)

    def to_host(self, a):
        return self.cp.asnumpy(a)

    def empty(self, shape, dtype):
        return self.cp.empty(shape, dtype)

    def launch(self, fn, grid, block, args):
        fn((grid,), (block,), tuple(args))

    def timed(self, run) -> float:
        e0, e1 = self.cp.cuda.Event(), self.cp.cuda.Event()
        e0.record()
        run()
        e1.record()
        e1.synchronize()
        return self.cp.cuda.get_elapsed_time(e0, e1) / 1e3


class Emulator:
    """The same launches in the CUDA emulator (workbench.runtime.cuda_emu): the script's
    logic on any machine; wall-clock times of the emulator, not of a GPU."""
    emulated = True

    def __init__(self):
        from workbench.runtime import cuda_emu
        self.emu = cuda_emu

    def name(self) -> str:
        return "CUDA emulator (no GPU: times are not a GPU's)"

    def build(self, name, source):
        return self.emu.build(name, source)

    to_device = to_host = staticmethod(np.ascontiguousarray)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def launch(self, fn, grid, block, args):
        self.emu.run(fn, grid, block, [a if isinstance(a, np.ndarray) else np.asarray(a)
                                       for a in args])

    def timed(self, run) -> float:
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0


def rollout(dev, fn, r, dins: dict, f: int, outs: dict, spare: dict) -> None:
    """ceil(trips / F) launches of F steps; the final state lands in ``outs``."""
    from workbench.codegen.repeat_c import CUDA_BLOCK, elements
    m = elements(r)
    grid = -(-m // CUDA_BLOCK)
    starts = list(range(0, r.trips, f))
    cur = [dins[i] for i in r.carried_inputs]
    fixed = [dins[s] for s in r.stacked_inputs] + [outs[o] for o in r.stacked_outputs] \
        + [dins[s] for s in r.invariant_inputs]
    for k, t0 in enumerate(starts):
        dst = outs if (len(starts) - 1 - k) % 2 == 0 else spare
        nxt = [dst[o] for o in r.carried_outputs]
        dev.launch(fn, grid, CUDA_BLOCK, [*cur, *nxt, *fixed, np.int64(t0),
                                          np.int64(min(f, r.trips - t0))])
        cur = nxt


def check_reference(r, ins, got, steps: int) -> float:
    """The largest |got - reference| / (|reference| + 1) over the float outputs, in
    eps32 per step (the bound: 64)."""
    want = r.reference(ins)
    worst = 0.0
    for o in r.outputs:
        g, w = got[o], want[o]
        if g.dtype == bool:
            if not np.array_equal(g, w):
                return float("inf")
            continue
        err = np.abs(g.astype(np.float64) - w) / (np.abs(w.astype(np.float64)) + 1)
        worst = max(worst, float(err.max()) / EPS32 / steps)
    return worst


def case(dev, n: int, steps: int, fs, rounds: int, check_steps: int) -> dict:
    import workbench as wb
    from workbench.codegen.repeat_c import fused_cuda_source
    from workbench.testing.simulators import cartpole
    checks = {}
    # the reference check on a short rollout (NumPy's 256 steps of 65536 take a while)
    rc = cartpole(n, min(check_steps, steps))
    fn = dev.build("wb_repeat_cartpole", fused_cuda_source(rc, "wb_repeat_cartpole"))
    ins = wb.RepeatSession(rc, seed=1).inputs()
    d = {k: dev.to_device(v) for k, v in ins.items()}
    outs = {o: dev.empty(rc.value(o).shape, rc.value(o).dtype.np) for o in rc.outputs}
    spare = {o: dev.empty(rc.value(o).shape, rc.value(o).dtype.np) for o in rc.carried_outputs}
    rollout(dev, fn, rc, d, 1, outs, spare)
    worst = check_reference(rc, ins, {o: dev.to_host(a) for o, a in outs.items()}, rc.trips)
    checks[f"F=1 vs NumPy over {rc.trips} steps: worst eps32 per step (bound 64)"] = worst
    # the timed rollout
    r = cartpole(n, steps)
    fn = dev.build("wb_repeat_cartpole", fused_cuda_source(r, "wb_repeat_cartpole"))
    ins = wb.RepeatSession(r, seed=2).inputs()
    d = {k: dev.to_device(v) for k, v in ins.items()}
    fs = [f for f in fs if f <= steps]
    runs = {}
    for f in fs:
        outs = {o: dev.empty(r.value(o).shape, r.value(o).dtype.np) for o in r.outputs}
        spare = {o: dev.empty(r.value(o).shape, r.value(o).dtype.np) for o in r.carried_outputs}
        runs[f] = (outs, spare)
        rollout(dev, fn, r, d, f, outs, spare)         # warm, and the result checked
    base = {o: dev.to_host(a) for o, a in runs[fs[0]][0].items()}
    for f in fs[1:]:
        checks[f"F={f} bitwise == F={fs[0]}"] = all(
            np.array_equal(dev.to_host(runs[f][0][o]).view(np.uint8), base[o].view(np.uint8))
            for o in r.outputs)
    samples = {f: [] for f in fs}
    for _ in range(rounds):
        for f in fs:
            time.sleep(SETTLE_S)
            samples[f].append(dev.timed(lambda f=f: rollout(dev, fn, r, d, f, *runs[f])))
    rows = {f: {"launches": -(-steps // f), "samples_s": v, "best_ms": min(v) * 1e3,
                "steps_per_s": n * steps / min(v)} for f, v in samples.items()}
    one = rows[fs[0]]["best_ms"]
    for row in rows.values():
        row["x_one_launch_per_step"] = one / row["best_ms"]
    return {"envs": n, "steps": steps, "rows": rows, "checks": checks}


def markdown(res: dict) -> str:
    lines = [f"# Multi-step fusion on {res['device']} (benchmarks/temporal_gpu.py)", "",
             machine_line(res) + f"; {res['date']}.", "",
             "CartPole's fused CUDA kernel (one thread per environment, the state in "
             "registers), F steps per launch; F = 1 is one launch per step. Best of "
             f"{res['rounds']}, F values alternating with {SETTLE_S} s pauses, CUDA events "
             f"around all of a row's launches. Target (issue 46, the paper): >= {TARGET}x "
             "over one launch per step at 4,096 environments.", ""]
    if res["emulated"]:
        lines += ["**Emulated: no GPU ran this; the times are the CUDA emulator's "
                  "wall clock and say nothing of a GPU.**", ""]
    for c in res["cases"]:
        lines += [f"## {c['envs']} environments x {c['steps']} steps", "",
                  "| F | launches | best ms | M steps/s | x one launch per step |",
                  "|---|---|---|---|---|"]
        for f, row in c["rows"].items():
            lines.append(f"| {f} | {row['launches']} | {row['best_ms']:.3f} | "
                         f"{row['steps_per_s'] / 1e6:.1f} | "
                         f"{row['x_one_launch_per_step']:.2f} |")
        lines += [""] + [f"- check, {k}: {v}" for k, v in c["checks"].items()] + [""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("cupy", "cuda-emu"), default="cupy")
    ap.add_argument("--envs", type=int, nargs="+", default=[4096, 65536])
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--fs", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--check-steps", type=int, default=16)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.fs[0] != 1:
        ap.error("--fs starts with 1: one launch per step is the baseline")
    dev = Cupy() if a.backend == "cupy" else Emulator()
    out = a.out or RESULTS / f"temporal-gpu-{a.backend}-{dt.date.today().isoformat()}"
    res = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "device": dev.name(), "backend": a.backend, "emulated": dev.emulated,
           "rounds": a.rounds, "cases": [], "load_average_at_start": list(os.getloadavg())}
    for n in a.envs:
        log(f"cartpole on {res['device']}: {n} environments x {a.steps} steps")
        res["cases"].append(case(dev, n, a.steps, a.fs, a.rounds, a.check_steps))
        write_results(out, res, markdown)
        checks = res["cases"][-1]["checks"]
        if not all(v is True for k, v in checks.items() if "bitwise" in k) or \
                not all(v <= 64 for k, v in checks.items() if "NumPy" in k):
            log(f"a check failed: {checks}")
            return 1
    log(f"wrote {out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
