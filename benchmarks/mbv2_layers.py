#!/usr/bin/env python
"""MobileNetV2 layer by layer against onnxruntime node by node on the CPU: each of the
workbench's kernels (its own nanoseconds, taken inside the native call: ``kernel_ns``)
beside the onnxruntime node(s) computing the same convolution (its profiler's per-node
``dur``, ``SessionOptions.enable_profiling``), the fastest of many calls on each side.

    .venv/bin/python benchmarks/mbv2_layers.py [--model mobilenet_v2] [--rounds 20]

The zoo's model (``--size`` small, dynamo export), planner stitch. Per round: a 0.2 s
pause, then ``--inner`` workbench calls, then likewise onnxruntime calls profiled, then
unprofiled; per kernel and per node the fastest of all its calls is kept (a 0.3 ms call
under load is mostly noise; the fastest is what each side can do). The profiler's node
times sum to more than an unprofiled call: they are also shown scaled to sum to the
fastest unprofiled call. The k-th
convolution of the ONNX graph is the workbench's k-th convolution kernel; its
onnxruntime node is the Conv/FusedConv named after the convolution's output or a value
its BatchNormalization / activation / Add chain computes (onnxruntime names an NCHWc
node ``<value>_nchwc``, and runs ResNet's shortcut before the block's second 3x3,
so the k-th node is not always the k-th convolution); where the names do not tell,
the k-th node, its output shape checked. onnxruntime's layout nodes
(``ReorderInput``/``ReorderOutput``, NCHW <-> NCHWc) are listed apart. Layer kinds:
``stem`` (3 channels in), ``expand`` (1x1 + ReLU6), ``depthwise s1/s2`` (3x3 + ReLU6),
``project`` (1x1, ``+ residual`` with the block's input added), ``head`` (the last 1x1
to 1280 channels), ``shortcut`` (a strided 1x1: ResNet's projection of a block's
input), ``KxK sS`` (any other convolution: ResNet's basic blocks).
Each layer's GFLOP/s (2 x its multiply-adds per second) is also shown as a share of the
cores' float32 peak, the CPU probe's multiply-add rate (``calibrate.measure_cpu``'s
FMA probe, the fastest of 1000 calls at the start: its own 7 read 44 GFLOP/s at load 7
where kernels ran at 200) -- how far a kernel is from what its multiply-adds allow.
Writes ``<out>/mbv2-layers-<date><tag>.json`` and ``.md``.
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import one_model_run, log, machine_line, write_results
import models

def form_of(ck) -> str:
    """How a kernel's convolution is computed (the forms of docs/convolutions.md), from
    its schedule's description and whether it calls sgemm."""
    what = str(ck.kernel.schedule)
    for marker, name in (("channels in", "depthwise lanes"), ("plane at a time", "depthwise planes"),
                         ("depthwise", "depthwise taps"), ("direct", "direct"),
                         ("transposed", "transposed micro-kernel")):
        if marker in what:
            return name
    return "sgemm" if ck.kernel.blas else "micro-kernel"


def conv_layers(path: Path) -> list[dict]:
    """Each Conv of the ONNX file in graph order: its kind and shapes."""
    import onnx
    from onnx import shape_inference
    m = shape_inference.infer_shapes(onnx.load(str(path)))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    inits = {i.name: list(i.dims) for i in m.graph.initializer}
    consumers: dict = {}
    for n in m.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    out = []
    for n in m.graph.node:
        if n.op_type != "Conv":
            continue
        att = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        w = inits[n.input[1]]
        group, stride = att.get("group", 1), att.get("strides", [1, 1])[0]
        x, y = shapes.get(n.input[0]), shapes.get(n.output[0])
        after = [c.op_type for c in consumers.get(n.output[0], [])]
        if w[1] * group == 3:
            kind = "stem"
        elif w[2] * w[3] == 1 and stride > 1:
            kind = "shortcut"
        elif w[2] * w[3] == 1:
            # (a block's first project feeds the next expand and, later, the residual)
            kind = ("head" if w[0] >= 1280 else "expand" if "Clip" in after else
                    "project + residual" if after == ["Add"] else "project")
        elif group > 1:
            kind = f"depthwise s{stride}"
        else:
            kind = f"{w[2]}x{w[3]} s{stride}"
        out.append({"kind": kind, "in": x, "out": y, "weights": w, "group": group,
                    "stride": stride, "names": value_chain(n, consumers),
                    # (each output element: one multiply-add per weight of its filter)
                    "macs": int(np.prod(y)) * int(np.prod(w[1:]))})
    return out


