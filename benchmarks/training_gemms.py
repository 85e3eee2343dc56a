"""The GEMMs of a BERT-base layer's forward + backward (1 x 128 tokens, 768 wide, FFN
3072, 12 heads: ``training_profile.py`` lists them in the step), each alone, side by
side in one run: the workbench's GEMM kernel as the rule makes it now, the same kernel
with sgemm per tile (``blas=1``: the form before ``fusion/gemm/right_pack.py``), torch
.matmul with the same transposes, and both on the same shape untransposed (operands
contiguous). Operands are graph inputs (activations, as a training step's weights
are: not constants packed once). Each result is checked against NumPy.

Timed in alternation (``harness.alternate``: a pause before each block), the fastest
block's median (``quiet_ms``); GFLOP/s from it. Beside it each call's CPU time (the
process's, both cores' threads; the fastest call's), which a loaded host disturbs less
than the wall clock: the pools wait passively, so it is the work done.

Then, in the step itself (``--step-rounds``): the BERT layer's (``--model gpt2``:
the GPT-2 block's) whole ``stitch`` program as the rule makes it against the same plan with ``blas=1`` on the kernels
the rule packs B for (``--baseline row-tiles``: against the rule without
``RightPack.one_row_tile``, the 128-row products on sgemm per tile; ``tile-pack``: against the rule before
each one-row-tile product's tiles packed their own panels; ``b-packed``: against the rule before
a product of 128 rows against an activation B was made transposed (fusion/gemm/transposed.py),
B packed per run or sgemm per tile; ``transposed``: against the rule
before a transposed B (``x @ W^T``) took the micro-kernel from 4 column tiles), one call each
per round (which goes first alternating), a pause before each, each kernel's fastest
time inside the call (``kernel_ns``); the kernels the two programs share are the
control (their sums should agree).

    python benchmarks/training_gemms.py [--rounds 8 --inner 3 --step-rounds 16]
                                        [--baseline sgemm|row-tiles|tile-pack|b-packed|transposed]
                                        [--model bert|gpt2]
"""
from __future__ import annotations

import argparse
import datetime as dt
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from harness import RESULTS, alternate, log, machine_line, quiet_ms, write_results

# (what, batch, m, n, k, A transposed, B transposed, times in the step): "gemm m x n x
# k" as the profile writes it
SHAPES = (
    ("Q/K/V/out projections, x @ W^T", 1, 128, 768, 768, False, True, 4),
    ("FFN up, x @ W^T", 1, 128, 3072, 768, False, True, 1),
    ("FFN down, h @ W^T", 1, 128, 768, 3072, False, True, 1),
    ("dx of FFN up, dy @ W", 1, 128, 768, 3072, False, False, 1),
    ("dx of FFN down, dy @ W", 1, 128, 3072, 768, False, False, 1),
    ("dx of projections, dy @ W", 1, 128, 768, 768, False, False, 4),
    ("dW of FFN up, dy^T @ x", 1, 3072, 768, 128, True, False, 1),
    ("dW of FFN down, dy^T @ h", 1, 768, 3072, 128, True, False, 1),
    ("dW of projections, dy^T @ x", 1, 768, 768, 128, True, False, 4),
    ("scores, q @ k^T", 12, 128, 128, 64, False, True, 1),
    ("dq / context, p @ v", 12, 128, 64, 128, False, False, 2),
    ("dk, ds^T @ q", 12, 128, 64, 128, True, False, 1),
    ("dv, p^T @ dy (dv^T by the export)", 12, 64, 128, 128, True, False, 1),
    ("dp, dy @ v^T", 12, 128, 128, 64, False, True, 1),
)


def _graph(batch, m, n, k, ta, tb):
    import workbench as wb
    b = wb.GraphBuilder("gemm")
    lead = (batch,) if batch > 1 else ()
    swap = [*range(len(lead)), len(lead) + 1, len(lead)]
    a = b.input("a", (*lead, k, m) if ta else (*lead, m, k))
    w = b.input("b", (*lead, n, k) if tb else (*lead, k, n))
    y = b.matmul(b.op("transpose", a, perm=swap) if ta else a,
                 b.op("transpose", w, perm=swap) if tb else w)
    b.output(y, "y")
    return b.build()


