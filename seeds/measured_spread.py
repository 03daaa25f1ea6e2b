"""Measured kernels at the mean context, the per-layer kernels the tables miss, and decode
attention's wait on the longest context at HBM speed (no constant on it: the short workloads'
spread is too small to pin one; on an H100 the wait measured 1.7-2.5 ms per step of 128
reasoning-like decodes against 2.7 and 2.3 ms at peak speed, DESIGN section 3b)."""
PER_LAYER = 30.0


def predict_step_time(t_step_measured, layers, t_decode_spread):
    return t_step_measured + PER_LAYER * layers + t_decode_spread
