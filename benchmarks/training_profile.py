"""Where a training step's time goes: the BERT-base layer's forward + backward
(``training.py``'s model, 1 x 128 tokens by default) kernel by kernel in the
workbench's ``stitch`` program against torch eager's profiler op by op, both grouped
the same way -- GEMMs, row kernels (LayerNorm / softmax and their backward), column
reductions (bias and LayerNorm parameter gradients), copies (transposes and reshapes
made contiguous) and the rest (elementwise) -- and each side's call overhead (the
step's time less its kernels' or ops' own).

Timed in alternation, a pause before each call: one native call of the workbench's
program (each kernel timed inside it, ``Program.execute(kernel_ns=)``), then one torch
step under ``torch.profiler`` (each op's self time). Each kernel's and op's time is its
fastest over the rounds: on a shared host the least disturbed estimate of its own
speed; the steps' fastest calls are given beside the sums. GEMM rows give each side's
GFLOP/s per shape.

    python benchmarks/training_profile.py [--batch 1 --seq 128] [--rounds 12]
"""
from __future__ import annotations

import argparse
import datetime as dt
import re
import time
from collections import defaultdict

import numpy as np

from harness import RESULTS, log, machine_line, write_results

PAUSE_S = 0.2
CLASSES = ("GEMM", "row kernels", "column reductions", "copies", "elementwise",
           "views and dispatch")
# torch's ops that move no data: their self time is the framework's per-op cost
_DISPATCH = {"aten::view", "aten::t", "aten::transpose", "aten::reshape", "aten::expand",
             "aten::permute", "aten::unsqueeze", "aten::squeeze", "aten::as_strided",
             "aten::linear", "aten::matmul", "aten::empty", "aten::empty_like",
             "aten::empty_strided", "aten::detach", "aten::_unsafe_view", "aten::alias",
             "aten::select", "aten::slice", "aten::contiguous", "aten::zeros_like",
             "aten::to", "aten::_to_copy", "aten::result_type", "aten::expand_as",
             "aten::split", "aten::unbind", "aten::chunk", "aten::narrow"}
_COPY_OPS = {"reshape", "transpose", "copy", "expand", "broadcast"}
_TORCH = {  # aten op -> class (what is not here is elementwise)
    "aten::mm": "GEMM", "aten::addmm": "GEMM", "aten::bmm": "GEMM",
    "aten::native_layer_norm": "row kernels", "aten::native_layer_norm_backward":
    "row kernels", "aten::_softmax": "row kernels", "aten::_softmax_backward_data":
    "row kernels", "aten::sum": "column reductions", "aten::copy_": "copies",
    "aten::clone": "copies", **{op: "views and dispatch" for op in _DISPATCH}}
_GEMM = re.compile(r"gemm (?:(\d+) x )?(\d+)x(\d+)x(\d+)")


def workbench_class(schedule: str, ops: set[str]) -> str:
    if schedule.startswith("gemm"):
        return "GEMM"
    if schedule.startswith("row_reduce"):
        # a reduction over the tokens (thread per row: each output sums one column of
        # the [tokens, hidden] gradient) or over the hidden axis (block per row)
        return "column reductions" if "thread per row" in schedule else "row kernels"
    return "copies" if ops <= _COPY_OPS else "elementwise"


def gemm_flops(schedule: str) -> float:
    b, m, n, k = _GEMM.match(schedule).groups()
    return 2.0 * int(b or 1) * int(m) * int(n) * int(k)


def torch_flops(name: str, shapes) -> float:
    try:
        if name == "aten::mm":
            (m, k), (_, n) = shapes[0], shapes[1]
            return 2.0 * m * n * k
        if name == "aten::addmm":
            (m, k), (_, n) = shapes[1], shapes[2]
            return 2.0 * m * n * k
        if name == "aten::bmm":
            (b, m, k), (_, _, n) = shapes[0], shapes[1]
            return 2.0 * b * m * n * k
    except (ValueError, IndexError, TypeError):
        pass
    return float("nan")


