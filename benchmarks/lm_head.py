#!/usr/bin/env python
"""LM-head-shaped GEMMs (few rows, 32k columns) on the CPU: the workbench's GEMM kernel
against onnxruntime's MatMul/Gemm (MLAS), NumPy's matmul (OpenBLAS) and torch's, in one
run, with A's slivers packed once per run (``fusion/gemm/left_pack.py``) and, beside it,
copied by every tile as before.

    .venv/bin/python benchmarks/lm_head.py [--rounds 10] [--shapes lm_head ffn_up]
    .venv/bin/python benchmarks/lm_head.py --shapes lm_head --models mistral qwen2

Each shape is an ONNX file the workbench imports as a user's export: ``x @ W`` (MatMul
with W k x n), ``Gemm(transB=1)`` with W n x k (torch's Linear as exported), and
``MatMul(x, Transpose(W))``. Methods alternate, one call each after an idle pause of
``SETTLE_S``; per call the wall time and the process's CPU time (``time.process_time``,
every thread's): on a 2-core machine shared with other work the wall time measures the
neighbours too, while the CPU time of a call whose threads wait passively (the
workbench's OpenMP, onnxruntime with ``allow_spinning=0``) is its own work. Reported:
median and fastest wall ms, median CPU ms, GFLOP/s per busy core, and x = onnxruntime /
method (> 1: faster than onnxruntime). Outputs checked against NumPy in float64 on
fresh random inputs. Writes ``<out>/lm-head-<date>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, SETTLE_S, log, machine_line, write_results

# name -> (rows, k, columns, form)
SHAPES = {
    "lm_head": (128, 256, 32000, "matmul"),                  # Mistral/Qwen2 small, 1 x 128
    "lm_head_gemm_transB": (128, 256, 32000, "gemm_transB"),
    "lm_head_transpose": (128, 256, 32000, "transpose_matmul"),
    "lm_head_2x128": (256, 256, 32000, "gemm_transB"),      # the zoo's batch of 2
    "ffn_up": (128, 768, 3072, "gemm_transB"),              # BERT-base's FFN up, 12 column tiles
}


def onnx_file(path: Path, m: int, k: int, n: int, form: str, w: np.ndarray) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    if form == "matmul":
        nodes, init = [helper.make_node("MatMul", ["x", "w"], ["y"])], w
    elif form == "gemm_transB":
        nodes, init = [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], w.T
    else:
        nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
                 helper.make_node("MatMul", ["x", "wt"], ["y"])]
        init = w.T
    g = helper.make_graph(nodes, "lm_head",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                          [numpy_helper.from_array(np.ascontiguousarray(init), "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@contextlib.contextmanager
def a_per_tile():
    """Kernels lowered as before: every tile copies its slivers of A."""
    from workbench.fusion.gemm import left_pack
    old = left_pack.LEFT_PACK
    left_pack.LEFT_PACK = left_pack.LeftPack(min_col_tiles=1 << 30)
    try:
        yield
    finally:
        left_pack.LEFT_PACK = old


def methods_for(path: Path, x: np.ndarray, w: np.ndarray, form: str) -> dict:
    import onnxruntime as ort
    import torch
    import workbench as wb
    out = {}
    for label, ctx in (("workbench", contextlib.nullcontext), ("workbench, A per tile",
                                                               a_per_tile)):
        with ctx():
            s = wb.Session(wb.load(path), backend="cpu")
            s.auto("stitch")
            prog = s.program()
        out[label] = (lambda p: lambda: p.run({"x": x})["y"])(prog)
        out[label].describe = s.plan.groups[0].schedule.describe()
    so = ort.SessionOptions()
    so.intra_op_num_threads = os.cpu_count()
    # (a pool that spins after a call would be timed as work: see the module docstring)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    out["onnxruntime"] = lambda: sess.run(None, {"x": x})[0]
    wn = w if form == "matmul" else np.ascontiguousarray(w.T)
    out["numpy"] = (lambda: x @ w) if form == "matmul" else (lambda: x @ wn.T)
    xt, wt = torch.from_numpy(x), torch.from_numpy(wn)
    out["torch"] = ((lambda: (xt @ wt).numpy()) if form == "matmul"
                    else (lambda: torch.nn.functional.linear(xt, wt).numpy()))
    return out


def run(shapes, rounds: int) -> dict:
    res = {"rounds": rounds, "cases": [], "date": dt.date.today().isoformat(),
           "load_average_at_start": list(os.getloadavg())}
    rng = np.random.default_rng(int(time.time()))      # fresh inputs each run
    with tempfile.TemporaryDirectory() as tmp:
        for name in shapes:
            m, k, n, form = SHAPES[name]
            w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
            x = rng.standard_normal((m, k)).astype(np.float32)
            path = Path(tmp) / f"{name}.onnx"
            onnx_file(path, m, k, n, form, w)
            methods = methods_for(path, x, w, form)
            want = x.astype(np.float64) @ w.astype(np.float64)
            errors = {}
            for label, fn in methods.items():
                y = fn()
                fn()
                errors[label] = float(np.max(np.abs(y - want)) / np.max(np.abs(want)))
                assert errors[label] < 1e-4, (name, label, errors[label])
            wall, cpu = _alternate(methods, rounds)
            case = {"shape": name, "m": m, "k": k, "n": n, "form": form,
                    "schedule": methods["workbench"].describe,
                    "before_schedule": methods["workbench, A per tile"].describe,
                    "error": errors, "wall_ms": wall, "cpu_ms": cpu,
                    "median_wall_ms": {lb: float(np.median(v)) for lb, v in wall.items()},
                    "min_wall_ms": {lb: float(np.min(v)) for lb, v in wall.items()},
                    "median_cpu_ms": {lb: float(np.median(v)) for lb, v in cpu.items()}}
            res["cases"].append(case)
            log(f"{name}: " + ", ".join(f"{lb} {case['median_cpu_ms'][lb]:.2f} cpu ms"
                                        for lb in methods))
    return res


def run_models(names, rounds: int, res: dict) -> None:
    """Whole decoders whose LM head is the GEMM above: the zoo's ``small`` Mistral and
    Qwen2 with a 32000-word vocabulary and one sequence of 128 tokens (the issue's
    shape), exported as a user does, the workbench's ``stitch`` program against
    onnxruntime (default session options, as ``benchmarks/models.py`` runs it, and
    with spinning off), wall and CPU time as above."""
    import dataclasses

    import onnxruntime as ort

    import workbench as wb
    from workbench.testing import zoo
    zoo.SIZES["small-32k"] = dataclasses.replace(zoo.SIZES["small"], vocab=32000, batch=1)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            m = zoo.build(name, size="small-32k")
            path = Path(tmp) / f"{name}.onnx"
            zoo.export_onnx(m, path)
            feeds, want = m.numpy_inputs(), m.torch_outputs()
            s = wb.Session(wb.load(path), backend="cpu")
            s.auto("stitch")
            prog = s.program()
            so = ort.SessionOptions()
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sessions = {"onnxruntime": ort.InferenceSession(
                str(path), providers=["CPUExecutionProvider"]),
                "onnxruntime, spinning off": ort.InferenceSession(
                str(path), so, providers=["CPUExecutionProvider"])}
            out = sessions["onnxruntime"].get_outputs()[0].name
            methods = {"workbench": lambda: prog.run(feeds)[out],
                       **{k: (lambda se: lambda: se.run([out], feeds)[0])(se)
                          for k, se in sessions.items()}}
            errors = {k: float(np.max(np.abs(f() - want[out])) / np.max(np.abs(want[out])))
                      for k, f in methods.items()}
            wall, cpu = _alternate(methods, rounds)
            per = prog.time_calls(feeds, warmup=1, repeats=3).per_kernel
            head = max(zip(per, prog.compiled), key=lambda q: q[0])
            res.setdefault("models", []).append({
                "model": name, "vocab": 32000, "tokens": 128, "kernels": len(prog.compiled),
                "slowest_kernel": head[1].kernel.name, "slowest_kernel_ms": head[0] * 1e3,
                "slowest_kernel_schedule": s.plan.group(head[1].kernel.group).schedule.describe(),
                "kernels_ms": sum(per) * 1e3, "error": errors, "wall_ms": wall, "cpu_ms": cpu,
                "median_wall_ms": {k: float(np.median(v)) for k, v in wall.items()},
                "min_wall_ms": {k: float(np.min(v)) for k, v in wall.items()},
                "median_cpu_ms": {k: float(np.median(v)) for k, v in cpu.items()}})
            log(f"{name}: " + ", ".join(f"{k} {np.median(v):.2f} cpu ms" for k, v in cpu.items()))


def _alternate(methods: dict, rounds: int) -> tuple[dict, dict]:
    """Each method's wall and CPU ms per call, one call each in turn after a pause."""
    wall = {lb: [] for lb in methods}
    cpu = {lb: [] for lb in methods}
    for fn in methods.values():
        fn()
    for _ in range(rounds):
        for label, fn in methods.items():
            time.sleep(SETTLE_S)
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            wall[label].append((time.perf_counter() - t0) * 1e3)
            cpu[label].append((time.process_time() - c0) * 1e3)
    return wall, cpu


