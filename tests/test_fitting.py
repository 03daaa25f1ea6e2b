"""The fit's residuals and Jacobian (evaluator.fitting) and the compiled-function handle the fit
and the simulator call (evaluator.native)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from scipy.optimize._numdiff import approx_derivative

from evaluator import fitting
from evaluator.judge_states import constraints, reference_stage_states
from evaluator.program import parse_program
from evaluator.program_grad import compiled_gradient
from evaluator.step_scoring import predict_rows, predict_rows_grad
from seeds import seed_sources


@pytest.fixture(scope="module")
def problem(evaluator):
    """The fit of the linear_physics seed for one model, on its reference states, its step rows
    and its physical constraints, as `Evaluator.evaluate` builds it."""
    prog = parse_program(seed_sources()["linear_physics"])
    key, exps = next((k, v) for k, v in sorted(evaluator.groups().items()) if evaluator.rows_for(v))
    stages = [s for e in exps for s in reference_stage_states(evaluator, e)]
    cons = constraints(evaluator, key, exps).for_program(prog.params)
    return prog, fitting.FitProblem(prog.compiled(), compiled_gradient(prog), prog.initial_constants, stages,
                                    evaluator.rows_for(exps), cons)


def _blocks(prob) -> dict[str, slice]:
    """Row ranges of the residual vector: stage rows, step rows, floor rows, grid pairs, prior."""
    ns, nt, nr = len(prob.targets), len(prob.tt_target), len(prob.Ry)
    nf, npair, n = len(prob.work.floor_pos), len(prob.work.lo_pos), prob.x0.size
    edges = np.cumsum([0, 2 * ns + nt, nr, nf, npair, n])
    return dict(zip(("stages", "rows", "floor", "pairs", "prior"), (slice(a, b) for a, b in zip(edges, edges[1:]))))


def test_jacobian_matches_finite_differences(problem):
    """At the declared constants and at constants pushed into the floor and monotonicity hinges,
    the analytic Jacobian agrees with scipy's central differences of the residuals, block by
    block, wherever no hinge sits at its kink."""
    prog, prob = problem
    rng = np.random.default_rng(3)
    x0 = prog.initial_constants
    points = [x0, x0 * np.exp(rng.normal(0.0, 0.3, x0.size)), x0 * 0.05]  # the last one breaks the floor
    active = 0
    for heavier in (1.0, 900.0):
        prob.heavier = heavier
        for c in points:
            r, J = prob.residuals(c), prob.jacobian(c)
            assert r.shape == (J.shape[0],) and J.shape[1] == x0.size and np.isfinite(J).all()
            fd = approx_derivative(prob.residuals, c, method="3-point", rel_step=1e-7)
            h = 1e-6 * np.maximum(np.abs(c), 1e-3)
            near_kink = np.zeros(len(r), bool)
            for k in range(x0.size):  # a hinge that turns on or off within a step is not differentiable there
                step = np.zeros(x0.size)
                step[k] = h[k]
                near_kink |= (prob.residuals(c + step) == 0) != (prob.residuals(c - step) == 0)
            for name, sl in _blocks(prob).items():
                ok = ~near_kink[sl]
                scale = np.abs(J[sl][ok]).max(initial=0.0) + 1e-12
                np.testing.assert_allclose(J[sl][ok], fd[sl][ok], rtol=1e-4, atol=1e-5 * scale,
                                           err_msg=f"{name} rows, heavier {heavier}")
            active += int((r[_blocks(prob)["floor"]] > 0).sum())
    assert active > 0  # the hinges were exercised, not only the data rows


def test_invalid_predictions_get_the_penalty_and_no_slope(problem):
    """Constants that make predictions NaN or below 1 us: every residual stays finite (invalid
    step rows take INVALID_PENALTY, and their Jacobian rows are zero)."""
    prog, prob = problem
    c = prog.initial_constants.copy()
    c[:] = -1e3  # negative step times everywhere
    r, J = prob.residuals(c), prob.jacobian(c)
    assert np.isfinite(r).all() and np.isfinite(J).all()
    rows = _blocks(prob)["rows"]
    assert np.all(r[rows] == pytest.approx(prob.row_w * fitting.INVALID_PENALTY))
    assert not J[rows].any()


def test_native_handle_calls_the_same_compiled_code(problem):
    """`Program.compiled()` hands compiled callers the C wrapper address (evaluator.native): the
    values are those of the numba dispatcher, bit for bit, from compiled and Python callers,
    and the handle survives pickling (a worker or Ray actor receives programs that way)."""
    prog, prob = problem
    f = prog.compiled()
    X, c = prob.XA[:500], prog.initial_constants
    direct = predict_rows(f.dispatcher, X, c)
    assert np.array_equal(predict_rows(f, X, c), direct)
    assert f(X[7], c) == direct[7]
    p, J = predict_rows_grad(compiled_gradient(prog), X, c)
    assert np.array_equal(p, direct) and J.shape == (500, c.size)
    again = pickle.loads(pickle.dumps(f))
    assert np.array_equal(predict_rows(again, X, c), direct)
