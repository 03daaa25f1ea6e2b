"""benchmarks/cascade_tradeoff.py: the promotion rules are replayed on what a screen had.

Its figures are issue 31's measured trade-off; on 2026-11-28 they were wrong because the replay
dropped the failure objective from the screens (every screen then beat its cell's members by
their failure term), so the replay is checked on records worked out by hand.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from evaluator.objectives import in_sample_loss

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("cascade_tradeoff", ROOT / "benchmarks" / "cascade_tradeoff.py")
ct = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ct)

HELD = {"lowo_e2e": 0.02, "lomo_e2e": 0.05, "load_e2e": 0.03, "long_e2e": 0.1, "overload_fail": 0.3}


def _rec(i, op, e2e, fail):
    o = {"e2e_mean": e2e, "e2e_worst": 2 * e2e, "ttft_mean": 0.1, "itl_mean": 0.02, "step_mape": 0.1,
         "fail_mean": fail, "complexity": 5.0, **HELD}
    return {"id": i, "operator": op, "stage": "full", "objectives": o, "complexity": 5.0,
            "components": ["t_weights", "t_decode_kv"], "unpinned": False}


def test_the_screen_keeps_the_failure_objective_and_drops_the_held_out_ones():
    o = _rec(1, "seed", 0.05, 0.3)["objectives"]
    v = ct.screen_view(o)
    assert in_sample_loss(v) == in_sample_loss(o) and not set(HELD) & set(v)


def test_a_screen_worse_on_failures_does_not_improve_its_cell():
    """Same cell: the candidate's mean E2E is lower (0.04 < 0.05) but its failure error is 10
    points worse, so its in-sample loss is higher and the cell test refuses it (the old replay,
    blind to failures, let it through)."""
    recs = [_rec(1, "seed", 0.05, 0.30), _rec(2, "mutate", 0.04, 0.40), _rec(3, "mutate", 0.04, 0.20)]
    rule = ct.rules()["improves its cell only"]
    got = ct._replay_rule(recs, lambda st, o, r: rule(st, ct.screen_view(o), r), frontier={2, 3}, rec_id=3)
    assert got["full_evaluations"] == 2  # the seed and #3; #2 refused
    assert got["frontier_lost"] == 1 and got["recommended_lost"] is False
