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
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from unittest import mock

# read before anything imports the workbench (whose C toolchain module sets a default)
_OMP_WAIT_POLICY_AT_START = os.environ.get("OMP_WAIT_POLICY")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fusion_cpu import machine_info  # noqa: E402

PLANNERS = ("rules", "stitch")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return f"{type(e).__name__}: {text.splitlines()[0][:400]}"


def rel_error(got: dict, want: dict) -> float:
    """max |y - r| / max |r| over every output (the model-zoo test's measure)."""
    worst = 0.0
    for k, r in want.items():
        y, r = np.asarray(got[k], dtype=np.float64), np.asarray(r, dtype=np.float64)
        if y.shape != r.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(y - r)) / max(np.max(np.abs(r)), 1e-30)))
    return worst


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def blas_arg(v: str):
    if v == "off":
        return None
    if v == "all":
        return os.cpu_count() or 1
    return int(v)


# -- one model ---------------------------------------------------------------------
def prepare_model(name: str, folder: Path, blas: list, size: str,
                  tune: bool = False, dtype: str = "float32",
                  one_by_one: bool = False, attention_mask: bool = False) -> tuple[dict, dict]:
    """Build, export, import, plan and compile one model. Returns its record and the
    runnable methods (label -> zero-argument call returning output name -> array).
    ``tune``: the stitch plan tuned too (``Session.tune``), one more method;
    ``one_by_one``: the stitch program launched kernel by kernel, one more;
    ``attention_mask``: a model without one among its inputs (the decoders) exported
    and called with an all-ones ``attention_mask`` passed by name, as
    ``model(**tokenizer(text))`` does (only the ONNX file imported)."""
    import torch

    import workbench as wb
    from workbench.testing import zoo
    from workbench.frontends import load_onnx

    rec: dict = {"model": name, "size": size, "dtype": dtype}
    m, rec["build_s"] = timed(lambda: zoo.build(name, size=size, dtype=dtype))
    kwargs = {}
    if attention_mask and "attention_mask" not in m.input_names:
        kwargs["attention_mask"] = torch.ones(m.inputs[0].shape[:2], dtype=torch.int64)
    rec["inputs"] = {k: list(v.shape) for k, v in m.numpy_inputs().items()}
    rec["inputs"].update({k: list(v.shape) for k, v in kwargs.items()})
    path, rec["export_s"] = timed(lambda: zoo.export_onnx(m, folder / f"{name}.onnx",
                                                          kwargs.get("attention_mask")))
    rec["onnx_bytes"] = path.stat().st_size
    import onnx
    rec["onnx_opset"] = {o.domain or "ai.onnx": o.version
                         for o in onnx.load(str(path), load_external_data=False).opset_import}
    inputs = m.numpy_inputs()
    inputs.update({k: v.numpy() for k, v in kwargs.items()})
    want = zoo.run_torch(m.module, m.inputs, kwargs)
    methods: dict = {}

    graphs = {}
    if kwargs:
        rec["import_from_torch"] = {"skipped": "not run (the attention_mask by name)"}
    for source, load in (("onnx", lambda: load_onnx(path)),
                         ("from_torch", lambda: zoo.import_torch(m)))[:2 - bool(kwargs)]:
        try:
            g, secs = timed(load)
            graphs[source] = g
            rec[f"import_{source}"] = {"seconds": secs, "nodes": len(g.nodes)}
        except Exception as e:
            rec[f"import_{source}"] = {"error": first_line(e)}
            log(f"  {name}: {source} import failed: {first_line(e)}")
    source = next((s for s in ("onnx", "from_torch") if s in graphs), None)
    rec["workbench_graph"] = source
    for planner in PLANNERS if source else ():
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
    return rec, methods


def _bf16_matmuls_as_library_calls():
    """Plan with GEMM kernels taking float32 only (as before bfloat16 GEMM kernels):
    bfloat16 matmuls and convolutions are library calls."""
    from workbench.fusion import gemm
    from workbench.dtypes import DType
    return mock.patch.object(gemm, "GEMM_DTYPES", (DType.float32,))


