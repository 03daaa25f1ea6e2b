"""The ground-truth contract (shared/DESIGN.md section 2): every input validated at the edge.

Two layers, both raising `DataError` with one line naming the file, the field (or row and
column) and the value:

1. **Schemas, where files are read** (`check_file(kind, obj, path)`, called by
   `evaluator.data` on every parsed YAML/JSON document; `check_table(kind, df, path)` on every
   table). The documents are pydantic models (`SCHEMAS`): integers are integers (`2.7` or
   `1.5` tensor-parallel ranks are errors, not truncated; `true` is not an integer), booleans
   are booleans (the string "false" is an error, not true), numbers are finite and physical
   (an E2E mean of 1e12 s, a zero or negative FLOP/s or bandwidth, a failure count of -1 are
   data errors, never blamed on the program), and the model config's sizes are bounded so a
   huge declared size cannot run the loader out of memory. Fields we do not read are left
   alone (extra fields are allowed). Tables (requests, steps, the replay metadata) are checked
   column by column, vectorised, against `TABLES` (finite, non-negative, integer-valued where
   counts, bounded). Before anything is opened, `check_regular_files` refuses a FIFO, device or
   socket where a data file is expected (opening a FIFO would block forever).
2. **The loaded `GroundTruth`** (`check_contract`, called by `data.load`): the values describe
   something that could have been measured: a server with at least one GPU, sequence slot and
   KV block, positive stage means with E2E >= TTFT, a requests file with successful requests,
   step rows with measured cycles, at most `MAX_ARRIVALS` simulated arrivals. Without it an
   impossible value scored as valid (a negative mean E2E gave an error of -47%), or was blamed
   on the candidate ("runaway simulation"), or ran the simulator out of memory.

Failed requests (`has_error`, 0 tokens, NaN TTFT) are valid input and are not checked here
beyond being counted.
"""
from __future__ import annotations

import math
import os
import stat
import typing
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError,
                      model_validator)

from evaluator.errors import DataError
from evaluator.server_config import limit_error

# Poisson arrivals one experiment may ask the simulator for: the real data has at most 12,000
# per stage; a profile asking for a billion (rate 1e6 for 20 min) needs ~9 GiB.
MAX_ARRIVALS = 1_000_000
MAX_LATENCY_S = 100_000.0  # a mean request latency above ~28 hours is not a measurement
MAX_TOKENS = 10_000_000  # prompt/output lengths
MAX_COUNT = 10**9  # requests, blocks, sequences

# ---------------------------------------------------------------- field types

PosInt = Annotated[StrictInt, Field(ge=1, le=MAX_COUNT)]
Count = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
Tokens = Annotated[StrictInt, Field(ge=0, le=MAX_TOKENS)]


def _num(gt: float | None = None, ge: float | None = None, le: float | None = None):
    """A finite number (an int is a number; a bool or a string is not)."""
    return Annotated[float, Field(strict=True, allow_inf_nan=False, gt=gt, ge=ge, le=le)]


Seconds = _num(gt=0, le=MAX_LATENCY_S)
NonNegSeconds = _num(ge=0, le=MAX_LATENCY_S)


class _Doc(BaseModel):
    model_config = ConfigDict(extra="allow")  # fields we do not read are not ours to judge


# exp-config.yaml (the server)
class ExpConfig(_Doc):
    """vLLM's own argument names; every one optional but the model (evaluator.server_config
    names the default taken for each one missing)."""
    model: Annotated[StrictStr, Field(min_length=1)]
    tensor_parallelism: Annotated[StrictInt, Field(ge=1, le=1024)] = None
    max_model_len: Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)] = None
    max_num_batched_tokens: Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)] = None
    max_num_seqs: Annotated[StrictInt, Field(ge=1, le=1_000_000)] = None
    block_size: Annotated[StrictInt, Field(ge=1, le=65_536)] = None
    kv_blocks_total_gpu: Annotated[StrictInt, Field(ge=1, le=MAX_COUNT)] = None
    enable_chunked_prefill: StrictBool = None
    enable_prefix_caching: StrictBool = None
    vllm_version: Annotated[StrictStr, Field(min_length=1, max_length=100)] = None


