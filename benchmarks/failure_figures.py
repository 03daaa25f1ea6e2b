"""Measured vs simulated failure fraction (issue 11): a synthetic overloaded experiment and the
heaviest stage of every experiment of a ground-truth directory.

Run: .venv/bin/python benchmarks/failure_figures.py [--data DIR] [--program seeds/roofline.py]
Prints figures; asserts nothing. The synthetic experiment is tests/failed_fixture.py (worked
out by hand there: 33 of 60 requests finish, 27 time out). For the real data the program is
fitted as `evolve evaluate` would, then each experiment is simulated again over all its
requests with the fitted constants and the client timeout on.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from evaluator.data import load  # noqa: E402
from evaluator.evaluate import Evaluator  # noqa: E402
from evaluator.program import parse_program  # noqa: E402
from evaluator.simulator import outcomes_by_stage, simulate  # noqa: E402
from failed_fixture import CONST_PROGRAM, MODEL, STEP_US, write_overloaded  # noqa: E402


def synthetic() -> None:
    zero = {MODEL: {"queueing_us": 0.0, "queueing_per_input_token_us": 0.0, "output_token_us": 0.0,
                           "post_decode_us": 0.0}}
    with tempfile.TemporaryDirectory() as d:
        gt = load(write_overloaded(Path(d)))
        ev = Evaluator(gt, train_fraction=0.0)
        prog = parse_program(CONST_PROGRAM)
        print("synthetic overloaded experiment (60 requests, 1/s, 10 s service one at a time, 300 s timeout)")
        for label, step in (("step 100 ms (the truth)", STEP_US), ("step 200 ms", 2 * STEP_US),
                            ("step 50 ms", STEP_US / 2)):
            (r,) = ev.evaluate(prog, constants={MODEL: [step]}, overheads=zero, fit=False).rows
            print(f"  {label:24s} measured failed {100 * r['meas_fail']:5.1f}%  simulated {100 * r['pred_fail']:5.1f}%"
                  f"  ({r['finished']} finished, {r['timed_out']} timed out)  error {r['fail_err_pts']:.1f} pts")
        fitted = Evaluator(gt).evaluate(prog)
        print(f"  fitted STEP = {fitted.constants[MODEL][0]:.1f} us (training part: the first 70%)")


def real(data: str | None, program: str) -> None:
    gt = load(data)
    ev = Evaluator(gt)
    prog = parse_program(Path(program).read_text())
    res = ev.evaluate(prog)
    if not res.valid:
        print(f"{program}: invalid: {res.error}")
        return
    f = prog.compiled()
    print(f"\n{gt.source}: {program} fitted; heaviest stage of each experiment, all its requests, "
          f"client timeout on")
    print(f"{'experiment':48s} st  rate  requests  measured failed  simulated failed  max sim E2E (s)")
    for e in ev.exps:
        wl = ev.wl[e.id]
        c = np.asarray(res.constants[e.model])
        r = simulate(f, c, ev.mv[e.id], wl, e.kv_blocks, e.max_num_seqs, e.max_batched_tokens, e.block_size)
        heavy = max(e.stages, key=lambda s: s.rate)
        oc = next(o for o in outcomes_by_stage(r, wl) if o["stage"] == heavy.index)
        meas = heavy.failed_fraction or 0.0
        sel = wl.stage == heavy.index
        print(f"{e.id:48s} {heavy.index:2d} {heavy.rate:5.0f} {oc['requests']:9d} {100 * meas:15.2f}% "
              f"{100 * oc['timed_out'] / oc['requests']:16.2f}% {r.e2e_us[sel].max() / 1e6:16.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None)
    ap.add_argument("--program", default=str(Path(__file__).resolve().parents[1] / "seeds" / "roofline.py"))
    a = ap.parse_args()
    synthetic()
    real(a.data, a.program)


if __name__ == "__main__":
    main()
