"""Evaluations per second with the local pool and with Ray (1 and 2 workers), in one run, and the
bytes that cross the wire per candidate and once per run (issue 12's third figure).

Run: .venv/bin/python benchmarks/bench_executors.py [--data DIR] [--jobs N] [--heldout]
(the local pool with 1 and 2 workers, then Ray with 1 and 2; the load average is printed)
Each executor first gets one warm-up job per worker (start-up, reference states and numba
compilation are excluded), then the same N candidates: the seeds and offline mutations of them
with a fixed random seed, as screens (or, with --heldout, as a run makes them: a screen, then the
full job cut into one job per held-out split). Ratios are against the local
pool with 2 workers. Ray runs on a local instance started here (`ray.init`). Asserts nothing.

Recorded (trace mode, ../shared/data, 2026-11-23, 2-core machine, nothing else running):
  24 screens:  local pool 2 workers 1.164/s; Ray 1 worker 0.702/s (0.60x); Ray 2 workers
               1.077/s (0.92x). Per candidate 291 B out, 6,392 B back.
  6 full evaluations with held-out splits (--heldout --jobs 6): local 0.166/s; Ray 1 worker
               0.103/s (0.62x); Ray 2 workers 0.176/s (1.06x). 362 B out, 23,446 B back.
  the same on 2026-11-24 after the cheaper held-out evaluation (fb427c6): local 0.277/s;
               Ray 1 worker 0.147/s (0.53x); Ray 2 workers 0.263/s (0.95x).
  6 candidates as a run makes them with held-out splits (--heldout --jobs 6, aebaef3, 2026-11-24):
               a screen, then the full job cut into 8 split jobs: local 0.297/s; Ray 1 worker
               0.166/s (0.56x); Ray 2 workers 0.315/s (1.06x). 6,031 B out, 29,608 B back.
  the same after the simulator's members (c1911cc, 2026-11-24): local 0.562/s; Ray 1 worker
               0.284/s (0.51x); Ray 2 workers 0.504/s (0.90x). Same bytes.
  the same with the fit's exact Jacobian and half the members' events (db3e232,
               2026-11-24, VM ~10% slower that hour): local 0.551/s; Ray 1 worker
               0.328/s (0.60x); Ray 2 workers 0.551/s (1.00x). Same bytes. Each candidate now
               compiles its gradient too (~0.1 s per worker that runs it).
  the same with the fit's cheaper iterations and full jobs cut slowest split first (ee3d0b1,
               2026-11-24): local 0.768/s; Ray 1 worker 0.401/s (0.52x); Ray 2 workers
               0.662/s (0.86x). 6,031 B out, 28,621 B back (split jobs no longer send step
               diagnostics nobody reads).
  the same with a member's private block hashes registered once (6caa491) and split views made
               as workers start (4042695), 2026-11-24, quiet: local 0.973/s; Ray 1 worker
               0.516/s (0.53x); Ray 2 workers 0.871/s (0.90x). Same bytes.
  once per run: ground truth 19.8 MB, shared states 53.4 MB (143.8 MB with held-out splits).
  16 experiments (the reasoning workload and every held-out regime: a screen and 9 split jobs
               per candidate), 59c062d, 2026-11-27 02:09, load 0.07 before, 1.33 after:
               local 1 worker 0.375/s (0.54x); local 2 workers 0.692/s; Ray 1 worker 0.371/s
               (0.54x); Ray 2 workers 0.699/s (1.01x): two workers give 1.85x (local) and 1.88x
               (Ray) one worker's rate. 6,771 B out, 55,325 B back per candidate; once per run
               ground truth 21.9 MB, shared states 88.8 MB.
  the same with the driver blocking in `Executor.wait` (ab73595) and the simulator's cheaper
               preemptions and deadlines (dce8c7a, 7f41f7a), 2026-11-27 09:33, load 0.43 before,
               1.12 after: local 1 worker 0.462/s (0.52x); local 2 workers 0.883/s; Ray 1 worker
               0.413/s (0.47x); Ray 2 workers 0.773/s (0.88x): two workers give 1.91x (local)
               and 1.87x (Ray) one worker's rate. Same bytes; shared states 91.0 MB.
  the step rows following the held-out split (522354e: a split's fits read every row of its
               fitted stages, 30% more than the first 70% by step id they read before, and none
               of the held-out part), 2026-11-27 18:13-18:27, three runs back to back, loads
               1.3-1.6 after (this VM was slower than at 09:33):
                 9f6d339  local 1 worker 0.266/s, 2 workers 0.546/s; Ray 0.250/s, 0.499/s
                 fa265ea  local 1 worker 0.371/s, 2 workers 0.668/s; Ray 0.306/s, 0.597/s
                 9f6d339  local 1 worker 0.322/s, 2 workers 0.596/s; Ray 0.267/s, 0.586/s
               so about 10% slower for these six candidates (the fits of the larger ones;
               one-process full evaluations of the seeds moved within noise, bench_full_eval).
  again at 3a4806b (the evaluation unchanged since), 2026-11-27 23:35, load 0.96 before, 1.52
               after: local 1 worker 0.246/s, 2 workers 0.528/s (2.15x); Ray 1 worker 0.270/s,
               2 workers 0.450/s (0.85x the local pool, 1.67x Ray's one worker). Same bytes.
  again at 5b16c70 (the simulator ~12% faster since, b44db4f), 2026-11-28 13:25, load 0.60
               before, 1.28 after: local 1 worker 0.251/s, 2 workers 0.536/s (2.14x); Ray 1
               worker 0.285/s, 2 workers 0.460/s (0.86x the local pool, 1.61x Ray's one
               worker). 6,781 B out, 55,321 B back; shared states 91.0 MB. The local pool's
               0.536/s against 0.528/s at 3a4806b: within this VM's noise for six candidates.
Again at 1c1b892 (--data ../shared/data --heldout --jobs 6, 2026-11-28 23:54, a new session's VM,
nothing else running; load 0.37 -> 1.21): local 1 worker 0.256/s (0.49x), 2 workers 0.527/s;
Ray 1 worker 0.266/s (0.50x), 2 workers 0.533/s (1.01x). 6,781 B out, 55,332 B back per
candidate; once per run 21.9 MB of ground truth, 91.0 MB of shared states.
Again at b93452c (2026-11-29 04:02, a worker that answers gets its next job in the same poll;
`--data ../shared/data --heldout --jobs 6`, load 0.46 -> 1.48): local 1 worker 0.314/s, 2 workers
0.478/s (1.52x); Ray 1 worker 0.264/s, 2 workers 0.567/s (2.15x). Six candidates a row: within
this VM's noise of the figures before (0.256 / 0.527 / 0.266 / 0.533).
Again at 238649a (2026-11-29 13:06, a job submitted while a worker is free starts in `submit`;
`--data ../shared/data --heldout --jobs 6`, load 0.16 -> 1.31): local 1 worker 0.274/s, 2 workers
0.523/s (1.91x); Ray 1 worker 0.299/s, 2 workers 0.623/s (2.08x). Same bytes.
Again at b62d385 (2026-11-29 22:14, full jobs only, so the screens' early stop plays no part;
`--data ../shared/data --heldout --jobs 6`, load 1.27 -> 1.25): local 1 worker 0.321/s, 2 workers
0.569/s (1.77x); Ray 1 worker 0.309/s, 2 workers 0.530/s (1.72x); 6,791 B out, 55,422 B back.
Again at 1c4f78e (2026-11-30 01:33, a new session, the same kind of VM; `--heldout --jobs 6`,
load 0.92 -> 1.25): local 1 worker 0.326/s, 2 workers 0.688/s (2.11x); Ray 1 worker 0.299/s, 2
workers 0.568/s (1.90x); 6,791 B out, 55,422 B back.
Again at 06cb6dc (2026-11-30 06:21, `--heldout --jobs 6`, load 0.91 -> 1.34): local 1 worker
0.331/s, 2 workers 0.483/s (1.46x); Ray 1 worker 0.289/s, 2 workers 0.573/s (1.98x). The local
pool starts its workers with its first job since 46d0125, so one worker could take every warm-up
job while the other still started, and be timed cold; the warm-up now runs until every worker
has run a job. Then (06:24, load 1.02 -> 1.23): local 1 worker 0.343/s, 2 workers 0.581/s
(1.69x); Ray 1 worker 0.321/s, 2 workers 0.592/s (1.84x); same bytes.
"""
from __future__ import annotations

