"""`evolve ingest` backend: convert a user's own measurements into the ground-truth layout.

:func:`ingest_run` takes the files of one run in any of FORMATS (detected from content:
the two below, plus guidellm reports, ``vllm bench serve --save-detailed`` results and
upstream vLLM ``llm_request`` spans) and writes the whole layout, experiments/<id>/ included
(docs/ingest.md). The two original readers:

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
import yaml

from evaluator.data import (estimate_kv_blocks, load_default_table, model_short_name, per_token_from_reported,
                            per_token_time, read_arch)
from evaluator.model_configs import ModelConfigError, read_arch_file, shipped_config_path, shipped_models

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
    if isinstance(raw, str) and _INT_RE.fullmatch(raw.strip()):
        raw = int(raw)
    if isinstance(raw, int):
        if not -2**63 <= raw < 2**63:  # OTLP's intValue is an int64
            raise ValueError(f"intValue must fit an int64, got an integer of {len(str(abs(raw)))} digits")
        return raw
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
    for lineno, field, span in _iter_spans(path, stats):
        found = False
        events_field = f"{field}.events"
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
    if isinstance(v, int) and abs(v) > 1e300:  # beyond any float (math.isfinite would overflow)
        raise IngestError(path, line, field, f"must be finite, got an integer of {len(str(abs(v)))} digits")
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
    if v > 2**53:  # a count no benchmark reaches; beyond it the int64 columns overflow
        raise IngestError(path, line, field, f"must be at most 2^53, got an integer of {len(str(v))} digits")
    return v


def _sub(container: dict, key: str, path: Path, line: int, field: str) -> dict:
    v = container.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise IngestError(path, line, field, f"must be an object, got {_describe(v)}")
    return v


def _parse_lifecycle_record(rec: Any, idx: int, path: Path, line: int, client_ttft: bool = False) -> dict[str, Any]:
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
    if client_ttft and not has_error and len(times) <= 1:
        # what the client saw: its only timestamp, else (not streamed) the whole reply at the end
        ttft = (float(times[0]) if times else end) - start
    if has_error and not input_tokens:
        # no reply: the failed-request form the reader keeps as load (docs/failed_requests.md)
        output_tokens = 0
    return {
        "start": start,
        "few_times": len(times) <= 1,
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
    client_ttft: bool = False,
) -> pd.DataFrame:
    """Convert inference-perf's ``per_request_lifecycle_metrics.json`` into requests rows.

    ``request_index`` is the send order (stable sort by ``start_time``), ``arrival_time_us``
    = round((start_time - t0) * 1e6) with ``t0`` the first start_time unless given (same
    clock as start_time: the client's ``time.perf_counter()`` seconds), ``e2e_s`` =
    end_time - start_time, ``ttft_s`` = output_token_times[0] - start_time (NaN for failed
    or non-streamed requests), ``has_error`` = error is set, ``prefix_group`` = "" (the
    file does not say which shared prefix a prompt used). Raises :class:`IngestError`.
    ``client_ttft``: a successful request with fewer than two timestamps gets the TTFT the
    client saw (its one timestamp, else the end: not streamed) instead of NaN; the evaluator's
    reader wants a TTFT on every successful request (``ingest_run`` sets it).
    """
    path = Path(path)
    if not isinstance(experiment_id, str) or not experiment_id:
        raise ValueError("experiment_id must be a non-empty string")
    rows = []
    for i, (line, rec) in enumerate(_iter_json_records(path)):
        try:
            rows.append(_parse_lifecycle_record(rec, i, path, line, client_ttft))
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
    df = _conform(df.drop(columns=["start", "few_times"]), REQUESTS_DTYPES, "requests")
    df.attrs["ingest_stats"] = {
        "records": len(df),
        "failed": int(df["has_error"].sum()),
        "successful_without_ttft": int((~df["has_error"] & df["ttft_s"].isna()).sum()),
    }
    if client_ttft:
        df.attrs["ingest_stats"]["successful_few_timestamps"] = sum(
            1 for r in rows if not r["has_error"] and r["few_times"])
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


# ======================================================================================
# Whole runs: the formats people have -> the full ground-truth layout
# ======================================================================================
# `ingest_run` detects each input's format, converts it to requests rows (and step rows when
# the file has them) plus load stages, and writes experiments/<id>/{exp-config.yaml,
# profile.yaml, stage_N_lifecycle_metrics.json}, requests/requests.parquet, steps/ when
# present, and model_configs/<name>/config.json, the layout `evolve evaluate --data` reads.

FORMATS: dict[str, str] = {
    "otel": "vLLM OTEL traces (OTLP JSON lines): step.BATCH_SUMMARY events of the instrumented fork "
            "and/or upstream llm_request spans",
    "inference-perf": "inference-perf per_request_lifecycle_metrics.json",
    "guidellm": "guidellm benchmark report (benchmarks.json)",
    "vllm-bench": "`vllm bench serve --save-result --save-detailed` result JSON",
}

# Server settings none of the formats records, and what is assumed when they are not given.
SERVER_DEFAULTS: dict[str, tuple[int, str]] = {
    "tensor_parallelism": (1, "one GPU"),
    "max_num_seqs": (1024, "vLLM V1 default of `vllm serve` on a GPU with >= 70 GiB that is not an A100 (H100)"),
    "max_num_batched_tokens": (8192, "vLLM V1 default of `vllm serve` on an H100"),
    "block_size": (16, "vLLM's default KV block size on CUDA"),
}
DEFAULT_TIMEOUT_NOTE = "300 s: the evaluator's default client timeout (inference-perf's aiohttp default)"
VLLM_BENCH_TIMEOUT_S = 6 * 60 * 60  # vllm.benchmarks.lib.endpoint_request_func: aiohttp total=6 h

# upstream vLLM request spans (vllm/tracing.py SpanAttributes)
SPAN_E2E = "gen_ai.latency.e2e"
SPAN_TTFT = "gen_ai.latency.time_to_first_token"
SPAN_PROMPT = "gen_ai.usage.prompt_tokens"
SPAN_COMPLETION = "gen_ai.usage.completion_tokens"
SPAN_MODEL = "gen_ai.response.model"
SPAN_FINISH = "gen_ai.response.finish_reasons"
SPAN_REQUEST_ID = "gen_ai.request.id"


class _Stage(dict):
    """{'rate', 'duration', 'start'} with start in seconds from the run's first arrival."""


def detect_format(path: str | os.PathLike) -> str:
    """One of FORMATS, from the file's content (not its name)."""
    return _detect(Path(path))[0]


def _detect(p: Path) -> tuple[str, dict | None]:
    """(format, the parsed object for the single-object formats, else None)."""
    try:
        with open(p, "rb") as fh:
            head = fh.read(1 << 12)
            fh.seek(0)
            first_line = fh.readline()
    except OSError as e:
        raise IngestError(p, None, "<file>", f"cannot read ({e.strerror})") from None
    text = head.decode("utf-8", errors="replace").lstrip()
    if not text:
        raise IngestError(p, 1, "<json>", "empty file")
    if text[0] == "[":
        return "inference-perf", None
    if p.suffix not in (".yaml", ".yml"):
        if text[0] != "{":
            raise IngestError(p, 1, "<json>", f"not a JSON object or array: not a format ingest knows "
                              f"({', '.join(FORMATS)})")
        try:  # one object per line: OTLP JSON lines, inference-perf JSON lines
            first = json.loads(first_line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            first = None
        if isinstance(first, dict) and ("resourceSpans" in first or "start_time" in first):
            return ("otel" if "resourceSpans" in first else "inference-perf"), None
    obj = _load_json_object(p)
    if "benchmarks" in obj:
        return "guidellm", obj
    if "ttfts" in obj or "input_lens" in obj:
        return "vllm-bench", obj
    if "resourceSpans" in obj:
        return "otel", None
    raise IngestError(p, None, "<json>", f"not a format ingest knows ({', '.join(FORMATS)}); top-level keys: "
                      f"{', '.join(sorted(map(str, obj))[:8])}")


def _load_json_object(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(path, None, "<json>", f"not valid UTF-8 ({exc.reason})") from None
    if path.suffix in (".yaml", ".yml"):
        try:
            obj = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise IngestError(path, None, "<yaml>", f"invalid YAML ({exc})") from None
    else:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise IngestError(path, exc.lineno, "<json>", f"invalid JSON ({exc.msg} at column {exc.colno}); "
                              "truncated file?") from None
    if not isinstance(obj, dict):
        raise IngestError(path, 1, "<json>", f"must be a JSON object, got {type(obj).__name__}")
    return obj


def _field_num(obj: dict, key: str, path: Path, field: str, *, required: bool = True, minimum: float | None = None):
    v = obj.get(key) if isinstance(obj, dict) else None
    if v is None:
        if required:
            raise IngestError(path, None, field, "missing required field")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise IngestError(path, None, field, f"must be a finite number, got {_describe(v)}")
    if minimum is not None and v < minimum:
        raise IngestError(path, None, field, f"must be >= {minimum:g}, got {v}")
    return float(v)


def _field_count(obj: dict, key: str, path: Path, field: str, *, required: bool = True) -> int | None:
    v = obj.get(key) if isinstance(obj, dict) else None
    if v is None:
        if required:
            raise IngestError(path, None, field, "missing required field")
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise IngestError(path, None, field, f"must be an integer, got {_describe(v)}")
    if v < 0:
        raise IngestError(path, None, field, f"must be >= 0, got {v}")
    return v


def _requests_frame(rows: list[dict], experiment_id: str) -> pd.DataFrame:
    """rows: {arrival_s (absolute, any clock), input_tokens, output_tokens, has_error, e2e_s, ttft_s}
    -> canonical requests rows, send order, arrival relative to the first."""
    df = pd.DataFrame(rows)
    df = df.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    t0 = float(df["arrival_s"].iloc[0])
    df["experiment_id"] = experiment_id
    df["request_index"] = np.arange(len(df), dtype=np.int64)
    df["arrival_time_us"] = np.rint((df["arrival_s"].to_numpy() - t0) * 1e6).astype(np.int64)
    df["prefix_group"] = ""
    extra = [c for c in df.columns if c not in REQUESTS_DTYPES]
    out = _conform(df.drop(columns=extra), REQUESTS_DTYPES, "requests")
    out.attrs["t0"] = t0
    return out


def _check_success(path: Path, field: str, start: float, end: float | None, first: float | None) -> None:
    if end is not None and end < start:
        raise IngestError(path, None, field, f"negative duration: end {end} < start {start}")
    if first is not None and first < start:
        raise IngestError(path, None, field, f"first token {first} before the request started at {start}")
    if first is not None and end is not None and first > end:
        raise IngestError(path, None, field, f"e2e < ttft: first token {first} after the request ended at {end}")


def _single_stage(arrival_us: np.ndarray, rate: float | None, duration: float | None) -> list[_Stage]:
    """One load stage covering every arrival: the stated rate/duration where known, else the
    achieved rate over the arrival span (n arrivals span (n - 1) mean gaps)."""
    a = np.sort(arrival_us) / 1e6
    n = len(a)
    span = float(a[-1] - a[0]) if n else 0.0
    if duration is None or duration <= 0:
        duration = span * n / (n - 1) if n > 1 and span > 0 else 1.0
    duration = max(duration, span + 1e-6)
    if rate is None or not math.isfinite(rate) or rate <= 0:
        rate = n / duration
    return [_Stage(rate=float(rate), duration=float(duration), start=0.0)]


# ---------------------------------------------------------------- guidellm

def _g(obj: Any, dotted: str):
    cur = obj
    for k in dotted.split("."):
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def _first_present(obj: dict, keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for k in keys:
        v = _g(obj, k)
        if v is not None:
            return k, v
    return None, None


def _guidellm_request(req: Any, where: str, path: Path, failed: bool) -> dict:
    if not isinstance(req, dict):
        raise IngestError(path, None, where, f"request must be an object, got {type(req).__name__}")

    def present(keys: tuple[str, ...], what: str, required: bool):
        """(key, value) of the first of `keys` the request has; (None, None) if none and optional."""
        k, v = _first_present(req, keys)
        if k is None and required:
            raise IngestError(path, None, f"{where}.{keys[0]}",
                              f"missing required field ({what}; also looked for {', '.join(keys[1:])})")
        return k, v

    def num(keys: tuple[str, ...], what: str, required: bool) -> float | None:
        k, v = present(keys, what, required)
        if k is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise IngestError(path, None, f"{where}.{k}", f"must be a finite number, got {_describe(v)}")
        return float(v)

    def count(keys: tuple[str, ...], what: str, required: bool) -> int | None:
        k, v = present(keys, what, required)
        if k is None:
            return None
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise IngestError(path, None, f"{where}.{k}", f"must be an integer >= 0, got {_describe(v)}")
        return v

    # v0.4+: info.timings.*, computed request_start_time/...; v0.3: start_time, end_time, first_token_time
    start = num(("info.timings.request_start", "request_start_time", "start_time", "info.timings.resolve_start"),
                "when the request was sent", True)
    end = num(("info.timings.request_end", "request_end_time", "end_time", "info.timings.resolve_end"),
              "when the request ended", not failed)
    first = num(("info.timings.first_token_iteration", "first_token_time"), "first token time", False)
    ttft_ms = num(("time_to_first_token_ms",), "TTFT", False)
    prompt = count(("prompt_tokens", "input_metrics.text_tokens", "input_metrics.total_tokens"), "prompt tokens",
                   not failed)
    output = count(("output_tokens", "output_metrics.text_tokens", "output_metrics.total_tokens"), "output tokens",
                   not failed)
    if failed:
        e2e = end - start if end is not None and end >= start else math.nan
        return {"arrival_s": start, "input_tokens": prompt or 0, "output_tokens": 0, "has_error": True,
                "e2e_s": e2e, "ttft_s": math.nan}
    _check_success(path, f"{where}.end", start, end, None)
    if first is not None:
        _check_success(path, f"{where}.first_token", start, end, first)
        ttft = first - start
    elif ttft_ms is not None:
        ttft = ttft_ms / 1000.0
    else:
        raise IngestError(path, None, f"{where}.info.timings.first_token_iteration",
                          "missing: a successful request needs its first-token time (streamed run)")
    if ttft > end - start + 1e-9:
        raise IngestError(path, None, f"{where}.time_to_first_token_ms", f"e2e < ttft ({ttft} s > {end - start} s)")
    if prompt < 1:
        raise IngestError(path, None, f"{where}.prompt_tokens", f"must be >= 1 for a successful request, got {prompt}")
    return {"arrival_s": start, "input_tokens": prompt, "output_tokens": output, "has_error": False,
            "e2e_s": end - start, "ttft_s": ttft}


def _find_model(obj: Any, depth: int = 0) -> str | None:
    if depth > 3 or not isinstance(obj, dict):
        return None
    for k in ("model", "backend_model", "model_id", "model_name"):
        if isinstance(obj.get(k), str) and obj[k]:
            return obj[k]
    for v in obj.values():
        if isinstance(v, dict):
            m = _find_model(v, depth + 1)
            if m:
                return m
    return None


def read_guidellm(path: str | os.PathLike, experiment_id: str, obj: dict | None = None
                  ) -> tuple[pd.DataFrame, list[_Stage], dict]:
    """guidellm's benchmark report -> (requests rows, one stage per benchmark, info).

    Per request (``benchmarks[k].requests.{successful, incomplete, errored}[i]``): the send time
    is ``info.timings.request_start`` (guidellm >= 0.4; ``start_time`` in 0.3), the end
    ``info.timings.request_end`` (``end_time``), the first token
    ``info.timings.first_token_iteration`` (``first_token_time``), token counts
    ``prompt_tokens``/``output_tokens`` (``input_metrics``/``output_metrics`` when only those are
    there). Errored and incomplete (cancelled at the benchmark's end) requests are failed rows.
    Each benchmark of a sweep is a load stage, at its strategy's ``rate`` when it has one
    (constant, poisson), else at the achieved rate."""
    p = Path(path)
    obj = _load_json_object(p) if obj is None else obj
    benches = obj.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise IngestError(p, None, "benchmarks", "must be a non-empty array of benchmarks")
    rows: list[dict] = []
    bench_of: list[int] = []
    rates: list[float | None] = []
    for b, bench in enumerate(benches):
        bw = f"benchmarks[{b}]"
        if not isinstance(bench, dict):
            raise IngestError(p, None, bw, "must be an object")
        reqs = bench.get("requests")
        if not isinstance(reqs, dict):
            raise IngestError(p, None, f"{bw}.requests", "missing or not an object with successful/incomplete/"
                              "errored lists (saved without per-request detail?)")
        n_before = len(rows)
        for status in ("successful", "incomplete", "errored"):
            lst = reqs.get(status)
            if lst is None:
                if status == "successful":
                    raise IngestError(p, None, f"{bw}.requests.successful", "missing required field")
                continue
            if not isinstance(lst, list):
                raise IngestError(p, None, f"{bw}.requests.{status}", f"must be an array, got {_describe(lst)}")
            for i, req in enumerate(lst):
                rows.append(_guidellm_request(req, f"{bw}.requests.{status}[{i}]", p, status != "successful"))
                bench_of.append(b)
        if len(rows) == n_before:
            raise IngestError(p, None, f"{bw}.requests", "no requests in this benchmark")
        strategy = _g(bench, "config.strategy") or _g(bench, "args.strategy") or {}
        rate = strategy.get("rate") if isinstance(strategy, dict) else None
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))):
            raise IngestError(p, None, f"{bw}.config.strategy.rate", f"must be a number, got {_describe(rate)}")
        stype = strategy.get("type_") if isinstance(strategy, dict) else None
        rates.append(float(rate) if rate and stype in (None, "constant", "poisson", "async") else None)
    for r in rows:
        r["bench"] = bench_of.pop(0)
    df = _requests_frame(rows, experiment_id)
    bench = pd.DataFrame(rows).sort_values("arrival_s", kind="stable")["bench"].to_numpy()
    arr = df["arrival_time_us"].to_numpy() / 1e6
    stages: list[_Stage] = []
    starts = [float(arr[bench == b].min()) for b in range(len(benches))]
    if any(s2 < s1 for s1, s2 in zip(starts, starts[1:])):
        raise IngestError(p, None, "benchmarks", "benchmarks overlap in time or are not in run order")
    for b in range(len(benches)):
        a = arr[bench == b]
        if b + 1 < len(benches):
            dur = starts[b + 1] - starts[b]
            if a.max() >= starts[b + 1]:
                raise IngestError(p, None, f"benchmarks[{b}]", "its requests overlap the next benchmark's")
        else:
            dur = None
        st = _single_stage((a - starts[b]) * 1e6, rates[b], dur)[0]
        if dur is not None:
            st["duration"] = dur
        st["start"] = starts[b]
        stages.append(st)
    model = _find_model(obj.get("config")) or _find_model(benches[0])
    return df, stages, {"model": model, "timeout_s": None,
                        "notes": [f"{len(benches)} guidellm benchmark(s) -> {len(benches)} load stage(s)"]}


# ---------------------------------------------------------------- vllm bench serve

def read_vllm_bench(path: str | os.PathLike, experiment_id: str, obj: dict | None = None
                    ) -> tuple[pd.DataFrame, list[_Stage], dict]:
    """``vllm bench serve --save-result --save-detailed`` JSON -> (requests rows, one stage, info).

    Per request i: ``input_lens[i]``, ``output_lens[i]``, ``ttfts[i]`` (s), ``itls[i]`` (s per
    token after the first), ``errors[i]`` ("" = success), ``latencies[i]`` (E2E, s; else
    ttft + sum(itls)) and ``start_times[i]`` (send time, perf_counter s). Without
    ``start_times`` (older vLLM) arrivals are spaced 1 / ``request_rate`` apart in send order
    (all at 0 for rate inf), which the output says. The stage is ``request_rate`` over
    ``duration``."""
    p = Path(path)
    obj = _load_json_object(p) if obj is None else obj
    for key in ("input_lens", "output_lens", "ttfts", "itls", "errors"):
        if key not in obj:
            raise IngestError(p, None, key, "missing required per-request array (save with --save-detailed)")
        if not isinstance(obj[key], list):
            raise IngestError(p, None, key, f"must be an array, got {_describe(obj[key])}")
    n = len(obj["input_lens"])
    if n == 0:
        raise IngestError(p, None, "input_lens", "no requests")
    optional = [k for k in ("latencies", "start_times") if isinstance(obj.get(k), list)]
    for key in ("output_lens", "ttfts", "itls", "errors", *optional):
        if len(obj[key]) != n:
            raise IngestError(p, None, key, f"has {len(obj[key])} entries, input_lens has {n}")
    duration = _field_num(obj, "duration", p, "duration", minimum=0.0)
    rate_raw = obj.get("request_rate")
    if rate_raw is None:
        raise IngestError(p, None, "request_rate", "missing required field")
    if rate_raw == "inf" or (isinstance(rate_raw, float) and math.isinf(rate_raw)):
        rate = math.inf
    elif isinstance(rate_raw, (int, float)) and not isinstance(rate_raw, bool) and rate_raw > 0:
        rate = float(rate_raw)
    else:
        raise IngestError(p, None, "request_rate", f"must be a positive number or \"inf\", got {_describe(rate_raw)}")
    notes = []
    if "start_times" in optional:
        starts = obj["start_times"]
    else:
        gap = 0.0 if math.isinf(rate) else 1.0 / rate
        starts = [i * gap for i in range(n)]
        notes.append("no start_times in the file (vLLM before start_times were saved): arrivals synthesised "
                     + ("all at 0 (request_rate inf)" if gap == 0 else f"every 1/request_rate = {gap:g} s"))
    if obj.get("max_concurrency") is not None:
        notes.append(f"max_concurrency {obj['max_concurrency']}: the client held requests back; the replay sends "
                     "them at their recorded start times")
    rows = []
    for i in range(n):
        w = f"[{i}]"
        err = obj["errors"][i]
        if err is not None and not isinstance(err, str):
            raise IngestError(p, None, f"errors{w}", f"must be a string (\"\" for success), got {_describe(err)}")
        failed = bool(err)
        start = starts[i]
        if isinstance(start, bool) or not isinstance(start, (int, float)) or not math.isfinite(start):
            raise IngestError(p, None, f"start_times{w}", f"must be a finite number, got {_describe(start)}")
        inp = obj["input_lens"][i]
        if isinstance(inp, bool) or not isinstance(inp, int) or inp < (0 if failed else 1):
            raise IngestError(p, None, f"input_lens{w}", f"must be an integer >= 1, got {_describe(inp)}")
        if failed:
            lat = obj["latencies"][i] if "latencies" in optional else None
            e2e = float(lat) if isinstance(lat, (int, float)) and not isinstance(lat, bool) and lat > 0 else math.nan
            rows.append({"arrival_s": float(start), "input_tokens": inp, "output_tokens": 0, "has_error": True,
                         "e2e_s": e2e, "ttft_s": math.nan})
            continue
        out = obj["output_lens"][i]
        if isinstance(out, bool) or not isinstance(out, int) or out < 0:
            raise IngestError(p, None, f"output_lens{w}", f"must be an integer >= 0, got {_describe(out)}")
        ttft = obj["ttfts"][i]
        if isinstance(ttft, bool) or not isinstance(ttft, (int, float)) or not math.isfinite(ttft) or ttft < 0:
            raise IngestError(p, None, f"ttfts{w}", f"must be a finite number >= 0, got {_describe(ttft)}")
        itl = obj["itls"][i]
        if not isinstance(itl, list) or any(isinstance(x, bool) or not isinstance(x, (int, float))
                                             or not math.isfinite(x) or x < 0 for x in itl):
            raise IngestError(p, None, f"itls{w}", "must be an array of finite numbers >= 0")
        if "latencies" in optional:
            lat = obj["latencies"][i]
            if isinstance(lat, bool) or not isinstance(lat, (int, float)) or not math.isfinite(lat):
                raise IngestError(p, None, f"latencies{w}", f"must be a finite number, got {_describe(lat)}")
            e2e = float(lat)
        else:
            e2e = float(ttft) + float(sum(itl))
        if e2e + 1e-9 < ttft:
            raise IngestError(p, None, f"latencies{w}", f"e2e < ttft ({e2e} s < {ttft} s)")
        rows.append({"arrival_s": float(start), "input_tokens": inp, "output_tokens": out, "has_error": False,
                     "e2e_s": e2e, "ttft_s": float(ttft)})
    df = _requests_frame(rows, experiment_id)
    stages = _single_stage(df["arrival_time_us"].to_numpy(), None if math.isinf(rate) else rate, duration)
    if math.isinf(rate):
        notes.append(f"request_rate inf: the stage rate is the achieved {stages[0]['rate']:.4g} req/s")
    model = obj.get("model_id") if isinstance(obj.get("model_id"), str) else None
    return df, stages, {"model": model, "timeout_s": float(VLLM_BENCH_TIMEOUT_S), "notes": notes}


# ---------------------------------------------------------------- upstream vLLM request spans

def _iter_spans(path: Path, stats: dict | None = None) -> Iterator[tuple[int, str, dict]]:
    """(line, field path, span) of every span in an OTLP JSON-lines file; `stats` (when given)
    counts its lines, blank lines and spans."""
    count = stats if stats is not None else {"lines": 0, "blank_lines": 0, "spans": 0}
    for lineno, line in _iter_lines(path):
        count["lines"] += 1
        if not line.strip():
            count["blank_lines"] += 1
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(path, lineno, "<json>",
                              f"invalid JSON ({exc.msg} at column {exc.colno}); truncated or corrupted line") from None
        if not isinstance(obj, dict):
            raise IngestError(path, lineno, "<json>", f"each line must be a JSON object, got {type(obj).__name__}")
        for r, rspan in enumerate(_as_list(obj.get("resourceSpans"), path, lineno, "resourceSpans")):
            if not isinstance(rspan, dict):
                raise IngestError(path, lineno, f"resourceSpans[{r}]", "must be an object")
            scope_key = "scopeSpans" if "scopeSpans" in rspan else "instrumentationLibrarySpans"
            for s, sspan in enumerate(_as_list(rspan.get(scope_key), path, lineno, f"resourceSpans[{r}].{scope_key}")):
                if not isinstance(sspan, dict):
                    raise IngestError(path, lineno, f"resourceSpans[{r}].{scope_key}[{s}]", "must be an object")
                field = f"resourceSpans[{r}].{scope_key}[{s}].spans"
                for k, span in enumerate(_as_list(sspan.get("spans"), path, lineno, field)):
                    if not isinstance(span, dict):
                        raise IngestError(path, lineno, f"{field}[{k}]", "must be an object")
                    count["spans"] += 1
                    yield lineno, f"{field}[{k}]", span


def _span_attrs(span: dict, path: Path, lineno: int, where: str) -> dict[str, Any]:
    out = {}
    for j, attr in enumerate(_as_list(span.get("attributes"), path, lineno, f"{where}.attributes")):
        if not isinstance(attr, dict) or not isinstance(attr.get("key"), str):
            raise IngestError(path, lineno, f"{where}.attributes[{j}]", "attribute must be an object with a string 'key'")
        out[attr["key"]] = attr.get("value")
    return out


def _otlp_str_list(value: Any) -> list[str]:
    if not isinstance(value, dict):
        return []
    if "stringValue" in value:
        return [str(value["stringValue"])]
    arr = value.get("arrayValue")
    if isinstance(arr, dict):
        return [str(v.get("stringValue")) for v in arr.get("values") or [] if isinstance(v, dict)]
    return []


def has_request_spans(path: str | os.PathLike) -> bool:
    p = Path(path)
    for lineno, where, span in _iter_spans(p):
        if SPAN_E2E in _span_attrs(span, p, lineno, where):
            return True
    return False


def has_step_events(path: str | os.PathLike) -> bool:
    p = Path(path)
    for _, _, span in _iter_spans(p):
        for ev in span.get("events") or []:
            if isinstance(ev, dict) and ev.get("name") == BATCH_SUMMARY_EVENT:
                return True
    return False


def ingest_request_spans(path: str | os.PathLike, experiment_id: str) -> pd.DataFrame:
    """Upstream vLLM's per-request OTEL spans (``llm_request``, attributes from vllm/tracing.py
    SpanAttributes) -> requests rows. Arrival = the span's ``startTimeUnixNano`` (vLLM starts
    it at the request's arrival), ``ttft_s`` = ``gen_ai.latency.time_to_first_token``,
    ``e2e_s`` = ``gen_ai.latency.e2e``, tokens = ``gen_ai.usage.prompt_tokens`` /
    ``completion_tokens``; a finish reason ``abort`` marks a failed request. Server-side
    times: they leave out the network and the client."""
    p = Path(path)
    if not isinstance(experiment_id, str) or not experiment_id:
        raise ValueError("experiment_id must be a non-empty string")
    rows, models, seen = [], set(), {}
    for lineno, where, span in _iter_spans(p):
        attrs = _span_attrs(span, p, lineno, where)
        if SPAN_E2E not in attrs:
            continue
        rid = attrs.get(SPAN_REQUEST_ID)
        rid = rid.get("stringValue") if isinstance(rid, dict) else None
        if rid is not None and rid in seen:
            continue  # exporter retry
        if rid is not None:
            seen[rid] = lineno
        start_raw = span.get("startTimeUnixNano")
        if start_raw is None:
            raise IngestError(p, lineno, f"{where}.startTimeUnixNano", "missing required field (the arrival time)")
        try:
            start_ns = _otlp_int({"intValue": start_raw})
        except ValueError as exc:
            raise IngestError(p, lineno, f"{where}.startTimeUnixNano", str(exc)) from None
        vals = {}
        for key, read in ((SPAN_E2E, _otlp_float), (SPAN_TTFT, _otlp_float), (SPAN_PROMPT, _otlp_int),
                          (SPAN_COMPLETION, _otlp_int)):
            if key not in attrs:
                raise IngestError(p, lineno, key, f"missing required attribute of a request span ({where})")
            try:
                vals[key] = read(attrs[key])
            except ValueError as exc:
                raise IngestError(p, lineno, key, str(exc)) from None
            if vals[key] < 0:
                raise IngestError(p, lineno, key, f"must be >= 0, got {vals[key]}")
        # a list of strings, or one string (vLLM writes json.dumps of the list)
        failed = any("abort" in x for x in _otlp_str_list(attrs.get(SPAN_FINISH)))
        if not failed:
            if vals[SPAN_E2E] + 1e-9 < vals[SPAN_TTFT]:
                raise IngestError(p, lineno, SPAN_E2E, f"e2e < ttft ({vals[SPAN_E2E]} s < {vals[SPAN_TTFT]} s)")
            if vals[SPAN_PROMPT] < 1:
                raise IngestError(p, lineno, SPAN_PROMPT, "must be >= 1 for a finished request")
        m = attrs.get(SPAN_MODEL)
        if isinstance(m, dict) and isinstance(m.get("stringValue"), str):
            models.add(m["stringValue"])
        rows.append({"arrival_s": start_ns / 1e9, "input_tokens": vals[SPAN_PROMPT],
                     "output_tokens": 0 if failed else vals[SPAN_COMPLETION], "has_error": failed,
                     "e2e_s": vals[SPAN_E2E], "ttft_s": math.nan if failed else vals[SPAN_TTFT]})
    if not rows:
        raise IngestError(p, None, SPAN_E2E, "no request spans (llm_request spans with gen_ai.latency.e2e) in the file")
    df = _requests_frame(rows, experiment_id)
    df.attrs["models"] = sorted(models)
    return df


# ---------------------------------------------------------------- writing the whole layout

def _stage_summary(req: pd.DataFrame, lo_us: float, hi_us: float) -> dict:
    """inference-perf's stage_N_lifecycle_metrics.json fields the evaluator reads, from the rows
    (the evaluator recomputes the means from requests.parquet; this file is for workload-spec
    mode and for people). Its ITL is written so that evaluator.data.per_token_from_reported
    gives back the per-token time sum(e2e - ttft) / sum(output - 1)."""
    a = req["arrival_time_us"].to_numpy()
    g = req[(a >= lo_us) & (a < hi_us)]
    ok = g[~g["has_error"]]
    tau = per_token_time(ok["e2e_s"].to_numpy(), ok["ttft_s"].to_numpy(), ok["output_tokens"].to_numpy()) \
        if len(ok) else math.nan
    reported = tau / per_token_from_reported(1.0, 0) if math.isfinite(tau) else None

    def mean(col):
        return float(ok[col].mean()) if len(ok) else None
    return {
        "successes": {
            "count": int(len(ok)),
            "latency": {"request_latency": {"mean": mean("e2e_s")},
                        "time_to_first_token": {"mean": mean("ttft_s")},
                        "inter_token_latency": {"mean": reported}},
            "prompt_len": {"mean": mean("input_tokens")},
            "output_len": {"mean": mean("output_tokens")},
        },
        "failures": {"count": int(g["has_error"].sum())},
    }


def _resolve_model_config(model_id: str, out: Path, model_config: str | os.PathLike | None
                          ) -> tuple[dict, str, tuple[Path, Path] | None]:
    """(architecture, where it came from, (config to copy, target) or None)."""
    name = model_id.split("/")[-1]
    target = out / "model_configs" / name / "config.json"
    src = None
    if model_config is not None:
        src = Path(model_config)
        src = src / "config.json" if src.is_dir() else src
    elif target.exists():
        return read_arch(target), f"{target} (already there)", None
    else:
        src = shipped_config_path(model_id)
    if src is not None:
        try:
            arch = read_arch_file(src)
        except ModelConfigError as e:
            raise IngestError(src, None, "model config", str(e)) from None
        return arch, f"{src} -> {target}", (Path(src), target)
    for e in load_default_table()["experiments"]:
        if e["model_id"] == model_id:
            return dict(e["arch"]), "the evaluator's embedded table (bundled model)", None
    raise IngestError(out, None, "model", f"no config.json for model {model_id!r}: pass --model-config PATH "
                      f"(a Hugging Face config.json) or one of the shipped names ({', '.join(shipped_models())})")


def _yaml_dump(obj: dict, comments: dict[str, str]) -> str:
    lines = []
    for k, v in obj.items():
        text = yaml.safe_dump({k: v}, default_flow_style=False, sort_keys=False).rstrip("\n")
        if k in comments:
            text = text.split("\n")
            text[0] += f"  # {comments[k]}"
            text = "\n".join(text)
        lines.append(text)
    return "\n".join(lines) + "\n"


def ingest_run(
    inputs: list[str | os.PathLike],
    out_dir: str | os.PathLike,
    experiment_id: str,
    *,
    model: str | None = None,
    model_config: str | os.PathLike | None = None,
    tp: int | None = None,
    workload: str = "",
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    block_size: int | None = None,
    kv_blocks: int | None = None,
) -> list[str]:
    """Convert one benchmark run (one or more files of FORMATS) into out_dir's ground-truth
    layout (see docs/ingest.md) and return the lines to show the user: what was read, every
    default that stood in for a setting the files do not record, and what will be scored."""
    if not inputs:
        raise ValueError("no input files")
    if not isinstance(experiment_id, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", experiment_id or ""):
        raise ValueError(f"experiment id must be letters, digits, '.', '_' or '-', got {experiment_id!r}")
    out = Path(out_dir)
    lines: list[str] = []
    requests = steps = None
    stages: list[_Stage] | None = None
    file_model = None
    timeout_s = None
    step_paths = []
    fmts: list[str] = []
    for raw in inputs:
        p = Path(raw)
        fmt, obj = _detect(p)
        fmts.append(fmt)
        lines.append(f"{p}: {FORMATS[fmt]}")
        if fmt == "otel":
            found = False
            if has_step_events(p):
                step_paths.append(p)
                found = True
            if has_request_spans(p):
                if requests is not None:
                    raise IngestError(p, None, "<file>", "a second source of request rows for the same experiment")
                requests = ingest_request_spans(p, experiment_id)
                ms = requests.attrs.get("models") or []
                file_model = file_model or (ms[0] if ms else None)
                stages = _single_stage(requests["arrival_time_us"].to_numpy(), None, None)
                lines.append(f"  {len(requests)} request spans (upstream vLLM llm_request)")
                found = True
            if not found:
                raise IngestError(p, None, BATCH_SUMMARY_EVENT, "neither step.BATCH_SUMMARY events nor request spans "
                                  f"({SPAN_E2E}) in the file")
            continue
        if requests is not None:
            raise IngestError(p, None, "<file>", "a second source of request rows for the same experiment")
        if fmt == "inference-perf":
            requests = ingest_request_lifecycle(p, experiment_id, client_ttft=True)
            stages = _single_stage(requests["arrival_time_us"].to_numpy(), None, None)
            lines.append("  one load stage at the achieved arrival rate (the profile's stages are not in this file)")
            few = requests.attrs["ingest_stats"]["successful_few_timestamps"]
            if few:
                lines.append(f"  {few} successful request(s) with fewer than two token timestamps: TTFT is the one "
                             "timestamp, or the end when none (not streamed)")
        elif fmt == "guidellm":
            requests, stages, info = read_guidellm(p, experiment_id, obj)
            file_model, timeout_s = info["model"], info["timeout_s"]
            lines += [f"  {n}" for n in info["notes"]]
        else:
            requests, stages, info = read_vllm_bench(p, experiment_id, obj)
            file_model, timeout_s = info["model"], info["timeout_s"]
            lines += [f"  {n}" for n in info["notes"]]
    if requests is None:
        raise IngestError(Path(inputs[0]), None, "requests", "no per-request data in the inputs: step traces alone "
                          "cannot be scored; add the run's request file (inference-perf, guidellm, vllm bench, or "
                          "request spans)")
    model_id = model or file_model
    if not model_id:
        raise IngestError(Path(inputs[0]), None, "model", "the files do not name the model: pass --model")
    defaults = []
    settings = {}
    for key, given in (("tensor_parallelism", tp), ("max_num_seqs", max_num_seqs),
                       ("max_num_batched_tokens", max_num_batched_tokens), ("block_size", block_size)):
        if given is None:
            val, why = SERVER_DEFAULTS[key]
            defaults.append(f"{key}={val} ({why})")
            settings[key] = val
        else:
            if isinstance(given, bool) or not isinstance(given, int) or given < 1:
                raise ValueError(f"{key} must be a positive integer, got {given!r}")
            settings[key] = int(given)
    arch, arch_src, copy = _resolve_model_config(model_id, out, model_config)
    lines.append(f"model {model_id}: architecture from {arch_src}")
    if kv_blocks is None:
        try:
            kv = estimate_kv_blocks(arch, settings["tensor_parallelism"], settings["block_size"])
        except ValueError as e:
            raise IngestError(out, None, "tensor_parallelism", str(e)) from None
        defaults.append(f"kv_blocks_total_gpu={kv} (estimated: 80 GB x 0.9 per GPU minus the weights, "
                        f"over the KV bytes of a {settings['block_size']}-token block)")
    else:
        if isinstance(kv_blocks, bool) or not isinstance(kv_blocks, int) or kv_blocks < 1:
            raise ValueError(f"kv_blocks must be a positive integer, got {kv_blocks!r}")
        kv = kv_blocks
    if timeout_s is None:
        defaults.append(f"request_timeout={DEFAULT_TIMEOUT_NOTE}")

    if step_paths:
        if len(step_paths) > 1:
            raise IngestError(step_paths[1], None, "<file>", "step traces of one experiment must be in one file")
        steps = ingest_step_traces(step_paths[0], experiment_id, model_short_name(model_id), workload,
                                   settings["tensor_parallelism"])
        lines.append(f"  {len(steps)} step rows (step.BATCH_SUMMARY)")

    # everything is read and checked: write
    if copy is not None:
        copy[1].parent.mkdir(parents=True, exist_ok=True)
        copy[1].write_text(copy[0].read_text())
    exp_dir = out / "experiments" / experiment_id
    exp_dir.mkdir(parents=True, exist_ok=True)
    n = len(requests)
    mean_in = int(round(float(requests.loc[~requests["has_error"], "input_tokens"].mean())))
    mean_out = int(round(float(requests.loc[~requests["has_error"], "output_tokens"].mean())))
    comments = {k: "default: not recorded by the input" for k in settings
                if {"tensor_parallelism": tp, "max_num_seqs": max_num_seqs,
                    "max_num_batched_tokens": max_num_batched_tokens, "block_size": block_size}[k] is None}
    if kv_blocks is None:
        comments["kv_blocks_total_gpu"] = "estimated from the model and 80 GB x 0.9 per GPU"
    cfg = {"model": model_id, **settings, "kv_blocks_total_gpu": int(kv), "app": fmts[0]}
    head = f"# written by `evolve ingest` from {', '.join(str(x) for x in inputs)}\n"
    (exp_dir / "exp-config.yaml").write_text(head + _yaml_dump(cfg, comments))
    profile = {
        "load": {"stages": [{"rate": float(s["rate"]), "duration": float(s["duration"])} for s in stages],
                 "request_timeout": timeout_s},
        # every request its own prompt: none of these formats records shared prefixes
        "data": {"type": "shared_prefix",
                 "shared_prefix": {"num_unique_system_prompts": n, "num_users_per_system_prompt": 1,
                                   "system_prompt_len": 0, "question_len": mean_in, "output_len": mean_out}},
        "server": {"ignore_eos": False, "model_name": model_id},
    }
    (exp_dir / "profile.yaml").write_text(head + _yaml_dump(profile, {}))
    for old in exp_dir.glob("stage_*_lifecycle_metrics.json"):
        old.unlink()
    for i, s in enumerate(stages):
        lo = s["start"] * 1e6 if i else -math.inf
        hi = stages[i + 1]["start"] * 1e6 if i + 1 < len(stages) else math.inf
        (exp_dir / f"stage_{i}_lifecycle_metrics.json").write_text(
            json.dumps(_stage_summary(requests, lo, hi), indent=2) + "\n")
    written = write_ground_truth(steps, requests, out)
    n_err = int(requests["has_error"].sum())
    lines.append(f"wrote {exp_dir}: {len(stages)} stage(s); {n} requests ({n_err} failed) -> {written['requests']}"
                 + (f"; {len(steps)} steps -> {written['steps']}" if steps is not None else ""))
    if defaults:
        lines.append("defaults used (give the flag to set them): " + "; ".join(defaults))
    lines.append("prefix caching: every request is taken as a distinct prompt (the files do not record shared "
                 "prefixes)")
    if steps is None:
        lines.append("no step rows (no step.BATCH_SUMMARY events): this experiment scores E2E, TTFT and ITL only, "
                     "no per-step error")
    return lines
