"""The trust-boundary campaign, run again on fresh seeds: junk API calls to every face,
attacks on a signed artifact, tiny ONNX files that ask folding for gigabytes or
minutes, and random torch modules through from_torch. Writes a markdown report (the
suite runs a bounded sample of each: tests/test_boundaries.py,
tests/artifact/test_artifact_attacks.py, tests/frontends/test_import_budget.py,
tests/test_fuzz_modules.py).

    python scripts/trust_campaign.py --start 1000 --out benchmarks/results/trust-DATE.md
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# a tiny file each: (name, python that builds the model and prints nothing)
BLOWUPS = {
    "ConstantOfShape([2^29])": "nodes=[h.make_node('ConstantOfShape',['s'],['y'])];"
                               "inits={'s':np.array([2**29],np.int64)};r=1",
    "Range(0, 2^30)": "nodes=[h.make_node('Range',['a','b','d'],['y'])];"
                      "inits={'a':np.array(0,np.int64),'b':np.array(2**30,np.int64),"
                      "'d':np.array(1,np.int64)};r=1",
    "Tile to 2^27": "nodes=[h.make_node('Tile',['x','t'],['y'])];"
                    "inits={'x':np.ones((4,4),np.float32),'t':np.array([4096,2048],np.int64)};r=2",
    "Pad to 2^27": "nodes=[h.make_node('Pad',['x','p'],['y'])];"
                   "inits={'x':np.ones((4,4),np.float32),'p':np.array([0,0,16384,8192],np.int64)};r=2",
    "OneHot depth 2^33": "nodes=[h.make_node('OneHot',['i','d','v'],['y'])];"
                         "inits={'i':np.array([1,2],np.int64),'d':np.array([2**33],np.int64),"
                         "'v':np.array([0.0,1.0],np.float32)};r=2",
    "GridSample 512x512 on constants": "nodes=[h.make_node('ConstantOfShape',['s1'],['x']),"
                                       "h.make_node('ConstantOfShape',['s2'],['g']),"
                                       "h.make_node('GridSample',['x','g'],['y'])];"
                                       "inits={'s1':np.array([1,1,512,512],np.int64),"
                                       "'s2':np.array([1,512,512,2],np.int64)};r=4",
}
CHILD = """
import resource, sys, time, numpy as np
from onnx import helper as h, numpy_helper, TensorProto
{build}
g = h.make_graph(nodes, 'b', [], [h.make_tensor_value_info('y', TensorProto.FLOAT,
                 ['d%d' % k for k in range(r)])],
                 [numpy_helper.from_array(v, k) for k, v in inits.items()])
m = h.make_model(g, opset_imports=[h.make_opsetid('', 17)])
size = len(m.SerializeToString())
from workbench.frontends import load_onnx
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
try:
    load_onnx(m); what = 'imported (past the budget: ops)'
except Exception as e:
    what = type(e).__name__ + ': ' + str(e).splitlines()[0][:160]
dt = time.perf_counter() - t
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(f'{{size}}\\t{{dt:.3f}}\\t{{grown / 1024:.0f}}\\t{{what}}')
"""


def blowups() -> list[str]:
    rows = ["| file | bytes | seconds | MiB grown | what happened |", "|---|---|---|---|---|"]
    for name, build in BLOWUPS.items():
        r = subprocess.run([sys.executable, "-c", CHILD.format(build=build)],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
        out = (r.stdout.strip().splitlines() or [f"?\t?\t?\tchild failed: {r.stderr[-200:]}"])
        size, secs, mib, what = out[-1].split("\t", 3)
        rows.append(f"| {name} | {size} | {secs} | {mib} | {what.replace('|', '/')} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=int, default=1000, help="first seed")
    ap.add_argument("--api-seeds", type=int, default=40)
    ap.add_argument("--attack-seeds", type=int, default=200)
    ap.add_argument("--module-seeds", type=int, default=60)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    import numpy as np

    import workbench as wb
    from workbench.artifact import HmacKey
    from workbench.testing import fuzz
    from workbench.testing.fuzz.api import call_failures
    from workbench.testing.fuzz.artifacts import attack_failures
    from workbench.ui.app import WorkbenchApp

    lines = [f"# Trust-boundary campaign, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "", f"- machine: {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} threads, Python {sys.version.split()[0]}, NumPy "
             f"{np.__version__}, workbench {wb.__version__}",
             f"- command: `python scripts/trust_campaign.py --start {a.start} --api-seeds "
             f"{a.api_seeds} --attack-seeds {a.attack_seeds} --module-seeds "
             f"{a.module_seeds}`", ""]
    sample = str(ROOT / "sample_graphs" / "layernorm.json")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["WORKBENCH_CACHE"] = str(tmp / "cache")
        old = os.getcwd()
        os.chdir(tmp)
        t = time.perf_counter()
        s = wb.Session(sample, backend="cpu")
        s.auto("rules")
        art = wb.load_artifact(s.export(tmp / "art"), backend="cpu")
        app = WorkbenchApp(wb.Session(sample, backend="cpu"))
        fails = []
        for seed in range(a.start, a.start + a.api_seeds):
            fails += call_failures(seed, 10, wb.Session(sample, backend="cpu"), app, art)
        lines += [f"## Junk API calls: {a.api_seeds} seeds x 10 rounds x every face",
                  f"- {len(fails)} calls raised something other than one WorkbenchError "
                  f"line or ran past 60 s ({time.perf_counter() - t:.0f} s)"]
        lines += [f"  - {f.target}.{f.call}: {f.error}" for f in fails[:20]]
        key = HmacKey.generate()
        b = wb.GraphBuilder("attacked")
        x = b.input("x", (8, 40))
        b.output(b.softmax(b.exp(x) * 0.5), "y")
        s2 = wb.Session(b.build(), backend="cpu")
        s2.auto("rules")
        signed = s2.export(tmp / "signed", sign_with=key)
        b2 = wb.GraphBuilder("another")
        b2.output(b2.tanh(b2.input("x", (8, 40))), "y")
        other = wb.Session(b2.build(), backend="cpu").export(tmp / "other", sign_with=key)
        os.environ["WORKBENCH_CACHE"] = str(tmp / "attack-cache")
        (tmp / "work").mkdir()
        t = time.perf_counter()
        afails = attack_failures(signed, other, key, range(a.start, a.start + a.attack_seeds),
                                 tmp / "work", tmp / "attack-cache" / "cpu")
        lines += ["", f"## Attacks on a signed artifact: {a.attack_seeds} changes",
                  f"- {len(afails)} got through (loaded, a stray exception, ran code or "
                  f"compiled) ({time.perf_counter() - t:.0f} s)"]
        lines += [f"  - seed {f.seed} {f.change}: {f.error}" for f in afails[:20]]
        os.chdir(old)
    lines += ["", "## Tiny ONNX files that ask folding for too much (each in a fresh "
              "process; max RSS growth)"] + blowups()
    t = time.perf_counter()
    rep = fuzz.fuzz(range(a.start, a.start + a.module_seeds), family="modules")
    lines += ["", f"## Random torch modules through from_torch: {rep.cases} modules, "
              f"{rep.plans} plans checked ({time.perf_counter() - t:.0f} s)",
              f"- failures: {len(rep.failures)}"]
    lines += [f"  - seed {f.seed} after {f.action}: {f.message}" for f in rep.failures[:20]]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)
    return 1 if fails or afails or rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
