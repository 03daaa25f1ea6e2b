"""Regime switch: steps carrying a prefill chunk cost differently from pure decode steps; both
read the weights and the KV cache held (the memory floor every step pays)."""
DECODE_BASE = 14000.0
PREFILL_BASE = 16000.0
PER_SEQ = 20.0
PER_PREFILL_TOKEN = 2.0


def predict_step_time(P, B, t_weights, t_decode_kv):
    if P > 0:
        return PREFILL_BASE + PER_PREFILL_TOKEN * P + PER_SEQ * B + t_weights + t_decode_kv
    return DECODE_BASE + PER_SEQ * B + t_weights + t_decode_kv
