"""Tests for evaluator.ingest (`evolve ingest` backend).

Fixtures in tests/fixtures/ingest/ are produced by make_fixtures.py there; the expected
numbers below are computed by hand from its tables.
"""
from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evaluator.ingest import (
    REQUESTS_DTYPES,
    STEP_ATTRIBUTES,
    STEPS_DTYPES,
    IngestError,
    IngestWarning,
    ingest_request_lifecycle,
    ingest_step_traces,
    write_ground_truth,
)

FIX = Path(__file__).resolve().parent / "fixtures" / "ingest"
DATA = Path(os.environ.get("STEPEVOLVE_DATA", "/work/shared/data"))
REAL_STEPS = DATA / "steps" / "steps.parquet"
REAL_REQUESTS = DATA / "requests" / "requests.parquet"
needs_real = pytest.mark.skipif(not REAL_STEPS.exists() or not REAL_REQUESTS.exists(), reason="real data not present")

TRACE_COLUMNS = list(STEP_ATTRIBUTES.values())  # the columns a trace carries


def steps(path="traces_valid.json", **kw):
    args = dict(experiment_id="exp-a", model="llama-2-7b", workload="general", tp=1) | kw
    return ingest_step_traces(FIX / path, **args)


# ------------------------------------------------------------------ step traces: valid
def test_valid_traces_rows_and_order():
    df = steps()
    assert len(df) == 20
    assert df["step_id"].tolist() == [100, 101, 102, 103, 110, 111, 120, 130, 131, 132,
                                      140, 150, 151, 160, 170, 171, 172, 173, 180, 190]
    assert list(df.columns) == list(STEPS_DTYPES)
    assert (df["experiment_id"] == "exp-a").all() and (df["model"] == "llama-2-7b").all()
    assert (df["workload"] == "general").all() and (df["tp"] == 1).all()


def test_derived_next_step_start_delta_hand_computed():
    df = steps().set_index("step_id")
    expected = {100: 15123.456, 101: 15376.544, 102: 16500.001, 110: 18250.75, 130: 19999.999,
                131: 17000.001, 150: 16400.1, 170: 18000.0, 171: 18123.0, 172: 16877.5}
    got = df["next_step_start_delta_us"].dropna()
    assert sorted(got.index) == sorted(expected)
    for sid, val in expected.items():
        assert got[sid] == pytest.approx(val, abs=1e-9)
    # last of each consecutive run and isolated steps stay null
    for sid in (103, 111, 120, 132, 140, 151, 160, 173, 180, 190):
        assert math.isnan(df.loc[sid, "next_step_start_delta_us"])


def test_valid_trace_field_values():
    df = steps().set_index("step_id")
    r = df.loc[150]
    assert r["ts_start_ns"] == 5_000_800_000_000
    assert r["ts_end_ns"] == 5_000_800_000_000 + 1107 * 1000 + 321
    assert (r["duration_us"], r["prefill_tokens"], r["decode_tokens"], r["scheduled_tokens"]) == (1107, 512, 127, 639)
    assert (r["num_prefill_reqs"], r["num_decode_reqs"], r["running_depth"], r["waiting_depth"]) == (1, 127, 128, 9)
    assert (r["num_finished"], r["num_preempted"]) == (0, 2)
    assert (r["kv_blocks_total_gpu"], r["kv_blocks_free_gpu"]) == (1000, 3)
    assert r["kv_usage_gpu_ratio"] == pytest.approx(0.997)
    # step 131 carries intValue as JSON numbers instead of strings
    assert df.loc[131, "scheduled_tokens"] == 2048
    # not carried by traces
    assert df["cycle_time_us"].isna().all() and df["cycle_time_ratio"].isna().all()
    assert (df["matched_iti_count"] == 0).all()


def test_ignored_spans_and_events_counted():
    stats = steps().attrs["ingest_stats"]
    assert stats == {"lines": 4, "blank_lines": 1, "spans": 4, "spans_without_batch_summary": 2,
                     "other_events": 3, "batch_summary_events": 20, "duplicate_events_dropped": 0}


