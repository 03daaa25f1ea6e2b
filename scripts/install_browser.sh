#!/usr/bin/env bash
# Install a headless browser for the `evolve ui` end-to-end tests (tests/test_ui.py):
#   * Debian's `chromium` (apt-get; the browser always comes from Debian),
#   * the Python `playwright` package into .venv (pip). `playwright install` is NEVER run:
#     the tests launch /usr/bin/chromium through executable_path.
# Idempotent and quiet: each part is skipped when it is already present.
set -euo pipefail

PLAYWRIGHT_PIN="playwright==1.65.2"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
if [ ! -x "$PY" ]; then
    PY="$(command -v python3)"
fi

# ---- Debian's chromium
if [ -x /usr/bin/chromium ]; then
    echo "chromium already present: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
else
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            SUDO="sudo"
        else
            echo "install_browser.sh: need root (or sudo) to run apt-get" >&2
            exit 1
        fi
    fi
    export DEBIAN_FRONTEND=noninteractive
    LOG="$(mktemp)"
    trap 'rm -f "$LOG"' EXIT
    if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core; } >"$LOG" 2>&1; then
        cat "$LOG" >&2
        echo "install_browser.sh: apt-get failed" >&2
        exit 1
    fi
    if [ ! -x /usr/bin/chromium ]; then
        echo "install_browser.sh: chromium installed but /usr/bin/chromium is missing" >&2
        exit 1
    fi
    echo "installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
fi

# ---- the Python driver (no browser download)
WANT="${PLAYWRIGHT_PIN#*==}"
HAVE="$("$PY" -c 'import importlib.metadata as m; print(m.version("playwright"))' 2>/dev/null || true)"
if [ "$HAVE" = "$WANT" ]; then
    echo "playwright $HAVE already present"
else
    "$PY" -m pip install -q "$PLAYWRIGHT_PIN"
    echo "installed: $PLAYWRIGHT_PIN"
fi
