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

import numba
import numpy as np
from scipy.optimize import least_squares

from evaluator.components import N_COMPONENTS, components_for_model
from evaluator.physics import REL_TOL, Constraints, constraint_residuals
from evaluator.step_scoring import StepRows, predict_rows, predict_rows_grad

STAGE_WEIGHT = 3.0  # a stage's per-token residual weighs like this many step-MAPE units
TTFT_WEIGHT = 2.0  # weight of the one-sided TTFT residual (see fit_constants)
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
    NP: np.ndarray | None = None  # requests in prefill per state (for the TTFT proxy)
    target_ttft_us: float = float("nan")


def states_to_components(states: np.ndarray, model_vec: np.ndarray) -> np.ndarray:
    c = lambda j: np.ascontiguousarray(states[:, j])  # noqa: E731
    return components_for_model(np.ascontiguousarray(model_vec, np.float64), c(0), c(1), c(2), c(3), c(4), c(5))


def subsample(n: int, k: int) -> np.ndarray:
    """Deterministic, evenly spaced subsample of range(n)."""
    if n <= k:
        return np.arange(n)
    return np.linspace(0, n - 1, k).round().astype(np.int64)


def ttft_proxy(dt: np.ndarray, n_prefill: np.ndarray) -> float:
    """Mean time to first token implied by a sequence of step cycles without queueing."""
    return float(np.dot(dt, dt) / (2.0 * np.sum(dt)) + np.dot(n_prefill, dt) / np.sum(n_prefill))


# Physical rules in the fit (evaluator.physics): every state of the probes and the extrapolation
# grid at or above the hardware floor, and predictions non-decreasing along the grid's lines.
# The judge then rejects a program that breaks either, so the fit aims a little inside (margins)
# and, when a rule is still broken, refits with weights CONSTRAINT_ESCALATION times heavier.
FLOOR_WEIGHT = 10.0
MONO_WEIGHT = 10.0
FLOOR_MARGIN = 1e-3  # aim 0.1% above the floor: a penalty's optimum sits slightly past its hinge
MONO_MARGIN = 1e-4  # and 0.01% of rise along every line where constants can give it
CONSTRAINT_ESCALATION = (1.0, 30.0, 900.0)
PRIOR_WEIGHT = 1e-2  # per constant, relative to its declared value (see residuals)


def fit_constants(predict, grad, x0: np.ndarray, stages: list[StageStates], rows: list[StepRows],
                  cons: Constraints | None = None, max_nfev: int = 8) -> tuple[np.ndarray, float]:
    """Least-squares fit of one constant vector (one model, or all models when global).

    `cons` are the states a simulation may visit (probes) and the extrapolation grid
    (`evaluator.physics.constraints`); their penalties keep the fit physical, so it cannot buy
    accuracy in the training window with a step faster than the hardware elsewhere.

    `grad`: the program's generated gradient (`evaluator.program_grad.compiled_gradient`).
    Cost (issue 12): the Jacobian is the chain rule through the residuals, from the
    predictions' exact derivatives (`FitProblem.jacobian`); the constraint penalties are fitted on a
    working set that grows by every row or pair a fit leaves active (`_ActiveSet`): a hinge
    that is inactive contributes nothing, so the optimum is the one of the full problem.
    """
    x0 = np.asarray(x0, np.float64)
    if x0.size == 0:
        return x0, 0.0
    if not stages and not rows and (cons is None or not len(cons.X)):
        return x0, 0.0
    prob = FitProblem(predict, grad, x0, stages, rows, cons)
    x = x0
    scale = np.maximum(np.abs(x0), 1e-3)
    cost = float("inf")
    for factor in CONSTRAINT_ESCALATION if prob.n_cons else (1.0,):
        prob.heavier = factor
        for _ in range(MAX_WORKING_SET_ROUNDS):
            try:
                # candidates explore wild constants: overflow inside the optimizer is expected and
                # handled (residuals are clamped), so keep it off the user's terminal
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    res = least_squares(prob.residuals, x, jac=prob.jacobian, method="trf", x_scale=scale,
                                        max_nfev=(max_nfev if factor == 1.0 else 3 * max_nfev) * (x0.size + 1))
                x, cost = res.x, float(res.cost)
            except (ValueError, FloatingPointError, np.linalg.LinAlgError):
                cost = float(np.sum(prob.residuals(x) ** 2) / 2)
            if not prob.grow(x):
                break
        if not prob.n_cons or not prob.broken(x):
            break
    return x, cost


MAX_WORKING_SET_ROUNDS = 4  # refits per escalation step while the fit leaves new constraints active
WORKING_SET_START = 1024  # constraint rows (and grid pairs) in the first working set, evenly spaced