@needs_real
def test_steps_dtypes_equal_real_parquet():
    real = pd.read_parquet(REAL_STEPS)
    df = steps()
    assert list(df.columns) == list(real.columns)
    assert df.dtypes.equals(real.dtypes)


# ------------------------------------------------------------------ step traces: malformed
@pytest.mark.parametrize(
    "name, line, field, words",
    [
        ("traces_truncated.json", 4, "<json>", "invalid JSON"),
        ("traces_missing_attr.json", 2, "batch.decode_tokens", "missing required attribute"),
        ("traces_string_in_int.json", 4, "batch.prefill_tokens", "expected intValue, got stringValue"),
        ("traces_negative_duration.json", 2, "step.ts_end_ns", "negative duration"),
        ("traces_nonmonotonic.json", 4, "step.ts_start_ns", "non-monotonic"),
    ],
)
def test_malformed_traces_name_file_line_field(name, line, field, words):
    with pytest.raises(IngestError) as info:
        steps(name)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.path, err.line, err.field) == (str(FIX / name), line, field)
    msg = str(err)
    assert msg.startswith(f"{FIX / name}:{line}: field '{field}'")
    assert words in msg


def test_missing_attribute_message_names_step():
    with pytest.raises(IngestError, match=r"step\.id=102"):
        steps("traces_missing_attr.json")


def _one_event_file(tmp_path, mutate):
    """Line 2 of the valid fixture alone (10 events); mutate its first event (step 100)."""
    lines = (FIX / "traces_valid.json").read_text().splitlines()
    obj = json.loads(lines[1])
    ev = obj["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["events"][0]
    mutate(ev)
    p = tmp_path / "traces.json"
    p.write_text(json.dumps(obj) + "\n")
    return p


def _set(ev, key, value):
    for a in ev["attributes"]:
        if a["key"] == key:
            a["value"] = value


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("batch.decode_tokens", {"intValue": "48x"}, "intValue must be an integer"),
        ("batch.decode_tokens", {"intValue": True}, "intValue must be an integer"),
        ("batch.decode_tokens", {"doubleValue": 48.0}, "expected intValue"),
        ("queue.waiting_depth", {"intValue": "-1"}, "must be >= 0"),
        ("kv.usage_gpu_ratio", {"doubleValue": 1.5}, "must be in [0, 1]"),
        ("kv.usage_gpu_ratio", {"stringValue": "0.3"}, "expected doubleValue"),
        ("kv.blocks_free_gpu", {"intValue": "1001"}, "> kv.blocks_total_gpu"),
        ("step.duration_us", {"intValue": "999"}, "disagrees with"),
    ],
)
def test_bad_attribute_values(tmp_path, key, value, words):
    p = _one_event_file(tmp_path, lambda ev: _set(ev, key, value))
    with pytest.raises(IngestError) as info:
        ingest_step_traces(p, "e", "m", "w", 1)
    assert (info.value.line, info.value.field) == (1, key)
    assert words in str(info.value)


def test_int_value_accepts_string_and_number(tmp_path):
    p = _one_event_file(tmp_path, lambda ev: _set(ev, "batch.decode_tokens", {"intValue": 48}))
    assert ingest_step_traces(p, "e", "m", "w", 1)["decode_tokens"].iloc[0] == 48
    p = _one_event_file(tmp_path, lambda ev: _set(ev, "kv.usage_gpu_ratio", {"doubleValue": "0.25"}))
    assert ingest_step_traces(p, "e", "m", "w", 1)["kv_usage_gpu_ratio"].iloc[0] == 0.25


def test_exact_duplicates_dropped_with_warning(tmp_path):
    lines = (FIX / "traces_valid.json").read_text().splitlines()
    p = tmp_path / "traces.json"
    p.write_text("\n".join(lines + [lines[1]]) + "\n")  # exporter retry: line 2 again
    with pytest.warns(IngestWarning, match="dropped 10 exact duplicate"):
        df = ingest_step_traces(p, "e", "m", "w", 1)
    assert len(df) == 20 and df.attrs["ingest_stats"]["duplicate_events_dropped"] == 10
    pd.testing.assert_frame_equal(df, steps(experiment_id="e", model="m", workload="w", tp=1))


