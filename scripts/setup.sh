#!/usr/bin/env bash
# Set up a fresh Debian machine: system packages (when missing), a virtualenv in .venv,
# and the workbench with the given extras. Usage: scripts/setup.sh [EXTRAS], e.g. "test".
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"

need_apt=()
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing system packages: ${need_apt[*]}" >&2
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
spec="."; [ -n "$extras" ] && spec=".[${extras}]"
.venv/bin/python -m pip install -q -e "$spec" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import workbench" # fails loudly if the install did not work
