"""A run killed with SIGKILL at any moment resumes with `evolve run --resume RUN`, finishes its
budget and leaves the archive an uninterrupted run leaves (offline operator, fixed seed).

The matrix: held-out objectives on (the default) and off (`--no-holdout`), killed while its
worker screens a candidate, during a full evaluation, and while the run holds the archive's
write lock: in the middle of writing a candidate (benchmarks/kill_resume.py also kills it while
it waits for the lock another connection holds); with local worker processes, and
(three of the cases: each phase once, each held-out setting) with the Ray executor on a real
one-node cluster on 127.0.0.1, started once for the module (benchmarks/kill_resume.py runs all
six on Ray). The driver reports its phases in STEPEVOLVE_PHASE_FILE ("EVENT GENERATION
CANDIDATE" lines, and "start-KIND BATCH CANDIDATE" when a worker takes a job); the test kills
the driver's process group from outside once the phase it wants has begun (a Ray actor is not
in it: Ray ends the actors of a dead driver). The uninterrupted reference is a local run: the
archive does not depend on the executor (tests/test_search.py). Budgets are tiny (the 8 seeds
+ one candidate of generation 1) and the data small (`small_data`, tests/conftest.py: 6 of the
16 experiments, every held-out regime kept): what is checked does not depend on its size.
"""
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_nodes import CLUSTER_ENV, free_port, start_head
from run_counts import run_counts

BUDGET = 9  # the 8 seeds and one candidate of generation 1, killed in that generation
SEED = 2
_REFERENCE: dict[bool, list] = {}
_REFERENCE_DB: dict[bool, Path] = {}  # the uninterrupted runs' archives, by held-out setting
_DATA: list[str] = []  # the module's ground truth (`use_small_data`; none: the embedded default)


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def use_small_data(small_data):
    _DATA[:] = [str(small_data)]


def _cmd(db, holdout: bool, *extra, address: str | None = None, budget: int = BUDGET) -> list[str]:
    ray = ["--executor", "ray", "--ray-address", address] if address else []
    # --promote-unpinned: the generation killed here is one candidate, which the default would
    # refuse after its fit when a constant is unpinned, leaving no full evaluation to kill
    return [sys.executable, "-m", "evolve.cli", "run", "--budget", str(budget), "--workers", "1",
            "--archive", str(db), "--handover-starts", "1", "--promote-unpinned",
            *(("--data", _DATA[0]) if _DATA else ()), *ray, *extra] + \
        ([] if holdout else ["--no-holdout"])


def _env(phase_file, address: str | None = None) -> dict:
    return {**os.environ, "STEPEVOLVE_PHASE_FILE": str(phase_file), **(CLUSTER_ENV if address else {})}


@contextlib.contextmanager
def ray_cluster(num_cpus: int = 2):
    """A one-node Ray cluster on 127.0.0.1 (`ray start --head --block` in its own session, so
    ending that process stops this cluster's processes and no other Ray instance); yields its
    address. Two CPUs: a killed driver's actor may hold one until Ray sees its owner gone."""
    port = free_port()
    p = start_head(port, {**os.environ, **CLUSTER_ENV}, num_cpus)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        p.terminate()
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):  # whatever of its session is left (one stayed once)
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)


def content(db) -> dict:
    """Everything a run leaves that does not depend on when it ran: programs, evaluations
    (objectives as stored), the frontier and cells tables and the run's counter."""
    con = sqlite3.connect(db, timeout=30)
    try:
        progs = con.execute("select id, canonical_hash, operator, generation, parent_ids, valid, reject_reason "
                            "from programs order by id").fetchall()
        evals = con.execute("select program_id, stage, valid, error, objectives, constants from evaluations "
                            "order by program_id").fetchall()
        frontier = con.execute("select program_id from frontier order by program_id").fetchall()
        cells = con.execute("select cell_key, program_id from cells order by cell_key").fetchall()
        runs = con.execute("select n_evaluated, status from runs").fetchall()
        pending = con.execute("select count(*) from pending_results").fetchone()[0]
    finally:
        con.close()
    return {"programs": progs, "evaluations": [(p, s, v, e, json.loads(o), json.loads(c))
                                              for p, s, v, e, o, c in evals],
            "frontier": frontier, "cells": cells, "runs": runs, "pending": pending}


def _reference(tmp_path_factory, holdout: bool) -> dict:
    if holdout not in _REFERENCE:
        db = tmp_path_factory.mktemp("ref") / "ref.db"
        r = subprocess.run(_cmd(db, holdout, "--seed", str(SEED)), capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-2000:]
        _REFERENCE[holdout] = content(db)
        _REFERENCE_DB[holdout] = db
    return _REFERENCE[holdout]


