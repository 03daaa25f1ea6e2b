"""Evaluator speed: compile cost, seconds per predictor on all 12 experiments, steps per second.

Run: .venv/bin/python benchmarks/bench_evaluator.py [--data DIR]
Prints figures; asserts nothing (targets live here, not in unit tests).

Prefix cache cost (issue 17): the simulations and the full evaluation are timed twice in the
same process, with vLLM's LRU block pool ("lru", the default) and with the older always-hit
rule (workloads stripped of prompt identity), so the ratio is not blurred by machine load.
Target: lru / always-hit <= 1.5 for the full evaluation. Recorded (2 shared cores, trace mode):
  before the block pool (always-hit simulator only): simulate all 0.481 s, full evaluation 1.525 s
  with it, same process, machine load ~5 (2026-11-23): always-hit simulate all 1.059 s, full 3.948 s;
  lru simulate all 2.277 s, full 6.345 s: 1.61x, over the 1.5x target (see issue 17 notes)
  after recorded states stopped zeroing a max_steps array per run (2026-11-23, quiet, blackbox):
  always-hit full 1.593 -> 1.397 s, lru full 2.431 -> 2.068 s: 1.48x
  with the physical rules and the roofline seed as the timed program (2026-11-23, quiet):
  always-hit full 1.715 s, lru full 2.403 s: 1.40x

Client timeouts (issue 11): the full evaluation is timed with the simulated client timeout on
(the default) and off, same process, same reference states ("timeouts on / off" line);
`--timeouts-only` skips the prefix-cache comparison. Recorded (2026-11-23, load 9-10 from other
sessions): with timeouts 5.682 s, without 5.836 s: 0.97x; details in docs/failed_requests.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeouts-only", action="store_true", help="time only timeouts on vs off")
    a = ap.parse_args()
    t0 = time.perf_counter()
    from evaluator.data import load
    from evaluator.evaluate import Evaluator
    from evaluator.simulator import simulate
    from evaluator.step_scoring import predict_rows
    from evaluator.program import parse_program
    from seeds import seed_sources
    t_import = time.perf_counter() - t0
    gt = load(a.data)
    ev = Evaluator(gt)
    t0 = time.perf_counter()
    ev.reference_states()
    t_ref = time.perf_counter() - t0
    print(f"mode {gt.mode}; import+load-from-cache {t_import:.2f} s; reference states {t_ref:.2f} s")

    # per-candidate compile cost (the simulator itself is compiled once, cached on disk)
    progs = [parse_program(s) for s in seed_sources().values()]
    t0 = time.perf_counter()
    for p in progs:
        p.compiled()
    print(f"candidate compile: {1000 * (time.perf_counter() - t0) / len(progs):.0f} ms per program")

    # one predictor, fixed constants: simulation of all experiments + per-step scoring
    p = parse_program(seed_sources()["roofline"])
    fitted = ev.evaluate(p)
    f = p.compiled()
    lru_wl = dict(ev.wl)
    hit_wl = {k: dataclasses.replace(w, prompt_id=None, group_id=None) for k, w in ev.wl.items()}
    full = {}
    for mode, wls in (() if a.timeouts_only else (("always-hit", hit_wl), ("lru", lru_wl))):
        ev.wl = wls
        times, steps = [], 0
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            steps = 0
            for e in ev.exps:
                r = simulate(f, np.asarray(fitted.constants[e.model]), ev.mv[e.id], ev.wl[e.id], e.kv_blocks)
                steps += r.n_steps
            for m, rows in ev.step_rows.items():
                predict_rows(f, rows.X, np.asarray(fitted.constants[m]))
            times.append(time.perf_counter() - t0)
        best = min(times)
        print(f"[{mode}] simulate all {len(ev.exps)} experiments + per-step scoring, fixed constants: "
              f"{best:.3f} s ({steps} steps, {steps / best / 1e6:.2f} M simulated steps/s)")

        # full evaluation: fit (surrogate), simulate+record, refit, simulate, score
        for refine in (False, True):
            ts = []
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                ev.evaluate(p, refine=refine)
                ts.append(time.perf_counter() - t0)
            label = "full evaluation (fit + 2 simulations)" if refine else "screening evaluation (fit + 1 simulation)"
            print(f"[{mode}] {label}: {min(ts):.3f} s")
            full[mode] = min(ts)
    ev.wl = lru_wl
    if full:
        print(f"full evaluation lru / always-hit: {full['lru'] / full['always-hit']:.2f}x (target <= 1.5)")
    timed = {}
    for on in (True, False, True, False):  # interleaved, so machine load falls on both alike
        ev.timeouts = on
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            ev.evaluate(p)
            ts.append(time.perf_counter() - t0)
        timed[on] = min(min(ts), timed.get(on, float("inf")))
    ev.timeouts = True
    print(f"full evaluation with client timeouts {timed[True]:.3f} s, without {timed[False]:.3f} s: "
          f"on / off {timed[True] / timed[False]:.3f}x")


if __name__ == "__main__":
    main()
