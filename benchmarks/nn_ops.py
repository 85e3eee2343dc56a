#!/usr/bin/env python
"""CNN and audio blocks on the CPU: planners none, rules and stitch against torch eager.

    .venv/bin/python benchmarks/nn_ops.py            # 20 repeats
    .venv/bin/python benchmarks/nn_ops.py --quick    # 5 repeats

Blocks, imported with ``wb.from_torch``: a ResNet stem (conv 7x7/2, BatchNorm, ReLU,
MaxPool 3x3/2) -- the pool and ReLU are a window reduction the planners may fuse --, a
Wav2Vec2 feature-encoder layer (conv1d, GroupNorm with one channel per group, GELU),
and a transformers ResNet and Wav2Vec2 (small configs, random weights). Each plan is
compiled, checked against the NumPy reference and timed by ``Session.measure``; torch
eager is timed on the same inputs (median of the repeats). Also the kernel count of
each plan and the stitch planner's time.

Writes ``<out>/nn_ops_cpu.json`` and ``<out>/nn_ops_cpu.md`` (``<out>`` defaults to
benchmarks/results). Timing never makes the script fail.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import torch

from harness import RESULTS

import workbench as wb
from workbench.fusion import run_planner


class _Hidden(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).last_hidden_state


def blocks():
    torch.manual_seed(0)
    stem = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 7, 2, 3, bias=False),
                               torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(3, 2, 1))
    yield "resnet stem 1x3x224x224", stem.eval(), (1, 3, 224, 224)
    feat = torch.nn.Sequential(torch.nn.Conv1d(1, 64, 10, 5, bias=False),
                               torch.nn.GroupNorm(64, 64), torch.nn.GELU())
    yield "wav2vec2 conv+groupnorm+gelu 1x1x16000", feat.eval(), (1, 1, 16000)
    import transformers as T
    cfg = T.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16],
                         depths=[1, 1], layer_type="basic")
    yield "transformers ResNet (small) 1x3x64x64", _Hidden(T.ResNetModel(cfg)).eval(), \
        (1, 3, 64, 64)
    cfg = T.Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                           conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                           num_conv_pos_embedding_groups=2, feat_extract_norm="group")
    yield "transformers Wav2Vec2 (small) 1x1600", _Hidden(T.Wav2Vec2Model(cfg)).eval(), \
        (1, 1600)


def torch_ms(module, x, repeats: int) -> float:
    with torch.no_grad():
        for _ in range(2):
            module(x)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            module(x)
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    repeats = 5 if args.quick else 20
    torch.set_num_threads(os.cpu_count() or 1)
    rows = []
    for name, module, shape in blocks():
        x = torch.randn(*shape)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = wb.from_torch(module, (x,))
        row = {"block": name, "ops": len(g.nodes), "torch_ms": torch_ms(module, x, repeats)}
        for planner in ("none", "rules", "stitch"):
            t = time.perf_counter()
            plan, _ = run_planner(planner, g)
            plan_s = time.perf_counter() - t
            s = wb.Session(g, backend="cpu")
            s.auto(planner)
            m = s.measure(repeats=repeats)
            row[planner] = {"ms": m.latency_ms, "kernels": len(plan.groups),
                            "plan_s": plan_s, "checked": m.within_tolerance,
                            "max_rel_error": m.max_rel_error, "end_to_end_error": m.end_to_end_error}
            print(f"{name:45s} {planner:7s} {m.latency_ms:8.3f} ms  {len(plan.groups):3d} "
                  f"kernels  plan {plan_s:.2f} s  within tolerance: {m.within_tolerance}",
                  flush=True)
        print(f"{name:45s} torch   {row['torch_ms']:8.3f} ms", flush=True)
        rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "load": os.getloadavg()[0], "repeats": repeats, "date": time.strftime("%Y-%m-%d")}
    (out / "nn_ops_cpu.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"# CNN/audio blocks on the CPU ({meta['date']}, {meta['cores']} cores, "
             f"load average {meta['load']:.1f} at the end, median of {repeats})", "",
             "| block | ops | none ms (kernels) | rules ms (kernels) | stitch ms (kernels) "
             "| stitch plan s | torch eager ms |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        cell = lambda p: f"{r[p]['ms']:.3f} ({r[p]['kernels']})"   # noqa: E731
        lines.append(f"| {r['block']} | {r['ops']} | {cell('none')} | {cell('rules')} | "
                     f"{cell('stitch')} | {r['stitch']['plan_s']:.2f} | {r['torch_ms']:.3f} |")
    if meta["load"] > (meta["cores"] or 1):
        lines += ["", f"**Taken on a shared machine (load {meta['load']:.1f} on "
                      f"{meta['cores']} cores): OpenMP kernels wait for cores, so these "
                      "times say little about speed; re-run on a quiet machine.** Every "
                      "plan was checked against the reference."]
    (out / "nn_ops_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
