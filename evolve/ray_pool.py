"""Ray as the evaluation engine: the local pool's interface over actors on a Ray cluster.

`evolve run --executor ray [--ray-address ADDR]` sends every candidate to one of `workers`
actors (one CPU each). What goes where (docs/distributed.md):

  once per run   the ground truth, put in the object store by the driver, and the states
                 every worker would otherwise recompute (the calibrated reference simulation
                 and, with held-out objectives, the splits' own ones), made once by a Ray task
                 and put in the object store; each actor reads both (zero-copy on its node);
  per candidate  the job message (program source, kind, screen constants) out, the
                 Evaluation as JSON back, a few kB each way (`bytes_sent`, `bytes_received`).

A candidate over its time limit has its actor killed (`ray.kill`: the process dies, as a
compiled numba loop cannot be interrupted) and a fresh actor takes its place. Actors belong to
the driver: when the driver dies, Ray ends them too. Results come back paired with their Job,
and the search integrates them in proposal order, so a seed gives the same archive whatever
the executor and the number of workers.
"""
from __future__ import annotations

import copy
import logging
import os
import pickle
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

from evaluator import PINNED_ENV
from evaluator.data import load
from evaluator.evaluate import Evaluator
from evaluator.records import Evaluation
from evolve.workers import RECYCLE, WAIT_CAP_S, Executor, Job, job_message, run_job


PLACE_WARN_S = 60.0  # no actor ready this long after the pool started: say what the cluster lacks (once)


class RayExecutorError(RuntimeError):
    """Ray cannot be started or reached; the message is one line for the user."""


class _RayWorker:
    """One evaluation process on the cluster, holding its own Evaluator."""

    def __init__(self, gt, shared: dict, train_fraction: float):
        self.ev = Evaluator(gt, train_fraction=train_fraction)
        # the object store hands out read-only arrays, which the compiled fits do not take: copies
        self.ev.adopt_states(copy.deepcopy(shared))
        if "split" in shared:  # a run with held-out objectives: its split jobs' views, made now
            self.ev.prepare_heldout()

    def ready(self) -> tuple[int, str]:
        """(process id, node id): answered once the Evaluator exists."""
        import ray
        return os.getpid(), ray.get_runtime_context().get_node_id()

    def evaluate(self, message: tuple) -> dict:
        return run_job(self.ev, message)


def _shared_states(gt, train_fraction: float, heldout: bool) -> dict:
    """The states every worker needs, computed once per run (`Evaluator.shared_states`)."""
    return Evaluator(gt, train_fraction=train_fraction).shared_states(heldout)


@dataclass
class _Slot:
    actor: object
    ready_ref: object
    ready: bool = False
    job: Job | None = None
    ref: object = None
    started: float = 0.0
    programs: set = field(default_factory=set)  # sources it has compiled
    pid: int | None = None
    node: str | None = None


