#!/usr/bin/env bash
# Set up (venv + Go toolchain for the Go parity tests) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -f scripts/install_go.sh ]; then bash scripts/install_go.sh; fi
export STEPEVOLVE_DATA="${STEPEVOLVE_DATA:-$(cd .. && pwd)/shared/data}"
exec .venv/bin/python -m pytest "$@"
