"""Issue 33: every ground-truth input is validated at the edge (evaluator/gt_contract.py, pydantic).

Property suites, one per format: a small copy of a real experiment directory (tests/hostile.py
`make_tiny_data`) with one field replaced by a hostile value (wrong type, fractional integer,
string boolean, NaN, infinity, negative, zero, absurdly large, container, null). The load must
end in a `DataError` or a correct load, never another exception, never a hang; a value outside
the field's domain must be a DataError naming the file; a value inside it must load as written.

Profiles as tests/test_hostile.py ("ci": 25 derandomized examples per format; HYPOTHESIS_PROFILE=long
for 500). `STEPEVOLVE_SCHEMA_STATS=FILE` appends every example's format, field, value and
outcome; with `STEPEVOLVE_SCHEMA_CENSUS=1` failures are recorded, not raised (a before/after count
over the same examples, e.g. with PYTHONPATH at an older checkout).
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator.errors import DataError
from tests import hostile
from bounded import bounded

settings.register_profile("ci", max_examples=25, derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile("long", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

EXP = hostile.EXP
STATS: dict[str, dict[str, int]] = {}

HOSTILE = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 4, 8, 2.7, 1.5, 4.0, 0.5, 1e12, -1e12, 1e300, 10**30, True, False, "false", "true",
                     "2", "", None, [], {}, [1], {"a": 1}, "1e3", float("nan"), float("inf"), -float("inf"), -0.0]),
    st.integers(min_value=-10**12, max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
)


def _bounded(fn, limit_s=120.0):
    return bounded(fn, limit_s)


@pytest.fixture(scope="module")
def base(data_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("schema")
    spec = hostile.make_tiny_data(data_dir, root / "spec", trace=False)
    trace = hostile.make_tiny_data(data_dir, root / "trace", trace=True)
    kern = hostile.make_tiny_data(data_dir, root / "kern", trace=False)
    shutil.copytree(data_dir / "kernels", kern / "kernels")
    return {"spec": spec, "trace": trace, "kern": kern}


def _copy(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


def _set(doc, path: str, value):
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    cur = doc
    for k in keys[:-1]:
        cur = cur[k]
    cur[keys[-1]] = value


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


# Domains: (predicate on the value, attribute of the loaded ground truth that must equal it or None)
POS_INT = lambda v: _is_int(v) and v >= 1  # noqa: E731
COUNT = lambda v: _is_int(v) and v >= 0  # noqa: E731
POS_NUM = lambda v: _is_num(v) and v > 0  # noqa: E731
NONNEG_NUM = lambda v: _is_num(v) and v >= 0  # noqa: E731
BOOL = lambda v: isinstance(v, bool)  # noqa: E731
WHOLE = lambda v: POS_INT(v) or (isinstance(v, float) and math.isfinite(v) and v.is_integer() and v >= 1)  # noqa: E731

DOCS = {
    "exp-config": ("experiments/{exp}/exp-config.yaml", "yaml", {
        "tensor_parallelism": (POS_INT, lambda gt: gt.experiments[0].tp),
        "max_num_seqs": (POS_INT, lambda gt: gt.experiments[0].max_num_seqs),
        "max_num_batched_tokens": (POS_INT, lambda gt: gt.experiments[0].max_batched_tokens),
        "max_model_len": (POS_INT, None),
        "block_size": (POS_INT, lambda gt: gt.experiments[0].block_size),
        "kv_blocks_total_gpu": (POS_INT, lambda gt: gt.experiments[0].kv_blocks),
    }),
    "profile": ("experiments/{exp}/profile.yaml", "yaml", {
        "load.stages.0.rate": (POS_NUM, lambda gt: gt.experiments[0].stages[0].rate),
        "load.stages.1.duration": (POS_NUM, lambda gt: gt.experiments[0].stages[1].duration_s),
        "data.shared_prefix.output_len": (COUNT, lambda gt: gt.experiments[0].output_len),
        "data.shared_prefix.question_len": (COUNT, lambda gt: gt.experiments[0].question_len),
        "data.shared_prefix.system_prompt_len": (COUNT, lambda gt: gt.experiments[0].system_prompt_len),
        "data.shared_prefix.num_unique_system_prompts": (POS_INT, None),
        "data.shared_prefix.num_users_per_system_prompt": (POS_INT, None),
        "server.ignore_eos": (BOOL, lambda gt: gt.experiments[0].ignore_eos),
        "load.stages": (lambda v: False, None),
    }),
    "resolved-config": ("experiments/{exp}/inference_perf_resolved_config.yaml", "yaml", {
        "data.shared_prefix.num_groups": (lambda v: v is None or POS_INT(v), None),
        "data.shared_prefix.num_prompts_per_group": (lambda v: v is None or POS_INT(v), None),
        "load.request_timeout": (lambda v: v is None or POS_NUM(v), None),
    }),
    "stage-summary": ("experiments/{exp}/stage_0_lifecycle_metrics.json", "json", {
        "successes.count": (COUNT, lambda gt: gt.experiments[0].stages[0].n_requests),
        "failures.count": (lambda v: v is None or COUNT(v), None),
        "successes.latency.request_latency.mean": (POS_NUM, lambda gt: gt.experiments[0].stages[0].e2e_s),
        "successes.latency.time_to_first_token.mean": (POS_NUM, lambda gt: gt.experiments[0].stages[0].ttft_s),
        "successes.latency.inter_token_latency.mean": (POS_NUM, None),
        "successes.prompt_len.mean": (NONNEG_NUM, lambda gt: gt.experiments[0].stages[0].mean_input),
        "successes.output_len.mean": (NONNEG_NUM, None),
    }),
    "hardware": ("hardware/h100-sxm.json", "json", {
        "compute.bf16_tensor_core": (POS_NUM, None),
        "memory.bandwidth_tb_s": (POS_NUM, lambda gt: gt.hardware["hbm_bw"] / 1e12),
        "interconnect.nvlink_bandwidth_gb_s": (POS_NUM, None),
        "compute.with_sparsity": (BOOL, None),
    }),
    "model-config": ("model_configs/Llama-2-70b-hf/config.json", "json", {
        "num_hidden_layers": (WHOLE, lambda gt: gt.experiments[0].arch["layers"]),
        "hidden_size": (WHOLE, None),
        "num_attention_heads": (WHOLE, None),
        "num_key_value_heads": (lambda v: v is None or WHOLE(v), None),
        "intermediate_size": (WHOLE, None),
        "vocab_size": (WHOLE, lambda gt: gt.experiments[0].arch["vocab"]),
        "head_dim": (lambda v: v is None or WHOLE(v), None),
    }),
}


CENSUS = bool(os.environ.get("STEPEVOLVE_SCHEMA_CENSUS"))


def _record(fmt: str, outcome: str, what: str = "", value=None, why: str = "") -> bool:
    s = STATS.setdefault(fmt, {"examples": 0, "data_error": 0, "loaded": 0, "failures": 0})
    s["examples"] += 1
    s[outcome] += 1
    out = os.environ.get("STEPEVOLVE_SCHEMA_STATS")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"format": fmt, "outcome": outcome, "field": what, "value": repr(value)[:40],
                                "why": why[:200]}) + "\n")
    return CENSUS  # in a census a failure is counted, not raised


def _same(got, value) -> bool:
    return got == value or (_is_num(got) and _is_num(value) and math.isclose(got, value, rel_tol=1e-12))


def _check(fmt: str, root: Path, mutated: Path, in_domain: bool, loaded_value, value, what: str):
    """The property: DataError (naming the file when the value is outside the domain) or a
    correct load; anything else is recorded as a failure and fails the test."""
    from evaluator.data import load
    try:
        gt = _bounded(lambda: load(str(root)))
    except DataError as e:
        msg = str(e)
        ok = "\n" not in msg and (in_domain or mutated.name in msg)
        if not ok and _record(fmt, "failures", what, value, f"DataError not naming {mutated.name}: {msg}"):
            return
        if ok:
            _record(fmt, "data_error", what, value, msg)
        assert ok, f"{what}={value!r}: DataError does not name {mutated.name}: {msg}"
        return
    except Exception as e:  # noqa: BLE001 - the failure the suite looks for
        if _record(fmt, "failures", what, value, f"{type(e).__name__}: {e}"):
            return
        raise AssertionError(f"{what}={value!r}: {type(e).__name__}: {e}") from e
    ok = in_domain and (loaded_value is None or _same(loaded_value(gt), value))
    why = "" if ok else ("loaded silently outside its domain" if not in_domain else "loaded as another value")
    if not ok and _record(fmt, "failures", what, value, why):
        return
    if ok:
        _record(fmt, "loaded", what, value)
    assert ok, f"{what}={value!r} {why}"


def _doc_case(fmt: str, base, tmp_path, data):
    rel, syntax, fields = DOCS[fmt]
    field = data.draw(st.sampled_from(sorted(fields)), label="field")
    value = data.draw(HOSTILE, label="value")
    root = _copy(base["spec"], tmp_path / "d")
    path = root / rel.format(exp=EXP)
    doc = yaml.safe_load(path.read_text())
    _set(doc, field, value)
    text = json.dumps(doc, allow_nan=True) if syntax == "json" else yaml.safe_dump(doc)
    path.write_text(text)
    in_domain, loaded = fields[field]
    _check(fmt, root, path, in_domain(value), loaded, value, field)


@given(data=st.data())
def test_exp_config(data, base, tmp_path):
    _doc_case("exp-config", base, tmp_path, data)


@given(data=st.data())
def test_profile(data, base, tmp_path):
    _doc_case("profile", base, tmp_path, data)


@given(data=st.data())
def test_resolved_config(data, base, tmp_path):
    _doc_case("resolved-config", base, tmp_path, data)


@given(data=st.data())
def test_stage_summary(data, base, tmp_path):
    _doc_case("stage-summary", base, tmp_path, data)


@given(data=st.data())
def test_hardware(data, base, tmp_path):
    _doc_case("hardware", base, tmp_path, data)


@given(data=st.data())
def test_model_config(data, base, tmp_path):
    _doc_case("model-config", base, tmp_path, data)


# ---------------------------------------------------------------- tables

TABLE_VALUES = st.one_of(
    st.sampled_from([0, -1, 1, 2.5, 1e12, 1e300, -1e12, float("nan"), float("inf"), -float("inf"), 10**15]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10**15, max_value=10**15),
)
TABLE_FIELDS = {
    "requests": ("requests/requests.parquet", {
        "arrival_time_us": lambda v, err: _is_num(v) and 0 <= v <= 1e13,
        "input_tokens": lambda v, err: _is_num(v) and float(v).is_integer() and 1 <= v <= 1e7,
        "output_tokens": lambda v, err: _is_num(v) and float(v).is_integer() and 0 <= v <= 1e7,
        "e2e_s": lambda v, err: (err and (math.isnan(v) or 0 <= v <= 1e5)) or (_is_num(v) and 0 <= v <= 1e5),
        "ttft_s": lambda v, err: (err and (math.isnan(v) or 0 <= v <= 1e5)) or (_is_num(v) and 0 <= v <= 1e5),
    }),
    "steps": ("steps/steps.parquet", {
        "prefill_tokens": lambda v, err: _is_num(v) and float(v).is_integer() and 0 <= v <= 1e7,
        "decode_tokens": lambda v, err: _is_num(v) and float(v).is_integer() and 0 <= v <= 1e7,
        "num_decode_reqs": lambda v, err: _is_num(v) and float(v).is_integer() and 0 <= v <= 1e9,
        "next_step_start_delta_us": lambda v, err: math.isnan(v) or (_is_num(v) and 0 < v <= 1e9),
    }),
}


def _table_case(fmt: str, base, tmp_path, data):
    rel, fields = TABLE_FIELDS[fmt]
    col = data.draw(st.sampled_from(sorted(fields)), label="column")
    value = data.draw(TABLE_VALUES, label="value")
    root = _copy(base["trace"], tmp_path / "d")
    path = root / rel
    df = pd.read_parquet(path)
    row = data.draw(st.integers(0, len(df) - 1), label="row")
    err = bool(df["has_error"].iloc[row]) if "has_error" in df.columns else False
    if col == "ttft_s" and not err:
        value = value if not _is_num(value) else min(value, float(df["e2e_s"].iloc[row]))  # e2e >= ttft rule aside
    df[col] = df[col].astype("float64") if not isinstance(value, int) or abs(value) > 2**53 else df[col].astype("float64")
    df.loc[df.index[row], col] = float(value) if abs(float(value)) < math.inf or not isinstance(value, int) else value
    df.to_parquet(path)
    in_domain = fields[col](float(value), err)
    _check(fmt, root, path, in_domain, None, value, f"{col}[row {row}]")


@given(data=st.data())
def test_request_rows(data, base, tmp_path):
    _table_case("requests", base, tmp_path, data)


@given(data=st.data())
def test_step_rows(data, base, tmp_path):
    _table_case("steps", base, tmp_path, data)


KERNEL_FILES = ["kernels/aiconfigurator-h100-vllm-0.14.0/gemm_perf.parquet",
                "kernels/aiconfigurator-h100-vllm-0.14.0/generation_attention_perf.parquet"]


@given(data=st.data())
def test_kernel_tables(data, base, tmp_path):
    """A kernel table cell: a non-positive or non-finite latency or shape is a DataError naming the table."""
    rel = data.draw(st.sampled_from(KERNEL_FILES), label="file")
    root = _copy(base["kern"], tmp_path / "d")
    path = root / rel
    df = pd.read_parquet(path)
    col = data.draw(st.sampled_from(["latency", "batch_size" if "generation" in rel else "m"]), label="column")
    value = float(data.draw(st.sampled_from([0.0, -1.0, float("nan"), float("inf"), -float("inf"), -1e-9]),
                            label="value"))
    row = data.draw(st.integers(0, len(df) - 1), label="row")
    df[col] = df[col].astype("float64")
    df.loc[df.index[row], col] = value
    df.to_parquet(path)
    _check("kernel-tables", root, path, False, None, value, f"{col}[row {row}]")


def test_real_data_passes_every_schema(data_dir):
    """The shared data and the shipped model configs are inside every schema."""
    from evaluator.data import load
    from evaluator.gt_contract import check_file
    assert load(str(data_dir)).experiments
    for p in sorted(Path(__file__).resolve().parent.parent.glob("evaluator/model_configs/*/config.json")):
        check_file("model-config", json.loads(p.read_text()), p)


def test_named_violations(base, tmp_path):
    """The brief's cases, one line each naming file, field and value."""
    from evaluator.data import load
    cases = [
        ("experiments/{exp}/exp-config.yaml", "tensor_parallelism", 2.7, "field 'tensor_parallelism'"),
        ("experiments/{exp}/exp-config.yaml", "max_num_seqs", 1.5, "field 'max_num_seqs'"),
        ("experiments/{exp}/profile.yaml", "server.ignore_eos", "false", "field 'server.ignore_eos'"),
        ("experiments/{exp}/stage_0_lifecycle_metrics.json", "successes.latency.request_latency.mean", 1e12,
         "request_latency.mean"),
        ("experiments/{exp}/stage_1_lifecycle_metrics.json", "failures.count", -1, "field 'failures.count'"),
        ("hardware/h100-sxm.json", "memory.bandwidth_tb_s", 0, "field 'memory.bandwidth_tb_s'"),
        ("hardware/h100-sxm.json", "compute.bf16_tensor_core", -5, "field 'compute.bf16_tensor_core'"),
        ("model_configs/Llama-2-70b-hf/config.json", "vocab_size", 10**15, "field 'vocab_size'"),
    ]
    for rel, field, value, expect in cases:
        root = _copy(base["spec"], tmp_path / "n")
        path = root / rel.format(exp=EXP)
        doc = yaml.safe_load(path.read_text())
        _set(doc, field, value)
        path.write_text(json.dumps(doc) if path.suffix == ".json" else yaml.safe_dump(doc))
        with pytest.raises(DataError) as ei:
            load(str(root))
        msg = str(ei.value)
        assert "\n" not in msg and str(path) in msg and expect in msg and repr(value)[:10] in msg, msg


def test_report_stats():
    """Printed with -s: examples generated and failures per format (for the issue report)."""
    print("\nschema property stats:", json.dumps(STATS, sort_keys=True))
    assert CENSUS or all(s["failures"] == 0 for s in STATS.values())