# profile.yaml (the load generator)
class SharedPrefix(_Doc):
    num_unique_system_prompts: Annotated[StrictInt, Field(ge=1, le=1_000_000)] = None
    num_users_per_system_prompt: Annotated[StrictInt, Field(ge=1, le=1_000_000)] = None
    system_prompt_len: Tokens = None
    question_len: Tokens = None
    output_len: Tokens = None
    enable_multi_turn_chat: StrictBool = None


class ProfileData(_Doc):
    shared_prefix: SharedPrefix = None


class LoadStage(_Doc):
    rate: _num(gt=0, le=1e7)
    duration: _num(gt=0, le=1e8)


class Load(_Doc):
    stages: Annotated[list[LoadStage], Field(min_length=1, max_length=10_000)]
    request_timeout: _num(gt=0, le=1e7) | None = None


class Server(_Doc):
    ignore_eos: StrictBool = None


class Api(_Doc):
    streaming: StrictBool = None


class Profile(_Doc):
    data: ProfileData = None
    load: Load
    server: Server = None
    api: Api = None

    @model_validator(mode="after")
    def _pool(self):
        sp = self.data.shared_prefix if self.data is not None else None
        if sp is not None and (sp.num_unique_system_prompts or 1) * (sp.num_users_per_system_prompt or 1) > 1_000_000:
            raise ValueError("data.shared_prefix asks for more than 1,000,000 prompts")
        return self


# inference_perf_resolved_config.yaml (what the load generator used)
class ResolvedSharedPrefix(_Doc):
    num_groups: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None
    num_prompts_per_group: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None


class ResolvedData(_Doc):
    shared_prefix: ResolvedSharedPrefix | None = None


class ResolvedLoad(_Doc):
    request_timeout: _num(gt=0, le=1e7) | None = None


class ResolvedConfig(_Doc):
    data: ResolvedData | None = None
    load: ResolvedLoad | None = None
    server: Server | None = None


# stage_<i>_lifecycle_metrics.json / summary_lifecycle_metrics.json
class _Mean(_Doc):
    mean: Seconds


class _Latency(_Doc):
    request_latency: _Mean
    time_to_first_token: _Mean
    inter_token_latency: _Mean


class _LenMean(_Doc):
    mean: _num(ge=0, le=MAX_TOKENS)


class _Successes(_Doc):
    count: Count
    latency: _Latency
    prompt_len: _LenMean
    output_len: _LenMean


class _Failures(_Doc):
    count: Count | None = None


class StageSummary(_Doc):
    successes: _Successes
    failures: _Failures | None = None


# hardware/h100-sxm.json
class _Compute(_Doc):
    bf16_tensor_core: _num(gt=0, le=1e7)  # TFLOP/s
    with_sparsity: StrictBool = None


class _Memory(_Doc):
    bandwidth_tb_s: _num(gt=0, le=1e4)


class _Interconnect(_Doc):
    nvlink_bandwidth_gb_s: _num(gt=0, le=1e7)


class Hardware(_Doc):
    name: StrictStr = None
    compute: _Compute
    memory: _Memory
    interconnect: _Interconnect


# model_configs/<name>/config.json (Hugging Face): the sizes bounded far above any real model,
# so a declared size cannot run the loader out of memory; which fields are required and how
# they combine is evaluator.model_configs' (it reads the same document next). A whole float
# (4096.0) is read as the integer it is, as there.
def _whole_float(v):
    return int(v) if isinstance(v, float) and v.is_integer() and abs(v) < 2**53 else v


def _size(hi: int, lo: int = 1):
    return Annotated[StrictInt, Field(ge=lo, le=hi), BeforeValidator(_whole_float)] | None


