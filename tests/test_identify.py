"""Constant folding and identifiability: redundant constants are merged or reported, never fitted blindly."""
from __future__ import annotations

import numpy as np
import pytest

from evaluator.components import COMPONENT_INDEX as CI
from evaluator.components import N_COMPONENTS
from evaluator.identify import fold_constants, program_identifiability, threshold_constants
from evaluator.program import parse_program
from evaluator.step_scoring import build_step_rows


def rows(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = np.zeros((n, N_COMPONENTS))
    X[:, CI["P"]] = rng.integers(0, 300, n)
    X[:, CI["D"]] = rng.integers(1, 128, n)
    X[:, CI["B"]] = X[:, CI["D"]] + rng.integers(0, 4, n)
    X[:, CI["t_weights"]] = 5000.0
    return X


def same_predictions(a, b, X):
    fa, fb = a.python_function(), b.python_function()
    pa = np.array([fa(x, a.initial_constants) for x in X])
    pb = np.array([fb(x, b.initial_constants) for x in X])
    np.testing.assert_allclose(pb, pa, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("src,removed,kept,value", [
    ("EFFICIENCY = 1.5\nSCALE = 2.0\nOVERHEAD = 100.0\n\ndef predict_step_time(D):\n"
     "    return OVERHEAD + EFFICIENCY * SCALE * D\n", ["SCALE"], "EFFICIENCY", 3.0),
    ("A = 1.0\nBB = 2.0\n\ndef predict_step_time(D):\n    return A + D + BB\n", ["BB"], "A", 3.0),
    ("A = 10.0\nBB = 1.0\n\ndef predict_step_time(D):\n    return A - (D - BB)\n", ["BB"], "A", 11.0),
    ("A = 2.0\nBB = 4.0\n\ndef predict_step_time(D):\n    x = D / A / BB * 3\n    return x + 1000.0\n",
     ["BB"], "A", 8.0 / 3.0),
    ("E = 2.0\nS = 3.0\nC = 5.0\nF = 7.0\nSPLIT = 100.0\n\ndef predict_step_time(D, P):\n"
     "    return E * (S * D + C if P < SPLIT else F * P)\n", ["E"], "S", 6.0),
    ("A = 10.0\nBB = 1.0\nC = 2.0\n\ndef predict_step_time(D, P):\n    return A + max(BB + D, C + P)\n",
     ["A"], "BB", 11.0),
    # through a local read once: `decode = EFF * D` ... `SCALE * decode`
    ("EFF = 2.0\nSCALE = 3.0\nOVERHEAD = 1.0\n\ndef predict_step_time(D):\n    decode = EFF * D\n"
     "    return OVERHEAD + SCALE * decode\n", ["SCALE"], "EFF", 6.0),
])
def test_folds_products_and_sums(src, removed, kept, value):
    p = parse_program(src)
    fo = fold_constants(p)
    assert fo.removed == removed
    assert fo.program.constants[kept] == pytest.approx(value)
    assert kept in fo.merged
    assert fo.program.complexity.total < p.complexity.total
    same_predictions(p, fo.program, rows())


def test_efficiency_times_scale_folds_and_says_so():
    p = parse_program("EFFICIENCY = 1.5\nSCALE = 2.0\n\ndef predict_step_time(D, t_weights):\n"
                      "    return t_weights + EFFICIENCY * SCALE * D\n")
    fo = fold_constants(p)
    assert fo.merged == {"EFFICIENCY": "EFFICIENCY * SCALE"}
    assert list(fo.program.constants) == ["EFFICIENCY"]


@pytest.mark.parametrize("src", [
    # a constant used twice carries information of its own
    "A = 2.0\nS = 3.0\n\ndef predict_step_time(D, P):\n    return A * S * D + A * P\n",
    # a branch without its own constant pins the scale (issue #1870's else branch: B)
    "E = 2.0\nS = 3.0\nSPLIT = 10.0\n\ndef predict_step_time(D, B):\n    return E * (S * D if D < SPLIT else B)\n",
    # a local read twice: the scale is not the local's alone
    "EFF = 2.0\nSCALE = 3.0\n\ndef predict_step_time(D):\n    x = EFF * D\n    return SCALE * x + x\n",
    # max does not commute with a scale of unknown sign
    "E = 2.0\nS = 3.0\nF = 1.0\n\ndef predict_step_time(D, P):\n    return E * max(S * D, F * P)\n",
])
def test_leaves_identifiable_constants_alone(src):
    fo = fold_constants(parse_program(src))
    assert not fo.changed and fo.program.source == src


@pytest.fixture(scope="module")
def rows_70b(gt):
    """llama-2-70b's real step rows that run the model (P + D > 0)."""
    X = build_step_rows(gt)["llama-2-70b"].X
    return np.ascontiguousarray(X[X[:, CI["P"]] + X[:, CI["D"]] > 0])


def test_dense_weights_next_to_overhead_are_not_pinned(rows_70b):
    """t_weights of a dense model is the same on every row: only OVERHEAD + C_W * t_weights is pinned."""
    X = rows_70b
    assert np.ptp(X[:, CI["t_weights"]]) == 0.0
    p = parse_program("OVERHEAD = 15000.0\nC_W = 1.2\nC_KV = 1.5\n\n"
                      "def predict_step_time(t_weights, t_decode_kv):\n"
                      "    return OVERHEAD + C_W * t_weights + C_KV * t_decode_kv\n")
    r = program_identifiability(p, p.initial_constants, X)
    by = {c.name: c for c in r.constants}
    assert r.rank == 2 and r.n_constants == 3
    assert not by["OVERHEAD"].pinned and not by["C_W"].pinned
    assert by["OVERHEAD"].partners == ["C_W"] and by["C_W"].partners == ["OVERHEAD"]
    assert by["C_KV"].pinned and np.isfinite(by["C_KV"].rel_se)
    assert "OVERHEAD" in r.summary() and "C_KV" not in r.summary()


def test_all_pinned_when_components_vary(rows_70b):
    X = rows_70b
    p = parse_program("OVERHEAD = 15000.0\nC_KV = 1.5\nC_B = 10.0\n\n"
                      "def predict_step_time(t_decode_kv, t_prefill_gemm, B):\n"
                      "    return OVERHEAD + C_KV * t_decode_kv + C_B * B + t_prefill_gemm\n")
    r = program_identifiability(p, p.initial_constants, X)
    assert r.unpinned() == [] and r.rank == 3
    assert r.summary().startswith("all 3 constants pinned")


def test_dead_branch_and_far_threshold_are_reported():
    p = parse_program("OVERHEAD = 100.0\nSLOPE = 2.0\nOTHER = 5.0\nSPLIT = 100000.0\n\n"
                      "def predict_step_time(D):\n    return OVERHEAD + SLOPE * D if D < SPLIT else OTHER * D\n")
    assert threshold_constants(p) == ["SPLIT"]
    r = program_identifiability(p, p.initial_constants, rows())
    by = {c.name: c for c in r.constants}
    assert by["OVERHEAD"].pinned and by["SLOPE"].pinned
    assert not by["OTHER"].pinned and by["OTHER"].partners == []
    assert by["SPLIT"].threshold and not by["SPLIT"].pinned


def test_threshold_inside_the_data_is_pinned():
    p = parse_program("LO = 100.0\nHI = 200.0\nSPLIT = 64.0\n\n"
                      "def predict_step_time(D):\n    return LO if D < SPLIT else HI\n")
    r = program_identifiability(p, p.initial_constants, rows())
    assert all(c.pinned for c in r.constants)


def test_judge_reports_constants_the_data_cannot_pin(evaluator):
    """Two coefficients of the same component trade off exactly: the evaluation stores that
    neither is pinned, per model, and `show` prints it."""
    from evolve.views.tables import identifiability_lines
    src = ("OVERHEAD = 5000.0\nA = 0.6\nC = 0.6\n\n"
           "def predict_step_time(t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_decode_kv, t_weights, t_lm_head):\n"
           "    return (OVERHEAD + A * t_weights + C * t_weights + t_decode_kv + t_prefill_gemm + t_prefill_attn"
           " + t_decode_gemm + t_lm_head)\n")
    res = evaluator.evaluate(parse_program(src), refine=False)
    assert res.valid, res.error
    assert set(res.identifiability) == set(res.constants)
    for key, d in res.identifiability.items():
        assert {"A", "C"} <= set(d["unpinned"]) and d["rank"] < d["n_constants"] == 3, (key, d)
    lines = identifiability_lines(res.identifiability)
    assert len(lines) == len(res.constants) and all("A (trades off with" in ln for ln in lines)
    back = type(res).from_json(res.to_json())
    assert back.identifiability == res.identifiability
