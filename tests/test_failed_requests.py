"""Failed requests: the reader keeps them, the simulator times requests out, the judge scores
the failure fraction (docs/failed_requests.md). Expected figures are worked out by hand in
tests/failed_fixture.py."""
import math

import numpy as np
import pandas as pd
import pytest

from evaluator.data import DataError, load_ground_truth
from evaluator.evaluate import Evaluator
from evaluator.program import parse_program
from evaluator.simulator import Workload, outcomes_by_stage, simulate
from evaluator.workload import trace_workload
from failed_fixture import CONST_PROGRAM, EXP, MODEL, N_OK, N_REQ, POOL, STEP_US, overloaded_requests, prompt_of, \
    write_overloaded

MV = np.array([32, 4096, 32, 32, 128, 11008, 0, 0, 32000, 1, 989.5e12, 3.35e12, 450e9], float)
TIMEOUT_US = 300e6


def _wl(n, gap_us, prompt=32, gen=100, pid=None):
    arr = np.arange(n, dtype=np.float64) * gap_us
    return Workload(arr, np.full(n, prompt, np.int64), np.zeros(n, np.int64), np.full(n, gen, np.int64),
                    np.zeros(n, np.int64), prompt_id=pid, group_id=None if pid is None else np.zeros(n, np.int64),
                    system_prompt_len=16, timeout_us=TIMEOUT_US)


@pytest.fixture(scope="module")
def const():
    return parse_program(CONST_PROGRAM).compiled()


@pytest.mark.parametrize("lru", [False, True])
def test_overloaded_queue_times_out_as_worked_by_hand(const, lru):
    pid = np.arange(N_REQ, dtype=np.int64) % POOL if lru else None
    r = simulate(const, np.array([STEP_US]), MV, _wl(N_REQ, 1e6, pid=pid), 1000, max_seqs=1)
    assert r.ok and r.prefix_cache == ("lru" if lru else "always-hit")
    j = np.arange(N_REQ)
    assert list(np.flatnonzero(r.timed_out)) == list(range(N_OK, N_REQ))
    np.testing.assert_allclose(r.e2e_us[:N_OK], (9.0 * j[:N_OK] + 10.0) * 1e6)
    np.testing.assert_allclose(r.ttft_us[:N_OK], (9.0 * j[:N_OK] + 0.1) * 1e6)
    assert np.all(r.e2e_us[N_OK:] == TIMEOUT_US)  # what the client recorded
    assert outcomes_by_stage(r, _wl(N_REQ, 1e6)) == [{"stage": 0, "requests": N_REQ, "finished": N_OK,
                                                       "timed_out": N_REQ - N_OK}]


def test_timeouts_off_serves_everyone_late(const):
    r = simulate(const, np.array([STEP_US]), MV, _wl(N_REQ, 1e6), 1000, max_seqs=1, timeout_us=0)
    assert r.ok and not r.timed_out.any()
    np.testing.assert_allclose(r.e2e_us, (9.0 * np.arange(N_REQ) + 10.0) * 1e6)


def test_aborted_request_frees_its_kv_blocks(const):
    """Blocks for request 0 alone (4,000 steps = 400 s). Request 1 (2,000-token prompt: 125
    blocks) arrives at 280 s, when request 0 holds 177 of the 253 usable blocks, so it waits
    until the client gives up on request 0 at 300 s and its blocks come back; then one
    prefill step and 99 decode steps: done at 310 s, E2E 30 s. Without the blocks back it
    would wait and time out."""
    blocks = (4000 + 32 + 15) // 16 + 1  # one held back as vLLM's null block
    wl = Workload(np.array([0.0, 280e6]), np.array([32, 2000], np.int64), np.zeros(2, np.int64),
                  np.array([4000, 100], np.int64), np.zeros(2, np.int64), prompt_id=np.array([0, 1]),
                  group_id=np.array([-1, -1]), timeout_us=TIMEOUT_US)
    r = simulate(const, np.array([STEP_US]), MV, wl, blocks, max_seqs=2, block=16)
    assert r.ok
    assert list(r.timed_out) == [True, False]
    assert r.ttft_us[1] == pytest.approx(20.1e6) and r.e2e_us[1] == pytest.approx(30e6)


def test_reader_keeps_failed_rows_with_recovered_prompts(tmp_path):
    gt = load_ground_truth(write_overloaded(tmp_path))
    e = gt.experiment(EXP)
    assert e.request_timeout_s == 300.0 and e.prompt_pool == POOL
    assert e.stages[0].n_requests == N_OK and e.stages[0].n_failed == N_REQ - N_OK
    assert e.stages[0].failed_fraction == pytest.approx(27 / 60)
    wl = trace_workload(e, gt)
    assert len(wl.arrival_us) == N_REQ  # failed requests stay in the load
    assert list(wl.prompt_len) == [prompt_of(j) for j in range(N_REQ)]  # slot j % 10's measured prompt
    assert np.all(wl.gen_len == 100)  # the profile's output_len
    assert list(np.flatnonzero(wl.measured_failed)) == list(range(N_OK, N_REQ))
    assert np.isnan(wl.measured_e2e_s[N_OK:]).all() and wl.timeout_us == 300e6


