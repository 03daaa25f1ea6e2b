"""Seconds of one replay per experiment (every experiment, three seeds' fitted constants), and
whether the members' fast path gives the request-by-request step's results bit for bit.

Run: .venv/bin/python benchmarks/bench_replay.py [--data DIR] [--check]
         PYTHONPATH=OTHER_TREE .venv/bin/python benchmarks/bench_replay.py ...   # another commit
Prints, per seed, the milliseconds of a replay of all experiments (mean of 3, after a warm-up)
and of the slowest one; --check also simulates each experiment with fast=False and exits 1 on
any difference (status, TTFT, E2E, steps, preemptions, per-request stats, timeouts). Asserts
nothing else.

Recorded 2026-11-27, shared data (16 experiments), this 2-core machine (load ~1), alternated
twice with the tree of edb0d70 (before) in one sitting; --check: 48 of 48 identical:
                       all 16 experiments    7b reasoning (overloaded, KV always short)
  measured_per_layer   333-345 -> 300-308 ms   76 -> 42 ms
  roofline             332-341 -> 300-320 ms   73 -> 42 ms
  phase_split          314-326 -> 305-309 ms   73 -> 42 ms
The change: members short of a KV block preempt the requests behind them, last first, as the
request-by-request step does, instead of forcing every member back to the slow path
(`evaluator/simulator.py`, module docstring). Other experiments never preempt and are
unchanged (10-30 ms each). On the embedded default the same seeds' 16 replays took 295-308 ms
before the first half of the change (non-member victims only: 7b reasoning 70 -> 51 ms).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator.data import load  # noqa: E402
from evaluator.evaluate import Evaluator  # noqa: E402
from evaluator.program import parse_program  # noqa: E402
from evaluator.replay import sim_limits, simulate_one  # noqa: E402
from evaluator.simulator import simulate  # noqa: E402
from seeds import seed_sources  # noqa: E402

SEEDS = ("measured_per_layer", "roofline", "phase_split")
FIELDS = ("status", "ttft_us", "e2e_us", "n_steps", "n_preempted", "req_stats", "timed_out")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--check", action="store_true", help="compare with the request-by-request step")
    a = ap.parse_args()
    ev = Evaluator(load(a.data), holdout_objectives=False)
    bad = 0
    for name in SEEDS:
        p = parse_program(seed_sources()[name])
        f = p.compiled()
        res = ev.evaluate(p, refine=False)
        consts = {k: np.asarray(v) for k, v in res.constants.items()}
        ms = {}
        for e in ev.all_exps:
            c = ev.consts_for(e, consts)
            simulate_one(ev, f, c, e)  # warm-up
            t = time.perf_counter()
            for _ in range(3):
                simulate_one(ev, f, c, e)
            ms[e.id] = (time.perf_counter() - t) / 3 * 1000
            if a.check:
                kw = dict(max_steps=10**8, timeout_us=ev.timeout(), **sim_limits(e))
                args = (f, c, ev.mv[e.id], ev.wl[e.id], e.kv_blocks, e.max_num_seqs, e.max_batched_tokens,
                        e.block_size)
                x, y = simulate(*args, fast=True, **kw), simulate(*args, fast=False, **kw)
                diff = [k for k in FIELDS if not np.array_equal(getattr(x, k), getattr(y, k), equal_nan=True)]
                if diff:
                    bad += 1
                    print(f"DIFFERENT {name} {e.id}: {', '.join(diff)}")
        slow = max(ms, key=ms.get)
        print(f"{name:20s} all {sum(ms.values()):7.1f} ms   slowest {ms[slow]:6.1f} ms ({slow})")
    if a.check:
        print(f"{'no' if not bad else bad} differences with the request-by-request step")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
