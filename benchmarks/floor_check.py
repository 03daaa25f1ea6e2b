"""Do the measured step cycles sit above the hardware floor? And which shipped programs are physical?

    .venv/bin/python benchmarks/floor_check.py [--data DIR] [--no-programs]

Part 1 (real step rows): per experiment, measured start-to-start cycle / floor: min, p1, median,
rows below the floor; rows whose cycle is shorter than schedule() time + floor (impossible if
scheduling and the forward pass ran one after the other); consecutive sampled steps, whose two
cycles together must cover both steps' work even when scheduling runs ahead of the GPU.
Part 2 (every stage, simulated states): measured per-token time / D-weighted mean floor of the
batch states a calibrated reference simulation visits in that stage (the experiments without
step rows get at least this coarse check).
Part 3: `evaluator.physics.check_program` on the seeds, the baselines and the issue's program
#1870 with their initial constants (or, with --fitted, the judge's fitted ones, plus which
constants the probe states pin down), on the judge's probe states plus the extrapolation grid.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from evaluator.baselines import BASELINES, baseline_program
from evaluator.data import load_ground_truth
from evaluator.evaluate import Evaluator
from evaluator.fitting import states_to_components
from evaluator.identify import fold_constants, program_identifiability
from evaluator import judge_states
from evaluator.physics import (check_by_model, floor_us, floor_violation, grid_rows, model_grids,
                               monotonicity_violation)
from evaluator.program import parse_program
from evaluator.step_scoring import build_step_rows, predict_rows
from seeds import seed_sources

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# Issue 10's best in-sample program (#1870). The issue gives its formula, not its fitted
# constants: these values are illustrative. Its fault is structural (for D > SPLIT_D the step
# gets shorter as D grows), so it fails whatever the constants.
PROGRAM_1870 = '''"""Program #1870 of issue 10 (formula from the issue, constants illustrative)."""
OVERHEAD_2 = 20000.0
SPLIT_D = 64.0
OVERHEAD = 14000.0
EFFICIENCY = 1.0
SCALE = 20.0
C_T_DECODE_GEMM = 100.0
SPLIT_T_DECODE_KV = 1000.0


def predict_step_time(t_prefill_gemm, D, B):
    return OVERHEAD_2 - D if D > SPLIT_D else OVERHEAD + EFFICIENCY * (SCALE * D + C_T_DECODE_GEMM if t_prefill_gemm < SPLIT_T_DECODE_KV else B)