class FitProblem:
    """The residual vector of `fit_constants` and its Jacobian, for one stacked component matrix.

    Layout: per stage an invalid-prediction penalty and the per-token residual; one one-sided
    TTFT residual per stage with prefills; the step rows; the floor rows and grid pairs of the
    constraint working set; the prior. Per-stage sums are one compiled pass (`_stage_sums`).
    """

    def __init__(self, predict, grad, x0, stages, rows, cons):
        self.predict, self.grad, self.x0 = predict, grad, x0
        self.prior_scale = np.maximum(np.abs(x0), 1.0)
        self.heavier = 1.0
        blocks = [st.X for st in stages]
        self.n_st = sum(len(b) for b in blocks)
        self.lens = np.array([len(st.X) for st in stages], np.int64)
        self.seg = np.repeat(np.arange(len(stages)), self.lens)
        D = np.concatenate([np.asarray(st.D, np.float64) for st in stages]) if stages else np.zeros(0)
        sumD = np.bincount(self.seg, weights=D, minlength=len(stages)) if stages else np.zeros(0)
        with np.errstate(all="ignore"):
            self.w_itl = D / sumD[self.seg]
        self.targets = np.array([st.target_itl_us for st in stages])
        # TTFT proxy per stage (see `ttft_proxy`): a request arriving at a random moment waits out
        # the residual of the step in progress, sum(dt^2) / (2 sum(dt)), then the step that runs
        # its prefill (mean of dt weighted by requests in prefill). It matches the simulated mean
        # TTFT closely when there is no queue (checked in tests). The residual is one-sided: a
        # simulated TTFT below the measured one is what the request-level queueing overhead (>= 0)
        # absorbs; one above it cannot be repaired, and without this term nothing in the
        # per-token target decides how step time splits between prefill and decode steps.
        tt = [k for k, st in enumerate(stages)
              if st.NP is not None and np.isfinite(st.target_ttft_us) and st.target_ttft_us > 0 and np.sum(st.NP) > 0]
        self.tt_target = np.array([stages[k].target_ttft_us for k in tt])
        self.rank = np.full(len(stages), -1, np.int64)  # a stage's row among the TTFT residuals
        self.rank[tt] = np.arange(len(tt))
        NP = np.concatenate([np.asarray(st.NP, np.float64) if st.NP is not None else np.zeros(len(st.X))
                             for st in stages]) if stages else np.zeros(0)
        on = np.isin(self.seg, tt)
        sumNP = np.bincount(self.seg[on], weights=NP[on], minlength=len(stages))
        self.w_np = np.where(on, NP / np.where(on, sumNP[self.seg], 1.0), 0.0) if stages else np.zeros(0)
        self._no_jac = np.zeros((self.n_st, 0))
        self.Ry = np.zeros(0)
        if rows:
            sel = [r.train & r.has_target for r in rows]
            blocks += [r.X[m] for r, m in zip(rows, sel)]
            self.Ry = np.concatenate([r.target_us[m] for r, m in zip(rows, sel)])
        self.row_w = 1.0 / np.sqrt(max(1, len(self.Ry)))
        self.base = np.ascontiguousarray(np.vstack(blocks)) if blocks else np.zeros((0, N_COMPONENTS))
        self.cons = cons
        self.n_cons = len(cons.X) if cons is not None else 0
        if self.n_cons:
            self.w_floor = FLOOR_WEIGHT / np.sqrt(self.n_cons)
            self.w_mono = MONO_WEIGHT / np.sqrt(max(1, len(cons.lo)))
            self.work = _ActiveSet(cons, predict_rows(predict, cons.X, np.ascontiguousarray(x0)))
        self._cons_cache: tuple | None = None
        self._stack()
        self._cache: tuple | None = None

    def _stack(self):
        """The stacked matrix: states and step rows, then the working set's constraint rows."""
        parts = [self.base]
        if self.n_cons:
            parts.append(self.cons.X[self.work.rows])
        self.XA = np.ascontiguousarray(np.vstack(parts))
        self._cache = None

    def grow(self, x) -> bool:
        """Add the constraint rows and pairs `x` leaves active outside the working set."""
        if not self.n_cons:
            return False
        if self.work.grow(self._cons_pred(x)):
            self._stack()
            return True
        return False

    def _cons_pred(self, x) -> np.ndarray:
        """Predictions on every constraint row at `x`; `grow` and then `broken` ask for the same x."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        if self._cons_cache is None or not np.array_equal(self._cons_cache[0], x):
            self._cons_cache = (x.copy(), predict_rows(self.predict, self.cons.X, x))
        return self._cons_cache[1]

    def broken(self, x) -> bool:
        below, fall = constraint_residuals(self._cons_pred(x), self.cons)
        return bool(below.size and below.max() > 0) or bool(fall.size and fall.max() > REL_TOL)

    def _pred(self, c) -> np.ndarray:
        c = np.ascontiguousarray(c, dtype=np.float64)
        if self._cache is not None and np.array_equal(self._cache[0], c):
            return self._cache[1]
        p = predict_rows(self.predict, self.XA, c)
        self._cache = (c.copy(), p)
        return p

    def _parts(self, p, J=None):
        """Residual blocks and (with J = d pred / d c) their Jacobian blocks."""
        out, jac = [], []
        n = self.x0.size
        with np.errstate(all="ignore"):
            if self.n_st:
                Js = J[:self.n_st] if J is not None else self._no_jac
                bad, itl, S1, S2, Snp, J_itl, J_s1, J_ps, J_np = _stage_sums(
                    p[:self.n_st], Js, self.seg, self.w_itl, self.rank, self.w_np, len(self.targets), len(self.tt_target))
                out.append(INVALID_PENALTY * 10.0 * bad / np.maximum(self.lens, 1))
                out.append(STAGE_WEIGHT * (itl - self.targets) / self.targets)
                proxy = S2 / (2.0 * S1) + Snp
                over = np.maximum(0.0, proxy - self.tt_target) / self.tt_target
                out.append(TTFT_WEIGHT * over)
                if J is not None:
                    jac.append(np.zeros((len(self.targets), n)))
                    jac.append(STAGE_WEIGHT * J_itl / self.targets[:, None])
                    dproxy = J_ps / S1[:, None] - (S2 / (2.0 * S1 * S1))[:, None] * J_s1 + J_np
                    jac.append(TTFT_WEIGHT * np.where((over > 0)[:, None], dproxy / self.tt_target[:, None], 0.0))
            nr = len(self.Ry)
            if nr:
                pr = p[self.n_st:self.n_st + nr]
                bad = ~np.isfinite(pr) | (pr < 1.0)
                r = (np.where(bad, 1.0, pr) - self.Ry) / self.Ry
                out.append(self.row_w * np.where(bad, INVALID_PENALTY, r))
                if J is not None:
                    jac.append(np.where(bad[:, None], 0.0, self.row_w * J[self.n_st:self.n_st + nr] / self.Ry[:, None]))
            if self.n_cons:
                pc = p[self.n_st + nr:]
                below, fall, d_below, d_lo, d_hi = self.work.penalties(pc)
                out.append(self.heavier * self.w_floor * below)
                out.append(self.heavier * self.w_mono * fall)
                if J is not None:
                    Jc = J[self.n_st + nr:]
                    jac.append(self.heavier * self.w_floor * d_below[:, None] * Jc[self.work.floor_pos])
                    jac.append(self.heavier * self.w_mono * (d_lo[:, None] * Jc[self.work.lo_pos]
                                                             + d_hi[:, None] * Jc[self.work.hi_pos]))
        return out, jac

    def residuals(self, c) -> np.ndarray:
        out, _ = self._parts(self._pred(c))
        # a faint pull towards the declared values: it decides only the directions the data
        # does not feel (OVERHEAD against EFFICIENCY * t_weights for a dense model), which
        # otherwise drift to +-1e6 pairs that cancel (evaluator.identify reports them)
        out.append(PRIOR_WEIGHT * (c - self.x0) / self.prior_scale)
        r = np.concatenate(out)
        return np.where(np.isfinite(r), r, INVALID_PENALTY)

    def jacobian(self, c) -> np.ndarray:
        """d residuals / d c: the predictions' exact derivatives (the program's generated
        gradient, one compiled call per row), then the chain rule through the residual blocks."""
        c = np.ascontiguousarray(c, dtype=np.float64)
        p, J = predict_rows_grad(self.grad, self.XA, c)
        self._cache = (c.copy(), p)  # the same values as predict_rows (bit-identical kernels)
        J[~np.isfinite(J)] = 0.0
        out, jac = self._parts(p, J)
        out.append(PRIOR_WEIGHT * (c - self.x0) / self.prior_scale)
        jac.append(np.diag(PRIOR_WEIGHT / self.prior_scale))
        r = np.concatenate(out)
        Jr = np.vstack(jac)
        Jr[~np.isfinite(r)] = 0.0
        Jr[~np.isfinite(Jr)] = 0.0
        return Jr


@numba.njit(cache=True, error_model="numpy")
def _stage_sums(ps, J, seg, w_itl, rank, w_np, n_stage, n_tt):
    """The per-stage sums the stage residuals are made of, in one pass over the states: the
    count of invalid predictions (NaN, infinite or < 1 us; counted as 1 us), the D-weighted
    prediction, and for TTFT stages (rank >= 0) sum(dt), sum(dt^2) and the NP-weighted dt; with
    J (d pred / d c, one column per constant) the same sums of its rows (invalid rows left out)."""
    n = J.shape[1]
    bad = np.zeros(n_stage)
    itl = np.zeros(n_stage)
    s1 = np.zeros(n_tt)
    s2 = np.zeros(n_tt)
    snp = np.zeros(n_tt)
    j_itl = np.zeros((n_stage, n))
    j_s1 = np.zeros((n_tt, n))
    j_ps = np.zeros((n_tt, n))
    j_np = np.zeros((n_tt, n))
    for i in range(ps.shape[0]):
        s = seg[i]
        v = ps[i]
        ok = 1.0 <= v < np.inf
        if not ok:
            bad[s] += 1.0
            v = 1.0
        itl[s] += w_itl[i] * v
        r = rank[s]
        if r >= 0:
            s1[r] += v
            s2[r] += v * v
            snp[r] += w_np[i] * v
        if ok and n:
            for k in range(n):
                d = J[i, k]
                j_itl[s, k] += w_itl[i] * d
                if r >= 0:
                    j_s1[r, k] += d
                    j_ps[r, k] += v * d
                    j_np[r, k] += w_np[i] * d
    return bad, itl, s1, s2, snp, j_itl, j_s1, j_ps, j_np


class _ActiveSet:
    """The constraint rows (floor) and grid pairs (monotonicity) a fit carries: an evenly spaced
    start plus whatever is active at the starting constants, grown by `grow`."""

    def __init__(self, cons: Constraints, pred0: np.ndarray):
        self.cons = cons
        below, fall = constraint_residuals(pred0, cons, FLOOR_MARGIN, MONO_MARGIN)
        self.floor_idx = np.union1d(subsample(len(cons.X), WORKING_SET_START), np.flatnonzero(below > 0))
        self.pair_idx = np.union1d(subsample(len(cons.lo), WORKING_SET_START), np.flatnonzero(fall > 0))
        self._index()

    def _index(self):
        c = self.cons
        self.rows = np.union1d(self.floor_idx, np.union1d(c.lo[self.pair_idx], c.hi[self.pair_idx])).astype(np.int64)
        pos = lambda idx: np.searchsorted(self.rows, idx)  # noqa: E731
        self.floor_pos, self.lo_pos, self.hi_pos = pos(self.floor_idx), pos(c.lo[self.pair_idx]), pos(c.hi[self.pair_idx])
        self.floor = c.floor[self.floor_idx] * (1.0 + FLOOR_MARGIN)
        self.allow = c.allow[self.pair_idx] if c.allow is not None else 0.0

    def grow(self, pred_all: np.ndarray) -> bool:
        below, fall = constraint_residuals(pred_all, self.cons, FLOOR_MARGIN, MONO_MARGIN)
        new_f = np.setdiff1d(np.flatnonzero(below > 0), self.floor_idx)
        new_p = np.setdiff1d(np.flatnonzero(fall > 0), self.pair_idx)
        if not len(new_f) and not len(new_p):
            return False
        self.floor_idx = np.union1d(self.floor_idx, new_f)
        self.pair_idx = np.union1d(self.pair_idx, new_p)
        self._index()
        return True

    def penalties(self, pc: np.ndarray):
        """(floor shortfalls, pair falls) as `constraint_residuals` with the fit's margins, and
        their derivatives: d below / d pred per floor row, d fall / d pred(lo), d pred(hi) per pair."""
        fl = self.floor
        p = np.where(np.isfinite(pc), pc, -np.inf)
        pf = p[self.floor_pos]
        fin = np.isfinite(pf)
        denom = np.maximum(fl, 1e-9)
        below = np.where(fin, np.maximum(0.0, (fl - pf) / denom), 2.0)
        d_below = np.where(fin & (below > 0), -1.0 / denom, 0.0)
        a, b = p[self.lo_pos], p[self.hi_pos]
        fin = np.isfinite(a) & np.isfinite(b)
        a, b = np.where(fin, a, 0.0), np.where(fin, b, 0.0)
        m = np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-9)
        fall = np.maximum(0.0, (a - b) / m - self.allow + MONO_MARGIN)
        on = fall > 0
        a_big = np.abs(a) >= np.abs(b)
        d_lo = np.where(a_big, (m - (a - b) * np.sign(a)) / (m * m), 1.0 / m)
        d_hi = np.where(a_big, -1.0 / m, (-m - (a - b) * np.sign(b)) / (m * m))
        return below, fall, d_below, np.where(on & fin, d_lo, 0.0), np.where(on & fin, d_hi, 0.0)


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
