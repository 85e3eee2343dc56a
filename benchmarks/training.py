"""Training steps: a BERT-base encoder layer and a GPT-2 block (transformers, random
weights, 768 wide) as forward + backward (+ AdamW) graphs from
``wb.from_torch(..., training=True)``, on the CPU.

Per model and form (``fwd+bwd``: loss and gradients; ``fwd+bwd+adamw``: the whole
step, parameters and moments updated):

- kernels and counted bytes (the kernel IR's, ``Session.effect``) under ``none`` (op
  by op) and ``stitch``; the reduction is the issue's target (>= 25% fewer);
- the step's latency, timed in alternating blocks after a pause (``harness.alternate``):
  the workbench's ``stitch`` program (``Session.run``; with AdamW ``train_step``, which
  also copies the new state into the state's arrays), torch eager (``loss.backward()``,
  and ``opt.step()``), and ``torch.compile`` of the same step function (the default
  inductor backend; AdamW's step compiled too). torch is timed twice: first alone,
  before any workbench kernel ran in the process, then alternating with the
  workbench's program (a first try measured torch eager several times slower after
  the workbench's kernels had run, under a load average of 6-9 from other jobs: both
  are kept so that an interference shows as a gap between the two columns);
- the workbench's loss and gradients against torch's (relative to the largest element).

Dropout is off (the modules in eval mode): its random draws are not reproduced.

    python benchmarks/training.py [--models bert gpt2] [--batch 1 --seq 128]
"""
from __future__ import annotations

import argparse
import datetime as dt
import time

import numpy as np

from harness import RESULTS, alternate, fmt, log, machine_line, quiet_ms, write_results

D, HEADS, FFN = 768, 12, 3072


def _models(name: str):
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Scalar(nn.Module):
        """The layer (its first output) and a squared error against a target."""
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x, target):
            out = self.layer(x)
            return F.mse_loss(out[0] if isinstance(out, tuple) else out, target)

    torch.manual_seed(0)
    if name == "bert":
        from transformers import BertConfig
        from transformers.models.bert.modeling_bert import BertLayer
        cfg = BertConfig(hidden_size=D, num_attention_heads=HEADS, intermediate_size=FFN,
                         attn_implementation="eager")
        return Scalar(BertLayer(cfg)).eval()
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    cfg = GPT2Config(n_embd=D, n_head=HEADS, n_positions=1024, attn_implementation="eager")
    return Scalar(GPT2Block(cfg)).eval()


