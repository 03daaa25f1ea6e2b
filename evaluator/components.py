"""The fixed analytical components: the alphabet every candidate program is written in.

One numba function, `fill_components`, computes them from aggregate step quantities
(prefill tokens P, decode tokens D, prefill/decode request counts, running batch B,
KV tokens held K). It serves real step rows and the simulator; it and the emitted Go's
fillComponents are both generated from the formula table in evaluator.component_table
(the numba one into evaluator/components_kernel.py), so a program means the same thing
in all three places.

Definitions (times in microseconds, bf16 = 2 bytes):
  params per layer     attn = h*(nq*hd) + 2*h*(nkv*hd) + (nq*hd)*h ; mlp = 3*h*ffn per expert
  active experts       MoE: E * (1 - (1 - k/E)^(P+D)) distinct experts expected to be hit
                       by the step's tokens (weights read); FLOPs use k experts per token.
                       Dense models: 1.
  t_prefill_gemm       2 * P * (L*(attn + k*mlp)) / TP / peak_flops
  t_prefill_attn       4 * L * nq*hd * P * (P / n_prefill) / 2 / TP / peak_flops
                       (each prefill chunk attends causally to itself; aggregate only)
  t_decode_gemm        2 * D * (L*(attn + k*mlp)) / TP / peak_flops
  t_decode_kv          K * 2 * L * nkv*hd * 2 bytes / TP / hbm_bw   (KV read, all held tokens)
  t_weights            2 bytes * (L*(attn + active*mlp) + 2*vocab*h) / TP / hbm_bw
  t_allreduce          2 all-reduces per layer of (P+D)*h*2 bytes, ring: 2*(TP-1)/TP of it
                       over NVLink; 0 for TP=1
  t_lm_head            2 * (n_prefill + D) * vocab * h / TP / peak_flops (logits per sampled token)
  raw counts           P, D, B, K, n_prefill, n_decode, layers, tp
  t_decode_kv_max      n_decode * ctx_max * 2 * L * nkv*hd * 2 bytes / TP / hbm_bw: the KV read if
                       every decoding request held the longest one's context (ctx_max, also a
                       component); equals t_decode_kv where the spread is unknown (real step
                       rows: ctx_max = K / n_decode). A decode-attention kernel that gives each
                       request one unit of work waits for its longest request: on an H100 a
                       reasoning-like spread (contexts uniform over 1,080-2,530) cost 1.7 ms
                       (codellama-34b TP2) and 2.5 ms (llama-2-70b TP4) more per step of 128
                       decodes than the same batch at the mean (DESIGN 3b); the peak-speed
                       difference t_decode_kv_max - t_decode_kv is 2.7 and 2.3 ms there. A
                       split-KV kernel (each request cut over several blocks) pays it too:
                       +1.2 and +1.9 ms on an H200 (benchmarks/h100_spread_attention.py).
                       Only once the batch fills the GPU: at 32 decodes ~0-0.2 ms, so this
                       term, linear in the excess tokens, overstates small batches.
  t_decode_spread      max(n_decode * ctx_max - K, 0) * 2 * L * nkv*hd * 2 bytes / TP / hbm_bw:
                       what t_decode_kv_max adds to the KV actually held, never negative (the KV
                       of prefilling requests counts in K, not in n_decode * ctx_max); 0 without
                       spread. A step built on the mean context plus this term never gets cheaper
                       as the spread widens (seed measured_spread).
  measured (appended)  t_gemm_measured .. t_step_measured: the same step from vLLM's measured
                       kernels (evaluator.measured, docs/kernels.md); they read the model
                       vector's tail (the kernel tables), NaN when the model has none.
Peak FLOP/s is the dense bf16 figure (datasheet sparse figure / 2).
"""
from __future__ import annotations

import numba
import numpy as np

from evaluator.component_table import BLOCKS, COMPONENT_ROWS, LATE_ROWS
from evaluator.component_table import MODEL_FIELDS as TABLE_MODEL_FIELDS
from evaluator.components_kernel import fill_components, fill_context

__all__ = ["PREDICTOR_SIGNATURE", "PREDICTOR_TYPE", "GRAD_SIGNATURE", "GRAD_TYPE", "COMPONENTS", "N_COMPONENTS", "COMPONENT_INDEX",
           "COMPONENT_DOCS", "MODEL_FIELDS", "MEASURED_NAMES", "SPREAD_NAMES", "fill_components", "fill_context", "components_matrix",
           "components_for_model", "components_for_model_spread", "mean_context", "model_vector",
           "batch_aggregates", "BLOCK_SIZE"]

# Every candidate is compiled to f(x, c) -> step cycle in us, x = components, c = constants.
PREDICTOR_SIGNATURE = numba.float64(numba.float64[::1], numba.float64[::1])
PREDICTOR_TYPE = numba.types.FunctionType(PREDICTOR_SIGNATURE)
# ... and to g(x, c, out) -> the same value, with d value / d c[j] written into out[j]
# (evaluator.program_grad): the fit's Jacobian in one call per row.
GRAD_SIGNATURE = numba.float64(numba.float64[::1], numba.float64[::1], numba.float64[::1])
GRAD_TYPE = numba.types.FunctionType(GRAD_SIGNATURE)

