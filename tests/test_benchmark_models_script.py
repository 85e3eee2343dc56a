"""benchmarks/models.py as its user runs it, at the zoo's tiny size: a real subprocess
that writes the JSON and markdown results, with import/plan/compile seconds and
latencies of the workbench, onnxruntime and torch eager, or the import error line of a
model that does not import."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parent.parent
# slow: the benchmark in a subprocess, exporting zoo models with torch (and tuning); the
# forms of a fused attention at 320 and 1024 keys, measured
# (xdist group torch_scripts: these subprocesses, each holding torch and a model, run one
# at a time -- beside the zoo's worker (group model_zoo), not behind it on the same one)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torch_scripts")]


def test_models_benchmark_tiny(tmp_path):
    out, cache = tmp_path / "results", tmp_path / "cache"
    # --warm-cache: the script keeps this $WORKBENCH_CACHE (empty: compiles are as cold
    # as in its own fresh one), so the tuning cache it leaves there can be read below
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "models.py"), "--size", "tiny",
         "--models", "vit", "resnet", "--repeats", "1", "--inner", "1", "--blas", "off",
         "1", "--tune", "--one-by-one", "--warm-cache", "--out", str(out), "--tag=-test"],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env=dict(os.environ, WORKBENCH_CACHE=str(cache)))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(out.glob("models-*-test.json")).read_text())
    md = next(out.glob("models-*-test.md")).read_text()
    assert res["size"] == "tiny" and res["machine"]["threadpools"]
    assert [m["model"] for m in res["models"]] == ["vit", "resnet"]
    for m in res["models"]:
        assert m["latency_ms"]["onnxruntime"] > 0 and m["latency_ms"]["torch eager"] > 0
        imported = [k for k in ("import_onnx", "import_from_torch") if "seconds" in m[k]]
        for k in ("import_onnx", "import_from_torch"):
            assert "seconds" in m[k] or m[k]["error"].startswith(("UnsupportedOpError",
                                                                   "GraphError"))
        if imported:
            for planner in ("rules", "stitch"):
                p = m["planners"][planner]
                assert p["plan_s"] >= 0 and p["compile_s"] > 0 and p["kernels"] > 0
                assert p["error_vs_torch"] < 1e-4
                for blas in ("off", "1"):
                    assert m["latency_ms"][f"workbench {planner} blas={blas}"] > 0
            p = m["planners"]["stitch"]       # --tune: the stitch plan tuned in the run
            assert p["tune_s"] > 0 and p["tuned_error_vs_torch"] < 1e-4
            assert m["latency_ms"]["workbench stitch tuned"] > 0
            # --one-by-one: the stitch program's kernels launched from Python
            assert m["latency_ms"]["workbench stitch, kernel by kernel"] > 0
            assert all(t["best_ms"] < t["rule_ms"] for t in p["tuned"])
        assert f"| {m['model']} |" in md
    assert "## Tuning the stitch plan" in md
    # the rows of retuned kernels ("tuned") are the script's pick from Session.tune's
    # results; Session.tune saves every kernel it searched, retuned or not, in the
    # tuning cache. The script's rows must be exactly the searched kernels whose best
    # time beat the rule's -- none dropped, none added, their times and launches
    # as searched (a check of the rows alone cannot see a kernel the script left out)
    searched = [e for f in (cache / "tuning").glob("*.json")
                for e in json.loads(f.read_text()).values()]
    assert searched, "Session.tune saved no kernel"

    def row(rule_ms, best_ms, launch):
        return rule_ms, best_ms, sorted((k, v) for k, v in launch)
    retuned = sorted(row(e["rule_ms"], e["best_ms"], e["launch"]) for e in searched
                     if e["best_ms"] < e["rule_ms"])
    kept = [t for m in res["models"]
            for t in (m.get("planners") or {}).get("stitch", {}).get("tuned", [])]
    rows = sorted(row(t["rule_ms"], t["best_ms"], t["launch"].items()) for t in kept)
    assert rows == retuned, (rows, retuned)
    for t in kept:
        assert f"{t['kernel']} {t['rule_ms']:.3f} -> {t['best_ms']:.3f}" in md
    # ViT imports today through both paths
    assert "seconds" in res["models"][0]["import_onnx"]


def test_models_benchmark_with_the_users_attention_mask(tmp_path):
    """--attention-mask: GPT-2 exported and called with an attention_mask passed by
    name; the graph takes it, the workbench and onnxruntime match torch's call with
    it, and the report says so."""
    out = tmp_path / "results"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "models.py"), "--size", "tiny",
         "--models", "gpt2", "--repeats", "1", "--inner", "1", "--attention-mask",
         "--out", str(out), "--tag=-mask"],
        capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(out.glob("models-*-mask.json")).read_text())
    (m,) = res["models"]
    assert res["attention_mask"] and m["inputs"]["attention_mask"] == m["inputs"]["input_ids"]
    assert "from_torch" not in m["workbench_graph"] and "seconds" in m["import_onnx"]
    assert m["planners"]["stitch"]["error_vs_torch"] < 1e-4
    assert m["onnxruntime_error_vs_torch"] < 1e-4
    assert m["latency_ms"]["workbench stitch"] > 0 and m["latency_ms"]["torch eager"] > 0
    assert "skipped" in m["import_from_torch"]
    assert "attention_mask passed by name" in next(out.glob("models-*-mask.md")).read_text()


def test_attention_variants_take_each_fused_attention_another_way():
    """The benchmarks' other forms of a stitch plan's fused attentions (models.py,
    gemm.py and gpu.py time them side by side): ``every key`` drops the causal skip,
    ``whole rows`` the online softmax, every other kernel kept; each still matches the
    reference on fresh random inputs. Without a key limit there is no ``every key``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from attention_forms import attention
    from models import attention_variants

    import workbench as wb
    for causal in (True, False):
        s = wb.Session(attention(1024 if not causal else 320, "float32", causal),
                       backend="cpu")
        s.auto("stitch")
        (gr,) = [g for g in s.plan.groups if g.schedule.online is not None]
        assert (gr.schedule.key_limit is not None) is causal
        forms = attention_variants(s.plan)
        assert sorted(forms) == (["every key", "whole rows"] if causal else ["whole rows"])
        for label, (plan, kernels) in forms.items():
            assert kernels == 1 and len(plan.groups) == len(s.plan.groups)
            (other,) = [g for g in plan.groups if g.schedule.then is not None]
            assert other.schedule.key_limit is None
            assert (other.schedule.online is None) is (label == "whole rows")
            m = s.measure(plan, repeats=1)
            assert m.within_tolerance, (label, m.max_rel_error)


