#!/usr/bin/env bash
# Set up with the test extras, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec .venv/bin/python -m pytest -n auto --dist loadgroup -p no:cacheprovider "$@"
