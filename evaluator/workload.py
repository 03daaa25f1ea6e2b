"""Request streams for the simulator: trace replay (requests table) or workload spec (profiles).

Trace replay uses the measured arrivals and prompt lengths of every request sent, failed ones
included (a failed request was real load until the client gave up: its prompt comes from its
pool slot, `evaluator.failed_requests`, and it asks for the profile's `output_len`). Generated lengths follow
`Experiment.generated_len` (fixed max_tokens under ignore_eos) when set, else the measured
counts. Workload spec draws each load stage's arrivals from a seeded generator as the client
does (`client_arrivals`: int(rate x duration) requests, exponential gaps rescaled to the stage;
the measured gaps have CV 1.00) with the stage's mean lengths.
Prefix caching: inference-perf (the build used) cycles through a fixed pool of
groups x prompts full prompts: request n gets prompt n % pool (`prompt_identity`). The
simulator's block pool works out which of them are still cached (`simulator.py`, "lru").
`cached_len` keeps the older always-hit rule for comparison: a request after the first pass
finds its whole prompt cached (full 16-token blocks; the last token is recomputed), and in the
first pass every request after the first of its group finds the system prompt cached.

Which group a pool slot belongs to: inference-perf's shared_prefix generator builds the prompts
group by group and then shuffles the list with an unseeded `random.shuffle`
(kubernetes-sigs/inference-perf, inference_perf/datagen/shared_prefix_datagen.py), so the
slot -> group map of a run cannot be recovered. We use a fixed permutation (seed 0) of the
group-major order; it only decides which first-pass requests share a system prompt. A
`prefix_group` column with values overrides it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from evaluator.data import Experiment, GroundTruth, stage_of
from evaluator.simulator import Workload


def _cached(exp: Experiment, prompt: np.ndarray) -> np.ndarray:
    n = len(prompt)
    b = exp.block_size
    cached = ((prompt - 1) // b) * b  # repeat of a prompt already seen
    first_pass = np.arange(n) < exp.prompt_pool
    cached[first_pass] = (exp.system_prompt_len // b) * b
    cached[: min(n, exp.num_groups)] = 0  # first request of each group fills the cache
    return np.minimum(cached, prompt - 1).astype(np.int64)


GROUP_ORDER_SEED = 0


def prompt_identity(exp: Experiment, request_index: np.ndarray,
                    prefix_group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(prompt id, group id) per request: prompt n % pool; the group of a pool slot from the
    shuffled group-major order (module docstring) unless `prefix_group` names it."""
    pool = max(1, exp.prompt_pool)
    groups = max(1, min(exp.num_groups, pool))
    pid = np.asarray(request_index, np.int64) % pool
    slot_group = np.random.default_rng(GROUP_ORDER_SEED).permutation(pool) * groups // pool
    gid = slot_group[pid].astype(np.int64)
    if prefix_group is not None:
        pg = pd.Series(prefix_group).fillna("").astype(str).str.strip()
        named = (pg != "").to_numpy()
        if named.any():
            codes, _ = pd.factorize(pg[named], sort=True)
            gid = gid.copy()
            gid[named] = codes
    return pid, gid


def trace_workload(exp: Experiment, gt: GroundTruth) -> Workload:
    every = gt.requests[gt.requests["experiment_id"] == exp.id]
    # prompt identity counts every request sent, failed ones included
    index = (every["request_index"].to_numpy(np.int64) if "request_index" in every.columns
             else np.arange(len(every), dtype=np.int64))
    failed = every["has_error"].to_numpy(bool)
    group_col = every["prefix_group"].to_numpy() if "prefix_group" in every.columns else None
    pid, gid = prompt_identity(exp, index, group_col)
    arr = every["arrival_time_us"].to_numpy(np.float64)
    stage = stage_of(exp, arr / 1e6).astype(np.int64)
    prompt = every["input_tokens"].to_numpy(np.int64)
    if exp.generated_len:
        gen = np.full(len(every), exp.generated_len, np.int64)
    else:
        gen = np.maximum(every["output_tokens"].to_numpy(np.int64), 1)
        if failed.any():  # no reply came: what the profile asked for, else the stage's measured mean
            asked = np.array([exp.output_len or max(1, round(s.mean_output)) for s in exp.stages], np.int64)
            gen = np.where(failed, asked[stage], gen)
    e2e = every["e2e_s"].to_numpy(np.float64)
    ttft = every["ttft_s"].to_numpy(np.float64)
    if failed.any():  # a failure's latencies are not a measurement of service
        e2e, ttft = np.where(failed, np.nan, e2e), np.where(failed, np.nan, ttft)
    cached = _cached(exp, prompt)
    return Workload(arr, prompt, cached, gen, stage, e2e, ttft, pid, gid, exp.system_prompt_len,
                    failed, exp.request_timeout_s * 1e6)


def client_arrivals(rng: np.random.Generator, rate: float, duration_s: float) -> np.ndarray:
    """Send times (s from the stage start) of one load stage as inference-perf makes them: exactly
    int(rate x duration) requests whose exponential gaps are rescaled to span the duration
    (kubernetes-sigs/inference-perf, inference_perf/loadgen/load_timer.py, ConstantLoadTimer),
    which is a Poisson process conditioned on its count. Measured: every reasoning stage holds
    exactly 4,800 requests in 1,200 s with gap CV 0.99-1.02. Truncating an unconditioned Poisson
    stream at the stage end instead sent ~2% fewer (4,709), and under overload that moved the
    predicted failed fraction by points."""
    n = max(1, int(rate * duration_s + 1e-9))
    gaps = rng.exponential(1.0, size=n)
    return np.cumsum(gaps) * (duration_s / gaps.sum())


def spec_workload(exp: Experiment, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    arrs, prompts, gens, stages = [], [], [], []
    for s in exp.stages:
        t = s.start_s + client_arrivals(rng, s.rate, s.duration_s)
        arrs.append(t * 1e6)
        prompts.append(np.full(len(t), max(1, int(round(s.mean_input))), np.int64))
        g = exp.generated_len or max(1, int(round(s.mean_output)))
        gens.append(np.full(len(t), g, np.int64))
        stages.append(np.full(len(t), s.index, np.int64))
    arr = np.concatenate(arrs)
    prompt = np.concatenate(prompts)
    pid, gid = prompt_identity(exp, np.arange(len(arr)))
    return Workload(arr, prompt, _cached(exp, prompt),
                    np.concatenate(gens), np.concatenate(stages), prompt_id=pid, group_id=gid,
                    system_prompt_len=exp.system_prompt_len, timeout_us=exp.request_timeout_s * 1e6)


def build_workload(exp: Experiment, gt: GroundTruth, seed: int = 0) -> Workload:
    return trace_workload(exp, gt) if gt.requests is not None else spec_workload(exp, seed)
