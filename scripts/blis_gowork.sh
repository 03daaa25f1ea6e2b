#!/usr/bin/env bash
# Build BLIS offline (no Go module proxy): wire its Go dependencies from Debian's golang-*-dev
# packages (/usr/share/gocode/src) into a go.work file *outside* the BLIS checkout.
#
#   bash scripts/blis_gowork.sh BLIS_DIR [WORK_DIR]      # WORK_DIR default: BLIS_DIR-gowork
#   eval "$(bash scripts/blis_gowork.sh ~/src/blis)"     # sets GOWORK, GOPROXY=off, GOFLAGS=, GOTOOLCHAIN=local
#
# For every module BLIS_DIR/go.mod requires, WORK_DIR/mod/<module> is a copy of
# /usr/share/gocode/src/<module> whose go.mod is reduced to `module <module>` / `go 1.21` (Debian's
# own go.mod files carry requirements the proxy would have to fetch), or, where Debian has no
# copy, a directory holding only that go.mod (enough for a module no BLIS package imports, e.g.
# gonum; a build that imports it fails naming the package). WORK_DIR/go.work has `use BLIS_DIR`
# and one `replace <module> => ./mod/<module>` per requirement. The BLIS checkout is not changed.
# Prints the environment to stdout as `export ...` (for eval); notes go to stderr.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 BLIS_DIR [WORK_DIR]" >&2
    exit 2
fi
BLIS_DIR="$(cd "$1" && pwd)"
WORK_DIR="${2:-$BLIS_DIR-gowork}"
GOCODE="${GOCODE:-/usr/share/gocode/src}"
if [ ! -f "$BLIS_DIR/go.mod" ]; then
    echo "blis_gowork.sh: $BLIS_DIR/go.mod: missing (not a Go module checkout)" >&2
    exit 1
fi
case "$WORK_DIR/" in
    "$BLIS_DIR"/*) echo "blis_gowork.sh: WORK_DIR must be outside the BLIS checkout" >&2; exit 1 ;;
esac
mkdir -p "$WORK_DIR/mod"
WORK_DIR="$(cd "$WORK_DIR" && pwd)"

# the modules go.mod requires (block and single-line forms), without versions
MODULES="$(awk '
    /^require[ \t]*\(/ { inb = 1; next }
    inb && /^\)/       { inb = 0; next }
    inb && NF >= 2 && $1 !~ /^\/\// { print $1; next }
    /^require[ \t]+[^( \t]/ { print $2 }
' "$BLIS_DIR/go.mod" | sort -u)"

# go.work's go line: at least BLIS's (a workspace may not be older than its modules)
GO_LINE="$(awk '/^go[ \t]+[0-9]/ { print $2; exit }' "$BLIS_DIR/go.mod")"
{
    echo "go ${GO_LINE:-1.24}"
    echo
    echo "use $BLIS_DIR"
    echo
} > "$WORK_DIR/go.work"

missing=""
for m in $MODULES; do
    dst="$WORK_DIR/mod/$m"
    rm -rf "$dst"
    mkdir -p "$dst"
    if [ -d "$GOCODE/$m" ]; then
        cp -rL "$GOCODE/$m/." "$dst/"
        chmod -R u+w "$dst"
    else
        missing="$missing $m"
    fi
    printf 'module %s\n\ngo 1.21\n' "$m" > "$dst/go.mod"
    rm -f "$dst/go.sum"
    echo "replace $m => ./mod/$m" >> "$WORK_DIR/go.work"
done

if [ -n "$missing" ]; then
    echo "blis_gowork.sh: no Debian copy under $GOCODE (go.mod only):$missing" >&2
fi
echo "blis_gowork.sh: wrote $WORK_DIR/go.work ($(echo "$MODULES" | grep -c . ) modules)" >&2
echo "export GOWORK=$WORK_DIR/go.work GOPROXY=off GOFLAGS= GOTOOLCHAIN=local GOSUMDB=off"
