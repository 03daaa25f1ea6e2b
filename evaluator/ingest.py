"""`evolve ingest` backend: convert a user's own measurements into the ground-truth layout.

Two inputs are understood:

* vLLM OTEL step traces (``traces.json``): OTLP JSON as written by the OpenTelemetry
  collector's file exporter, one ``{"resourceSpans": [...]}`` object per line. Step data
  lives in span events named ``step.BATCH_SUMMARY`` (emitted by the instrumented vLLM fork
  ``inference-sim/vllm``, ``Scheduler._emit_step_batch_summary``; attribute names are the
  ``SpanAttributes.STEP_*/QUEUE_*/BATCH_*/KV_*`` constants of its ``vllm/tracing.py``).
  -> rows of ``steps/steps.parquet`` (:func:`ingest_step_traces`).
* inference-perf's ``per_request_lifecycle_metrics.json`` (a JSON array, one object per
  request: ``start_time``, ``end_time``, ``request``, ``response``, ``info``, ``error``).
  -> rows of ``requests/requests.parquet`` (:func:`ingest_request_lifecycle`).

:func:`write_ground_truth` merges the rows into ``out_dir/steps/steps.parquet`` and
``out_dir/requests/requests.parquet``, replacing rows of the same experiment_id, atomically.

Error policy (see docs/ingest.md): anything that would make a row wrong is fatal and raises
:class:`IngestError` naming file, line and field. Things that are not step or request data
(other spans/events, unknown attributes, blank lines) are ignored and counted; exact duplicate
BATCH_SUMMARY events (exporter retries) are dropped with an :class:`IngestWarning`. The counts
are in ``df.attrs["ingest_stats"]``.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

__all__ = [
    "IngestError",
    "IngestWarning",
    "STEPS_DTYPES",
    "REQUESTS_DTYPES",
    "STEP_ATTRIBUTES",
    "ingest_step_traces",
    "ingest_request_lifecycle",
    "write_ground_truth",
]


class IngestError(ValueError):
    """Malformed input. The message reads ``<file>:<line>: field '<field>': <problem>``."""

    def __init__(self, path: str | os.PathLike, line: int | None, field: str, problem: str):
        self.path = str(path)
        self.line = line
        self.field = field
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: field '{field}': {problem}")


class IngestWarning(UserWarning):
    """Rows were dropped (never silently): the count is in the message and in df.attrs."""


# --------------------------------------------------------------------------------------
# Canonical schemas (identical to the files in /work/shared/data; pandas dtypes after
# pd.read_parquet). "str" is pandas' default string dtype.
# --------------------------------------------------------------------------------------
STEPS_DTYPES: dict[str, str] = {
    "experiment_id": "str",
    "model": "str",
    "workload": "str",
    "tp": "int64",
    "step_id": "Int64",
    "ts_start_ns": "Int64",
    "ts_end_ns": "Int64",
    "duration_us": "Int64",
    "prefill_tokens": "Int64",
    "decode_tokens": "Int64",
    "num_prefill_reqs": "Int64",
    "num_decode_reqs": "Int64",
    "scheduled_tokens": "Int64",
    "running_depth": "Int64",
    "waiting_depth": "Int64",
    "num_finished": "Int64",
    "num_preempted": "Int64",
    "kv_usage_gpu_ratio": "float64",
    "kv_blocks_total_gpu": "Int64",
    "kv_blocks_free_gpu": "Int64",
    "cycle_time_us": "float64",
    "matched_iti_count": "int64",
    "cycle_time_ratio": "float64",
    "next_step_start_delta_us": "float64",
}

REQUESTS_DTYPES: dict[str, str] = {
    "experiment_id": "str",
    "request_index": "int64",
    "arrival_time_us": "int64",
    "input_tokens": "int64",
    "output_tokens": "int64",
    "prefix_group": "str",
    "has_error": "bool",
    "e2e_s": "float64",
    "ttft_s": "float64",
}

# OTEL attribute of a step.BATCH_SUMMARY event -> steps column. All required.
STEP_ATTRIBUTES: dict[str, str] = {
    "step.id": "step_id",
    "step.ts_start_ns": "ts_start_ns",
    "step.ts_end_ns": "ts_end_ns",
    "step.duration_us": "duration_us",
    "batch.prefill_tokens": "prefill_tokens",
    "batch.decode_tokens": "decode_tokens",
    "batch.num_prefill_reqs": "num_prefill_reqs",
    "batch.num_decode_reqs": "num_decode_reqs",
    "batch.scheduled_tokens": "scheduled_tokens",
    "queue.running_depth": "running_depth",
    "queue.waiting_depth": "waiting_depth",
    "batch.num_finished": "num_finished",
    "batch.num_preempted": "num_preempted",
    "kv.usage_gpu_ratio": "kv_usage_gpu_ratio",
    "kv.blocks_total_gpu": "kv_blocks_total_gpu",
    "kv.blocks_free_gpu": "kv_blocks_free_gpu",
}
_FLOAT_ATTRIBUTES = frozenset({"kv.usage_gpu_ratio"})
BATCH_SUMMARY_EVENT = "step.BATCH_SUMMARY"

_INT_RE = re.compile(r"[+-]?\d+")


# --------------------------------------------------------------------------------------
# OTLP attribute values
# --------------------------------------------------------------------------------------
def _describe(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _otlp_int(value: Any) -> int:
    """An OTLP AnyValue holding an integer. intValue is a JSON string (int64) or a number."""
    if not isinstance(value, dict):
        raise ValueError(f"attribute value must be an object, got {_describe(value)}")
    if "intValue" not in value:
        kinds = ", ".join(sorted(value)) or "nothing"
        raise ValueError(f"expected intValue, got {kinds} ({_describe(value)})")
    raw = value["intValue"]
    if isinstance(raw, bool):
        raise ValueError(f"intValue must be an integer, got {_describe(raw)}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and _INT_RE.fullmatch(raw.strip()):
        return int(raw)
    raise ValueError(f"intValue must be an integer or a decimal string, got {_describe(raw)}")


def _otlp_float(value: Any) -> float:
    """An OTLP AnyValue holding a number: doubleValue (number or numeric string) or intValue."""
    if not isinstance(value, dict):
        raise ValueError(f"attribute value must be an object, got {_describe(value)}")
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            raise ValueError(f"doubleValue must be a number, got {_describe(raw)}")
        try:
            out = float(raw)
        except ValueError:
            raise ValueError(f"doubleValue must be a number, got {_describe(raw)}") from None
    elif "intValue" in value:
        out = float(_otlp_int(value))
    else:
        kinds = ", ".join(sorted(value)) or "nothing"
        raise ValueError(f"expected doubleValue, got {kinds} ({_describe(value)})")
    if not math.isfinite(out):
        raise ValueError(f"value must be finite, got {out}")
    return out


# --------------------------------------------------------------------------------------
# Step traces
# --------------------------------------------------------------------------------------
def _iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise IngestError(path, lineno, "<line>", f"not valid UTF-8 ({exc.reason})") from None


def _as_list(obj: Any, path: Path, lineno: int, field: str) -> list:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise IngestError(path, lineno, field, f"must be a JSON array, got {type(obj).__name__}")
    return obj


def _parse_batch_summary(event: dict, path: Path, lineno: int, where: str) -> dict[str, Any]:
    attrs = _as_list(event.get("attributes"), path, lineno, f"{where}.attributes")
    values: dict[str, Any] = {}
    for j, attr in enumerate(attrs):
        if not isinstance(attr, dict) or not isinstance(attr.get("key"), str):
            raise IngestError(path, lineno, f"{where}.attributes[{j}]", "attribute must be an object with a string 'key'")
        values[attr["key"]] = attr.get("value")

    step_hint = ""
    if "step.id" in values:
        with contextlib.suppress(ValueError):
            step_hint = f" (step.id={_otlp_int(values['step.id'])})"

    row: dict[str, Any] = {}
    for key, column in STEP_ATTRIBUTES.items():
        if key not in values:
            raise IngestError(path, lineno, key, f"missing required attribute of {BATCH_SUMMARY_EVENT} event{step_hint}")
        try:
            row[column] = _otlp_float(values[key]) if key in _FLOAT_ATTRIBUTES else _otlp_int(values[key])
        except ValueError as exc:
            raise IngestError(path, lineno, key, f"{exc}{step_hint}") from None

    def fail(field: str, problem: str) -> IngestError:
        return IngestError(path, lineno, field, problem + step_hint)

    for key, column in STEP_ATTRIBUTES.items():
        if key not in _FLOAT_ATTRIBUTES and row[column] < 0:
            raise fail(key, f"must be >= 0, got {row[column]}")
    if row["ts_end_ns"] < row["ts_start_ns"]:
        raise fail(
            "step.ts_end_ns",
            f"negative duration: ts_end_ns {row['ts_end_ns']} < ts_start_ns {row['ts_start_ns']}",
        )
    expected = (row["ts_end_ns"] - row["ts_start_ns"]) // 1000
    if abs(row["duration_us"] - expected) > 1:
        raise fail(
            "step.duration_us",
            f"{row['duration_us']} disagrees with (ts_end_ns - ts_start_ns)//1000 = {expected}",
        )
    if not 0.0 <= row["kv_usage_gpu_ratio"] <= 1.0:
        raise fail("kv.usage_gpu_ratio", f"must be in [0, 1], got {row['kv_usage_gpu_ratio']}")
    if row["kv_blocks_free_gpu"] > row["kv_blocks_total_gpu"]:
        raise fail(
            "kv.blocks_free_gpu",
            f"{row['kv_blocks_free_gpu']} free blocks > kv.blocks_total_gpu {row['kv_blocks_total_gpu']}",
        )
    return row


def ingest_step_traces(
    traces_path: str | os.PathLike,
    experiment_id: str,
    model: str,
    workload: str,
    tp: int,
) -> pd.DataFrame:
    """Read ``step.BATCH_SUMMARY`` events from an OTLP JSON-lines ``traces.json``.

    Returns one row per step, sorted by step_id, with exactly the columns and dtypes of
    ``steps/steps.parquet``. Columns the trace does not carry: ``cycle_time_us`` and
    ``cycle_time_ratio`` are NaN, ``matched_iti_count`` is 0 (non-nullable int64 in the
    schema; 0 matched inter-token intervals is what NaN cycle_time_us means there).
    ``next_step_start_delta_us`` = (ts_start_ns(step_id+1) - ts_start_ns(step_id)) / 1000
    when both steps are present, else NaN. Raises :class:`IngestError` on malformed input.
    """
    path = Path(traces_path)
    if not isinstance(experiment_id, str) or not experiment_id:
        raise ValueError("experiment_id must be a non-empty string")
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise ValueError(f"tp must be a positive integer, got {tp!r}")

    stats = {
        "lines": 0,
        "blank_lines": 0,
        "spans": 0,
        "spans_without_batch_summary": 0,
        "other_events": 0,
        "batch_summary_events": 0,
        "duplicate_events_dropped": 0,
    }
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    for lineno, line in _iter_lines(path):
        stats["lines"] += 1
        if not line.strip():
            stats["blank_lines"] += 1
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(
                path, lineno, "<json>", f"invalid JSON ({exc.msg} at column {exc.colno}); truncated or corrupted line"
            ) from None
        if not isinstance(obj, dict):
            raise IngestError(path, lineno, "<json>", f"each line must be a JSON object, got {type(obj).__name__}")
        for r, rspan in enumerate(_as_list(obj.get("resourceSpans"), path, lineno, "resourceSpans")):
            if not isinstance(rspan, dict):
                raise IngestError(path, lineno, f"resourceSpans[{r}]", "must be an object")
            scope_key = "scopeSpans" if "scopeSpans" in rspan else "instrumentationLibrarySpans"
            for s, sspan in enumerate(_as_list(rspan.get(scope_key), path, lineno, f"resourceSpans[{r}].{scope_key}")):
                if not isinstance(sspan, dict):
                    raise IngestError(path, lineno, f"resourceSpans[{r}].{scope_key}[{s}]", "must be an object")
                spans_field = f"resourceSpans[{r}].{scope_key}[{s}].spans"
                for k, span in enumerate(_as_list(sspan.get("spans"), path, lineno, spans_field)):
                    if not isinstance(span, dict):
                        raise IngestError(path, lineno, f"{spans_field}[{k}]", "must be an object")
                    stats["spans"] += 1
                    found = False
                    events_field = f"{spans_field}[{k}].events"
                    for e, event in enumerate(_as_list(span.get("events"), path, lineno, events_field)):
                        if not isinstance(event, dict) or event.get("name") != BATCH_SUMMARY_EVENT:
                            stats["other_events"] += 1
                            continue
                        found = True
                        rows.append(_parse_batch_summary(event, path, lineno, f"{events_field}[{e}]"))
                        lines.append(lineno)
                    if not found:
                        stats["spans_without_batch_summary"] += 1
    stats["batch_summary_events"] = len(rows)
    if not rows:
        raise IngestError(path, None, BATCH_SUMMARY_EVENT, "no step.BATCH_SUMMARY events in the file")

    # Sort by step id (exporters batch spans out of order), then resolve duplicates.
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["step_id"], lines[i]))
    kept: list[int] = []
    for i in order:
        if kept and rows[kept[-1]]["step_id"] == rows[i]["step_id"]:
            if rows[kept[-1]] == rows[i]:
                stats["duplicate_events_dropped"] += 1
                continue
            raise IngestError(
                path,
                lines[i],
                "step.id",
                f"step.id={rows[i]['step_id']} appears twice with different attributes "
                f"(first on line {lines[kept[-1]]}); one traces file must come from one vLLM engine",
            )
        kept.append(i)
    for prev, cur in zip(kept, kept[1:]):
        if rows[cur]["ts_start_ns"] <= rows[prev]["ts_start_ns"]:
            raise IngestError(
                path,
                lines[cur],
                "step.ts_start_ns",
                f"non-monotonic: step.id={rows[cur]['step_id']} starts at {rows[cur]['ts_start_ns']}, "
                f"not after step.id={rows[prev]['step_id']} (line {lines[prev]}) at {rows[prev]['ts_start_ns']}",
            )

    df = pd.DataFrame([rows[i] for i in kept])
    step = df["step_id"].to_numpy(dtype=np.int64)
    start = df["ts_start_ns"].to_numpy(dtype=np.int64)
    delta = np.full(len(df), np.nan)
    if len(df) > 1:
        consecutive = step[1:] == step[:-1] + 1
        # int64 difference first (exact), then to µs as float, as in PROVENANCE.
        delta[:-1] = np.where(consecutive, (start[1:] - start[:-1]) / 1000.0, np.nan)
    df["experiment_id"] = experiment_id
    df["model"] = model
    df["workload"] = workload
    df["tp"] = int(tp)
    df["cycle_time_us"] = np.nan
    df["matched_iti_count"] = 0
    df["cycle_time_ratio"] = np.nan
    df["next_step_start_delta_us"] = delta
    df = _conform(df, STEPS_DTYPES, "steps")
    df.attrs["ingest_stats"] = stats
    if stats["duplicate_events_dropped"]:
        warnings.warn(
            f"{path}: dropped {stats['duplicate_events_dropped']} exact duplicate {BATCH_SUMMARY_EVENT} events",
            IngestWarning,
            stacklevel=2,
        )
    return df


# --------------------------------------------------------------------------------------
# inference-perf per-request lifecycle file
# --------------------------------------------------------------------------------------
def _iter_json_records(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield (line of the record's first character, record) from a JSON array file
    (inference-perf writes ``json.dumps(records, indent=2)``) or a JSON-lines file."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise IngestError(path, line, "<json>", f"not valid UTF-8 ({exc.reason})") from None
    decoder = json.JSONDecoder()
    n = len(text)
    pos = 0
    line = 1

    def skip_ws(p: int) -> int:
        while p < n and text[p] in " \t\r\n":
            p += 1
        return p

    def advance(to: int) -> None:
        nonlocal pos, line
        line += text.count("\n", pos, to)
        pos = to

    advance(skip_ws(0))
    if pos >= n:
        raise IngestError(path, line, "<json>", "empty file")
    if text[pos] != "[":  # JSON lines
        for lineno, raw in enumerate(text.split("\n"), start=1):
            if not raw.strip():
                continue
            try:
                yield lineno, json.loads(raw)
            except json.JSONDecodeError as exc:
                raise IngestError(path, lineno, "<json>", f"invalid JSON ({exc.msg} at column {exc.colno})") from None
        return
    advance(skip_ws(pos + 1))
    if pos < n and text[pos] == "]":
        advance(skip_ws(pos + 1))
    else:
        while True:
            try:
                obj, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise IngestError(
                    path, exc.lineno, "<json>", f"invalid JSON ({exc.msg} at column {exc.colno}); truncated file?"
                ) from None
            yield line, obj
            advance(skip_ws(end))
            if pos < n and text[pos] == ",":
                advance(skip_ws(pos + 1))
                continue
            if pos < n and text[pos] == "]":
                advance(skip_ws(pos + 1))
                break
            problem = "unexpected end of file; truncated file?" if pos >= n else f"expected ',' or ']', got {text[pos]!r}"
            raise IngestError(path, line, "<json>", f"invalid JSON ({problem})")
    if pos < n:
        raise IngestError(path, line, "<json>", "extra data after the top-level JSON array")


def _number(rec: dict, key: str, path: Path, line: int, field: str, required: bool = True) -> float | None:
    if key not in rec or rec[key] is None:
        if required:
            raise IngestError(path, line, field, "missing required field")
        return None
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise IngestError(path, line, field, f"must be a number, got {_describe(v)}")
    if not math.isfinite(v):
        raise IngestError(path, line, field, f"must be finite, got {v}")
    return float(v)


def _count(container: dict, key: str, path: Path, line: int, field: str) -> int | None:
    if key not in container or container[key] is None:
        return None
    v = container[key]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise IngestError(path, line, field, f"must be an integer, got {_describe(v)}")
    if v < 0:
        raise IngestError(path, line, field, f"must be >= 0, got {v}")
    return v


def _sub(container: dict, key: str, path: Path, line: int, field: str) -> dict:
    v = container.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise IngestError(path, line, field, f"must be an object, got {_describe(v)}")
    return v


def _parse_lifecycle_record(rec: Any, idx: int, path: Path, line: int) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise IngestError(path, line, f"[{idx}]", f"request record must be an object, got {type(rec).__name__}")
    start = _number(rec, "start_time", path, line, "start_time")
    end = _number(rec, "end_time", path, line, "end_time")
    if end < start:
        raise IngestError(path, line, "end_time", f"negative duration: end_time {end} < start_time {start}")

    if "error" not in rec:
        raise IngestError(path, line, "error", "missing required field (null for a successful request)")
    error = rec["error"]
    if error is not None and not isinstance(error, (dict, str)):
        raise IngestError(path, line, "error", f"must be null, an object or a string, got {_describe(error)}")
    has_error = bool(error)  # null, "" and {} mean success

    if "info" not in rec or rec["info"] is None:
        if not has_error:
            raise IngestError(path, line, "info", "missing required field for a successful request")
        info: dict = {}
    elif not isinstance(rec["info"], dict):
        raise IngestError(path, line, "info", f"must be an object, got {_describe(rec['info'])}")
    else:
        info = rec["info"]

    # inference-perf <= v0.4: info = {input_tokens, output_tokens, output_token_times, ...}.
    # Later versions nest: info.request_metrics.text.input_tokens and
    # info.response_metrics.{output_tokens, output_token_times} (info.input_tokens kept).
    req_m = _sub(info, "request_metrics", path, line, "info.request_metrics")
    resp_m = _sub(info, "response_metrics", path, line, "info.response_metrics")
    text_m = _sub(req_m, "text", path, line, "info.request_metrics.text")
    input_tokens = _count(info, "input_tokens", path, line, "info.input_tokens")
    if input_tokens is None:
        input_tokens = _count(text_m, "input_tokens", path, line, "info.request_metrics.text.input_tokens")
    output_tokens = _count(info, "output_tokens", path, line, "info.output_tokens")
    if output_tokens is None:
        output_tokens = _count(resp_m, "output_tokens", path, line, "info.response_metrics.output_tokens")
    if "output_token_times" in info:
        times_field, times = "info.output_token_times", info["output_token_times"]
    else:
        times_field, times = "info.response_metrics.output_token_times", resp_m.get("output_token_times")
    if times is None:
        times = []
    if not isinstance(times, list):
        raise IngestError(path, line, times_field, f"must be an array of numbers, got {_describe(times)}")
    for j, t in enumerate(times):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise IngestError(path, line, f"{times_field}[{j}]", f"must be a finite number, got {_describe(t)}")

    if not has_error:
        if input_tokens is None:
            raise IngestError(path, line, "info.input_tokens", "missing required field for a successful request")
        if output_tokens is None:
            raise IngestError(path, line, "info.output_tokens", "missing required field for a successful request")
        for j in range(1, len(times)):
            if times[j] < times[j - 1]:
                raise IngestError(
                    path, line, f"{times_field}[{j}]", f"non-monotonic token timestamps: {times[j]} < {times[j - 1]}"
                )
        if times and times[0] < start:
            raise IngestError(path, line, f"{times_field}[0]", f"first token {times[0]} before start_time {start}")
        if times and times[0] > end:
            raise IngestError(
                path, line, f"{times_field}[0]", f"e2e < ttft: first token {times[0]} after end_time {end}"
            )
        if times and times[-1] > end:
            raise IngestError(
                path, line, f"{times_field}[{len(times) - 1}]", f"last token {times[-1]} after end_time {end}"
            )

    # TTFT as inference-perf defines it (reportgen summarize_requests): first streamed
    # timestamp - start_time, only for successful requests with more than one timestamp.
    ttft = float(times[0]) - start if (not has_error and len(times) > 1) else math.nan
    if has_error and not input_tokens:
        # no reply: the failed-request form the reader keeps as load (docs/failed_requests.md)
        output_tokens = 0
    return {
        "start": start,
        "input_tokens": input_tokens or 0,
        "output_tokens": output_tokens or 0,
        "has_error": has_error,
        "e2e_s": end - start,
        "ttft_s": ttft,
    }


def ingest_request_lifecycle(
    path: str | os.PathLike,
    experiment_id: str,
    t0: float | None = None,
) -> pd.DataFrame:
    """Convert inference-perf's ``per_request_lifecycle_metrics.json`` into requests rows.

    ``request_index`` is the send order (stable sort by ``start_time``), ``arrival_time_us``
    = round((start_time - t0) * 1e6) with ``t0`` the first start_time unless given (same
    clock as start_time: the client's ``time.perf_counter()`` seconds), ``e2e_s`` =
    end_time - start_time, ``ttft_s`` = output_token_times[0] - start_time (NaN for failed
    or non-streamed requests), ``has_error`` = error is set, ``prefix_group`` = "" (the
    file does not say which shared prefix a prompt used). Raises :class:`IngestError`.
    """
    path = Path(path)
    if not isinstance(experiment_id, str) or not experiment_id:
        raise ValueError("experiment_id must be a non-empty string")
    rows = []
    for i, (line, rec) in enumerate(_iter_json_records(path)):
        try:
            rows.append(_parse_lifecycle_record(rec, i, path, line))
        except IngestError as exc:
            raise IngestError(exc.path, exc.line, exc.field, f"{exc.problem} (request record {i})") from None
    if not rows:
        raise IngestError(path, None, "<json>", "no request records in the file")
    starts = np.array([r["start"] for r in rows], dtype=np.float64)
    origin = float(starts.min()) if t0 is None else float(t0)
    if not math.isfinite(origin):
        raise ValueError(f"t0 must be finite, got {t0!r}")
    if starts.min() < origin:
        raise IngestError(path, None, "start_time", f"a request starts at {starts.min()}, before t0={origin}")
    order = np.argsort(starts, kind="stable")
    df = pd.DataFrame([rows[i] for i in order])
    df["experiment_id"] = experiment_id
    df["request_index"] = np.arange(len(df), dtype=np.int64)
    df["arrival_time_us"] = np.rint((df["start"].to_numpy() - origin) * 1e6).astype(np.int64)
    df["prefix_group"] = ""
    df = _conform(df.drop(columns="start"), REQUESTS_DTYPES, "requests")
    df.attrs["ingest_stats"] = {
        "records": len(df),
        "failed": int(df["has_error"].sum()),
        "successful_without_ttft": int((~df["has_error"] & df["ttft_s"].isna()).sum()),
    }
    return df


# --------------------------------------------------------------------------------------
# Writing the ground-truth directory
# --------------------------------------------------------------------------------------
def _conform(df: pd.DataFrame, dtypes: dict[str, str], table: str) -> pd.DataFrame:
    """Exactly the canonical columns, in order, with the canonical dtypes."""
    missing = [c for c in dtypes if c not in df.columns]
    extra = [c for c in df.columns if c not in dtypes]
    if missing or extra:
        raise ValueError(f"{table} table: missing columns {missing}, unexpected columns {extra}")
    out = df[list(dtypes)].copy()
    for col, dtype in dtypes.items():
        if str(out[col].dtype) != dtype:
            try:
                out[col] = out[col].astype(dtype)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{table} table: column {col!r} cannot be converted to {dtype}: {exc}") from None
    if out["experiment_id"].isna().any() or (out["experiment_id"] == "").any():
        raise ValueError(f"{table} table: experiment_id must be set on every row")
    return out.reset_index(drop=True)


@contextlib.contextmanager
def _dir_lock(directory: Path) -> Iterator[None]:
    """Serialise concurrent writers of one directory (POSIX flock on the directory itself)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _merge_write(new: pd.DataFrame, target: Path, dtypes: dict[str, str], table: str) -> Path:
    new = _conform(new, dtypes, table)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _dir_lock(target.parent):
        if target.exists():
            old = _conform(pd.read_parquet(target), dtypes, f"existing {target}")
            replaced = set(new["experiment_id"].unique())
            old = old[~old["experiment_id"].isin(replaced)]
            merged = pd.concat([old, new], ignore_index=True) if len(old) else new
        else:
            merged = new
        merged = _conform(merged, dtypes, table)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=".parquet.tmp")
        os.close(fd)
        try:
            merged.to_parquet(tmp_name, index=False)
            with open(tmp_name, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp_name, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise
    return target


def write_ground_truth(
    steps_df: pd.DataFrame | None,
    requests_df: pd.DataFrame | None,
    out_dir: str | os.PathLike,
) -> dict[str, Path]:
    """Merge rows into ``out_dir/steps/steps.parquet`` and ``out_dir/requests/requests.parquet``.

    Rows of every experiment_id present in the new frame replace that experiment's old rows;
    other experiments' rows are kept as they were. Each file is written to a temporary file
    in the same directory and renamed over the target (atomic on POSIX); concurrent writers
    are serialised with a lock on the target directory. Returns {"steps"|"requests": path}.
    """
    if steps_df is None and requests_df is None:
        raise ValueError("nothing to write: both steps_df and requests_df are None")
    out = Path(out_dir)
    written: dict[str, Path] = {}
    if steps_df is not None:
        written["steps"] = _merge_write(steps_df, out / "steps" / "steps.parquet", STEPS_DTYPES, "steps")
    if requests_df is not None:
        written["requests"] = _merge_write(
            requests_df, out / "requests" / "requests.parquet", REQUESTS_DTYPES, "requests"
        )
    return written
