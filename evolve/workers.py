"""Evaluation worker processes: each holds its own Evaluator; a runaway candidate is killed.

A compiled numba loop cannot be interrupted by a signal (docs/architecture.md, fact 8), so every
candidate runs in a separate process that the parent kills when the wall-clock limit passes
(HELDOUT_TIMEOUT_FACTOR times longer for a full job that also scores the held-out splits).
Workers are recycled every `recycle` programs compiled (RECYCLE: 100) because each keeps
1-2 MiB (numba's compiled code is never freed).

The reference states every worker's fits read are made once per pool, by a helper process
(`_states_main`: `Evaluator.shared_states`, which keeps what the fits read and releases the
states), and written to a file each worker (and each recycled one) loads: no worker simulates
or holds the states themselves (issue 31: ~250 MB a worker with held-out objectives).
"""
from __future__ import annotations

import functools
import math
import multiprocessing as mp
import multiprocessing.connection  # noqa: F401  (mp.connection.wait)
import os
import pickle
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from evaluator.data import load
from evaluator.evaluate import Evaluator
from evaluator.holdout import join_splits
from evaluator.program import Program, ProgramError, parse_program
from evaluator.records import Evaluation
from evaluator.screen_gate import Gate
from evolve.lifeline import die_with_parent

JobKind = Literal["screen", "full", "split"]
RECYCLE = 100  # programs a worker compiles before it is replaced: ~150-200 MB of them (issue 31)
HELDOUT_TIMEOUT_FACTOR = 4  # a full job with held-out splits fits and simulates ~3-4x as much
WAIT_CAP_S = 1.0  # longest the driver blocks in `Executor.wait` without news (it rechecks then)
START_FAILURES = 3  # workers in a row that exit before they are ready: the pool gives up (ExecutorError)


class ExecutorError(RuntimeError):
    """The executor cannot evaluate anything (its workers cannot start): one line for the user."""


@dataclass(frozen=True, eq=False)
class Job:
    """One evaluation of candidate `index` of a batch: a `screen` (surrogate fit, one
    simulation), a `full` one (refined on the candidate's own simulation, or with the
    held-out splits scored, which are not refined), or one held-out `split` of a full one.

    A full job of a run with held-out objectives that carries its `screen` Evaluation is cut by
    the executor into one `split` job per held-out split (`Executor.submit`): the screen is
    already its in-sample part, the splits run on whichever workers are free, and the joined
    result is the one a single worker would have made."""
    index: int
    source: str
    kind: JobKind = "full"
    start: dict | None = None  # constants of the screen fit, so the full job does not redo it
    screen: Evaluation | None = None  # the screen's Evaluation (driver side only, never sent)
    split: str | None = None  # a split job's `evaluator.holdout.Split.label`
    overheads: dict | None = None  # a split job's in-sample request overheads (LOMO takes them)
    batch: int = 0  # the search's batch it belongs to (results of an earlier batch are ignored)
    part_of: "Job | None" = None  # a split job's full job (driver side only, never sent)
    pinned: bool = False  # a screen refused after its fit if a constant is unpinned (RunConfig.pinned_only)
    gate: dict | None = None  # a screen's `evaluator.screen_gate.Gate` (JSON): it may stop once it cannot clear it

    @property
    def refine(self) -> bool:
        return self.kind == "full"

    def heldout(self, pool_heldout: bool) -> bool:
        """Whether this job scores the held-out splits: full jobs of a run that ranks on them."""
        return pool_heldout and self.kind == "full"


def time_limit(job: Job, timeout_s: float, pool_heldout: bool) -> float:
    """Wall-clock seconds `job` may take before its worker is killed."""
    return timeout_s * (HELDOUT_TIMEOUT_FACTOR if job.heldout(pool_heldout) else 1)


def job_message(job: Job, pool_heldout: bool) -> tuple:
    """What a worker needs to run `job`, whatever the executor:
    (source, refine, start, heldout, split, overheads, pinned, gate)."""
    return (job.source, job.refine, job.start, job.heldout(pool_heldout), job.split, job.overheads, job.pinned,
            job.gate)


@functools.lru_cache(maxsize=16)
def _program(source: str) -> Program:
    """A job's program, parsed and (once evaluated) compiled once per process: the split jobs
    of one candidate that land on the same worker share it (a compilation costs 0.15-0.25 s)."""
    return parse_program(source)