'''


def step_rows_report(gt) -> None:
    print("== real step rows: measured cycle (next_step_start_delta_us) vs floor ==")
    print(f"{'experiment':46s} {'rows':>5s} {'min':>6s} {'p1':>6s} {'median':>6s} {'below':>5s} "
          f"{'<sched+floor':>12s} {'pairs':>5s} {'pairs<':>6s} {'worst pair':>10s}")
    steps = gt.steps
    for model, rows in build_step_rows(gt).items():
        s = steps[steps["model_key"] == model].reset_index(drop=True)
        fl = floor_us(rows.X)
        for exp in np.unique(rows.experiment):
            m = (rows.experiment == exp)
            t = m & rows.has_target
            r = rows.target_us[t] / fl[t]
            sched = s["duration_us"].to_numpy(np.float64)
            impossible = int(np.sum(rows.target_us[t] < sched[t] + fl[t]))
            idx = np.flatnonzero(m)
            sid = s["step_id"].to_numpy()[idx]
            cyc, f = rows.target_us[idx], fl[idx]
            nxt = (sid[1:] == sid[:-1] + 1) & np.isfinite(cyc[:-1]) & np.isfinite(cyc[1:])
            pair = (cyc[:-1] + cyc[1:])[nxt] / (f[:-1] + f[1:])[nxt]
            print(f"{exp:46s} {t.sum():5d} {r.min():6.3f} {np.percentile(r, 1):6.3f} {np.median(r):6.3f} "
                  f"{int((r < 1).sum()):5d} {impossible:12d} {len(pair):5d} {int((pair < 1).sum()):6d} "
                  f"{pair.min() if len(pair) else math.nan:10.3f}")
            for i in np.flatnonzero(t)[r < 1]:
                print(f"   below: step {int(s['step_id'][i])} P={rows.X[i, 7]:.0f} D={rows.X[i, 8]:.0f} "
                      f"K={rows.X[i, 10]:.0f} schedule()={s['duration_us'][i]:.0f} us "
                      f"cycle={rows.target_us[i]:.0f} us floor={fl[i]:.0f} us")


def stage_report(ev: Evaluator) -> None:
    print("\n== every stage: measured per-token time vs the floor of its batches ==")
    print("sim: D-weighted mean floor of the states a calibrated reference simulation visits;")
    print("little: floor of a decode batch holding rate x mean E2E requests at mean prompt + half the output")
    ref = ev.reference_states()
    for e in ev.exps:
        st = ref[e.id]
        for s in e.stages:
            m = (st[:, 6] >= s.start_s * 1e6) & (st[:, 6] < (s.start_s + s.duration_s) * 1e6) & (st[:, 1] > 0)
            if not m.any() or not math.isfinite(s.itl_s):
                continue
            fl = floor_us(states_to_components(np.ascontiguousarray(st[m]), ev.mv[e.id]))
            sim_floor = float(np.dot(fl, st[m, 1]) / st[m, 1].sum())
            n = s.rate * s.e2e_s  # Little's law: requests in the system (queued ones hold no KV: generous)
            k = n * (s.mean_input + (e.generated_len or s.mean_output) / 2.0)
            one = np.array([[0.0, n, 0.0, n, n, k, 0.0]])
            little = float(floor_us(states_to_components(one, ev.mv[e.id]))[0])
            tok = s.itl_s * 1e6
            print(f"{e.id:46s} stage {s.index}: per-token {tok:6.0f} us | sim floor {sim_floor:6.0f} us "
                  f"ratio {tok / sim_floor:4.2f} (mean K {np.dot(st[m, 5], st[m, 1]) / st[m, 1].sum():6.0f}) | "
                  f"little floor {little:6.0f} us ratio {tok / little:4.2f} (K {k:6.0f})")


def programs_report(gt, ev: Evaluator, fitted: bool) -> None:
    print(f"\n== physics check, {'fitted' if fitted else 'initial'} constants: floor on the judge's probes, "
          "floor and monotonicity on the extrapolation grid ==")
    grids = model_grids(gt)
    probes = {m: judge_states.probes(ev, [e for e in ev.exps if e.model == m]) for m in sorted(grids)}
    print("states per model: probes", {m: len(p) for m, p in probes.items()},
          "grid", {m: g.shape[0] * g.shape[1] for m, g in grids.items()})
    progs = {f"seed {k}": parse_program(v) for k, v in seed_sources().items()}
    progs.update({f"baseline {b}": baseline_program(b) for b in BASELINES})
    progs["issue #1870"] = parse_program(PROGRAM_1870)
    for name, prog in progs.items():
        f = prog.compiled()
        consts = {"*": prog.initial_constants}
        if fitted and not name.endswith("roofline"):
            r = ev.evaluate(prog)
            consts = {k: np.asarray(v, np.float64) for k, v in r.constants.items()}
        check_by_model(f, consts, probes, grids)  # warm-up
        t0 = time.perf_counter()
        why = check_by_model(f, consts, probes, grids)
        dt = (time.perf_counter() - t0) * 1e3
        print(f"{name:24s} all rules {dt:5.1f} ms: {'PASS' if why is None else 'FAIL ' + why}")
        for m in sorted(grids):
            c = np.ascontiguousarray(consts.get(m, consts.get("*")), dtype=np.float64)
            G = grid_rows(grids[m])
            pg = predict_rows(f, G, c)
            parts = {"floor/probes": floor_violation(predict_rows(f, probes[m], c), probes[m]),
                     "floor/grid": floor_violation(pg, G), "monotone/grid": monotonicity_violation(pg, grids[m])}
            bad = {k: v for k, v in parts.items() if v}
            if bad:
                print(f"    {m}: " + " | ".join(f"{k}: {v}" for k, v in bad.items()))
        fo = fold_constants(prog)
        if fo.changed:
            print(f"    folds: {fo.merged} (removed {fo.removed})")
        if fitted:
            for m in sorted(grids):
                c = consts.get(m, consts.get("*"))
                print(f"    identifiability on {m}'s probes: "
                      f"{program_identifiability(prog, c, probes[m]).summary()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--no-programs", action="store_true", help="skip parts 2 and 3 (no simulation)")
    ap.add_argument("--fitted", action="store_true", help="part 3 with constants fitted by the judge (slow)")
    a = ap.parse_args()
    gt = load_ground_truth(a.data)
    step_rows_report(gt)
    if a.no_programs:
        return
    ev = Evaluator(gt)
    stage_report(ev)
    programs_report(gt, ev, a.fitted)


if __name__ == "__main__":
    main()