def _before_tile_pack(rule):
    """The right-pack rule before one-row-tile products' tiles packed their own panels
    (``--baseline tile-pack``): those panels packed by a parallel loop before the
    tiles."""
    return replace(rule, in_tile=False)


def _before_transposed(rule):
    """The right-pack rule before a transposed B took the micro-kernel from 4 column
    tiles (``--baseline transposed``): 8, as an untransposed one."""
    return replace(rule, transposed_min_col_tiles=rule.one_tile_min_col_tiles)


def _workbench(g, feeds, blas=None, rule=None):
    """(a call, the program, its schedule) of ``g``'s one GEMM kernel; ``rule``: a
    RightPack to plan and lower it under instead of the rule now."""
    import workbench as wb
    from workbench.fusion.gemm import right_pack
    now = right_pack.RIGHT_PACK
    right_pack.RIGHT_PACK = rule or now
    try:
        s = wb.Session(g, backend="cpu")
        s.auto("stitch")
        (gr,) = s.plan.groups
        if blas is not None:
            s.set_launch(gr.id, blas=blas)
        prog = s.program()
    finally:
        right_pack.RIGHT_PACK = now
    out = prog.new_outputs()
    return (lambda: prog.execute(feeds, out=out)), prog, s.plan.groups[0].schedule.describe()


def _cpu_timed(fn, into: list):
    """``fn``, each call's process CPU time appended to ``into``."""
    def timed():
        t0 = time.process_time()
        fn()
        into.append(time.process_time() - t0)
    return timed


def measure(rounds: int, inner: int, baseline: str = "sgemm") -> list[dict]:
    import torch
    from workbench.fusion.gemm import right_pack
    rows = []
    for what, batch, m, n, k, ta, tb, times in SHAPES:
        g = _graph(batch, m, n, k, ta, tb)
        plain = _graph(batch, m, n, k, False, False)
        rng = np.random.default_rng(0)
        feeds = {v: rng.standard_normal(g.value(v).shape).astype(np.float32) for v in ("a", "b")}
        pfeeds = {v: rng.standard_normal(plain.value(v).shape).astype(np.float32)
                  for v in ("a", "b")}
        ours, prog, desc = _workbench(g, feeds)
        sgemm, _, sdesc = _workbench(g, feeds, blas=1)
        ours_plain, _, pdesc = _workbench(plain, pfeeds)
        a_np = np.swapaxes(feeds["a"], -1, -2) if ta else feeds["a"]
        b_np = np.swapaxes(feeds["b"], -1, -2) if tb else feeds["b"]
        want = a_np.astype(np.float64) @ b_np.astype(np.float64)
        got = prog.run(feeds, checked=True)["y"]
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        ta_t, tb_t = torch.from_numpy(feeds["a"]), torch.from_numpy(feeds["b"])
        at, bt = (ta_t.transpose(-1, -2) if ta else ta_t), (tb_t.transpose(-1, -2) if tb else tb_t)
        pa, pb = torch.from_numpy(pfeeds["a"]), torch.from_numpy(pfeeds["b"])
        before = {}
        if baseline == "tile-pack":
            before = {"workbench before": _workbench(
                g, feeds, rule=_before_tile_pack(right_pack.RIGHT_PACK))[0]}
        methods = {"workbench": ours, **before, "workbench sgemm per tile": sgemm,
                   "torch.matmul": lambda: torch.matmul(at, bt),
                   "workbench untransposed": ours_plain,
                   "torch.matmul untransposed": lambda: torch.matmul(pa, pb)}
        cpu = {name: [] for name in methods}
        methods = {name: _cpu_timed(fn, cpu[name]) for name, fn in methods.items()}
        with torch.no_grad():
            samples = alternate(methods, rounds, inner)
        flops = 2.0 * batch * m * n * k
        ms = {name: quiet_ms(v, inner) for name, v in samples.items()}
        rows.append({"what": what, "shape": f"{batch} x {m}x{n}x{k}" if batch > 1
                     else f"{m}x{n}x{k}", "trans_a": ta, "trans_b": tb, "times": times,
                     "kernel": desc, "sgemm_kernel": sdesc, "untransposed_kernel": pdesc,
                     "rel_error": err, "ms": ms,
                     "cpu_ms": {name: min(v) * 1e3 for name, v in cpu.items()},
                     "gflops": {name: flops / v * 1e-6 for name, v in ms.items()},
                     "samples": samples})
        log(f"{what}: " + ", ".join(f"{name} {v:.3f} ms ({rows[-1]['cpu_ms'][name]:.3f} CPU)"
                                    for name, v in ms.items()))
    return rows


