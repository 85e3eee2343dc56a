#!/usr/bin/env bash
# The main job: set up, then optimize every sample graph on the default backend
# (cupy with a GPU, else cpu) and print the step table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/workbench optimize sample_graphs/*.json sample_graphs/*.onnx --planner stitch "$@"
