"""Physical rules: hardware floor and monotonicity, on the real step rows and the extrapolation grid."""
from __future__ import annotations

import numpy as np
import pytest

from evaluator.components import COMPONENT_INDEX as CI
from evaluator.components import N_COMPONENTS, components_for_model_spread, components_matrix
from evaluator.physics import (CEILING, REL_TOL, ceiling_us, check_by_model, check_program, extrapolation_grid,
                               floor_residuals, floor_us, floor_violation, grid_rows, measured_read, model_grids,
                               monotone_residuals, monotonicity_violation)
from evaluator.program import parse_program
from evaluator.step_scoring import build_step_rows, predict_rows
from seeds import seed_sources
from evaluator.blis_models import BLACKBOX_SOURCE

BIG = 1e6  # 1 s: above every floor on the grid (and above the ceiling of most states: monotonicity
# is then checked on its own, `falls`)


def prog(body: str, params: str, consts: str = "") -> tuple:
    p = parse_program(f"{consts}\n\ndef predict_step_time({params}):\n    return {body}\n")
    return p.compiled(), p.initial_constants


def falls(f, c, G, read=None) -> str | None:
    """The monotonicity rule alone on a grid (`check_program` checks the floor and ceiling first)."""
    return monotonicity_violation(predict_rows(f, grid_rows(G), c), G, read)


@pytest.fixture(scope="module")
def grids(gt):
    return model_grids(gt)


def test_floor_is_max_of_compute_and_memory(gt):
    e = next(x for x in gt.experiments if x.model == "llama-2-70b")
    mv = e.model_vec(gt.hardware)[None, :]
    one = lambda v: np.array([float(v)])  # noqa: E731
    X = components_matrix(mv, one(2048), one(0), one(1), one(0), one(1), one(2048))
    compute = X[0, CI["t_prefill_gemm"]] + X[0, CI["t_prefill_attn"]] + X[0, CI["t_lm_head"]]
    assert floor_us(X)[0] == pytest.approx(compute)
    assert compute > 60_000  # a full 2048-token chunk of a 70B model at peak: > 60 ms on 4 GPUs
    X = components_matrix(mv, one(0), one(128), one(0), one(128), one(128), one(5e5))
    assert floor_us(X)[0] == pytest.approx(X[0, CI["t_weights"]] + X[0, CI["t_decode_kv"]])


def test_real_cycles_sit_above_the_floor_pairwise(gt):
    """Single start-to-start deltas may dip below (async scheduling runs ahead of the GPU), but
    never more than a handful, and two consecutive cycles always cover both steps' floors."""
    steps = gt.steps
    n_below = n_rows = n_pairs = 0
    for model, rows in build_step_rows(gt).items():
        fl = floor_us(rows.X)
        t = rows.has_target
        n_rows += int(t.sum())
        n_below += int((rows.target_us[t] < fl[t]).sum())
        sid = steps[steps["model_key"] == model]["step_id"].to_numpy()
        same = rows.experiment[1:] == rows.experiment[:-1]
        nxt = same & (sid[1:] == sid[:-1] + 1) & t[:-1] & t[1:]
        pair = (rows.target_us[:-1] + rows.target_us[1:])[nxt] / (fl[:-1] + fl[1:])[nxt]
        n_pairs += len(pair)
        assert (pair >= 1.0).all(), f"{model}: consecutive cycles below the floor ({pair.min():.3f})"
        assert np.median(rows.target_us[t] / fl[t]) > 1.2
    assert n_rows > 1500 and n_pairs > 100
    assert n_below <= 0.005 * n_rows