# ops onnxruntime fuses into the convolution before them (its node then named after
# the last one's output)
FUSED_AFTER = ("BatchNormalization", "Relu", "Clip", "Add", "Sum", "Sigmoid", "Mul")


def value_chain(conv, consumers: dict) -> list[str]:
    """The convolution's own name and output, then each value computed from it by a
    lone consumer of a kind onnxruntime fuses into it: the names its node may carry."""
    names, v = [conv.name, conv.output[0]], conv.output[0]
    while len(consumers.get(v, [])) == 1 and consumers[v][0].op_type in FUSED_AFTER:
        v = consumers[v][0].output[0]
        names.append(v)
    return names


def pair_nodes(layers: list[dict], ort_convs: list[dict]) -> list[dict]:
    """onnxruntime's node for each layer: the one named after a value of the layer's
    chain (the first of the chain that names one); where any layer finds none, the k-th
    node for the k-th layer, their output shapes checked to agree."""
    by_name = {n["name"].removesuffix("_nchwc"): n for n in ort_convs}
    found = [next((by_name[v] for v in lay["names"] if v in by_name), None)
             for lay in layers]
    if all(found) and len({id(f) for f in found}) == len(found):
        return found
    for lay, node in zip(layers, ort_convs):
        shape = node["out"][0]["float"] if node.get("out") else None
        assert shape in (None, lay["out"]), (lay, node)
    return ort_convs


