#!/usr/bin/env python
"""Convolutions as GEMM kernels on the CPU: how each convolution's product is made,
side by side in one run, on whole CNN and audio models against onnxruntime.

    .venv/bin/python benchmarks/conv_gemm.py                  # ResNet-50 + the zoo's
    .venv/bin/python benchmarks/conv_gemm.py --models resnet50 --repeats 10

Models: ResNet-50 (transformers' default ``ResNetConfig``, one 224 x 224 image, random
weights) and the zoo's models with convolutions at size ``small`` (``resnet``,
``vit``, ``whisper_encoder``, ``wav2vec2``, ``mobilenet_v2``), each exported by
``torch.onnx.export`` and imported from that file (the one onnxruntime runs). The
workbench plans each with ``stitch``, three ways (``Session.set_launch`` on every
convolution kernel):

- **rule**: the planner's choice (``fusion/gemm/conv_rule.py``) -- a 1-D or 2-D
  convolution of one group whose filters hold at most ``ConvRule.direct_weights``
  weights computed directly, the filters in the vectors' lanes and no patches
  (``CONV_DIRECT``); otherwise filters of fewer than ``ConvRule.micro_depth`` (256) weights on the
  micro-kernel (each tile's patches gathered straight into its column panels,
  ``PACK_TILE``; a 1 x 1 convolution's input packed by every run), deeper ones by
  sgemm per tile (patches gathered row-major; a 1 x 1 convolution's input read in
  place);
- **micro-kernel** (``blas=0`` on every convolution that takes it; one with one
  filter per group, a depthwise one, is then computed tap by tap into its tile);
- **sgemm** (``blas=1`` on every convolution);
- **rule, positions in lanes** (``--methods``; not by default): the rule with no
  1 x 1 convolution made transposed (``ConvRule.few_positions`` = 0), as before
  ``PACK_FILTERS``: side by side with **rule**, what that path gains.

Per method: whole-model latency (median ms of one ``Program.run``, timed in
alternation with onnxruntime as ``benchmarks/models.py`` does), the convolution
kernels' summed time and rate (``Program.time``: GFLOP/s over 2 x MACs), and the
error against onnxruntime's output. Per convolution kernel, its time as the rule makes
it, on the micro-kernel and by sgemm (the programs' ``Program.time`` alternated
``--kernel-rounds`` times, medians): the measurements the rule's depth and its
direct convolutions' weights come from (``--direct-weights N`` sets the latter for one
run).

Before this benchmark the rule was every convolution gathered row-major for sgemm,
1 x 1 ones too, each tile holding every filter; ``--methods rule`` on that commit
(where ``blas`` was refused for a convolution) times it against onnxruntime the same
way. Writes ``<out>/conv-gemm-<date>.json`` and ``.md``. Never exits non-zero for a
timing.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from harness import (alternate, first_line, log, machine_line, method_rows,
                     model_timing_args, rel_error, write_results)

MODELS = ("resnet50", "resnet", "vit", "whisper_encoder", "wav2vec2", "mobilenet_v2")
RULE, MICRO, SGEMM = "rule", "micro-kernel", "sgemm"
LANES = "rule, positions in lanes"   # the rule before PACK_FILTERS (FEW_POSITIONS = 0)


def export(name: str, folder: Path) -> Path:
    """The model's ONNX file, as a user exports it."""
    import torch

    from workbench.testing import zoo
    if name != "resnet50":
        return zoo.export_onnx(zoo.build(name, size="small"), folder / f"{name}.onnx")
    from transformers import ResNetConfig, ResNetModel
    torch.manual_seed(0)
    m = ResNetModel(ResNetConfig()).eval()
    path = folder / "resnet50.onnx"
    with torch.no_grad():
        torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), str(path),
                          input_names=["pixel_values"], external_data=False)
    return path


def _convs(s):
    return [gr for gr in s.plan.groups
            if gr.schedule.gemm is not None and gr.schedule.gemm.im2col is not None]


def plan(g, how: str):
    """A stitch session of ``g`` with its convolutions made ``how``."""
    import workbench as wb
    from workbench.errors import FusionRefused
    from dataclasses import replace
    from workbench.fusion.gemm import conv_rule
    s = wb.Session(g, backend="cpu")
    keep = conv_rule.CONV_RULE
    if how == LANES:      # no 1 x 1 convolution made transposed
        conv_rule.CONV_RULE = replace(keep, few_positions=0)
    try:
        s.auto("stitch")
    finally:
        conv_rule.CONV_RULE = keep
    for gr in _convs(s) if how not in (RULE, LANES) else ():
        try:
            s.set_launch(gr.id, blas=0 if how == MICRO else 1)
        except FusionRefused:      # (filters too deep for a panel of patches)
            pass
    return s


