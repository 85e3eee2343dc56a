#!/usr/bin/env python
"""Start-up (issue 44, item 5): how long a user waits for ``workbench.load`` of an ONNX
model and for the ``stitch`` planner's plan of it, per model and export form.

    .venv/bin/python benchmarks/startup.py                        # this checkout
    .venv/bin/python benchmarks/startup.py --against /tmp/base    # beside another one
    git worktree add /tmp/base main                               # (one way to get it)

Models (random weights, no download), each exported both ways, ``torch.onnx.export``
with ``dynamo=True`` and with the legacy exporter (``dynamo=False``):

- ``bert_base``: transformers' ``BertConfig()`` defaults (12 layers, 768 wide, 440 MB
  of weights), one sequence of 128 tokens with its attention mask; the legacy export
  goes through a wrapper taking ``(input_ids, attention_mask)`` by name (transformers
  5's ``BertModel.forward`` refuses them positionally under the legacy exporter);
- ``bart``, ``marian``: 2 encoder and 2 decoder layers, 256 wide, 4 heads, FFN 1024,
  vocabulary 1000, batch 2 x 128 tokens (``input_ids, attention_mask,
  decoder_input_ids``);
- ``clip``: text and vision towers of 2 layers, 256 wide, 64-pixel images in 8-pixel
  patches, batch 2 x 128 tokens (``input_ids, pixel_values, attention_mask``).

Each checkout is measured in child processes (a fresh interpreter importing that
checkout's workbench), checkouts alternating round by round. A child loads the model
once untimed (importing onnx and NumPy, first use of the op registry; the import
compiles no kernel, so the kernel cache plays no part), then ``--repeats`` times: an
idle pause, ``workbench.load`` (timed), an idle pause, ``run_planner("stitch", g)``
(timed; the planner's default cost model, the CPU's). Reported: medians over every
round's repeats, and a hash of the plan's text and decisions, so the run shows whether
the checkouts plan alike. The children run with ``PYTHONHASHSEED=0``: an older
checkout's stitch search broke ties between equal gains in set order, so its plan
depended on the hash seed (a small BART's dynamo export: 60 kernels under one seed, 62
under another); it breaks them by graph order since (docs/fusion.md).

Writes ``benchmarks/results/startup-<date>[-TAG].{json,md}``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import RESULTS, ROOT, log, machine_line, write_results

FORMS = ("dynamo", "legacy")
MODELS = ("bert_base", "bart", "marian", "clip")
B, S, V, H, HEADS, L, F, IMG = 2, 128, 1000, 256, 4, 2, 1024, 64
PAUSE_S = 0.2


# -- the models -----------------------------------------------------------------------
def _build(name: str):
    """(module, positional inputs, their names) of one model, seeded."""
    import torch
    import transformers as T
    torch.manual_seed(0)

    def cfg(c):
        c._attn_implementation = "eager"
        return c

    def ids():
        return torch.randint(0, V, (B, S))

    def mask():
        m = torch.ones(B, S, dtype=torch.int64)
        m[1, S - 5:] = 0                  # padding: the mask matters
        return m

    enc_dec = dict(vocab_size=V, d_model=H, encoder_layers=L, decoder_layers=L,
                   encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                   encoder_ffn_dim=F, decoder_ffn_dim=F, use_cache=False)
    text = ("input_ids", "attention_mask", "decoder_input_ids")
    if name == "bert_base":
        return (T.BertModel(cfg(T.BertConfig())).eval(),
                (torch.randint(0, 30522, (1, 128)), torch.ones(1, 128, dtype=torch.int64)),
                ("input_ids", "attention_mask"))
    if name == "bart":
        return (T.BartModel(cfg(T.BartConfig(max_position_embeddings=S + 2, **enc_dec)))
                .eval(), (ids(), mask(), ids()), text)
    if name == "marian":
        return (T.MarianMTModel(cfg(T.MarianConfig(
            decoder_vocab_size=V, pad_token_id=V - 1, decoder_start_token_id=V - 1,
            max_position_embeddings=S, **enc_dec))).eval(), (ids(), mask(), ids()), text)
    if name == "clip":
        tower = dict(hidden_size=H, intermediate_size=F, num_hidden_layers=L,
                     num_attention_heads=HEADS)
        return (T.CLIPModel(cfg(T.CLIPConfig(
            text_config=dict(vocab_size=V, max_position_embeddings=S, **tower),
            vision_config=dict(image_size=IMG, patch_size=8, **tower),
            projection_dim=128))).eval(),
            (ids(), torch.randn(B, 3, IMG, IMG), mask()),
            ("input_ids", "pixel_values", "attention_mask"))
    raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


def export(name: str, form: str, path: Path) -> None:
    import torch
    from workbench.testing.zoo import _quiet
    with _quiet():
        module, inputs, names = _build(name)
        with torch.no_grad():
            out = module(*inputs)
    outs = [k for k, v in out.items() if isinstance(v, torch.Tensor)]
    if name == "bert_base" and form == "legacy":
        module = _ByName(module)
        outs = ["last_hidden_state", "pooler_output"]
    with _quiet(), torch.no_grad():
        torch.onnx.export(module, inputs, str(path), input_names=list(names),
                          output_names=outs, external_data=False, dynamo=form == "dynamo")


def _ByName(module):
    import torch

    class ByName(torch.nn.Module):
        """BERT called with its inputs by name (see the module docstring)."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            o = self.m(input_ids=input_ids, attention_mask=attention_mask)
            return o.last_hidden_state, o.pooler_output
    return ByName(module)