def test_conflicting_duplicate_step_is_fatal(tmp_path):
    lines = (FIX / "traces_valid.json").read_text().splitlines()
    obj = json.loads(lines[1])
    _set(obj["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["events"][0], "queue.waiting_depth", {"intValue": "3"})
    p = tmp_path / "traces.json"
    p.write_text("\n".join(lines + [json.dumps(obj)]) + "\n")
    with pytest.raises(IngestError) as info:
        ingest_step_traces(p, "e", "m", "w", 1)
    assert (info.value.line, info.value.field) == (5, "step.id")
    assert "step.id=100 appears twice" in str(info.value)


def test_no_batch_summary_is_fatal(tmp_path):
    p = tmp_path / "traces.json"
    p.write_text((FIX / "traces_valid.json").read_text().splitlines()[0] + "\n")
    with pytest.raises(IngestError, match="no step.BATCH_SUMMARY events"):
        ingest_step_traces(p, "e", "m", "w", 1)


def test_line_not_an_object(tmp_path):
    p = tmp_path / "traces.json"
    p.write_text('{"resourceSpans": []}\n[1, 2]\n')
    with pytest.raises(IngestError, match=r"traces.json:2: field '<json>'"):
        ingest_step_traces(p, "e", "m", "w", 1)


# ------------------------------------------------------------------ round trip on real rows
def _otlp_lines(rows: pd.DataFrame, per_line: int = 7) -> list[str]:
    """Serialise steps rows as the fork + collector would: one scheduler_steps span per line."""
    out = []
    records = rows.to_dict("records")
    for n, start in enumerate(range(0, len(records), per_line)):
        events = []
        for rec in records[start:start + per_line]:
            attrs = []
            for key, col in STEP_ATTRIBUTES.items():
                v = rec[col]
                value = {"doubleValue": float(v)} if col == "kv_usage_gpu_ratio" else {"intValue": str(int(v))}
                attrs.append({"key": key, "value": value})
            events.append({"timeUnixNano": "0", "name": "step.BATCH_SUMMARY", "attributes": attrs})
        span = {"traceId": "0" * 32, "spanId": f"{n + 1:016x}", "name": f"scheduler_steps_{n + 1}",
                "startTimeUnixNano": "0", "endTimeUnixNano": "0", "events": events}
        out.append(json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [
            {"scope": {"name": "vllm.scheduler.step"}, "spans": [span]}]}]}))
    return out


@needs_real
def test_round_trip_50_real_rows(tmp_path):
    real = pd.read_parquet(REAL_STEPS)
    exp = "20260218-150304-codellama-34b-tp2-general"
    part = real[real["experiment_id"] == exp].sort_values("step_id")
    # 50 rows in step order starting where consecutive steps exist
    first = int(np.flatnonzero(part["next_step_start_delta_us"].notna().to_numpy())[0])
    sample = part.iloc[first:first + 50].reset_index(drop=True)
    assert sample["next_step_start_delta_us"].notna().sum() >= 3
    lines = _otlp_lines(sample)
    random.Random(3).shuffle(lines)  # exporters may write batches out of order
    p = tmp_path / "traces.json"
    p.write_text("\n".join(lines) + "\n")

    row0 = sample.iloc[0]
    got = ingest_step_traces(p, exp, row0["model"], row0["workload"], int(row0["tp"]))
    assert got.dtypes.equals(real.dtypes)
    cols = ["experiment_id", "model", "workload", "tp"] + TRACE_COLUMNS
    pd.testing.assert_frame_equal(got[cols], sample[cols])
    # derived delta: equal to the real one wherever step+1 is inside the sample
    pd.testing.assert_series_equal(got["next_step_start_delta_us"].iloc[:-1],
                                   sample["next_step_start_delta_us"].iloc[:-1])
    assert math.isnan(got["next_step_start_delta_us"].iloc[-1])


