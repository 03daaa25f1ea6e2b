"""Behavioural fingerprints: what a program predicts, so the search spends no work twice.

Two programs that differ in form but predict the same step time everywhere (`a*x + b*x` and
`c*x`, a branch never taken, a term the fit sets to zero) earn the same scores, so a second
full evaluation of one of them buys nothing. The fingerprint of a fitted program is its
predicted step time on a fixed probe set, per fitting group (model): states its data visits
(evenly spaced over the probe rows the physical rules are checked on) and the extrapolation
grid (`evaluator.physics.extrapolation_grid`: longer contexts, more prefill, larger batches),
where programs that agree on the data but not beyond it part ways. Fingerprints are compared
with `twins`: within TWIN_TOL relative on every probe state.
"""
from __future__ import annotations

import math

import numpy as np

from evaluator.fitting import subsample
from evaluator.judge_states import probe
from evaluator.physics import grid_rows
from evaluator.step_scoring import predict_rows

__all__ = ["DATA_PROBES", "GRID_PROBES", "TWIN_TOL", "fingerprint", "probe_rows", "twins"]

DATA_PROBES = 48  # per fitting group: states the data visits
GRID_PROBES = 48  # per model of the group: states of the extrapolation grid
TWIN_TOL = 1e-3  # relative: 0.1% on every probe state is "the same behaviour"
DIGITS = 7  # significant digits stored: far finer than the tolerance, a quarter of the bytes


def _round(x: float) -> float | None:
    if not math.isfinite(x):
        return None
    return float(f"{x:.{DIGITS}g}")


def probe_rows(evaluator) -> dict[str, np.ndarray]:
    """The fixed probe set per fitting group, as component rows: made once per evaluator."""
    cache = evaluator.__dict__.setdefault("_fingerprint_rows", {})
    if not cache:
        grids = evaluator.grids()
        for key, exps in sorted(evaluator.groups().items()):
            X = probe(evaluator, key, exps)
            parts = [X[subsample(len(X), DATA_PROBES)]]
            for m in evaluator.models_of(key, exps):
                G = grid_rows(grids[m])
                parts.append(G[subsample(len(G), GRID_PROBES)])
            cache[key] = np.ascontiguousarray(np.vstack(parts), dtype=np.float64)
    return cache


def fingerprint(evaluator, f, consts: dict) -> tuple:
    """Predicted step times (us) of the compiled program `f` with its fitted `consts` (keyed
    by fitting group) on the evaluator's fixed probe set, groups in sorted order. The same
    ground truth and constants give the same tuple in any process."""
    out: list[float | None] = []
    for key, P in probe_rows(evaluator).items():
        c = consts.get(key)
        if c is None:
            continue
        out.extend(_round(float(v)) for v in predict_rows(f, P, np.ascontiguousarray(c, dtype=np.float64)))
    return tuple(out)


def twins(a, b, tol: float = TWIN_TOL) -> bool:
    """Whether two fingerprints describe the same behaviour: same probe set (length) and every
    prediction within `tol` relative of the other's. An empty or non-finite one matches nothing."""
    if not a or not b or len(a) != len(b) or any(x is None for x in a) or any(y is None for y in b):
        return False
    return bool(twin_rows(np.asarray(a, np.float64), np.asarray(b, np.float64)[None, :], tol)[0])


def twin_rows(x: np.ndarray, prints: np.ndarray, tol: float = TWIN_TOL) -> np.ndarray:
    """`twins`' rule on many at once: which rows of `prints` (finite fingerprints of x's
    length, stacked) are within `tol` relative of fingerprint `x` at every probe."""
    return np.all(np.abs(x - prints) <= tol * np.maximum(np.abs(x), np.abs(prints)), axis=1)