# label: (the Schedule property a kernel taken that way has, the launch that drops it)
ATTENTION_FORMS = {"every key": ("key_limit", dict(skip=0)),
                   "whole rows": ("online", dict(online=0))}


def attention_variants(plan) -> dict:
    """The plan with its fused attentions taken another way, by label (ATTENTION_FORMS):
    ``every key``, each one skipping the keys a causal mask hides taking every block
    (launch skip=0: what the skip saves); ``whole rows``, each one taking the softmax
    online holding whole rows of scores instead (launch online=0: what the online form
    saves). A form no kernel of the plan has is left out."""
    out = {}
    for label, (has, launch) in ATTENTION_FORMS.items():
        gids = [gr.id for gr in plan.groups
                if gr.schedule is not None and getattr(gr.schedule, has) is not None]
        other = plan
        for gid in gids:
            other = other.set_launch(gid, **launch)
        if gids:
            out[label] = (other, len(gids))
    return out


def _workbench_call(prog, inputs, blas_threads):
    def call():
        prog.backend.blas_threads = blas_threads
        return prog.run(inputs)
    return call


SETTLE_S = 0.2       # seconds between one method's block and the next (see alternate)


def alternate(methods: dict, rounds: int, inner: int) -> dict[str, list[float]]:
    """Seconds per call of each method, timed in alternating blocks (see the module
    docstring)."""
    samples: dict[str, list[float]] = {k: [] for k in methods}
    for k, fn in methods.items():    # warm-up: first calls allocate and load
        fn()
        fn()
    for _ in range(rounds):
        for k, fn in methods.items():
            # the previous method's thread pool may spin for milliseconds after its
            # last call (onnxruntime's does: measured, the next method ran up to 2x
            # slower over its next three calls); a pause lets every pool go to sleep
            time.sleep(SETTLE_S)
            fn()
            for _ in range(inner):
                t0 = time.perf_counter()
                fn()
                samples[k].append(time.perf_counter() - t0)
    return samples


def quiet_ms(samples: list[float], inner: int) -> float:
    """ms of the fastest block's median, blocks of ``inner`` calls as ``alternate``
    timed them: on a host that now and then runs whole blocks at half speed (the
    development VM, onnxruntime's calls too), the method at its quiet pace."""
    return min(float(np.median(samples[i:i + inner])) * 1e3
               for i in range(0, len(samples), inner))



def one_op_case(path):
    """A one-input ONNX file (input ``x``) of a benchmark of single ops: its graph as
    the workbench loads it, feeds of random normal values (seed 1), onnxruntime's
    session and its output."""
    import onnxruntime as ort

    import workbench as wb
    g = wb.load(path)
    x = np.random.default_rng(1).standard_normal(g.value("x").shape).astype(np.float32)
    feeds = {"x": x}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return g, feeds, sess, sess.run(None, feeds)[0]


def time_beside_onnxruntime(progs: dict, feeds, sess, rounds: int, inner: int,
                            rec: dict) -> None:
    """Into ``rec``: each program's whole call and onnxruntime's, timed in alternation
    (``call_ms``: quiet ms), then each program's first kernel alone (``methods[how]
    ["kernel_ms"]``: the fastest block's median launch, ``Program.time``)."""
    calls = {how: (lambda p: lambda: p.run(feeds))(prog) for how, prog in progs.items()}
    calls["onnxruntime"] = lambda: sess.run(None, feeds)
    samples = alternate(calls, rounds, inner)
    rec["call_ms"] = {k: quiet_ms(v, inner) for k, v in samples.items()}
    for how, prog in progs.items():      # the kernel alone, blocks of launches
        blocks = [prog.time(feeds, warmup=1, repeats=inner)[0][0] for _ in range(rounds)]
        rec["methods"][how]["kernel_ms"] = min(blocks) * 1e3



