"""Phase split: prefill and decode work overlap poorly, take the larger, plus overhead."""
OVERHEAD = 14000.0
PREFILL_SCALE = 1.5
DECODE_SCALE = 1.5
PER_SEQ = 20.0


def predict_step_time(t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_decode_kv, t_weights, B):
    prefill = PREFILL_SCALE * (t_prefill_gemm + t_prefill_attn)
    decode = DECODE_SCALE * max(t_decode_gemm + t_decode_kv, t_weights)
    return OVERHEAD + PER_SEQ * B + max(prefill, decode)
