"""Run as a script under NUMBA_BOUNDSCHECK=1 (tests/test_simulator.py): bursts of requests whose
clients give up together while members finish around them, so that aborted and finished
members leave many holes at once; members must give the request-by-request step's results."""
import sys

import numpy as np

from evaluator.program import parse_program
from evaluator.simulator import Workload, simulate

PROGRAM = "BASE = 3000.0\nPER_KV = 0.05\ndef predict_step_time(K, D, ctx_max):\n    return BASE + PER_KV * K + 0 * D * ctx_max\n"
MV = np.array([32, 4096, 32, 32, 128, 11008, 0, 0, 32000, 1, 989.5e12, 3.35e12, 450e9], float)


def storm(seed: int, max_seqs: int) -> Workload:
    rng = np.random.default_rng(seed)
    bursts = rng.integers(3, 8)
    arr = np.sort(np.concatenate([np.full(rng.integers(max_seqs, 4 * max_seqs), t)
                                  for t in np.cumsum(rng.uniform(0.2e6, 2e6, bursts))]))
    n = len(arr)
    return Workload(arr.astype(np.float64), rng.integers(20, 200, n), np.zeros(n, np.int64),
                    rng.integers(1, 400, n), np.zeros(n, np.int64), timeout_us=float(rng.uniform(0.5e6, 2e6)))


def main() -> int:
    p = parse_program(PROGRAM)
    f, c = p.compiled(), p.initial_constants
    aborted = 0
    for seed in range(int(sys.argv[1]) if len(sys.argv) > 1 else 40):
        for max_seqs in (4, 16):
            for spread in (False, True):
                wl = storm(seed, max_seqs)
                a = simulate(f, c, MV, wl, 4000, max_seqs=max_seqs, spread=spread)
                b = simulate(f, c, MV, wl, 4000, max_seqs=max_seqs, spread=spread, fast=False)
                for name in ("status", "ttft_us", "e2e_us", "n_steps", "n_preempted", "req_stats", "timed_out"):
                    if not np.array_equal(getattr(a, name), getattr(b, name)):
                        print(f"seed {seed}, max_seqs {max_seqs}: {name} differs")
                        return 1
                aborted += int(a.timed_out.sum())
    print(f"ok: {aborted} requests aborted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
