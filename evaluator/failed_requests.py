"""Failed requests in a trace: recognise them and give them back the load they were.

An overloaded inference-perf run records a request the client gave up on as `has_error`
true, `input_tokens` and `output_tokens` 0 (no reply ever came), `ttft_s` NaN and `e2e_s`
about the client timeout (docs/failed_requests.md). Such a request was real load until it
timed out, so the replay keeps it: its prompt is the prompt-pool slot it was sent with
(request n gets prompt n % pool), measured on the slot's successful requests, else the
stage's mean prompt; it asks for the profile's `output_len` tokens.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# inference-perf's `request_timeout: null` leaves the HTTP client's default total timeout
DEFAULT_TIMEOUT_S = 300.0

FAILED_FORM = "a failed request has has_error true, input_tokens and output_tokens 0 and no ttft_s"


def error_mask(df: pd.DataFrame) -> np.ndarray:
    """`has_error` as booleans (a missing value is a success)."""
    return df["has_error"].fillna(False).astype(bool).to_numpy()


def failed_form(df: pd.DataFrame) -> np.ndarray:
    """Rows in the form of a request the client never got a reply for (see module docstring)."""
    return (error_mask(df) & (df["input_tokens"].to_numpy() == 0) & (df["output_tokens"].to_numpy() == 0)
            & df["ttft_s"].isna().to_numpy())


def recovered_prompts(index: np.ndarray, prompt: np.ndarray, missing: np.ndarray, stage: np.ndarray,
                      pool: int, fallback: float) -> np.ndarray:
    """Prompt lengths with the `missing` ones filled: the median measured prompt of the same
    pool slot (index % pool), else the mean of the stage's measured prompts, else `fallback`.

    index: send order of each row; prompt: measured prompt tokens (ignored where missing);
    stage: load-stage index per row. Returns int64 lengths >= 1."""
    out = np.asarray(prompt, np.int64).copy()
    if not missing.any():
        return out
    have = ~missing
    slot = np.asarray(index, np.int64) % max(1, pool)
    by_slot = pd.Series(out[have]).groupby(slot[have]).median()
    by_stage = pd.Series(out[have]).groupby(stage[have]).mean()
    for i in np.flatnonzero(missing):
        v = by_slot.get(slot[i])
        if v is None:
            v = by_stage.get(stage[i], fallback)
        out[i] = max(1, int(round(float(v))))
    return out