def test_grid_covers_the_extrapolation_range(gt, grids):
    for e in gt.experiments:
        G = grids[e.model]
        X = grid_rows(G)
        P, D, K, B = X[:, CI["P"]], X[:, CI["D"]], X[:, CI["K"]], X[:, CI["B"]]
        n_p, n_d = X[:, CI["n_prefill"]], X[:, CI["n_decode"]]
        assert 300 <= len(X) <= 2000
        assert P.max() == e.max_batched_tokens and D.max() == e.max_num_seqs
        assert K.max() == e.kv_blocks * e.block_size
        assert ((P > 0) & (D > 0)).any()  # mixed steps
        # every state is one a server could hold
        assert (P + D <= e.max_batched_tokens).all() and (B <= e.max_num_seqs).all()
        assert (B >= n_p + n_d).all() and (n_d <= D).all() and ((P > 0) == (n_p > 0)).all()
        assert (K <= np.minimum(e.kv_blocks * e.block_size, B * 4096) + 1e-9).all()
        # each line steps upward, never downward
        for name in ("P", "D", "K", "n_decode", "B"):
            assert (np.diff(G[:, :, CI[name]], axis=1) >= 0).all()
        stepped = {tuple(n for n in ("P", "D", "K", "n_decode", "B") if G[i, -1, CI[n]] > G[i, 0, CI[n]])
                   for i in range(len(G))}
        assert {("P",), ("D",), ("K",), ("n_decode",), ("B",), ("D", "n_decode")} <= stepped


def test_grid_is_recomputed_from_the_aggregates(gt):
    e = gt.experiments[0]
    G = grid_rows(extrapolation_grid(e, e.model_vec(gt.hardware)))
    v = e.model_vec(gt.hardware)
    mv = np.ascontiguousarray(np.broadcast_to(v, (len(G), len(v))))
    c = lambda n: np.ascontiguousarray(G[:, CI[n]])  # noqa: E731
    again = components_for_model_spread(np.ascontiguousarray(v), c("P"), c("D"), c("n_prefill"), c("n_decode"),
                                        c("B"), c("K"), c("ctx_max"))
    np.testing.assert_array_equal(again, G)
    # off the ctx_max lines every decoding request holds the mean context (no spread)
    spread = G[:, CI["ctx_max"]] != np.where(G[:, CI["n_decode"]] > 0, G[:, CI["K"]] / np.maximum(G[:, CI["n_decode"]], 1), 0)
    plain = components_matrix(mv, c("P"), c("D"), c("n_prefill"), c("n_decode"), c("B"), c("K"))
    np.testing.assert_array_equal(plain[~spread], G[~spread])
    assert spread.any()


def test_a_wider_spread_of_contexts_making_a_step_faster_fails(grids):
    # above the floor (every floor term plus a positive one) and far below the ceiling, but the
    # last term shrinks as the longest context grows at a fixed KV held
    f, c = prog("t_weights + t_decode_kv + t_prefill_gemm + t_prefill_attn + t_decode_gemm + t_lm_head"
                " + t_decode_kv * t_decode_kv / (t_decode_kv_max + t_decode_kv + ONE)",
                "t_weights, t_decode_kv, t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_lm_head, t_decode_kv_max",
                "ONE = 1.0")
    for G in grids.values():
        why = check_program(f, c, None, G)
        assert why.startswith("gets faster with more work: ") and "+ctx_max" in why.split(" at ")[0], why


def _spread_amplifier(G, gain: float):
    """`t_step_measured / (1 + AMP * (1 + GROW * t_decode_spread))` (the shape a trace run
    handed over) with its constants set so the step at the grid's widest spread is `gain` times the kernels'."""
    s_max = float(grid_rows(G)[:, CI["t_decode_spread"]].max())
    a = -0.02
    b = ((1.0 / gain - 1.0) / a - 1.0) / s_max
    return prog("t_step_measured / (1 + AMP * (1 + GROW * t_decode_spread))", "t_step_measured, t_decode_spread",
                f"AMP = {a}\nGROW = {b}")


def test_a_pole_in_the_spread_is_above_the_ceiling(grids):
    """A program can grow with the spread, stay above the floor and never fall, and still predict
    a step of hours: near its pole. No step is predicted above CEILING x its floor."""
    read = measured_read(["t_step_measured"])  # the measured kernels' own falls are allowed
    for model, G in grids.items():
        f, c = _spread_amplifier(G, 1e4)
        assert falls(f, c, G, read) is None  # monotone: nothing but the ceiling stops it
        why = check_program(f, c, None, G, read)
        assert why.startswith(f"above {CEILING:g}x the hardware floor at P=0 D=") and "ctx_max=" in why, (model, why)
        assert "a pole or a runaway term" in why
        f, c = _spread_amplifier(G, 2.0)  # twice the kernels' time at the widest spread: allowed
        assert check_program(f, c, None, G, read) is None, model


