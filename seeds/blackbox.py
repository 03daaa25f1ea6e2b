"""BLIS's 3-coefficient blackbox: beta0 + beta1 * prefill tokens + beta2 * decode tokens."""
BETA0 = 15000.0
BETA1 = 2.0
BETA2 = 20.0


def predict_step_time(P, D):
    return BETA0 + BETA1 * P + BETA2 * D