# -- one checkout, in a child process ------------------------------------------------------
def child(root: str, path: str, repeats: int) -> dict:
    """Timed loads and stitch plans of one model by the checkout at ``root``."""
    sys.path.insert(0, root)
    import workbench as wb
    from workbench.fusion import run_planner
    if not Path(wb.__file__).resolve().is_relative_to(Path(root).resolve()):
        raise SystemExit(f"imported {wb.__file__}, not the checkout {root}")
    g = wb.load(path)                       # untimed: first imports, the op registry
    loads, plans, load_cpu, plan_cpu = [], [], [], []
    for _ in range(repeats):
        time.sleep(PAUSE_S)
        t0, c0 = time.perf_counter(), time.process_time()
        g = wb.load(path)
        loads.append(time.perf_counter() - t0)
        load_cpu.append(time.process_time() - c0)
        time.sleep(PAUSE_S)
        t0, c0 = time.perf_counter(), time.process_time()
        plan, decisions = run_planner("stitch", g)
        plans.append(time.perf_counter() - t0)
        plan_cpu.append(time.process_time() - c0)
    text = plan.describe() + "\n" + "\n".join(map(str, decisions))
    return {"load_s": loads, "plan_s": plans, "load_cpu_s": load_cpu, "plan_cpu_s": plan_cpu,
            "nodes": len(g.nodes),
            "kernels": len(plan.groups),
            "plan_sha": hashlib.sha256(text.encode()).hexdigest()[:16]}


def run_child(root: Path, path: Path, repeats: int) -> dict:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(root))
    p = subprocess.run([sys.executable, __file__, "--child", str(path), "--root", str(root),
                        "--repeats", str(repeats)], env=env, capture_output=True, text=True)
    if p.returncode:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(p.stdout.strip().splitlines()[-1])


