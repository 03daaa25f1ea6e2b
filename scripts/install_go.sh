#!/usr/bin/env bash
# Install a Go toolchain for the Go-emission tests (Debian's golang-go; Go 1.19 on bookworm).
# Idempotent and quiet: exits 0 at once if a `go` binary is already available.
set -euo pipefail

for candidate in "$(command -v go 2>/dev/null || true)" /usr/lib/go/bin/go /usr/lib/go-*/bin/go; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
        echo "go already present: $candidate ($("$candidate" version))"
        exit 0
    fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_go.sh: need root (or sudo) to run apt-get" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends golang-go; } >"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "install_go.sh: apt-get failed" >&2
    exit 1
fi

GO_BIN="$(command -v go 2>/dev/null || ls /usr/lib/go/bin/go /usr/lib/go-*/bin/go 2>/dev/null | head -n 1)"
if [ -z "$GO_BIN" ]; then
    echo "install_go.sh: golang-go installed but no go binary found" >&2
    exit 1
fi
echo "installed: $GO_BIN ($("$GO_BIN" version))"
