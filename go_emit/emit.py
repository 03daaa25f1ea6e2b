"""Emit one self-contained Go file implementing BLIS's sim.LatencyModel for a program.

    src = emit_go(program, constants_by_model, model_vectors, overheads_by_model)

The file (package `package`, imports only fmt, math, strings and the BLIS `sim` package) defines

    type EvolvedLatencyModel struct{ ... }               // name from type_name
    func NewEvolvedLatencyModel(model string) (*EvolvedLatencyModel, error)
    var _ sim.LatencyModel = (*EvolvedLatencyModel)(nil)

and the methods of the chosen interface:

    "blis"     StepTime, QueueingTime, OutputTokenProcessingTime, PostDecodeFixedOverhead
    "legacy5"  StepTime, QueueingTime, OutputTokenProcessingTime,
               SchedulingProcessingTime (0), PreemptionProcessingTime (0)

StepTime = aggregates (mirror of evaluator.components.batch_aggregates) -> fillComponents
(generated from evaluator.component_table like the numba fill_components, see
go_emit.components_go) -> predict (the transpiled program, see go_emit.transpile) ->
stepTimeUs. The integer conversions are mirrored in
Python by `go_step_time_us` and `go_overhead_us`:

    step time   NaN -> 1; otherwise rounded half away from zero (math.Round) and clamped
                to [1, 2^53] us (so -Inf -> 1, +Inf -> 2^53).
    overheads   QueueingTime = queueing_us + queueing_per_input_token_us * len(InputTokens);
                NaN or negative -> 0; otherwise rounded half away from zero, capped at 2^53.

All package-level names derive from type_name, so several emitted files can share a
package; helpers are methods of the type. The fixed Go text is the template
go_emit/templates/latency_model.go.tmpl (package data); this module checks the inputs and
formats the values it is filled with. For an archived program use go_emit.emit_record.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import jinja2
import numpy as np

from evaluator.components import BLOCK_SIZE, COMPONENT_INDEX, COMPONENTS, MEASURED_NAMES, MODEL_FIELDS, N_COMPONENTS
from evaluator.objectives import Caps
from evaluator.program import FUNC_NAME, Program

from .components_go import go_components
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


_TEMPLATE = jinja2.Environment(
    loader=jinja2.PackageLoader("go_emit", "templates"), trim_blocks=True, lstrip_blocks=True,
    keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False,
).get_template("latency_model.go.tmpl")

_TYPE_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_PKG_RE = re.compile(r"^[a-z][a-z0-9]*$")

# ----------------------------------------------------------------- emit

@dataclass(frozen=True)
class _ModelValues:
    """Checked per-model values, models sorted; cases: model -> the names its case accepts."""
    models: list[str]
    consts: dict[str, list[float]]
    vectors: dict[str, list[float]]
    overheads: dict[str, dict[str, float]]
    cases: dict[str, list[str]]
    tables: dict[str, list[float]]  # kernel tables per model, only for programs reading measured components


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
            caps: Caps = Caps(),
            aliases: Mapping[str, str] | None = None,
            coverage: list[str] | None = None) -> str:
    """Go source of a sim.LatencyModel for `program` with per-model fitted values.

    coverage: lines saying where the model holds (evaluator.coverage), for the header comment.

    constants_by_model: model -> constants in program.const_names order.
    model_vectors: model -> vector laid out as evaluator.components.MODEL_FIELDS, then the model's
        kernel tables (Experiment.model_vec); the tables are emitted only if the program reads a
        measured component, and are then required.
    overheads_by_model: model -> {queueing_us, queueing_per_input_token_us,
        output_token_us, post_decode_us}.
    aliases: optional extra names accepted by the constructor, alias -> model, e.g.
        {"meta-llama/Llama-2-7b-hf": "llama-2-7b"}. The constructor compares names without
        case (BLIS lower-cases --model), so every model answers to any case of its names.
    Raises GoEmitError when the program exceeds `caps` (operations, conditionals,
    constants) or any input is inconsistent or not finite.
    """
    type_name = type_name or "EvolvedLatencyModel"
    _check_program(program, package, interface, type_name, caps)
    values = _model_values(program, constants_by_model, model_vectors, overheads_by_model, aliases)
    try:
        tp = transpile(program, receiver="m")
    except TranspileError as e:
        raise GoEmitError(str(e)) from e

    consts_type = _lower_first(type_name) + "Constants"
    fields = [("model", "string"), ("fitted", "bool"), ("arch", f"[{len(MODEL_FIELDS)}]float64")]
    if values.tables:
        fields.append(("tables", "[]float64"))
    if program.const_names:
        fields.append(("consts", consts_type))
    fields += [("queueingUs", "float64"), ("queueingPerInputTokenUs", "float64"), ("outputTokenUs", "float64")]
    if interface == "blis":
        fields.append(("postDecodeUs", "float64"))
    cases = []
    for name in values.models:
        case = {"names": ", ".join(_go_string(n) for n in values.cases[name]),
                "arch": ", ".join(_lit(v) for v in values.vectors[name]),
                "consts": ", ".join(f"{tp.const_fields[c]}: {_lit(v)}"
                                    for c, v in zip(program.const_names, values.consts[name]))}
        case.update({k: _lit(v) for k, v in values.overheads[name].items()})
        case["tables"] = _wrapped([_lit(v) for v in values.tables.get(name, [])], "\t\t\t")
        cases.append(case)
    predict = [f"\t{go} := x[{COMPONENT_INDEX[py]}]" for py, go in tp.params.items()]
    predict += [f"\t{go} := m.consts.{tp.const_fields[py]}" for py, go in tp.consts.items()]
    consts_struct = _struct(consts_type, [(tp.const_fields[c], "float64") for c in program.const_names]) \
        if program.const_names else []
    known = ", ".join(values.models)
    return _TEMPLATE.render(
        header=_header(program, values, type_name, interface, program_id, scores, caps, coverage),
        package=package, sim_import=SIM_IMPORT, T=type_name, interface=interface,
        struct=_struct(type_name, fields), consts_type=consts_type, consts_struct=consts_struct,
        ctor=constructor_name(type_name), known=known, known_go=_go_string(known), cases=cases,
        model_fields=", ".join(MODEL_FIELDS), n_fields=len(MODEL_FIELDS), n_components=N_COMPONENTS,
        components=", ".join(COMPONENTS), block_size=BLOCK_SIZE,
        fill=go_components("m", type_name, measured=bool(values.tables)),
        func_name=FUNC_NAME, predict=predict + tp.body, helpers=tp.helpers)


def _check_program(program: Program, package: str, interface: str, type_name: str, caps: Caps) -> None:
    if not isinstance(program, Program):
        raise GoEmitError(f"program must be an evaluator.program.Program, got {type(program).__name__}")
    if interface not in INTERFACES:
        raise GoEmitError(f"interface must be one of {INTERFACES}, got {interface!r}")
    if not _TYPE_RE.match(type_name):
        raise GoEmitError(f"type_name {type_name!r} must be an exported ASCII Go identifier")
    if not _PKG_RE.match(package):
        raise GoEmitError(f"package {package!r} must be a lower-case ASCII Go package name")
    if not isinstance(caps, Caps):
        raise GoEmitError(f"caps must be an evaluator.objectives.Caps, got {type(caps).__name__}")
    over = program.complexity.within(*caps.as_tuple())
    if over is not None:
        raise GoEmitError(f"program exceeds the Go emission cap: {over}")


def _model_values(program: Program, constants_by_model: Mapping[str, object], model_vectors: Mapping[str, object],
                  overheads_by_model: Mapping[str, Mapping[str, float]],
                  aliases: Mapping[str, str] | None) -> _ModelValues:
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
    tables: dict[str, list[float]] = {}
    uses_measured = MEASURED_NAMES.intersection(program.params)
    for name in models:
        cv = np.asarray(constants_by_model[name], dtype=np.float64).ravel()
        if cv.shape[0] != n_consts:
            raise GoEmitError(f"model {name!r}: {cv.shape[0]} constants given, program declares {n_consts} "
                              f"({', '.join(program.const_names)})")
        consts[name] = [_check_finite(f"constant {c} of model {name!r}", v)
                        for c, v in zip(program.const_names, cv)]
        mv = np.asarray(model_vectors[name], dtype=np.float64).ravel()
        if mv.shape[0] < len(MODEL_FIELDS):
            raise GoEmitError(f"model {name!r}: model vector has {mv.shape[0]} entries, expected "
                              f"{len(MODEL_FIELDS)} ({', '.join(MODEL_FIELDS)}) and optionally kernel tables")
        vectors[name] = [_check_finite(f"{f} of model {name!r}", v) for f, v in zip(MODEL_FIELDS, mv)]
        if uses_measured:
            if mv.shape[0] == len(MODEL_FIELDS):
                raise GoEmitError(f"model {name!r}: the program reads measured components "
                                  f"({', '.join(sorted(uses_measured))}) but the model has no kernel tables")
            tables[name] = [_check_finite(f"kernel table entry {i} of model {name!r}", v)
                            for i, v in enumerate(mv[len(MODEL_FIELDS):])]
        oh = overheads_by_model[name]
        missing = [k for k in OVERHEAD_KEYS if k not in oh]
        if missing:
            raise GoEmitError(f"model {name!r}: overheads missing {missing}")
        overheads[name] = {k: _check_finite(f"{k} of model {name!r}", oh[k]) for k in OVERHEAD_KEYS}

    return _ModelValues(models, consts, vectors, overheads, _name_cases(models, aliases), tables)


def _name_cases(models: list[str], aliases: Mapping[str, str] | None) -> dict[str, list[str]]:
    """model -> the lower-case names its switch case accepts (the constructor lower-cases its
    argument, so any case of a name works); an alias equal to a name it already has is dropped."""
    cases: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for name in models:
        key = name.lower()
        if key in owner:
            raise GoEmitError(f"models {owner[key]!r} and {name!r} differ only in case")
        owner[key] = name
        cases[name] = [key]
    for alias, target in (aliases or {}).items():
        if not isinstance(alias, str) or not alias.strip():
            raise GoEmitError(f"alias names must be non-empty strings, got {alias!r}")
        if target not in cases:
            raise GoEmitError(f"alias {alias!r} points at unknown model {target!r} "
                              f"(known: {', '.join(models)})")
        key = alias.strip().lower()
        if key in owner:
            if owner[key] != target:
                raise GoEmitError(f"alias {alias!r} -> {target!r} clashes with {owner[key]!r}")
            continue
        owner[key] = target
        cases[target].append(key)
    return cases


def _wrapped(items: list[str], indent: str, per_line: int = 6) -> list[str]:
    """A long Go literal list as lines of `per_line` items, each ending in a comma."""
    return [indent + ", ".join(items[i:i + per_line]) + "," for i in range(0, len(items), per_line)]


def _header(program: Program, values: _ModelValues, type_name: str, interface: str, program_id: str | None,
            scores: Mapping[str, object] | None, caps: Caps, coverage: list[str] | None = None) -> list[str]:
    """The file's leading comment: provenance, scores, semantics and the original Python."""
    cx = program.complexity
    lines = ["// Code generated by StepEvolve go_emit; DO NOT EDIT.",
             "//",
             f"// {type_name}: an evolved vLLM step-time model for the BLIS simulator.",
             "//",
             f"// Program:    {_oneline(program_id or program.hash)}",
             f"// Hash:       {program.hash}",
             f"// Complexity: {cx.operations} operations, {cx.conditionals} conditionals, {cx.constants} constants "
             f"(total {cx.total}; cap {caps.ops}/{caps.conditionals}/{caps.constants})",
             f"// Interface:  {interface}",
             f"// Models:     {', '.join(values.models)}"]
    if scores:
        lines.append("// Scores:")
        lines += [f"//   {_oneline(str(k))}: {_oneline(_fmt_score(v))}" for k, v in scores.items()]
    if coverage:
        lines.append("// Coverage:")
        lines += [f"//   {_oneline(c)}" for c in coverage]
    lines += ["//",
              "// StepTime mirrors evaluator.components.batch_aggregates and fill_components in float64,",
              "// then evaluates the program with IEEE semantics as the evaluator's numba kernel does",
              "// (x/0 is +-Inf, sqrt or log of a negative number is NaN; max/min follow Python's rule).",
              "// The prediction is rounded half away from zero and clamped to [1, 2^53] us; NaN gives 1."]
    if interface == "legacy5":
        lines += ["// The legacy interface has no PostDecodeFixedOverhead: the fitted post_decode_us values",
                  "// (" + ", ".join(f"{n} {values.overheads[n]['post_decode_us']:g}" for n in values.models)
                  + ") are not used."]
    lines += ["//", f"// Original program (Python, {FUNC_NAME}):", "//"]
    return lines + _comment_lines(program.source.strip("\n"), prefix="//   ")


def _oneline(s: str) -> str:
    return " ".join(s.split())


def _struct(name: str, fields: list[tuple[str, str]]) -> list[str]:
    width = max(len(f) for f, _ in fields)
    return [f"type {name} struct {{"] + [f"\t{f.ljust(width)} {t}" for f, t in fields] + ["}"]
