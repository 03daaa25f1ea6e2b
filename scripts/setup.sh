#!/usr/bin/env bash
# Create .venv with the pinned dependencies and the project installed (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -e ".[test]"
