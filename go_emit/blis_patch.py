"""The complete change that makes an emitted model a BLIS latency backend, as a git patch
or applied in place to a checkout.

    patch = blis_patch(go_source)                     # against BLIS main f90a1e3a, no checkout
    patch = blis_patch(go_source, blis_dir="blis/")   # against that checkout's files
    apply_in_place(go_source, "blis/")                # writes the files; re-running is a no-op

What a reviewer of the pull request needs, and nothing else:

    sim/latency/<file>.go   the emitted model (new file)
    sim/bundle.go           "evolved" in validLatencyBackends (so --latency-model accepts it)
    sim/bundle_test.go      TestValidLatencyBackendNames_ExcludesRemoved lists it
    sim/latency/latency.go  NewLatencyModel dispatches to it before the alpha-coefficient check
                            (it reads none), returning an untyped nil on error
    cmd/root.go             --latency-model help names it; resolveLatencyConfig fails fast on a
                            model the file does not know (instead of a panic in the cluster) and
                            when --total-kv-blocks / --max-model-len are missing (it reads no HF
                            config, so BLIS would silently use its 1,000,000-block default)

Every edit finds its place by one line's content, not by line number, so it also applies to
later BLIS versions while that line stands. Without a checkout the patch is built from the few
lines around each edit as they read at BLIS_COMMIT (`_SNAPSHOT`); `git apply` tolerates moved
line numbers. A place that cannot be found is a BlisPatchError naming the file and the line.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .emit import GoEmitError

__all__ = ["BLIS_COMMIT", "BlisPatchError", "blis_patch", "apply_in_place", "GO_FILE"]

BLIS_COMMIT = "f90a1e3a"
GO_FILE = "sim/latency/evolved_latency_model.go"


class BlisPatchError(GoEmitError):
    """The BLIS files do not have the line an edit anchors on (or the directory is not BLIS)."""


@dataclass(frozen=True)
class _Edit:
    path: str
    what: str                                                   # for the error message
    apply: Callable[[list[str]], list[str] | None]              # None: anchor not found


def _replace_line(pattern: str, done: Callable[[str], bool], new: Callable[[re.Match], list[str]]):
    rx = re.compile(pattern)

    def run(lines: list[str]) -> list[str] | None:
        for i, ln in enumerate(lines):
            m = rx.match(ln)
            if m:
                return lines if done(ln) else lines[:i] + new(m) + lines[i + 1:]
        return None
    return run


def _insert_before(anchor: str, marker: str, block: list[str]):
    def run(lines: list[str]) -> list[str] | None:
        if any(marker in ln for ln in lines):
            return lines
        for i, ln in enumerate(lines):
            if ln == anchor:
                return lines[:i] + block + lines[i:]
        return None
    return run


def _backend_test(backend: str):
    """The expected-names line of TestValidLatencyBackendNames_ExcludesRemoved (and its count)."""
    count = re.compile(r"^(\s*// AND the list must contain exactly )(\d+)( backends.*)$")
    listed = re.compile(r'^(\s*expected := \[\]string\{)(.*)(\}\s*)$')

    def run(lines: list[str]) -> list[str] | None:
        for i in range(len(lines) - 1):
            c, e = count.match(lines[i]), listed.match(lines[i + 1])
            if c and e:
                names = re.findall(r'"([^"]*)"', e.group(2))
                if backend in names:
                    return lines
                names = sorted(names + [backend])
                return lines[:i] + [f"{c.group(1)}{len(names)}{c.group(3)}",
                                    e.group(1) + ", ".join(f'"{n}"' for n in names) + e.group(3)] + lines[i + 2:]
        return None
    return run


def _edits(backend: str, ctor: str) -> list[_Edit]:
    q = f'"{backend}"'
    dispatch = [
        f"\t// {backend}: a StepEvolve program ({GO_FILE}). It reads no alpha/beta",
        "\t// coefficients, so it is dispatched before their check. An unknown model is an error",
        "\t// with an untyped nil model (a typed nil would pass a != nil check).",
        f"\tif hw.Backend == {q} {{",
        f"\t\tm, err := {ctor}(hw.Model)",
        "\t\tif err != nil {",
        '\t\t\treturn nil, fmt.Errorf("latency model: %w", err)',
        "\t\t}",
        "\t\treturn m, nil",
        "\t}",
    ]
    validate = [
        f"\t// --latency-model {backend}: a StepEvolve program fitted per model ({GO_FILE}).",
        "\t// It reads no HF config, so KV capacity and max model length are not auto-computed: require",
        "\t// them rather than run on the 1,000,000-block default, and reject an unknown model here",
        "\t// instead of in the cluster's instance constructor (which panics).",
        f"\tif backend == {q} {{",
        f"\t\tif _, err := latency.{ctor}(model); err != nil {{",
        f'\t\t\tlogrus.Fatalf("--latency-model {backend}: %v", err)',
        "\t\t}",
        '\t\tif !cmd.Flags().Changed("total-kv-blocks") || !cmd.Flags().Changed("max-model-len") {',
        f'\t\t\tlogrus.Fatalf("--latency-model {backend} requires --total-kv-blocks and --max-model-len " +',
        '\t\t\t\t"(it reads no HF config to compute them; use the values of the vLLM server it was fitted on)")',
        "\t\t}",
        "\t}",
        "",
    ]
    return [
        _Edit("sim/bundle.go", "the validLatencyBackends map",
              _replace_line(r'^(\s*validLatencyBackends\s*=\s*map\[string\]bool\{)(.*)(\}\s*)$',
                            lambda ln: f"{q}: true" in ln,
                            lambda m: [f"{m.group(1)}{m.group(2)}, {q}: true{m.group(3)}"])),
        _Edit("sim/bundle_test.go", "the expected backend list of TestValidLatencyBackendNames_ExcludesRemoved",
              _backend_test(backend)),
        _Edit("sim/latency/latency.go", "the line '// All implementations index alphaCoeffs[0..2]; validate upfront.'",
              _insert_before("\t// All implementations index alphaCoeffs[0..2]; validate upfront.",
                             f"hw.Backend == {q}", dispatch)),
        _Edit("cmd/root.go", "the --latency-model flag's help text",
              _replace_line(r'^(\s*cmd\.Flags\(\)\.StringVar\(&latencyModelBackend, "latency-model", "[^"]*", '
                            r'"Latency model backend: )([^"]*)("\)\s*)$',
                            lambda ln: backend in ln.split("Latency model backend:", 1)[1],
                            lambda m: [f"{m.group(1)}{m.group(2)}, {backend} (StepEvolve; needs --total-kv-blocks "
                                       f"and --max-model-len){m.group(3)}"])),
        _Edit("cmd/root.go", "the line '// Analytical backends: parse HF config, ...' in resolveLatencyConfig",
              _insert_before("\t// Analytical backends: parse HF config, extract model/hardware config, auto-calc KV "
                             "blocks and max-model-len.", f"if backend == {q} {{", validate)),
    ]


# The lines around each edit at BLIS_COMMIT: (first line number, lines). Only what the
# patch's context needs; the edits themselves are computed from them like from a checkout.
_SNAPSHOT: dict[str, list[tuple[int, list[str]]]] = {
    "sim/bundle.go": [(133, [
        '\tvalidPreemptionPolicies  = map[string]bool{"": true, "fcfs": true, "priority": true}',
        '\tvalidLatencyBackends          = map[string]bool{"": true, "roofline": true, "trained-physics": true}',
        '\tvalidDisaggregationDeciders   = map[string]bool{"": true, "never": true, "always": true, '
        '"prefix-threshold": true}',
    ])],
    "sim/bundle_test.go": [(605, [
        "",
        "\t// AND the list must contain exactly 2 backends",
        '\texpected := []string{"roofline", "trained-physics"}',
        "\tif len(names) != len(expected) {",
    ])],
    "sim/latency/latency.go": [(146, [
        "\t\topt(&o)",
        "\t}",
        "\t// All implementations index alphaCoeffs[0..2]; validate upfront.",
        "\tif len(coeffs.AlphaCoeffs) < 3 {",
    ])],
    "cmd/root.go": [(571, [
        "",
        "\t// Analytical backends: parse HF config, extract model/hardware config, auto-calc KV blocks and "
        "max-model-len.",
        '\tif backend == "roofline" || backend == "trained-physics" {',
    ]), (1133, [
        '\tcmd.Flags().StringVar(&moeCommBackend, "moe-comm-backend", "", "MoE all-to-all comm backend for '
        'dispatch/combine cost (mirrors vLLM VLLM_ALL2ALL_BACKEND: naive, allgather_reducescatter [default], pplx, '
        'deepep_high_throughput, deepep_low_latency, mori, flashinfer_all2allv; MoE + --latency-model '
        'trained-physics + --dp > 1)")',
        '\tcmd.Flags().StringVar(&latencyModelBackend, "latency-model", "trained-physics", '
        '"Latency model backend: trained-physics (default), roofline")',
        '\tcmd.Flags().Int64Var(&maxModelLen, "max-model-len", 0, "Max total sequence length (input + output); '
        '0 = unlimited. Auto-derived from HF config for analytical backends when not set.")',
    ])],
}


def _hunks(old: list[str], new: list[str], first: int, shift: int, context: int | None) -> tuple[list[str], int]:
    """Unified-diff hunks of old -> new (lines without newlines) whose old text starts at line
    `first`; `shift` is how far earlier hunks of the file moved the new side. context=None: one
    hunk around the single changed stretch, with every unchanged line of the chunk as context
    (a snapshot chunk); else difflib's hunks with that much context (a whole file).
    Returns (hunk lines, new shift)."""
    if context is None:
        pre = 0
        while pre < min(len(old), len(new)) and old[pre] == new[pre]:
            pre += 1
        suf = 0
        while suf < min(len(old), len(new)) - pre and old[-1 - suf] == new[-1 - suf]:
            suf += 1
        body = ([" " + ln for ln in old[:pre]] + ["-" + ln for ln in old[pre:len(old) - suf]]
                + ["+" + ln for ln in new[pre:len(new) - suf]] + [" " + ln for ln in old[len(old) - suf:]])
        head = f"@@ -{first},{len(old)} +{first + shift},{len(new)} @@"
        return [head] + body, shift + len(new) - len(old)
    out: list[str] = []
    for ln in list(difflib.unified_diff(old, new, lineterm="", n=context))[2:]:
        m = re.match(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$", ln)
        if m:
            a, b = int(m.group(1)) + first - 1, int(m.group(2) or 1)
            c, d = int(m.group(3)) + first - 1 + shift, int(m.group(4) or 1)
            out.append(f"@@ -{a},{b} +{c},{d} @@")
        else:
            out.append(ln)
    return out, shift + len(new) - len(old)


def _file_patch(path: str, parts: list[tuple[int, list[str], list[str]]], context: int | None) -> list[str]:
    body: list[str] = []
    shift = 0
    for first, old, new in parts:
        if old != new:
            h, shift = _hunks(old, new, first, shift, context)
            body += h
    if not body:
        return []
    return [f"diff --git a/{path} b/{path}", f"--- a/{path}", f"+++ b/{path}"] + body


def _new_file_patch(path: str, text: str) -> list[str]:
    lines = text.splitlines()
    return ([f"diff --git a/{path} b/{path}", "new file mode 100644", "--- /dev/null", f"+++ b/{path}",
             f"@@ -0,0 +1,{len(lines)} @@"] + ["+" + ln for ln in lines])


def _read_checkout(blis_dir: Path, paths: set[str]) -> dict[str, str]:
    if not blis_dir.is_dir():
        raise BlisPatchError(f"{blis_dir}: no such directory (expected a BLIS checkout)")
    missing = [p for p in sorted(paths) if not (blis_dir / p).is_file()]
    if missing:
        raise BlisPatchError(f"{blis_dir} is not a BLIS checkout: missing {', '.join(missing)}")
    return {p: (blis_dir / p).read_text() for p in paths}


def _edited(texts: dict[str, list[list[str]]], edits: list[_Edit]) -> dict[str, list[list[str]]]:
    """Apply every edit to the one chunk of its file that has its anchor."""
    out = {p: [list(c) for c in chunks] for p, chunks in texts.items()}
    for e in edits:
        for i, chunk in enumerate(out[e.path]):
            res = e.apply(chunk)
            if res is not None:
                out[e.path][i] = res
                break
        else:
            raise BlisPatchError(f"{e.path}: cannot find {e.what} (BLIS changed since {BLIS_COMMIT}?)")
    return out


def _plan(go_source: str, blis_dir: str | Path | None, backend: str, ctor: str, go_file: str):
    """(per file: [(first line, old lines, new lines)], whether the Go file changes, the originals)."""
    edits = _edits(backend, ctor)
    paths = {e.path for e in edits}
    if blis_dir is None:
        old = {p: [lines for _, lines in _SNAPSHOT[p]] for p in paths}
        firsts = {p: [first for first, _ in _SNAPSHOT[p]] for p in paths}
        originals = None
    else:
        originals = _read_checkout(Path(blis_dir), paths)
        old = {p: [t.splitlines()] for p, t in originals.items()}
        firsts = {p: [1] for p in paths}
    new = _edited(old, edits)
    return {p: list(zip(firsts[p], old[p], new[p])) for p in sorted(paths)}, originals


def _check_backend(backend: str, ctor: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9-]*", backend):
        raise BlisPatchError(f"backend name {backend!r} must be lower-case letters, digits and '-'")
    if not re.fullmatch(r"New[A-Z][A-Za-z0-9]*", ctor):
        raise BlisPatchError(f"constructor {ctor!r} is not an exported New... name")


def blis_patch(go_source: str, blis_dir: str | Path | None = None, *, backend: str = "evolved",
               ctor: str = "NewEvolvedLatencyModel", go_file: str = GO_FILE) -> str:
    """The git patch (text) adding `go_source` as backend `backend` to BLIS (see module docstring).
    With blis_dir, against that checkout's files (and the Go file there, if any); else against
    BLIS_COMMIT's lines."""
    _check_backend(backend, ctor)
    plan, _ = _plan(go_source, blis_dir, backend, ctor, go_file)
    out: list[str] = []
    existing = Path(blis_dir, go_file) if blis_dir is not None else None
    if existing is not None and existing.is_file():
        out += _file_patch(go_file, [(1, existing.read_text().splitlines(), go_source.splitlines())], 3)
    else:
        out += _new_file_patch(go_file, go_source)
    for path, parts in plan.items():
        out += _file_patch(path, parts, 3 if blis_dir is not None else None)
    return "\n".join(out) + "\n" if out else ""


def apply_in_place(go_source: str, blis_dir: str | Path, *, backend: str = "evolved",
                   ctor: str = "NewEvolvedLatencyModel", go_file: str = GO_FILE) -> list[str]:
    """Write the change into the checkout; returns the files written. Every anchor is found
    before anything is written, so a failure leaves the checkout as it was."""
    _check_backend(backend, ctor)
    plan, originals = _plan(go_source, blis_dir, backend, ctor, go_file)
    root = Path(blis_dir)
    written: list[str] = []
    for path, parts in plan.items():
        (_, old, new), = parts
        if old != new:
            end = "\n" if originals[path].endswith("\n") else ""
            (root / path).write_text("\n".join(new) + end)
            written.append(path)
    target = root / go_file
    if not target.is_file() or target.read_text() != go_source:
        target.write_text(go_source)
        written.insert(0, go_file)
    return written