def markdown(res: dict) -> str:
    lines = [f"# LM-head-shaped GEMMs on the CPU ({res['date']})", "", machine_line(res), "",
             f"{res['rounds']} alternating calls per method, each after a {SETTLE_S} s "
             "pause. wall: median / fastest ms of the call; cpu: median ms of the "
             "process's CPU time per call (every thread's; the pools wait passively, so "
             "it is the call's own work, whatever else the machine runs); GFLOP/s per "
             "busy core = flops / cpu time; x = onnxruntime / method, by cpu time and by "
             "fastest wall (> 1: faster than onnxruntime). onnxruntime: intra-op threads "
             "= cores, spinning off. `workbench, A per tile`: the same kernel but for A, "
             "whose slivers each tile copies again, as before `fusion/gemm/left_pack.py` "
             "(the micro-kernel's half-height edge slivers in both).", ""]
    for c in res["cases"]:
        flops = 2 * c["m"] * c["k"] * c["n"]
        ort_cpu, ort_wall = c["median_cpu_ms"]["onnxruntime"], c["min_wall_ms"]["onnxruntime"]
        lines += [f"## {c['shape']}: {c['m']} x {c['k']} @ {c['k']} x {c['n']} "
                  f"({c['form']})", "", f"Workbench kernel: {c['schedule']}.", "",
                  "| method | wall ms (median / min) | cpu ms | GFLOP/s per busy core | "
                  "x (cpu) | x (min wall) | error |", "|---|---|---|---|---|---|---|"]
        for lb in c["median_cpu_ms"]:
            cp = c["median_cpu_ms"][lb]
            lines.append(f"| {lb} | {c['median_wall_ms'][lb]:.2f} / "
                         f"{c['min_wall_ms'][lb]:.2f} | {cp:.2f} | {flops / cp / 1e6:.1f} | "
                         f"{ort_cpu / cp:.2f} | {ort_wall / c['min_wall_ms'][lb]:.2f} | "
                         f"{c['error'][lb]:.1e} |")
        lines.append("")
    if res.get("models"):
        lines += ["## Whole decoders with a 32000-word LM head (1 x 128 tokens)", "",
                  "The zoo's `small` model (2 layers, hidden 256) with vocab 32000, "
                  "exported by `torch.onnx.export`; the workbench's `stitch` program. "
                  "x = onnxruntime (default options) / method; cpu as above (onnxruntime's "
                  "default pool spins, so its cpu time includes spinning).", "",
                  "| model | method | wall ms (median / min) | cpu ms | x (median wall) | "
                  "x (min wall) | error vs torch |", "|---|---|---|---|---|---|---|"]
        for r in res["models"]:
            o_med, o_min = (r["median_wall_ms"]["onnxruntime"], r["min_wall_ms"]["onnxruntime"])
            for lb in r["median_wall_ms"]:
                lines.append(f"| {r['model']} | {lb} | {r['median_wall_ms'][lb]:.2f} / "
                             f"{r['min_wall_ms'][lb]:.2f} | {r['median_cpu_ms'][lb]:.2f} | "
                             f"{o_med / r['median_wall_ms'][lb]:.2f} | "
                             f"{o_min / r['min_wall_ms'][lb]:.2f} | {r['error'][lb]:.1e} |")
        lines += [""] + [f"{r['model']}: {r['kernels']} kernels, {r['kernels_ms']:.2f} ms of "
                         f"kernels, the slowest `{r['slowest_kernel']}` "
                         f"{r['slowest_kernel_ms']:.2f} ms ({r['slowest_kernel_schedule']})."
                         for r in res["models"]] + [""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--models", nargs="*", default=[], choices=["mistral", "qwen2"],
                    help="whole decoders with a 32000-word head too (transformers needed)")
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    res = run(args.shapes, args.rounds)
    if args.models:
        run_models(args.models, args.rounds, res)
    write_results(args.out / f"lm-head-{res['date']}{args.tag}", res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