def run_job(ev: Evaluator, message: tuple) -> dict:
    """Evaluate one job message on a worker's Evaluator; the Evaluation as JSON, never raising."""
    source, refine, start, heldout, split, overheads, pinned, gate = message
    try:
        if split is not None:
            res = ev.evaluate_split(_program(source), split, overheads)
        else:
            res = ev.evaluate(_program(source), refine=refine, start=start, heldout=heldout, pinned=pinned,
                              gate=Gate.from_json(gate))
    except ProgramError as e:
        res = Evaluation(valid=False, error=f"invalid program: {e}")
    except Exception as e:  # a candidate must never take the run down
        res = Evaluation(valid=False, error=f"evaluation crashed: {type(e).__name__}: {e}")
    return res.to_json()


def _states_main(conn, data_dir, train_fraction, heldout, path):
    """The helper process of a pool: the shared states (`Evaluator.shared_states`), pickled
    into the driver's file at `path` (/proc/DRIVER/fd/N)."""
    die_with_parent()
    shared = Evaluator(load(data_dir), train_fraction=train_fraction).shared_states(heldout)
    try:
        with open(path, "wb") as f:
            pickle.dump(shared, f, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError as e:  # a full disk (or a file-size limit): the workers make their own states
        conn.send(f"not written: {e.strerror or e}")
        return
    conn.send(path)


def shared_states_file(ctx, data_dir, train_fraction, heldout, timeout_s: float = 600.0):
    """Make the shared states in a helper process (its memory goes when it ends) and return
    the file they are in, open and unlinked from the start (nothing is left behind however
    the driver ends; the helper writes and workers read it as /proc/DRIVER/fd/N), or None if
    that failed (each worker then makes its own)."""
    fd, name = tempfile.mkstemp(prefix="stepevolve_states_")
    os.unlink(name)
    f = os.fdopen(fd, "w+b")
    path = fd_path(f)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_states_main, args=(send, data_dir, train_fraction, heldout, path), daemon=True)
    proc.start()
    send.close()
    got = None
    try:
        if recv.poll(timeout_s):
            got = recv.recv()
    except (EOFError, OSError):
        got = None
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join(5)
    if got != path:
        f.close()
        return None
    return f


def fd_path(f) -> str:
    """The name other processes open this process's open file `f` by (Linux: /proc)."""
    return f"/proc/{os.getpid()}/fd/{f.fileno()}"


def _load_states(path):
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except OSError:  # no /proc (not Linux) or the driver is gone: make them here
        return None


def _worker_main(conn, data_dir, train_fraction, heldout=False, states=None):
    die_with_parent()  # a killed driver takes its workers with it
    ev = Evaluator(load(data_dir), train_fraction=train_fraction)
    shared = None if states is None else _load_states(states)  # made once for the pool (`shared_states_file`)
    if shared is not None:
        ev.adopt_states(shared)
    else:
        ev.reference_states()
    if heldout:
        ev.prepare_heldout()
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(("ok", run_job(ev, msg)))


class _Worker:
    def __init__(self, ctx, data_dir, train_fraction, heldout=False, states=None):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, data_dir, train_fraction, heldout, states),
                                daemon=True)
        self.proc.start()
        self.programs: set[str] = set()  # sources it has compiled (recycled at `recycle` of them)
        self.job: Job | None = None
        self.started = 0.0
        self.ready = False

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)


