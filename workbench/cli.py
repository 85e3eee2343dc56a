"""The command line: ``workbench optimize GRAPH... [--planner P] [--backend B] [--json F]``,
``workbench show GRAPH WHAT`` and ``workbench export GRAPH -o PATH [--measure]
[--sign-key FILE]``.

Prints, per graph, one row per planner step (the ``none`` baseline, then the chosen
planner): kernels, bytes moved, latency, speedup over ``none`` and the worst relative
error against the NumPy reference. Errors a user can cause print one line and exit 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import arguments
from .arguments import MAX_COUNT
from .version import __version__
from .errors import WorkbenchError, shown
from .fusion.planners import PLANNERS
from .runtime.backends import backend_names
from .codegen import lower_plan, render_kernel
from .device import GPUS
from .fusion.plan import MATMUL_PRECISIONS
from .frontends import load
from .fusion import run_planner
from .fusion.cost import CostModel
from .runtime import get_backend
from .session import Session

EXIT_USER_ERROR = 2


def _progress(done: int, total: int, name: str) -> None:
    if sys.stderr.isatty():
        print(f"\r  compiling {done}/{total} {name[:40]:<40}", end="" if done < total else "\n",
              file=sys.stderr, flush=True)


def _fmt_table(rows: list[dict], counters: bool = False) -> str:
    cols = [("graph", "graph", "{}"), ("step", "step", "{}"), ("planner", "planner", "{}"),
            ("kernels", "kernels", "{}"), ("bytes_moved_MB", "MB moved", "{:.1f}"),
            ("latency_ms", "latency ms", "{:.3f}"),
            # the step's time is a call: its kernels' own and the rest, the call overhead
            ("kernels_ms", "kernels ms", "{:.3f}"), ("overhead_ms", "overhead ms", "{:.3f}"),
            ("predicted_ms", "predicted ms", "{:.3f}"),
            ("speedup_vs_none", "speedup", "{:.2f}x"),
            ("max_rel_error", "kernel err", "{:.1e}"),
            ("end_to_end_error", "output err", "{:.1e}"), ("ok", "ok", "{}")]
    if counters:    # measured by the hardware counters, beside the counted bytes
        cols.insert(5, ("dram_MB", "DRAM MB", "{:.1f}"))
    cells = [[h for _, h, _ in cols]] + [[f.format(r[k]) for k, _, f in cols] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    line = lambda c: "  ".join(x.ljust(w) if i < 3 else x.rjust(w)
                               for i, (x, w) in enumerate(zip(c, widths)))
    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths)]
                     + [line(c) for c in cells[1:]])


def cmd_optimize(args) -> int:
    if args.ranks:      # p gloo ranks (docs/distributed.md)
        from .distributed.cli import optimize_ranks
        return optimize_ranks(args)
    rows = []
    for path in args.graph:
        s = Session(path, backend=args.backend, seed=args.seed,
                    progress=None if args.quiet else _progress,
                    matmul_precision=args.matmul_precision)
        if args.planner != "none":
            s.auto(args.planner)
        if args.tune:
            s.tune()
            if args.verbose:
                for r in s.tuning:
                    best = r.table[r.table.chosen].candidate.tolist()
                    print(f"  {s.graph.name}: tuned {r.group}: {', '.join(best) or 'rule'} "
                          f"({r.rule_ms:.4g} ms -> {r.best_ms:.4g} ms"
                          f"{', cached' if r.cached else ''})", file=sys.stderr)
        t = s.table(repeats=args.repeats, warmup=args.warmup, counters=args.counters)
        device = s.measure().device
        for st, r in zip(s.history, t.to_dict("records")):
            # the file's name: a JSON and an ONNX graph may share a graph name
            rows.append({"graph": Path(path).name, "device": device,
                         "backend": s.backend.name,
                         "matmul_precision": "tf32" if s.tf32 else "float32", **r})
            if args.counters:
                rows[-1]["dram_source"] = s.measured(st.plan).dram_source
        if not args.quiet:
            for d in s.step.decisions:
                if args.verbose:
                    print(f"  {s.graph.name}: {d}", file=sys.stderr)
    print(_fmt_table(rows, args.counters))
    if rows:
        print(f"backend {rows[0]['backend']} on {rows[0]['device']}"
              + (", float32 matmuls in TF32 (tensor cores; each checked within TF32's "
                 "bound)" if rows[0]["matmul_precision"] == "tf32" else ""))
        if s.backend.emulated:
            print("latency ms and speedup are the emulation's on this CPU, not the GPU's; "
                  "kernel err / output err / ok are the CUDA kernels' own")
    for why in dict.fromkeys(r["dram_source"] for r in rows if args.counters):
        if why != "ncu":
            print(f"DRAM MB not measured: {why.removeprefix('unavailable: ')}",
                  file=sys.stderr)
    if args.json:
        try:
            args.json.write_text(json.dumps(rows, indent=1, default=str))
        except OSError as e:
            raise WorkbenchError(f"cannot write --json {shown(args.json)} "
                                 f"({e.strerror or e}); the table is printed above") from None
    bad = [r for r in rows if not r["ok"]]
    if bad:
        print(f"error: {len(bad)} step(s) exceed the error tolerance against the NumPy "
              "reference; this is a workbench bug, please report it", file=sys.stderr)
        return 1
    return 0


def cmd_show(args) -> int:
    g = load(args.graph)
    if args.device == "cpu":
        device = get_backend("cpu").device      # this machine, measured once
    else:
        device = GPUS[args.device]
    # nothing runs here: cost-driven planners plan for the device named
    plan, log = run_planner(args.planner, g, model=CostModel.for_device(device),
                            matmul_precision=args.matmul_precision)
    if args.what == "graph":
        print(g)
    elif args.what == "plan":
        print(plan.describe())      # kernels, then their internal edges with schemes
        for d in log:
            print(f"  {d}")
    else:
        for k in lower_plan(plan):
            print(render_kernel(k, args.what))
    return 0


def cmd_export(args) -> int:
    from .artifact import load_key
    key = load_key(args.sign_key) if args.sign_key else None     # before the work
    s = Session(args.graph, backend=args.backend, seed=args.seed,
                progress=None if args.quiet else _progress,
                matmul_precision=args.matmul_precision)
    if args.planner != "none":
        s.auto(args.planner)
    out = s.export(args.output, measure=args.measure, force=args.force, sign_with=key)
    if not args.quiet:
        m = s.measure() if args.measure else None     # cached by the export
        timing = f", {m.latency_ms:.3f} ms on {m.device}" if m else ""
        print(f"wrote {out}: {len(s.plan.groups)} kernels (planner {args.planner}{timing})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="workbench", description="Fusion Workbench: plan "
                                "operator fusion, generate kernels, measure them.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("optimize", help="plan, generate, run and measure graphs")
    o.add_argument("graph", nargs="+", help=".json or .onnx graph files")
    o.add_argument("--planner", default="rules", choices=list(PLANNERS))
    o.add_argument("--backend", default="auto", choices=backend_names())
    o.add_argument("--json", metavar="FILE", type=_output_file,
                   help="also write the rows as JSON")
    o.add_argument("--repeats", type=_count(1), default=10,
                   help="timed runs per step (median; 1 to a million)")
    o.add_argument("--warmup", type=_count(0), default=2,
                   help="untimed runs before them (0 to a million)")
    o.add_argument("--seed", type=_count(0, 2 ** 32 - 1), default=0,
                   help="seed of the random inputs")
    o.add_argument("--counters", action="store_true",
                   help="also read each kernel's DRAM bytes from the GPU's hardware "
                        "counters (Nsight Compute, cupy backend): a DRAM MB column")
    o.add_argument("--tune", action="store_true",
                   help="then search each kernel's launch parameters (a GEMM kernel's "
                        "tiles and implementation too) by measurement (a 'tune' step; "
                        "cached per device and kernel)")
    _precision_option(o)
    o.add_argument("--ranks", type=_count(1, 1024), default=0,
                   help="run on this many gloo ranks (processes): distributed programs "
                        "(sample_graphs/distributed/) with their collectives")
    o.add_argument("--keep-sharded", default="", metavar="NAMES",
                   help="with --ranks: outputs the sharded work leaves sharded, comma "
                        "separated (optimizer state: m_out,v_out)")
    o.add_argument("--link", default="gloo", choices=["gloo", "nvlink", "infiniband"],
                   help="with --ranks: the link the planner prices collectives on")
    o.add_argument("-q", "--quiet", action="store_true")
    o.add_argument("-v", "--verbose", action="store_true",
                   help="print planner decisions and what tuning chose")
    o.set_defaults(fn=cmd_optimize)
    s = sub.add_parser("show", help="print a graph, its plan, or its kernels' source")
    s.add_argument("graph")
    s.add_argument("what", choices=["graph", "plan", "c", "cuda"])
    s.add_argument("--planner", default="rules", choices=list(PLANNERS))
    s.add_argument("--device", default="h100", choices=["h100", "a100", "cpu"],
                   help="the device a cost-driven planner (stitch) plans for "
                        "(default h100; cpu: this machine, measured once)")
    _precision_option(s)
    s.set_defaults(fn=cmd_show)
    e = sub.add_parser("export", help="write a graph's optimized plan as an artifact "
                       "(a directory, or a .zip) that wb.load_artifact runs")
    e.add_argument("graph", help=".json or .onnx graph file")
    e.add_argument("-o", "--output", required=True, metavar="PATH",
                   help="artifact path: a directory, or a file ending in .zip")
    e.add_argument("--planner", default="rules",
                   help="none, xla, rules, stitch, or any other registered planner "
                        "(default rules)")
    e.add_argument("--backend", default="auto", choices=backend_names())
    e.add_argument("--measure", action="store_true",
                   help="measure the plan first and record it in the manifest")
    e.add_argument("--force", action="store_true",
                   help="replace an existing artifact at PATH (never anything else)")
    e.add_argument("--sign-key", metavar="FILE",
                   help="sign the artifact with this key: a PEM Ed25519 private key, or a "
                        "file holding a shared secret (HMAC-SHA256)")
    e.add_argument("--seed", type=_count(0, 2 ** 32 - 1), default=0,
                   help="seed of the measurement's inputs")
    _precision_option(e)
    e.add_argument("-q", "--quiet", action="store_true")
    e.set_defaults(fn=cmd_export)
    return p


def _count(lo: int, hi: int = MAX_COUNT):
    """An argparse type: an integer in [lo, hi] (every count bounds a loop)."""
    def parse(text: str) -> int:
        try:
            v = int(text) if len(text) <= 20 else None
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text[:24]!r} is not an integer from {lo} "
                                             f"to {hi}")
        return v
    return parse


def _output_file(text: str) -> Path:
    """An argparse type: a file the job can write at its end, checked before it runs:
    its directory exists, and it is no directory, device or other special file."""
    try:
        p = arguments.path(text, "--json")
    except WorkbenchError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{shown(p)}: no directory {shown(parent)} to "
                                         "write it in")
    if p.exists() and not p.is_file():
        raise argparse.ArgumentTypeError(f"{shown(p)} is not a regular file (a directory "
                                         "or a device); give a file name")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{shown(p)}: not writable here")
    return p


def _precision_option(p) -> None:
    p.add_argument("--matmul-precision", default="float32", choices=MATMUL_PRECISIONS,
                   help="what float32 matmuls may round their operands to on a GPU: "
                        "float32 (exact, the default) or tf32 (tensor cores, 10 mantissa "
                        "bits; checked against NumPy within TF32's bound)")


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one ``error:`` line and exit 2, like every other user error."""

    def error(self, message: str):
        self.exit(EXIT_USER_ERROR, f"error: {shown(message)}; see {self.prog} --help\n")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except WorkbenchError as e:
        print(f"error: {shown(e)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except MemoryError:
        print("error: out of memory: the graph's values do not fit in this machine's "
              "memory; use smaller shapes", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader left (`workbench show ... | head`): as other command-line tools, stop
        # quietly; stdout is pointed at /dev/null so that closing it at exit cannot fail
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:   # a bug, not the input: one line, exit 1 (as a wrong result)
        if os.environ.get("WORKBENCH_TRACEBACK"):
            raise
        print(f"error: internal error ({type(e).__name__}: {shown(str(e))[:300]}); this is "
              "a workbench bug, please report it (WORKBENCH_TRACEBACK=1 shows the "
              "traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