def test_the_ceiling_is_ten_times_the_floor_with_all_kv_read(grids):
    G = grid_rows(grids["llama-2-70b"])
    top = ceiling_us(G)
    assert (top >= CEILING * floor_us(G) * (1 - 1e-12)).all()  # never below the floor's 10x
    kv_all = CEILING * (G[:, CI["t_weights"]] + G[:, CI["t_decode_kv"]])
    assert (top >= kv_all * (1 - 1e-12)).all() and (top > CEILING * floor_us(G)).any()  # B lines: all KV
    assert floor_violation(top * (1 - 1e-6), G) is None
    assert floor_violation(top * (1 + 1e-6), G).startswith(f"above {CEILING:g}x the hardware floor")


def test_physical_program_passes(grids):
    f, c = prog("OVERHEAD + t_weights + t_decode_kv + t_prefill_gemm + t_prefill_attn + t_decode_gemm + t_lm_head",
                "t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_decode_kv, t_weights, t_lm_head",
                "OVERHEAD = 1000.0")
    for G in grids.values():
        assert check_program(f, c, grid_rows(G), G) is None


def test_below_the_floor_somewhere_fails(grids):
    # fine for decode steps, far too fast for a full prefill chunk
    f, c = prog("OVERHEAD + t_weights + t_decode_kv + 0.1 * t_prefill_gemm",
                "t_prefill_gemm, t_decode_kv, t_weights", "OVERHEAD = 5000.0")
    why = check_program(f, c, None, grids["llama-2-70b"])
    assert why.startswith("below the hardware floor at P=")
    assert "us < floor" in why


def test_floor_on_probes_only(grids):
    f, c = prog("OVERHEAD + 0.5 * t_weights", "t_weights", "OVERHEAD = 0.0")
    G = grids["codellama-34b"]
    assert check_program(f, c, grid_rows(G)[:5], None).startswith("below the hardware floor")


@pytest.mark.parametrize("body,params,stepped", [
    ("BIG - P", "P", "+P"),
    ("BIG - D", "D", "+D"),
    ("BIG - 0.001 * K", "K", "+K"),
    ("BIG - n_decode", "n_decode", "n_decode"),
    ("BIG - B", "B", "+B"),
    ("BIG - 10 * t_decode_gemm", "t_decode_gemm", "+D"),
])
def test_faster_with_more_work_fails(grids, body, params, stepped):
    f, c = prog(body, params, f"BIG = {BIG}")
    for G in grids.values():
        why = falls(f, c, G)
        assert why.startswith("gets faster with more work: "), why
        assert stepped in why.split(" at ")[0]


def test_prefill_making_a_step_faster_fails(grids):
    f, c = prog("PREFILL_BASE if P > 0 else DECODE_BASE", "P",
                f"PREFILL_BASE = {BIG}\nDECODE_BASE = {BIG + 500}")
    why = falls(f, c, grids["llama-2-7b"])
    assert why.startswith("gets faster with more work: +P+n_prefill at P=0")


def test_more_prefill_requests_making_a_step_faster_fails(grids):
    """One more prefill request brings its tokens: a per-request discount that outgrows the
    cost of 16 more tokens is caught on the P+n_prefill lines (nowhere else on the grid)."""
    f, c = prog("BIG + t_prefill_gemm + t_weights - PER_PREFILL * n_prefill",
                "t_prefill_gemm, t_weights, n_prefill", f"BIG = {BIG}\nPER_PREFILL = 200.0")
    for G in grids.values():
        why = falls(f, c, G)
        assert why.startswith("gets faster with more work: +P+n_prefill"), why


def test_float_noise_is_tolerated():
    G = np.zeros((1, 2, N_COMPONENTS))
    G[0, 1, CI["D"]] = 1.0
    assert monotonicity_violation(np.array([BIG, BIG * (1 - REL_TOL / 10)]), G) is None
    assert monotonicity_violation(np.array([BIG, BIG * (1 - REL_TOL * 10)]), G) is not None


def test_non_finite_is_reported(grids):
    f, c = prog("sqrt(BIG - K)", "K", "BIG = 100000.0")
    why = check_program(f, c, None, grids["llama-2-70b"])
    assert why.startswith("non-finite prediction at ")