def conv_time(s, prog, inputs) -> dict:
    """The convolution kernels' summed median ms and GFLOP/s (Program.time)."""
    per, _ = prog.time(inputs, warmup=2, repeats=10)
    ids = {gr.id: gr.schedule.gemm.flops for gr in _convs(s)}
    ms = flops = 0.0
    for t, ck in zip(per, prog.compiled):
        if ck.kernel.group in ids:
            ms, flops = ms + t * 1e3, flops + ids[ck.kernel.group]
    return {"conv_kernels": len(ids), "conv_ms": ms,
            "conv_gflops": flops / 1e9, "conv_gflop_s": flops / (ms * 1e-3) / 1e9 if ms else 0}


def made(t) -> str:
    """How a convolution's product is made, in a word or two."""
    from workbench.fusion.gemm_shape import (CONV_DIRECT, DEPTHWISE_LANES, DEPTHWISE_PLANES,
                                             PACK_FILTERS)
    return {CONV_DIRECT: "direct", DEPTHWISE_LANES: "depthwise lanes",
            DEPTHWISE_PLANES: "depthwise planes", PACK_FILTERS: "transposed",
            "": "sgemm"}.get(t.packed_b, "micro-kernel")


def per_kernel(sessions: dict, programs: dict, inputs, rounds: int) -> list[dict]:
    """Each convolution kernel's median ms as the rule makes it, on the micro-kernel
    and by sgemm, the programs timed in alternation."""
    times: dict = {how: [] for how in (RULE, MICRO, SGEMM) if how in programs}
    for _ in range(rounds):
        for how in times:
            times[how].append(programs[how].time(inputs, warmup=1, repeats=5)[0])
    med = {}
    for how, runs in times.items():
        per = np.median(np.array(runs), axis=0)
        med[how] = {ck.kernel.group: float(t) for t, ck in zip(per, programs[how].compiled)}
    rows = []
    for gr in _convs(sessions[RULE]):
        t = gr.schedule.gemm
        r = {"kernel": gr.id, "filter": list(t.im2col.kernel),
             "strides": list(t.im2col.strides), "m": t.m, "n": t.n, "depth": t.k,
             "batch": t.batch, "gflop": t.flops / 1e9, "rule": made(t)}
        for how in times:
            u = sessions[how].plan.group(gr.id).schedule.gemm
            r[f"{how}_ms"] = med[how][gr.id] * 1e3
            r[f"{how}_made"] = made(u)
            r[f"{how}_tiles"] = f"{u.tiles} of {u.tile_m}x{u.tile_n}"
        rows.append(r)
    return rows