def test_failed_prompt_falls_back_to_stage_mean_and_timeout_from_config(tmp_path):
    req = overloaded_requests()
    # slot 5's successes are gone: its failed requests take the stage's mean measured prompt
    req = req[~((req["request_index"] % POOL == 5) & ~req["has_error"])].reset_index(drop=True)
    gt = load_ground_truth(write_overloaded(tmp_path, req, timeout=120))
    e = gt.experiment(EXP)
    assert e.request_timeout_s == 120.0
    wl = trace_workload(e, gt)
    ok = ~req["has_error"].to_numpy()
    mean = req.loc[ok, "input_tokens"].mean()
    slot5 = (req["request_index"].to_numpy() % POOL == 5) & ~ok
    assert slot5.any() and np.all(wl.prompt_len[slot5] == round(mean))


def test_mixed_rows_partial_failures_are_kept(tmp_path):
    req = overloaded_requests()
    req.loc[40, ["input_tokens", "output_tokens"]] = [37, 12]  # failed after a partial reply
    gt = load_ground_truth(write_overloaded(tmp_path, req))
    wl = trace_workload(gt.experiment(EXP), gt)
    assert wl.prompt_len[40] == 37 and wl.gen_len[40] == 100 and wl.measured_failed[40]


@pytest.mark.parametrize("row, change, message", [
    (3, {"input_tokens": 0}, f"row 3 (experiment {EXP}): column 'input_tokens' "
     "must be >= 1 (a failed request has has_error true, input_tokens and output_tokens 0 and no ttft_s) (got 0)"),
    (45, {"output_tokens": 5}, f"row 45 (experiment {EXP}): column "
     "'input_tokens' must be >= 1 (a failed request has has_error true, input_tokens and output_tokens 0 and "
     "no ttft_s) (got 0)"),
    (45, {"ttft_s": 1.0}, f"row 45 (experiment {EXP}): column 'input_tokens' "
     "must be >= 1 (a failed request has has_error true, input_tokens and output_tokens 0 and no ttft_s) (got 0)"),
    (7, {"output_tokens": -1}, f"row 7 (experiment {EXP}): column "
     "'output_tokens' must be >= 0 (got -1)"),
    (8, {"arrival_time_us": -5}, f"row 8 (experiment {EXP}): column "
     "'arrival_time_us' must be >= 0 (got -5)"),
    (50, {"e2e_s": -1.0}, f"row 50 (experiment {EXP}): column 'e2e_s' "
     "must be >= 0 or missing for a failed request (got -1.0)"),
    (2, {"e2e_s": 1.0}, f"row 2 (experiment {EXP}): column 'e2e_s' "
     "must be >= ttft_s (e2e < ttft) (got 1.0)"),
])
def test_invalid_rows_get_one_exact_line(tmp_path, row, change, message):
    req = overloaded_requests()
    for k, v in change.items():
        req.loc[row, k] = v
    root = write_overloaded(tmp_path, req)
    with pytest.raises(DataError) as e:
        load_ground_truth(root)
    assert str(e.value) == f"{root / 'requests' / 'requests.parquet'}: {message}"


@pytest.fixture(scope="module")
def overloaded_gt(tmp_path_factory):
    return load_ground_truth(write_overloaded(tmp_path_factory.mktemp("overload")))


def _zero_overheads():
    return {MODEL: {"queueing_us": 0.0, "queueing_per_input_token_us": 0.0, "output_token_us": 0.0,
                           "post_decode_us": 0.0}}


def test_judge_scores_failure_fraction_and_successes(overloaded_gt):
    """All 60 requests reported (train_fraction 0): the fixed-step program reproduces the
    measurement, so the failure error is 0 points and E2E/TTFT over the 33 successes match."""
    ev = Evaluator(overloaded_gt, train_fraction=0.0)
    res = ev.evaluate(parse_program(CONST_PROGRAM), constants={MODEL: [STEP_US]},
                      overheads=_zero_overheads(), fit=False)
    assert res.valid, res.error
    (row,) = res.rows
    assert row["n_requests"] == N_REQ and row["n_failed_meas"] == N_REQ - N_OK
    assert row["finished"] == N_OK and row["timed_out"] == N_REQ - N_OK
    assert row["meas_fail"] == pytest.approx(0.45) and row["pred_fail"] == pytest.approx(0.45)
    assert row["fail_err_pts"] == pytest.approx(0.0, abs=1e-9)
    assert row["e2e_err"] < 1e-9 and row["ttft_err"] < 1e-9
    assert res.objectives["fail_mean"] == pytest.approx(0.0, abs=1e-9)
    from evaluator.objectives import IN_SAMPLE_ORDER, objective_vector
    assert len(objective_vector(res.objectives)) == len(IN_SAMPLE_ORDER) + 1  # ranked: the data has failures


