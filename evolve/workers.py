"""Evaluation worker processes: each holds its own Evaluator; a runaway candidate is killed.

A compiled numba loop cannot be interrupted by a signal (DESIGN.md section 8), so every
candidate runs in a separate process that the parent kills when the wall-clock limit passes.
Workers are recycled every `recycle` candidates because each compiled candidate keeps ~1 MiB.
"""
from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from dataclasses import dataclass


@dataclass
class Job:
    key: int
    source: str
    refine: bool
    start: dict | None = None  # constants of the screen fit, so the full job does not redo it


def _worker_main(conn, data_dir, train_fraction):
    from evaluator.data import load
    from evaluator.evaluate import Evaluator
    from evaluator.program import ProgramError, parse_program
    ev = Evaluator(load(data_dir), train_fraction=train_fraction)
    ev.reference_states()
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        key, source, refine, start = msg
        try:
            prog = parse_program(source)
            res = ev.evaluate(prog, refine=refine, start=start)
            conn.send(("ok", (key, res.to_dict())))
        except ProgramError as e:
            conn.send(("ok", (key, {"valid": False, "error": f"invalid program: {e}", "objectives": {}})))
        except Exception as e:  # a candidate must never take the run down
            conn.send(("ok", (key, {"valid": False, "error": f"evaluation crashed: {type(e).__name__}: {e}",
                                    "trace": traceback.format_exc(limit=3), "objectives": {}})))


class _Worker:
    def __init__(self, ctx, data_dir, train_fraction):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, data_dir, train_fraction), daemon=True)
        self.proc.start()
        self.done = 0
        self.job: Job | None = None
        self.started = 0.0
        self.ready = False

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)


class WorkerPool:
    """Evaluate batches of jobs on K processes; results come back keyed, whatever the order."""

    def __init__(self, data_dir, train_fraction=0.7, workers=2, timeout_s=60.0, recycle=300):
        self.ctx = mp.get_context("spawn")
        self.args = (data_dir, train_fraction)
        self.timeout_s = timeout_s
        self.recycle = recycle
        self.workers = [_Worker(self.ctx, *self.args) for _ in range(max(1, workers))]
        self.killed = 0
        self.pending: list[Job] = []

    def _replace(self, i):
        self.workers[i].kill()
        self.workers[i] = _Worker(self.ctx, *self.args)

    def submit(self, job: Job, first: bool = False) -> None:
        if first:
            self.pending.insert(0, job)
        else:
            self.pending.append(job)

    @property
    def busy(self) -> bool:
        return bool(self.pending) or any(w.job for w in self.workers)

    def poll(self) -> dict[int, dict]:
        """Hand out pending jobs, collect finished ones, kill overdue ones; never blocks."""
        results: dict[int, dict] = {}
        for i, w in enumerate(self.workers):
            if not w.ready:
                if w.conn.poll(0):
                    try:
                        w.conn.recv()
                        w.ready = True
                    except EOFError:
                        self._replace(i)
                elif not w.proc.is_alive():
                    self._replace(i)
                continue
            if w.job is None and self.pending:
                w.job = self.pending.pop(0)
                w.started = time.monotonic()
                w.conn.send((w.job.key, w.job.source, w.job.refine, w.job.start))
            elif w.job is not None:
                if w.conn.poll(0):
                    try:
                        _, (key, res) = w.conn.recv()
                        results[key] = res
                    except EOFError:
                        results[w.job.key] = {"valid": False, "error": "worker died", "objectives": {}}
                        self._replace(i)
                        continue
                    w.job = None
                    w.done += 1
                    if w.done >= self.recycle:
                        w.conn.send(None)
                        self._replace(i)
                elif time.monotonic() - w.started > self.timeout_s or not w.proc.is_alive():
                    why = "killed: over the wall-clock limit" if w.proc.is_alive() else "worker died"
                    results[w.job.key] = {"valid": False, "error": f"{why} ({self.timeout_s:.0f} s)",
                                          "objectives": {}}
                    self.killed += 1
                    self._replace(i)
        return results

    def run(self, jobs: list[Job]) -> dict[int, dict]:
        """Evaluate a batch and wait for all of it."""
        for j in jobs:
            self.submit(j)
        results: dict[int, dict] = {}
        while self.busy:
            results.update(self.poll())
            time.sleep(0.002)
        return results

    def close(self):
        for w in self.workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            w.proc.join(2)
            w.kill()
