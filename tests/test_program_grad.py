"""The generated derivative kernel (evaluator.program_grad): the fit's Jacobian comes from it.

Its value must be the compiled program's, bit for bit (the fit mixes the two), and its
derivatives must be the program's: checked against central differences wherever the program
is smooth around the point, on every seed, on a program using every construct the validator
admits, and on a sample of offline mutations."""
from __future__ import annotations

import math

import numpy as np
import pytest

from evaluator.components import COMPONENT_INDEX, N_COMPONENTS
from evaluator.program import parse_program
from evaluator.program_grad import compiled_gradient, gradient_source
from evaluator.step_scoring import predict_rows_grad
from evaluator.objectives import Caps
from seeds import seed_sources
from mutation_sample import chained_sample

EVERY_CONSTRUCT = """
A = 2.0
H = 0.5
C = 3.0
E = 1.3
KK = 10.0


def predict_step_time(P, D, t_weights, t_decode_kv):
    x = A * P + H * D
    if x > KK and not (D < 1.0 or P > 1e6):
        y = max(x, C * t_weights, t_decode_kv / H) - min(A, E * 0.5)
        x = x + y / (1.0 + abs(C - KK))
    else:
        y = sqrt(A * A + D) + log(1.0 + H * P)
    z = exp(-H) * pow(t_weights + 1.0, E) + abs(x if P >= D else -y) ** 1.5
    return KK + x + y + z / C + (t_decode_kv + 2.0) ** H
"""


def _program(src):
    return parse_program(src)


def _central(f, x, c, j, h):
    up, dn = c.copy(), c.copy()
    up[j] += h
    dn[j] -= h
    return (f(x, up) - f(x, dn)) / (2 * h), (f(x, up) - f(x, c)) / h, (f(x, c) - f(x, dn)) / h


def _grad_at(prog, x, c):
    """(value, derivatives) at one point, through the compiled rows kernel the fit uses."""
    p, J = predict_rows_grad(compiled_gradient(prog), np.ascontiguousarray(x[None, :]), np.ascontiguousarray(c))
    return p[0], J[0]


def _check(prog, xs, rtol=1e-5):
    """Values bit-identical to Program.compiled(); derivatives equal central differences where
    the forward and backward differences agree (no kink within the step). Returns the number
    of derivative entries compared."""
    f = prog.compiled()
    c = np.ascontiguousarray(prog.initial_constants)
    compared = 0
    for x in xs:
        v, out = _grad_at(prog, x, c)
        want = f(x, c)
        assert v == want or (math.isnan(v) and math.isnan(want)), (prog.source, v, want)
        if not math.isfinite(v):
            continue
        for j in range(c.size):
            h = 1e-6 * max(1.0, abs(c[j]))
            mid, fwd, bwd = _central(f, x, c, j, h)
            if not all(map(math.isfinite, (mid, fwd, bwd))) or not math.isclose(fwd, bwd, rel_tol=1e-3, abs_tol=1e-6 * max(1.0, abs(v))):
                continue  # a kink (max, abs, a branch) or an overflow within the step
            assert out[j] == pytest.approx(mid, rel=rtol, abs=1e-6 * max(1.0, abs(v))), (prog.source, j, out[j], mid)
            compared += 1
    return compared


def _points(n, seed, lo=0.5, hi=3000.0):
    rng = np.random.default_rng(seed)
    return [np.ascontiguousarray(rng.uniform(lo, hi, N_COMPONENTS)) for _ in range(n)]


def test_every_construct_values_and_derivatives():
    prog = _program(EVERY_CONSTRUCT)
    assert _check(prog, _points(40, 1, 0.5, 40.0)) > 150
    # the same on points that take the other branches
    assert _check(prog, _points(40, 2, 0.01, 2.0)) > 100


def test_a_known_derivative_exactly():
    prog = parse_program("S = 2.0\nE = 1.5\n\n\ndef predict_step_time(P):\n    return S * P ** E\n")
    x = np.full(N_COMPONENTS, 9.0)
    v, out = _grad_at(prog, x, np.array([2.0, 1.5]))
    assert v == 54.0
    assert out[0] == pytest.approx(27.0, rel=1e-15)
    assert out[1] == pytest.approx(54.0 * math.log(9.0), rel=1e-15)


def test_max_follows_the_argument_it_returns():
    prog = parse_program("A = 1.0\nG = 1.0\n\n\ndef predict_step_time(P, D):\n    return max(A * P, G * D)\n")
    x = np.zeros(N_COMPONENTS)
    x[COMPONENT_INDEX["P"]], x[COMPONENT_INDEX["D"]] = 5.0, 3.0
    assert list(_grad_at(prog, x, np.array([1.0, 1.0]))[1]) == [5.0, 0.0]
    assert list(_grad_at(prog, x, np.array([0.1, 1.0]))[1]) == [0.0, 3.0]


def test_seeds_and_a_mutated_sample():
    seeds = [parse_program(s) for s in seed_sources().values()]
    sample = seeds + chained_sample(seeds, 9, 12, 11, Caps(30, 3, 10))
    compared = sum(_check(p, _points(4, k)) for k, p in enumerate(sample))
    assert compared > 100


def test_rows_kernel_gives_values_and_jacobian():
    prog = _program(EVERY_CONSTRUCT)
    X = np.ascontiguousarray(np.vstack(_points(50, 3, 0.5, 40.0)))
    c = np.ascontiguousarray(prog.initial_constants)
    p, J = predict_rows_grad(compiled_gradient(prog), X, c)
    f = prog.compiled()
    for i in range(len(X)):
        assert p[i] == f(X[i], c)
        v, out = _grad_at(prog, X[i], c)  # one row alone gives the same row
        assert v == p[i] and np.array_equal(J[i], out)


def test_source_only_differentiates_what_depends_on_a_constant():
    prog = parse_program("A = 1.0\n\n\ndef predict_step_time(P, D):\n    u = P * D + sqrt(P)\n    return A * u\n")
    src = gradient_source(prog)
    assert "_d_u" not in src  # u reads no constant: no derivative code for it
    assert "_g[0] = u" in src