# ------------------------------------------------------------------ lifecycle
def test_lifecycle_valid_values():
    df = ingest_request_lifecycle(FIX / "lifecycle_valid.json", "exp-a")
    assert list(df.columns) == list(REQUESTS_DTYPES)
    assert df["request_index"].tolist() == [0, 1, 2, 3, 4]
    assert df["arrival_time_us"].tolist() == [0, 125_000, 500_000, 1_400_000, 2_000_000]
    assert df["input_tokens"].tolist() == [600, 512, 547, 0, 100]
    assert df["output_tokens"].tolist() == [4, 3, 8, 0, 1]
    assert df["has_error"].tolist() == [False, False, False, True, False]
    assert df["e2e_s"].tolist() == pytest.approx([1.0, 0.75, 1.5, 30.0, 1.0])
    ttft = df["ttft_s"].tolist()
    assert ttft[:3] == pytest.approx([0.0625, 0.125, 0.25])
    assert math.isnan(ttft[3]) and math.isnan(ttft[4])  # failed; single timestamp (not streamed)
    assert (df["prefix_group"] == "").all() and (df["experiment_id"] == "exp-a").all()
    assert df.attrs["ingest_stats"] == {"records": 5, "failed": 1, "successful_without_ttft": 1}


def test_lifecycle_t0():
    df = ingest_request_lifecycle(FIX / "lifecycle_valid.json", "exp-a", t0=999.0)
    assert df["arrival_time_us"].tolist() == [1_000_000, 1_125_000, 1_500_000, 2_400_000, 3_000_000]
    with pytest.raises(IngestError, match="before t0"):
        ingest_request_lifecycle(FIX / "lifecycle_valid.json", "exp-a", t0=1000.1)


def test_lifecycle_nested_format():
    df = ingest_request_lifecycle(FIX / "lifecycle_nested.json", "exp-n")
    assert df["input_tokens"].tolist() == [300, 310]
    assert df["output_tokens"].tolist() == [5, 2]
    assert df["arrival_time_us"].tolist() == [0, 500_000]
    assert df["ttft_s"].tolist() == pytest.approx([0.2, 0.125])
    assert df["e2e_s"].tolist() == pytest.approx([1.0, 0.25])


def test_lifecycle_json_lines(tmp_path):
    recs = json.loads((FIX / "lifecycle_valid.json").read_text())
    p = tmp_path / "lc.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    pd.testing.assert_frame_equal(ingest_request_lifecycle(p, "exp-a"),
                                  ingest_request_lifecycle(FIX / "lifecycle_valid.json", "exp-a"))
    recs[2]["start_time"] = "x"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    with pytest.raises(IngestError, match=r"lc.jsonl:3: field 'start_time'"):
        ingest_request_lifecycle(p, "exp-a")


@needs_real
def test_requests_dtypes_equal_real_parquet():
    real = pd.read_parquet(REAL_REQUESTS)
    df = ingest_request_lifecycle(FIX / "lifecycle_valid.json", "exp-a")
    assert list(df.columns) == list(real.columns)
    assert df.dtypes.equals(real.dtypes)


@pytest.mark.parametrize(
    "name, line, field, words",
    [
        ("lifecycle_truncated.json", 57, "<json>", "invalid JSON"),
        ("lifecycle_missing_field.json", 55, "end_time", "missing required field (request record 3)"),
        ("lifecycle_wrong_type.json", 21, "info.input_tokens", "must be an integer, got '600'"),
        ("lifecycle_e2e_lt_ttft.json", 2, "info.output_token_times[0]", "e2e < ttft"),
        ("lifecycle_nonmonotonic.json", 55, "info.output_token_times[3]", "non-monotonic"),
        ("lifecycle_negative_duration.json", 21, "end_time", "negative duration"),
    ],
)
def test_malformed_lifecycle_name_file_line_field(name, line, field, words):
    with pytest.raises(IngestError) as info:
        ingest_request_lifecycle(FIX / name, "exp-a")
    err = info.value
    assert (err.path, err.line, err.field) == (str(FIX / name), line, field)
    assert str(err).startswith(f"{FIX / name}:{line}: field '{field}'")
    assert words in str(err)


