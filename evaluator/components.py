"""The fixed analytical components: the alphabet every candidate program is written in.

One numba function, `fill_components`, computes them from aggregate step quantities
(prefill tokens P, decode tokens D, prefill/decode request counts, running batch B,
KV tokens held K). The same function serves real step rows, the simulator, and is
mirrored line by line in the emitted Go code, so a program means the same thing in
all three places.

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
Peak FLOP/s is the dense bf16 figure (datasheet sparse figure / 2).
"""
from __future__ import annotations

import numba
import numpy as np

# Every candidate is compiled to f(x, c) -> step cycle in us, x = components, c = constants.
PREDICTOR_SIGNATURE = numba.float64(numba.float64[::1], numba.float64[::1])
PREDICTOR_TYPE = numba.types.FunctionType(PREDICTOR_SIGNATURE)

COMPONENTS: tuple[str, ...] = (
    "t_prefill_gemm",
    "t_prefill_attn",
    "t_decode_gemm",
    "t_decode_kv",
    "t_weights",
    "t_allreduce",
    "t_lm_head",
    "P",
    "D",
    "B",
    "K",
    "n_prefill",
    "n_decode",
    "layers",
    "tp",
)
N_COMPONENTS = len(COMPONENTS)
COMPONENT_INDEX = {name: i for i, name in enumerate(COMPONENTS)}

COMPONENT_DOCS = {
    "t_prefill_gemm": "prefill GEMM time (us): dense matmul FLOPs of the prefill tokens at peak bf16",
    "t_prefill_attn": "prefill attention time (us): causal attention FLOPs of the prefill chunks at peak",
    "t_decode_gemm": "decode GEMM time (us): matmul FLOPs of the decode tokens at peak",
    "t_decode_kv": "decode KV-read time (us): bytes of all held KV cache at HBM bandwidth",
    "t_weights": "weight-load time (us): bytes of the weights read this step at HBM bandwidth (MoE: experts hit)",
    "t_allreduce": "TP all-reduce time (us): activation bytes over NVLink, 0 at TP=1",
    "t_lm_head": "LM-head time (us): logits FLOPs for the sampled tokens at peak",
    "P": "prefill tokens scheduled this step",
    "D": "decode tokens scheduled this step (one per decoding request)",
    "B": "running batch size (requests in the running queue)",
    "K": "KV tokens held in GPU cache",
    "n_prefill": "requests with a prefill chunk this step",
    "n_decode": "requests decoding this step",
    "layers": "transformer layers of the model",
    "tp": "tensor-parallel degree",
}

# Layout of the per-model hardware+architecture vector consumed by fill_components.
MODEL_FIELDS: tuple[str, ...] = (
    "layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn", "n_experts", "top_k",
    "vocab", "tp", "peak_flops", "hbm_bw", "nvlink_bw",
)
MI = {name: i for i, name in enumerate(MODEL_FIELDS)}


@numba.njit(cache=True, fastmath=False)
def fill_components(model, P, D, n_prefill, n_decode, B, K, out):
    """Write the components of one step into `out` (length N_COMPONENTS)."""
    L = model[0]
    h = model[1]
    nq = model[2]
    nkv = model[3]
    hd = model[4]
    ffn = model[5]
    n_exp = model[6]
    top_k = model[7]
    vocab = model[8]
    tp = model[9]
    flops = model[10]
    bw = model[11]
    nvlink = model[12]
    attn_params = h * (nq * hd) + 2.0 * h * (nkv * hd) + (nq * hd) * h
    mlp_params = 3.0 * h * ffn
    tokens = P + D
    if n_exp > 1.0:
        k_flop = top_k
        active = n_exp * (1.0 - (1.0 - top_k / n_exp) ** tokens)
    else:
        k_flop = 1.0
        active = 1.0
    flop_params = L * (attn_params + k_flop * mlp_params)
    us = 1e6
    out[0] = 2.0 * P * flop_params / tp / flops * us
    if n_prefill > 0.0:
        out[1] = 4.0 * L * nq * hd * P * (P / n_prefill) / 2.0 / tp / flops * us
    else:
        out[1] = 0.0
    out[2] = 2.0 * D * flop_params / tp / flops * us
    out[3] = K * 2.0 * L * nkv * hd * 2.0 / tp / bw * us
    if tokens > 0.0:
        out[4] = 2.0 * (L * (attn_params + active * mlp_params) + 2.0 * vocab * h) / tp / bw * us
    else:
        out[4] = 0.0
    if tp > 1.0:
        out[5] = 2.0 * L * tokens * h * 2.0 * 2.0 * (tp - 1.0) / tp / nvlink * us
    else:
        out[5] = 0.0
    out[6] = 2.0 * (n_prefill + D) * vocab * h / tp / flops * us
    out[7] = P
    out[8] = D
    out[9] = B
    out[10] = K
    out[11] = n_prefill
    out[12] = n_decode
    out[13] = L
    out[14] = tp


@numba.njit(cache=True)
def components_matrix(model_rows, P, D, n_prefill, n_decode, B, K):
    """Components for many steps at once; model_rows[i] is the model vector of step i."""
    n = P.shape[0]
    out = np.empty((n, N_COMPONENTS))
    for i in range(n):
        fill_components(model_rows[i], P[i], D[i], n_prefill[i], n_decode[i], B[i], K[i], out[i])
    return out


def model_vector(arch: dict, tp: int, hw: dict) -> np.ndarray:
    """Pack architecture, TP and hardware figures into the vector fill_components reads."""
    v = np.zeros(len(MODEL_FIELDS))
    v[MI["layers"]] = arch["layers"]
    v[MI["hidden"]] = arch["hidden"]
    v[MI["n_heads"]] = arch["n_heads"]
    v[MI["n_kv_heads"]] = arch["n_kv_heads"]
    v[MI["head_dim"]] = arch["hidden"] / arch["n_heads"]
    v[MI["ffn"]] = arch["ffn"]
    v[MI["n_experts"]] = arch.get("n_experts", 0) or 0
    v[MI["top_k"]] = arch.get("top_k", 0) or 0
    v[MI["vocab"]] = arch["vocab"]
    v[MI["tp"]] = tp
    v[MI["peak_flops"]] = hw["peak_flops"]
    v[MI["hbm_bw"]] = hw["hbm_bw"]
    v[MI["nvlink_bw"]] = hw["nvlink_bw"]
    return v


BLOCK_SIZE = 16


def batch_aggregates(progress, num_new, input_len):
    """Aggregate step quantities from a batch of requests, the way BLIS sees them.

    Per request: ProgressIndex (tokens already computed), NumNewTokens (scheduled now)
    and len(InputTokens). A request is in prefill while ProgressIndex < input length
    (its new tokens count as P), otherwise it decodes (its new tokens count as D).
    K = KV tokens held after this step, in whole 16-token blocks per request.
    Returns (P, D, n_prefill, n_decode, B, K) as floats. The simulator uses the same rule.
    """
    P = D = n_p = n_d = K = 0.0
    for prog, new, inp in zip(progress, num_new, input_len):
        if prog < inp:
            P += new
            n_p += 1
        else:
            D += new
            n_d += 1
        K += -(-(prog + new) // BLOCK_SIZE) * BLOCK_SIZE
    return P, D, n_p, n_d, float(len(progress)), K
