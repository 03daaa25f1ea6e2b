"""The numba simulator: conservation laws, scheduling limits, no recompilation per predictor."""
import numpy as np
import pytest

from evaluator import simulator as S
from evaluator.simulator import Workload, simulate
from evaluator.program import parse_program

CONST = "C = 10000.0\ndef predict_step_time(P):\n    return C + 0 * P\n"


def _wl(n, gap_us, prompt=100, gen=10, cached=0):
    arr = np.arange(n, dtype=np.float64) * gap_us
    return Workload(arr, np.full(n, prompt, np.int64), np.full(n, cached, np.int64),
                    np.full(n, gen, np.int64), np.zeros(n, np.int64))


MV = np.array([32, 4096, 32, 32, 128, 11008, 0, 0, 32000, 1, 989.5e12, 3.35e12, 450e9], float)


def test_lone_request_timeline_is_exact():
    p = parse_program(CONST)
    r = simulate(p.compiled(), np.array([10000.0]), MV, _wl(1, 0, prompt=100, gen=10), 1000)
    assert r.ok
    # one step for the prefill (first token at its end), then 9 decode steps
    assert r.ttft_us[0] == 10000.0
    assert r.e2e_us[0] == 100000.0
    assert r.n_steps == 10


def test_chunked_prefill_respects_token_budget():
    p = parse_program(CONST)
    r = simulate(p.compiled(), np.array([10000.0]), MV, _wl(1, 0, prompt=5000, gen=2), 1000,
                 max_tokens=2048, record=True)
    assert r.ok
    assert list(r.states[:, 0]) == [2048, 2048, 904, 0]  # P per step
    assert r.ttft_us[0] == 30000.0


def test_max_num_seqs_and_queueing():
    p = parse_program(CONST)
    r = simulate(p.compiled(), np.array([10000.0]), MV, _wl(300, 0, prompt=10, gen=50), 100000,
                 max_seqs=128, record=True)
    assert r.ok
    assert r.states[:, 4].max() == 128
    assert np.all(r.e2e_us > 0)
    # requests beyond the first 128 had to wait for a slot
    assert r.ttft_us[200] > r.ttft_us[0]


def test_kv_exhaustion_preempts_and_still_finishes():
    p = parse_program(CONST)
    # 40 requests of 100+200 tokens need ~19 blocks each; 200 blocks force preemption
    r = simulate(p.compiled(), np.array([10000.0]), MV, _wl(40, 0, prompt=100, gen=200), 200)
    assert r.ok
    assert r.n_preempted > 0
    assert np.all(r.e2e_us >= r.ttft_us) and np.all(r.ttft_us > 0)


def test_prefix_cache_skips_prefill_work():
    p = parse_program("def predict_step_time(P):\n    return 1000 + P\n")
    a = simulate(p.compiled(), np.zeros(0), MV, _wl(1, 0, prompt=1000, gen=1), 1000)
    b = simulate(p.compiled(), np.zeros(0), MV, _wl(1, 0, prompt=1000, gen=1, cached=992), 1000)
    assert a.ttft_us[0] == 2000.0 and b.ttft_us[0] == 1008.0


def test_bad_prediction_is_reported_not_raised():
    p = parse_program("def predict_step_time(P):\n    return 0.5 + 0 * P\n")
    r = simulate(p.compiled(), np.zeros(0), MV, _wl(3, 10, prompt=10, gen=3), 1000)
    assert r.status == S.BAD_PREDICTION
    p = parse_program("def predict_step_time(P, D):\n    return log(D - 1)\n")
    r = simulate(p.compiled(), np.zeros(0), MV, _wl(3, 10, prompt=10, gen=3), 1000)
    assert r.status == S.BAD_PREDICTION


def test_no_recompilation_for_new_predictors():
    before = len(S._simulate.signatures)
    for k in range(3):
        p = parse_program(f"C = {k + 1}000.0\ndef predict_step_time(P, D):\n    return C + {k} * D + P\n")
        assert simulate(p.compiled(), p.initial_constants, MV, _wl(5, 100), 1000).ok
    assert len(S._simulate.signatures) == before == 1


KV_PROGRAM = ("BASE = 50.0\nPER_KV = 0.02\nPER_TOKEN = 3.0\n"
              "def predict_step_time(P, D, K, t_weights):\n"
              "    return BASE + t_weights + PER_KV * K + PER_TOKEN * (P + D)\n")


def _same(a, b):
    for name in ("status", "ttft_us", "e2e_us", "n_steps", "n_preempted", "states", "req_stats", "timed_out"):
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.shape == y.shape and np.array_equal(x, y, equal_nan=True), name


def _first(wl, n: int) -> Workload:
    """The first n requests of a workload (with their prompt identities and timeout)."""
    cut = min(len(wl.arrival_us), n)
    return Workload(*(getattr(wl, k)[:cut] for k in ("arrival_us", "prompt_len", "cached_len", "gen_len", "stage")),
                    prompt_id=wl.prompt_id[:cut], group_id=wl.group_id[:cut],
                    system_prompt_len=wl.system_prompt_len, timeout_us=wl.timeout_us)


SPREAD_PROGRAM = ("BASE = 2000.0\nSPREAD = 1.0\n\ndef predict_step_time(t_weights, t_decode_kv, t_decode_kv_max):\n"
                  "    return BASE + t_weights + t_decode_kv + SPREAD * (t_decode_kv_max - t_decode_kv)\n")


SPREAD_MEASURED = ("C = 1.0\n\ndef predict_step_time(t_step_measured, t_decode_spread, ctx_max):\n"
                   "    return t_step_measured + C * t_decode_spread + 0.01 * ctx_max\n")