class Executor:
    """What the search needs of an executor: `submit` jobs, `poll` for finished ones (never
    blocking; each result paired with its Job, whatever the order), `busy`, `close`, and the
    count of candidates `killed` over the time limit (a cut full job's splits count once). Subclasses: `WorkerPool` (local
    processes, the default) and `evolve.ray_pool.RayPool` (a Ray cluster) implement `_poll`.

    `splits`: labels of the held-out splits (`evaluator.holdout.split_labels`); with them, a
    full job that carries its screen is cut into one split job each, and `poll` hands back
    the joined Evaluation once every split is in (`_join`, `evaluator.holdout.join_splits`)."""

    def __init__(self, timeout_s: float, heldout: bool, splits=()):
        self.timeout_s = timeout_s
        self.heldout = heldout
        self.splits = tuple(splits)
        self._killed: set[tuple] = set()  # (batch, index) of candidates with a killed job
        self.pending: list[Job] = []
        self._gather: dict[int, dict] = {}  # id(cut full job) -> its splits' results so far, by label
        self._split_seconds: dict[str, float] = {}  # label -> recent seconds of its split jobs
        self._start_failures = 0  # workers in a row that ended before they were ready
        self.memo = None  # an `evolve.judge_memo.JudgeMemo`: jobs it holds are answered from it
        self._recalled: list[tuple[Job, Evaluation]] = []  # answers from the memo, for the next `poll`

    @property
    def killed(self) -> int:
        """Candidates with a job killed over its time limit (or whose worker died)."""
        return len(self._killed)

    def _count_kill(self, job: Job) -> None:
        self._killed.add((job.batch, job.index))

    @staticmethod
    def _started(job: Job) -> None:
        """A worker took `job`: 'start-KIND BATCH INDEX' in STEPEVOLVE_PHASE_FILE, beside the
        search's phases (tests and benchmarks/kill_resume.py count the work a kill lost:
        started, never finished, run again after --resume)."""
        path = os.environ.get("STEPEVOLVE_PHASE_FILE")
        if path:
            with open(path, "a") as f:
                f.write(f"start-{job.kind} {job.batch} {job.index}\n")

    def submit(self, job: Job, first: bool = False) -> None:
        jobs = [job]
        if job.kind == "full" and self.heldout and self.splits and job.screen is not None and job.screen.valid:
            jobs = [Job(job.index, job.source, "split", split=label, overheads=job.screen.overheads, batch=job.batch,
                        part_of=job) for label in self._longest_first()]
            self._gather[id(job)] = {}
        if self.memo is not None:  # a job judged before is answered at the next poll, by no worker
            left = []
            for j in jobs:
                got = self.memo.get(job_message(j, self.heldout))
                if got is None:
                    left.append(j)
                else:
                    self._recalled.append((j, got))
            if not left:
                return
            jobs = left
        self._start()
        if first:
            self.pending[:0] = jobs
        else:
            self.pending.extend(jobs)
        self._dispatch()

    def _start(self) -> None:
        """Start the workers if they are not yet (a local pool waits for its first job that the
        memo does not answer: a run the archive answers whole starts none)."""

    def _dispatch(self) -> None:
        """Hand waiting jobs to ready workers without one, now: a job submitted while a worker is
        free starts at once, not at the next `poll`, which the search makes only after writing the
        results it is settling (~18 ms a candidate, a worker idle meanwhile). An executor without
        it hands them out in `poll` alone."""
        for slot in self._idle():
            if not self.pending:
                return
            self._give(slot)

    def _idle(self) -> list:
        """The workers (or actors' slots) ready and without a job; `_give(slot)` hands one a job."""
        return []

    def _give(self, slot) -> None:
        raise NotImplementedError

    def _longest_first(self) -> list[str]:
        """The split labels, the slowest first as recent split jobs measured them (those not
        yet measured before all, in label order): the longest-processing-time-first rule,
        so a full job's last split to start is a short one and its workers finish together
        (on 2 workers ~0.1 s of a ~1.3 s full job). Results are joined by label whatever
        the order (`_join`)."""
        return sorted(self.splits, key=lambda label: -self._split_seconds.get(label, math.inf))

    def spare(self) -> int:
        """Workers that would sit idle: free ones beyond the jobs waiting for one."""
        return self._free() - len(self.pending)

    def discard(self, batch: int) -> None:
        """Forget the jobs of `batch` that no worker has started (a cut full job: all of its
        splits, so none of them is joined); those in flight finish and come back as usual."""
        for j in self.pending:
            if j.batch == batch and j.part_of is not None:
                self._gather.pop(id(j.part_of), None)
        self.pending = [j for j in self.pending if j.batch != batch]

    def _start_failed(self, i: int, why: str) -> None:
        """Worker i ended before it was ready: replace it, or give up after START_FAILURES in a
        row (a worker that cannot read the data or import the judge never will: without this
        the pool would start one after another for ever, the run waiting on it)."""
        self._start_failures += 1
        if self._start_failures >= START_FAILURES:
            raise ExecutorError(f"the evaluation workers exit before they are ready ({self._start_failures} in a "
                                f"row, the last {why})")
        self._replace(i)

    def _replace(self, i: int) -> None:
        raise NotImplementedError

    def _free(self) -> int:
        raise NotImplementedError

    @property
    def busy(self) -> bool:
        """Whether jobs are waiting, running, or answered from the memo and not yet polled."""
        return bool(self._recalled) or self._running()

    def _running(self) -> bool:
        raise NotImplementedError

    def poll(self) -> list[tuple[Job, Evaluation]]:
        """Finished jobs; a cut full job once all its splits are back."""
        out = []
        recalled, self._recalled = self._recalled, []
        answered = self._poll()
        if self.memo is not None and answered:
            for job, res in answered:
                self.memo.put(job_message(job, self.heldout), res)
            if not self._running():  # idle (a batch's or the run's end): write what is buffered
                self.memo.flush()
        for job, res in recalled + answered:
            got = self._gather.get(id(job.part_of)) if job.part_of is not None else None
            if got is None:  # a whole job (or a split of a discarded full job: its batch is over)
                out.append((job, res))
                continue
            got[job.split] = res
            if res.seconds and math.isfinite(res.seconds):  # a moving mean of the split's cost
                last = self._split_seconds.get(job.split, res.seconds)
                self._split_seconds[job.split] = 0.7 * last + 0.3 * res.seconds
            if len(got) == len(self.splits):
                del self._gather[id(job.part_of)]
                out.append((job.part_of, self._join(job.part_of, got)))
        return out

    def _join(self, full: Job, got: dict) -> Evaluation:
        """The full Evaluation from the screen (its in-sample part) and every split's result,
        as `Evaluator.evaluate(..., heldout=True)` would have made it in one process; its
        seconds are the screen's and the splits' (the worker time the candidate took: until
        2026-11-29 the splits' alone, so a run's archive missed ~10% of its workers' time)."""
        ev = join_splits(full.screen, [(label, got[label]) for label in self.splits])
        return replace(ev, seconds=full.screen.seconds + sum(r.seconds for r in got.values()))

    def _poll(self) -> list[tuple[Job, Evaluation]]:
        raise NotImplementedError

    def wait(self, cap_s: float = WAIT_CAP_S) -> None:
        """Block until `poll` may have something to do: a worker answered, started or died,
        a running job passed its time limit, or `cap_s` went by. Returns at once where a free,
        ready worker could take a pending job, or the memo answered one. Why not sleep and poll:
        the driver shares the cores with its workers, and a 2 ms polling loop cost it ~10% of
        one of them (a profile of a 200-proposal run: 127k sleeps, 248k pipe polls)."""
        if not self._recalled:
            self._wait(cap_s)

    def _wait(self, cap_s: float) -> None:
        raise NotImplementedError

    def _wait_s(self, started: list[tuple[float, Job]], cap_s: float) -> float:
        """Seconds until the first running job (`(start time, job)` pairs) passes its limit, at
        most `cap_s`, at least 0."""
        now = time.monotonic()
        left = [t + self._limit(j) - now for t, j in started]
        return max(0.0, min([cap_s, *left]))

    def close(self) -> None:
        """Write the memo's buffered answers (`evolve.judge_memo`), then stop the workers."""
        if self.memo is not None:
            self.memo.flush()
        self._close()

    def _close(self) -> None:
        raise NotImplementedError

    def _limit(self, job: Job) -> float:
        return time_limit(job, self.timeout_s, self.heldout)

    def run(self, jobs: list[Job], each: Callable[[Job, Evaluation], list[Job] | None] | None = None
            ) -> list[Evaluation]:
        """Evaluate a batch and wait for all of it; results in job order. `each(job, result)` is
        called as each job comes back (the hand-over stores a program's starts as soon as they
        are in, so a kill loses only the programs in flight) and may return jobs to run next,
        ahead of those waiting (the hand-over's full job after its screen). Results of jobs
        this call did not submit (a search job still in flight when the run ended) are left out."""
        mine: dict[int, Job] = {}

        def put(job: Job, first: bool = False) -> None:
            mine[id(job)] = job  # kept alive, so that no other job takes its id meanwhile
            self.submit(job, first)

        for j in jobs:
            put(j)
        done: dict[int, Evaluation] = {}
        while self.busy:
            for job, res in self.poll():
                if id(job) not in mine:
                    continue
                done[id(job)] = res
                for nxt in (each(job, res) if each is not None else None) or ():
                    put(nxt, first=True)
            if self.busy:
                self.wait()
        return [done[id(j)] for j in jobs]