# -- the run ---------------------------------------------------------------------------
def measure(a) -> dict:
    checkouts = {"this": ROOT} | ({"against": Path(a.against).resolve()} if a.against else {})
    res = {"date": _dt.date.today().isoformat(), "repeats": a.repeats, "rounds": a.rounds,
           "load_average_at_start": list(os.getloadavg()),
           "checkouts": {k: str(v) for k, v in checkouts.items()},
           "against_name": a.against_name or a.against, "models": []}
    a.models_dir.mkdir(parents=True, exist_ok=True)
    for name in a.models:
        for form in FORMS:
            path = a.models_dir / f"{name}-{form}.onnx"
            rec = {"model": name, "form": form}
            if not path.exists():
                log(f"exporting {name} ({form})")
                try:
                    export(name, form, path)
                except Exception as e:      # noqa: BLE001 -- the exporter's failure, reported
                    rec["error"] = f"export: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                    res["models"].append(rec)
                    continue
            runs: dict[str, list[dict]] = {k: [] for k in checkouts}
            for _ in range(a.rounds):
                for k, root in checkouts.items():
                    runs[k].append(run_child(root, path, a.repeats))
            for k, rs in runs.items():
                bad = [r["error"] for r in rs if "error" in r]
                if bad:
                    rec[k] = {"error": bad[0]}
                    continue
                loads = [x for r in rs for x in r["load_s"]]
                plans = [x for r in rs for x in r["plan_s"]]
                rec[k] = {"load_s": statistics.median(loads), "plan_s": statistics.median(plans),
                          "load_cpu_s": statistics.median(x for r in rs for x in r["load_cpu_s"]),
                          "plan_cpu_s": statistics.median(x for r in rs for x in r["plan_cpu_s"]),
                          "load_samples": loads, "plan_samples": plans,
                          **{f: rs[0][f] for f in ("nodes", "kernels", "plan_sha")},
                          "same_plan_every_round": len({r["plan_sha"] for r in rs}) == 1}
            log(f"{name} {form}: " + ", ".join(
                f"{k} load {r['load_s']:.2f} s plan {r['plan_s']:.2f} s" if "load_s" in r
                else f"{k} {r['error']}" for k, r in ((k, rec[k]) for k in checkouts)))
            res["models"].append(rec)
            write_results(a.stem, res, markdown)
    return res


def markdown(res: dict) -> str:
    against = "against" in res["checkouts"]
    out = [f"# Start-up: ONNX import and `stitch` planning ({res['date']})", "",
           machine_line(res), "",
           f"Medians of {res['rounds']} rounds x {res['repeats']} repeats, each timed call "
           f"after a {PAUSE_S} s idle pause, checkouts alternating round by round in fresh "
           "processes (`PYTHONHASHSEED=0`); import = `workbench.load(path)` after one "
           "untimed load in the process; plan = `run_planner(\"stitch\", g)` (CPU cost "
           "model); CPU s: the child's process time over the same calls (less "
           "sensitive to other jobs on the machine than wall time). `this`: " + res["checkouts"]["this"] +
           (f"; `before`: {res['against_name']}" if against else ""), ""]
    head = ("| model | export | nodes | kernels | import s | plan s | import + plan s | "
            "import CPU s | plan CPU s |")
    sep = "|---|---|---|---|---|---|---|---|---|"
    if against:
        head += " before: import s | plan s | import x | plan x | same plan |"
        sep += "---|---|---|---|---|"
    out += [head, sep]
    for rec in res["models"]:
        me = rec.get("this", {})
        if "error" in rec or "error" in me:
            out.append(f"| {rec['model']} | {rec['form']} | failed: "
                       f"{rec.get('error') or me['error']} |")
            continue
        row = (f"| {rec['model']} | {rec['form']} | {me['nodes']} | {me['kernels']} | "
               f"{me['load_s']:.2f} | {me['plan_s']:.2f} | {me['load_s'] + me['plan_s']:.2f} | "
               f"{me['load_cpu_s']:.2f} | {me['plan_cpu_s']:.2f} |")
        if against:
            b = rec["against"]
            if "error" in b:
                row += f" failed: {b['error']} | | | | |"
            else:
                row += (f" {b['load_s']:.2f} | {b['plan_s']:.2f} | "
                        f"{b['load_s'] / me['load_s']:.1f}x | {b['plan_s'] / me['plan_s']:.1f}x | "
                        f"{'yes' if b['plan_sha'] == me['plan_sha'] else 'NO'} |")
        out.append(row)
    if against:
        out += ["", "`x`: the before checkout's time / this one's (above 1: this one is "
                "faster); same plan: the plan's text and decisions hash alike."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--models-dir", type=Path, default=Path("/tmp/workbench-startup-models"),
                    help="where the exported .onnx files are kept (exported when missing)")
    ap.add_argument("--against", help="another checkout to measure beside this one")
    ap.add_argument("--against-name", help="what to call it in the results (a commit)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.root, a.child, a.repeats)))
        return 0
    a.stem = a.out / f"startup-{_dt.date.today().isoformat()}{'-' + a.tag if a.tag else ''}"
    measure(a)
    log(f"wrote {a.stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