def slowest_kernels(s, prog, feeds, count: int = 5) -> list[dict]:
    """The ``count`` slowest kernels of session ``s``'s program (``Program.time``, 5
    runs): name, ms and schedule each."""
    per, _ = prog.time(feeds, repeats=5)
    return [{"kernel": ck.kernel.name, "ms": t * 1e3,
             "schedule": s.plan.group(ck.kernel.group).schedule.describe()}
            for t, ck in sorted(zip(per, prog.compiled), key=lambda p: -p[0])[:count]]


def slowest_rows(res: dict) -> list[str]:
    """The report's section of each model's slowest kernels (``slowest_kernels``)."""
    lines = ["", "## The slowest kernels of each stitch plan", "",
             "| model | kernel | ms | schedule |", "|---|---|---|---|"]
    for rec in res["models"]:
        for k in rec.get("slowest_kernels", []):
            lines.append(f"| {rec['model']} | {k['kernel']} | {k['ms']:.3f} | "
                         f"{k['schedule'][:110]} |")
    return lines


# -- the run -------------------------------------------------------------------------
def machine() -> dict:
    import importlib.metadata as metadata
    info = machine_info()
    from threadpoolctl import threadpool_info

    def version(package: str):      # (None where a benchmark's venv has no such package)
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None
    info.update({
        "transformers": version("transformers"), "onnx": version("onnx"),
        "onnxscript": version("onnxscript"),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "unset"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE", "unset"),
        "OMP_WAIT_POLICY_at_start": _OMP_WAIT_POLICY_AT_START or "unset",
        "OMP_WAIT_POLICY_in_run": os.environ.get("OMP_WAIT_POLICY", "unset"),
        "threadpools": [{k: i.get(k) for k in ("user_api", "internal_api", "num_threads",
                                               "version", "threading_layer",
                                               "architecture", "filepath")}
                        for i in threadpool_info()],
    })
    try:
        import torch
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def fmt(x, f="{:.2f}"):
    return "n/a" if x is None else f.format(x)


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


def main(argv=None) -> int:
    from workbench.testing import zoo
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(zoo.MODELS), choices=zoo.MODELS)
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
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="the models' dtype (bfloat16: converted as model.to(torch.bfloat16))")
    ap.add_argument("--attention-mask", action="store_true",
                    help="decoders exported and called with an all-ones attention_mask "
                         "passed by name, as model(**tokenizer(text)) does")
    ap.add_argument("--tag", default="",
                    help="appended to the result file names (--tag=-passive)")
    a = ap.parse_args(argv)
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
    stem = a.out / f"models-{date}{a.tag}"
    for name in a.models:
        log(f"{name}: build, export, import, plan, compile")
        try:
            rec, methods = prepare_model(name, tmp, blas, a.size, a.tune, a.dtype,
                                         a.one_by_one, a.attention_mask)
        except Exception as e:
            rec, methods = {"model": name, "error": first_line(e)}, {}
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


def model_timing_args(ap: argparse.ArgumentParser, models, repeats: int = 10) -> None:
    """The arguments of a benchmark timing models in alternation: which (``models``
    the choices and the default), its rounds and calls, the results folder."""
    ap.add_argument("--models", nargs="+", default=list(models), choices=models)
    ap.add_argument("--repeats", type=int, default=repeats, help="alternating rounds")
    ap.add_argument("--inner", type=int, default=5, help="timed calls per method per round")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")


def shapes_main(argv, doc: str, shapes, stem: str, markdown, run_shape, label: str,
                repeats: int = 10) -> int:
    """The command line of a benchmark of single ops, one per named shape (``--models``
    the shapes): each shape's record ``run_shape(name, folder, rounds, inner)``,
    written as ``<out>/<stem>-<date>``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    model_timing_args(ap, list(shapes), repeats=repeats)
    a = ap.parse_args(argv)
    return time_models(a, stem, markdown,
                       lambda name, tmp: run_shape(name, tmp, a.repeats, a.inner),
                       label=label)

def machine_line(res: dict) -> str:
    """The report's first words on where it ran: the CPU, its cores, the load."""
    mi = res["machine"]
    return (f"Machine: {mi['cpu']}, {mi['cores']} cores, load average at start "
            f"{', '.join(f'{x:.1f}' for x in res['load_average_at_start'])}")


