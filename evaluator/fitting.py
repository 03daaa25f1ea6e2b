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

import math
import warnings
from dataclasses import dataclass
from itertools import combinations

import numba
import numpy as np

from evaluator.components import N_COMPONENTS, components_for_model, components_for_model_spread
from evaluator.physics import REL_TOL, Constraints, constraint_residuals
from evaluator.step_scoring import StepRows, predict_rows, predict_rows_grad

STAGE_WEIGHT = 3.0  # a stage's per-token residual weighs like this many step-MAPE units
TTFT_WEIGHT = 2.0  # weight of the one-sided TTFT residual (see fit_constants)
INVALID_PENALTY = 10.0
MAX_STATES_PER_STAGE = 1500


def least_squares(*args, **kw):
    """scipy.optimize.least_squares, imported on first use: the search's driver imports this
    module and never fits, and scipy.optimize costs every process that imports it ~40 MB
    (issue 31's memory goal)."""
    from scipy.optimize import least_squares as solve
    return solve(*args, **kw)


def lsq_linear(*args, **kw):
    """scipy.optimize.lsq_linear, imported on first use (see least_squares)."""
    from scipy.optimize import lsq_linear as solve
    return solve(*args, **kw)


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
    """Components of batch states (P, D, n_prefill, n_decode, B, K, t[, ctx_max]): recorded
    simulator states carry the longest decoding context; others take the mean (no spread)."""
    c = lambda j: np.ascontiguousarray(states[:, j], np.float64)  # noqa: E731
    mv = np.ascontiguousarray(model_vec, np.float64)
    if states.shape[1] > 7:
        return components_for_model_spread(mv, c(0), c(1), c(2), c(3), c(4), c(5), c(7))
    return components_for_model(mv, c(0), c(1), c(2), c(3), c(4), c(5))


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
CONSTRAINT_ESCALATION = (1.0, 30.0, 900.0, 27000.0)  # the last step only where a rule is still broken (phase_split on the 16 experiments)
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
        x, cost = _solve(prob, x, scale, factor, (max_nfev if factor == 1.0 else 3 * max_nfev) * (x0.size + 1))
        if not prob.n_cons or not prob.broken(x):
            return x, cost
    # Still unphysical: the unweighted first fit can settle where no weight climbs out of (on
    # the 16 experiments' embedded default, linear_physics for codellama ended with a weights
    # coefficient of 66 and negative compute ones). Start again from the declared constants
    # under the heaviest weight, with more evaluations; keep it if it is physical.
    x2, cost2 = _solve(prob, x0, scale, CONSTRAINT_ESCALATION[-1], 12 * max_nfev * (x0.size + 1))
    return (x2, cost2) if not prob.broken(x2) else (x, cost)


def _solve(prob: "FitProblem", x, scale, factor: float, max_nfev: int) -> tuple[np.ndarray, float]:
    """Least squares at one penalty weight, refitted while the fit leaves new constraints active."""
    prob.heavier = factor
    cost = float("inf")
    for _ in range(MAX_WORKING_SET_ROUNDS):
        try:
            # candidates explore wild constants: overflow inside the optimizer is expected and
            # handled (residuals are clamped), so keep it off the user's terminal
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                res = least_squares(prob.residuals, x, jac=prob.jacobian, method="trf", x_scale=scale,
                                    max_nfev=max_nfev)
            x, cost = res.x, float(res.cost)
        except (ValueError, FloatingPointError, np.linalg.LinAlgError):
            cost = float(np.sum(prob.residuals(x) ** 2) / 2)
        if not prob.grow(x):
            break
    return x, cost


MAX_WORKING_SET_ROUNDS = 4  # refits per escalation step while the fit leaves new constraints active
WORKING_SET_START = 1024  # constraint rows (and grid pairs) in the first working set, evenly spaced