def test_judge_failure_error_in_points_and_mostly_failed_stage(overloaded_gt):
    """A step twice as long serves each request in 20 s: j finishes at 20 (j + 1) s, E2E
    19 j + 20 <= 300 for j <= 14, so 15 finish and 45 time out (75%): 30 points off the
    measured 45%. With timeouts off nothing fails (45 points off)."""
    prog = parse_program(CONST_PROGRAM)
    ev = Evaluator(overloaded_gt, train_fraction=0.0)
    res = ev.evaluate(prog, constants={MODEL: [2 * STEP_US]}, overheads=_zero_overheads(), fit=False)
    (row,) = res.rows
    assert row["timed_out"] == 45 and row["fail_err_pts"] == pytest.approx(30.0)
    assert math.isfinite(row["e2e_err"])
    off = Evaluator(overloaded_gt, train_fraction=0.0, timeouts=False).evaluate(
        prog, constants={MODEL: [STEP_US]}, overheads=_zero_overheads(), fit=False)
    assert off.rows[0]["timed_out"] == 0 and off.rows[0]["fail_err_pts"] == pytest.approx(45.0)
    # the default split reports arrivals after 42 s: all measured failures -> latency not scored
    held = Evaluator(overloaded_gt).evaluate(prog, constants={MODEL: [STEP_US]},
                                             overheads=_zero_overheads(), fit=False)
    (row,) = held.rows
    assert row["meas_fail"] == 1.0 and row["e2e_err"] is None and row["fail_err_pts"] == pytest.approx(0.0)


def test_shared_data_failures_are_the_reasoning_runs_and_keep_their_fingerprint_fields(gt):
    """Of the 16 real experiments only the reasoning runs have failed rows (PROVENANCE: 7b
    4,068, 70b 1,600, mixtral 3,294, codellama 4), the stage counts agree with the rows, and
    the timeout (300 s, the client's default) stays out of the fingerprint at its default."""
    from evaluator.data import _plain
    failed = gt.requests.groupby("experiment_id")["has_error"].sum()
    by_exp = {e.id: e for e in gt.experiments}
    assert {k: int(v) for k, v in failed.items() if v} == {
        "20260217-170634-llama-2-7b-tp1-reasoning": 4068, "20260218-065057-llama-2-70b-hf-tp4-reasoning": 1600,
        "20260218-135247-mixtral-8x7b-v0-1-tp2-reasoning": 3294, "20260218-160939-codellama-34b-tp2-reasoning": 4}
    for e in gt.experiments:
        assert sum(s.n_failed for s in e.stages) == int(failed.get(e.id, 0))
        assert (e.workload == "reasoning") == bool(failed.get(e.id, 0))
    assert all(e.request_timeout_s == 300.0 for e in gt.experiments)
    d = _plain(by_exp["20260217-155451-llama-2-7b-tp1-codegen"])
    assert "request_timeout_s" not in d and all("n_failed" not in s for s in d["stages"])


def test_ingest_keeps_failed_requests_in_the_readers_form(tmp_path):
    """inference-perf lifecycle records of the overloaded run (failures: error set, no info)
    go through `ingest_request_lifecycle` and load as the same 60 requests, 27 failed."""
    import json

    from evaluator.ingest import ingest_request_lifecycle
    recs = []
    for r in overloaded_requests().itertuples():
        start = 1000.0 + r.arrival_time_us / 1e6
        if r.has_error:
            recs.append({"start_time": start, "end_time": start + r.e2e_s, "error": {"error_type": "TimeoutError"},
                         "info": None})
        else:
            first = start + r.ttft_s
            times = list(np.linspace(first, start + r.e2e_s, r.output_tokens))
            recs.append({"start_time": start, "end_time": start + r.e2e_s, "error": None,
                         "info": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                                  "output_token_times": times}})
    recs.append({"start_time": 1059.5, "end_time": 1359.5, "error": "timeout",
                 "info": {"input_tokens": 0, "output_tokens": 7}})  # counted tokens, but no prompt count
    p = tmp_path / "per_request_lifecycle_metrics.json"
    p.write_text(json.dumps(recs))
    df = ingest_request_lifecycle(p, EXP)
    assert df.attrs["ingest_stats"]["failed"] == N_REQ - N_OK + 1
    gt = load_ground_truth(write_overloaded(tmp_path / "gt", df))
    wl = trace_workload(gt.experiment(EXP), gt)
    assert len(wl.arrival_us) == N_REQ + 1 and wl.measured_failed.sum() == N_REQ - N_OK + 1
    assert list(wl.prompt_len[:N_REQ]) == [prompt_of(j) for j in range(N_REQ)]
    assert wl.prompt_len[N_REQ] == prompt_of(N_REQ)  # request 60: slot 0


