"""Measured components: a step's time from vLLM's own measured kernels, per part, no fitted constant.

`fill_measured(tables_flat, P, D, n_prefill, n_decode, B, K, out)` is the twin of
`evaluator.components.fill_components`: same aggregates in, times in microseconds out, one
numba function for real step rows, the simulator and (line by line) the Go code. It reads the
per-model flat array built by `evaluator.kernels.reduce_for_model`. Plain loops, binary search
and linear interpolation only, so the Go port is mechanical.

Definitions (L layers, T = P + D tokens; every table value is per layer and per call):
  t_gemm_measured          L * gemm_layer(T) + lm_head(n_prefill + D)
                           (QKV, O, gate-up, down at the per-GPU shapes; MoE models: QKV, O,
                           router; the LM head computes logits for the sampled rows only)
  t_decode_attn_measured   L * decode_attn(batch = D, mean context = K / D). K counts every
                           running request's KV tokens, this step's included, so prefill
                           requests' tokens are charged as if the decoders read them (at most a
                           2,048-token chunk plus cached prefixes: a few % of K here). Any split
                           of K between decoders and prefills would make the component fall as
                           P or B rises at the same K (docs/architecture.md, fact 10 wants P, D, K, B each
                           non-decreasing). Decode-only steps: exactly the mean context.
                           Non-decreasing in K, and in D at a fixed mean context; NOT always in
                           D at a fixed K: the measured kernel is faster when the same KV is
                           spread over more requests (70b/TP4: 32 x 1,024 tokens 20.4 us,
                           64 x 512 tokens 17.9 us). A monotone re-grid by (batch, total KV)
                           was tried and misses measured points by up to 40%, so it was dropped.
  t_prefill_attn_measured  L * prefill_attn(batch = n_prefill, length = P / n_prefill):
                           chunks attend causally to themselves; the aggregates do not say how
                           much earlier context a chunk has, so none is charged (as in the
                           peak-speed t_prefill_attn); but with the decode attention it must
                           read at least the KV of the scheduled share (n_prefill + n_decode) / B
                           of K at HBM bandwidth (the chunks' cached prefixes), and the deficit is
                           charged here, so t_step_measured never sits below the judge's floor.
                           vLLM runs decode and prefill attention in one varlen call; charging
                           two calls costs one launch (~10 us) extra.
  t_allreduce_measured     L * 2 * allreduce(T); CUDA-graph table up to 512 tokens, eager above
                           (vLLM V1 captures graphs up to 512 tokens); 0 at TP 1
  t_moe_measured           L * fused_moe(T) (balanced routing); 0 for dense models
  t_step_measured          the sum: GPU time of the forward pass. The real step cycle adds
                           CPU scheduling, sampling, detokenization and launch gaps.
Interpolation: piecewise linear on repaired (non-decreasing) knots, hence monotone; below the
first knot the first value (a kernel's fixed cost); beyond the last batch/token knot in
proportion (work splits into calls of the largest measured size); beyond the last context knot
along the last segment. Every value is then raised to the roofline (FLOPs at peak, bytes at HBM
or NVLink bandwidth), so no component is ever faster than the hardware.
"""
from __future__ import annotations

import math

import numpy as np

from evaluator import kernels as kt
from evaluator.component_table import MEASURED_BLOCK
from evaluator.components import COMPONENT_INDEX, COMPONENTS, MODEL_FIELDS, SPREAD_NAMES, fill_components
from evaluator.data import DataError, GroundTruth
from evaluator.measured_kernel import N_MEASURED, decode_attn_us, fill_measured, measured_matrix, prefill_attn_us

__all__ = ["MEASURED_COMPONENTS", "MEASURED_INDEX", "MEASURED_DOCS", "N_MEASURED", "fill_measured",
           "measured_matrix", "decode_attn_us", "prefill_attn_us", "kernel_tables_for", "model_reductions",
           "step_aggregates", "mha_decode_ratio", "component_grid", "PEAK_TIME_COMPONENTS"]

MEASURED_COMPONENTS: tuple[str, ...] = tuple(row.name for row in MEASURED_BLOCK.rows)
MEASURED_INDEX = {name: i for i, name in enumerate(MEASURED_COMPONENTS)}
MEASURED_DOCS = {row.name: row.doc for row in MEASURED_BLOCK.rows}
# the additive peak-speed parts of a step (t_decode_kv_max is an alternative to t_decode_kv, not a part)
PEAK_TIME_COMPONENTS: tuple[str, ...] = tuple(c for c in COMPONENTS if c.startswith("t_") and c not in MEASURED_INDEX
                                              and c not in SPREAD_NAMES)

MAX_MODEL_LEN = None  # None: the model's experiments' own max_model_len (the largest), from their data
GRID_CHUNKS = (0, 512, 2048)


# ---------------------------------------------------------------- ground truth helpers

def kernel_tables_for(gt: GroundTruth) -> kt.KernelTables:
    """The kernel tables beside a ground-truth directory (the embedded default has none)."""
    if gt.source == "embedded":
        raise DataError("measured components need kernel tables: pass --data DIR with kernels/")
    return kt.read_kernel_tables(gt.source)


