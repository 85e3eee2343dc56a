#!/usr/bin/env bash
# Set up with the test extras, then run the whole test suite (what CI runs: .ci/run).
# Arguments go to pytest. The fast tier a developer runs while working (every test not
# marked slow: under 5 minutes on 2 cores) is
#   bash scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# --durations: the slowest tests named in every CI log, to keep the suite inside its time
exec .venv/bin/python -m pytest -n auto --dist loadgroup -p no:cacheprovider --durations=25 "$@"