# The peak-speed formulas, then the measured (kernel-table) components of evaluator.measured,
# then the late formulas (the longest-context term: appended so earlier indices keep their meaning).
_ROWS = COMPONENT_ROWS + tuple(row for b in BLOCKS for row in b.rows) + LATE_ROWS
COMPONENTS: tuple[str, ...] = tuple(row.name for row in _ROWS)
N_COMPONENTS = len(COMPONENTS)
COMPONENT_INDEX = {name: i for i, name in enumerate(COMPONENTS)}
COMPONENT_DOCS = {row.name: row.doc for row in _ROWS}
MEASURED_NAMES: frozenset[str] = frozenset(row.name for b in BLOCKS for row in b.rows)
# the components that read the longest decoding context (the simulator then computes every step)
SPREAD_NAMES: frozenset[str] = frozenset({"t_decode_kv_max", "ctx_max", "t_decode_spread"})

# Layout of the per-model hardware+architecture vector consumed by fill_components.
MODEL_FIELDS: tuple[str, ...] = TABLE_MODEL_FIELDS
MI = {name: i for i, name in enumerate(MODEL_FIELDS)}


@numba.njit(cache=True, inline="always")
def mean_context(K, n_decode):
    """ctx_max where a batch's spread is unknown (real step rows, grid states): every decoding
    request at the mean, K / n_decode (so t_decode_kv_max = t_decode_kv there)."""
    return K / n_decode if n_decode > 0.0 else 0.0


@numba.njit(cache=True)
def components_for_model(model, P, D, n_prefill, n_decode, B, K):
    """Components for many steps of one model (no per-row copy of its vector and tables);
    ctx_max at the mean context (`mean_context`)."""
    n = P.shape[0]
    out = np.empty((n, N_COMPONENTS))
    for i in range(n):
        fill_components(model, P[i], D[i], n_prefill[i], n_decode[i], B[i], K[i],
                        mean_context(K[i], n_decode[i]), out[i])
    return out


@numba.njit(cache=True)
def components_for_model_spread(model, P, D, n_prefill, n_decode, B, K, ctx_max):
    """`components_for_model` with each step's longest decoding context given (simulated states)."""
    n = P.shape[0]
    out = np.empty((n, N_COMPONENTS))
    for i in range(n):
        fill_components(model, P[i], D[i], n_prefill[i], n_decode[i], B[i], K[i], ctx_max[i], out[i])
    return out


@numba.njit(cache=True)
def components_matrix(model_rows, P, D, n_prefill, n_decode, B, K):
    """Components for many steps at once; model_rows[i] is the model vector of step i; ctx_max
    at the mean context."""
    n = P.shape[0]
    out = np.empty((n, N_COMPONENTS))
    for i in range(n):
        fill_components(model_rows[i], P[i], D[i], n_prefill[i], n_decode[i], B[i], K[i],
                        mean_context(K[i], n_decode[i]), out[i])
    return out


def model_vector(arch: dict, tp: int, hw: dict, tables=None) -> np.ndarray:
    """Pack architecture, TP and hardware figures into the vector fill_components reads, followed
    by the model's kernel tables (evaluator.kernels flat array) when there are any."""
    v = np.zeros(len(MODEL_FIELDS))
    v[MI["layers"]] = arch["layers"]
    v[MI["hidden"]] = arch["hidden"]
    v[MI["n_heads"]] = arch["n_heads"]
    v[MI["n_kv_heads"]] = arch["n_kv_heads"]
    v[MI["head_dim"]] = arch.get("head_dim") or arch["hidden"] / arch["n_heads"]  # stated, else derived
    v[MI["ffn"]] = arch["ffn"]
    v[MI["n_experts"]] = arch.get("n_experts", 0) or 0
    v[MI["top_k"]] = arch.get("top_k", 0) or 0
    v[MI["vocab"]] = arch["vocab"]
    v[MI["tp"]] = tp
    v[MI["peak_flops"]] = hw["peak_flops"]
    v[MI["hbm_bw"]] = hw["hbm_bw"]
    v[MI["nvlink_bw"]] = hw["nvlink_bw"]
    if tables is not None and len(tables):
        v = np.concatenate([v, np.asarray(tables, np.float64)])
    return v


BLOCK_SIZE = 16


def batch_aggregates(progress, num_new, input_len):
    """Aggregate step quantities from a batch of requests, the way BLIS sees them.

    Per request: ProgressIndex (tokens already computed), NumNewTokens (scheduled now)
    and len(InputTokens). A request is in prefill while ProgressIndex < input length
    (its new tokens count as P), otherwise it decodes (its new tokens count as D).
    K = KV tokens held after this step, in whole 16-token blocks per request; ctx_max = the
    tokens the longest decoding request holds after this step (0 without one).
    Returns (P, D, n_prefill, n_decode, B, K, ctx_max) as floats. The simulator uses the same rule.
    """
    P = D = n_p = n_d = K = ctx = 0.0
    for prog, new, inp in zip(progress, num_new, input_len):
        if prog < inp:
            P += new
            n_p += 1
        else:
            D += new
            n_d += 1
            ctx = max(ctx, float(prog + new))
        K += -(-(prog + new) // BLOCK_SIZE) * BLOCK_SIZE
    return P, D, n_p, n_d, float(len(progress)), K, ctx