def _events(path) -> list[tuple[str, int, int]]:
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(w, int(g), int(i)) for w, g, i in (ln.split() for ln in lines if len(ln.split()) == 3)]


def _started(events) -> list[tuple[str, int, int]]:
    """The jobs workers took, as (kind, generation, candidate): a split job counts for its
    candidate's full evaluation."""
    gen = {}
    out = []
    for w, a, b in events:
        if w == "batch":
            gen[b] = a
        elif w.startswith("start-"):
            kind = w[len("start-"):]
            out.append(("full" if kind == "split" else kind, gen.get(a, -1), b))
    return out


def _in_flight(events, kind: str) -> bool:
    """Whether a worker took a job of `kind` ("full": a split too) in a generation >= 1 whose
    result the run has not logged yet: that job is running or its answer is unread, so a kill
    now loses it. (A fixed sleep after the first such start once woke after a fast screen had
    answered and before the next job started: nothing was in flight. Waiting for the start to
    be the last line logged missed a quick full evaluation: the run writes the screen it keeps
    right after handing the full job to a free worker.)"""
    started = _started(events)
    if not started or started[-1][0] != kind or started[-1][1] < 1:
        return False
    _, g, i = started[-1]
    last = max(n for n, e in enumerate(events) if e[0].startswith("start-"))
    return (f"result-{kind}", g, i) not in events[last:]


def test_a_job_is_in_flight_until_its_result_is_logged():
    """The phase lines of a CI run whose quick full evaluation was missed: the run logged the
    screen it kept right after handing out the full job, so the start was last for a moment
    only. The full job is in flight until its result is logged, whatever the run logs between."""
    ev = [("batch", 1, 2), ("full", 1, 0), ("start-full", 2, 0), ("kept-screen", 1, 0)]
    assert _in_flight(ev, "full") and not _in_flight(ev, "screen")
    assert not _in_flight(ev + [("result-full", 1, 0)], "full")
    assert not _in_flight([("batch", 0, 1), ("start-full", 1, 3)], "full")  # generation 0: the seeds


def lost(killed, resumed) -> set:
    """Candidates whose work the kill lost: a job a worker had taken in the killed run (a
    screen, or a full evaluation or one of its splits) that the resumed run handed out again.
    Jobs only queued at the kill are not work lost."""
    again = {(w, g, i) for w, g, i in resumed if w in ("screen", "full")}
    return {(g, i) for k, g, i in _started(killed) if (k, g, i) in again}


def redone(killed, resumed) -> set:
    """Jobs whose result the killed run had stored (its candidate written, or the result kept
    in the archive's pending table) and the resumed run ran again: none. A result received in
    the moment before it is stored is lost like the job in flight (a kill once fell there)."""
    written = {(g, i) for w, g, i in killed if w == "write"}
    stored = {("result-" + w[len("kept-"):], g, i) for w, g, i in killed if w.startswith("kept-")} | \
        {(w, g, i) for w, g, i in killed if w.startswith("result-") and (g, i) in written}
    return stored & {(w, g, i) for w, g, i in resumed if w.startswith("result-")}


def kill_at(db, phase_file, holdout: bool, phase: str, timeout: float = 600, address: str | None = None,
            budget: int = BUDGET, seed: int = SEED, extra: tuple = ()) -> dict:
    """Start the run, kill -9 its process group at `phase` of a generation >= 1: "screen" and
    "full" while a worker runs such a job (its start the last thing logged), "lock" while the run
    holds the archive's write lock in the middle of writing a candidate (its transaction held open
    by STEPEVOLVE_HOLD_WRITE_S, evolve/archive.py), "lock-wait" while it waits for the lock another
    connection holds."""
    env = _env(phase_file, address)
    if phase == "lock":
        env["STEPEVOLVE_HOLD_WRITE_S"] = "600"
    p = subprocess.Popen(_cmd(db, holdout, "--seed", str(seed), *extra, address=address, budget=budget),
                         stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, env=env, cwd=ROOT)
    lock = None
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            time.sleep(0.01 if phase in ("screen", "full") else 0.05)
            ev = _events(phase_file)
            assert p.poll() is None, f"the run ended before the {phase} phase: {ev[-5:]}"
            later = [e for e in ev if e[1] >= 1]
            if phase in ("screen", "full") and _in_flight(ev, phase):
                break  # a worker took such a job and has not answered: kill it in the middle
            if phase == "lock" and any(w == "in-write" for w, _, _ in later):
                time.sleep(0.2)  # the run holds the write lock, its candidate's rows sent to SQLite
                break
            if phase == "lock-wait" and any(w == "write" for w, _, _ in later):
                lock = sqlite3.connect(db, timeout=30, isolation_level=None)
                lock.execute("BEGIN IMMEDIATE")  # the run's next write waits for it
                n = len(_events(phase_file))
                while time.time() < deadline and not any(w.startswith("result-") for w, _, _ in
                                                          _events(phase_file)[n:]):
                    time.sleep(0.05)  # a result came in: the run goes to write it
                time.sleep(1.0)
                break
        else:
            pytest.fail(f"no {phase} phase in {timeout} s")
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(30)
        if lock is not None:
            lock.execute("ROLLBACK")
            lock.close()
    return {"events": _events(phase_file)}


