"""benchmarks/schedule_time.py: vLLM's schedule() duration against the blocks held and the cycle.

Its figures go into issue 29's notes (the scheduler call lasts as long as the step on the long
runs of codellama and mixtral), so the binning is checked on rows worked out by hand and the
per-run ratio on the real data against the per-request definition of the time per token.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("schedule_time", ROOT / "benchmarks" / "schedule_time.py")
st = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(st)


def test_bins_worked_out_by_hand():
    # 1000 blocks, four steps: 100 and 400 held (bin 0-500), 1800 held (1500-2000, no cycle)
    rows = pd.DataFrame({"experiment_id": ["x"] * 4, "kv_blocks_total_gpu": [1000 + 1000] * 4,
                         "kv_blocks_free_gpu": [1900, 1600, 200, 200], "duration_us": [100, 300, 5000, 7000],
                         "next_step_start_delta_us": [15000.0, 17000.0, np.nan, np.nan],
                         "running_depth": [4, 8, 100, 120]})
    out = st.by_blocks_held(rows)
    assert [(r["blocks_lo"], r["blocks_hi"], r["n"]) for r in out] == [(0, 500, 2), (1500, 2000, 2)]
    assert out[0]["sched_ms"] == pytest.approx(0.2) and out[0]["cycle_ms"] == pytest.approx(16.0)
    assert out[1]["sched_ms"] == pytest.approx(6.0) and out[1]["cycle_ms"] is None  # strict JSON: no NaN
    json.dumps(out, allow_nan=False)


def test_reasoning_runs_against_their_time_per_token(data_dir, capsys):
    assert st.main(["--data", str(data_dir), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    runs = {(r["model"], r["workload"]): r for r in got["per_experiment"]}
    assert len(runs) == 16
    req = pd.read_parquet(data_dir / "requests" / "requests.parquet")
    for (model, workload), r in runs.items():
        ok = req[(req.experiment_id == r["experiment"]) & ~req.has_error]
        out_len = json.loads((data_dir / "experiments" / r["experiment"] / "profile.yaml").read_text())
        n = out_len["data"]["shared_prefix"]["output_len"]
        tau = float((ok.e2e_s - ok.ttft_s).sum() / (len(ok) * (n - 1))) * 1e3  # DESIGN section 1
        assert r["per_token_ms"] == pytest.approx(tau, rel=1e-6), (model, workload)
        assert r["ratio"] == pytest.approx(r["sched_ms"] / tau)
    # the finding the notes quote: the call is as long as the step on codellama's reasoning run
    assert runs[("codellama-34b", "reasoning")]["ratio"] > 0.9
    assert max(r["ratio"] for (m, w), r in runs.items() if w != "reasoning") < 0.5
