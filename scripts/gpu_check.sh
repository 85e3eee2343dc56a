#!/usr/bin/env bash
# One batched run on a lent GPU machine (the device tool): environment, the GPU tests,
# the main job and the GPU benchmark, each logged under $OUT (or ./gpu-out). Stages are
# time-boxed so a slow one cannot starve the rest. Usage, with the commit recorded
# (the copy of the tree run there has no .git of its own):
#   WORKBENCH_COMMIT=$(git rev-parse HEAD) bash scripts/gpu_check.sh
set -uo pipefail
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export WORKBENCH_CACHE="${WORKBENCH_CACHE:-/tmp/wbcache}"
PY="${PYTHON:-python3}"
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$PY" -c "import cupy, sys; print('python', sys.version.split()[0], 'cupy', cupy.__version__, 'cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"
  "$PY" -c "from workbench.runtime import nvrtc; print(nvrtc.toolchain())"
  "$PY" -c "from workbench.runtime import get_backend; print(get_backend('cupy').device)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
stage() {  # stage NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  echo "== $name (limit ${secs}s)"
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1; echo "== $name rc=$?" | tee -a "$OUT/$name.log"
  tail -n 15 "$OUT/$name.log"
}
stage tests "${TESTS_S:-150}" "$PY" -m pytest -q -n 8 -p no:cacheprovider -m gpu \
  tests/runtime/test_gpu.py tests/runtime/test_gpu_tf32.py tests/runtime/test_gpu_pipelined.py \
  tests/measure \
  tests/artifact/test_artifact_load.py
stage main "${MAIN_S:-80}" "$PY" -m workbench.cli optimize sample_graphs/*.json \
  sample_graphs/*.onnx --planner stitch --backend cupy --repeats 10
stage counters "${COUNTERS_S:-45}" "$PY" -m workbench.cli optimize \
  sample_graphs/layernorm.json sample_graphs/softmax.json --planner rules --backend cupy \
  --counters
stage bench "${BENCH_S:-240}" "$PY" benchmarks/gpu.py --repeats 10 --warmup 3 \
  --out "$OUT" ${BENCH_ARGS:-}
# the GEMM workloads again with TF32 on both sides (the tensor-core kernels)
stage bench_tf32 "${BENCH_TF32_S:-120}" "$PY" benchmarks/gpu.py --repeats 10 --warmup 3 \
  --workloads gemm --planners rules stitch --matmul-precision tf32 --out "$OUT"
