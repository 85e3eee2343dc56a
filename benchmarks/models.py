#!/usr/bin/env python
"""Whole models on the CPU: the model zoo (``workbench.testing.zoo``) through the workbench
against onnxruntime and torch eager, side by side in one run.

    .venv/bin/python benchmarks/models.py                       # every zoo model
    .venv/bin/python benchmarks/models.py --models gpt2 llama vit --repeats 30
    .venv/bin/python benchmarks/models.py --blas off 1 all       # thread arrangements
    .venv/bin/python benchmarks/models.py --tune --models bert    # + the tuned stitch plan
    .venv/bin/python benchmarks/models.py --dtype bfloat16        # model.to(torch.bfloat16)

Per model: build (transformers config class, small random weights), export with
``torch.onnx.export`` (default exporter and opset), then

- **import** seconds through ONNX (``load_onnx``) and through ``from_torch``; a model
  that does not import is reported with the importer's error line, not dropped;
- per planner (``rules``, ``stitch``): **plan** seconds (``Session.auto``), **compile**
  seconds (lowering + C compiler; the kernel cache is a fresh temporary folder unless
  ``--warm-cache``), the kernel count and the error against torch;
- **latency**: median milliseconds of one whole call -- the workbench program's
  ``run`` (inputs in, outputs out, fresh poisoned outputs and the intermediates the
  program keeps between calls, as a user's call has them; ``runtime/program.py``),
  onnxruntime's ``InferenceSession.run`` (CPU provider, default session options) and
  the torch module under ``no_grad``. The methods are timed in
  alternation: each round runs every method ``--inner`` times back to back (the first
  call of each block is discarded, and each block starts after a 0.2 s pause, so a
  thread pool still spinning from the previous method does not land on the next),
  ``--repeats`` rounds; the median is over all kept calls.

The workbench runs on the graph imported from ONNX (the file onnxruntime runs), or
from ``from_torch`` when the ONNX import fails. ``--blas`` lists the BLAS thread
arrangements the workbench methods are timed under (``off``: BLAS left as NumPy has it,
the workbench before issue 13; ``1``; ``all``; a count): each arrangement is one more
method in the same alternation.

``--one-by-one`` adds the method ``workbench stitch, kernel by kernel``: the same
compiled stitch program with its kernels launched one by one from Python
(``Program(plan_driver=False)``), as before the CPU's plan driver ran a whole call in
one native call (``runtime/driver.py``).

``--dtype bfloat16`` converts each model as a user does (``model.to(torch.bfloat16)``,
``zoo.build(dtype=...)``); torch eager then runs bfloat16 too, and one more method,
``workbench stitch, bf16 matmul library calls``, plans the same graph with bfloat16
matmuls and convolutions kept out of GEMM kernels (each a library call widening its
operands: the workbench before bfloat16 GEMM kernels), so the two are timed side by
side.

Writes ``<out>/models-<date>.json`` (machine, versions, BLAS library and
architecture, every sample) and ``<out>/models-<date>.md``. Never exits non-zero for
a timing or a failed model.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import os
import sys
import tempfile
import traceback
from pathlib import Path
from unittest import mock

import numpy as np

# (the harness reads OMP_WAIT_POLICY before anything imports the workbench)
from harness import (RESULTS, alternate, attention_variants, first_line, fmt, log,
                     rel_error, timed, write_results)

PLANNERS = ("rules", "stitch")


def blas_arg(v: str):
    if v == "off":
        return None
    if v == "all":
        return os.cpu_count() or 1
    return int(v)


# -- one model ---------------------------------------------------------------------
def prepare_model(name: str, folder: Path, blas: list, size: str,
                  tune: bool = False, dtype: str = "float32",
                  one_by_one: bool = False, attention_mask: bool = False,
                  exporter: str = "dynamo", planners=PLANNERS,
                  compiled: bool = False) -> tuple[dict, dict]:
    """Build, export, import, plan and compile one model. Returns its record and the
    runnable methods (label -> zero-argument call returning output name -> array).
    ``tune``: the stitch plan tuned too (``Session.tune``), one more method;
    ``one_by_one``: the stitch program launched kernel by kernel, one more;
    ``attention_mask``: a model without one among its inputs (the decoders) exported
    and called with an all-ones ``attention_mask`` passed by name, as
    ``model(**tokenizer(text))`` does (only the ONNX file imported);
    ``exporter``: ``dynamo`` (torch's default) or ``legacy`` (``dynamo=False``; the
    from_torch import is then not repeated); ``compiled``: one more method,
    ``torch.compile`` of the module (its compile seconds recorded)."""
    import torch

    import workbench as wb
    from workbench.testing import zoo
    from workbench.frontends import load_onnx

    rec: dict = {"model": name if exporter == "dynamo" else f"{name} ({exporter})",
                 "exporter": exporter, "size": size, "dtype": dtype}
    m, rec["build_s"] = timed(lambda: zoo.build(name, size=size, dtype=dtype))
    kwargs = {}
    if attention_mask and "attention_mask" not in m.input_names:
        kwargs["attention_mask"] = torch.ones(m.inputs[0].shape[:2], dtype=torch.int64)
    rec["inputs"] = {k: list(v.shape) for k, v in m.numpy_inputs().items()}
    rec["inputs"].update({k: list(v.shape) for k, v in kwargs.items()})
    path, rec["export_s"] = timed(lambda: zoo.export_onnx(
        m, folder / f"{name}-{exporter}.onnx", kwargs.get("attention_mask"),
        dynamo=exporter == "dynamo"))
    rec["onnx_bytes"] = path.stat().st_size
    import onnx
    rec["onnx_opset"] = {o.domain or "ai.onnx": o.version
                         for o in onnx.load(str(path), load_external_data=False).opset_import}
    inputs = m.numpy_inputs()
    inputs.update({k: v.numpy() for k, v in kwargs.items()})
    want = zoo.run_torch(m.module, m.inputs, kwargs)
    methods: dict = {}

    graphs = {}
    if kwargs or exporter != "dynamo":
        rec["import_from_torch"] = {"skipped": "not run (the attention_mask by name)"
                                    if kwargs else "not repeated for this export"}
    for source, load in (("onnx", lambda: load_onnx(path)),
                         ("from_torch", lambda: zoo.import_torch(m)))[
                             :2 - bool(kwargs or exporter != "dynamo")]:
        try:
            g, secs = timed(load)
            graphs[source] = g
            rec[f"import_{source}"] = {"seconds": secs, "nodes": len(g.nodes)}
        except Exception as e:
            rec[f"import_{source}"] = {"error": first_line(e)}
            log(f"  {name}: {source} import failed: {first_line(e)}")
    source = next((s for s in ("onnx", "from_torch") if s in graphs), None)
    rec["workbench_graph"] = source
    for planner in planners if source else ():
        r = rec.setdefault("planners", {}).setdefault(planner, {})
        try:
            s = wb.Session(graphs[source], backend="cpu")
            _, r["plan_s"] = timed(lambda: s.auto(planner))
            prog, r["compile_s"] = timed(s.program)
            r["kernels"] = len(prog.compiled)
            r["library_calls"] = sum(ck.kernel.library is not None for ck in prog.compiled)
            r["error_vs_torch"] = rel_error(prog.run(inputs), want)
            for b in blas:
                label = f"workbench {planner}" + ("" if len(blas) == 1 else
                                                  f" blas={'off' if b is None else b}")
                methods[label] = _workbench_call(prog, inputs, b)
            if one_by_one and planner == "stitch":
                from workbench.runtime.program import Program
                twin = Program(s.plan, prog.backend, kernels=prog.kernels,
                               compiled=prog.compiled, plan_driver=False)
                methods["workbench stitch, kernel by kernel"] = _workbench_call(
                    twin, inputs, blas[0])
            if dtype == "bfloat16" and planner == "stitch":
                before = wb.Session(graphs[source], backend="cpu")
                with _bf16_matmuls_as_library_calls():
                    before.auto(planner)
                r["library_matmul_kernels"] = len(before.plan.groups)
                methods["workbench stitch, bf16 matmul library calls"] = _workbench_call(
                    before.program(), inputs, blas[0])
            if tune and planner == "stitch":
                _, r["tune_s"] = timed(lambda: s.tune(use_cache=False))
                r["tuned"] = [{"kernel": t.group, "rule_ms": t.rule_ms, "best_ms": t.best_ms,
                               "launch": dict(t.chosen.forced_launch),
                               "mapping": t.chosen.forced_mapping}
                              for t in s.tuning if t.best_ms < t.rule_ms]
                tuned = s.program()
                r["tuned_error_vs_torch"] = rel_error(tuned.run(inputs), want)
                methods[f"workbench {planner} tuned"] = _workbench_call(tuned, inputs, blas[0])
            # the fused attentions taking the softmax online as taken another way, side
            # by side (attention_variants)
            variants = attention_variants(s.plan) if planner == "stitch" else {}
            for label, (plan, kernels) in variants.items():
                other = s.program(plan)
                r[f"{label.replace(' ', '_')}_kernels"] = kernels
                r[f"{label.replace(' ', '_')}_error_vs_torch"] = rel_error(other.run(inputs), want)
                methods[f"workbench stitch, {label}"] = _workbench_call(other, inputs, blas[0])
        except Exception as e:
            r["error"] = first_line(e)
            r["traceback_tail"] = traceback.format_exc()[-1500:]
            log(f"  {name}: {planner} failed: {first_line(e)}")

    try:
        import onnxruntime as ort
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        ort_call = lambda: dict(zip(names, sess.run(None, inputs)))  # noqa: E731
        rec["onnxruntime_error_vs_torch"] = rel_error(ort_call(), want)
        methods["onnxruntime"] = ort_call
    except Exception as e:
        rec["onnxruntime_error"] = first_line(e)

    tin = m.inputs

    def torch_call():
        with torch.no_grad():
            out = m.module(*tin, **kwargs)
        return {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}
    methods["torch eager"] = torch_call
    if compiled:
        try:
            fn = torch.compile(m.module)

            def compiled_call():
                with torch.no_grad():
                    out = fn(*tin, **kwargs)
                return {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}
            _, rec["torch_compile_s"] = timed(compiled_call)
            rec["torch_compile_error_vs_torch"] = rel_error(
                {k: v.numpy() for k, v in compiled_call().items()}, want)
            methods["torch.compile"] = compiled_call
        except Exception as e:
            rec["torch_compile_error"] = first_line(e)
            log(f"  {name}: torch.compile failed: {first_line(e)}")
    return rec, methods


def _bf16_matmuls_as_library_calls():
    """Plan with GEMM kernels taking float32 only (as before bfloat16 GEMM kernels):
    bfloat16 matmuls and convolutions are library calls."""
    from workbench.fusion.gemm import legality
    from workbench.dtypes import DType
    return mock.patch.object(legality, "GEMM_DTYPES", (DType.float32,))


def _workbench_call(prog, inputs, blas_threads):
    def call():
        prog.backend.blas_threads = blas_threads
        return prog.run(inputs)
    call.program, call.inputs = prog, inputs    # (benchmarks/call_sources.py reads them)
    return call


# -- the run -------------------------------------------------------------------------


def markdown(res: dict) -> str:
    mi = res["machine"]
    blas = [t for t in mi["threadpools"] if t["user_api"] == "blas"]
    lines = [f"# Whole models on the CPU ({res['date']})", "",
             f"Machine: {mi['cpu']}, {mi['cores']} cores, load average at start "
             f"{', '.join(f'{x:.1f}' for x in res['load_average_at_start'])}. "
             + ("**The machine was shared with other jobs during the run**: "
                "latencies are noisy; compare the methods of one model (timed in "
                "alternation), not runs. " if res["shared"] else "")
             + f"Python {mi['python']}, NumPy {mi['numpy']}, torch {mi['torch']}, "
             f"transformers {mi['transformers']}, onnx {mi['onnx']}, onnxruntime "
             f"{mi['onnxruntime']}, onnxscript {mi['onnxscript']}; {mi['compiler']}.",
             "",
             "BLAS: " + "; ".join(f"{t['internal_api']} {t['version']} "
                                  f"({t['architecture']}, {t['threading_layer']}, "
                                  f"{t['num_threads']} threads)" for t in blas)
             + f". OPENBLAS_CORETYPE {mi['OPENBLAS_CORETYPE']}, OMP_WAIT_POLICY at start "
             f"{mi['OMP_WAIT_POLICY_at_start']} (in the run: {mi['OMP_WAIT_POLICY_in_run']}), "
             f"torch threads {mi.get('torch_threads')}, onnxruntime default session "
             "options.", "",
             f"Models: zoo size `{res['size']}` ({res['dims']}), random weights, "
             f"eval mode, {res.get('dtype', 'float32')}"
             + ("; the decoders exported and called with an all-ones attention_mask "
                "passed by name, as model(**tokenizer(text)) does" if res.get(
                    "attention_mask") else "") + ".", "",
             f"Latency: median ms of one call, {res['rounds']} alternating rounds of "
             f"{res['inner']} calls. Import/plan/compile in seconds (compile with a "
             f"{'warm' if res['warm_cache'] else 'cold'} kernel cache). Error: "
             "max |y - torch| / max |torch|.", ""]
    lines += ["## Import, plan, compile", "",
              "| model | ONNX import s | from_torch import s | planner | plan s | compile s "
              "| kernels (library) | error |", "|---|---|---|---|---|---|---|---|"]
    for r in res["models"]:
        def imp(key):
            v = r.get(key, {})
            return (f"{v['seconds']:.2f} ({v['nodes']} nodes)" if "seconds" in v
                    else v["skipped"] if "skipped" in v else f"fails: {v.get('error', 'n/a')}")
        pl = r.get("planners") or {"-": {}}
        for i, (planner, p) in enumerate(pl.items()):
            first = i == 0
            lines.append(
                f"| {r['model'] if first else ''} | {imp('import_onnx') if first else ''} "
                f"| {imp('import_from_torch') if first else ''} | {planner} "
                + (f"| fails: {p['error']} | | | |" if "error" in p else
                   f"| {fmt(p.get('plan_s'))} | {fmt(p.get('compile_s'))} "
                   f"| {p.get('kernels', 'n/a')} ({p.get('library_calls', 'n/a')}) "
                   f"| {fmt(p.get('error_vs_torch'), '{:.1e}')} |"))
        if "error" in r:
            lines.append(f"| {r['model']} | fails: {r['error']} | | | | | | |")
    methods = []
    for r in res["models"]:
        for k in r.get("latency_ms", {}):
            if k not in methods:
                methods.append(k)
    base = ("onnxruntime" if any("onnxruntime" in r.get("latency_ms", {})
                                 for r in res["models"]) else "torch eager")
    lines += ["", f"## Latency (ms, median; x = {base} / method)", "",
              "| model | graph | " + " | ".join(methods) + " |",
              "|---|---|" + "---|" * len(methods)]
    for r in res["models"]:
        lat = r.get("latency_ms", {})
        ref = lat.get(base)
        cells = []
        for k in methods:
            v = lat.get(k)
            cells.append("n/a" if v is None else
                         f"{v:.3f}" + ("" if ref is None or k == base
                                       else f" ({ref / v:.2f}x)"))
        lines.append(f"| {r['model']} | {r.get('workbench_graph') or 'none imports'} | "
                     + " | ".join(cells) + " |")
    lines += summary(res)
    tuned = [(r["model"], p) for r in res["models"]
             for p in [(r.get("planners") or {}).get("stitch", {})] if "tune_s" in p]
    if tuned:
        lines += ["", "## Tuning the stitch plan (Session.tune, searched in this run)", "",
                  "| model | tune s | kernels retuned: rule ms -> tuned ms (launch) | error |",
                  "|---|---|---|---|"]
        for model, p in tuned:
            moved = "; ".join(
                f"{t['kernel']} {t['rule_ms']:.3f} -> {t['best_ms']:.3f} ("
                + (", ".join(f"{k}={v}" for k, v in t["launch"].items())
                   or f"mapping {t['mapping']}") + ")" for t in p["tuned"]) or "none"
            lines.append(f"| {model} | {p['tune_s']:.1f} | {moved} "
                         f"| {fmt(p.get('tuned_error_vs_torch'), '{:.1e}')} |")
    refused = [(r["model"], r["onnxruntime_error"]) for r in res["models"]
               if "onnxruntime_error" in r]
    if refused:
        lines += ["", "onnxruntime did not run: "
                  + "; ".join(f"{m}: {e[:160]}" for m, e in refused) + "."]
    if res.get("notes"):
        lines += ["", *res["notes"]]
    return "\n".join(lines) + "\n"


def summary(res: dict, method: str = "workbench stitch") -> list[str]:
    """Issue 44's targets read off the latency table: ``method`` against onnxruntime
    (every model >= 0.9x, geomean >= 1.1x), torch eager (never slower) and
    torch.compile, as ratios other / method (> 1: the workbench is faster)."""
    rows = [(r["model"], r["latency_ms"]) for r in res["models"]
            if method in r.get("latency_ms", {})]
    if not rows:
        return []
    out = ["", f"## `{method}` against each contender (x = contender / workbench; "
           "> 1: the workbench is faster)", "",
           "| contender | models | geomean x | min x (model) | models below 0.9x |",
           "|---|---|---|---|---|"]
    for other in ("onnxruntime", "torch eager", "torch.compile"):
        ratios = {m: lat[other] / lat[method] for m, lat in rows if other in lat}
        if not ratios:
            continue
        geo = float(np.exp(np.mean(np.log(list(ratios.values())))))
        worst = min(ratios, key=ratios.get)
        below = ", ".join(f"{m} {x:.2f}" for m, x in ratios.items() if x < 0.9) or "none"
        out.append(f"| {other} | {len(ratios)} | {geo:.2f} | {ratios[worst]:.2f} ({worst}) "
                   f"| {below} |")
    return out


def main(argv=None) -> int:
    from workbench.testing import zoo
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=None, choices=zoo.ALL_MODELS,
                    help="default: the model-zoo test's models (zoo.MODELS)")
    ap.add_argument("--families", action="store_true",
                    help="issue 44's families (zoo.FAMILIES): decoders, encoder-decoders, "
                         "vision, CLIP, a selective scan")
    ap.add_argument("--exporters", nargs="+", default=["dynamo"],
                    choices=["dynamo", "legacy"],
                    help="the ONNX export forms, each model exported by each")
    ap.add_argument("--planners", nargs="+", default=list(PLANNERS),
                    help="the workbench planners timed (default rules stitch)")
    ap.add_argument("--compile", action="store_true",
                    help="also time torch.compile of the module (compiled once, untimed)")
    ap.add_argument("--size", default="small", choices=list(zoo.SIZES),
                    help="zoo.SIZES entry (default small: 2 layers, hidden 256, seq 128)")
    ap.add_argument("--repeats", type=int, default=15, help="alternating rounds")
    ap.add_argument("--inner", type=int, default=5, help="timed calls per method per round")
    ap.add_argument("--blas", nargs="+", default=["1"],
                    help="BLAS thread arrangements for the workbench: off, all, or a count")
    ap.add_argument("--tune", action="store_true",
                    help="also time the stitch plan after Session.tune (its search not "
                         "cached: every kernel measured in this run)")
    ap.add_argument("--one-by-one", action="store_true",
                    help="also time the stitch program launched kernel by kernel (no plan "
                         "driver)")
    ap.add_argument("--warm-cache", action="store_true",
                    help="keep $WORKBENCH_CACHE (default: a fresh one, compile is cold)")
    ap.add_argument("--shared", action="store_true",
                    help="say in the results that other jobs shared the machine")
    ap.add_argument("--note", action="append", default=[], help="a line for the report")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="the models' dtype (bfloat16: converted as model.to(torch.bfloat16))")
    ap.add_argument("--attention-mask", action="store_true",
                    help="decoders exported and called with an all-ones attention_mask "
                         "passed by name, as model(**tokenizer(text)) does")
    ap.add_argument("--tag", default="",
                    help="appended to the result file names after a dash (--tag passive)")
    a = ap.parse_args(argv)
    models = a.models or list(zoo.FAMILIES if a.families else zoo.MODELS)
    blas = [blas_arg(b) for b in a.blas]
    tmp = Path(tempfile.mkdtemp(prefix="wb-models-"))
    if not a.warm_cache:
        os.environ["WORKBENCH_CACHE"] = str(tmp / "cache")
    date = _dt.date.today().isoformat()
    res = {"date": date, "size": a.size, "dims": dataclasses.asdict(zoo.SIZES[a.size]),
           "dtype": a.dtype, "rounds": a.repeats, "inner": a.inner,
           "attention_mask": a.attention_mask,
           "warm_cache": a.warm_cache,
           "blas_arrangements": a.blas, "shared": a.shared, "notes": a.note,
           "load_average_at_start": list(os.getloadavg()), "machine": None, "models": []}
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"models-{date}{'-' + a.tag.lstrip('-') if a.tag else ''}"
    for name, exporter in ((n, e) for n in models for e in a.exporters):
        log(f"{name} ({exporter}): build, export, import, plan, compile")
        try:
            rec, methods = prepare_model(name, tmp, blas, a.size, a.tune, a.dtype,
                                         a.one_by_one, a.attention_mask, exporter,
                                         a.planners, a.compile)
        except Exception as e:
            rec, methods = {"model": name if exporter == "dynamo" else f"{name} ({exporter})",
                            "exporter": exporter, "error": first_line(e)}, {}
            log(f"  {name}: {first_line(e)}")
        if methods:
            log(f"  timing {', '.join(methods)}")
            samples = alternate(methods, a.repeats, a.inner)
            rec["latency_ms"] = {k: float(np.median(v) * 1e3) for k, v in samples.items()}
            rec["latency_samples_ms"] = {k: [round(x * 1e3, 4) for x in v]
                                         for k, v in samples.items()}
        res["models"].append(rec)
        write_results(stem, res, markdown)
    print(markdown(res))
    log(f"wrote {stem}.json and {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