def method_rows(res: dict, cells, label=lambda how, r: how) -> list[str]:
    """The rows of a table of methods against onnxruntime: per model, each workbench
    method's median latency and its ratio to onnxruntime's, then its own cells
    (``cells(r)``, a list of strings from the method's record ``r``; ``cells(None)``
    says how many), then onnxruntime's row; a model that failed is one row saying
    why. ``label`` names a method's row."""
    width = len(cells(None))
    rows = []
    for rec in res["models"]:
        if "error" in rec:
            rows.append(f"| {rec['model']} | failed: {rec['error']} |" + " |" * (2 + width))
            continue
        lat = rec["latency_ms"]
        ort = lat["onnxruntime"]
        for how, r in rec["methods"].items():
            ms = lat[f"workbench {how}"]
            rows.append(" | ".join([f"| {rec['model']}", label(how, r), f"{ms:.3f}",
                                    f"{ort / ms:.2f}x", *cells(r)]) + " |")
        rows.append(f"| {rec['model']} | onnxruntime | {ort:.3f} | 1.00x |" + " |" * width)
    return rows


def write_results(stem: Path, res: dict, markdown) -> None:
    """The run so far, after each model (an interrupted run keeps what it measured):
    ``<stem>.json`` (every sample, the machine and versions) and ``<stem>.md``
    (``markdown(res)``)."""
    res["machine"] = machine()      # (after the imports it reports on)
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    stem.with_suffix(".md").write_text(markdown(res))


def time_beside(calls: dict, rec: dict, onnx_path: Path, feeds: dict, module, args: tuple,
                rounds: int, inner: int) -> None:
    """``calls`` (label -> zero-argument call) timed in alternation with onnxruntime
    running ``onnx_path`` and torch eager running ``module(*args)``; each method's
    median ms into ``rec["latency_ms"]``, its samples into ``rec["samples_ms"]``."""
    import onnxruntime as ort
    import torch
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    calls = dict(calls, onnxruntime=lambda: sess.run(None, feeds))

    def eager():
        with torch.no_grad():
            return module(*args)
    calls["torch eager"] = eager
    samples = alternate(calls, rounds, inner)
    rec["latency_ms"] = {k: float(np.median(v) * 1e3) for k, v in samples.items()}
    rec["samples_ms"] = {k: [t * 1e3 for t in v] for k, v in samples.items()}


def eager_rows(res: dict, width: int) -> list[str]:
    """A table row per model for torch eager against onnxruntime (as ``method_rows``
    makes the workbench's), its ``width`` cells of its own empty."""
    rows = []
    for rec in res["models"]:
        eager = rec.get("latency_ms", {}).get("torch eager")
        if eager is not None:
            rows.append(f"| {rec['model']} | torch eager | {eager:.3f} | "
                        f"{rec['latency_ms']['onnxruntime'] / eager:.2f}x |" + " |" * width)
    return rows


def time_models(a, name: str, markdown, run, label: str = "", **extra) -> int:
    """A benchmark's run over the models of ``a`` (``model_timing_args``): each model's
    record ``run(name, folder)`` (``folder`` a scratch folder for exports) appended to
    the results (a model that fails is its one-line error, and the others still run),
    written after each (``write_results``) as ``<a.out>/<name>-<date>.json`` and
    ``.md``, the markdown printed at the end. ``extra``: more entries of the results."""
    date = _dt.date.today().isoformat()
    res = {"date": date, "rounds": a.repeats, "inner": a.inner, **extra,
           "load_average_at_start": list(os.getloadavg()), "models": []}
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"{name}-{date}"
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models:
            log(f"{label}{model}")
            try:
                res["models"].append(run(model, Path(tmp)))
            except Exception as e:          # a failure is a result, not a crash
                res["models"].append({"model": model, "error": first_line(e)})
            write_results(stem, res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
