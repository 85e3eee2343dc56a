"""Load and run: an exported plan loaded in a fresh process gives the session's outputs
bit for bit (same C source, compiler and flags; every CPU reduction is owned by one
thread, so there is no order-dependent rounding), without importing any UI module."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import workbench
from workbench import GraphBuilder, Session, load_artifact
from workbench.errors import WorkbenchError
from workbench.fusion.planners import PLANNERS
from workbench.runtime import run_reference

UI_MODULES = ("jupyter", "jupyter_client", "ipykernel", "ipywidgets", "IPython", "plotly",
              "anywidget", "notebook")

# a fresh interpreter: load every artifact, run it on the given inputs, save outputs
RUNNER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import workbench as wb
    jobs = json.loads(sys.argv[1])
    for job in jobs:
        model = wb.load_artifact(job["artifact"], backend="cpu")
        with np.load(job["inputs"], allow_pickle=False) as f:
            ins = {t.name: f[f"i{k}"] for k, t in enumerate(model.inputs)}
        outs = model(**ins)
        np.savez(job["outputs"], *outs.values())
    ui = sorted(m for m in sys.modules if m.split(".")[0] in %r)
    print(json.dumps({"ui_modules": ui}))
""" % (UI_MODULES,))

CASES = [("small", "none", "dir"), ("small", "rules", "dir"), ("small", "rules", "zip"),
         ("small", "none", "zip"), ("layernorm", "rules", "zip"), ("conv", "rules", "dir"),
         ("packed", "rules", "zip"), ("attention", "rules", "dir")]
if "stitch" in PLANNERS:   # global stitching: workspace buffers, cooperative launches
    CASES += [("small", "stitch", "zip"), ("cross_entropy", "stitch", "dir")]


def _wide(s) -> bool:
    """Whether this machine's kernels multiply by the micro-kernel (packed B)."""
    from workbench.fusion.gemm.tiles import micro_kernel_fits
    return micro_kernel_fits(s.device)


@pytest.fixture(scope="module")
def round_trip(art, tmp_path_factory):
    """Export each case, run all of them in one fresh process with its own empty
    compile cache; returns {case: (session, inputs, loaded outputs)}."""
    tmp = tmp_path_factory.mktemp("roundtrip")
    sessions, jobs = {}, []
    for i, (graph, planner, form) in enumerate(CASES):
        g = (art.small_graph() if graph == "small" else art.conv_graph()
             if graph == "conv" else art.packed_graph() if graph == "packed"
             else art.attention_graph() if graph == "attention"
             else workbench.load(f"sample_graphs/{graph}.json"))
        s = Session(g, backend="cpu", seed=i + 7)    # fresh random inputs per case
        s.auto(planner)
        if graph == "packed" and _wide(s):
            # the product of two activations is sgemm's by the rule: its B packed by
            # every run where set by hand (blas=0), so the artifact holds such a pack
            s.set_launch(s.plan.groups[-1].nodes[0], blas=0)
        path = s.export(tmp / f"case{i}{'.zip' if form == 'zip' else ''}")
        np.savez(tmp / f"in{i}.npz", **{f"i{k}": s.inputs[n] for k, n in enumerate(g.inputs)})
        jobs.append({"artifact": str(path), "inputs": str(tmp / f"in{i}.npz"),
                     "outputs": str(tmp / f"out{i}.npz")})
        sessions[(graph, planner, form)] = (s, i)
    cache = tmp / "fresh-cache"
    env = dict(os.environ, WORKBENCH_CACHE=str(cache))
    r = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(jobs)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    results = {}
    for case, (s, i) in sessions.items():
        with np.load(tmp / f"out{i}.npz", allow_pickle=False) as f:
            results[case] = (s, [f[f"arr_{k}"] for k in range(len(s.graph.outputs))])
    return results, report, cache


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c))
def test_fresh_process_matches_session(round_trip, case, wb):
    results, _, _ = round_trip
    s, loaded = results[case]
    if case[0] == "packed":     # the case is what it says where the machine packs
        assert [gr.schedule.gemm.packed_b for gr in s.plan.groups] == \
            (["once", "per run"] if _wide(s) else ["", ""])
    if case[0] == "attention":  # one fused attention kernel
        assert [gr.schedule.then is not None for gr in s.plan.groups] == [True]
    mine = s.run(s.inputs)
    for name, got in zip(s.graph.outputs, loaded):
        assert got.dtype == mine[name].dtype and got.shape == mine[name].shape
        assert np.array_equal(got, mine[name]), f"{case}: output {name!r} differs"
    # and the session itself is right: the outputs match the NumPy reference
    wb.assert_matches(s.graph, dict(zip(s.graph.outputs, loaded)),
                      run_reference(s.graph, s.inputs), str(case))


def test_fresh_process_compiled_shipped_sources_without_ui(round_trip):
    _, report, cache = round_trip
    assert report["ui_modules"] == []
    assert len(list((cache / "cpu").glob("*.so"))) > 0


@pytest.fixture(scope="module")
def exported(art, tmp_path_factory):
    s = Session(art.small_graph(), backend="cpu", seed=3)
    s.auto("rules")
    return s, s.export(tmp_path_factory.mktemp("exported") / "m.zip")


