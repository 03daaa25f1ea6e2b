"""Per-step scoring on the real scheduler-step rows.

Target: `next_step_start_delta_us`, the exact start-to-start step cycle (present on ~10% of
rows). `duration_us` times only the schedule() call (PROVENANCE caveat 1), so it is used
only as a rank-correlation diagnostic, never as a target.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from evaluator.components import GRAD_TYPE, N_COMPONENTS, PREDICTOR_TYPE, components_for_model
from evaluator.data import GroundTruth


@numba.njit((PREDICTOR_TYPE, numba.float64[:, ::1], numba.float64[::1]), cache=True, error_model="numpy")
def predict_rows(predict, X, consts):
    """Predictions for every row of a component matrix (one compiled loop, no recompilation)."""
    out = np.empty(X.shape[0])
    for i in range(X.shape[0]):
        out[i] = predict(X[i], consts)
    return out


@numba.njit((GRAD_TYPE, numba.float64[:, ::1], numba.float64[::1]), cache=True, error_model="numpy")
def predict_rows_grad(grad, X, consts):
    """Predictions and their exact derivatives d pred / d consts for every row (one call of the
    program's generated gradient, `evaluator.program_grad`, per row)."""
    n = X.shape[0]
    p = np.empty(n)
    J = np.empty((n, consts.shape[0]))
    for i in range(n):
        p[i] = grad(X[i], consts, J[i])
    return p, J


@dataclass
class StepRows:
    """The step rows of one model: components, targets and the train/test split."""
    model: str
    experiment: np.ndarray  # experiment id per row
    X: np.ndarray  # components, C-contiguous
    target_us: np.ndarray  # next_step_start_delta_us (NaN where absent)
    duration_us: np.ndarray
    train: np.ndarray  # bool: in the first `train_fraction` of its load stage's time, as the training requests
    stage: np.ndarray | None = None  # load stage index per row (`row_stages`)

    @property
    def has_target(self) -> np.ndarray:
        return np.isfinite(self.target_us)

    def select(self, keep: np.ndarray, train: np.ndarray | None = None) -> "StepRows":
        """The rows where `keep`; `train` (over all rows) replaces the train mask."""
        train = self.train if train is None else train
        return StepRows(self.model, self.experiment[keep], np.ascontiguousarray(self.X[keep]), self.target_us[keep],
                        self.duration_us[keep], train[keep], None if self.stage is None else self.stage[keep])


UNPLACED = -1  # a row of a multi-stage experiment without a step clock: no stage known


def row_stages(e, ts_ns: np.ndarray, train_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Load stage of each step row of experiment `e`, and whether it lies in its stage's
    training window (the first `train_fraction` of the stage's time, as the training requests).
    Steps carry the server's clock and requests the client's, so a row's time is counted from
    the experiment's first sampled step (about the first arrival: rows are ~10% of steps, a
    fraction of a second apart, against stages of minutes); rows after the last stage's end
    (the drain) belong to the last stage."""
    t = (ts_ns - ts_ns.min()) / 1e9 if len(ts_ns) else np.zeros(0)
    starts = np.array([s.start_s for s in e.stages], np.float64)
    order = np.argsort(starts, kind="stable")
    pos = np.clip(np.searchsorted(starts[order], t, side="right") - 1, 0, len(order) - 1)
    stage = np.array([e.stages[i].index for i in order], np.int64)[pos]
    ends = np.array([e.stages[i].start_s + train_fraction * e.stages[i].duration_s for i in order])[pos]
    return stage, t < ends


def build_step_rows(gt: GroundTruth, train_fraction: float = 0.7) -> dict[str, StepRows]:
    if gt.steps is None:
        return {}
    out = {}
    hw = gt.hardware
    for model in sorted(gt.steps["model_key"].unique()):
        s = gt.steps[gt.steps["model_key"] == model]
        exps = {e.id: e for e in gt.experiments}
        f = lambda c: s[c].to_numpy(np.float64)  # noqa: E731
        K = (f("kv_blocks_total_gpu") - f("kv_blocks_free_gpu")) * 16.0
        agg = (f("prefill_tokens"), f("decode_tokens"), f("num_prefill_reqs"), f("num_decode_reqs"),
               f("running_depth"), K)
        # per experiment: a model vector carries its kernel tables (~600 floats), not copied per row
        X = np.empty((len(s), N_COMPONENTS))
        ids = s["experiment_id"].to_numpy()
        for exp_id in np.unique(ids):
            m = ids == exp_id
            X[m] = components_for_model(exps[exp_id].model_vec(hw), *(np.ascontiguousarray(a[m]) for a in agg))
        train = np.zeros(len(s), bool)
        stage = np.zeros(len(s), np.int64)
        timed = "ts_start_ns" in s.columns and s["ts_start_ns"].notna().all()
        ts = s["ts_start_ns"].to_numpy(np.int64) if timed else None
        for exp_id in np.unique(ids):
            m = ids == exp_id
            e = exps[exp_id]
            if timed:
                stage[m], train[m] = row_stages(e, ts[m], train_fraction)
            else:  # no clock: in step order (rows are sorted by step_id); a stage only where there is one
                idx = np.flatnonzero(m)
                train[idx[: int(len(idx) * train_fraction)]] = True
                stage[m] = e.stages[0].index if len(e.stages) == 1 else UNPLACED
        out[model] = StepRows(model, ids, np.ascontiguousarray(X),
                              s["next_step_start_delta_us"].to_numpy(np.float64, na_value=np.nan),
                              f("duration_us"), train, stage)
    return out


def step_metrics(pred: np.ndarray, rows: StepRows, part: str = "test") -> dict[str, dict]:
    """Per experiment: MAPE vs the measured cycle on `part`, Spearman vs duration_us (all rows)."""
    from scipy.stats import spearmanr  # here, not at the top: the driver never calls it (~25 MB)
    out = {}
    sel_part = ~rows.train if part == "test" else rows.train
    for exp_id in np.unique(rows.experiment):
        m = rows.experiment == exp_id
        t = m & sel_part & rows.has_target
        mape = float(np.mean(np.abs(pred[t] - rows.target_us[t]) / rows.target_us[t])) if t.any() else np.nan
        rho = spearmanr(pred[m], rows.duration_us[m]).statistic if m.sum() > 2 else np.nan
        out[str(exp_id)] = {"step_mape": mape, "spearman_duration": float(rho), "n": int(t.sum())}
    return out