class RayPool(Executor):
    """Evaluate jobs on `workers` Ray actors, on a cluster at `address` or a local one."""

    def __init__(self, data_dir, train_fraction=0.7, workers=2, timeout_s=60.0, recycle=RECYCLE, heldout=False,
                 address: str | None = None, splits=()):
        super().__init__(timeout_s, heldout, splits)
        if address:
            _token_auth_if_available()
        try:
            import ray
        except ImportError as e:  # pragma: no cover - ray is a pinned dependency
            raise RayExecutorError(f"the Ray executor needs the ray package ({e})") from None
        self.ray = ray
        self.recycle = recycle
        self.owns = False
        if not ray.is_initialized():
            if address:
                check_address(address)
            try:
                if address:
                    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
                else:
                    # "local": a private instance, even where another Ray cluster runs on this machine
                    ray.init(address="local", num_cpus=max(1, workers), include_dashboard=False,
                             log_to_driver=False, logging_level=logging.ERROR)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise RayExecutorError(f"cannot reach the Ray cluster at {address or 'a new local instance'}: "
                                       f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
            self.owns = True
        gt = load(data_dir)
        self.gt_ref = ray.put(gt)
        # the driver's BLAS settings (evaluator.PINNED_ENV): a cluster's nodes did not inherit them
        env = {"env_vars": {k: os.environ[k] for k in PINNED_ENV if k in os.environ}}
        self.shared_ref = ray.remote(num_cpus=1, runtime_env=env)(_shared_states).remote(self.gt_ref, train_fraction,
                                                                                          heldout)
        self.actor_cls = ray.remote(num_cpus=1, runtime_env=env)(_RayWorker)
        self.train_fraction = train_fraction
        self.slots = [self._new_slot() for _ in range(max(1, workers))]
        self.place_warn_s = PLACE_WARN_S
        self._born, self._placed_or_told = time.monotonic(), False
        self.bytes_sent = 0
        self.bytes_received = 0
        self.jobs_done = 0

    def _new_slot(self) -> _Slot:
        actor = self.actor_cls.remote(self.gt_ref, self.shared_ref, self.train_fraction)
        return _Slot(actor, actor.ready.remote())

    def _replace(self, i: int) -> None:
        try:
            self.ray.kill(self.slots[i].actor, no_restart=True)
        except Exception:  # already dead
            pass
        self.slots[i] = self._new_slot()

    def _running(self) -> bool:
        return bool(self.pending) or any(s.job is not None for s in self.slots)

    def _free(self) -> int:
        return sum(s.job is None for s in self.slots)

    @property
    def nodes(self) -> set[str]:
        """Nodes the ready actors run on (for tests and the run summary)."""
        return {s.node for s in self.slots if s.node}

    def _wait(self, cap_s: float) -> None:
        if self.pending and any(s.ready and s.job is None for s in self.slots):
            return
        busy = [s for s in self.slots if s.job is not None]
        refs = [s.ready_ref for s in self.slots if not s.ready] + [s.ref for s in busy]
        timeout = self._wait_s([(s.started, s.job) for s in busy], cap_s)
        if refs:
            self.ray.wait(refs, num_returns=1, timeout=timeout)
        else:
            time.sleep(timeout)

    def _poll(self) -> list[tuple[Job, Evaluation]]:
        """Hand out pending jobs, collect finished ones, kill overdue ones; never blocks."""
        ray = self.ray
        results: list[tuple[Job, Evaluation]] = []
        waiting = [s.ready_ref for s in self.slots if not s.ready] + [s.ref for s in self.slots if s.job is not None]
        finished = set(ray.wait(waiting, num_returns=len(waiting), timeout=0)[0]) if waiting else set()
        for i, s in enumerate(self.slots):
            if not s.ready:
                if s.ready_ref in finished:
                    try:
                        s.pid, s.node = ray.get(s.ready_ref)
                        s.ready = True
                        self._start_failures = 0
                    except ray.exceptions.RayError as e:
                        # its constructor (or the states it was given) raised: a new actor would too.
                        # Ray 2.x reports that as ActorDiedError(actor_init_failed), not RayTaskError,
                        # and the pool used to start one actor after another for ever
                        if isinstance(e, ray.exceptions.RayTaskError) or getattr(e, "actor_init_failed", False):
                            raise RayExecutorError(f"a Ray worker could not start: {_first_line(e)}") from None
                        self._start_failed(i, f"ended: Ray says \"{_first_line(e)}\"")  # its process died: try again
                continue
            if s.job is not None:
                if s.ref in finished:
                    try:
                        res = ray.get(s.ref)
                        self.bytes_received += len(pickle.dumps(res))
                        results.append((s.job, Evaluation.from_json(res)))
                    except ray.exceptions.RayError as e:
                        results.append((s.job, Evaluation(valid=False, error=f"worker died ({_first_line(e)})")))
                        self._replace(i)
                        continue
                    s.programs.add(s.job.source)
                    s.job, s.ref = None, None
                    self.jobs_done += 1
                    if len(s.programs) >= self.recycle:  # compiled candidates accumulate in a process
                        self._replace(i)
                        continue
                elif time.monotonic() - s.started > self._limit(s.job):
                    results.append((s.job, Evaluation(valid=False, error=f"killed: over the wall-clock limit "
                                                                         f"({self._limit(s.job):.0f} s)")))
                    self._count_kill(s.job)
                    self._replace(i)
                    continue
            if s.job is None and self.pending:  # at once, also to an actor that just answered
                self._give(s)
        self._tell_if_unplaced()
        return results

    def _give(self, s) -> None:
        """The first waiting job to slot `s` (its actor ready, without a job)."""
        s.job = self.pending.pop(0)
        msg = job_message(s.job, self.heldout)
        self.bytes_sent += len(pickle.dumps(msg))
        s.ref = s.actor.evaluate.remote(msg)
        s.started = time.monotonic()
        self._started(s.job)

    def _idle(self) -> list:
        return [s for s in self.slots if s.ready and s.job is None]

    def _tell_if_unplaced(self) -> None:
        """One line on stderr when no actor is ready `place_warn_s` after the pool started: on a
        cluster whose CPUs other jobs hold, Ray keeps the actors (and the states task) pending
        without a word (its own warning goes to the driver's log, which the pool turns off), and
        the run sat at 0 evaluations. Not an error: the CPUs may come free."""
        if self._placed_or_told:
            return
        if any(s.ready for s in self.slots):
            self._placed_or_told = True
            return
        waited = time.monotonic() - self._born
        if waited > self.place_warn_s:
            self._placed_or_told = True
            free = self.ray.available_resources().get("CPU", 0.0)
            total = self.ray.cluster_resources().get("CPU", 0.0)
            print(f"waiting for Ray: none of the {len(self.slots)} evaluation actors is ready after {waited:.0f} s; "
                  f"the cluster has {free:g} of its {total:g} CPUs free, and each actor needs 1", file=sys.stderr,
                  flush=True)

    def _close(self) -> None:
        try:  # a states task still pending (a cluster without a free CPU) must not start after we left
            self.ray.cancel(self.shared_ref)
        except Exception:  # noqa: BLE001 - done already, or the cluster is gone
            pass
        for s in self.slots:
            try:
                self.ray.kill(s.actor, no_restart=True)
            except Exception:
                pass
        self.slots = []
        if self.owns and self.ray.is_initialized():
            self.ray.shutdown()


def _token_auth_if_available() -> None:
    """Send the cluster token when there is one: `ray start --head` (Ray 2.60) turns token
    authentication on, and a client without it waits forever instead of failing. A cluster
    without authentication accepts a client that sends a token. Must run before `import ray`
    reads the mode; an explicit RAY_AUTH_MODE is left alone."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or \
            os.path.exists(os.path.expanduser("~/.ray/auth_token")):
        os.environ["RAY_AUTH_MODE"] = "token"


def check_address(address: str, timeout_s: float = 10.0, deadline_s: float = 10.0) -> None:
    """Fail in seconds, with one line, where `ray.init` would wait for minutes: nothing answers
    at host:port. `auto` is resolved as Ray resolves it (RAY_ADDRESS, the last `ray start` in
    Ray's temp dir, a local GCS process), within `deadline_s`; `ray://host:port` is checked at
    host:port. At most deadline_s + timeout_s (20 s by default) in all."""
    target = address
    if address == "auto":
        target = _resolve_auto(deadline_s)
    elif address.startswith("ray://"):
        target = address[len("ray://"):].split("/", 1)[0]
    elif "://" in address:
        raise RayExecutorError(f"--ray-address must be host:port, ray://host:port or auto, not {address!r}")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise RayExecutorError(f"--ray-address must be host:port (as `ray start --head` prints), not {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout_s, deadline_s)).close()
    except (OSError, OverflowError, ValueError) as e:
        where = address if target == address else f"{address} ({target})"
        raise RayExecutorError(f"cannot reach the Ray cluster at {where}: {getattr(e, 'strerror', None) or e}") \
            from None


def _resolve_auto(deadline_s: float) -> str:
    """host:port of the cluster `--ray-address auto` means, or RayExecutorError within deadline_s."""
    box: dict = {}

    def find():
        try:
            from ray._private.services import get_ray_address_from_environment
            box["addr"] = get_ray_address_from_environment("auto", None)
        except BaseException as e:  # noqa: BLE001 - reported below
            box["exc"] = e

    t = threading.Thread(target=find, daemon=True, name="ray-auto")
    t.start()
    t.join(deadline_s)
    if t.is_alive():
        raise RayExecutorError(f"--ray-address auto: no Ray cluster found within {deadline_s:g} s")
    addr = box.get("addr")
    if "exc" in box or not addr or addr == "auto":
        why = _first_line(box["exc"]) if "exc" in box else "none found"
        raise RayExecutorError(f"--ray-address auto: no running Ray cluster on this machine ({why}); "
                               "start one with `ray start --head` or give host:port")
    return str(addr)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[-1] if text else type(e).__name__