class FitProblem:
    """The residual vector of `fit_constants` and its Jacobian, for one stacked component matrix.

    Layout: per stage an invalid-prediction penalty and the per-token residual; one one-sided
    TTFT residual per stage with prefills; the step rows; the floor rows and grid pairs of the
    constraint working set; the prior. Two compiled passes fill it in place: the per-stage sums
    over the states (`_stage_sums`), then the step rows and the hinges (`_row_blocks`).
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
        self._no_jr = np.zeros((0, 0))
        self._tt_all = np.ones(len(self.tt_target), np.bool_)
        self._vals: tuple | None = None  # (c, value sums of the states at c)
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

    def _assemble(self, c, p, J=None):
        """The residual vector at constants c, whose predictions are p, and with J = d pred / d c
        its Jacobian (else None). The stage residuals come from one pass over the states
        (`_stage_sums`), the step rows and the working set's hinges from another (`_row_blocks`),
        written in place; a non-finite residual becomes INVALID_PENALTY with a zero row."""
        n, ns, nt = self.x0.size, len(self.targets), len(self.tt_target)
        nr = len(self.Ry)
        nf, npair = (len(self.work.floor_pos), len(self.work.lo_pos)) if self.n_cons else (0, 0)
        head = 2 * ns + nt if self.n_st else 0
        m = head + nr + nf + npair + n
        r = np.empty(m)
        Jr = np.zeros((m, n)) if J is not None else self._no_jr
        with np.errstate(all="ignore"):
            if self.n_st:
                ps = p[:self.n_st]
                vals = self._stage_values(c, ps)
                bad, itl, S1, S2, Snp = vals
                proxy = S2 / (2.0 * S1) + Snp
                over = np.maximum(0.0, proxy - self.tt_target) / self.tt_target
                if J is not None:  # the derivative sums; a TTFT residual at 0 (most) needs none
                    _, _, _, _, _, J_itl, J_s1, J_ps, J_np = _stage_sums(
                        ps, J[:self.n_st], self.seg, self.w_itl, self.rank, self.w_np, ns, nt, over > 0)
                r[:ns] = INVALID_PENALTY * 10.0 * bad / np.maximum(self.lens, 1)
                r[ns:2 * ns] = STAGE_WEIGHT * (itl - self.targets) / self.targets
                r[2 * ns:head] = TTFT_WEIGHT * over
                if J is not None:
                    Jr[ns:2 * ns] = STAGE_WEIGHT * J_itl / self.targets[:, None]
                    dproxy = J_ps / S1[:, None] - (S2 / (2.0 * S1 * S1))[:, None] * J_s1 + J_np
                    Jr[2 * ns:head] = TTFT_WEIGHT * np.where((over > 0)[:, None], dproxy / self.tt_target[:, None], 0.0)
            if nr + nf + npair:
                if self.n_cons:
                    w = self.work
                    fpos, fl, cl, lo, hi, allow = w.floor_pos, w.floor, w.ceil, w.lo_pos, w.hi_pos, w.allow
                    wf, wm = self.heavier * self.w_floor, self.heavier * self.w_mono
                else:
                    fpos, fl, cl, lo, hi, allow, wf, wm = (_NO_ROWS, _NO_VALS, _NO_VALS, _NO_ROWS, _NO_ROWS,
                                                           _NO_VALS, 0.0, 0.0)
                _row_blocks(p, J if J is not None else self._no_jac, J is not None, self.n_st, self.Ry, self.row_w,
                            fpos, fl, cl, lo, hi, allow, wf, wm, r[head:m - n], Jr[head:m - n])
            # a faint pull towards the declared values: it decides only the directions the data
            # does not feel (OVERHEAD against EFFICIENCY * t_weights for a dense model), which
            # otherwise drift to +-1e6 pairs that cancel (evaluator.identify reports them)
            r[m - n:] = PRIOR_WEIGHT * (c - self.x0) / self.prior_scale
            if J is not None:
                Jr[m - n:] = np.diag(PRIOR_WEIGHT / self.prior_scale)
        bad = ~np.isfinite(r)
        if bad.any():
            r[bad] = INVALID_PENALTY
            if J is not None:
                Jr[bad] = 0.0
        return r, Jr

    def _stage_values(self, c, ps) -> tuple:
        """The value sums of `_stage_sums` at c, kept for the Jacobian that scipy asks for next
        at the same c (it decides which TTFT residuals are active)."""
        if self._vals is None or not np.array_equal(self._vals[0], c):
            self._vals = (np.array(c, dtype=np.float64), _stage_sums(
                ps, self._no_jac, self.seg, self.w_itl, self.rank, self.w_np, len(self.targets),
                len(self.tt_target), self._tt_all)[:5])
        return self._vals[1]

    def residuals(self, c) -> np.ndarray:
        c = np.asarray(c, dtype=np.float64)
        return self._assemble(c, self._pred(c))[0]

    def jacobian(self, c) -> np.ndarray:
        """d residuals / d c: the predictions' exact derivatives (the program's generated
        gradient, one compiled call per row), then the chain rule through the residual blocks."""
        c = np.ascontiguousarray(c, dtype=np.float64)
        p, J = predict_rows_grad(self.grad, self.XA, c)
        self._cache = (c.copy(), p)  # the same values as predict_rows (bit-identical kernels)
        J[~np.isfinite(J)] = 0.0
        Jr = self._assemble(c, p, J)[1]
        Jr[~np.isfinite(Jr)] = 0.0
        return Jr


_NO_ROWS = np.zeros(0, np.int64)
_NO_VALS = np.zeros(0)


@numba.njit(cache=True, error_model="numpy")
def _row_blocks(p, J, jac, n_st, Ry, row_w, floor_pos, floor, ceil, lo_pos, hi_pos, allow, w_floor, w_mono, r, Jr):
    """Residuals (and with `jac` their Jacobian rows) of the step rows, then the working set's
    floor rows and grid pairs, into r and Jr from row 0. p and J hold the states first (n_st
    rows), then the step rows, then the working set's constraint rows.

    Step row: its relative error (an invalid prediction, NaN or < 1 us: INVALID_PENALTY).
    Floor row: the relative shortfall below the floor, or excess above the ceiling, with the
    fit's margin (`floor` and `ceil` have it; a non-finite prediction: 2).
    Pair (lo, hi) of a grid line: the relative fall from lo to hi beyond what the measured
    components allow, plus MONO_MARGIN, where positive (a pair with a non-finite end: counted
    from 0 and 0, without derivative)."""
    n = J.shape[1]
    nr = Ry.shape[0]
    c0 = n_st + nr  # first constraint row in p
    o = 0
    for i in range(nr):
        v = p[n_st + i]
        if np.isfinite(v) and v >= 1.0:
            r[o] = row_w * ((v - Ry[i]) / Ry[i])
            if jac:
                for k in range(n):
                    Jr[o, k] = row_w * J[n_st + i, k] / Ry[i]
        else:
            r[o] = row_w * INVALID_PENALTY
        o += 1
    for f in range(floor_pos.shape[0]):
        x = p[c0 + floor_pos[f]]
        denom = max(floor[f], 1e-9)
        if np.isfinite(x):
            below = max(0.0, (floor[f] - x) / denom)
            top = max(ceil[f], 1e-9)
            above = max(0.0, (x - ceil[f]) / top)
            r[o] = w_floor * (below + above)
            if jac and (below > 0.0 or above > 0.0):
                d = w_floor * (-1.0 / denom if below > 0.0 else 1.0 / top)
                for k in range(n):
                    Jr[o, k] = d * J[c0 + floor_pos[f], k]
        else:
            r[o] = w_floor * 2.0
        o += 1
    for q in range(lo_pos.shape[0]):
        a = p[c0 + lo_pos[q]]
        b = p[c0 + hi_pos[q]]
        fin = np.isfinite(a) and np.isfinite(b)
        if not fin:
            a = 0.0
            b = 0.0
        m = max(max(abs(a), abs(b)), 1e-9)
        fall = max(0.0, (a - b) / m - allow[q] + MONO_MARGIN)
        r[o] = w_mono * fall
        if jac and fin and fall > 0.0:
            if abs(a) >= abs(b):
                d_lo = (m - (a - b) * np.sign(a)) / (m * m)
                d_hi = -1.0 / m
            else:
                d_lo = 1.0 / m
                d_hi = (-m - (a - b) * np.sign(b)) / (m * m)
            for k in range(n):
                Jr[o, k] = w_mono * (d_lo * J[c0 + lo_pos[q], k] + d_hi * J[c0 + hi_pos[q], k])
        o += 1


@numba.njit(cache=True, error_model="numpy")
def _stage_sums(ps, J, seg, w_itl, rank, w_np, n_stage, n_tt, tt_jac):
    """The per-stage sums the stage residuals are made of, in one pass over the states: the
    count of invalid predictions (NaN, infinite or < 1 us; counted as 1 us), the D-weighted
    prediction, and for TTFT stages (rank >= 0) sum(dt), sum(dt^2) and the NP-weighted dt; with
    J (d pred / d c, one column per constant) the same sums of its rows (invalid rows left out),
    those of the TTFT terms only where `tt_jac` (by rank) asks for them (zeros elsewhere)."""
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
            w = w_itl[i]
            for k in range(n):
                j_itl[s, k] += w * J[i, k]
            if r >= 0 and tt_jac[r]:
                wn = w_np[i]
                for k in range(n):
                    d = J[i, k]
                    j_s1[r, k] += d
                    j_ps[r, k] += v * d
                    j_np[r, k] += wn * d
    return bad, itl, s1, s2, snp, j_itl, j_s1, j_ps, j_np


class _ActiveSet:
    """The constraint rows (floor) and grid pairs (monotonicity) a fit carries: an evenly spaced
    start plus whatever is active at the starting constants, grown by `grow`. Kept as masks
    over all rows and pairs, so the indices stay sorted and unique without set operations."""

    def __init__(self, cons: Constraints, pred0: np.ndarray):
        self.cons = cons
        below, fall = constraint_residuals(pred0, cons, FLOOR_MARGIN, MONO_MARGIN)
        self.in_floor = below > 0
        self.in_floor[subsample(len(cons.X), WORKING_SET_START)] = True
        self.in_pair = fall > 0
        self.in_pair[subsample(len(cons.lo), WORKING_SET_START)] = True
        self._index()

    def _index(self):
        c = self.cons
        self.floor_idx = np.flatnonzero(self.in_floor)
        self.pair_idx = np.flatnonzero(self.in_pair)
        lo, hi = c.lo[self.pair_idx], c.hi[self.pair_idx]
        carried = self.in_floor.copy()
        carried[lo] = True
        carried[hi] = True
        self.rows = np.flatnonzero(carried)
        pos = np.cumsum(carried) - 1  # a carried row's position among the carried rows
        self.floor_pos, self.lo_pos, self.hi_pos = pos[self.floor_idx], pos[lo], pos[hi]
        self.floor = c.floor[self.floor_idx] * (1.0 + FLOOR_MARGIN)
        self.ceil = c.ceiling[self.floor_idx] * (1.0 - FLOOR_MARGIN)
        self.allow = c.allow[self.pair_idx] if c.allow is not None else np.zeros(len(self.pair_idx))

    def grow(self, pred_all: np.ndarray) -> bool:
        below, fall = constraint_residuals(pred_all, self.cons, FLOOR_MARGIN, MONO_MARGIN)
        new_f = (below > 0) & ~self.in_floor
        new_p = (fall > 0) & ~self.in_pair
        if not new_f.any() and not new_p.any():
            return False
        self.in_floor |= new_f
        self.in_pair |= new_p
        self._index()
        return True


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


# ---------------------------------------------------------------- overheads of a model nobody fitted

LAW_TERMS = ("api_us", "per_input_token_us", "cycles")  # constant, per prompt token, per step cycle
LAW_MIN_T = 2.0  # a term is kept only where its estimate is at least this many standard errors from 0
LAW_BIC_TIE = 6.0  # BIC differences below this are no strong evidence (Kass & Raftery) between subsets
QUEUE_DOMINATED_CYCLES = 20.0  # a stage whose measured TTFT exceeds this many step cycles measures its queue


@dataclass(frozen=True)
class OverheadLaw:
    """Request overheads across models, for a deployment no fit saw (`evolve predict`).

    TTFT overhead = api_us + per_input_token_us * prompt tokens + cycles * tau, with tau the
    deployment's simulated time per output token (the step cycle): the API server's constant,
    tokenization in proportion to the prompt, and the scheduling delay a new request pays
    in step cycles. Measured on the shared data, the residual TTFT of the four models is 1.5-2
    cycles (15 ms for llama-2-7b, 32 ms for mixtral), so a constant carried across models
    (the fitted models' mean) misses small and slow models alike. E2E adds post_decode_us.
    """
    api_us: float = 0.0
    per_input_token_us: float = 0.0
    cycles: float = 0.0
    post_decode_us: float = 0.0
    terms: tuple[str, ...] = ()  # the terms the data pins down (the others are 0)
    n_points: int = 0
    rms_us: float = float("nan")  # residual of the TTFT fit over its points

    def overheads(self, tau_us: float) -> Overheads:
        """The Go interface's overheads of one deployment at one load (tau: its step cycle)."""
        return Overheads(queueing_us=self.api_us + self.cycles * float(tau_us),
                         queueing_per_input_token_us=self.per_input_token_us, post_decode_us=self.post_decode_us)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("api_us", "per_input_token_us", "cycles", "post_decode_us",
                                              "n_points", "rms_us")} | {"terms": list(self.terms)}


