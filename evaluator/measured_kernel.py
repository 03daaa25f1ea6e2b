"""The measured components' numba code: fill_measured and its two attention lookups.

A module of its own (importing only evaluator.kernels) because the generated
evaluator/components_kernel.py calls fill_measured, and evaluator.measured imports the
components; definitions are in the evaluator.measured docstring. The Go port is
go_emit.measured_go, kept line by line parallel to this file.
"""
from __future__ import annotations

import numba
import numpy as np

from evaluator import kernels as kt

__all__ = ["decode_attn_us", "prefill_attn_us", "fill_measured", "measured_matrix", "N_MEASURED"]

N_MEASURED = 6  # t_gemm, t_decode_attn, t_prefill_attn, t_allreduce, t_moe, t_step (measured)


@numba.njit(cache=True, error_model="numpy", inline="always")
def decode_attn_us(flat, batch, ctx):
    """One layer's decode attention (us) for `batch` requests of mean context `ctx`."""
    t = kt.lin2(flat, int(flat[kt.H_OFF_DEC]), batch, ctx)
    floor = max(batch * ctx * flat[kt.H_KV_BYTES_TOK] / flat[kt.H_BW],
                batch * ctx * flat[kt.H_DEC_FLOP_TOK] / flat[kt.H_PEAK]) * 1e6
    return max(t, floor)


@numba.njit(cache=True, error_model="numpy", inline="always")
def prefill_attn_us(flat, n_chunks, chunk):
    """One layer's prefill attention (us): n_chunks causal chunks of `chunk` tokens each."""
    t = kt.lin2(flat, int(flat[kt.H_OFF_PRE]), n_chunks, chunk)
    floor = flat[kt.H_PRE_FLOP] * n_chunks * chunk * chunk * 0.5 / flat[kt.H_PEAK] * 1e6
    return max(t, floor)


@numba.njit(cache=True, error_model="numpy", inline="always")
def fill_measured(tables_flat, P, D, n_prefill, n_decode, B, K, out):
    """Write the measured components of one step (us) into `out` (length N_MEASURED)."""
    f = tables_flat
    L = f[kt.H_LAYERS]
    peak = f[kt.H_PEAK]
    bw = f[kt.H_BW]
    us = 1e6
    T = P + D
    gemm = 0.0
    allreduce = 0.0
    moe = 0.0
    if T > 0.0:
        g = kt.lin1(f, int(f[kt.H_OFF_GEMM]), T)
        g = max(g, max(f[kt.H_GEMM_FLOP_TOK] * T / peak, f[kt.H_GEMM_BYTES] / bw) * us)
        gemm = L * g
        if f[kt.H_OFF_AR_GRAPH] >= 0.0:
            if T <= f[kt.H_GRAPH_MAX]:
                a = kt.lin1(f, int(f[kt.H_OFF_AR_GRAPH]), T)
            else:
                a = kt.lin1(f, int(f[kt.H_OFF_AR_EAGER]), T)
            a = max(a, T * f[kt.H_AR_BYTES_TOK] * f[kt.H_AR_RING] / f[kt.H_NVLINK] * us)
            allreduce = L * f[kt.H_AR_PER_LAYER] * a
        if f[kt.H_OFF_MOE] >= 0.0:
            m = kt.lin1(f, int(f[kt.H_OFF_MOE]), T)
            m = max(m, max(f[kt.H_MOE_FLOP_TOK] * T / peak, f[kt.H_MOE_BYTES] / bw) * us)
            moe = L * m
    rows = n_prefill + D
    if rows > 0.0:
        lm = kt.lin1(f, int(f[kt.H_OFF_LM]), rows)
        gemm += max(lm, max(f[kt.H_LM_FLOP_TOK] * rows / peak, f[kt.H_LM_BYTES] / bw) * us)
    dec = 0.0
    if D > 0.0:
        dec = L * decode_attn_us(f, D, max(K / D, 1.0))
    pre = 0.0
    if P > 0.0 and n_prefill > 0.0:
        pre = L * prefill_attn_us(f, n_prefill, P / n_prefill)
        # the chunks also read their requests' cached prefixes, which the aggregates do not
        # carry: attention reads at least the KV of the scheduled share of K (the hardware
        # floor's memory term, evaluator.physics), the deficit charged to the prefill chunks
        share = 1.0
        if B > 0.0:
            share = min(1.0, (n_prefill + n_decode) / B)
        kv = L * share * K * f[kt.H_KV_BYTES_TOK] / bw * us
        if dec + pre < kv:
            pre = kv - dec
    out[0] = gemm
    out[1] = dec
    out[2] = pre
    out[3] = allreduce
    out[4] = moe
    out[5] = gemm + dec + pre + allreduce + moe


@numba.njit(cache=True, error_model="numpy")
def measured_matrix(tables_flat, P, D, n_prefill, n_decode, B, K):
    """Measured components for many steps of one model at once."""
    n = P.shape[0]
    out = np.empty((n, N_MEASURED))
    for i in range(n):
        fill_measured(tables_flat, P[i], D[i], n_prefill[i], n_decode[i], B[i], K[i], out[i])
    return out
