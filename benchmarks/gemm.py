#!/usr/bin/env python
"""GEMM with its neighbours on the CPU: the blocks issue 13 fuses, at BERT-base and
GPT-2 shapes, through the workbench (planners ``rules`` and ``stitch``, cpu backend)
side by side with onnxruntime (default session options) and torch eager, in one run.

    .venv/bin/python benchmarks/gemm.py                  # every block, 20 repeats
    .venv/bin/python benchmarks/gemm.py --quick --blocks bert_ffn_gelu

Blocks (PyTorch modules, exported by torch.onnx.export's default exporter, imported by
the workbench as a user would): GEMM + bias + GELU (erf: BERT; tanh: GPT-2), GEMM +
bias + residual + LayerNorm, and attention (QK^T, scale, mask -- padding for BERT,
causal for GPT-2 -- softmax, .V; and once with 2048 keys, where the fused attention
takes the online softmax). For each, the share of the time the kernels holding
a matmul take in the workbench plan (per-kernel timings of the ``stitch`` step); and
the ``rules`` plan (with its GEMM kernels: a matmul and its epilogue -- elementwise, a
LayerNorm, a softmax and the product with V -- in one kernel) is timed beside the same
partition without joining (each matmul a GEMM kernel of its own, the library GEMM's
tiles over every core, then the epilogue as a kernel of its own), in the same run.
BLAS runs one thread inside the workbench's programs (``runtime/threads.py``).

Writes ``<out>/gemm-<date>.json`` and ``<out>/gemm-<date>.md``; the workbench's outputs
are checked against torch (a wrong result is reported, and the run exits non-zero).
Timing never fails the run: it is a benchmark.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np


# methods in alternating, paused blocks; the fused attentions' other forms
from harness import ATTENTION_FORMS, RESULTS, alternate, attention_variants

# the row keys of the attention forms timed beside stitch ("every_key", "whole_rows")
VARIANTS = tuple(label.replace(" ", "_") for label in ATTENTION_FORMS)

HIDDEN, HEADS, TOKENS = 768, 12, 128        # BERT-base / GPT-2 small, batch 1 x 128
LONG = 2048     # keys of the long attention block (the online softmax's side of its rule)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def blocks():
    """name -> (module, example inputs as numpy arrays)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, TOKENS, HIDDEN)).astype(np.float32)
    h = rng.standard_normal((1, TOKENS, 4 * HIDDEN)).astype(np.float32)
    qkv = [rng.standard_normal((1, HEADS, TOKENS, HIDDEN // HEADS)).astype(np.float32)
           for _ in range(3)]

    def qkv_of(tokens):
        return [rng.standard_normal((1, HEADS, tokens, HIDDEN // HEADS)).astype(np.float32)
                for _ in range(3)]
    qkv_long = qkv_of(LONG)

    class FFNUp(nn.Module):
        def __init__(self, approximate):
            super().__init__()
            self.fc, self.approximate = nn.Linear(HIDDEN, 4 * HIDDEN), approximate

        def forward(self, x):
            return nn.functional.gelu(self.fc(x), approximate=self.approximate)

    class FFNDownNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.norm = nn.Linear(4 * HIDDEN, HIDDEN), nn.LayerNorm(HIDDEN)

        def forward(self, h, x):
            return self.norm(self.fc(h) + x)

    class Attention(nn.Module):
        def __init__(self, causal, tokens=TOKENS):
            super().__init__()
            self.causal = causal
            if causal:
                self.register_buffer("mask", torch.triu(
                    torch.full((tokens, tokens), float("-inf")), diagonal=1))
            else:   # padding: the last 16 keys masked, as an additive mask
                m = torch.zeros(1, 1, 1, tokens)
                m[..., -16:] = torch.finfo(torch.float32).min
                self.register_buffer("mask", m)

        def forward(self, q, k, v):
            s = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5) + self.mask
            return torch.softmax(s, dim=-1) @ v

    return {
        "bert_ffn_gelu": (FFNUp("none"), [x]),
        "gpt2_ffn_gelu_tanh": (FFNUp("tanh"), [x]),
        "ffn_residual_layernorm": (FFNDownNorm(), [h, x]),
        "bert_attention_padding_mask": (Attention(False), qkv),
        "gpt2_attention_causal": (Attention(True), qkv),
        # 2048 keys: the fused attention's online softmax (fusion/gemm/attention.py)
        "attention_padding_mask_2048": (Attention(False, LONG), qkv_long),
        # GPT-2's context lengths under its causal mask: the online softmax skipping
        # the blocks past the diagonal (fusion/key_limit.py)
        "gpt2_attention_causal_512": (Attention(True, 512), qkv_of(512)),
        "gpt2_attention_causal_1024": (Attention(True, 1024), qkv_of(1024)),
    }


def export(module, inputs, path: Path) -> None:
    import torch
    module.eval()
    args = tuple(torch.from_numpy(a) for a in inputs)
    names = [f"in{i}" for i in range(len(inputs))]
    torch.onnx.export(module, args, str(path), input_names=names, output_names=["out"])


def median_ms(samples) -> float:
    return float(np.median(samples) * 1e3)


def run_block(name, module, inputs, tmp: Path, repeats: int) -> dict:
    import onnxruntime as ort
    import torch

    from workbench.tolerance import max_rel_error
    from workbench.session import Session

    path = tmp / f"{name}.onnx"
    export(module, inputs, path)
    with torch.no_grad():
        want = module(*[torch.from_numpy(a) for a in inputs]).numpy()
    row = {"block": name, "shapes": [list(a.shape) for a in inputs]}

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(sess.get_inputs(), inputs)}
    targs = [torch.from_numpy(a) for a in inputs]

    def torch_call():
        with torch.no_grad():
            return module(*targs)

    methods = {"onnxruntime": lambda: sess.run(None, feeds), "torch_eager": torch_call}
    s = Session(str(path), backend="cpu")
    feed = dict(zip(s.graph.inputs, inputs))
    for planner in ("rules", "stitch"):
        s.auto(planner)
        prog = s.program()
        out = prog.run(feed)
        got = np.asarray(out[s.graph.outputs[0]])
        row[f"{planner}_error"] = float(max_rel_error(got, want))
        row[f"{planner}_kernels"] = len(s.plan.groups)
        methods[planner] = (lambda p: lambda: p.run(feed))(prog)
        m = s.measure(repeats=repeats)
        per = m.per_kernel
        lib = per[per["schedule"].astype(str).str.contains("library|opaque|gemm",
                                                           regex=True)]
        row[f"{planner}_library_share"] = float(lib["latency_ms"].sum()
                                                / per["latency_ms"].sum()) \
            if len(per) else float("nan")
    # the stitch plan's fused attentions taken another way, in the same run: every
    # block of keys (what a causal skip saves), whole rows of scores (what the online
    # softmax saves)
    for label, (plan, _) in attention_variants(s.plan).items():
        key = label.replace(" ", "_")
        other = s.program(plan)
        got = np.asarray(other.run(feed)[s.graph.outputs[0]])
        row[f"{key}_error"] = float(max_rel_error(got, want))
        methods[key] = (lambda p: lambda: p.run(feed))(other)
    # the plan without GEMM epilogues, in the same run: the rules partition with every
    # matmul a kernel of its own (a lone GEMM over the cores) and its epilogue apart
    from workbench.fusion.greedy import rules_partition
    from workbench.fusion.mapping import ScheduleKind
    s.auto("rules")
    row["gemm_kernels"] = sum(gr.schedule.kind is ScheduleKind.gemm
                              and gr.schedule.gemm.epilogue_ops > 0 for gr in s.plan.groups)
    old = rules_partition(s.graph, device=s.device)[0].to_plan("rules", s.device)
    prog = s.program(old)
    got = np.asarray(prog.run(feed)[s.graph.outputs[0]])
    row["library_epilogue_error"] = float(max_rel_error(got, want))
    row["library_epilogue_kernels"] = len(old.groups)
    methods["library_epilogue"] = lambda: prog.run(feed)
    # every method in alternating blocks, each after a pause (models.py's loop): a
    # thread pool still spinning from one method must not land on the next
    samples = alternate(methods, max(1, repeats // 4), 4)
    for k, v in samples.items():
        row[f"{k}_ms"] = median_ms(v)
    row["fused_vs_library_epilogue"] = row["library_epilogue_ms"] / row["rules_ms"]
    row["stitch_vs_onnxruntime"] = row["onnxruntime_ms"] / row["stitch_ms"]
    row["stitch_vs_torch"] = row["torch_eager_ms"] / row["stitch_ms"]
    for key in VARIANTS:
        if f"{key}_ms" in row:
            row[f"stitch_vs_{key}"] = row[f"{key}_ms"] / row["stitch_ms"]
    return row


def environment() -> dict:
    import onnxruntime
    import torch

    from workbench.runtime.cc import cpu_model
    env = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{cpu_model()}, {os.cpu_count()} cores",
           "python": platform.python_version(),
           "numpy": np.__version__, "onnxruntime": onnxruntime.__version__,
           "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    try:
        from threadpoolctl import threadpool_info
        env["blas"] = [f"{i.get('internal_api')} {i.get('version')} "
                       f"{i.get('architecture')} threads={i.get('num_threads')}"
                       for i in threadpool_info() if i.get("user_api") == "blas"]
    except ImportError:
        pass
    return env


def markdown(env: dict, rows: list[dict]) -> str:
    lines = [f"# GEMM blocks on the CPU ({env['date'][:10]})", "",
             f"Machine: {env['machine']}; numpy {env['numpy']}, onnxruntime "
             f"{env['onnxruntime']}, torch {env['torch']} ({env['torch_threads']} threads); "
             f"BLAS: {', '.join(env.get('blas', [])) or 'unknown'}.",
             "Median wall-clock ms of one call, measured side by side in one run: every "
             "method in alternating blocks of 4 calls, each block after a 0.2 s pause "
             "and its first call discarded. `x ort` = onnxruntime time / stitch time "
             "(above 1: the workbench is faster). `mm share`: the part of the stitch "
             "plan's kernel time in kernels holding a matmul.", "",
             "`lib+epi ms`: the rules partition without joining (each matmul a GEMM "
             "kernel of its own -- the library GEMM's tiles over every core -- its "
             "epilogue a separate generated kernel), run in the same process; `x lib+epi` "
             "= that time / rules time (above 1: the fused GEMM kernel wins); `gemm`: "
             "GEMM kernels with an epilogue in the rules plan.", "",
             "`x every key`: where stitch's fused attention skips the key blocks a causal "
             "mask hides, the same plan taking every block (launch skip=0); `x whole "
             "rows`: where it takes the softmax online, the same plan holding whole rows "
             "of scores (launch online=0); each run in the same process: its time / "
             "stitch's.", "",
             "| block | kernels rules/stitch | gemm | rules ms | lib+epi ms | x lib+epi | "
             "stitch ms | onnxruntime ms | torch ms | x ort | x torch | x every key | "
             "x whole rows | mm share | max rel err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['block']} | failed: {r['error']} ||||||||||||||")
            continue
        skip, rows_ = (f"{r[f'stitch_vs_{k}']:.2f}" if f"stitch_vs_{k}" in r else "-"
                       for k in VARIANTS)
        lines.append(
            f"| {r['block']} | {r['rules_kernels']}/{r['stitch_kernels']} | "
            f"{r['gemm_kernels']} | {r['rules_ms']:.3g} | {r['library_epilogue_ms']:.3g} | "
            f"{r['fused_vs_library_epilogue']:.2f} | {r['stitch_ms']:.3g} | "
            f"{r['onnxruntime_ms']:.3g} | {r['torch_eager_ms']:.3g} | "
            f"{r['stitch_vs_onnxruntime']:.2f} | {r['stitch_vs_torch']:.2f} | "
            f"{skip} | {rows_} | {r['stitch_library_share']:.0%} | {_worst(r):.1e} |")
    return "\n".join(lines) + "\n"


def _worst(r: dict) -> float:
    return max(r["rules_error"], r["stitch_error"], r["library_epilogue_error"],
               *(r.get(f"{k}_error", 0.0) for k in VARIANTS))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", nargs="+", help="block names (default: all)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="5 repeats")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--tag", default="", help="appended to the result file names")
    ap.add_argument("--note", default="", help="a line for the report (e.g. 'shared machine')")
    args = ap.parse_args(argv)
    repeats = 5 if args.quick else args.repeats
    all_blocks = blocks()
    names = args.blocks or list(all_blocks)
    unknown = set(names) - set(all_blocks)
    if unknown:
        log(f"error: no block {', '.join(sorted(unknown))}; blocks: {', '.join(all_blocks)}")
        return 2
    env = environment()
    rows, wrong = [], False
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            module, inputs = all_blocks[name]
            log(f"{name} ...")
            try:
                r = run_block(name, module, inputs, Path(tmp), repeats)
            except Exception as e:        # a block that fails is reported, not hidden
                r = {"block": name, "error": f"{type(e).__name__}: {str(e)[:200]}"}
                wrong = True
            else:
                wrong |= _worst(r) > 1e-3
            rows.append(r)
            log(f"  {r}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"gemm-{env['date'][:10]}{args.tag}"
    env["note"] = args.note
    stem.with_suffix(".json").write_text(json.dumps({"environment": env, "rows": rows},
                                                    indent=1))
    md = markdown(env, rows) + (f"\n{args.note}\n" if args.note else "")
    stem.with_suffix(".md").write_text(md)
    print(md)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
