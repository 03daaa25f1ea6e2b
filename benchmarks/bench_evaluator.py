"""Evaluator speed: compile cost, seconds per predictor on all 12 experiments, steps per second.

Run: .venv/bin/python benchmarks/bench_evaluator.py [--data DIR]
Prints figures; asserts nothing (targets live here, not in unit tests).
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    ap.add_argument("--repeat", type=int, default=3)
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
    p = parse_program(seed_sources()["blackbox"])
    fitted = ev.evaluate(p)
    f = p.compiled()
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
    print(f"simulate all {len(ev.exps)} experiments + per-step scoring, fixed constants: {best:.3f} s "
          f"({steps} steps, {steps / best / 1e6:.2f} M simulated steps/s)")

    # full evaluation: fit (surrogate), simulate+record, refit, simulate, score
    for refine in (False, True):
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            ev.evaluate(p, refine=refine)
            ts.append(time.perf_counter() - t0)
        label = "full evaluation (fit + 2 simulations)" if refine else "screening evaluation (fit + 1 simulation)"
        print(f"{label}: {min(ts):.3f} s")


if __name__ == "__main__":
    main()
