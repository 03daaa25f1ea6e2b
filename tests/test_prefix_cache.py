"""vLLM V1's prefix cache in the simulator: hand-computable hits, evictions and preemptions."""
from types import SimpleNamespace

import numpy as np
import pytest

from evaluator.simulator import (Workload, cache_stats_by_stage, simulate,
                                 time_breakdown_by_stage)
from evaluator.workload import _cached, prompt_identity
from evaluator.program import parse_program

MV = np.array([32, 4096, 32, 32, 128, 11008, 0, 0, 32000, 1, 989.5e12, 3.35e12, 450e9], float)
CONST = parse_program("C = 10000.0\ndef predict_step_time(P):\n    return C + 0 * P\n")
LINEAR = parse_program("def predict_step_time(P, D):\n    return 1000 + P + 10 * D\n")
FAR = 1e6  # us between arrivals: every request finishes before the next arrives


def _wl(pid, gen, prompt=160, gap=FAR, gid=None, sys_len=0):
    n = len(pid)
    return Workload(np.arange(n, dtype=np.float64) * gap, np.full(n, prompt, np.int64) if np.isscalar(prompt)
                    else np.asarray(prompt, np.int64), np.zeros(n, np.int64), np.full(n, gen, np.int64),
                    np.zeros(n, np.int64), prompt_id=np.asarray(pid, np.int64),
                    group_id=None if gid is None else np.asarray(gid, np.int64), system_prompt_len=sys_len)


def _run(wl, kv_blocks, program=CONST, **kw):
    r = simulate(program.compiled(), program.initial_constants, MV, wl, kv_blocks, **kw)
    assert r.ok and r.prefix_cache == "lru"
    return r


def test_pool_that_fits_hits_after_the_first_pass():
    # 4 prompts of 100 tokens, 3 passes; a hit is at most prompt - 1 tokens in full blocks: 96
    r = _run(_wl(np.arange(12) % 4, gen=3, prompt=100), 1000, program=LINEAR)
    assert list(r.req_stats[:, 0]) == [0] * 4 + [96] * 8
    assert r.ttft_us[0] == 1000 + 100 and r.ttft_us[4] == 1000 + 4
    st = cache_stats_by_stage(r, _wl(np.arange(12) % 4, gen=3, prompt=100))[0]
    assert st["cached_tokens"] == 768 and st["hit_rate"] == pytest.approx(768 / 1200)
    assert st["evictions"] == 0 and st["preemptions"] == 0 and st["recomputed_tokens"] == 0


def test_pool_twice_the_free_capacity_always_misses():
    # 10 prompts x 10 blocks each (160 tokens, 1 output token), 50 usable blocks (+1 null block):
    # LRU over a cyclic stream twice its size evicts every prompt before it comes back
    wl = _wl(np.arange(30) % 10, gen=1)
    r = _run(wl, 51)
    st = cache_stats_by_stage(r, wl)[0]
    assert st["cached_tokens"] == 0
    assert st["always_hit_tokens"] == 20 * 144 and st["recomputed_tokens"] == 20 * 144
    assert st["evictions"] == 25 * 10  # requests 5..29 each evict the 10 blocks of request n-5


def test_a_finished_request_loses_its_tail_blocks_first():
    # 15 usable blocks: prompt 1 takes the 5 fresh blocks and the last 5 of prompt 0's 10;
    # prompt 0 then hits its first 5 blocks (freed last-first, evicted last-first)
    wl = _wl([0, 1, 0], gen=1)
    r = _run(wl, 16)
    assert list(r.req_stats[:, 0]) == [0, 0, 80]


