"""Every sample graph's CUDA kernels compile with nvcc for sm_90 (skipped without nvcc).

NVRTC (what CuPy uses) and nvcc share the front end; compiling to PTX checks the
source is valid CUDA without needing a GPU.
"""
import shutil
from pathlib import Path

import pytest

from workbench.codegen import RENDERERS, lower_plan
from workbench.frontends import load
from workbench.fusion import run_planner

NVCC = shutil.which("nvcc")
SAMPLES = sorted(Path("sample_graphs").glob("*.json")) + sorted(
    Path("sample_graphs").glob("*.onnx"))


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_cuda_sources_compile(path, compile_cuda):
    g = load(path)
    r = RENDERERS["cuda"]
    kernels = []
    rules = run_planner("rules", g)[0]
    adaptive = rules          # every row kernel mapped by the rule (warp, split...)
    for gr in rules.groups:
        if gr.schedule.kind == "row_reduce":
            adaptive = adaptive.set_mapping(gr.id, "auto")
    for plan in (run_planner("none", g)[0], rules, adaptive):
        for k in lower_plan(plan):
            if k.library is None and k.launch.mapping in ("warp", "split"):
                k = k.__class__(**{**k.__dict__, "name": f"{k.name}_{k.launch.mapping}"})
            if k.library is None and k.name not in {x.name for x in kernels}:
                kernels.append(k)
    compile_cuda(r.module(kernels), [k.name for k in kernels], path.stem)
