"""Linear combination of the components: the shape of BLIS's trained-physics model."""
C0 = 12000.0
C_PF = 1.0
C_ATT = 1.0
C_DEC = 1.0
C_KV = 1.0
C_W = 1.0
C_AR = 1.0
C_B = 10.0


def predict_step_time(t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_decode_kv, t_weights, t_allreduce, B):
    return (C0 + C_PF * t_prefill_gemm + C_ATT * t_prefill_attn + C_DEC * t_decode_gemm
            + C_KV * t_decode_kv + C_W * t_weights + C_AR * t_allreduce + C_B * B)