def test_models_benchmark_families_both_exporters(tmp_path):
    """Issue 44's form of the run: a family model exported both ways, torch.compile as
    one more contender, and the summary of the targets (ratios to each contender)."""
    out = tmp_path / "results"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "models.py"), "--size", "tiny",
         "--models", "convnext", "--exporters", "dynamo", "legacy", "--planners", "stitch",
         "--compile", "--repeats", "1", "--inner", "1", "--out", str(out), "--tag=-test"],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env=dict(os.environ, WORKBENCH_CACHE=str(tmp_path / "cache")))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(out.glob("models-*-test.json")).read_text())
    md = next(out.glob("models-*-test.md")).read_text()
    assert [(m["model"], m["exporter"]) for m in res["models"]] == [
        ("convnext", "dynamo"), ("convnext (legacy)", "legacy")]
    for m in res["models"]:
        assert list(m["planners"]) == ["stitch"]
        assert m["planners"]["stitch"]["error_vs_torch"] < 1e-4
        assert m["torch_compile_error_vs_torch"] < 1e-4 and m["torch_compile_s"] > 0
        for method in ("workbench stitch", "onnxruntime", "torch eager", "torch.compile"):
            assert m["latency_ms"][method] > 0
    assert res["models"][1]["import_from_torch"] == {"skipped": "not repeated for this export"}
    assert "## `workbench stitch` against each contender" in md
    for contender in ("onnxruntime", "torch eager", "torch.compile"):
        assert f"| {contender} | 2 |" in md
