"""The benchmarks' shared harness: every script under ``benchmarks/`` imports what it
shares from here (``from harness import ...``; Python puts ``benchmarks/`` on the path
of a script run as ``python benchmarks/NAME.py``).

- paths: ``ROOT`` (the checkout), ``RESULTS`` (``benchmarks/results``, every script's
  default ``--out``); importing this module puts the checkout and ``sample_graphs/``
  on ``sys.path``, so a script runs this checkout's workbench without installing it;
- timing: ``time_fn`` (warm-up, then seconds per call), ``stats``, ``alternate``
  (methods in alternating blocks, each after a ``SETTLE_S`` pause so a thread pool
  still spinning from the previous method does not land on the next), ``quiet_ms``;
- the machine: ``machine_info`` (CPU, cores, OS, Python/NumPy/onnxruntime/torch
  versions, compiler and flags, commit, load), ``machine`` (plus transformers, onnx,
  BLAS libraries and threads, OpenMP settings), ``machine_line``;
- checking: ``rel_error`` (``max |y - r| / max |r|`` over every output);
- results: ``write_results`` (``<stem>.json`` and ``<stem>.md`` after each model, so
  an interrupted run keeps what it measured), ``method_rows``, ``eager_rows``,
  ``slowest_kernels``, ``slowest_rows``;
- command lines: ``model_timing_args``, ``time_models``, ``shapes_main``,
  ``time_beside`` (beside onnxruntime and torch eager), ``time_beside_onnxruntime``,
  ``one_op_case``;
- a plan's fused attentions taken another way (``ATTENTION_FORMS``,
  ``attention_variants``).

Nothing here imports the workbench, torch or onnxruntime at import time: scripts that
choose OpenMP settings or import order (``omp_wait_policy.py``) still can.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# read before anything imports the workbench (whose C toolchain module sets a default)
_OMP_WAIT_POLICY_AT_START = os.environ.get("OMP_WAIT_POLICY")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
for _p in (ROOT, ROOT / "sample_graphs"):     # this checkout's workbench; the samples
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return f"{type(e).__name__}: {text.splitlines()[0][:400]}"


# -- timing ------------------------------------------------------------------------
def time_fn(fn, warmup: int, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of fn() after `warmup` calls (at least one)."""
    for _ in range(max(1, warmup)):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def stats(samples: list[float]) -> dict:
    a = np.asarray(samples) * 1e3
    return {"latency_ms": float(np.median(a)), "latency_min_ms": float(a.min()),
            "latency_max_ms": float(a.max()),
            "spread_pct": float((a.max() - a.min()) / np.median(a) * 100) if a.size else None}


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def workbench_samples(prog, inputs, repeats: int) -> list[float]:
    """Extra samples of a compiled program through its public ``time`` (one warm run,
    then one timed run, per sample) so the spread can be reported next to the median
    ``Session.measure`` gives."""
    return [prog.time(inputs, 1, 1)[1] for _ in range(repeats)]


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


# -- checking ----------------------------------------------------------------------
def rel_error(got: dict, want: dict) -> float:
    """max |y - r| / max |r| over every output (the model-zoo test's measure:
    ``tolerance.relative_to_largest``; imported here: see the module docstring)."""
    from workbench.tolerance import relative_to_largest
    return max((relative_to_largest(got[k], r) for k, r in want.items()), default=0.0)


# -- the machine -------------------------------------------------------------------
def git_commit() -> str | None:
    """HEAD's commit: $WORKBENCH_COMMIT (a copy of the tree run elsewhere, without
    its .git), else read from .git (no git process), else `git rev-parse HEAD`."""
    if os.environ.get("WORKBENCH_COMMIT"):
        return os.environ["WORKBENCH_COMMIT"]
    try:
        gitdir = ROOT / ".git"
        if gitdir.is_file():  # a worktree: "gitdir: PATH"
            gitdir = Path(gitdir.read_text().split(":", 1)[1].strip())
        head = (gitdir / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(":", 1)[1].strip()
        for base in (gitdir, Path((gitdir / "commondir").read_text().strip()).resolve()
                     if (gitdir / "commondir").is_file() else gitdir):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split()[0]
    except OSError:
        pass
    if shutil.which("git"):
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                           text=True)
        if r.returncode == 0:
            return r.stdout.strip()
    return None