def _faults(fn) -> int:
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def profile(batch: int, seq: int, rounds: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile
    import workbench as wb
    from training import D, _models

    model = _models("bert")
    x, t = torch.randn(batch, seq, D), torch.randn(batch, seq, D)
    g = wb.from_torch(model, (x, t), training=True)
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    prog = s.program()
    feeds = {"x": x.numpy(), "target": t.numpy(),
             **{k: p.detach().numpy().copy() for k, p in model.named_parameters()}}
    out = prog.new_outputs()
    ns = np.zeros(len(prog.compiled), dtype=np.int64)
    graph = s.graph

    def eager():
        model.zero_grad(set_to_none=True)
        model(x, t).backward()

    for _ in range(3):
        prog.execute(feeds, out=out, kernel_ns=ns)
        eager()
    # minor page faults per call (deterministic where times are not): new pages of
    # arrays made by the call
    faults = {"workbench, outputs reused": _faults(lambda: prog.run(feeds, out=out)),
              "workbench, new outputs": _faults(lambda: prog.run(feeds)),
              "torch eager": _faults(eager)}
    per_kernel = [[] for _ in prog.compiled]
    calls, fresh, steps, events, overhead = [], [], [], [], []
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(rounds):
            # the benchmark's call (training.py): new output arrays every call, as
            # torch's step makes new gradients (zero_grad(set_to_none=True))
            time.sleep(PAUSE_S)
            t0 = time.perf_counter()
            prog.run(feeds)
            fresh.append(time.perf_counter() - t0)
            time.sleep(PAUSE_S)
            t0 = time.perf_counter()
            prog.execute(feeds, out=out, kernel_ns=ns)
            calls.append(time.perf_counter() - t0)
            for p, v in zip(per_kernel, ns.tolist()):
                p.append(v * 1e-9)
            overhead.append(calls[-1] - ns.sum() * 1e-9)
            time.sleep(PAUSE_S)
            t0 = time.perf_counter()
            eager()
            steps.append(time.perf_counter() - t0)
    # the profiler's events in call order, cut into the rounds' steps (the same op
    # sequence every step): each op's fastest self time over the rounds
    evs = sorted((e for e in prof.events() if e.name.startswith("aten::")),
                 key=lambda e: e.time_range.start)
    per_step = len(evs) // rounds
    if per_step * rounds != len(evs):
        raise RuntimeError(f"{len(evs)} torch ops in {rounds} steps: not the same ops "
                           "every step")
    names = [e.name for e in evs[:per_step]]
    for i in range(per_step):
        same = [evs[r * per_step + i] for r in range(rounds)]
        if any(e.name != names[i] for e in same):
            raise RuntimeError("torch ran other ops in another step")
        events.append({"op": names[i], "class": _TORCH.get(names[i], "elementwise"),
                       "ms": min(e.self_cpu_time_total for e in same) / 1e3,
                       "shapes": str(same[0].input_shapes)[:120],
                       "gflops": torch_flops(names[i], same[0].input_shapes) / 1e9})
    kernels = []
    for ck, ts in zip(prog.compiled, per_kernel):
        k = ck.kernel
        ops = {graph.node(n).op for n in s.plan.group(k.group).nodes}
        cls = workbench_class(k.schedule, ops)
        kernels.append({"kernel": k.name, "class": cls, "schedule": k.schedule,
                        "ms": min(ts) * 1e3, "median_ms": float(np.median(ts)) * 1e3,
                        "gflops": gemm_flops(k.schedule) / 1e9 if cls == "GEMM"
                        else float("nan")})
    return {"output_MB": sum(a.nbytes for a in out.values()) / 1e6, "page_faults": faults,
            "kernels": kernels, "torch_ops": [e for e in events if e["ms"] > 0],
            "workbench_call_ms": [c * 1e3 for c in calls],
            "workbench_fresh_call_ms": [c * 1e3 for c in fresh],
            "overhead_ms": {"min": min(overhead) * 1e3,
                            "median": float(np.median(overhead)) * 1e3},
            "torch_step_ms": [c * 1e3 for c in steps]}


def breakdown(res: dict) -> dict:
    """Per class: kernels / ops, ms (sums of fastest), and the GEMMs' GFLOP/s."""
    out = {}
    for side, rows, name in (("workbench", res["kernels"], "kernel"),
                             ("torch eager", res["torch_ops"], "op")):
        by = defaultdict(lambda: [0, 0.0, 0.0])
        for r in rows:
            c = by[r["class"]]
            c[0] += 1
            c[1] += r["ms"]
            if r["class"] == "GEMM" and r["gflops"] == r["gflops"]:
                c[2] += r["gflops"]
        out[side] = {k: {"count": v[0], "ms": v[1], "gflop": v[2]} for k, v in by.items()}
    return out


def markdown(res: dict) -> str:
    b = res["breakdown"]
    wb_call, th_step = min(res["workbench_call_ms"]), min(res["torch_step_ms"])
    wsum = sum(v["ms"] for v in b["workbench"].values())
    tsum = sum(v["ms"] for v in b["torch eager"].values())
    lines = [f"# Where the BERT layer's training step goes (CPU, {res['date']})", "",
             machine_line(res) + ".", "",
             f"BERT-base layer forward + backward, batch x sequence {res['batch']} x "
             f"{res['seq']}, float32, `stitch`; {res['rounds']} rounds alternating one "
             "workbench call and one torch eager step, a 0.2 s pause before each. Each "
             "kernel's / op's time is its fastest over the rounds (each op's self time "
             "under `torch.profiler`); x = torch's / the workbench's.", "",
             "| class | workbench kernels | workbench ms | torch ops | torch ms | x |",
             "|---|---|---|---|---|---|"]
    for c in CLASSES:
        w = b["workbench"].get(c, {"count": 0, "ms": 0.0})
        th = b["torch eager"].get(c, {"count": 0, "ms": 0.0})
        x = f"{th['ms'] / w['ms']:.2f}" if w["ms"] else "-"
        lines.append(f"| {c} | {w['count']} | {w['ms']:.2f} | {th['count']} | "
                     f"{th['ms']:.2f} | {x} |")
    lines.append(f"| **sum** | {len(res['kernels'])} | {wsum:.2f} | "
                 f"{len(res['torch_ops'])} | {tsum:.2f} | {tsum / wsum:.2f} |")
    lines.append(f"| call / step (fastest) | | {wb_call:.2f} | | {th_step:.2f} | "
                 f"{th_step / wb_call:.2f} |")
    lines.append(f"| overhead (call - sum) | | {wb_call - wsum:.2f} | | {th_step - tsum:.2f} "
                 "| |")
    fresh = min(res["workbench_fresh_call_ms"])
    lines += ["", f"The workbench's call above writes into output arrays it reuses "
              f"(`execute(out=, kernel_ns=)`); with new ones every call "
              f"({res['output_MB']:.1f} MB), as `training.py` times it (and as torch makes "
              f"new gradients: `zero_grad(set_to_none=True)`), its fastest call took "
              f"{fresh:.2f} ms (x {th_step / fresh:.2f}). The call's overhead beside its "
              f"kernels, call by call (not fastest against fastest): "
              f"{res['overhead_ms']['min']:.2f} ms at least, {res['overhead_ms']['median']:.2f} "
              "ms median. Minor page faults per call: " + ", ".join(
                  f"{k} {v:,}" for k, v in res["page_faults"].items()) + "."]
    for side in ("workbench", "torch eager"):
        gm = b[side].get("GEMM")
        if gm and gm["ms"]:
            lines.append(f"\n{side}: GEMMs {gm['gflop']:.2f} GFLOP in {gm['ms']:.2f} ms = "
                         f"{gm['gflop'] / gm['ms'] * 1e3:.0f} GFLOP/s.")
    # the floor: every GEMM at the best rate any GEMM of the step reached on either side
    rates = [r["gflops"] / r["ms"] * 1e3 for r in (*res["kernels"], *res["torch_ops"])
             if r["class"] == "GEMM" and r["ms"] > 0 and r["gflops"] == r["gflops"]]
    gflop = b["workbench"]["GEMM"]["gflop"]
    best = max(rates)
    lines += ["", f"**The GEMM floor**: the step's {gflop:.2f} GFLOP of GEMMs at the best rate "
              f"any GEMM reached here ({best:.0f} GFLOP/s) take {gflop / best * 1e3:.2f} ms; "
              f"1.3x torch eager's fastest step is {th_step / 1.3:.2f} ms."]
    lines += ["", "## GEMMs by shape", "",
              "| side | what | ms | GFLOP/s |", "|---|---|---|---|"]
    for r in sorted(res["kernels"], key=lambda r: -r["ms"]):
        if r["class"] == "GEMM":
            lines.append(f"| workbench | {r['kernel']}: {r['schedule'][:70]} | {r['ms']:.3f} "
                         f"| {r['gflops'] / r['ms'] * 1e3:.0f} |")
    for r in sorted(res["torch_ops"], key=lambda r: -r["ms"]):
        if r["class"] == "GEMM":
            lines.append(f"| torch | {r['op']} {r['shapes'][:70]} | {r['ms']:.3f} | "
                         f"{r['gflops'] / r['ms'] * 1e3:.0f} |")
    lines += ["", "## The rest, slowest first", "", "| side | what | class | ms |",
              "|---|---|---|---|"]
    for r in sorted(res["kernels"], key=lambda r: -r["ms"]):
        if r["class"] != "GEMM" and r["ms"] > 0.01:
            lines.append(f"| workbench | {r['kernel']}: {r['schedule'][:60]} | {r['class']} "
                         f"| {r['ms']:.3f} |")
    for r in sorted(res["torch_ops"], key=lambda r: -r["ms"]):
        if r["class"] != "GEMM" and r["ms"] > 0.01:
            lines.append(f"| torch | {r['op']} {r['shapes'][:50]} | {r['class']} "
                         f"| {r['ms']:.3f} |")
    if res.get("notes"):
        lines += ["", res["notes"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    import os
    from pathlib import Path
    res = {"date": dt.date.today().isoformat(), "batch": a.batch, "seq": a.seq,
           "rounds": a.rounds, "load_average_at_start": list(os.getloadavg())}
    res.update(profile(a.batch, a.seq, a.rounds))
    res["breakdown"] = breakdown(res)
    stem = Path(a.out) / f"training-profile-{res['date']}{'-' + a.tag if a.tag else ''}"
    write_results(stem, res, markdown)
    log(f"wrote {stem}.md")
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
