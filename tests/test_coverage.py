"""Coverage statements (evaluator.coverage): what a program's constants saw, its held-out error
per regime and what it was never validated for; printed by show, written into the Go header."""
from __future__ import annotations

import json
import math

from evaluator.coverage import FORM_CAVEAT, coverage, coverage_lines
from evaluator.data import load

REGIMES = {"lowo_e2e": 0.024, "lomo_e2e": 0.089, "load_e2e": 0.043, "long_e2e": 0.167, "overload_fail": math.inf}


def test_coverage_of_the_embedded_default():
    gt = load(None)
    cov = coverage(gt, {"e2e_mean": 0.03, **REGIMES})
    assert set(cov["fitted_on"]["models"]) == {"codellama-34b", "llama-2-70b", "llama-2-7b", "mixtral-8x7b"}
    assert cov["fitted_on"]["models"]["llama-2-70b"] == {"tp": [4]}
    assert cov["fitted_on"]["server_limits"]["max_num_seqs"] == [128]
    # the reasoning workload's 100 + 934 + 1,448 tokens is the longest request seen
    assert cov["ranges"]["request_context_tokens"][1] == 2482 and cov["ranges"]["rate_req_s"] == [4.0, 20.0]
    assert cov["regimes"] == {**{k: v for k, v in REGIMES.items() if math.isfinite(v)}, "overload_fail": None}
    gaps = " | ".join(cov["not_validated_for"])
    assert "requests beyond 2,482 tokens" in gaps and "loads above 20 req/s" in gaps
    assert "llama-2-70b TP4" in gaps and "max_num_batched_tokens 2048" in gaps
    # held-out regimes scored: the statement says they held out the constants, not the form
    assert "the search chose the form seeing every regime" in gaps
    assert FORM_CAVEAT not in coverage(gt, {"e2e_mean": 0.03})["not_validated_for"]  # no regime, no claim
    json.dumps(cov, allow_nan=False)  # strict JSON: a regime that could not be scored is null
    lines = coverage_lines(cov)
    assert lines[0].startswith("Fitted on: 16 experiments") and lines[-1].startswith("Not validated for: ")
    assert "long-decode error 16.7%" in lines[2] and "overload failures —" in lines[2]


def test_short_data_says_what_it_never_saw():
    gt = load(None)
    gt.experiments = [e for e in gt.experiments if e.workload != "reasoning"]
    cov = coverage(gt, {k: v for k, v in REGIMES.items() if k not in ("long_e2e", "overload_fail")})
    gaps = " | ".join(cov["not_validated_for"])
    assert "overload (no measured request failed)" in gaps and "no long-decode split" in gaps
    assert cov["ranges"]["request_context_tokens"][1] == 1001


def test_the_go_header_carries_the_coverage():
    from evaluator.program import parse_program
    from go_emit.emit import emit_go
    gt = load(None)
    e = gt.experiments[0]
    prog = parse_program("A = 1000.0\n\ndef predict_step_time(t_weights):\n    return A + t_weights\n")
    ovh = {"queueing_us": 0.0, "queueing_per_input_token_us": 0.0, "output_token_us": 0.0, "post_decode_us": 0.0}
    code = emit_go(prog, {e.model: [1000.0]}, {e.model: e.model_vec(gt.hardware)}, {e.model: ovh},
                   coverage=coverage_lines(coverage(gt, REGIMES)))
    head = code.split("package ", 1)[0]
    assert "// Coverage:" in head and "//   Not validated for: models other than" in head


def _row(model, workload, stage, e2e, itl=0.01, meas_fail=0.0, pred_fail=0.0):
    return {"model": model, "workload": workload, "stage": stage, "e2e_err": e2e, "itl_err": itl,
            "meas_fail": meas_fail, "pred_fail": pred_fail, "fail_err_pts": 100 * abs(pred_fail - meas_fail)}


def test_coverage_names_the_held_out_misses_the_regime_means_hide():
    """A held-out experiment beyond 10%, an overloaded stage off by more than 5 points and a split
    that could not be scored are each named, though the regime means stay small; a program
    without any says "none"; a record without held-out blocks has no such line."""
    gt = load(None)
    blocks = {
        "workload": {"rows": [_row("a", "general", 0, 0.02), _row("a", "general", 1, 0.03)], "errors": {}},
        # the mean of a model's LOMO is 6%, one of its experiments 15% off
        "model": {"rows": [_row("b", "general", 0, 0.03), _row("b", "codegen", 0, 0.15), _row("b", "roleplay", 0, 0.0)],
                  "errors": {"model:c": "floor broken"}},
        # an overloaded long stage is ranked per output token (4%: no miss on latency) and its
        # failed fraction is 30 points off; another within 5 points is no miss
        "long": {"rows": [_row("b", "reasoning", 0, 0.5, itl=0.04, meas_fail=0.69, pred_fail=0.39),
                          _row("a", "reasoning", 0, 0.5, itl=0.12, meas_fail=0.33, pred_fail=0.30)], "errors": {}},
    }
    cov = coverage(gt, {"e2e_mean": 0.03, **REGIMES}, {"evaluation": {"holdout": blocks}})
    found = {(m["kind"], m.get("model"), m.get("workload"), m["measure"]) for m in cov["misses"]}
    assert found == {("model", "b", "codegen", "E2E"), ("long", "a", "reasoning", "per-token"),
                     ("overload", "b", "reasoning", "failed"), ("model", None, None, "not scored")}
    json.dumps(cov, allow_nan=False)
    line = next(ln for ln in coverage_lines(cov) if ln.startswith("Held-out misses"))
    assert line.startswith("Held-out misses (beyond 10% or 5 points): ")
    assert "LOMO b codegen E2E 15.0% off" in line and "long decode a reasoning per-token 12.0% off" in line
    assert "overload b reasoning 69.0% of requests failed, 39.0% simulated" in line
    assert "LOMO model:c not scored (floor broken)" in line and "LOWO" not in line
    # a prediction that blew up is a miss with a null error (strict JSON); a row stored by an
    # older version without its names is skipped, not a traceback
    blown = {"load": {"rows": [_row("a", "general", 1, math.inf), {"e2e_err": 0.5}], "errors": {}}}
    cov = coverage(gt, REGIMES, {"evaluation": {"holdout": blown}})
    assert cov["misses"] == [{"kind": "load", "model": "a", "workload": "general", "measure": "E2E", "error": None}]
    json.dumps(cov, allow_nan=False)
    assert "high load a general E2E off without bound" in " ".join(coverage_lines(cov))
    clean = {k: {"rows": [r for r in b["rows"] if r["workload"] == "general"], "errors": {}} for k, b in blocks.items()}
    assert "Held-out misses (beyond 10% or 5 points): none" in coverage_lines(
        coverage(gt, REGIMES, {"evaluation": {"holdout": clean}}))
    assert not any(ln.startswith("Held-out misses") for ln in coverage_lines(coverage(gt, REGIMES)))
