"""Emit one self-contained Go file implementing BLIS's sim.LatencyModel for a program.

    src = emit_go(program, constants_by_model, model_vectors, overheads_by_model)

The file (package `package`, imports only fmt, math and the BLIS `sim` package) defines

    type EvolvedLatencyModel struct{ ... }               // name from type_name
    func NewEvolvedLatencyModel(model string) (*EvolvedLatencyModel, error)
    var _ sim.LatencyModel = (*EvolvedLatencyModel)(nil)

and the methods of the chosen interface:

    "blis"     StepTime, QueueingTime, OutputTokenProcessingTime, PostDecodeFixedOverhead
    "legacy5"  StepTime, QueueingTime, OutputTokenProcessingTime,
               SchedulingProcessingTime (0), PreemptionProcessingTime (0)

StepTime = aggregates (mirror of evaluator.components.batch_aggregates) -> fillComponents
(mirror of fill_components, float64, same operation order) -> predict (the transpiled
program, see go_emit.transpile) -> stepTimeUs. The integer conversions are mirrored in
Python by `go_step_time_us` and `go_overhead_us`:

    step time   NaN -> 1; otherwise rounded half away from zero (math.Round) and clamped
                to [1, 2^53] us (so -Inf -> 1, +Inf -> 2^53).
    overheads   QueueingTime = queueing_us + queueing_per_input_token_us * len(InputTokens);
                NaN or negative -> 0; otherwise rounded half away from zero, capped at 2^53.

All package-level names derive from type_name, so several emitted files can share a
package; helpers are methods of the type.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

import numpy as np

from evaluator.components import COMPONENT_INDEX, COMPONENTS, MODEL_FIELDS, N_COMPONENTS
from evaluator.program import FUNC_NAME, Program

from .transpile import TranspileError, format_expr, go_float, transpile

__all__ = [
    "GoEmitError",
    "INTERFACES",
    "OVERHEAD_KEYS",
    "MAX_STEP_TIME_US",
    "emit_go",
    "go_step_time_us",
    "go_overhead_us",
    "constructor_name",
]

INTERFACES = ("blis", "legacy5")
OVERHEAD_KEYS = ("queueing_us", "queueing_per_input_token_us", "output_token_us", "post_decode_us")
MAX_STEP_TIME_US = 1 << 53  # every integer up to here is exact in float64
SIM_IMPORT = "github.com/inference-sim/inference-sim/sim"


class GoEmitError(ValueError):
    """The program or its fitted values cannot be emitted (the message says why)."""


# ----------------------------------------------------------------- Python mirrors

def _round_half_away(v: float) -> float:
    """Go's math.Round for finite v."""
    f = math.floor(v)
    diff = v - f  # exact for doubles
    if v >= 0:
        return f + 1.0 if diff >= 0.5 else f
    c = math.ceil(v)
    return c - 1.0 if c - v >= 0.5 else c


def go_step_time_us(pred: float) -> int:
    """What the emitted StepTime returns for a prediction `pred` (see module docstring)."""
    try:
        v = float(pred)
    except (TypeError, ValueError, OverflowError):
        return 1
    if v != v:
        return 1
    if math.isinf(v):
        return 1 if v < 0 else MAX_STEP_TIME_US
    t = _round_half_away(v)
    if t < 1:
        return 1
    if t > MAX_STEP_TIME_US:
        return MAX_STEP_TIME_US
    return int(t)


def go_overhead_us(v: float) -> int:
    """What the emitted overhead methods return for a value v in us."""
    v = float(v)
    if v != v or v < 0:
        return 0
    if math.isinf(v):
        return MAX_STEP_TIME_US
    return int(min(_round_half_away(v), MAX_STEP_TIME_US))


# ----------------------------------------------------------------- helpers

def constructor_name(type_name: str) -> str:
    return "New" + type_name


def _lower_first(s: str) -> str:
    return s[0].lower() + s[1:]


def _go_string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _lit(v: float) -> str:
    return format_expr(go_float(v))