class ModelConfig(_Doc):
    num_hidden_layers: _size(1_000) = None
    hidden_size: _size(1 << 20) = None
    num_attention_heads: _size(16_384) = None
    num_key_value_heads: _size(16_384) = None
    head_dim: _size(1 << 16) = None
    intermediate_size: _size(1 << 22) = None
    moe_intermediate_size: _size(1 << 22) = None
    shared_expert_intermediate_size: _size(1 << 22, lo=0) = None
    vocab_size: _size(1 << 24) = None
    num_local_experts: _size(4_096, lo=0) = None
    num_experts: _size(4_096, lo=0) = None
    n_routed_experts: _size(4_096, lo=0) = None
    n_shared_experts: _size(4_096, lo=0) = None
    num_experts_per_tok: _size(4_096, lo=0) = None
    tie_word_embeddings: StrictBool | None = None
    text_config: "ModelConfig | None" = None


SCHEMAS: dict[str, type[BaseModel]] = {
    "exp-config": ExpConfig, "profile": Profile, "resolved-config": ResolvedConfig,
    "stage-summary": StageSummary, "hardware": Hardware, "model-config": ModelConfig,
}


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


_PHRASES = {
    "int_type": "must be an integer", "int_from_float": "must be an integer", "int_parsing": "must be an integer",
    "bool_type": "must be true or false", "bool_parsing": "must be true or false",
    "float_type": "must be a number", "float_parsing": "must be a number", "finite_number": "must be a finite number",
    "string_type": "must be a string", "string_too_short": "must not be empty", "dict_type": "must be a mapping",
    "model_type": "must be a mapping", "model_attributes_type": "must be a mapping", "list_type": "must be a list",
}


def _phrase(err: dict, msg: str) -> str:
    """pydantic's error as the contract words it ("must be a positive number")."""
    t, ctx = err.get("type"), err.get("ctx") or {}
    if t == "greater_than":
        return "must be a positive number" if ctx.get("gt") == 0 else f"must be > {ctx.get('gt')}"
    if t == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}"
    if t == "less_than_equal":
        le = ctx.get("le")
        return f"must be <= {le:,}" if isinstance(le, int) else f"must be <= {le:g}"
    if t == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    if t == "too_long":
        return f"must have at most {ctx.get('max_length')} items"
    if t == "value_error":
        return f"is impossible ({msg.removeprefix('Value error, ')})"
    return _PHRASES.get(t, f"is invalid ({msg})")