def test_issue_1870_program_is_not_monotone(grids):
    f, c = prog("OVERHEAD_2 - D if D > SPLIT_D else OVERHEAD + EFFICIENCY * (SCALE * D + C_T_DECODE_GEMM "
                "if t_prefill_gemm < SPLIT_T_DECODE_KV else B)", "t_prefill_gemm, D, B",
                "OVERHEAD_2 = 1000000.0\nSPLIT_D = 64.0\nOVERHEAD = 990000.0\nEFFICIENCY = 1.0\nSCALE = 20.0\n"
                "C_T_DECODE_GEMM = 100.0\nSPLIT_T_DECODE_KV = 1000000.0")
    for G in grids.values():
        pred = predict_rows(f, grid_rows(G), c)
        why = monotonicity_violation(pred, G)
        assert why is not None and "+D" in why.split(" at ")[0]


@pytest.mark.parametrize("name,ok", [("roofline", True), ("phase_split", True), ("linear_physics", True),
                                     ("blackbox", False), ("regime_switch", False)])
def test_shipped_seeds_with_initial_constants(grids, name, ok):
    p = parse_program(BLACKBOX_SOURCE if name == "blackbox" else seed_sources()[name])
    why = check_by_model(p.compiled(), {"*": p.initial_constants}, None, grids)
    assert (why is None) == ok, why
    if not ok:
        assert why.split(":")[0] in grids  # the reason names the model


def test_check_by_model_prefers_the_models_own_constants(grids):
    p = parse_program("OVERHEAD = 0.0\n\ndef predict_step_time(t_weights, t_decode_kv, t_prefill_gemm, "
                      "t_prefill_attn, t_decode_gemm, t_lm_head):\n    return OVERHEAD + t_weights + t_decode_kv"
                      " + t_prefill_gemm + t_prefill_attn + t_decode_gemm + t_lm_head\n")
    f = p.compiled()
    consts = {"*": np.array([0.0]), "mixtral-8x7b": np.array([-1e5])}
    why = check_by_model(f, consts, None, grids)
    assert why.startswith("mixtral-8x7b: below the hardware floor")


def test_soft_residuals_vanish_exactly_where_the_checks_pass(grids):
    G = grids["llama-2-70b"]
    X = grid_rows(G)
    fl = floor_us(X)
    for body, params, consts in [("OVERHEAD + 1.2 * max(t_weights + t_decode_kv, t_prefill_gemm + t_prefill_attn "
                                  "+ t_decode_gemm + t_lm_head)", "t_prefill_gemm, t_prefill_attn, t_decode_gemm, "
                                  "t_decode_kv, t_weights, t_lm_head", "OVERHEAD = 3000.0"),
                                 ("BIG - D", "D", f"BIG = {BIG}"),
                                 ("OVERHEAD + 0.5 * t_weights", "t_weights", "OVERHEAD = 0.0")]:
        f, c = prog(body, params, consts)
        pred = predict_rows(f, X, c)
        fr, mr = floor_residuals(pred, fl), monotone_residuals(pred, G.shape)
        assert (fr >= 0).all() and (mr >= 0).all()
        why = check_program(f, c, X, None)  # BIG - D is also above the ceiling: not a floor residual
        assert (fr.max() > 0) == (why is not None and why.startswith("below the hardware floor"))
        assert (mr.max() > REL_TOL) == (monotonicity_violation(pred, G) is not None)


def test_floor_report_names_the_closest_state_and_the_heaviest(grids):
    from evaluator.physics import floor_report
    G = grids["llama-2-70b"]
    f, c = prog("OVERHEAD + 1.5 * max(t_weights + t_decode_kv, t_prefill_gemm + t_prefill_attn + t_decode_gemm "
                "+ t_lm_head)", "t_prefill_gemm, t_prefill_attn, t_decode_gemm, t_decode_kv, t_weights, t_lm_head",
                "OVERHEAD = 0.0")
    line = floor_report(f, c, G)
    assert line.startswith("closest to the floor 1.50x at P=") and "(1.50x)" in line
    assert line.endswith("never faster with more work on the grid")
    f, c = prog(f"BIG - D", "D", f"BIG = {BIG}")
    assert "gets faster with more work: +D" in floor_report(f, c, G)
