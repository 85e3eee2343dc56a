#!/usr/bin/env bash
# Set up a fresh Debian machine: system packages (when missing), a virtualenv in .venv,
# and the workbench with the given extras. Usage: scripts/setup.sh [EXTRAS], e.g. "test".
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
# An NVIDIA driver here: install the CuPy (and NVRTC) of its CUDA major version, so
# the default backend (auto) runs on the GPU. Without one, nothing GPU-specific.
if command -v nvidia-smi >/dev/null 2>&1; then
  cuda_major="$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)"
  case "$cuda_major" in
    12) gpu_extra=cuda12 ;;
    "") gpu_extra="" ;;
    *)  gpu_extra=cuda13 ;;
  esac
  if [ -n "$gpu_extra" ]; then
    echo "NVIDIA driver for CUDA $cuda_major found: installing the $gpu_extra GPU runtime" >&2
    extras="${extras:+$extras,}$gpu_extra"
  fi
fi

need_apt=()
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv python3-dev)
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)            # the notebook's graph view
case ",$extras," in *,test,*)                                     # the CUDA emulator (cuda-emu)
  command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || need_apt+=(g++) ;; esac
case ",$extras," in *,test,*|*,notebook,*)                        # the JupyterLab extension
  command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm) ;; esac
case ",$extras," in *,test,*)                                     # the real-browser test
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium fonts-liberation) ;; esac
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing system packages: ${need_apt[*]}" >&2
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
log=.venv/setup.log
spec="."; [ -n "$extras" ] && spec=".[${extras}]"
echo "installing fusion-workbench${extras:+ with extras [$extras]} into .venv (log: $log)" >&2
# pip's and setuptools' chatter goes to the log; it is shown only if the install fails
# torch: the CPU build of 2.13.0 (a plain "torch" would pull a multi-GB CUDA build)
torch_pin=()
case ",$extras," in *,test,*|*,torch,*) torch_pin=("torch==2.13.0") ;; esac
if ! { .venv/bin/python -m pip install --upgrade pip && \
       { [ ${#torch_pin[@]} -eq 0 ] || .venv/bin/python -m pip install "${torch_pin[@]}"; } && \
       .venv/bin/python -m pip install -e "$spec"; } > "$log" 2>&1; then
  tail -40 "$log" >&2
  echo "error: installing fusion-workbench failed; the full log is in $log" >&2
  exit 1
fi
.venv/bin/python -c "import workbench" # fails loudly if the install did not work
# the JupyterLab extension, built from labextension/ with this JupyterLab, and linked
# where JupyterLab looks (an editable install; a wheel built after this ships the files)
case ",$extras," in *,test,*|*,notebook,*)
  bash scripts/build_labextension.sh .venv/bin/python
  ext=.venv/share/jupyter/labextensions/fusion-workbench
  mkdir -p "$(dirname "$ext")" && rm -rf "$ext" && \
    ln -s "$PWD/workbench/labextension/fusion-workbench" "$ext" ;; esac