def _law_fit(A: np.ndarray, y: np.ndarray):
    """Robust non-negative least squares (scipy, soft-L1 loss at the residuals' MAD scale: one
    stage with a burst the simulation does not have, 4.6 cycles where the rest sit at 1.4-2,
    does not pull the law), on columns scaled to one size (tokens and microseconds differ
    1e4x); (coefficients, residual sum of squares trimmed at 3 robust sigmas, t-values)."""
    scale = np.maximum(np.abs(A).max(axis=0), 1e-12)
    As = A / scale
    x0 = lsq_linear(As, y, bounds=(0.0, np.inf)).x
    r0 = y - As @ x0
    f_scale = max(1.4826 * float(np.median(np.abs(r0 - np.median(r0)))), 1.0)
    x = least_squares(lambda c: As @ c - y, np.maximum(x0, 1e-9), bounds=(0.0, np.inf), loss="soft_l1",
                      f_scale=f_scale).x
    coef = x / scale
    resid = y - A @ coef
    dof = len(y) - A.shape[1]
    var = (1.4826 * float(np.median(np.abs(resid - np.median(resid))))) ** 2 if dof > 0 else 0.0
    var = max(var, 1e-12)
    rss = max(float(np.sum(np.minimum(resid ** 2, 9.0 * var))), 1e-12)  # trimmed at 3 robust sigmas
    if dof <= 0:
        return coef, rss, np.zeros(A.shape[1])
    se = np.sqrt(np.maximum(np.diag(var * np.linalg.pinv(A.T @ A)), 0.0))
    return coef, rss, np.where(se > 0, coef / np.where(se > 0, se, 1.0), np.inf)


