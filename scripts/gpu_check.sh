#!/usr/bin/env bash
# One batched run on a lent GPU machine (the device tool), sized for a short slot: the
# stages' limits add up to 7.5 minutes (450 s), so the check runs twice inside 15 minutes
# of GPU time with the machine's start included. Each kernel family is covered once --
# rows (softmax, LayerNorm), elementwise, stitched (cooperative), GEMM, attention, conv,
# bfloat16 and TF32, multi-step fusion -- not every GPU test (CI runs those in the CUDA
# emulator). Each
# stage is logged under $OUT (or ./gpu-out); a short summary table (stage, rc, seconds,
# key figure) is written last to $OUT/summary.md and printed. Usage, with the commit
# recorded (the copy of the tree run there has no .git of its own):
#   WORKBENCH_COMMIT=$(git rev-parse HEAD) bash scripts/gpu_check.sh
# The Python is $PY (or $PYTHON; default python3); each stage's limit can be set
# (ENV_S, TESTS_S, MAIN_S, COUNTERS_S, BENCH_S, BENCH_TF32_S, TEMPORAL_S, NCCL_S).
set -uo pipefail
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export WORKBENCH_CACHE="${WORKBENCH_CACHE:-/tmp/wbcache}"
PY="${PY:-${PYTHON:-python3}}"
SUMMARY=()      # "stage|rc|seconds|key figure" per stage, in order

stage() {  # stage NAME SECONDS COMMAND...: time-boxed, logged to $OUT/NAME.log
  local name=$1 secs=$2 t0 rc; shift 2
  echo "== $name (limit ${secs}s)"
  t0=$(date +%s)
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1; rc=$?
  STAGE_S=$(( $(date +%s) - t0 ))
  echo "== $name rc=$rc (${STAGE_S}s)" | tee -a "$OUT/$name.log"
  tail -n 15 "$OUT/$name.log"
  STAGE_RC=$rc
}
note() {  # note NAME KEY-FIGURE: the last stage's row of the summary
  SUMMARY+=("$1|$STAGE_RC$([ "$STAGE_RC" = 124 ] && echo ' (timed out)')|$STAGE_S|$2")
}
# the key figure of a stage, from its log or JSON (never fails the script)
key() { "$PY" - "$@" 2>/dev/null <<'EOF' || echo "n/a"
import glob, json, math, re, sys
what, out = sys.argv[1], sys.argv[2]
def rows(path):
    try:
        return json.load(open(path))
    except Exception:
        return []
if what == "env":
    lines = open(f"{out}/env.log").read().splitlines()
    gpu = next((l for l in lines if "NVIDIA" in l and "," in l), "no GPU listed")
    cupy = next((l for l in lines if l.startswith("python ")), "no cupy")
    print(f"{gpu.strip()}; {cupy.strip()}")
elif what in ("tests", "nccl"):
    text = open(f"{out}/{what}.log").read()
    last = re.findall(r"^=*\s*(\d+ (?:passed|failed|skipped|error).*?)\s*=*$", text, re.M)
    print(last[-1] if last else "no pytest summary")
elif what in ("main", "counters"):
    r = rows(f"{out}/{what}.json")
    if not r:
        print("no results")
    elif what == "main":
        steps = [x for x in r if x["step"] > 0]
        ok = sum(bool(x["ok"]) for x in r)
        sp = [x["speedup_vs_none"] for x in steps if x.get("speedup_vs_none", 0) > 0]
        gm = math.exp(sum(map(math.log, sp)) / len(sp)) if sp else float("nan")
        print(f"{ok}/{len(r)} steps ok; {len(steps)} stitch plans, speedup over none "
              f"{gm:.2f}x (geomean)")
    else:
        print("; ".join(f"{x['graph']} {x['planner']}: DRAM {x.get('dram_MB', float('nan')):.1f} "
                        f"MB of {x['bytes_moved_MB']:.1f} MB counted ({x.get('dram_source')})"
                        for x in r))
elif what == "bench":
    pattern = sys.argv[3]
    files = sorted(glob.glob(f"{out}/gpu-*{pattern}-????-??-??.json"))
    files = [f for f in files if ("tf32" in f) == (pattern == "tf32")]
    if not files:
        print("no results")
        sys.exit()
    res = json.load(open(files[-1]))
    cells = []
    for w in res["workloads"]:
        m = w.get("methods", {})
        s, e = m.get("stitch", {}), m.get("torch_eager", {})
        if s.get("status") != "ok":
            cells.append(f"{w['workload']} stitch {s.get('status') or w.get('status')}")
            continue
        pct = f" {s['pct_copy']:.0f}% of copy" if s.get("pct_copy") is not None else ""
        vs = (f" {e['latency_ms'] / s['latency_ms']:.2f}x eager"
              if e.get("status") == "ok" and s["latency_ms"] > 0 else "")
        bad = "" if s.get("within_tolerance") in (True, None) else " OUT OF TOLERANCE"
        cells.append(f"{w['workload']} {s['latency_ms']:.3f} ms{pct}{vs}{bad}")
    done = "" if res.get("complete") else " (incomplete)"
    print(f"copy {res.get('copy', {}).get('GBps', float('nan')):.0f} GB/s; "
          + "; ".join(cells) + done)
elif what == "temporal":
    res = rows(f"{out}/temporal-gpu.json")
    cells = []
    for c in (res or {}).get("cases", []):
        best = max(c["rows"].items(), key=lambda kv: kv[1]["x_one_launch_per_step"])
        ok = all(v is True for k, v in c["checks"].items() if "bitwise" in k)
        cells.append(f"{c['envs']} envs: {best[1]['x_one_launch_per_step']:.1f}x one "
                     f"launch per step at F={best[0]}" + ("" if ok else " BITWISE FAILED"))
    print("; ".join(cells) or "no results")
EOF
}

