#!/usr/bin/env bash
# Build the JupyterLab extension (labextension/, TypeScript) into the Python package's
# shared data, workbench/labextension/fusion-workbench, which the wheel ships prebuilt
# (pyproject.toml: data-files; users need no Node). Needs node and npm (the npm
# registry for the pinned packages of labextension/package-lock.json) and a Python with
# JupyterLab (its builder, jupyter-builder, what `jupyter labextension build` runs).
# Usage: scripts/build_labextension.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
p="${1:-.venv/bin/python}"
python="$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"   # (not realpath: a venv's link)
builder="$(dirname "$python")/jupyter-builder"   # (JupyterLab >= 4.6 depends on it)
if ! command -v npm >/dev/null 2>&1; then
  echo "error: npm is not installed; install Node.js and npm (apt-get install nodejs npm)" \
       "to build the JupyterLab extension" >&2
  exit 1
fi
cd labextension
# (npm ci: exactly the lock file's versions, skipped when node_modules already holds
# them; its chatter only if it fails)
if [ ! node_modules/.package-lock.json -nt package-lock.json ] && \
   ! npm ci --no-audit --no-fund --loglevel=error > /tmp/wb-npm-ci.log 2>&1; then
  tail -30 /tmp/wb-npm-ci.log >&2
  echo "error: npm ci failed in labextension/ (log above)" >&2
  exit 1
fi
npx tsc
# (before JupyterLab 4.6 no jupyter-builder: its own `jupyter labextension build`)
build=("$builder" build .)
[ -x "$builder" ] || build=("$python" -m jupyterlab.labextensions build .)
"${build[@]}" > /tmp/wb-labextension-build.log 2>&1 || {
  tail -30 /tmp/wb-labextension-build.log >&2
  echo "error: building the extension failed (log above)" >&2
  exit 1
}
test -f ../workbench/labextension/fusion-workbench/package.json
echo "built the JupyterLab extension into workbench/labextension/fusion-workbench" >&2