def test_call_conventions_and_input_errors(exported):
    s, path = exported
    model = load_artifact(path, backend="cpu")
    names = [t.name for t in model.inputs]
    assert names == list(s.graph.inputs)
    assert [t.name for t in model.outputs] == list(s.graph.outputs)
    ins = s.inputs
    by_name = model(**ins)
    positional = model(*[ins[n] for n in names])
    mixed = model(ins[names[0]], **{names[1]: ins[names[1]]})
    assert list(by_name) == list(s.graph.outputs)
    for o in by_name:
        assert np.array_equal(by_name[o], positional[o])
        assert np.array_equal(by_name[o], mixed[o])
    x = ins[names[0]]
    with pytest.raises(WorkbenchError, match=r"has shape \[48, 161\], the model expects"):
        model(np.ones((48, 161), np.float32), ins[names[1]])
    with pytest.raises(WorkbenchError, match="has dtype float64.*astype"):
        model(x.astype(np.float64), ins[names[1]])
    with pytest.raises(WorkbenchError, match="missing input"):
        model(x)
    with pytest.raises(WorkbenchError, match="unknown input 'nope'"):
        model(x, ins[names[1]], nope=x)
    with pytest.raises(WorkbenchError, match="takes 2 inputs"):
        model(x, x, x)
    with pytest.raises(WorkbenchError, match="given twice"):
        model(x, **{names[0]: x, names[1]: ins[names[1]]})
    # non-contiguous inputs are accepted (copied), results unchanged
    xf = np.asfortranarray(x)
    assert np.array_equal(model(xf, ins[names[1]])[s.graph.outputs[0]],
                          by_name[s.graph.outputs[0]])


def test_reference_backend_runs_the_manifest_plan(exported, wb):
    s, path = exported
    model = load_artifact(path, backend="reference")
    outs = model(**s.inputs)
    wb.assert_matches(s.graph, outs, run_reference(s.graph, s.inputs))


def test_runs_the_shipped_source_not_a_regenerated_one(art, tmp_path, fresh_cache):
    """Edit a shipped C kernel (and re-sign the artifact): the loaded model runs the
    edit, so what runs is what was shipped."""
    b = GraphBuilder("scale")
    x = b.input("x", (64, 256))
    b.output(b.exp(x) * 1.25, "y")    # (a literal no prelude helper holds)
    s = Session(b.build(), backend="cpu")
    s.auto("rules")
    root = s.export(tmp_path / "a")
    (src,) = (root / "kernels").glob("*.c")
    text = src.read_text()
    assert text.count("1.25f") == 1
    src.write_text(text.replace("1.25f", "1.875f"))
    art.resign(root)
    model = load_artifact(root, backend="cpu")
    got, mine = model(**s.inputs)["y"], s.run(s.inputs)["y"]
    np.testing.assert_allclose(got, mine * 1.5, rtol=1e-6)


def test_unknown_backend_and_cupy_without_gpu(exported):
    _, path = exported
    with pytest.raises(WorkbenchError, match="unknown backend 'tpu'"):
        load_artifact(path, backend="tpu")
    from workbench.runtime import gpu_available
    if not gpu_available():
        with pytest.raises(WorkbenchError, match="needs CuPy and a CUDA GPU"):
            load_artifact(path, backend="cupy")


@pytest.mark.gpu
def test_cupy_arrays_run_the_cuda_sources(exported, wb):
    cp = pytest.importorskip("cupy")
    from workbench.runtime import gpu_available
    if not gpu_available():
        pytest.skip("no CUDA GPU")
    s, path = exported
    model = load_artifact(path)
    outs = model(**{k: cp.asarray(v) for k, v in s.inputs.items()})
    assert all(isinstance(v, cp.ndarray) for v in outs.values())
    wb.assert_matches(s.graph, {k: cp.asnumpy(v) for k, v in outs.items()},
                      run_reference(s.graph, s.inputs))
    # NumPy inputs on a model loaded for the GPU come back as NumPy
    gpu = load_artifact(path, backend="cupy")
    outs = gpu(**s.inputs)
    assert all(isinstance(v, np.ndarray) for v in outs.values())
    wb.assert_matches(s.graph, outs, run_reference(s.graph, s.inputs))


@pytest.mark.parametrize("graph, planner", [("small", "stitch"), ("cross_entropy", "stitch"),
                                            ("attention", "rules"), ("layernorm", "none"),
                                            ("softmax_long", "rules")])
def test_a_gpu_plans_shipped_cuda_runs_in_the_emulator(art, wb, tmp_path, graph, planner):
    """What ships for a GPU -- a plan made for the H100, its CUDA sources -- loaded with
    the CUDA emulator (backend 'cuda-emu'): the shipped .cu files compiled and run with
    CUDA's semantics, cooperative launches, workspaces and a row split between
    registers and dynamic shared memory (softmax over 65537 columns) included, against
    the reference. Without a GPU this is the one run the shipped CUDA gets."""
    from workbench.runtime.cuda_emu import CudaEmuBackend
    if CudaEmuBackend.unavailable() and not os.environ.get("WB_REQUIRE_CUDA_EMU"):
        pytest.skip(CudaEmuBackend.unavailable())
    if graph == "softmax_long":
        b = workbench.GraphBuilder("softmax_long")
        b.output(b.softmax(b.input("x", (2, 65537)), axis=-1), "y")
        g = b.build()
    else:
        g = (art.small_graph() if graph == "small" else art.attention_graph()
             if graph == "attention" else workbench.load(f"sample_graphs/{graph}.json"))
    s = Session(g, backend="cuda-emu", seed=4)
    s.auto(planner)
    model = load_artifact(s.export(tmp_path / "gpu.zip"), backend="cuda-emu")
    assert all("cuda" in k.sources for k in model.manifest.kernels if k.library is None)
    if graph == "softmax_long":
        assert [x["space"] for k in model.manifest.kernels for x in k.scratch] == ["hybrid"]
    wb.assert_matches(s.graph, model(**s.inputs), run_reference(s.graph, s.inputs))