@pytest.mark.parametrize("source", [SPREAD_PROGRAM, SPREAD_MEASURED])
def test_longest_context_is_the_same_with_members_and_request_by_request(evaluator, source):
    """A program reading the longest decoding context (spread=True: the members' steps look up
    their other components by batch and blocks, the longest context is kept as members join and
    finish, not searched) gives the same results bit for bit with members as request by
    request, under KV pressure and timeouts; the recorded ctx_max is that of a real decoding
    request."""
    p = parse_program(source)
    f, c = p.compiled(), p.initial_constants
    ev = evaluator
    for e in ev.exps[:2]:
        wl = _first(ev.wl[e.id], 1200)
        for kw in (dict(), dict(kv_blocks=max(64, e.kv_blocks // 12), timeout_us=1.2e6)):
            kw = {"kv_blocks": e.kv_blocks, **kw}
            args = (f, c, ev.mv[e.id], wl, kw.pop("kv_blocks"))
            fast = simulate(*args, fast=True, spread=True, record=True, **kw)
            _same(fast, simulate(*args, fast=False, spread=True, record=True, **kw))
            st = fast.states
            dec = st[:, 3] > 0
            assert dec.any() and np.all(st[~dec, 7] == 0)
            assert np.all(st[dec, 7] <= (wl.prompt_len + wl.gen_len).max())
            # the longest context is at least the decoders' mean share of the KV they hold
            assert np.all(st[dec, 7] >= 1) and np.all(st[dec, 7] * st[dec, 3] >= st[dec, 1])


def test_steady_decode_stretches_are_bit_identical_to_the_general_step(evaluator):
    """The members (decoders advanced implicitly, their events only, a memo of cycles) must give
    the request-by-request step's results bit for bit: with the real workloads' prefix pools, under KV pressure (preemption,
    evictions), with client timeouts, in always-hit mode and with few sequences."""
    p = parse_program(KV_PROGRAM)
    f, c = p.compiled(), p.initial_constants
    ev = evaluator
    seen = {"pre": 0, "evict": 0, "timeout": 0, "restart_hit": 0}
    for e in ev.exps[:4]:
        wl = _first(ev.wl[e.id], 1500)
        for kw in (dict(record=True), dict(kv_blocks=max(64, e.kv_blocks // 12), timeout_us=1.2e6, record=True),
                   dict(kv_blocks=max(64, e.kv_blocks // 10), prefix_cache="always-hit"), dict(max_seqs=16)):
            kw = {"kv_blocks": e.kv_blocks, **kw}
            args = (f, c, ev.mv[e.id], wl, kw.pop("kv_blocks"))
            fast, general = simulate(*args, fast=True, **kw), simulate(*args, fast=False, **kw)
            assert fast.ok
            _same(fast, general)
            seen["pre"] += fast.n_preempted
            seen["evict"] += fast.n_evictions
            seen["timeout"] += int(fast.timed_out.sum())
            # a preempted request hitting its own blocks of generated tokens again: they got
            # their hashes late (at a member's write-back), which only this path can observe
            seen["restart_hit"] += int((fast.req_stats[:, S.RESTART_HIT] > wl.prompt_len).sum())
    assert min(seen.values()) > 0, seen  # every hard path was exercised


def test_clients_giving_up_together_stay_in_bounds(tmp_path):
    """Bursts whose clients give up together while members finish around them (many holes at
    once): under numba's bounds checks (a fresh compilation) no index leaves its array, and
    members give the request-by-request step's results. An abort that left holes after the
    write-back decision once overran the running positions (memory corruption, no error)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path)}
    script = Path(__file__).with_name("abort_storm.py")
    out = subprocess.run([sys.executable, str(script), "40"], env=env, capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).parent.parent)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert int(out.stdout.split("ok: ")[1].split()[0]) > 1000  # the storm did abort requests


def test_client_aborts_keep_the_waiting_queues_order():
    """The deadline scan (`_drop_waiting`) stops at the first arrival still in time, so it must
    see the queue as it is: preempted requests at the head in any order, then arrivals in
    arrival order. Against a plain list on random rings (wrapping round, heads of 0-5): the same
    requests aborted, the survivors in the same order, the head count kept. The members' and
    the request-by-request paths share this scan, so their comparison cannot check it."""
    rng = np.random.default_rng(11)
    for _ in range(400):
        n = int(rng.integers(1, 40))
        arrival = np.sort(rng.uniform(0.0, 100.0, n))
        ids = rng.permutation(n)
        n_front = int(rng.integers(0, min(5, n) + 1))
        front = list(ids[:n_front])  # preempted: any arrival order
        rest = sorted(int(r) for r in rng.choice(ids[n_front:], int(rng.integers(0, n - n_front + 1)), replace=False))
        queue = front + rest
        cap = n + 1
        head = int(rng.integers(0, cap))
        wq = np.full(cap, -1, np.int64)
        for a, r in enumerate(queue):
            wq[(head + a) % cap] = r
        t, timeout = float(rng.uniform(0.0, 150.0)), float(rng.uniform(1.0, 80.0))
        gone, timed_out = np.zeros(n + 1, np.bool_), np.zeros(n, np.bool_)
        late = [r for r in queue if t - arrival[r] >= timeout]
        head2, n2, front2, dropped = S._drop_waiting(wq, head, len(queue), n_front, arrival, t, timeout, gone,
                                                     timed_out)
        kept = [wq[(head2 + a) % cap] for a in range(n2)]
        assert kept == [r for r in queue if t - arrival[r] < timeout]
        assert front2 == sum(t - arrival[r] < timeout for r in front) and dropped == len(late)
        assert sorted(np.flatnonzero(timed_out)) == sorted(late) and not gone[[r for r in kept]].any()