def run_model(name: str, form: str, batch: int, seq: int, rounds: int, inner: int) -> dict:
    import torch
    import workbench as wb
    from workbench.training import AdamW, TrainState

    model = _models(name)
    x, t = torch.randn(batch, seq, D), torch.randn(batch, seq, D)
    adamw = form.endswith("adamw")
    rec: dict = {"model": name, "form": form, "batch": batch, "seq": seq,
                 "parameters": sum(p.numel() for p in model.parameters())}
    t0 = time.perf_counter()
    g = wb.from_torch(model, (x, t), training=True, optimizer=AdamW() if adamw else None)
    rec["import_s"] = time.perf_counter() - t0
    rec["graph_nodes"] = len(g.nodes)
    plans = {}
    for planner in ("none", "stitch"):
        s = wb.Session(g, backend="cpu")
        t0 = time.perf_counter()
        if planner != "none":
            s.auto(planner)
        plans[planner] = s
        eff = s.effect()
        rec[planner] = {"kernels": eff.kernels, "bytes_moved_MB": eff.bytes_moved / 1e6,
                        "plan_s": time.perf_counter() - t0}
    rec["bytes_reduction_pct"] = 100 * (1 - rec["stitch"]["bytes_moved_MB"]
                                        / rec["none"]["bytes_moved_MB"])
    log(f"{name} {form}: {rec['none']['kernels']} -> {rec['stitch']['kernels']} kernels, "
        f"{rec['bytes_reduction_pct']:.1f}% fewer bytes")

    # the methods, each one whole step
    opt = torch.optim.AdamW(model.parameters()) if adamw else None

    def eager():
        model.zero_grad(set_to_none=True)
        model(x, t).backward()
        if opt is not None:
            opt.step()

    compiled_model = torch.compile(model)
    compiled_step = torch.compile(opt.step) if opt is not None else None

    def compiled():
        model.zero_grad(set_to_none=True)
        compiled_model(x, t).backward()
        if compiled_step is not None:
            compiled_step()

    t0 = time.perf_counter()
    compiled()
    rec["torch_compile_first_call_s"] = time.perf_counter() - t0
    # torch alone first, before any workbench kernel ran in this process (a first try
    # measured torch eager several times slower after them, on a loaded machine): the
    # two columns show whether running beside the workbench's kernels costs torch
    alone = alternate({"torch eager": eager, "torch.compile": compiled}, rounds, inner)
    rec["torch_alone_ms"] = {k: quiet_ms(v, inner) for k, v in alone.items()}

    s = plans["stitch"]
    t0 = time.perf_counter()
    s.program()
    rec["compile_s"] = time.perf_counter() - t0
    batch_feeds = {"x": x.numpy(), "target": t.numpy()}
    params = {k: p.detach().numpy().copy() for k, p in model.named_parameters()}

    # correctness of what is timed: loss and gradients (or the first step's update)
    if adamw:
        state = TrainState.from_module(g, model)
        wb_loss = s.train_step(batch_feeds, state)
    else:
        out = s.run({**batch_feeds, **params})
        wb_loss = float(out["loss"])
    model.zero_grad()
    loss = model(x, t)
    loss.backward()
    rec["loss_rel_error"] = abs(wb_loss - float(loss)) / abs(float(loss))
    if not adamw:
        rec["grad_rel_error"] = max(
            float(np.abs(out[f"grad.{k}"] - p.grad.numpy()).max() / np.abs(p.grad.numpy()).max())
            for k, p in model.named_parameters() if np.abs(p.grad.numpy()).max() > 1e-6)

    if adamw:
        def ours():
            s.train_step(batch_feeds)
    else:
        feeds = {**batch_feeds, **params}
        prog = s.program()

        def ours():
            prog.run(feeds)
    methods = {"workbench stitch": ours, "torch eager": eager, "torch.compile": compiled}
    # minor page faults of one call each (deterministic where times are not: new
    # pages for arrays a step makes, e.g. train_step's outputs before it reused them)
    rec["page_faults"] = {k: page_faults(fn) for k, fn in methods.items()}
    samples = alternate(methods, rounds, inner)
    rec["samples_s"] = samples
    rec["latency_ms"] = {k: quiet_ms(v, inner) for k, v in samples.items()}
    rec["median_ms"] = {k: float(np.median(v)) * 1e3 for k, v in samples.items()}
    # each method's fastest call: on a shared host the least disturbed estimate of its
    # own speed (a call the load never touched); alone and beside alike
    rec["fastest_ms"] = {k: min(v) * 1e3 for k, v in samples.items()}
    rec["fastest_alone_ms"] = {k: min(v) * 1e3 for k, v in alone.items()}
    ms = rec["latency_ms"]
    rec["speedup_vs_eager"] = ms["torch eager"] / ms["workbench stitch"]
    rec["speedup_vs_compile"] = ms["torch.compile"] / ms["workbench stitch"]
    solo = rec["torch_alone_ms"]
    rec["speedup_vs_eager_alone"] = solo["torch eager"] / ms["workbench stitch"]
    rec["speedup_vs_compile_alone"] = solo["torch.compile"] / ms["workbench stitch"]
    log(f"  torch alone: eager {fmt(solo['torch eager'])} ms "
        f"({rec['speedup_vs_eager_alone']:.2f}x), torch.compile "
        f"{fmt(solo['torch.compile'])} ms ({rec['speedup_vs_compile_alone']:.2f}x)")
    log(f"  {fmt(ms['workbench stitch'])} ms; eager {fmt(ms['torch eager'])} ms "
        f"({rec['speedup_vs_eager']:.2f}x), torch.compile {fmt(ms['torch.compile'])} ms "
        f"({rec['speedup_vs_compile']:.2f}x)")
    return rec


