"""BLIS's own step-time models as programs, for the baselines.

Not seeds: the blackbox reads only P and D, so only an intercept as large as a full KV cache's
floor keeps it physical over the extrapolation grid, which ruins it elsewhere; the judge either
refuses it (`evaluator.physics`, with the reason) or scores it physical and far off. The
roofline uses BLIS's constants, nothing fitted.
"""

BLACKBOX_SOURCE = '''"""BLIS's 3-coefficient blackbox: beta0 + beta1 * prefill tokens + beta2 * decode tokens."""
BETA0 = 15000.0
BETA1 = 2.0
BETA2 = 20.0


def predict_step_time(P, D):
    return BETA0 + BETA1 * P + BETA2 * D
'''

ROOFLINE_SOURCE = '''"""Uncalibrated roofline with BLIS's constants: max(compute, memory / efficiency) + per-layer overhead."""
BW_EFFICIENCY = 0.82
PER_LAYER_US = 100.0


def predict_step_time(t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_decode_kv, t_weights, layers):
    compute = t_prefill_gemm + t_prefill_attn + t_decode_gemm
    memory = (t_weights + t_decode_kv) / BW_EFFICIENCY
    return max(compute, memory) + PER_LAYER_US * layers
'''