def test_no_failure_objective_without_measured_failures(tmp_path):
    """The same run cut to its 33 successes: failure columns are reported (0 measured), but
    `fail_mean` is no objective, so the objective vector keeps its length."""
    from evaluator.objectives import IN_SAMPLE_ORDER, objective_vector
    req = overloaded_requests().iloc[:N_OK]
    gt = load_ground_truth(write_overloaded(tmp_path, req))
    ev = Evaluator(gt, train_fraction=0.0)
    assert not ev.has_failures
    res = ev.evaluate(parse_program(CONST_PROGRAM), constants={MODEL: [STEP_US]},
                      overheads=_zero_overheads(), fit=False)
    (row,) = res.rows
    assert row["meas_fail"] == 0.0 and row["pred_fail"] == 0.0 and row["timed_out"] == 0
    assert "fail_mean" not in res.objectives
    assert len(objective_vector(res.objectives)) == len(IN_SAMPLE_ORDER)


def test_cli_baselines_json_is_strict_and_bad_rows_are_one_line(tmp_path, capsys):
    import json

    from evolve.cli import main
    root = write_overloaded(tmp_path / "ok")
    assert main(["baselines", "--data", str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    got = {(r["baseline"], r["metric"]): r["value"] for r in out["records"] if r["stage"] == 0}
    assert got[("roofline", "meas_fail")] == 1.0  # the reported part (arrivals after 42 s) all failed
    assert got[("roofline", "e2e_err")] is None and got[("roofline", "fail_err_pts")] is not None
    req = overloaded_requests()
    req.loc[4, "input_tokens"] = 0
    bad = write_overloaded(tmp_path / "bad", req)
    with pytest.raises(SystemExit) as e:
        main(["baselines", "--data", str(bad)])
    msg = str(e.value.code)
    assert msg.startswith("error: ") and "row 4 " in msg and "'input_tokens'" in msg and "\n" not in msg


def test_spec_arrivals_send_what_the_client_sent():
    """Spec mode sends each stage's requests as inference-perf does: exactly int(rate x
    duration) of them, the last at the stage's end, gaps exponential (CV ~1), as the measured
    reasoning stages (4,800 in 1,200 s each); a truncated Poisson stream sent ~2% fewer."""
    from evaluator.data import load
    from evaluator.workload import client_arrivals, spec_workload
    t = client_arrivals(np.random.default_rng(3), 4.0, 1200.0)
    assert len(t) == 4800 and t[-1] == pytest.approx(1200.0) and (np.diff(t) > 0).all()
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)
    gt = load(None)
    for e in gt.experiments:
        wl = spec_workload(e, seed=0)
        for s in e.stages:
            assert (wl.stage == s.index).sum() == int(s.rate * s.duration_s + 1e-9), (e.id, s.index)


def test_overload_collapses_at_one_instant_as_measured(gt):
    """Every overloaded reasoning run failed as a congestion collapse: all requests sent before
    one instant succeeded, all after it failed (the queue's wait passed the client's 300 s less
    the decode time). The simulator's client and abort rules give the same shape, so a
    failed-fraction error is a service-rate error: fail = 1 - (300 s - decode) / (slope x T),
    slope = arrival / service rate - 1 (docs/failed_requests.md)."""
    from evaluator.replay import simulate_one
    req = gt.requests
    for eid in [e.id for e in gt.experiments if e.workload == "reasoning" and e.model != "codellama-34b"]:
        g = req[req["experiment_id"] == eid].sort_values("arrival_time_us")
        ok = ~g["has_error"].to_numpy(bool)
        assert 0.3 < 1 - ok.mean() < 0.9
        assert ok[: ok.sum()].all(), eid  # the successes are a prefix in send order
    ev = Evaluator(gt, holdout_objectives=False)
    e = next(x for x in ev.exps if x.workload == "reasoning" and x.model == "llama-2-70b")
    prog = parse_program("S = 1.0\n\ndef predict_step_time(t_step_measured):\n    return S * t_step_measured\n")
    r = simulate_one(ev, prog.compiled(), np.array([1.44]), e)
    order = np.argsort(ev.wl[e.id].arrival_us, kind="stable")
    ok = ~r.aborted[order]
    assert 0.2 < 1 - ok.mean() < 0.9
    first_fail = np.argmin(ok)
    assert ok[:first_fail].all() and not ok[first_fail:].any()
