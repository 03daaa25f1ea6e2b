"""Prefix cache check (issue 17): the simulated hit rate and where the time goes, with vLLM's
LRU block pool and with the older always-hit rule, side by side.

Run: .venv/bin/python benchmarks/prefix_cache_check.py [--data DIR] [--output-scale 6]
Without --data: the embedded default in spec mode. --output-scale multiplies every
experiment's output_len (6 = the synthetic long-output check). The predictor is the roofline
seed with its initial constants (no fit), so the figures depend on the cache only.
Prints one row per experiment and stage; asserts nothing.
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from evaluator.data import load
from evaluator.program import parse_program
from evaluator.simulator import cache_stats_by_stage, simulate, time_breakdown_by_stage
from evaluator.workload import build_workload
from seeds import seed_sources


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    ap.add_argument("--output-scale", type=float, default=1.0)
    ap.add_argument("--seed-program", default="roofline")
    a = ap.parse_args()
    gt = load(a.data)
    prog = parse_program(seed_sources()[a.seed_program])
    f, c = prog.compiled(), prog.initial_constants
    print(f"mode {gt.mode}; output_len x {a.output_scale:g}; predictor {a.seed_program} (initial constants)")
    print("experiment                                   st  hit%  ah-hit%  evict   preempt  "
          "E2E lru/ah (s)     TTFT lru/ah (s)   tok lru/ah (ms)  | lru ms/tok: decode prefill recomp preempt queue")
    for e in gt.experiments:
        if a.output_scale != 1.0:
            e = dataclasses.replace(e, output_len=int(round(e.output_len * a.output_scale)))
        wl = build_workload(e, gt)
        mv = e.model_vec(gt.hardware)
        lru = simulate(f, c, mv, wl, e.kv_blocks, e.max_num_seqs, e.max_batched_tokens, e.block_size,
                       prefix_cache="lru", breakdown=True)
        ah = simulate(f, c, mv, wl, e.kv_blocks, e.max_num_seqs, e.max_batched_tokens, e.block_size,
                      prefix_cache="always-hit", breakdown=True)
        if not (lru.ok and ah.ok):
            print(f"{e.id:44s} simulation failed (status lru {lru.status}, always-hit {ah.status})")
            continue
        cs, cs_ah = cache_stats_by_stage(lru, wl), cache_stats_by_stage(ah, wl)
        bd, bd_ah = time_breakdown_by_stage(lru, wl), time_breakdown_by_stage(ah, wl)
        for k, s in enumerate(cs):
            m = wl.stage == s["stage"]
            e2e = (lru.e2e_us[m].mean() / 1e6, ah.e2e_us[m].mean() / 1e6)
            ttft = (lru.ttft_us[m].mean() / 1e6, ah.ttft_us[m].mean() / 1e6)
            tok = (1e3 * bd[k]["per_token_s"], 1e3 * bd_ah[k]["per_token_s"])
            parts = " ".join(f"{1e3 * bd[k][p + '_s']:6.2f}" for p in ("decode", "prefill", "recompute", "preempt", "queue"))
            print(f"{e.id:44s} {s['stage']:2d} {100 * s['hit_rate']:5.1f} {100 * cs_ah[k]['hit_rate']:6.1f} "
                  f"{s['evictions']:7d} {s['preemptions']:4d}/{cs_ah[k]['preemptions']:<4d} "
                  f"{e2e[0]:8.2f}/{e2e[1]:<8.2f} {ttft[0]:7.3f}/{ttft[1]:<7.3f} {tok[0]:7.2f}/{tok[1]:<7.2f} | {parts}")
    print("hit% = tokens served from cache / prompt tokens at first scheduling; ah = always-hit rule; "
          "evict = cached blocks evicted; preempt = lru/always-hit preemptions")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
