"""``python -m workbench.testing.fuzz``: cases from a seed for a time budget, a fresh
child process per batch of seeds (a kernel that kills its process fails its seed), a
markdown report."""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

from ...runtime.cc import cpu_model
from ...version import __version__
from . import __doc__ as FUZZ_DOC
from .cases import Report
from .graphs import FAMILIES
from .processes import fuzz_in_processes

def _markdown(rep: Report, args) -> str:
    lines = [f"# Differential fuzz run, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "",
             f"- machine: {cpu_model()} ({os.cpu_count()} threads), {platform.platform()}; "
             f"Python {sys.version.split()[0]}, NumPy {np.__version__}, "
             f"workbench {__version__}",
             f"- command: `python -m workbench.testing.fuzz --seconds {args.seconds} --start "
             f"{args.start} --edits {args.edits} --max-ops {args.max_ops}"
             f"{' --cuda' if args.cuda else ''}"
             f"{f' --backend {args.backend}' if args.backend != 'cpu' else ''}"
             f"{' --matmul-precision tf32' if args.matmul_precision == 'tf32' else ''}"
             f"{f' --family {args.family}' if args.family != 'mixed' else ''}`",
             f"- {rep.cases} graphs ({rep.ops} ops), {rep.plans} plans compiled, run and "
             f"checked kernel by kernel, in {rep.seconds:.0f} s",
             f"- failures: {len(rep.failures)}", ""]
    for f in rep.failures:
        lines.append(f"  - seed {f.seed}, after `{f.action}`: {f.message}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.testing.fuzz", description=FUZZ_DOC.split("\n")[0])
    p.add_argument("--seconds", type=float, default=300.0, help="time budget (default 300)")
    p.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--edits", type=int, default=4, help="random plan edits per graph")
    p.add_argument("--max-ops", type=int, default=10, help="ops per graph, at most")
    p.add_argument("--cuda", action="store_true",
                   help="also compile every plan's CUDA kernels with NVRTC (no GPU needed)")
    p.add_argument("--backend", default="cpu", choices=["cpu", "cuda-emu"],
                   help="where the plans run: cpu (default), or cuda-emu: the GPU's plans, "
                        "their CUDA kernels run in the CUDA emulator (no GPU needed)")
    p.add_argument("--matmul-precision", default="float32", choices=["float32", "tf32"],
                   help="the sessions' matmul precision (tf32: the GPU's tensor-core "
                        "kernels, with --backend cuda-emu)")
    p.add_argument("--family", default="mixed", choices=FAMILIES,
                   help="the graphs drawn: mixed (default: any dtypes and ops, boundary "
                        "values), blocks (transformer blocks: GEMMs with epilogues, "
                        "attention, norms, masks), convs (convolutional networks: "
                        "convolutions of every form, poolings, BatchNorm, heads) or rows "
                        "(softmax, norms, logsumexp... at every row mapping's lengths)")
    p.add_argument("--out", help="write a markdown report here")
    a = p.parse_args(argv)

    rep = fuzz_in_processes(a.start, a.seconds, a.edits, a.max_ops, a.cuda,
                            backend=a.backend, precision=a.matmul_precision,
                            family=a.family)
    text = _markdown(rep, a)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
