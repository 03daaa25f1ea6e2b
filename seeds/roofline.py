"""Roofline: the step is bound by compute or by memory traffic, plus a fixed overhead."""
OVERHEAD = 15000.0
EFFICIENCY = 1.5


def predict_step_time(t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_decode_kv, t_weights):
    compute = t_prefill_gemm + t_prefill_attn + t_decode_gemm
    memory = t_weights + t_decode_kv
    return OVERHEAD + EFFICIENCY * max(compute, memory)
