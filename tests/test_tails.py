"""The judge scores the tails: per stage, E2E and TTFT at p90 and p99 next to the means."""
import math

import numpy as np

from evaluator.holdout import make_split
from evaluator.program import parse_program
from evaluator.scoring import TAILS
from seeds import seed_sources


def _scored_with_measured_tails(view, ev) -> list[dict]:
    """The rows scored on latency, each checked to carry the measured tails of its own
    selection of requests (its view's test part of the stage, the measured successes)."""
    scored = [r for r in ev.rows if r["e2e_err"] is not None]
    for r in scored:
        e = next(x for x in view.exps if x.id == r["experiment"])
        wl = view.wl[e.id]
        sel = view.part(e, "test") & (wl.stage == r["stage"]) & ~view.failed[e.id]
        for q in TAILS:
            assert r[f"meas_e2e_p{q}_s"] == float(np.percentile(wl.measured_e2e_s[sel], q))
            assert r[f"meas_ttft_p{q}_s"] == float(np.percentile(wl.measured_ttft_s[sel], q))
    return scored


def test_stage_rows_carry_the_tails_of_the_measured_successes(evaluator):
    ev = evaluator.evaluate(parse_program(seed_sources()["roofline"]), refine=False)
    assert ev.valid
    scored = _scored_with_measured_tails(evaluator, ev)
    assert scored
    for r in scored:
        for q in TAILS:
            assert r[f"pred_e2e_p{q}_s"] >= r[f"pred_ttft_p{q}_s"] > 0
            err = abs(r[f"pred_e2e_p{q}_s"] - r[f"meas_e2e_p{q}_s"]) / r[f"meas_e2e_p{q}_s"]
            assert math.isclose(r[f"e2e_p{q}_err"], err)
        assert r["pred_e2e_p99_s"] >= r["pred_e2e_p90_s"] and r["meas_e2e_p99_s"] >= r["meas_e2e_p90_s"]


def test_measured_tails_kept_per_selection_never_answer_for_another(evaluator):
    """`scoring._tails` keeps the measured percentiles with the workload (`Workload.derived`),
    by the requests selected: a held-out view selects every request of a stage where the
    in-sample view selects its test window, and each must get its own, in either order."""
    p = parse_program(seed_sources()["roofline"])
    view = evaluator.for_split(make_split(evaluator.all_exps, "load"))
    for v in (view, evaluator, view):
        assert _scored_with_measured_tails(v, v.evaluate(p, refine=False, heldout=False))
    wl = next(iter(view.wl.values()))
    assert len([k for k in wl.derived if k[0] == "tails"]) >= 2
