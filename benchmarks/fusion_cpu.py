#!/usr/bin/env python
"""Fusion on the CPU: every sample graph, planners ``none`` and ``rules`` on the
``cpu`` backend, side by side with NumPy eager, onnxruntime and (when importable)
PyTorch eager, in one run.

    .venv/bin/python benchmarks/fusion_cpu.py                 # all samples, 10 repeats
    .venv/bin/python benchmarks/fusion_cpu.py --quick --graphs softmax layernorm

Writes ``<out>/fusion_cpu-<date>.json``, a copy as ``<out>/fusion_cpu.json`` and a
markdown table ``<out>/fusion_cpu.md`` (``<out>`` defaults to benchmarks/results), and
prints the table plus PASS/FAIL lines for the expectation that on softmax, layernorm
and rmsnorm ``rules`` is >= 2x faster than ``none`` and moves >= 2x fewer bytes.
Timing never makes the script exit non-zero: it is a benchmark, not a test.

Every method is timed the same way: warm-up runs, then the median wall-clock time of
``--repeats`` runs. The workbench methods are timed by ``Session.measure`` (buffers
allocated once, kernels launched in order); its bytes moved are the compulsory
global-memory traffic counted from the kernel IR (each kernel reads each of its input
buffers once and writes each output once).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, ROOT, log, machine_info, stats, time_fn, workbench_samples


from workbench.runtime import run_reference
from workbench.session import Session
from workbench.tolerance import max_rel_error, tolerance

EXPECT_GRAPHS = ("softmax", "layernorm", "rmsnorm")
EXPECT_FACTOR = 2.0
OPSET = 18


def worst_error(graph, outs: dict, refs: dict) -> tuple[float, bool]:
    worst, ok = 0.0, True
    for name, ref in refs.items():
        if name not in outs:
            return float("inf"), False
        e = max_rel_error(np.asarray(outs[name]), ref)
        worst = max(worst, e)
        ok &= e <= tolerance(graph.value(name).dtype)
    return worst, ok


# -- workbench Graph -> ONNX ------------------------------------------------------------
class NotConvertible(Exception):
    pass


_UNARY = {"neg": "Neg", "abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt",
          "reciprocal": "Reciprocal", "tanh": "Tanh", "erf": "Erf", "sigmoid": "Sigmoid",
          "relu": "Relu", "sin": "Sin", "cos": "Cos", "floor": "Floor", "ceil": "Ceil",
          "not": "Not"}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
           "max": "Max", "min": "Min", "eq": "Equal", "lt": "Less", "le": "LessOrEqual",
           "gt": "Greater", "ge": "GreaterOrEqual", "and": "And", "or": "Or"}
_REDUCE = {"reduce_sum": "ReduceSum", "reduce_mean": "ReduceMean", "reduce_max": "ReduceMax",
           "reduce_min": "ReduceMin", "reduce_prod": "ReduceProd"}


def to_onnx(g):
    """An ONNX model (opset 18) computing the same outputs as workbench graph g; raises
    NotConvertible with a reason when some op has no faithful ONNX counterpart here."""
    import onnx
    from onnx import helper, numpy_helper

    def elem(dt) -> int:
        return helper.np_dtype_to_tensor_dtype(dt.np)

    nodes, inits = [], []
    counter = [0]

    def fresh(base: str) -> str:
        counter[0] += 1
        return f"_wb_{base}_{counter[0]}"

    def const_i64(vals, base) -> str:
        name = fresh(base)
        inits.append(numpy_helper.from_array(np.asarray(vals, dtype=np.int64), name))
        return name

    for name, arr in g.constants.items():
        inits.append(numpy_helper.from_array(np.asarray(arr), name))

    for n in g.nodes:
        a, ins, outs = dict(n.attr_map), list(n.inputs), list(n.outputs)
        op = n.op
        in_dts = [g.value(i).dtype for i in ins]
        if op in _UNARY:
            nodes.append(helper.make_node(_UNARY[op], ins, outs))
        elif op == "rsqrt":
            t = fresh("sqrt")
            nodes += [helper.make_node("Sqrt", ins, [t]),
                      helper.make_node("Reciprocal", [t], outs)]
        elif op in _BINARY:
            if op in ("div", "pow") and in_dts[0].kind == "i":
                # workbench: C truncation and x/0 == 0; ONNX leaves x/0 undefined
                raise NotConvertible(f"integer {op} ({n.id}) has no exact ONNX counterpart")
            nodes.append(helper.make_node(_BINARY[op], ins, outs))
        elif op == "ne":
            t = fresh("eq")
            nodes += [helper.make_node("Equal", ins, [t]), helper.make_node("Not", [t], outs)]
        elif op == "where":
            nodes.append(helper.make_node("Where", ins, outs))
        elif op == "cast":
            if in_dts[0].is_float and g.value(outs[0]).dtype.kind == "i":
                raise NotConvertible(f"float->int cast ({n.id}) saturates in the workbench, "
                                     "undefined in ONNX")
            nodes.append(helper.make_node("Cast", ins, outs, to=elem(g.value(outs[0]).dtype)))
        elif op in _REDUCE:
            rank = len(g.value(ins[0]).shape)
            axes = a.get("axes")
            axes = list(range(rank)) if axes is None else [int(x) % max(rank, 1) for x in axes]
            keep = int(bool(a.get("keepdims", True)))
            if not axes:
                nodes.append(helper.make_node("Identity", ins, outs))
            else:
                nodes.append(helper.make_node(_REDUCE[op], [ins[0], const_i64(axes, "axes")],
                                              outs, keepdims=keep))
        elif op == "reshape":
            nodes.append(helper.make_node("Reshape", [ins[0], const_i64(a["shape"], "shape")],
                                          outs))
        elif op == "transpose":
            perm = a.get("perm") or list(reversed(range(len(g.value(ins[0]).shape))))
            nodes.append(helper.make_node("Transpose", ins, outs, perm=[int(p) for p in perm]))
        elif op == "expand":
            nodes.append(helper.make_node("Expand", [ins[0], const_i64(a["shape"], "shape")],
                                          outs))
        elif op == "slice":
            starts, ends = list(a["starts"]), list(a["ends"])
            axes = list(a.get("axes") or range(len(starts)))
            steps = list(a.get("steps") or [1] * len(starts))
            nodes.append(helper.make_node(
                "Slice", [ins[0], const_i64(starts, "starts"), const_i64(ends, "ends"),
                          const_i64(axes, "axes"), const_i64(steps, "steps")], outs))
        elif op == "concat":
            nodes.append(helper.make_node("Concat", ins, outs, axis=int(a["axis"])))
        elif op == "split":
            nodes.append(helper.make_node("Split", [ins[0], const_i64(a["sizes"], "split")],
                                          outs, axis=int(a["axis"])))
        elif op == "squeeze":
            nodes.append(helper.make_node("Squeeze", [ins[0], const_i64(a["axes"], "axes")],
                                          outs))
        elif op == "unsqueeze":
            nodes.append(helper.make_node("Unsqueeze", [ins[0], const_i64(a["axes"], "axes")],
                                          outs))
        elif op == "gather":
            # indices are valid in every sample; the workbench clamps out-of-range ones
            nodes.append(helper.make_node("Gather", ins, outs, axis=int(a.get("axis", 0))))
        elif op == "matmul":
            nodes.append(helper.make_node("MatMul", ins, outs))
        elif op == "conv2d":
            pt, pl, pb, pr = a.get("pads", (0, 0, 0, 0))
            nodes.append(helper.make_node(
                "Conv", ins, outs, strides=list(a.get("strides", (1, 1))),
                pads=[pt, pl, pb, pr], dilations=list(a.get("dilations", (1, 1))),
                group=int(a.get("group", 1))))
        else:
            raise NotConvertible(f"no ONNX mapping for workbench op {op!r} ({n.id})")

    def vinfo(name):
        v = g.value(name)
        return helper.make_tensor_value_info(name, elem(v.dtype), list(v.shape))

    graph = helper.make_graph(nodes, g.name, [vinfo(i) for i in g.inputs],
                              [vinfo(o) for o in g.outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = min(model.ir_version, 9)  # what onnxruntime 1.1x accepts
    onnx.checker.check_model(model)
    return model


def ort_session(model_or_path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = os.cpu_count() or 1
    so.log_severity_level = 3
    src = model_or_path if isinstance(model_or_path, (str, Path)) \
        else model_or_path.SerializeToString()
    return ort.InferenceSession(str(src) if isinstance(src, Path) else src, so,
                                providers=["CPUExecutionProvider"])


# -- torch eager: interpret the workbench graph op by op --------------------------------
def torch_runner(g):
    """A function inputs -> outputs that runs g op by op with torch (CPU, eager)."""
    import torch

    def dt(d):
        return {"float32": torch.float32, "float16": torch.float16, "int32": torch.int32,
                "int64": torch.int64, "bool": torch.bool}[d.value]

    un = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log,
          "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
          "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid, "relu": torch.relu,
          "sin": torch.sin, "cos": torch.cos, "floor": torch.floor, "ceil": torch.ceil,
          "not": torch.logical_not}
    bi = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "pow": torch.pow,
          "max": torch.maximum, "min": torch.minimum, "eq": torch.eq, "ne": torch.ne,
          "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
          "and": torch.logical_and, "or": torch.logical_or, "matmul": torch.matmul}

    def red(fn):
        def f(x, axes, keep):
            if fn == "sum":
                return torch.sum(x, dim=axes, keepdim=keep)
            if fn == "mean":
                return torch.mean(x, dim=axes, keepdim=keep)
            if fn == "prod":
                for ax in sorted(axes, reverse=True):
                    x = torch.prod(x, dim=ax, keepdim=keep)
                return x
            return (torch.amax if fn == "max" else torch.amin)(x, dim=axes, keepdim=keep)
        return f

    consts = {k: torch.from_numpy(np.array(v)) for k, v in g.constants.items()}

    def run(inputs):
        env = dict(consts)
        env.update({k: torch.from_numpy(v) for k, v in inputs.items()})
        with torch.no_grad():
            for n in g.nodes:
                a = dict(n.attr_map)
                xs = [env[i] for i in n.inputs]
                op = n.op
                if op in un:
                    ys = [un[op](xs[0])]
                elif op in bi:
                    ys = [bi[op](xs[0], xs[1])]
                elif op == "div":
                    ys = [torch.div(xs[0], xs[1]) if xs[0].is_floating_point()
                          else torch.div(xs[0], xs[1], rounding_mode="trunc")]
                elif op == "where":
                    ys = [torch.where(*xs)]
                elif op == "cast":
                    ys = [xs[0].to(dt(g.value(n.outputs[0]).dtype))]
                elif op.startswith("reduce_"):
                    rank = xs[0].dim()
                    axes = a.get("axes")
                    axes = list(range(rank)) if axes is None else [int(x) % max(rank, 1)
                                                                   for x in axes]
                    keep = bool(a.get("keepdims", True))
                    ys = [red(op[7:])(xs[0], axes, keep) if axes else xs[0]]
                elif op == "reshape":
                    ys = [xs[0].reshape(tuple(a["shape"]))]
                elif op == "transpose":
                    perm = a.get("perm") or tuple(reversed(range(xs[0].dim())))
                    ys = [xs[0].permute(*perm).contiguous()]
                elif op == "expand":
                    shape = np.broadcast_shapes(tuple(xs[0].shape), tuple(a["shape"]))
                    ys = [xs[0].expand(*shape)]
                elif op == "slice":
                    sl = [slice(None)] * xs[0].dim()
                    starts, ends = a["starts"], a["ends"]
                    axes = a.get("axes") or range(len(starts))
                    steps = a.get("steps") or [1] * len(starts)
                    if any(s < 0 for s in steps):
                        raise NotConvertible("negative slice steps")
                    for s, e, ax, st in zip(starts, ends, axes, steps):
                        sl[ax] = slice(s, e, st)
                    ys = [xs[0][tuple(sl)].contiguous()]
                elif op == "concat":
                    ys = [torch.cat(xs, dim=int(a["axis"]))]
                elif op == "split":
                    ys = list(torch.split(xs[0], list(a["sizes"]), dim=int(a["axis"])))
                elif op == "squeeze":
                    ys = [xs[0].reshape(g.value(n.outputs[0]).shape)]
                elif op == "unsqueeze":
                    ys = [xs[0].reshape(g.value(n.outputs[0]).shape)]
                elif op == "gather":
                    ax = int(a.get("axis", 0)) % xs[0].dim()
                    idx = xs[1]
                    size = xs[0].shape[ax]
                    idx = torch.clamp(torch.where(idx < 0, idx + size, idx), 0, size - 1)
                    ys = [torch.index_select(xs[0], ax, idx.reshape(-1)).reshape(
                        g.value(n.outputs[0]).shape)]
                else:
                    raise NotConvertible(f"no torch mapping for {op!r}")
                for name, y in zip(n.outputs, ys):
                    env[name] = y
        return {o: env[o].numpy() for o in g.outputs}

    return run


# -- one graph ---------------------------------------------------------------------------
def bench_graph(path: Path, repeats: int, warmup: int, have_ort: bool, have_torch) -> dict:
    label = path.name
    t_graph = time.perf_counter()
    log(f"[{label}] loading")
    s = Session(str(path), backend="cpu")
    g = s.graph
    inputs, ref = s.inputs, s.reference
    rows = {}

    for planner in ("none", "rules"):
        log(f"[{label}] {planner}: planning, compiling, measuring")
        plan = s.plan if planner == "none" else s.auto("rules")
        m = s.measure(plan, warmup=warmup, repeats=repeats)
        spread = stats(workbench_samples(s.program(plan), inputs, repeats))
        rows[planner] = {
            "method": f"workbench {planner}", "kernels": m.kernels,
            "bytes_moved": int(m.bytes_moved), "latency_ms": m.latency_ms,
            "latency_min_ms": spread["latency_min_ms"],
            "latency_max_ms": spread["latency_max_ms"],
            "spread_pct": spread["spread_pct"],
            "spread_note": "min/max/spread from a second sampling of the same program",
            "max_rel_error": m.max_rel_error, "ok": bool(m.within_tolerance)}

    log(f"[{label}] numpy eager")
    st = stats(time_fn(lambda: run_reference(g, inputs), warmup, repeats))
    rows["numpy"] = {"method": "numpy eager (run_reference)", "kernels": None,
                     "bytes_moved": None, **st, "max_rel_error": 0.0, "ok": True}

    if not have_ort:
        rows["onnxruntime"] = {"method": "onnxruntime", "na": "onnxruntime not installed"}
    else:
        log(f"[{label}] onnxruntime")
        try:
            if path.suffix == ".onnx":
                sess, how = ort_session(path), "the .onnx file as is"
            else:
                sess, how = ort_session(to_onnx(g)), "converted from the workbench graph"
            names = [i.name for i in sess.get_inputs()]
            feeds = {k: inputs[k] for k in names}
            out_names = [o.name for o in sess.get_outputs()]
            run = lambda: sess.run(out_names, feeds)  # noqa: E731
            outs = dict(zip(out_names, run()))
            err, ok = worst_error(g, outs, ref)
            st = stats(time_fn(run, warmup, repeats))
            rows["onnxruntime"] = {"method": "onnxruntime", "model": how, "kernels": None,
                                   "bytes_moved": None, **st, "max_rel_error": err, "ok": ok}
        except Exception as e:  # a benchmark records what failed and goes on
            reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            rows["onnxruntime"] = {"method": "onnxruntime", "na": reason}

    if have_torch is not True:
        rows["torch"] = {"method": "torch eager", "na": have_torch}
    else:
        log(f"[{label}] torch eager")
        try:
            run_t = torch_runner(g)
            outs = run_t(inputs)
            err, ok = worst_error(g, outs, ref)
            st = stats(time_fn(lambda: run_t(inputs), warmup, repeats))
            rows["torch"] = {"method": "torch eager (op by op)", "kernels": None,
                             "bytes_moved": None, **st, "max_rel_error": err, "ok": ok}
        except Exception as e:
            rows["torch"] = {"method": "torch eager", "na": f"{type(e).__name__}: {e}"[:200]}

    none, rules = rows["none"], rows["rules"]
    for k, r in rows.items():
        if "latency_ms" in r:
            r["speedup_vs_none"] = none["latency_ms"] / r["latency_ms"]
    summary = {
        "rules_speedup": none["latency_ms"] / rules["latency_ms"],
        "bytes_ratio_none_over_rules": none["bytes_moved"] / max(rules["bytes_moved"], 1),
        "rules_vs_numpy": rows["numpy"]["latency_ms"] / rules["latency_ms"],
    }
    if "latency_ms" in rows.get("onnxruntime", {}):
        summary["rules_vs_onnxruntime"] = rows["onnxruntime"]["latency_ms"] / rules["latency_ms"]
    log(f"[{label}] done in {time.perf_counter() - t_graph:.1f} s: rules "
        f"{summary['rules_speedup']:.2f}x over none, bytes "
        f"/{summary['bytes_ratio_none_over_rules']:.2f}")
    return {"graph": label, "name": g.name, "nodes": len(g.nodes),
            "inputs": {k: [list(g.value(k).shape), g.value(k).dtype.value] for k in g.inputs},
            "methods": rows, **summary}


# -- machine -------------------------------------------------------------------------------


# -- reporting -------------------------------------------------------------------------
def _f(x, fmt):
    return "n/a" if x is None else fmt.format(x)


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = ["# Fusion on the CPU: workbench `none` vs `rules`, NumPy, onnxruntime, torch",
             "",
             f"**Machine:** {m['cpu']}, {m['cores']} logical cores, {m['os']}  ",
             f"Python {m['python']}, NumPy {m['numpy']}, onnxruntime {m['onnxruntime']}, "
             f"torch {m['torch'] or 'not installed'}, compiler `{m['compiler']}`  ",
             f"Date {m['date']}, commit `{m['git_commit']}`, OMP_NUM_THREADS "
             f"{m['OMP_NUM_THREADS']}, repeats {result['repeats']} (warm-up "
             f"{result['warmup']}), median wall clock"
             + (f", load average at start {', '.join(f'{x:.2f}' for x in m['load_average'])}"
                if m.get("load_average") else ""),
             "",
             "| graph | kernels none→rules | MB none→rules | bytes ÷ | none ms | rules ms "
             "| rules speedup | numpy ms | ORT ms | torch ms | rules err | ORT err "
             "| spread none/rules |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in result["graphs"]:
        ms = r["methods"]
        n, u, npy = ms["none"], ms["rules"], ms["numpy"]
        ort, tch = ms.get("onnxruntime", {}), ms.get("torch", {})
        if "na" in ort:
            notes.append(f"- {r['graph']}: onnxruntime n/a: {ort['na']}")
        if "na" in tch and "not installed" not in tch["na"]:
            notes.append(f"- {r['graph']}: torch n/a: {tch['na']}")
        flag = "" if u["ok"] and n["ok"] else " ⚠"
        lines.append(
            f"| {r['graph']} | {n['kernels']}→{u['kernels']} | "
            f"{n['bytes_moved'] / 1e6:.1f}→{u['bytes_moved'] / 1e6:.1f} | "
            f"{r['bytes_ratio_none_over_rules']:.2f}x | {n['latency_ms']:.2f} | "
            f"{u['latency_ms']:.2f} | **{r['rules_speedup']:.2f}x** | {npy['latency_ms']:.2f} | "
            f"{_f(ort.get('latency_ms'), '{:.2f}')} | {_f(tch.get('latency_ms'), '{:.2f}')} | "
            f"{u['max_rel_error']:.1e}{flag} | {_f(ort.get('max_rel_error'), '{:.1e}')}"
            f"{'' if ort.get('ok', True) else ' ⚠'} | "
            f"{n['spread_pct']:.0f}% / {u['spread_pct']:.0f}% |")
    lines += ["",
              "bytes ÷ = bytes moved by `none` / bytes moved by `rules` (compulsory traffic "
              "counted from the kernel IR). rules speedup = none ms / rules ms. err = max "
              "relative error against the NumPy reference (⚠: above the workbench "
              "tolerance, 1e-4 for float32). spread = (max - min) / median of a second "
              "sampling of the same compiled program (a noise indicator)."]
    if any(r["methods"].get("torch", {}).get("na", "").startswith("not installed")
           for r in result["graphs"]):
        lines.append("torch: not installed on this machine.")
    if notes:
        lines += ["", "Not available:"] + notes
    lines += ["", "## Expectation (softmax, layernorm, rmsnorm: rules ≥ 2x faster and ≥ 2x "
              "fewer bytes than none)", ""] + [f"- {x}" for x in result["expectation"]]
    return "\n".join(lines) + "\n"


def expectation(graph_rows: list[dict]) -> list[str]:
    out = []
    by_name = {r["graph"].rsplit(".", 1)[0]: r for r in graph_rows
               if r["graph"].endswith(".json")}
    for name in EXPECT_GRAPHS:
        r = by_name.get(name)
        if r is None:
            out.append(f"SKIP {name}: not in this run")
            continue
        sp, br = r["rules_speedup"], r["bytes_ratio_none_over_rules"]
        ok_t, ok_b = sp >= EXPECT_FACTOR, br >= EXPECT_FACTOR
        out.append(f"{'PASS' if ok_t else 'FAIL'} {name}: rules {sp:.2f}x faster than none "
                   f"(want >= {EXPECT_FACTOR:g}x)")
        out.append(f"{'PASS' if ok_b else 'FAIL'} {name}: bytes moved cut {br:.2f}x "
                   f"(want >= {EXPECT_FACTOR:g}x)")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=None, help="timed runs per method "
                   "(median; default 10, 3 with --quick)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--graphs", nargs="+", metavar="NAME", help="subset: file names or stems "
                   "(softmax, bert_chain.onnx, ...); a stem matches both .json and .onnx")
    p.add_argument("--quick", action="store_true", help="3 repeats, 1 warm-up")
    p.add_argument("--out", default=str(RESULTS), metavar="DIR")
    p.add_argument("--samples", default=str(ROOT / "sample_graphs"), metavar="DIR")
    args = p.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 10)
    warmup = 1 if args.quick and args.warmup == 2 else args.warmup

    sdir = Path(args.samples)
    files = sorted(sdir.glob("*.json")) + sorted(sdir.glob("*.onnx"))
    if args.graphs:
        want = set(args.graphs)
        files = [f for f in files if f.name in want or f.stem in want]
        missing = want - {f.name for f in files} - {f.stem for f in files}
        if missing:
            log(f"warning: no sample graph named {', '.join(sorted(missing))}")
    if not files:
        log("no graphs to run")
        return 2

    try:
        import onnxruntime  # noqa: F401
        have_ort = True
    except ImportError:
        have_ort = False
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = "not installed"

    machine = machine_info()
    log(f"machine: {machine['cpu']} ({machine['cores']} cores); {len(files)} graphs, "
        f"repeats {repeats}, warm-up {warmup}")
    rows, failed = [], []
    t0 = time.perf_counter()
    for i, f in enumerate(files, 1):
        log(f"== {i}/{len(files)} {f.name}")
        try:
            rows.append(bench_graph(f, repeats, warmup, have_ort, have_torch))
        except Exception as e:  # e.g. an .onnx sample the frontend cannot import
            log(f"[{f.name}] skipped: {type(e).__name__}: {e}")
            failed.append({"graph": f.name, "na": f"{type(e).__name__}: {e}"[:300]})
    result = {"benchmark": "fusion_cpu", "machine": machine, "repeats": repeats,
              "warmup": warmup, "backend": "cpu", "graphs": rows, "skipped": failed,
              "wall_s": round(time.perf_counter() - t0, 1)}
    result["expectation"] = expectation(rows)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y-%m-%d")
    text = json.dumps(result, indent=1, default=str)
    (out / f"fusion_cpu-{stamp}.json").write_text(text)
    (out / "fusion_cpu.json").write_text(text)
    md = markdown(result)
    if failed:
        md += "\nSkipped graphs:\n" + "".join(f"- {x['graph']}: {x['na']}\n" for x in failed)
    (out / "fusion_cpu.md").write_text(md)
    print(md)   # the table, then the PASS/FAIL lines (its last section)
    log(f"wrote {out / f'fusion_cpu-{stamp}.json'}, {out / 'fusion_cpu.json'}, "
        f"{out / 'fusion_cpu.md'} ({result['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