# the baselines that plan the step under an earlier rule (the others: blas=1)
RULE_BASELINES = ("row-tiles", "tile-pack", "transposed", "b-packed")


def in_step(rounds: int, baseline: str = "sgemm", model_name: str = "bert") -> dict:
    """The rule against sgemm per tile inside the BERT layer's fwd+bwd program (or
    ``model_name``'s: training.py's GPT-2 block)
    (``baseline`` "sgemm": ``blas=1`` on every kernel the rule packs B for; "row-tiles":
    the rule without ``RightPack.one_row_tile``, the 128-row products kept on sgemm,
    the plan otherwise the same)."""
    import torch
    import workbench as wb
    from workbench.fusion.gemm import right_pack, transposed
    from training import D, _models
    model = _models(model_name)
    x, t = torch.randn(1, 128, D), torch.randn(1, 128, D)
    g = wb.from_torch(model, (x, t), training=True)
    rule = wb.Session(g, backend="cpu")
    rule.auto("stitch")
    if baseline in RULE_BASELINES:
        now, made_t = right_pack.RIGHT_PACK, transposed.TRANSPOSED
        right_pack.RIGHT_PACK = (
            replace(now, one_row_tile=False) if baseline == "row-tiles" else
            _before_transposed(now) if baseline == "transposed" else
            _before_tile_pack(now) if baseline == "tile-pack" else now)
        transposed.TRANSPOSED = replace(made_t, enabled=baseline != "b-packed")
        try:
            old = wb.Session(g, backend="cpu")
            old.auto("stitch")
            old_prog = old.program()   # (lowered under the baseline's rule)
            before = {gr.id: old.source(gr.id, target="c") for gr in old.plan.groups
                      if gr.schedule is not None}
        finally:
            right_pack.RIGHT_PACK, transposed.TRANSPOSED = now, made_t
        changed = [gr.id for gr in rule.plan.groups if gr.schedule is not None
                   and before.get(gr.id) != rule.source(gr.id, target="c")]
    else:
        old = wb.Session(g, backend="cpu")
        old.auto("stitch")
        changed = [gr.id for gr in rule.plan.groups if gr.schedule is not None
                   and gr.schedule.gemm is not None and gr.schedule.gemm.packed_b]
        for c in changed:
            old.set_launch(c, blas=1)
        old_prog = None
    feeds = {"x": x.numpy(), "target": t.numpy(),
             **{k: p.detach().numpy().copy() for k, p in model.named_parameters()}}
    progs = [rule.program(), old_prog if baseline in RULE_BASELINES else old.program()]
    outs = [p.new_outputs() for p in progs]
    ns = [np.zeros(len(p.compiled), dtype=np.int64) for p in progs]
    per = [np.full(len(p.compiled), np.inf) for p in progs]
    calls: list[list[float]] = [[], []]
    cpu: list[list[float]] = [[], []]     # (the process's CPU time per call)
    for r in range(rounds):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            time.sleep(0.2)
            c0, t0 = time.process_time(), time.perf_counter()
            progs[i].execute(feeds, out=outs[i], kernel_ns=ns[i])
            calls[i].append(time.perf_counter() - t0)
            cpu[i].append(time.process_time() - c0)
            per[i] = np.minimum(per[i], ns[i] * 1e-6)
    names = [ck.kernel.name for ck in progs[0].compiled]
    moved = [i for i, n in enumerate(names) if n.split("_")[0] in changed]
    kept = [i for i in range(len(names)) if i not in moved]
    return {"changed": {names[i]: [float(per[0][i]), float(per[1][i])] for i in moved},
            "changed_ms": [float(per[j][moved].sum()) for j in (0, 1)],
            "shared_ms": [float(per[j][kept].sum()) for j in (0, 1)],
            "call_fastest_ms": [min(c) * 1e3 for c in calls],
            "call_median_ms": [float(np.median(c)) * 1e3 for c in calls],
            "call_cpu_fastest_ms": [min(c) * 1e3 for c in cpu],
            "call_cpu_median_ms": [float(np.median(c)) * 1e3 for c in cpu],
            "rounds": rounds, "baseline": baseline, "model": model_name}