def test_shared_system_prompt_is_held_once():
    # 8 concurrent requests of one group: 4 system blocks + 6 private prompt blocks each,
    # growing to 14 blocks with 50 output tokens: 4 + 8 x 10 = 84 fit in 89, 8 x 14 = 112 do not
    n = 8
    wl = _wl(np.arange(n), gen=50, gap=0.0, gid=np.zeros(n), sys_len=64)
    r = _run(wl, 90)
    assert list(r.req_stats[:, 0]) == [0] + [64] * (n - 1)
    assert r.n_preempted == 0
    private = Workload(wl.arrival_us, wl.prompt_len, np.array([0] + [64] * (n - 1)), wl.gen_len, wl.stage)
    p = simulate(CONST.compiled(), CONST.initial_constants, MV, private, 90)
    assert p.prefix_cache == "always-hit" and p.n_preempted > 0


def test_preempted_request_finds_its_own_blocks_cached():
    # A and B (10 prompt blocks each) fill 20 usable blocks; A's first decode block preempts B,
    # whose blocks go to the free queue last-first, so A takes B's 10th block. B restarts after
    # A finishes and hits its first 9 blocks (144 tokens); it recomputes 160 + 1 - 144 tokens.
    wl = _wl([0, 1], gen=np.array([17, 5]), gap=0.0)
    wl.gen_len = np.array([17, 5], np.int64)
    r = _run(wl, 21, program=LINEAR, breakdown=True)
    assert r.n_preempted == 1
    assert r.req_stats[1, 3] == 1 and r.req_stats[1, 8] == 144
    st = cache_stats_by_stage(r, wl)[0]
    assert st["preemptions"] == 1 and st["restart_cached_tokens"] == 144
    bd = time_breakdown_by_stage(r, wl)[0]
    parts = sum(bd[f"{k}_s"] for k in ("decode", "prefill", "recompute", "preempt", "queue"))
    assert parts == pytest.approx(bd["per_token_s"])
    assert bd["preempt_s"] > 0 and bd["queue_s"] > 0


def test_unlimited_blocks_reproduce_always_hit_exactly():
    # the always-hit rule (workload._cached) and the block pool agree whenever every prompt's
    # blocks were scheduled before the next request with that prompt arrives
    pool, groups, n = 20, 4, 90
    exp = SimpleNamespace(block_size=16, prompt_pool=pool, num_groups=groups, system_prompt_len=64)
    idx = np.arange(n)
    pid = idx % pool
    prompt = 100 + 3 * pid
    cached = _cached(exp, prompt)
    base = Workload(idx * 20000.0, prompt, cached, np.full(n, 40, np.int64), (idx >= 45).astype(np.int64))
    lru = Workload(base.arrival_us, prompt, cached, base.gen_len, base.stage, prompt_id=pid,
                   group_id=pid % groups, system_prompt_len=64)
    a = simulate(LINEAR.compiled(), LINEAR.initial_constants, MV, base, 10**6)
    b = simulate(LINEAR.compiled(), LINEAR.initial_constants, MV, lru, 10**6)
    assert a.prefix_cache == "always-hit" and b.prefix_cache == "lru"
    assert np.array_equal(b.req_stats[:, 0], cached)
    assert np.array_equal(a.ttft_us, b.ttft_us) and np.array_equal(a.e2e_us, b.e2e_us)
    assert a.n_steps == b.n_steps


def test_breakdown_of_a_lone_request_is_all_decode():
    wl = _wl([0], gen=10)
    r = _run(wl, 100, breakdown=True)
    bd = time_breakdown_by_stage(r, wl)[0]
    assert bd["per_token_s"] == pytest.approx(0.01) and bd["decode_s"] == pytest.approx(0.01)
    assert bd["queue_s"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        time_breakdown_by_stage(_run(wl, 100), wl)


def test_prompt_identity_cycles_the_pool_and_keeps_groups_balanced():
    exp = SimpleNamespace(prompt_pool=100, num_groups=10)
    pid, gid = prompt_identity(exp, np.arange(250))
    assert list(pid[:3]) == [0, 1, 2] and pid[137] == 37
    assert np.array_equal(gid[:100], gid[100:200])
    assert np.bincount(gid[:100]).tolist() == [10] * 10
    _, named = prompt_identity(exp, np.arange(4), np.array(["b", "a", "", "b"], object))
    assert named[0] == named[3] == 1 and named[1] == 0 and named[2] == gid[2]