def _check_finite(what: str, v: float) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError) as e:
        raise GoEmitError(f"{what} is not a number: {v!r}") from e
    if not math.isfinite(f):
        raise GoEmitError(f"{what} is not finite: {f!r}")
    return f


def _comment_lines(text: str, prefix: str = "// ") -> list[str]:
    out = []
    for raw in text.splitlines():
        line = raw.rstrip()
        out.append((prefix + line).rstrip() if line else prefix.rstrip())
    return out


def _fmt_score(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


_TYPE_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_PKG_RE = re.compile(r"^[a-z][a-z0-9]*$")

# fill_components, mirrored line by line (the Python is in evaluator/components.py)
_FILL_COMPONENTS = """\
	model := &m.arch
	L := model[0]
	h := model[1]
	nq := model[2]
	nkv := model[3]
	hd := model[4]
	ffn := model[5]
	nExp := model[6]
	topK := model[7]
	vocab := model[8]
	tp := model[9]
	flops := model[10]
	bw := model[11]
	nvlink := model[12]
	attnParams := h*(nq*hd) + 2.0*h*(nkv*hd) + (nq*hd)*h
	mlpParams := 3.0 * h * ffn
	tokens := P + D
	var kFlop, active float64
	if nExp > 1.0 {
		kFlop = topK
		active = nExp * (1.0 - math.Pow(1.0-topK/nExp, tokens))
	} else {
		kFlop = 1.0
		active = 1.0
	}
	flopParams := L * (attnParams + kFlop*mlpParams)
	us := 1e6
	out[0] = 2.0 * P * flopParams / tp / flops * us
	if nPrefill > 0.0 {
		out[1] = 4.0 * L * nq * hd * P * (P / nPrefill) / 2.0 / tp / flops * us
	} else {
		out[1] = 0.0
	}
	out[2] = 2.0 * D * flopParams / tp / flops * us
	out[3] = K * 2.0 * L * nkv * hd * 2.0 / tp / bw * us
	if tokens > 0.0 {
		out[4] = 2.0 * (L*(attnParams+active*mlpParams) + 2.0*vocab*h) / tp / bw * us
	} else {
		out[4] = 0.0
	}
	if tp > 1.0 {
		out[5] = 2.0 * L * tokens * h * 2.0 * 2.0 * (tp - 1.0) / tp / nvlink * us
	} else {
		out[5] = 0.0
	}
	out[6] = 2.0 * (nPrefill + D) * vocab * h / tp / flops * us
	out[7] = P
	out[8] = D
	out[9] = B
	out[10] = K
	out[11] = nPrefill
	out[12] = nDecode
	out[13] = L
	out[14] = tp
"""

_EXPECTED_COMPONENTS = ("t_prefill_gemm", "t_prefill_attn", "t_decode_gemm", "t_decode_kv", "t_weights",
                        "t_allreduce", "t_lm_head", "P", "D", "B", "K", "n_prefill", "n_decode", "layers", "tp")
_EXPECTED_MODEL_FIELDS = ("layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn", "n_experts", "top_k",
                          "vocab", "tp", "peak_flops", "hbm_bw", "nvlink_bw")


# ----------------------------------------------------------------- emit

def emit_go(program: Program,
            constants_by_model: Mapping[str, object],
            model_vectors: Mapping[str, object],
            overheads_by_model: Mapping[str, Mapping[str, float]],
            *,
            package: str = "latency",
            interface: str = "blis",
            type_name: str | None = None,
            program_id: str | None = None,
            scores: Mapping[str, object] | None = None,
            caps: tuple[int, int, int] = (30, 3, 10),
            aliases: Mapping[str, str] | None = None) -> str:
    """Go source of a sim.LatencyModel for `program` with per-model fitted values.

    constants_by_model: model -> constants in program.const_names order.
    model_vectors: model -> vector laid out as evaluator.components.MODEL_FIELDS.
    overheads_by_model: model -> {queueing_us, queueing_per_input_token_us,
        output_token_us, post_decode_us}.
    aliases: optional extra names accepted by the constructor, alias -> model (BLIS
        lower-cases --model, e.g. {"meta-llama/llama-2-7b-hf": "llama-2-7b"}).
    Raises GoEmitError when the program exceeds `caps` (operations, conditionals,
    constants) or any input is inconsistent or not finite.
    """
    if tuple(COMPONENTS) != _EXPECTED_COMPONENTS or tuple(MODEL_FIELDS) != _EXPECTED_MODEL_FIELDS:
        raise GoEmitError("evaluator.components changed (COMPONENTS or MODEL_FIELDS); update go_emit.emit's mirror")
    if not isinstance(program, Program):
        raise GoEmitError(f"program must be an evaluator.program.Program, got {type(program).__name__}")
    if interface not in INTERFACES:
        raise GoEmitError(f"interface must be one of {INTERFACES}, got {interface!r}")
    type_name = type_name or "EvolvedLatencyModel"
    if not _TYPE_RE.match(type_name):
        raise GoEmitError(f"type_name {type_name!r} must be an exported ASCII Go identifier")
    if not _PKG_RE.match(package):
        raise GoEmitError(f"package {package!r} must be a lower-case ASCII Go package name")
    max_ops, max_cond, max_consts = caps
    over = program.complexity.within(max_ops, max_cond, max_consts)
    if over is not None:
        raise GoEmitError(f"program exceeds the Go emission cap: {over}")

    models = list(constants_by_model)
    if not models:
        raise GoEmitError("constants_by_model is empty: no model to emit")
    for name in models:
        if not isinstance(name, str) or not name:
            raise GoEmitError(f"model names must be non-empty strings, got {name!r}")
        if name not in model_vectors:
            raise GoEmitError(f"model {name!r} has constants but no model vector")
        if name not in overheads_by_model:
            raise GoEmitError(f"model {name!r} has constants but no overheads")
    extra = (set(model_vectors) | set(overheads_by_model)) - set(models)
    if extra:
        raise GoEmitError(f"models without constants: {sorted(extra)}")
    models.sort()

    n_consts = len(program.const_names)
    consts: dict[str, list[float]] = {}
    vectors: dict[str, list[float]] = {}
    overheads: dict[str, dict[str, float]] = {}
    for name in models:
        cv = np.asarray(constants_by_model[name], dtype=np.float64).ravel()
        if cv.shape[0] != n_consts:
            raise GoEmitError(f"model {name!r}: {cv.shape[0]} constants given, program declares {n_consts} "
                              f"({', '.join(program.const_names)})")
        consts[name] = [_check_finite(f"constant {c} of model {name!r}", v)
                        for c, v in zip(program.const_names, cv)]
        mv = np.asarray(model_vectors[name], dtype=np.float64).ravel()
        if mv.shape[0] != len(MODEL_FIELDS):
            raise GoEmitError(f"model {name!r}: model vector has {mv.shape[0]} entries, expected "
                              f"{len(MODEL_FIELDS)} ({', '.join(MODEL_FIELDS)})")
        vectors[name] = [_check_finite(f"{f} of model {name!r}", v) for f, v in zip(MODEL_FIELDS, mv)]
        oh = overheads_by_model[name]
        missing = [k for k in OVERHEAD_KEYS if k not in oh]
        if missing:
            raise GoEmitError(f"model {name!r}: overheads missing {missing}")
        overheads[name] = {k: _check_finite(f"{k} of model {name!r}", oh[k]) for k in OVERHEAD_KEYS}

    cases: dict[str, list[str]] = {name: [name] for name in models}
    for alias, target in (aliases or {}).items():
        if target not in cases:
            raise GoEmitError(f"alias {alias!r} points at unknown model {target!r}")
        if any(alias in names for names in cases.values()):
            raise GoEmitError(f"alias {alias!r} duplicates a model name or another alias")
        cases[target].append(alias)

    try:
        tp = transpile(program, receiver="m")
    except TranspileError as e:
        raise GoEmitError(str(e)) from e

    consts_type = _lower_first(type_name) + "Constants"
    ctor = constructor_name(type_name)
    cx = program.complexity
    L: list[str] = []
    add = L.append

    # ---- header (a plain comment, not a doc comment: blank line before `package`)
    add("// Code generated by StepEvolve go_emit; DO NOT EDIT.")
    add("//")
    add(f"// {type_name}: an evolved vLLM step-time model for the BLIS simulator.")
    add("//")
    add(f"// Program:    {_oneline(program_id or program.hash)}")
    add(f"// Hash:       {program.hash}")
    add(f"// Complexity: {cx.operations} operations, {cx.conditionals} conditionals, {cx.constants} constants "
        f"(total {cx.total}; cap {max_ops}/{max_cond}/{max_consts})")
    add(f"// Interface:  {interface}")
    add(f"// Models:     {', '.join(models)}")
    if scores:
        add("// Scores:")
        for k, v in scores.items():
            add(f"//   {_oneline(str(k))}: {_oneline(_fmt_score(v))}")
    add("//")
    add("// StepTime mirrors evaluator.components.batch_aggregates and fill_components in float64,")
    add("// then evaluates the program with IEEE semantics as the evaluator's numba kernel does")
    add("// (x/0 is +-Inf, sqrt or log of a negative number is NaN; max/min follow Python's rule).")
    add("// The prediction is rounded half away from zero and clamped to [1, 2^53] us; NaN gives 1.")
    if interface == "legacy5":
        add("// The legacy interface has no PostDecodeFixedOverhead: the fitted post_decode_us values")
        add("// (" + ", ".join(f"{n} {overheads[n]['post_decode_us']:g}" for n in models) + ") are not used.")
    add("//")
    add(f"// Original program (Python, {FUNC_NAME}):")
    add("//")
    L.extend(_comment_lines(program.source.strip("\n"), prefix="//   "))
    add("")
    add(f"package {package}")
    add("")
    add("import (")
    add('\t"fmt"')
    add('\t"math"')
    add("")
    add(f'\t"{SIM_IMPORT}"')
    add(")")
    add("")
    add(f"// Compile-time check that {type_name} implements sim.LatencyModel.")
    add(f"var _ sim.LatencyModel = (*{type_name})(nil)")
    add("")

    # ---- types
    add(f"// {type_name} predicts the step time of one vLLM scheduler step from the running batch.")
    add("// arch holds the model and hardware figures in evaluator.components.MODEL_FIELDS order;")
    add("// consts holds the program's constants and the remaining fields the request-level")
    add("// overheads in microseconds, all fitted per model.")
    fields = [("model", "string"), ("arch", f"[{len(MODEL_FIELDS)}]float64")]
    if n_consts:
        fields.append(("consts", consts_type))
    fields += [("queueingUs", "float64"), ("queueingPerInputTokenUs", "float64"), ("outputTokenUs", "float64")]
    if interface == "blis":
        fields.append(("postDecodeUs", "float64"))
    L.extend(_struct(type_name, fields))
    add("")
    if n_consts:
        add(f"// {consts_type} holds the named constants of the program for one model.")
        L.extend(_struct(consts_type, [(tp.const_fields[c], "float64") for c in program.const_names]))
        add("")

    # ---- constructor
    known = ", ".join(models)
    add(f"// {ctor} returns the model fitted for the named model ({known}).")
    add("// Any other name is an error.")
    add(f"func {ctor}(model string) (*{type_name}, error) {{")
    add(f"\tm := &{type_name}{{model: model}}")
    add("\tswitch model {")
    for name in models:
        add("\tcase " + ", ".join(_go_string(n) for n in cases[name]) + ":")
        add("\t\t// " + ", ".join(MODEL_FIELDS))
        add(f"\t\tm.arch = [{len(MODEL_FIELDS)}]float64{{" + ", ".join(_lit(v) for v in vectors[name]) + "}")
        if n_consts:
            kv = ", ".join(f"{tp.const_fields[c]}: {_lit(v)}" for c, v in zip(program.const_names, consts[name]))
            add(f"\t\tm.consts = {consts_type}{{{kv}}}")
        oh = overheads[name]
        add(f"\t\tm.queueingUs = {_lit(oh['queueing_us'])}")
        add(f"\t\tm.queueingPerInputTokenUs = {_lit(oh['queueing_per_input_token_us'])}")
        add(f"\t\tm.outputTokenUs = {_lit(oh['output_token_us'])}")
        if interface == "blis":
            add(f"\t\tm.postDecodeUs = {_lit(oh['post_decode_us'])}")
    add("\tdefault:")
    add(f"\t\treturn nil, fmt.Errorf(\"{type_name}: no fitted constants for model %q (known: %s)\", model, "
        f"{_go_string(known)})")
    add("\t}")
    add("\treturn m, nil")
    add("}")
    add("")

    # ---- interface methods
    add("// StepTime returns the predicted duration of one scheduler step in microseconds (>= 1).")
    add(f"func (m *{type_name}) StepTime(batch []*sim.Request) int64 {{")
    add("\tP, D, nPrefill, nDecode, B, K := m.aggregates(batch)")
    add(f"\tvar x [{N_COMPONENTS}]float64")
    add("\tm.fillComponents(P, D, nPrefill, nDecode, B, K, &x)")
    add("\treturn m.stepTimeUs(m.predict(&x))")
    add("}")
    add("")
    add("// QueueingTime is the fitted arrival-to-queue delay: a fixed part plus a part per input token.")
    add(f"func (m *{type_name}) QueueingTime(req *sim.Request) int64 {{")
    add("\treturn m.overheadUs(m.queueingUs + m.queueingPerInputTokenUs*float64(len(req.InputTokens)))")
    add("}")
    add("")
    add("// OutputTokenProcessingTime is the fitted per-output-token processing time.")
    add(f"func (m *{type_name}) OutputTokenProcessingTime() int64 {{")
    add("\treturn m.overheadUs(m.outputTokenUs)")
    add("}")
    add("")
    if interface == "blis":
        add("// PostDecodeFixedOverhead is the fitted fixed per-request overhead at completion.")
        add(f"func (m *{type_name}) PostDecodeFixedOverhead() int64 {{")
        add("\treturn m.overheadUs(m.postDecodeUs)")
        add("}")
        add("")
    else:
        add("// SchedulingProcessingTime is not modelled separately (it is part of the step time).")
        add(f"func (m *{type_name}) SchedulingProcessingTime() int64 {{")
        add("\treturn 0")
        add("}")
        add("")
        add("// PreemptionProcessingTime is not modelled separately (it is part of the step time).")
        add(f"func (m *{type_name}) PreemptionProcessingTime() int64 {{")
        add("\treturn 0")
        add("}")
        add("")

    # ---- aggregates and components
    add("// aggregates mirrors evaluator.components.batch_aggregates: a request is in prefill while")
    add("// ProgressIndex < len(InputTokens) (its new tokens count as P), otherwise it decodes (D);")
    add("// K is the KV tokens held after this step in whole 16-token blocks per request.")
    add(f"func (m *{type_name}) aggregates(batch []*sim.Request) (P, D, nPrefill, nDecode, B, K float64) {{")
    add("\tconst blockSize = 16")
    add("\tvar p, d, np, nd, k int64")
    add("\tfor _, req := range batch {")
    add("\t\tnewTokens := int64(req.NumNewTokens)")
    add("\t\tif req.ProgressIndex < int64(len(req.InputTokens)) {")
    add("\t\t\tp += newTokens")
    add("\t\t\tnp++")
    add("\t\t} else {")
    add("\t\t\td += newTokens")
    add("\t\t\tnd++")
    add("\t\t}")
    add("\t\theld := req.ProgressIndex + newTokens")
    add("\t\tblocks := held / blockSize")
    add("\t\tif held%blockSize > 0 {")
    add("\t\t\tblocks++")
    add("\t\t}")
    add("\t\tk += blocks * blockSize")
    add("\t}")
    add("\treturn float64(p), float64(d), float64(np), float64(nd), float64(len(batch)), float64(k)")
    add("}")
    add("")
    add("// fillComponents mirrors evaluator.components.fill_components line by line; out is in")
    add("// COMPONENTS order: " + ", ".join(COMPONENTS) + ".")
    add(f"func (m *{type_name}) fillComponents(P, D, nPrefill, nDecode, B, K float64, out *[{N_COMPONENTS}]float64) {{")
    L.extend(_FILL_COMPONENTS.rstrip("\n").split("\n"))
    add("}")
    add("")

    # ---- the program
    add(f"// predict is the evolved program {FUNC_NAME}, transpiled from the Python in the header.")
    add(f"func (m *{type_name}) predict(x *[{N_COMPONENTS}]float64) float64 {{")
    for py, go in tp.params.items():
        add(f"\t{go} := x[{COMPONENT_INDEX[py]}]")
    for py, go in tp.consts.items():
        add(f"\t{go} := m.consts.{tp.const_fields[py]}")
    L.extend(tp.body)
    add("}")
    add("")
    add("// stepTimeUs rounds a prediction half away from zero and clamps it to [1, 2^53] us; NaN gives 1.")
    add(f"func (m *{type_name}) stepTimeUs(pred float64) int64 {{")
    add("\tconst maxStepTimeUs = 1 << 53")
    add("\tif math.IsNaN(pred) {")
    add("\t\treturn 1")
    add("\t}")
    add("\tt := math.Round(pred)")
    add("\tif t < 1 {")
    add("\t\treturn 1")
    add("\t}")
    add("\tif t > maxStepTimeUs {")
    add("\t\treturn maxStepTimeUs")
    add("\t}")
    add("\treturn int64(t)")
    add("}")
    add("")
    add("// overheadUs rounds an overhead half away from zero; NaN or negative gives 0, at most 2^53 us.")
    add(f"func (m *{type_name}) overheadUs(v float64) int64 {{")
    add("\tconst maxOverheadUs = 1 << 53")
    add("\tif math.IsNaN(v) || v < 0 {")
    add("\t\treturn 0")
    add("\t}")
    add("\tt := math.Round(v)")
    add("\tif t > maxOverheadUs {")
    add("\t\treturn maxOverheadUs")
    add("\t}")
    add("\treturn int64(t)")
    add("}")
    if "pyMax" in tp.helpers:
        add("")
        add("// pyMax is Python's max(a, b): a unless b > a (so a NaN in second place is ignored).")
        add(f"func (m *{type_name}) pyMax(a, b float64) float64 {{")
        add("\tif b > a {")
        add("\t\treturn b")
        add("\t}")
        add("\treturn a")
        add("}")
    if "pyMin" in tp.helpers:
        add("")
        add("// pyMin is Python's min(a, b): a unless b < a (so a NaN in second place is ignored).")
        add(f"func (m *{type_name}) pyMin(a, b float64) float64 {{")
        add("\tif b < a {")
        add("\t\treturn b")
        add("\t}")
        add("\treturn a")
        add("}")
    if "choose" in tp.helpers:
        add("")
        add("// choose is the conditional expression (ifTrue if cond else ifFalse); both values are")
        add("// computed, which is harmless because the arithmetic has no side effects.")
        add(f"func (m *{type_name}) choose(cond bool, ifTrue, ifFalse float64) float64 {{")
        add("\tif cond {")
        add("\t\treturn ifTrue")
        add("\t}")
        add("\treturn ifFalse")
        add("}")
    return "\n".join(L) + "\n"


def _oneline(s: str) -> str:
    return " ".join(s.split())


def _struct(name: str, fields: list[tuple[str, str]]) -> list[str]:
    width = max(len(f) for f, _ in fields)
    return [f"type {name} struct {{"] + [f"\t{f.ljust(width)} {t}" for f, t in fields] + ["}"]
