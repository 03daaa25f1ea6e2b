"""Held-out figures fitted from several start points (evaluator.fit_starts, `evolve evaluate
--starts N`): seeded starts, start 0 the declared constants, and each regime's range."""
from __future__ import annotations

import json

import numpy as np
import pytest

from evaluator.data import load
from evaluator.evaluate import Evaluator
from evaluator.fit_starts import evaluate_starts, spread, start_points
from evaluator.program import parse_program
from seeds import seed_sources

TWO = "BASE = 2000.0\nSCALE = 1.2\n\n\ndef predict_step_time(t_step_measured, layers):\n    return SCALE * t_step_measured + BASE\n"


def test_start_points_are_seeded_multiples_of_the_declared_constants():
    p = parse_program(TWO)
    a, b = start_points(p, 4, seed=3), start_points(p, 4, seed=3)
    assert len(a) == 4 and all(np.array_equal(x, y) for x, y in zip(a, b))  # the same starts in any process
    assert np.array_equal(a[0], p.initial_constants)
    assert all((x > 0).all() and not np.allclose(x, a[0]) for x in a[1:])  # multiples keep the sign
    assert not np.allclose(start_points(p, 2, seed=4)[1], a[1])
    assert len(start_points(parse_program("def predict_step_time(t_weights):\n    return t_weights\n"), 5)) == 1


def test_spread_is_over_the_valid_starts_and_names_the_declared_figure():
    recs = [{"valid": True, "e2e_mean": 0.02, "regimes": {"long_e2e": 0.05, "lomo_e2e": 0.03}},
            {"valid": True, "e2e_mean": 0.03, "regimes": {"long_e2e": 0.20, "lomo_e2e": 1e9}},  # LOMO unscorable
            {"valid": False, "e2e_mean": None, "regimes": {}}]
    s = spread(recs)
    assert s["long_e2e"] == {"declared": 0.05, "low": 0.05, "high": 0.20, "n_valid": 2}
    assert s["lomo_e2e"] == {"declared": 0.03, "low": 0.03, "high": 0.03, "n_valid": 1}
    assert s["e2e_mean"]["high"] == 0.03


def test_each_start_is_a_whole_evaluation_and_start_zero_is_the_plain_one():
    ev = Evaluator(load(None))
    p = parse_program(TWO)
    plain = ev.evaluate(p, heldout=("model",))
    recs = evaluate_starts(ev, p, 3, heldout=("model",))
    assert [r["start"] for r in recs] == [0, 1, 2]
    assert recs[0]["regimes"]["lomo_e2e"] == plain.objectives["lomo_e2e"]
    assert recs[0]["start_constants"] == {"BASE": 2000.0, "SCALE": 1.2}
    assert all(r["valid"] and set(r["regimes"]) >= {"lomo_e2e"} for r in recs)
    # handed the plain evaluation, start 0 is not evaluated again and reads the same
    again = evaluate_starts(ev, p, 1, heldout=("model",), first=plain)
    assert again[0]["regimes"] == recs[0]["regimes"]


def test_cli_evaluate_starts_strict_json_and_table(capsys, tmp_path):
    from evolve.cli import main as cli_main
    f = tmp_path / "p.py"
    f.write_text(seed_sources()["measured_per_layer"])
    assert cli_main(["evaluate", str(f), "--holdout", "model", "--starts", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    got = out["fit_starts"]
    assert len(got["records"]) == 2 and got["spread"]["lomo_e2e"]["n_valid"] == 2
    assert got["spread"]["lomo_e2e"]["declared"] == pytest.approx(out["objectives"]["lomo_e2e"])
    # the held-out experiments beyond 10%, from the rows it prints (evaluator.holdout.misses)
    by_exp = {}
    for r in out["holdout"]["model"]["rows"]:
        if r["e2e_err"] is not None:
            by_exp.setdefault((r["model"], r["workload"]), []).append(r["e2e_err"])
    beyond = {k for k, v in by_exp.items() if sum(v) / len(v) > 0.10}
    assert {(m["model"], m["workload"]) for m in out["misses"] if m["kind"] == "model"} == beyond
    assert cli_main(["evaluate", str(f), "--holdout", "model", "--starts", "2"]) == 0
    assert "Fitted from 2 starts" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli_main(["evaluate", str(f), "--starts", "0"])