import argparse
import pickle
import random
import time


def _candidates(n: int) -> list[str]:
    from evolve.mutate import OfflineMutator
    from evaluator.program import parse_program
    from seeds import seed_sources
    seeds = [parse_program(s) for _, s in sorted(seed_sources().items())]
    mut = OfflineMutator(rng=random.Random(7))
    out = [p.source for p in seeds]
    for k in range(50 * n):
        if len(out) >= n:
            break
        try:
            child, _ = mut.propose_program([seeds[k % len(seeds)]])
        except Exception:  # an operator that found nothing to change
            continue
        if child.source not in out:
            out.append(child.source)
    return out[:n]


def _rate(pool, sources: list[str], kind: str, workers: int) -> float:
    """Candidates per second. kind "full": each candidate as a run makes it with held-out
    objectives, a screen and then its full job, which the pool cuts into split jobs."""
    from evolve.workers import Job
    # warm-up until every worker has run a job: a pool starts its workers with its first job,
    # and one ready first could take every warm-up job while the other was still starting
    # (then timed cold: 2026-11-30, 2 local workers 1.46x one worker's rate, not ~1.85x)
    every = lambda: getattr(pool, "workers", None) or getattr(pool, "slots", [])  # noqa: E731
    for k in range(10):
        pool.run([Job(-1 - i - 100 * k, sources[(i + k) % len(sources)], "screen") for i in range(workers)])
        if all(w.programs for w in every()):
            break
    if kind == "full":  # the split views' own reference states, made once per worker
        pool.run([Job(-1 - i, sources[i % len(sources)], "full") for i in range(workers)])
    for attr in ("bytes_sent", "bytes_received"):
        if hasattr(pool, attr):
            setattr(pool, attr, 0)
    t0 = time.perf_counter()
    res = pool.run([Job(i, s, "screen") for i, s in enumerate(sources)])
    if kind == "full":
        res = pool.run([Job(i, s, "full", r.constants, screen=r) for i, (s, r) in enumerate(zip(sources, res))])
    dt = time.perf_counter() - t0
    print(f"  {sum(r.valid for r in res)}/{len(res)} valid in {dt:.1f} s")
    return len(sources) / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--jobs", type=int, default=24)
    ap.add_argument("--heldout", action="store_true", help="full jobs with the held-out splits")
    a = ap.parse_args()
    import ray
    from evaluator.data import load
    from evaluator.evaluate import Evaluator
    from evolve.ray_pool import RayPool
    from evolve.workers import WorkerPool
    from evaluator.holdout import split_labels
    kind = "full" if a.heldout else "screen"
    sources = _candidates(a.jobs)
    splits = split_labels(load(a.data).experiments) if a.heldout else ()
    rates = {}
    for w in (1, 2):  # scale-out on this machine: 1 -> 2 workers (issue 31, item 5)
        pool = WorkerPool(a.data, workers=w, timeout_s=600.0, heldout=a.heldout, splits=splits)
        try:
            print(f"local pool, {w} worker(s)")
            rates[f"local, {w} worker{'s' if w > 1 else ''}"] = _rate(pool, sources, kind, w)
        finally:
            pool.close()
    for w in (1, 2):
        pool = RayPool(a.data, workers=w, timeout_s=600.0, heldout=a.heldout, splits=splits)
        try:
            print(f"Ray, {w} worker(s)")
            rates[f"Ray, {w} worker(s)"] = _rate(pool, sources, kind, w)
            sent, recv = pool.bytes_sent / len(sources), pool.bytes_received / len(sources)
        finally:
            pool.close()
    base = rates["local, 2 workers"]
    print(f"load average {', '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}")
    for k, r in rates.items():
        print(f"{k:20s} {r:6.3f} evaluations/s  ({r / base:.2f}x the local pool)")
    gt = load(a.data)
    shared = Evaluator(gt).shared_states(a.heldout)
    print(f"per candidate: {sent:.0f} B out (job messages), {recv:.0f} B back (Evaluations as JSON)"
          + (f"; a screen and {len(splits)} split jobs each" if splits else ""))
    print(f"once per run: ground truth {len(pickle.dumps(gt, protocol=5)) / 1e6:.1f} MB, shared states "
          f"{len(pickle.dumps(shared, protocol=5)) / 1e6:.1f} MB (object store; once per node)")
    assert not ray.is_initialized()


if __name__ == "__main__":
    main()