def _model_of(tp):
    """The pydantic model inside an annotation (Optional, Annotated, list), or None."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in typing.get_args(tp):
        m = _model_of(arg)
        if m is not None:
            return m
    return None


def _leaf(model: type[BaseModel], loc: tuple) -> str:
    """A missing field's path down to the first value the reader needs (a missing
    'successes.latency.time_to_first_token' is named '...time_to_first_token.mean')."""
    parts, cur = list(loc), model
    for part in loc:
        if cur is None or isinstance(part, int):
            continue
        f = cur.model_fields.get(part)
        cur = _model_of(f.annotation) if f is not None else None
    while cur is not None:
        req = [n for n, f in cur.model_fields.items() if f.is_required()]
        if not req:
            break
        parts.append(req[0])
        cur = _model_of(cur.model_fields[req[0]].annotation)
    return _loc(tuple(parts))


def check_file(kind: str, obj: Any, path) -> None:
    """Validate a parsed document against its schema (`SCHEMAS[kind]`); DataError naming the
    file, the field and the value of the first violation."""
    try:
        SCHEMAS[kind].model_validate(obj)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        field = _loc(tuple(err.get("loc") or ()))
        msg = str(err.get("msg", "invalid")).replace("\n", " ")
        if err.get("type") == "missing":
            raise DataError(f"{path}: missing field '{_leaf(SCHEMAS[kind], tuple(err.get('loc') or ()))}'") from None
        where = f"field '{field}'" if field else "the document"
        raise DataError(f"{path}: {where} {_phrase(err, msg)}, got {_short(err.get('input'))}") from None
    except RecursionError:
        raise DataError(f"{path}: nested too deeply") from None


# ---------------------------------------------------------------- tables

class Column(BaseModel):
    """How one table column is checked (vectorised: a row-by-row model would cost seconds)."""
    model_config = ConfigDict(frozen=True)
    name: str
    integer: bool = False  # integer-valued (a count)
    lo: float = 0.0  # inclusive
    hi: float = math.inf  # inclusive
    missing_ok: bool = False  # NaN allowed (e.g. no measured cycle, no TTFT on a failed row)
    missing_ok_where: str | None = None  # NaN allowed on rows where this boolean column is true


TABLES: dict[str, tuple[Column, ...]] = {
    "requests": (
        Column(name="arrival_time_us", lo=0, hi=1e13),
        Column(name="input_tokens", integer=True, hi=MAX_TOKENS),
        Column(name="output_tokens", integer=True, hi=MAX_TOKENS),
        Column(name="e2e_s", hi=MAX_LATENCY_S, missing_ok_where="has_error"),
        Column(name="ttft_s", hi=MAX_LATENCY_S, missing_ok_where="has_error"),
        Column(name="request_index", integer=True, hi=MAX_COUNT),
    ),
    "steps": (
        Column(name="step_id", integer=True, hi=1e12),
        Column(name="prefill_tokens", integer=True, hi=MAX_TOKENS),
        Column(name="decode_tokens", integer=True, hi=MAX_TOKENS),
        Column(name="num_prefill_reqs", integer=True, hi=MAX_COUNT),
        Column(name="num_decode_reqs", integer=True, hi=MAX_COUNT),
        Column(name="next_step_start_delta_us", hi=1e9, missing_ok=True),
        Column(name="duration_us", hi=1e12, missing_ok=True),
        Column(name="kv_blocks_total_gpu", integer=True, hi=MAX_COUNT, missing_ok=True),
    ),
    "replay-meta": (
        Column(name="cfg_kv_blocks_total_gpu", integer=True, lo=1, hi=MAX_COUNT),
        Column(name="cfg_tensor_parallelism", integer=True, lo=1, hi=1024, missing_ok=True),
        Column(name="cfg_max_num_seqs", integer=True, lo=1, hi=1_000_000, missing_ok=True),
        Column(name="cfg_max_num_batched_tokens", integer=True, lo=1, hi=MAX_TOKENS, missing_ok=True),
        Column(name="cfg_block_size", integer=True, lo=1, hi=65_536, missing_ok=True),
    ),
}


def check_table(kind: str, df, path) -> None:
    """Every column of `TABLES[kind]` present in `df`: numeric, finite, in range, integer-valued
    where a count; DataError naming the file, the row (as stored) and the column."""
    for col in TABLES[kind]:
        if col.name not in df.columns:
            continue  # required columns are checked by the reader
        raw = df[col.name]
        v = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64, na_value=np.nan) \
            if not pd.api.types.is_bool_dtype(raw) else np.full(len(raw), np.nan)
        missing = np.isnan(v)
        allowed = np.zeros(len(v), bool)
        if col.missing_ok:
            allowed[:] = True
        elif col.missing_ok_where is not None and col.missing_ok_where in df.columns:
            allowed = df[col.missing_ok_where].fillna(False).to_numpy(bool)
        not_a_number = missing & raw.notna().to_numpy()  # text, a bool, ...: never allowed
        with np.errstate(invalid="ignore"):
            bad = not_a_number | (missing & ~allowed) | (~missing & ~(np.isfinite(v) & (v >= col.lo) & (v <= col.hi)))
            if col.integer:
                bad |= ~missing & np.isfinite(v) & (v != np.floor(v))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            val = raw.iloc[i]
            val = val.item() if isinstance(val, np.generic) else val
            rule = ("an integer" if col.integer else "a finite number") + \
                (f" in [{col.lo:g}, {col.hi:g}]" if math.isfinite(col.hi) else f" >= {col.lo:g}")
            raise DataError(f"{path}: row {df.index[i]}: column '{col.name}' must be {rule} (got {_short(val)})")


# ---------------------------------------------------------------- files that are not files

DATA_SUFFIXES = (".yaml", ".yml", ".json", ".parquet", ".csv")


def check_regular_files(root) -> None:
    """DataError for a FIFO, device or socket where a data file would be read (named like one),
    and for a ground-truth path that is not a directory: opening a FIFO blocks forever."""
    root = Path(root)
    try:
        st = os.stat(root)
    except OSError:
        return  # the reader reports a missing directory
    if not stat.S_ISDIR(st.st_mode):
        raise DataError(f"{root}: not a directory (a ground-truth directory is expected)")
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if not name.endswith(DATA_SUFFIXES):
                continue
            p = os.path.join(dirpath, name)
            try:
                mode = os.stat(p).st_mode
            except OSError:
                continue  # a dangling link: the reader says it is missing
            if not stat.S_ISREG(mode):
                kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else \
                    "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
                raise DataError(f"{p}: is {kind}, not a data file")


# ---------------------------------------------------------------- the loaded ground truth

_SERVER_FIELDS = (("tp", "tensor_parallelism", "exp-config.yaml"),
                  ("kv_blocks", "kv_blocks_total_gpu / cfg_kv_blocks_total_gpu", "exp-config.yaml"),
                  ("max_num_seqs", "max_num_seqs", "exp-config.yaml"),
                  ("max_batched_tokens", "max_num_batched_tokens", "exp-config.yaml"),
                  ("block_size", "block_size", "exp-config.yaml"),
                  ("max_model_len", "max_model_len", "exp-config.yaml"),
                  ("prompt_pool", "data.shared_prefix (groups x prompts per group)", "profile.yaml"))
_STAGE_MEANS = (("e2e_s", "successes.latency.request_latency.mean"),
                ("ttft_s", "successes.latency.time_to_first_token.mean"),
                ("itl_s", "successes.latency.inter_token_latency.mean"))


def _where(gt, exp_id: str, name: str) -> str:
    if gt.source == "embedded":
        return f"embedded table, experiment {exp_id}"
    return str(Path(gt.source) / "experiments" / exp_id / name)


def check_contract(gt) -> None:
    """Raise DataError on the first value that breaks the contract; return None otherwise."""
    for e in gt.experiments:
        _check_experiment(gt, e)
    if gt.requests is not None:
        _check_requests(gt)
    if gt.steps is not None:
        _check_steps(gt)


def _check_experiment(gt, e) -> None:
    for attr, field, fname in _SERVER_FIELDS:
        v = getattr(e, attr)
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise DataError(f"{_where(gt, e.id, fname)}: field '{field}' must be an integer >= 1, got {v!r}")
    for attr, field in (("chunked_prefill", "enable_chunked_prefill"), ("prefix_caching", "enable_prefix_caching")):
        if not isinstance(getattr(e, attr), (bool, np.bool_)):
            raise DataError(f"{_where(gt, e.id, 'exp-config.yaml')}: field '{field}' must be true or false, "
                            f"got {getattr(e, attr)!r}")
    bad = limit_error(e.max_num_seqs, e.max_batched_tokens, e.max_model_len, bool(e.chunked_prefill), e.kv_blocks,
                      e.block_size)
    if bad is not None:
        raise DataError(f"{_where(gt, e.id, 'exp-config.yaml')}: field '{bad[0]}' {bad[1]}")
    if e.output_len < 0 or e.system_prompt_len < 0 or e.question_len < 0:
        raise DataError(f"{_where(gt, e.id, 'profile.yaml')}: field 'data.shared_prefix' lengths must be >= 0")
    arrivals = 0.0
    for s in e.stages:
        prof = _where(gt, e.id, "profile.yaml")
        for name, v in (("rate", s.rate), ("duration", s.duration_s)):
            if not (math.isfinite(v) and v > 0):
                raise DataError(f"{prof}: load.stages[{s.index}] field '{name}' must be a positive number, got {v!r}")
        arrivals += s.rate * s.duration_s
        src = (f"{gt.source}/requests/requests.parquet, experiment {e.id} stage {s.index}"
               if s.itl_source == "requests" else _where(gt, e.id, f"stage_{s.index}_lifecycle_metrics.json"))
        for attr, field in _STAGE_MEANS:
            v = getattr(s, attr)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise DataError(f"{src}: field '{field}' must be a positive number, got {v!r}")
        if s.e2e_s < s.ttft_s:
            raise DataError(f"{src}: mean E2E ({s.e2e_s:g} s) is below mean TTFT ({s.ttft_s:g} s)")
        if not (math.isfinite(s.mean_input) and s.mean_input >= 0):
            raise DataError(f"{src}: field 'successes.prompt_len.mean' must be >= 0, got {s.mean_input!r}")
    if arrivals > MAX_ARRIVALS:
        raise DataError(f"{_where(gt, e.id, 'profile.yaml')}: load.stages ask for {arrivals:.3g} arrivals "
                        f"(rate x duration); at most {MAX_ARRIVALS:,} are simulated")


def _check_requests(gt) -> None:
    path = f"{gt.source}/requests/requests.parquet"
    df = gt.requests
    if len(df) == 0:
        raise DataError(f"{path}: no rows (remove requests/ for workload-spec mode)")
    ok = ~df["has_error"].astype(bool)
    if not ok.any():
        raise DataError(f"{path}: every row failed (has_error); no request was measured")
    for col in ("e2e_s", "ttft_s"):
        vals = df.loc[ok, col].to_numpy(dtype=float)
        bad = ~np.isfinite(vals) | (vals < 0)
        if bad.any():
            row = int(df.index[ok][int(np.flatnonzero(bad)[0])])
            raise DataError(f"{path}: row {row}: field '{col}' must be a finite number >= 0 on a successful request")
    ids = set(df.loc[ok, "experiment_id"])
    for e in gt.experiments:
        if e.id not in ids:
            raise DataError(f"{path}: experiment {e.id} has no successful request rows")


def _check_steps(gt) -> None:
    path = f"{gt.source}/steps/steps.parquet"
    df = gt.steps
    if len(df) == 0:
        raise DataError(f"{path}: no rows for any experiment (remove steps/ to skip per-step scoring)")
    cyc = df["next_step_start_delta_us"].to_numpy(dtype=float)
    bad = (np.isinf(cyc)) | (cyc <= 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(f"{path}: row {row}: field 'next_step_start_delta_us' must be a positive number "
                        f"or empty, got {cyc[row]!r}")
    if not np.isfinite(cyc).any():
        raise DataError(f"{path}: no row has a measured cycle ('next_step_start_delta_us' is empty everywhere)")
    _check_step_clock(gt, df, path)


CLOCK_MIN_ROWS = 100  # rows of one experiment before its time span is checked against its stages
CLOCK_RATIO = 500.0  # a span this many times shorter or longer than the stages is another unit


def _check_step_clock(gt, df, path) -> None:
    """The step rows are placed in their load stages by `ts_start_ns` (`step_scoring.row_stages`):
    an experiment whose rows span a time CLOCK_RATIO times shorter or longer than its stages'
    reads a clock in another unit (microseconds as nanoseconds: 1,000x short), which would
    put every row in one stage without a word."""
    if "ts_start_ns" not in df.columns or df["ts_start_ns"].isna().any():
        return
    stages = {e.id: max(s.start_s + s.duration_s for s in e.stages) for e in gt.experiments if e.stages}
    for exp_id, ts in df.groupby("experiment_id")["ts_start_ns"]:
        total = stages.get(exp_id)
        if total is None or total <= 0 or len(ts) < CLOCK_MIN_ROWS:
            continue
        span = (float(ts.max()) - float(ts.min())) / 1e9
        if not total / CLOCK_RATIO <= span <= total * CLOCK_RATIO:
            raise DataError(f"{path}: experiment {exp_id}: its {len(ts)} step rows span {span:.3g} s of "
                            f"'ts_start_ns' against {total:.3g} s of load stages (nanoseconds expected)")