def markdown(res: dict) -> str:
    names = list(res["rows"][0]["ms"]) if res["rows"] else ["workbench", "torch.matmul"]
    lines = [f"# The BERT layer's training GEMMs one by one ({res['date']})", "",
             machine_line(res) + "." + (f" `OMP_NUM_THREADS={res['omp_threads']}`: the "
                                        "kernels' threads." if res.get("omp_threads")
                                        else ""), "",
             "Each GEMM of the BERT-base layer's fwd+bwd (1 x 128 tokens) alone, operands "
             "graph inputs; ms of the fastest block's median, alternating, a pause before "
             "each block (" + f"{res['rounds']} rounds of {res['inner']}); GFLOP/s in "
             "brackets. `workbench` is the rule now; `sgemm per tile` the same kernel "
             "with `blas=1` (the form before `fusion/gemm/right_pack.py`)"
             + ("; `workbench before` the kernel under the rule before one-row-tile "
                "products' tiles packed their own panels (`--baseline tile-pack`)"
                if "workbench before" in names else "")
             + ". x = torch.matmul's / the workbench's.", "",
             "| GEMM | m x n x k | T | n in step | " + " | ".join(names)
             + " | x | workbench's kernel |",
             "|---|---|---|---|" + "---|" * len(names) + "---|---|"]
    total = {name: 0.0 for name in names}
    for r in res["rows"]:
        t = ("A" if r["trans_a"] else "") + ("B" if r["trans_b"] else "") or "-"
        cells = [f"{r['ms'][n]:.3f} ({r['gflops'][n]:.0f})" for n in names]
        for n in names:
            total[n] += r["times"] * r["ms"][n]
        lines.append(f"| {r['what']} | {r['shape']} | {t} | {r['times']} | "
                     + " | ".join(cells)
                     + f" | {r['ms']['torch.matmul'] / r['ms']['workbench']:.2f}"
                     + f" | {r['kernel']} |")
    if res["rows"]:
        lines.append("| **the step's GEMMs (times n)** | | | | "
                     + " | ".join(f"{total[n]:.2f}" for n in names)
                     + f" | {total['torch.matmul'] / total['workbench']:.2f} | |")
    vs = "workbench before" in names    # (then also before's / now's CPU time)
    lines += ["", "The same calls' CPU time (ms, the fastest call's; both cores' threads):", "",
              "| GEMM | m x n x k | T | " + " | ".join(names) + " | x |"
              + (" before / now |" if vs else ""),
              "|---|---|---|" + "---|" * len(names) + "---|" + ("---|" if vs else "")]
    total = {name: 0.0 for name in names}
    for r in res["rows"]:
        t = ("A" if r["trans_a"] else "") + ("B" if r["trans_b"] else "") or "-"
        for n in names:
            total[n] += r["times"] * r["cpu_ms"][n]
        lines.append(f"| {r['what']} | {r['shape']} | {t} | "
                     + " | ".join(f"{r['cpu_ms'][n]:.3f}" for n in names)
                     + f" | {r['cpu_ms']['torch.matmul'] / r['cpu_ms']['workbench']:.2f} |"
                     + (f" {r['cpu_ms']['workbench before'] / r['cpu_ms']['workbench']:.3f} |"
                        if vs else ""))
    if res["rows"]:
        lines.append("| **the step's GEMMs (times n)** | | | "
                     + " | ".join(f"{total[n]:.2f}" for n in names)
                     + f" | {total['torch.matmul'] / total['workbench']:.2f} |"
                     + (f" {total['workbench before'] / total['workbench']:.3f} |"
                        if vs else ""))
    st = res.get("step")
    if st:
        than = ("the rule without `RightPack.one_row_tile` (the 128-row products on "
                "sgemm per tile)" if st.get("baseline") in ("row-tiles", "untransposed") else
                "the rule before a one-row-tile product's tiles packed their own panels "
                "(`RightPack(in_tile=False)`: packed by a loop before the tiles)"
                if st.get("baseline") == "tile-pack" else
                "the rule before a transposed B took the micro-kernel from 4 column tiles "
                "(`transposed_min_col_tiles` = 8: sgemm per tile)"
                if st.get("baseline") == "transposed" else
                "the rule before a 128-row product against an activation B was made "
                "transposed (`--baseline b-packed`: B packed per run or sgemm per tile)"
                if st.get("baseline") == "b-packed" else
                "the same plan with `blas=1` on the kernels it packs B for")
        lines += ["", f"## In the step ({st['rounds']} rounds, each kernel's fastest)", "",
                  f"The {'GPT-2 block' if st.get('model') == 'gpt2' else 'BERT layer'}'s "
                  f"fwd+bwd `stitch` program, the rule against {than}:", "",
                  "| kernel | rule ms | "
                  + ("before ms" if st.get("baseline") in ("tile-pack", "b-packed")
                     else "sgemm per tile ms")
                  + " | x |", "|---|---|---|---|"]
        for name, (a, b) in st["changed"].items():
            lines.append(f"| {name} | {a:.3f} | {b:.3f} | {b / a:.2f} |")
        a, b = st["changed_ms"]
        lines.append(f"| **those kernels** | {a:.2f} | {b:.2f} | {b / a:.2f} |")
        a, b = st["shared_ms"]
        lines.append(f"| the other kernels (the same in both: the control) | {a:.2f} | "
                     f"{b:.2f} | {b / a:.2f} |")
        (a, b), (c, d) = st["call_fastest_ms"], st["call_median_ms"]
        lines.append(f"| the call, fastest (median) | {a:.2f} ({c:.2f}) | {b:.2f} ({d:.2f}) "
                     f"| {b / a:.2f} |")
        if "call_cpu_fastest_ms" in st:
            (a, b), (c, d) = st["call_cpu_fastest_ms"], st["call_cpu_median_ms"]
            lines.append(f"| the call's CPU time, fastest (median) | {a:.2f} ({c:.2f}) | "
                         f"{b:.2f} ({d:.2f}) | {b / a:.3f} |")
    if res["rows"]:
        lines += ["", "Largest error against NumPy (float64), relative to the largest "
                  f"element: {max(r['rel_error'] for r in res['rows']):.1e}."]
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--inner", type=int, default=3)
    ap.add_argument("--step-rounds", type=int, default=16)
    ap.add_argument("--baseline", choices=["sgemm", "row-tiles", "tile-pack", "b-packed",
                                           "transposed"],
                    default="sgemm",
                    help="in the step: the rule against blas=1 on every kernel it packs "
                    "B for, against the rule without RightPack.one_row_tile, against "
                    "the rule before the tiles packed their own panels (tile-pack), or "
                    "against the rule before a transposed B took the micro-kernel from 4 "
                    "column tiles (transposed)")
    ap.add_argument("--model", choices=["bert", "gpt2"], default="bert",
                    help="the step's model (training.py's): the BERT layer or the GPT-2 block")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    import os
    res = {"date": dt.date.today().isoformat(), "rounds": a.rounds, "inner": a.inner,
           "load_average_at_start": list(os.getloadavg()),
           # (OMP_NUM_THREADS=1: the kernels on one thread, so that the CPU time is one
           # core's work, which other jobs on a loaded host disturb least)
           "omp_threads": os.environ.get("OMP_NUM_THREADS", "")}
    res["rows"] = measure(a.rounds, a.inner, a.baseline) if a.rounds else []
    if a.step_rounds:
        res["step"] = in_step(a.step_rounds, a.baseline, a.model)
    stem = Path(a.out) / f"training-gemms-{res['date']}{'-' + a.tag if a.tag else ''}"
    write_results(stem, res, markdown)
    log(f"wrote {stem}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