def fma_peak(calls: int = 1000) -> float:
    """The cores' float32 multiply-adds per second, x 2: the CPU probe's (``calibrate``:
    64 chains per thread of vectorized multiply-adds in cache), its fastest of
    ``calls`` calls."""
    import ctypes
    from workbench.runtime import calibrate
    fma = calibrate._build_probe().wb_probe_fma
    fma.restype, fma.argtypes = None, [ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
    x = np.random.default_rng(0).random(calibrate.FMA_ELEMS, dtype=np.float32)
    t = calibrate._best_time(lambda: fma(x.ctypes.data, calibrate.FMA_ELEMS,
                                         calibrate.FMA_REPS), calls)
    return 2.0 * calibrate.FMA_ELEMS * calibrate.FMA_REPS / t


def ort_profiled(path: Path, folder: Path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(folder / "ort-profile")
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess


def ort_nodes(profile: Path) -> list[dict]:
    """The profile's node events: name, op, output shape, duration us, run index."""
    events = json.loads(profile.read_text())
    nodes = []
    for e in events:
        if e.get("cat") == "Session" and e.get("name") == "model_run":
            continue
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        a = e.get("args", {})
        nodes.append({"name": e["name"][:-len("_kernel_time")], "op": a.get("op_name"),
                      "ts": e["ts"], "dur": e["dur"],
                      "out": a.get("output_type_shape")})
    return nodes


def main(argv=None) -> int:
    a, res = one_model_run(argv, __doc__, rounds=20)
    date = res["date"]
    res["peak_gflops"] = fma_peak() / 1e9
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        log(f"{a.model}: build, export, plan, compile")
        rec, calls = models.prepare_model(a.model, tmp, [1], a.size, planners=("stitch",))
        prog, inputs = calls["workbench stitch"].program, calls["workbench stitch"].inputs
        path = next(tmp.glob("*.onnx"))
        layers = conv_layers(path)
        convs = [i for i, ck in enumerate(prog.compiled)
                 if any(prog.graph.node(n).op == "conv2d" for n in ck.kernel.nodes)]
        assert len(convs) == len(layers), (len(convs), len(layers))
        sess = ort_profiled(path, tmp)
        import onnxruntime as ort
        plain = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        ns = np.zeros(len(prog.compiled), dtype=np.int64)
        best = np.full(len(prog.compiled), np.iinfo(np.int64).max)
        calls_wb, calls_ort, calls_plain = [], [], []
        for _ in range(3):
            prog.execute(inputs, kernel_ns=ns)
            sess.run(None, inputs)
            plain.run(None, inputs)
        for r in range(a.rounds):
            time.sleep(0.2)
            for _ in range(a.inner):
                t0 = time.perf_counter_ns()
                prog.execute(inputs, kernel_ns=ns)
                calls_wb.append(time.perf_counter_ns() - t0)
                best = np.minimum(best, ns)
            time.sleep(0.2)
            for _ in range(a.inner):
                t0 = time.perf_counter_ns()
                sess.run(None, inputs)
                calls_ort.append(time.perf_counter_ns() - t0)
            time.sleep(0.2)
            for _ in range(a.inner):
                t0 = time.perf_counter_ns()
                plain.run(None, inputs)
                calls_plain.append(time.perf_counter_ns() - t0)
        profile = Path(sess.end_profiling())
        nodes = ort_nodes(profile)
    # per node name, the fastest of its runs (the warm-up runs included: fastest anyway)
    fastest: dict = {}
    order: list = []
    for n in nodes:
        if n["name"] not in fastest:
            order.append(n["name"])
            fastest[n["name"]] = dict(n)
        fastest[n["name"]]["dur"] = min(fastest[n["name"]]["dur"], n["dur"])
    ort_convs = [fastest[k] for k in order if fastest[k]["op"] in ("Conv", "FusedConv")]
    other = [fastest[k] for k in order if fastest[k]["op"] not in ("Conv", "FusedConv")]
    assert len(ort_convs) == len(layers), (len(ort_convs), len(layers))
    rows = []
    for lay, ki, on in zip(layers, convs, pair_nodes(layers, ort_convs)):
        ck = prog.compiled[ki]
        rows.append({**lay, "kernel": ck.kernel.name, "form": form_of(ck),
                     "ours_us": float(best[ki]) / 1e3, "ort_node": on["name"],
                     "ort_op": on["op"], "ort_us": float(on["dur"])})
    rest = [i for i in range(len(prog.compiled)) if i not in convs]
    res["layers"] = rows
    res["ours_other"] = [{"kernel": prog.compiled[i].kernel.name,
                          "us": float(best[i]) / 1e3} for i in rest]
    res["ort_other"] = [{"name": o["name"], "op": o["op"], "us": float(o["dur"])}
                        for o in other]
    res["call_fastest_ms"] = {"workbench": min(calls_wb) / 1e6,
                              "onnxruntime (profiled)": min(calls_ort) / 1e6,
                              "onnxruntime": min(calls_plain) / 1e6}
    res["call_median_ms"] = {"workbench": float(np.median(calls_wb)) / 1e6,
                             "onnxruntime (profiled)": float(np.median(calls_ort)) / 1e6,
                             "onnxruntime": float(np.median(calls_plain)) / 1e6}
    # the profiler's node times sum to more than a whole unprofiled call: each is scaled
    # by (fastest unprofiled call) / (sum of the fastest node times), so that they sum to
    # that call -- onnxruntime's own overhead beside its nodes then counted as zero, a
    # bound in its favour
    res["ort_scale"] = res["call_fastest_ms"]["onnxruntime"] * 1e3 / (
        sum(r["ort_us"] for r in rows) + sum(o["us"] for o in res["ort_other"]))
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"mbv2-layers-{date}{a.tag}"
    write_results(stem, res, markdown)
    print(markdown(res))
    return 0


def markdown(res: dict) -> str:
    rows = res["layers"]
    peak = res.get("peak_gflops") or float("nan")
    lines = [f"# {res['model']} layer by layer against onnxruntime ({res['date']})", "",
             f"{machine_line(res)}. Zoo size `{res['size']}`, dynamo export, planner stitch. "
             f"{res['rounds']} rounds of {res['inner']} calls per side, alternating, 0.2 s "
             "pause before each block; per kernel / node the fastest of all its calls "
             "(ours: `kernel_ns`, inside the native call; onnxruntime: its profiler's "
             "node `dur`). The profiler's node times sum to more than a whole unprofiled "
             f"call: *scaled* is each times {res['ort_scale']:.2f} (the fastest "
             "unprofiled call / the sum of the fastest node times), so that they sum to "
             "that call (its overhead beside the nodes counted as zero: a bound in "
             "onnxruntime's favour). x = onnxruntime scaled / ours (> 1: ours is "
             "faster). GFLOP/s: 2 x the layer's multiply-adds per second, and its share "
             f"of the cores' float32 peak, {peak:.0f} GFLOP/s (the CPU probe's "
             "multiply-adds, the fastest of 1000 probe calls).", "",
             "| # | layer | in -> out | ours: kernel, form | ours us | GFLOP/s (% peak) | "
             "onnxruntime node | theirs us (profiled) | scaled | theirs GFLOP/s | x |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    f = res["ort_scale"]
    for i, r in enumerate(rows):
        shape = f"{'x'.join(map(str, r['in'][1:]))} -> {'x'.join(map(str, r['out'][1:]))}"
        ours, theirs = (2 * r["macs"] / (us * 1e3) for us in (r["ours_us"], r["ort_us"] * f))
        lines.append(f"| {i} | {r['kind']} | {shape} | {r['kernel']}, {r['form']} | "
                     f"{r['ours_us']:.1f} | {ours:.0f} ({100 * ours / peak:.0f}%) | "
                     f"{r['ort_op']} | {r['ort_us']:.0f} | {r['ort_us'] * f:.1f} | "
                     f"{theirs:.0f} | {r['ort_us'] * f / max(r['ours_us'], 1e-3):.2f} |")
    lines += ["", "## By layer kind (sums of the fastest per layer, us; theirs scaled)", "",
              "| kind | layers | ours us | theirs us | x | ours - theirs us |",
              "|---|---|---|---|---|---|"]
    kinds: dict = {}
    for r in rows:
        k = kinds.setdefault(r["kind"], [0, 0.0, 0.0])
        k[0] += 1
        k[1] += r["ours_us"]
        k[2] += r["ort_us"] * f
    for kind, (n, o, t) in sorted(kinds.items(), key=lambda kv: kv[1][2] - kv[1][1]):
        lines.append(f"| {kind} | {n} | {o:.1f} | {t:.1f} | {t / o:.2f} | {o - t:+.1f} |")
    ours_conv = sum(r["ours_us"] for r in rows)
    theirs_conv = sum(r["ort_us"] for r in rows) * f
    ours_rest = sum(o["us"] for o in res["ours_other"])
    theirs_rest = sum(o["us"] for o in res["ort_other"]) * f
    lines += [f"| all convolutions | {len(rows)} | {ours_conv:.1f} | {theirs_conv:.1f} | "
              f"{theirs_conv / ours_conv:.2f} | {ours_conv - theirs_conv:+.1f} |",
              f"| the rest (ours: {', '.join(o['kernel'] for o in res['ours_other'])}; "
              f"theirs: {len(res['ort_other'])} nodes, "
              f"{', '.join(sorted({o['op'] for o in res['ort_other']}))}) | | "
              f"{ours_rest:.1f} | {theirs_rest:.1f} | | {ours_rest - theirs_rest:+.1f} |",
              "", "Whole calls (ms; onnxruntime with its profiler on): " +
              "; ".join(f"{k} fastest {v:.3f}, median {res['call_median_ms'][k]:.3f}"
                        for k, v in res["call_fastest_ms"].items()) + "."]
    lines += [""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
