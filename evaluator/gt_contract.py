"""The ground-truth contract (shared/DESIGN.md section 2), checked once on every loaded `GroundTruth`.

The readers in `evaluator.data` check that each file parses and each field has its type; this
module checks that the values describe something that could have been measured: a server with
at least one GPU, sequence slot and KV block, positive stage means, a requests file with
successful requests and step rows with measured cycles. Without it an impossible value
scored as valid (a negative mean E2E gave an error of -47%), or was blamed on the candidate
("runaway simulation"), or ran the simulator out of memory. Every error names the file, the
row or stage and the field. Failed requests (`has_error`, 0 tokens, NaN TTFT) are valid input
and are not checked here beyond being counted.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from evaluator.errors import DataError

# Poisson arrivals one experiment may ask the simulator for: the real data has at most 12,000
# per stage; a profile asking for a billion (rate 1e6 for 20 min) needs ~9 GiB.
MAX_ARRIVALS = 1_000_000

_SERVER_FIELDS = (("tp", "tensor_parallelism", "exp-config.yaml"),
                  ("kv_blocks", "kv_blocks_total_gpu / cfg_kv_blocks_total_gpu", "exp-config.yaml"),
                  ("max_num_seqs", "max_num_seqs", "exp-config.yaml"),
                  ("max_batched_tokens", "max_num_batched_tokens", "exp-config.yaml"),
                  ("block_size", "block_size", "exp-config.yaml"),
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