class WorkerPool(Executor):
    """Evaluate jobs on K local processes."""

    def __init__(self, data_dir, train_fraction=0.7, workers=2, timeout_s=60.0, recycle=RECYCLE, heldout=False,
                 splits=()):
        super().__init__(timeout_s, heldout, splits)
        self.ctx = mp.get_context("spawn")
        self._setup = (data_dir, train_fraction, bool(heldout and splits), max(1, workers))  # prepare split views?
        self.states = None
        self.args: tuple = ()
        self.recycle = recycle
        self.workers: list[_Worker] = []  # started with the first job (`_start`)

    def _start(self) -> None:
        """The shared states (a helper process), then the workers, once."""
        if self.workers:
            return
        data_dir, train_fraction, prepare, n = self._setup
        self.states = shared_states_file(self.ctx, data_dir, train_fraction, prepare)
        where = None if self.states is None else fd_path(self.states)
        self.args = (data_dir, train_fraction, prepare, where)
        self.workers = [_Worker(self.ctx, *self.args) for _ in range(n)]

    def _replace(self, i):
        self.workers[i].kill()
        self.workers[i] = _Worker(self.ctx, *self.args)

    def _running(self) -> bool:
        return bool(self.pending) or any(w.job for w in self.workers)

    def _free(self) -> int:
        return sum(w.job is None for w in self.workers)

    def _wait(self, cap_s: float) -> None:
        if self.pending and any(w.ready and w.job is None for w in self.workers):
            return
        busy = [w for w in self.workers if w.job is not None]
        timeout = self._wait_s([(w.started, w.job) for w in busy], cap_s)
        watch = [w.conn for w in self.workers if w.job is not None or not w.ready]
        mp.connection.wait(watch + [w.proc.sentinel for w in self.workers], timeout)

    def _poll(self) -> list[tuple[Job, Evaluation]]:
        """Hand out pending jobs, collect finished ones, kill overdue ones; never blocks."""
        results: list[tuple[Job, Evaluation]] = []
        for i, w in enumerate(self.workers):
            if not w.ready:
                if w.conn.poll(0):
                    try:
                        w.conn.recv()
                        w.ready = True
                        self._start_failures = 0
                    except EOFError:
                        self._start_failed(i, f"with exit code {w.proc.exitcode}; its error is printed above")
                elif not w.proc.is_alive():
                    self._start_failed(i, f"with exit code {w.proc.exitcode}; its error is printed above")
                continue
            if w.job is not None:
                if w.conn.poll(0):
                    try:
                        _, res = w.conn.recv()
                        results.append((w.job, Evaluation.from_json(res)))
                    except EOFError:
                        results.append((w.job, Evaluation(valid=False, error="worker died")))
                        self._replace(i)
                        continue
                    w.programs.add(w.job.source)
                    w.job = None
                    if len(w.programs) >= self.recycle:
                        w.conn.send(None)
                        self._replace(i)
                        continue
                elif time.monotonic() - w.started > self._limit(w.job) or not w.proc.is_alive():
                    why = "killed: over the wall-clock limit" if w.proc.is_alive() else "worker died"
                    results.append((w.job, Evaluation(valid=False, error=f"{why} ({self._limit(w.job):.0f} s)")))
                    self._count_kill(w.job)
                    self._replace(i)
                    continue
            if w.job is None and self.pending:
                # the next job at once, also to a worker that just answered: it does not wait
                # while the caller settles this result (~6-14 ms a job on a bare 2-worker pool)
                self._give(w)
        return results

    def _give(self, w) -> None:
        """The first waiting job to worker `w` (ready, without a job)."""
        w.job = self.pending.pop(0)
        w.started = time.monotonic()
        w.conn.send(job_message(w.job, self.heldout))
        self._started(w.job)

    def _idle(self) -> list:
        return [w for w in self.workers if w.ready and w.job is None]

    def _close(self):
        for w in self.workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            w.proc.join(2)
            w.kill()
        if self.states is not None:
            self.states.close()
            self.states = None