def machine_info() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__,
            "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "git_commit": git_commit(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "unset (OpenMP default)")}
    try:
        info["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    try:
        import onnxruntime
        info["onnxruntime"] = onnxruntime.__version__
        info["onnxruntime_intra_op_threads"] = os.cpu_count()
    except ImportError:
        info["onnxruntime"] = None
    try:
        import torch
        info["torch"] = torch.__version__
    except ImportError:
        info["torch"] = None
    try:
        from workbench.runtime.cc import cflags, find_compiler
        info["compiler"] = find_compiler()[1]
        info["cflags"] = " ".join(cflags())
    except Exception as e:
        info["compiler"] = f"unavailable: {e}"
    import workbench
    info["workbench"] = getattr(workbench, "__version__", None)
    return info


def machine() -> dict:
    """``machine_info`` and what a model benchmark's numbers also depend on: the
    transformers/onnx/onnxscript versions, every BLAS and OpenMP library loaded (with
    its threads), the OpenBLAS and OpenMP settings at start and in the run."""
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


def machine_line(res: dict) -> str:
    """The report's first words on where it ran: the CPU, its cores, the load."""
    mi = res["machine"]
    return (f"Machine: {mi['cpu']}, {mi['cores']} cores, load average at start "
            f"{', '.join(f'{x:.1f}' for x in res['load_average_at_start'])}")


# -- results -----------------------------------------------------------------------
def fmt(x, f="{:.2f}"):
    return "n/a" if x is None else f.format(x)


def write_results(stem: Path, res: dict, markdown) -> None:
    """The run so far, after each model (an interrupted run keeps what it measured):
    ``<stem>.json`` (every sample, the machine and versions) and ``<stem>.md``
    (``markdown(res)``)."""
    res["machine"] = machine()      # (after the imports it reports on)
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str))
    stem.with_suffix(".md").write_text(markdown(res))


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


# -- command lines and runs --------------------------------------------------------
def model_timing_args(ap: argparse.ArgumentParser, models, repeats: int = 10) -> None:
    """The arguments of a benchmark timing models in alternation: which (``models``
    the choices and the default), its rounds and calls, the results folder."""
    ap.add_argument("--models", nargs="+", default=list(models), choices=models)
    ap.add_argument("--repeats", type=int, default=repeats, help="alternating rounds")
    ap.add_argument("--inner", type=int, default=5, help="timed calls per method per round")
    ap.add_argument("--out", type=Path, default=RESULTS)


def one_model_run(argv, doc: str, rounds: int) -> tuple[argparse.Namespace, dict]:
    """The arguments of a benchmark that studies one zoo model's calls (which model and
    size, its alternating rounds and calls, a tag and notes for the report, the results
    folder), and the record its results start from."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--size", default="small")
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--inner", type=int, default=5)
    ap.add_argument("--tag", default="")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    return a, {"date": _dt.date.today().isoformat(), "model": a.model, "size": a.size,
               "rounds": a.rounds, "inner": a.inner, "notes": a.note,
               "load_average_at_start": list(os.getloadavg())}


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


# -- a plan's fused attentions taken another way -----------------------------------
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


def spawn_ranks(worker, p: int, cfg, timeout: float = 3600) -> list[dict]:
    """Run ``worker(rank, p, store, cfg, results)`` in p spawned processes (gloo ranks
    meeting at a file store) and return each rank's dict, rank order; a rank's
    ``{"error": ...}`` raises; every process is joined (terminated after 30 s)."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    store = os.path.join(tempfile.mkdtemp(prefix="wb-bench-"), "store")
    procs = [ctx.Process(target=worker, args=(r, p, store, cfg, q)) for r in range(p)]
    for pr in procs:
        pr.start()
    try:
        got = dict(q.get(timeout=timeout) for _ in range(p))
    finally:
        for pr in procs:
            pr.join(30)
            if pr.is_alive():
                pr.terminate()
                pr.join()
    bad = [g["error"] for g in got.values() if "error" in g]
    if bad:
        raise RuntimeError(bad[0])
    return [got[r] for r in range(p)]


def slowest_rank_steps(per_rank: list[dict]) -> dict:
    """Each method's step as its slowest rank saw it, per round (a step ends when the
    last rank ends), summarized: the median of each timed part present (``step_s``,
    ``compute_s``, ``comm_s``, ``overlap_s`` -> ``*_ms``) and the fastest step
    (``min_step_ms``). ``per_rank``: each rank's ``{"samples": {method: [round...]}}``."""
    out = {}
    for k in per_rank[0]["samples"]:
        rounds = len(per_rank[0]["samples"][k])
        slowest = [max((r["samples"][k][i] for r in per_rank), key=lambda x: x["step_s"])
                   for i in range(rounds)]
        out[k] = {part.replace("_s", "_ms"): float(np.median([x[part] for x in slowest])) * 1e3
                  for part in ("step_s", "compute_s", "comm_s", "overlap_s")
                  if part in slowest[0]}
        out[k]["min_step_ms"] = min(x["step_s"] for x in slowest) * 1e3
    return out


def render_again(path: str, model, markdown) -> int:
    """``--render JSON``: fit ``model(res)`` and write the run's JSON and report again
    from what it measured (nothing measured again)."""
    res = json.loads(Path(path).read_text())
    model(res)
    Path(path).write_text(json.dumps(res, indent=1, default=str))
    Path(path).with_suffix(".md").write_text(markdown(res))
    print(markdown(res))
    return 0
