"""benchmarks/overload_timeline.py: the per-token time and the waiting queue it reads through a run.

The script's figures go into the closing notes of issue 29 (why an overloaded run's per-token
time is not a constant of the batch), so its counting is checked on a run worked out by hand,
and on the real data where it must agree with the per-request definition (DESIGN section 1).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("overload_timeline", ROOT / "benchmarks" / "overload_timeline.py")
tl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tl)


def test_a_run_worked_out_by_hand():
    # five requests, 300 s client timeout; #3 and #4 failed (no TTFT; #4's E2E left empty as
    # some traces leave it): they wait until they give up
    arrival = np.array([0.0, 10.0, 20.0, 30.0, 40.0])
    ttft = np.array([1.0, 5.0, 150.0, np.nan, np.nan])
    e2e = np.array([11.0, 25.0, 170.0, 300.0, np.nan])
    failed = np.array([False, False, False, True, True])
    gen = np.array([11, 21, 11, 11, 11])
    end = tl.last_first_token(arrival, ttft, failed)
    assert end == 170.0
    rows = tl.timeline(arrival, ttft, e2e, failed, gen, 100.0, end, timeout_s=300.0)
    assert [r["t_s"] for r in rows] == [0.0, 100.0, 200.0]
    # bin 0: #0 (10 s for 10 tokens: 1000 ms) and #1 (20 s for 20: 1000 ms) got their first token
    assert rows[0]["successes"] == 2 and rows[0]["per_token_ms"] == pytest.approx(1000.0)
    # at 50 s: #2 (first token at 170 s), #3 (gives up at 330 s) and #4 (at 340 s) wait
    assert rows[0]["waiting"] == 3
    # bin 100: #2, 20 s for 10 tokens; at 150 s the same three still wait
    assert rows[1]["successes"] == 1 and rows[1]["per_token_ms"] == pytest.approx(2000.0)
    assert rows[1]["waiting"] == 3
    # bin 200: nobody got a first token; at 250 s the two failed ones still wait
    assert rows[2]["successes"] == 0 and rows[2]["per_token_ms"] is None and rows[2]["waiting"] == 2


def test_on_the_real_data_the_bins_add_up_to_the_run():
    data = Path(os.environ.get("STEPEVOLVE_DATA", ROOT.parent / "shared" / "data"))
    if not (data / "requests" / "requests.parquet").exists():
        pytest.skip("no ground-truth directory")
    import pandas as pd
    r = pd.read_parquet(data / "requests" / "requests.parquet")
    g = r[r.experiment_id.str.contains("codellama-34b-tp2-reasoning")]
    arrival = (g.arrival_time_us.to_numpy() - g.arrival_time_us.min()) / 1e6
    failed = g.has_error.to_numpy()
    ttft, e2e = g.ttft_s.to_numpy(), g.e2e_s.to_numpy()
    gen = np.full(len(g), 1448)  # the profile's output_len (ignore_eos)
    rows = tl.timeline(arrival, ttft, e2e, failed, gen, 100.0, tl.last_first_token(arrival, ttft, failed), 300.0)
    assert sum(x["successes"] for x in rows) == int((~failed).sum())
    ok = ~failed
    per_tok = (e2e[ok] - ttft[ok]) / 1447 * 1e3
    weighted = sum(x["successes"] * x["per_token_ms"] for x in rows if x["successes"]) / ok.sum()
    assert weighted == pytest.approx(per_tok.mean(), rel=1e-9)
    sched = tl.scheduler_call_ms(data)
    assert len(sched) == 16 and all(v["median_ms"] > 0 for v in sched.values())
