"""Measured kernels plus CPU time: a per-step overhead and a per-request (scheduling, sampling) term."""
OVERHEAD = 1200.0
PER_REQUEST = 10.0


def predict_step_time(t_step_measured, B):
    return OVERHEAD + PER_REQUEST * B + t_step_measured
