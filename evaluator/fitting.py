"""Fitting a candidate's constants: cheap surrogate first, then refinement on its own simulation.

Why a surrogate works: summed over requests, (e2e - ttft) equals the sum over steps of the
step cycle times the decode tokens of that step, so a stage's true per-output-token time is
sum(dt * D) / sum(D) over its steps. Given recorded batch states (P, D, ...), matching that
D-weighted mean to the measured per-token time is a cheap least-squares problem (no
simulation per iteration). Real step rows, where a model has them, add per-step residuals.
The states come first from a reference simulation, then from the candidate's own one.

Request-level overheads (the Go interface's QueueingTime and PostDecodeFixedOverhead) are
then closed-form means of the residuals on the training requests: a constant shift of every
arrival shifts the whole simulation, so they do not interact with scheduling.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from evaluator.components import components_matrix
from evaluator.step_scoring import StepRows, predict_rows

STAGE_WEIGHT = 3.0  # a stage's per-token residual weighs like this many step-MAPE units
INVALID_PENALTY = 10.0
MAX_STATES_PER_STAGE = 1500


@dataclass
class StageStates:
    """Recorded batch states of one (experiment, stage) training window, as components."""
    experiment: str
    stage: int
    X: np.ndarray
    D: np.ndarray
    target_itl_us: float


def states_to_components(states: np.ndarray, model_vec: np.ndarray) -> np.ndarray:
    n = states.shape[0]
    mv = np.ascontiguousarray(np.broadcast_to(model_vec, (n, model_vec.shape[0])))
    c = lambda j: np.ascontiguousarray(states[:, j])  # noqa: E731
    return components_matrix(mv, c(0), c(1), c(2), c(3), c(4), c(5))


def subsample(n: int, k: int) -> np.ndarray:
    """Deterministic, evenly spaced subsample of range(n)."""
    if n <= k:
        return np.arange(n)
    return np.linspace(0, n - 1, k).round().astype(np.int64)


FLOOR_US = 1000.0  # soft floor for probe states: every real step cycle measured is > 7 ms
FLOOR_WEIGHT = 10.0


def fit_constants(predict, x0: np.ndarray, stages: list[StageStates], rows: list[StepRows],
                  probes: np.ndarray | None = None, max_nfev: int = 8) -> tuple[np.ndarray, float]:
    """Least-squares fit of one constant vector (one model, or all models when global).

    `probes` are component rows spanning the states a simulation visits (ramp-up, lone
    requests, full batches); a smooth hinge keeps predictions there above FLOOR_US, so a fit
    cannot buy accuracy in the training window with negative step times elsewhere.
    """
    x0 = np.asarray(x0, np.float64)
    if x0.size == 0:
        return x0, 0.0
    RX = None
    if rows:
        sel = [r.train & r.has_target for r in rows]
        RX = np.ascontiguousarray(np.concatenate([r.X[m] for r, m in zip(rows, sel)]))
        Ry = np.concatenate([r.target_us[m] for r, m in zip(rows, sel)])
        row_w = 1.0 / np.sqrt(max(1, len(Ry)))

    def residuals(c):
        c = np.ascontiguousarray(c)
        parts = []
        for st in stages:
            p = predict_rows(predict, st.X, c)
            bad = ~np.isfinite(p) | (p < 1.0)
            # fixed-length residual vector: the penalty entry is always present
            parts.append(np.array([INVALID_PENALTY * bad.mean() * 10.0]))
            p = np.where(bad, 1.0, p)
            itl = float(np.sum(p * st.D) / np.sum(st.D))
            parts.append(np.array([STAGE_WEIGHT * (itl - st.target_itl_us) / st.target_itl_us]))
        if RX is not None and len(Ry):
            p = predict_rows(predict, RX, c)
            bad = ~np.isfinite(p) | (p < 1.0)
            p = np.where(bad, 1.0, p)
            r = (p - Ry) / Ry
            r = np.where(bad, INVALID_PENALTY, r)
            parts.append(row_w * r)
        if probes is not None and len(probes):
            p = predict_rows(predict, probes, c)
            p = np.where(np.isfinite(p), p, -FLOOR_US)
            parts.append(FLOOR_WEIGHT / np.sqrt(len(probes)) * np.maximum(0.0, (FLOOR_US - p) / FLOOR_US))
        r = np.concatenate(parts) if parts else np.zeros(1)
        return np.where(np.isfinite(r), r, INVALID_PENALTY)

    scale = np.maximum(np.abs(x0), 1e-3)
    try:
        # candidates explore wild constants: overflow inside the optimizer is expected and
        # handled (residuals are clamped), so keep it off the user's terminal
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = least_squares(residuals, x0, method="trf", x_scale=scale,
                                max_nfev=max_nfev * (x0.size + 1), diff_step=1e-4)
        x, cost = res.x, float(res.cost)
    except (ValueError, FloatingPointError):
        x, cost = x0, float(np.sum(residuals(x0) ** 2) / 2)
    return x, cost


@dataclass
class Overheads:
    queueing_us: float = 0.0
    queueing_per_input_token_us: float = 0.0
    output_token_us: float = 0.0  # not identifiable with fixed output lengths: kept at 0
    post_decode_us: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def fit_overheads(groups) -> Overheads:
    """Median over (experiment, stage) groups of the mean residual on the training requests,
    clamped at zero (overheads only add time). The median keeps one runaway stage from
    dragging every other stage's overhead to zero.

    groups: list of (sim_ttft_us, sim_e2e_us, meas_ttft_us, meas_e2e_us) arrays per group.
    """
    groups = [g for g in groups if len(g[0])]
    if not groups:
        return Overheads()
    q = max(0.0, float(np.median([np.mean(mt - st) for st, se, mt, me in groups])))
    post = max(0.0, float(np.median([np.mean(me - se - q) for st, se, mt, me in groups])))
    return Overheads(queueing_us=q, post_decode_us=post)