echo "commit ${WORKBENCH_COMMIT:-unknown}; $(date -u)"
# 1. the environment: the GPU, CuPy and its CUDA runtime, NVRTC, the backend's device
stage env "${ENV_S:-15}" bash -c '
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$1" -c "import cupy, sys; print(\"python\", sys.version.split()[0], \"cupy\", cupy.__version__, \"cuda runtime\", cupy.cuda.runtime.runtimeGetVersion())"
  "$1" -c "from workbench.runtime import nvrtc; print(nvrtc.toolchain())"
  "$1" -c "from workbench.runtime import get_backend; print(get_backend(\"cupy\").device)"
' env "$PY"
note env "$(key env "$OUT")"

# 2. the GPU tests, one or two per kernel family (the rest run in the CUDA emulator in
# CI: the same plans and CUDA sources), and what only a GPU shows (the driver's
# register counts, misaligned CuPy views, 64-bit offsets past 2^31 elements)
T=tests/runtime/test_gpu.py
TESTS=(
  # rows: softmax a block per row, LayerNorm over long rows split across blocks
  "$T::test_every_thread_mapping[cupy-block-softmax-1057-700]"
  "$T::test_every_thread_mapping[cupy-split-layer_norm-4-70000]"
  "$T::test_row_kernel_compiled_for_the_device_fits_its_registers"
  "$T::test_misaligned_cupy_inputs_are_copied_not_read_as_vectors"
  # elementwise: a kernel per op; an exp over 2^31 - 4 elements
  "$T::test_cupy_matches_reference[none-bias_gelu.json]"
  "$T::test_offsets_past_2_to_the_31_use_64_bit_indices"
  # stitched: a grid-wide barrier (cooperative launch), a whole graph in one kernel
  "$T::test_global_stitch_cooperative_launch[cupy-4096-1024]"
  "$T::test_whole_graph_stitched[cupy-cross_entropy.json]"
  # GEMM: cuBLAS and the generated block GEMM with its epilogues; a pipelined tile
  "$T::test_cupy_matches_reference[stitch-bert_chain.onnx]"
  "tests/runtime/test_gpu_pipelined.py::test_on_a_gpu_pipelined_tiles_run_within_their_bounds[cuda-cores]"
  # attention: a fused attention on tensor cores
  "tests/runtime/test_gpu_pipelined.py::test_on_a_gpu_pipelined_tiles_run_within_their_bounds[attention-tf32]"
  # conv: the library's convolutions, their epilogues and poolings
  "$T::test_a_convolution_block_runs_right[cupy-stitch]"
  # bfloat16 and TF32: rows, cuBLAS, tensor-core GEMM tiles
  "$T::test_bfloat16_rows_under_every_mapping[cupy-4096-1024-layer_norm]"
  "$T::test_bfloat16_library_matmul[cupy]"
  "tests/runtime/test_gpu_pipelined.py::test_on_a_gpu_pipelined_tiles_run_within_their_bounds[bfloat16]"
  "tests/runtime/test_gpu_tf32.py::test_on_a_gpu_cublas_and_the_tensor_core_kernels_run_tf32_within_its_bound[stitch]"
  # an exported plan's shipped CUDA sources run on CuPy arrays
  "tests/artifact/test_artifact_load.py::test_cupy_arrays_run_the_cuda_sources"
)
stage tests "${TESTS_S:-120}" "$PY" -m pytest -q -n 4 -p no:cacheprovider -m gpu "${TESTS[@]}"
note tests "$(key tests "$OUT")"

# 3. the main job as a user runs it, on a few samples (rows, a whole graph stitched,
# bfloat16, an ONNX import)
stage main "${MAIN_S:-60}" "$PY" -m workbench.cli optimize sample_graphs/softmax.json \
  sample_graphs/cross_entropy.json sample_graphs/bias_gelu_residual_layernorm_bf16.json \
  sample_graphs/layernorm_gelu.onnx --planner stitch --backend cupy --repeats 10 \
  --json "$OUT/main.json"
note main "$(key main "$OUT")"

# 4. the DRAM counters (Nsight Compute) against the counted bytes, one kernel
stage counters "${COUNTERS_S:-40}" "$PY" -m workbench.cli optimize \
  sample_graphs/layernorm.json --planner rules --backend cupy --counters \
  --json "$OUT/counters.json"
note counters "$(key counters "$OUT")"

# 5. the benchmark on a reduced list: a big row workload, a bfloat16 one, a GEMM with
# its epilogue, a causal attention; the planners rules and stitch beside torch eager
# (torch.compile's compile alone would take the stage)
stage bench "${BENCH_S:-90}" "$PY" benchmarks/gpu.py --repeats 10 --warmup 3 \
  --workloads softmax layernorm_bf16 ffn_gelu causal_attention --planners rules stitch \
  --backend cupy --no-compile --out "$OUT" ${BENCH_ARGS:-}
note bench "$(key bench "$OUT" "")"

# 6. a GEMM again with TF32 on both sides (the tensor-core kernels)
stage bench_tf32 "${BENCH_TF32_S:-35}" "$PY" benchmarks/gpu.py --repeats 10 --warmup 3 \
  --workloads ffn_gelu --planners stitch --backend cupy --no-compile --matmul-precision tf32 --out "$OUT"
note bench_tf32 "$(key bench "$OUT" tf32)"

# 7. multi-step fusion (issue 46): CartPole's fused CUDA kernel, F steps per launch,
# against one launch per step at 4,096 environments x 256 steps (target >= 11.3x)
stage temporal "${TEMPORAL_S:-30}" "$PY" benchmarks/temporal_gpu.py --envs 4096 \
  --steps 256 --rounds 3 --out "$OUT/temporal-gpu"
note temporal "$(key temporal "$OUT")"

# 8. NCCL ranks (issue 45): one rank in process group "nccl" with CuPy arrays handed to
# torch through DLPack, the sharded AdamW step against the NumPy reference
stage nccl "${NCCL_S:-60}" "$PY" -m pytest -q -n 0 -p no:cacheprovider -rs \
  tests/distributed/test_nccl_handoff.py
note nccl "$(key nccl "$OUT")"

{
  echo "# GPU check, commit ${WORKBENCH_COMMIT:-unknown}, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "| stage | rc | seconds | key figure |"
  echo "|---|---|---|---|"
  total=0
  for row in "${SUMMARY[@]}"; do
    IFS='|' read -r name rc secs fig <<< "$row"
    total=$(( total + secs ))
    echo "| $name | $rc | $secs | ${fig//|//} |"
  done
  echo "| total | | $total | |"
} > "$OUT/summary.md"
echo
cat "$OUT/summary.md"
