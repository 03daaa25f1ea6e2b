"""The judge: ground-truth data, analytical components, per-step scoring and the vLLM-like simulator."""