def test_lifecycle_line_numbers_point_at_record():
    text = (FIX / "lifecycle_missing_field.json").read_text().split("\n")
    assert text[55 - 1].strip() == "{"  # record 3 opens on line 55
    assert '"start_time": 1000.5' in text[55]


# ------------------------------------------------------------------ write_ground_truth
def _steps(exp, n=3):
    df = steps(experiment_id=exp).head(n).copy()
    return df


def test_write_new_directory_and_roundtrip(tmp_path):
    s = steps()
    r = ingest_request_lifecycle(FIX / "lifecycle_valid.json", "exp-a")
    out = write_ground_truth(s, r, tmp_path)
    assert out == {"steps": tmp_path / "steps" / "steps.parquet", "requests": tmp_path / "requests" / "requests.parquet"}
    pd.testing.assert_frame_equal(pd.read_parquet(out["steps"]), s)
    pd.testing.assert_frame_equal(pd.read_parquet(out["requests"]), r)
    leftovers = [p.name for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".parquet"]
    assert leftovers == []


def test_write_replaces_same_experiment_keeps_others(tmp_path):
    write_ground_truth(_steps("exp-a", 5), None, tmp_path)
    write_ground_truth(_steps("exp-b", 4), None, tmp_path)
    write_ground_truth(_steps("exp-a", 2), None, tmp_path)  # replaces exp-a's 5 rows
    got = pd.read_parquet(tmp_path / "steps" / "steps.parquet")
    assert got["experiment_id"].value_counts().to_dict() == {"exp-b": 4, "exp-a": 2}
    pd.testing.assert_frame_equal(got[got["experiment_id"] == "exp-b"].reset_index(drop=True), _steps("exp-b", 4))
    assert not (tmp_path / "requests").exists()  # requests untouched when None


@needs_real
def test_write_merges_into_copy_of_real_data(tmp_path):
    import shutil

    for sub in ("steps", "requests"):
        (tmp_path / sub).mkdir()
        shutil.copy(DATA / sub / f"{sub}.parquet", tmp_path / sub / f"{sub}.parquet")
    real_s = pd.read_parquet(REAL_STEPS)
    real_r = pd.read_parquet(REAL_REQUESTS)
    write_ground_truth(steps(experiment_id="mine"),
                       ingest_request_lifecycle(FIX / "lifecycle_valid.json", "mine"), tmp_path)
    got_s = pd.read_parquet(tmp_path / "steps" / "steps.parquet")
    got_r = pd.read_parquet(tmp_path / "requests" / "requests.parquet")
    assert got_s.dtypes.equals(real_s.dtypes) and got_r.dtypes.equals(real_r.dtypes)
    pd.testing.assert_frame_equal(got_s.iloc[: len(real_s)], real_s)
    pd.testing.assert_frame_equal(got_r.iloc[: len(real_r)], real_r)
    assert (got_s["experiment_id"] == "mine").sum() == 20 and (got_r["experiment_id"] == "mine").sum() == 5


def test_failed_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    write_ground_truth(_steps("exp-a", 3), None, tmp_path)
    target = tmp_path / "steps" / "steps.parquet"
    before = target.read_bytes()

    def boom(self, *a, **k):
        Path(a[0]).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", boom)
    with pytest.raises(OSError, match="disk full"):
        write_ground_truth(_steps("exp-b", 3), None, tmp_path)
    assert target.read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "steps").iterdir()) == ["steps.parquet"]


def test_write_rejects_bad_frames(tmp_path):
    with pytest.raises(ValueError, match="nothing to write"):
        write_ground_truth(None, None, tmp_path)
    with pytest.raises(ValueError, match="missing columns"):
        write_ground_truth(steps().drop(columns="duration_us"), None, tmp_path)
    with pytest.raises(ValueError, match="unexpected columns"):
        write_ground_truth(None, ingest_request_lifecycle(FIX / "lifecycle_valid.json", "e").assign(x=1), tmp_path)