def run_model(name: str, folder: Path, rounds: int, inner: int,
              hows=(RULE, MICRO, SGEMM), kernel_rounds: int = 5) -> dict:
    import onnxruntime as ort

    from workbench.frontends import load_onnx
    from workbench.fusion.gemm_shape import PACK_FILTERS
    rec: dict = {"model": name}
    path = export(name, folder)
    g = load_onnx(path)
    rng = np.random.default_rng(0)
    inputs = {i: rng.standard_normal(g.value(i).shape).astype(g.value(i).dtype.np)
              for i in g.inputs}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want = dict(zip(names, sess.run(None, inputs)))
    methods = {"onnxruntime": lambda: sess.run(None, inputs)}
    sessions, programs = {}, {}
    for how in hows:
        s = sessions[how] = plan(g, how)
        prog = programs[how] = s.program()
        got = prog.run(inputs)
        r = rec.setdefault("methods", {}).setdefault(how, {})
        r["error_vs_onnxruntime"] = rel_error(got, want)
        r["kernels"] = len(prog.compiled)
        r["transposed"] = sum(gr.schedule.gemm.packed_b == PACK_FILTERS for gr in _convs(s))
        r.update(conv_time(s, prog, inputs))
        methods[f"workbench {how}"] = (lambda p: lambda: p.run(inputs))(prog)
        log(f"  {name} {how}: {r['conv_kernels']} convolution kernels, "
            f"{r['conv_ms']:.2f} ms, {r['conv_gflop_s']:.0f} GFLOP/s")
    samples = alternate(methods, rounds, inner)
    rec["latency_ms"] = {k: float(np.median(v) * 1e3) for k, v in samples.items()}
    if MICRO in programs and SGEMM in programs and RULE in sessions:
        rec["per_kernel"] = per_kernel(sessions, programs, inputs, kernel_rounds)
    return rec


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# Convolutions as GEMM kernels on the CPU ({res['date']})", "",
             f"{machine_line(res)}; NumPy {mi['numpy']}, onnxruntime "
             f"{mi['onnxruntime']} (default session options), torch {mi['torch']}; "
             f"{mi['compiler']}.", "",
             "Each model planned by `stitch`, its convolutions made three ways (see "
             "`benchmarks/conv_gemm.py`); latency: median ms of one whole call, "
             f"{res['rounds']} alternating rounds of {res['inner']} calls; x = "
             "onnxruntime / method. Convolution kernels: their summed median ms "
             "(`Program.time`) and GFLOP/s.", ""]
    for n in res["notes"]:
        lines += [n, ""]
    lines += ["| model | method | latency ms | x onnxruntime | conv kernels ms | conv "
              "GFLOP/s | error vs onnxruntime |", "|---|---|---|---|---|---|---|"]
    lines += method_rows(res, lambda r: [""] * 3 if r is None else [
        f"{r['conv_ms']:.3f}", f"{r['conv_gflop_s']:.0f}", f"{r['error_vs_onnxruntime']:.1e}"],
        lambda how, r: how + (f" ({r['transposed']} made transposed)"
                              if r.get("transposed") else ""))
    lines += ["", "## Each convolution kernel: the rule, the micro-kernel, sgemm", "",
              "Median ms of each kernel (`Program.time`, the programs alternated); "
              "GFLOP/s over 2 x MACs; how the rule makes it (direct: the filters in the "
              "lanes, no patches), and the tiles each way.", "",
              "| model | kernel | filter, stride | m x n x depth | rule ms (GFLOP/s) | "
              "micro-kernel ms (GFLOP/s) | sgemm ms (GFLOP/s) | rule | rule tiles | "
              "micro-kernel tiles | sgemm tiles |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]

    def rate(r, how):
        ms = r.get(f"{how}_ms")
        return "" if ms is None else f"{ms:.3f} ({r['gflop'] / ms * 1e3:.0f})"
    for rec in res["models"]:
        for r in rec.get("per_kernel", ()):
            f = "x".join(map(str, r["filter"]))
            st = "x".join(map(str, r["strides"]))
            lines.append(
                f"| {rec['model']} | {r['kernel']} | {f}, {st} | "
                f"{r['batch']} x {r['m']}x{r['n']}x{r['depth']} | {rate(r, RULE)} | "
                f"{rate(r, MICRO)} | {rate(r, SGEMM)} | {r['rule']} | "
                f"{r.get('rule_tiles', '')} | {r['micro-kernel_tiles']} | "
                f"{r['sgemm_tiles']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model_timing_args(ap, MODELS)
    ap.add_argument("--methods", nargs="+", default=[RULE, MICRO, SGEMM],
                    choices=[RULE, MICRO, SGEMM, LANES])
    ap.add_argument("--kernel-rounds", type=int, default=5,
                    help="alternations of the per-kernel timing")
    ap.add_argument("--direct-weights", type=int, default=None,
                    help="the rule's ConvRule.direct_weights for this run (the most weights "
                    "the filters of a convolution computed directly hold)")
    ap.add_argument("--note", action="append", default=[], help="a line for the report")
    ap.add_argument("--tag", default="", help="appended to the result file names")
    a = ap.parse_args(argv)
    if a.direct_weights is not None:
        from dataclasses import replace
        from workbench.fusion.gemm import conv_rule
        conv_rule.CONV_RULE = replace(conv_rule.CONV_RULE, direct_weights=a.direct_weights)
        a.note.append(f"ConvRule.direct_weights = {a.direct_weights} in this run.")
    tmp = Path(tempfile.mkdtemp(prefix="wb-conv-gemm-"))
    os.environ.setdefault("WORKBENCH_CACHE", str(tmp / "cache"))
    date = _dt.date.today().isoformat()
    res = {"date": date, "rounds": a.repeats, "inner": a.inner, "notes": a.note,
           "load_average_at_start": list(os.getloadavg()), "models": []}
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"conv-gemm-{date}{a.tag}"
    for name in a.models:
        log(f"{name}: export, import, plan three ways, compile, time")
        try:
            res["models"].append(run_model(name, tmp, a.repeats, a.inner, a.methods,
                                           a.kernel_rounds))
        except Exception as e:
            res["models"].append({"model": name, "error": first_line(e)})
            log(f"  {name}: {first_line(e)}")
        write_results(stem, res, markdown)
    print(markdown(res))
    log(f"wrote {stem}.json and {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