def check_kill_and_resume(tmp_path, ref: dict, holdout: bool, phase: str, address: str | None = None) -> None:
    db = tmp_path / "k.db"
    killed = kill_at(db, tmp_path / "phases", holdout, phase, address=address)
    run, n_eval = run_counts(db)
    assert run[2] == "running"  # nobody marked it finished
    assert run[1] == n_eval  # the counter and the stored evaluations agree: no half-written candidate
    assert json.loads(run[3])["executor"] == ("ray" if address else "local")
    con = sqlite3.connect(db, timeout=30)
    assert con.execute("pragma integrity_check").fetchone()[0] == "ok"  # a held transaction rolled back
    con.close()
    before = content(db)
    before.pop("pending")
    # the stored config names the executor and the cluster: --resume alone goes back to them
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--resume", run[0], "--budget", str(BUDGET),
                        "--workers", "1", "--archive", str(db)], capture_output=True, text=True, timeout=900,
                       env=_env(tmp_path / "phases2", address), cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    resumed = _events(tmp_path / "phases2")
    # lost: the job in flight, a result not stored yet (under a held lock, the one the run was
    # writing); never a result it had stored (written, or kept in the archive's pending table)
    assert not redone(killed["events"], resumed)
    assert len(lost(killed["events"], resumed)) <= 1  # one worker: at most one candidate's work
    if not phase.startswith("lock"):  # the kill came while a worker ran a job the resumed run redid
        assert lost(killed["events"], resumed), killed["events"][-6:]
    after = content(db)
    assert after["runs"] == [(BUDGET, "finished")]
    assert set(before["programs"]) <= set(after["programs"])  # every stored row is still there
    assert after == ref  # exactly what the uninterrupted run stored


# The whole matrix (held-out on and off x screen / full / lock, local and Ray: 12 cases) is
# `benchmarks/kill_resume.py`; the suite keeps each phase and each ranking once, and one Ray
# case, so that CI stays within its time (each case is a killed run and its resumption).
@pytest.mark.parametrize("holdout, phase", [(True, "screen"), (False, "full"), (True, "lock")],
                         ids=["holdout-screen", "no-holdout-full", "holdout-lock"])
def test_killed_run_resumes_to_the_uninterrupted_archive(tmp_path, tmp_path_factory, holdout, phase):
    check_kill_and_resume(tmp_path, _reference(tmp_path_factory, holdout), holdout, phase)


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster() as address:
        yield address


@pytest.mark.parametrize("holdout, phase", [(True, "full")], ids=["holdout-full"])
def test_killed_ray_run_resumes_to_the_uninterrupted_archive(tmp_path, tmp_path_factory, cluster, holdout, phase):
    """The same on the Ray executor: the driver is killed, its actor ends with it, and the
    resumed driver's new actor finishes the run on the same cluster."""
    pytest.importorskip("ray")
    check_kill_and_resume(tmp_path, _reference(tmp_path_factory, holdout), holdout, phase, address=cluster)


def test_resume_of_a_finished_run_changes_nothing(tmp_path, tmp_path_factory):
    """--resume of a run that reached its budget: its last generation is proposed again, found
    stored, and nothing is evaluated or written twice. The run resumed is a copy of the module's
    uninterrupted reference (made once, as the matrix above uses it)."""
    _reference(tmp_path_factory, False)
    db = tmp_path / "f.db"
    src, dst = sqlite3.connect(_REFERENCE_DB[False]), sqlite3.connect(db)
    try:
        src.backup(dst)  # a consistent copy, whatever the source's journal holds
    finally:
        src.close()
        dst.close()
    before = content(db)
    assert before["runs"] == [(BUDGET, "finished")]
    run, _ = run_counts(db)
    r = subprocess.run(_cmd(db, False, "--resume", run[0]), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert content(db) == before