def model_reductions(gt: GroundTruth, tables: kt.KernelTables | None = None) -> dict[str, kt.Reduction]:
    """One reduction per model (each model runs at one TP here; TP is part of the key if not)."""
    tables = tables or kernel_tables_for(gt)
    out: dict[str, kt.Reduction] = {}
    tps = {}
    for e in gt.experiments:
        tps.setdefault(e.model, set()).add(e.tp)
    for e in gt.experiments:
        key = e.model if len(tps[e.model]) == 1 else f"{e.model}@tp{e.tp}"
        if key not in out:
            out[key] = kt.reduce_model(tables, e.arch, e.tp, gt.hardware)
    return out


def step_aggregates(steps) -> tuple[np.ndarray, ...]:
    """(P, D, n_prefill, n_decode, B, K) from step rows, as evaluator.step_scoring derives them."""
    f = lambda c: steps[c].to_numpy(np.float64)  # noqa: E731
    K = (f("kv_blocks_total_gpu") - f("kv_blocks_free_gpu")) * 16.0
    return (f("prefill_tokens"), f("decode_tokens"), f("num_prefill_reqs"), f("num_decode_reqs"),
            f("running_depth"), K)


def mha_decode_ratio(tables: kt.KernelTables, flat: np.ndarray, nq_all: int, nkv_all: int, hd: int, tp: int,
                     min_batch: int = 1, min_ctx: int = 1) -> np.ndarray:
    """mha/ micro-benchmark latency / this reduction's decode attention, per measured mha row."""
    df = tables.mha_decode.get((nq_all, nkv_all, hd, tp))
    if df is None:
        return np.empty(0)
    d = df[(df["batch_size"] >= min_batch) & (df["kv_len"] >= min_ctx)]
    pred = np.array([decode_attn_us(flat, float(b), float(c)) for b, c in zip(d["batch_size"], d["kv_len"])])
    return d["latency_us"].to_numpy() / pred


def component_grid(gt: GroundTruth, model: str, tables: kt.KernelTables | None = None,
                   max_model_len: int | None = MAX_MODEL_LEN) -> list[dict]:
    """Peak-speed and measured components on a grid of batch states, with the measured step
    cycles nearest each grid point (for `evolve components` and the report): decodes up to
    max_num_seqs, contexts up to max_model_len, prefill chunks up to 2,048 (one request's chunk).
    The kernel tables are the ones the loader attached (re-reduced from `tables` if given)."""
    exps = [e for e in gt.experiments if e.model == model]
    if not exps:
        raise DataError(f"model {model!r} not in the ground truth (have {', '.join(gt.models)})")
    e = exps[0]
    flat = kt.reduce_for_model(tables, e.arch, e.tp, gt.hardware) if tables is not None else e.kernels
    if flat is None:
        raise DataError(e.kernel_missing or f"no kernel tables for {model}")
    mv = np.concatenate([e.model_vec(gt.hardware)[:len(MODEL_FIELDS)], flat])
    max_seqs = max(x.max_num_seqs for x in exps)
    if max_model_len is None:
        max_model_len = max(int(x.max_model_len) for x in exps)
    decodes = sorted({1, 8, 32, max_seqs // 2, max_seqs})
    contexts = sorted({128, 512, 1024, max_model_len // 2, max_model_len})
    chunks = [c for c in GRID_CHUNKS if c <= max(x.max_batched_tokens for x in exps)]
    pts = [(d, c, p) for p in chunks for d in decodes for c in contexts]
    near = _nearest_cycles(gt, model, pts)
    comp = np.empty(len(COMPONENTS))
    rows = []
    for i, (d, c, p) in enumerate(pts):
        n_p = 1.0 if p else 0.0
        K = float(d * c + p)
        fill_components(mv, float(p), float(d), n_p, float(d), d + n_p, K, float(c), comp)
        row = {"decodes": d, "context": c, "prefill_chunk": p}
        row.update({k: float(v) for k, v in zip(COMPONENTS, comp) if k in PEAK_TIME_COMPONENTS})
        row.update({k: float(comp[COMPONENT_INDEX[k]]) for k in MEASURED_COMPONENTS})
        cyc = near.get(i, [])
        row["measured_cycle_n"] = len(cyc)
        row["measured_cycle_median_us"] = float(np.median(cyc)) if cyc else None
        rows.append(row)
    return rows


def _nearest_cycles(gt: GroundTruth, model: str, pts: list[tuple[int, int, int]]) -> dict[int, list[float]]:
    """Real step cycles (next_step_start_delta_us) assigned to their nearest grid point: same
    prefill chunk bucket, then nearest in log(decodes) and log(context)."""
    if gt.steps is None:
        return {}
    s = gt.steps[(gt.steps["model_key"] == model) & gt.steps["next_step_start_delta_us"].notna()]
    if s.empty:
        return {}
    P, D, _, _, _, K = step_aggregates(s)
    cyc = s["next_step_start_delta_us"].to_numpy(np.float64)
    grid = np.array(pts, np.float64)
    chunks = np.unique(grid[:, 2])
    out: dict[int, list[float]] = {}
    for i in range(len(s)):
        if D[i] <= 0:
            continue
        ctx = max(K[i] / D[i], 1.0)
        pb = chunks[np.argmin(np.abs(chunks - P[i]))]
        cand = np.flatnonzero(grid[:, 2] == pb)
        dist = np.abs(np.log(grid[cand, 0] / D[i])) + np.abs(np.log(grid[cand, 1] / ctx))
        j = int(cand[np.argmin(dist)])
        if math.isfinite(cyc[i]):
            out.setdefault(j, []).append(float(cyc[i]))
    return out
