"""CPU seconds of the judge on programs a run really evaluated, split into simulation and fit.

Run: .venv/bin/python benchmarks/judge_sample.py --archive RUN.db [--stage full|screen] [-n 20] [--data DIR]
Takes n programs at random (seed 1) among the archive's valid evaluations of that stage and,
on the embedded default (or --data), runs what a worker runs for each: the screen, and for
`full` also every held-out split job. Prints CPU seconds per program and the profiled shares
of the simulator (`_simulate`) and the fit (`least_squares`). Asserts nothing. Compare commits
with PYTHONPATH=<worktree> on the same archive, back to back.

Recorded, README run archive of 59f4b0e (2,000 proposals), embedded default, quiet machine:
                         CPU s / program   _simulate   fit
  20 full, da0e82d       3.85              2.45        1.60
  20 full, 12f88d7       3.48              2.05        1.65
  60 screens, da0e82d    0.73              0.49        0.25
  60 screens, 12f88d7    0.65              0.40        0.25
12f88d7: a program reading the longest context keeps its members' steps cheap, and a client
deadline no longer writes every member back (evaluator/simulator.py); results bit for bit.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import sqlite3
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archive", required=True)
    ap.add_argument("--stage", default="full", choices=("full", "screen"))
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--data", default=None)
    a = ap.parse_args()
    from evaluator.data import load
    from evaluator.evaluate import Evaluator
    from evaluator.holdout import split_labels
    from evaluator.program import parse_program
    con = sqlite3.connect(a.archive)
    ids = [r[0] for r in con.execute("SELECT program_id FROM evaluations WHERE stage = ? AND valid = 1 "
                                     "ORDER BY program_id", (a.stage,))]
    random.seed(1)
    ids = random.sample(ids, min(a.n, len(ids)))
    source = lambda pid: con.execute("SELECT source FROM programs WHERE id = ?", (pid,)).fetchone()[0]  # noqa: E731
    ev = Evaluator(load(a.data), holdout_objectives=True)
    ev.prepare_heldout()
    ev.evaluate(parse_program(source(ids[0])), refine=False, heldout=False)  # warm-up: compilation
    prof, cpu = cProfile.Profile(), 0.0
    for pid in ids:
        t = time.process_time()
        prof.enable()
        p = parse_program(source(pid))
        screen = ev.evaluate(p, refine=False, heldout=False)
        if a.stage == "full" and screen.valid:
            for label in split_labels(ev.all_exps):
                ev.evaluate_split(p, label, screen.overheads)
        prof.disable()
        cpu += time.process_time() - t
    st = pstats.Stats(prof).stats
    cum = lambda needle: sum(v[3] for k, v in st.items() if needle in f"{k[0]}:{k[2]}")  # noqa: E731
    n = len(ids)
    print(f"{a.stage}: {n} programs, CPU {cpu / n:.2f} s per program: _simulate {cum('simulator.py:_simulate') / n:.2f}, "
          f"fit (least_squares) {cum('least_squares') / n:.2f}")


if __name__ == "__main__":
    main()
