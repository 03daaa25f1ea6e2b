"""An overloaded experiment in the ground-truth layout whose outcome is worked out by hand.

llama-2-70b on one GPU (its single-decode hardware floor, the weights read once, is 41 ms, so
a 50-200 ms step is physical: the judge refuses a step above 10x the floor, which a 100 ms
step of llama-2-7b would be). One sequence at a time (max_num_seqs 1), a fixed 100 ms step
(CONST_PROGRAM: the floor where that is longer, never on this experiment's states), 32-ish-token
prompts (one prefill step) and 100 generated tokens: every request takes 100 steps = 10 s of
service.
One request arrives every second for 60 s; the client timeout is 300 s.
Served in order, request j finishes at 10 (j + 1) s, so its E2E is 9 j + 10 s and its TTFT
9 j + 0.1 s: requests 0..32 finish (j = 32: 298 s), request 33 would need 307 s. At 330 s
requests 33..59 are all still waiting, each with less than 10 s left before its deadline
(333..359 s): each is admitted when the one before it is aborted and is aborted in turn.
So 33 finish and 27 time out (45%).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

EXP = "20260301-000000-llama-2-70b-tp1-overload"
MODEL = "llama-2-70b"
STEP_US = 100_000.0
N_REQ = 60
N_OK = 33
POOL = 10
# STEP wherever it is above the hardware floor (every state this experiment visits: one decode
# or one prompt of ~32 tokens), the floor at heavier states (a 2,048-token chunk: 289 ms)
CONST_PROGRAM = ("STEP = 100000.0\ndef predict_step_time(t_weights, t_decode_kv, t_prefill_gemm, t_prefill_attn, "
                 "t_decode_gemm, t_lm_head):\n    return max(STEP, t_weights + t_decode_kv, t_prefill_gemm + "
                 "t_prefill_attn + t_decode_gemm + t_lm_head)\n")


def prompt_of(j: int) -> int:
    """Measured prompt tokens of pool slot j % POOL (distinct per slot, so recovery shows)."""
    return 30 + j % POOL


def overloaded_requests() -> pd.DataFrame:
    rows = []
    for j in range(N_REQ):
        ok = j < N_OK
        rows.append({"experiment_id": EXP, "request_index": j, "arrival_time_us": j * 1_000_000,
                     "input_tokens": prompt_of(j) if ok else 0, "output_tokens": 100 if ok else 0,
                     "prefix_group": "", "has_error": not ok,
                     "e2e_s": 9.0 * j + 10.0 if ok else 300.0, "ttft_s": 9.0 * j + 0.1 if ok else math.nan})
    return pd.DataFrame(rows)


def write_overloaded(root: Path, requests: pd.DataFrame | None = None, timeout=None) -> Path:
    """The experiment above as a ground-truth directory (no steps/, no kernels/)."""
    d = root / "experiments" / EXP
    d.mkdir(parents=True)
    (d / "exp-config.yaml").write_text(
        "model: meta-llama/Llama-2-70b-hf\ntensor_parallelism: 1\nmax_num_seqs: 1\n"
        "max_num_batched_tokens: 2048\nblock_size: 16\nkv_blocks_total_gpu: 1000\n")
    load = {"stages": [{"rate": 1.0, "duration": 60}]}
    if timeout is not None:
        load["request_timeout"] = timeout
    (d / "profile.yaml").write_text(json.dumps({
        "load": load, "server": {"ignore_eos": True},
        "data": {"shared_prefix": {"system_prompt_len": 16, "question_len": 16, "output_len": 100,
                                   "num_unique_system_prompts": 1, "num_users_per_system_prompt": POOL}}}))
    req = overloaded_requests() if requests is None else requests
    ok = req[~req["has_error"]]
    e2e, ttft = ok["e2e_s"].to_numpy(), ok["ttft_s"].to_numpy()
    itl = float(np.sum(e2e - ttft) / (len(ok) * 99)) * 99 / 201  # inference-perf's reported relation
    (d / "stage_0_lifecycle_metrics.json").write_text(json.dumps({
        "successes": {"count": int(len(ok)),
                      "latency": {"request_latency": {"mean": float(e2e.mean())},
                                  "time_to_first_token": {"mean": float(ttft.mean())},
                                  "inter_token_latency": {"mean": itl}},
                      "prompt_len": {"mean": float(ok["input_tokens"].mean())},
                      "output_len": {"mean": float(ok["output_tokens"].mean())}},
        "failures": {"count": int(req["has_error"].sum())}}))
    (root / "requests").mkdir()
    req.to_parquet(root / "requests" / "requests.parquet", index=False)
    return root