def fit_overhead_law(points) -> OverheadLaw:
    """Robust least squares (scipy, coefficients >= 0) of the residual TTFT over (experiment, stage)
    groups of every fitted model on a subset of [1, prompt, tau]: among the subsets whose every
    term the data pins down (estimate at least LAW_MIN_T standard errors from zero), the one
    with the lowest BIC. Where two terms are collinear on the data (three models whose step
    cycles differ little cannot tell a constant from a cycle term) the one that explains it
    better is kept alone; on the shared data the prompt lengths span 575-787 tokens and the
    per-token term is not pinned. The post-decode overhead is then the median E2E residual
    left, clamped at zero, as in `fit_overheads`.

    points: (mean prompt tokens, simulated per-token time us, mean residual TTFT us (measured -
    simulated), mean residual E2E us) per group; queue-dominated groups already left out.
    """
    P = np.array([p for p in points if all(np.isfinite(p))], np.float64).reshape(-1, 4)
    if len(P) == 0:
        return OverheadLaw()
    cols = {"api_us": np.ones(len(P)), "per_input_token_us": P[:, 0], "cycles": P[:, 1]}
    y = P[:, 2]
    n = len(y)
    cands = []
    for k in range(1, len(LAW_TERMS) + 1):
        for terms in combinations(LAW_TERMS, k):
            if k >= n:
                continue
            coef, rss, t = _law_fit(np.column_stack([cols[c] for c in terms]), y)
            if not (t >= LAW_MIN_T).all() and terms != ("api_us",):
                continue  # a term the data does not pin down
            cands.append((n * math.log(rss / n) + k * math.log(n), terms, coef))
    if not cands:
        return OverheadLaw(api_us=max(0.0, float(np.median(y))), terms=("api_us",), n_points=n)
    top = min(c[0] for c in cands)
    # within LAW_BIC_TIE of the lowest BIC the data cannot tell the subsets apart: the fewest terms
    # win, then the cycle term (what all four models of the shared data pin down: 1.4-2.0 cycles
    # each, where a constant would be 15-35 ms), then the constant (a prompt term over a narrow
    # range of lengths is a constant in disguise)
    best = min((c for c in cands if c[0] <= top + LAW_BIC_TIE),
               key=lambda c: (len(c[1]), "cycles" not in c[1], "api_us" not in c[1], c[0]))
    got = dict(zip(best[1], best[2]))
    law = OverheadLaw(**{k: float(got.get(k, 0.0)) for k in LAW_TERMS}, terms=tuple(best[1]), n_points=n)
    ttft = law.api_us + law.per_input_token_us * P[:, 0] + law.cycles * P[:, 1]
    post = max(0.0, float(np.median(P[:, 3] - ttft)))
    rms = float(np.sqrt(np.mean((y - ttft) ** 2)))
    return OverheadLaw(law.api_us, law.per_input_token_us, law.cycles, post, law.terms, n, rms)