def page_faults(fn) -> int:
    import resource
    fn()                    # (warm: first calls allocate what later ones reuse)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def markdown(res: dict) -> str:
    lines = [f"# Training steps on the CPU ({res['date']})", "",
             machine_line(res) + ".", "",
             f"batch x sequence {res['batch']} x {res['seq']}, float32, dropout off; "
             "latency: the fastest block's median (alternating blocks, a pause before "
             f"each; {res['rounds']} rounds of {res['inner']} calls); x = the other "
             "method's time / the workbench's.", "",
             "Two torch columns: timed before any workbench kernel ran in the process "
             "(*alone*), and alternating with the workbench's program (*beside*).", "",
             "| model | form | kernels none -> stitch | counted MB none -> stitch | fewer bytes "
             "| workbench ms | eager alone ms (x) | torch.compile alone ms (x) "
             "| eager beside ms (x) | torch.compile beside ms (x) | loss err | grad err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["models"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['form']} | failed: {r['error']} |||||||||")
            continue
        ms = r["latency_ms"]
        lines.append(
            f"| {r['model']} | {r['form']} | {r['none']['kernels']} -> {r['stitch']['kernels']} "
            f"| {r['none']['bytes_moved_MB']:.1f} -> {r['stitch']['bytes_moved_MB']:.1f} "
            f"| {r['bytes_reduction_pct']:.1f}% | {ms['workbench stitch']:.1f} "
            f"| {r['torch_alone_ms']['torch eager']:.1f} ({r['speedup_vs_eager_alone']:.2f}x) "
            f"| {r['torch_alone_ms']['torch.compile']:.1f} "
            f"({r['speedup_vs_compile_alone']:.2f}x) "
            f"| {ms['torch eager']:.1f} ({r['speedup_vs_eager']:.2f}x) "
            f"| {ms['torch.compile']:.1f} ({r['speedup_vs_compile']:.2f}x) "
            f"| {r['loss_rel_error']:.1e} | {fmt(r.get('grad_rel_error'), '{:.1e}')} |")
    lines += ["", "Each method's fastest single call (ms; x = torch's / the workbench's): "
              "the least disturbed estimate on a shared host.", "",
              "| model | form | workbench | eager alone (x) | torch.compile alone (x) "
              "| eager beside (x) | torch.compile beside (x) |", "|---|---|---|---|---|---|---|"]
    for r in res["models"]:
        if "fastest_ms" not in r:
            continue
        f, a = r["fastest_ms"], r["fastest_alone_ms"]
        ours = f["workbench stitch"]
        cells = [f"{t[k]:.1f} ({t[k] / ours:.2f}x)" for t in (a, f)
                 for k in ("torch eager", "torch.compile")]
        lines.append(f"| {r['model']} | {r['form']} | {ours:.1f} | " + " | ".join(cells) + " |")
    if any("page_faults" in r for r in res["models"]):
        lines += ["", "Minor page faults of one call (new pages the step touches):", ""]
        for r in res["models"]:
            if "page_faults" in r:
                lines.append(f"- {r['model']} {r['form']}: " + ", ".join(
                    f"{k} {v:,}" for k, v in r["page_faults"].items()))
    lines += ["", "Import, planning and compile times (s):", ""]
    for r in res["models"]:
        if "error" not in r:
            lines.append(f"- {r['model']} {r['form']}: import {r['import_s']:.1f}, stitch plan "
                         f"{r['stitch']['plan_s']:.1f}, compile {r['compile_s']:.1f}, "
                         f"torch.compile first call {r['torch_compile_first_call_s']:.1f}")
    if res.get("notes"):
        lines += ["", res["notes"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["bert", "gpt2"], choices=["bert", "gpt2"])
    ap.add_argument("--forms", nargs="+", default=["fwd+bwd", "fwd+bwd+adamw"],
                    choices=["fwd+bwd", "fwd+bwd+adamw"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--inner", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    import os
    from pathlib import Path
    res = {"date": dt.date.today().isoformat(), "batch": a.batch, "seq": a.seq,
           "rounds": a.rounds, "inner": a.inner, "load_average_at_start": list(os.getloadavg()),
           "models": []}
    stem = Path(a.out) / f"training-{res['date']}{'-' + a.tag if a.tag else ''}"
    for name in a.models:
        for form in a.forms:
            try:
                res["models"].append(run_model(name, form, a.batch, a.seq, a.rounds, a.inner))
            except Exception as e:  # noqa: BLE001 -- a failed model is a row saying why
                log(f"{name} {form} failed: {e!r}")
                res["models"].append({"model": name, "form": form,
                                      "error": str(e).splitlines()[0][:300]})
            write_results(stem, res, markdown)
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
