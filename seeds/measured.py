"""Measured kernels: the GPU time of vLLM's own kernels summed per layer, plus one per-step overhead."""
OVERHEAD = 1500.0


def predict_step_time(t_step_measured):
    return OVERHEAD + t_step_measured
