"""Measured kernels plus the per-layer kernels the tables miss (norms, RoPE, activations)."""
PER_LAYER = 30.0


def predict_step_time(t_step_measured, layers):
    return t_step_measured + PER_LAYER * layers
