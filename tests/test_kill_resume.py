"""A run killed with SIGKILL at any moment resumes with `evolve run --resume RUN`, finishes its
budget and leaves the archive an uninterrupted run leaves (offline operator, fixed seed).

The matrix: held-out objectives on (the default) and off (`--no-holdout`), killed while its
worker screens a candidate, during a full evaluation, and while the run waits for the archive's
write lock (held by another connection with BEGIN IMMEDIATE). The driver reports its phases in
STEPEVOLVE_PHASE_FILE ("EVENT GENERATION CANDIDATE" lines); the test kills the process group
from outside once the phase it wants has begun. Budgets are tiny (the 7 seeds + one generation
of 2): about 4 minutes on two idle cores.
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from run_counts import run_counts

BUDGET = 9  # the 7 seeds and one generation of 2, killed in that generation
SEED = 2
_REFERENCE: dict[bool, list] = {}


def _cmd(db, holdout: bool, *extra) -> list[str]:
    return [sys.executable, "-m", "evolve.cli", "run", "--budget", str(BUDGET), "--workers", "1",
            "--archive", str(db), *extra] + ([] if holdout else ["--no-holdout"])


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
    return _REFERENCE[holdout]


def _events(path) -> list[tuple[str, int, int]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(w, int(g), int(i)) for w, g, i in (ln.split() for ln in lines if len(ln.split()) == 3)]


def redone(killed, resumed) -> set:
    """Jobs whose result the killed run had received and the resumed run ran again: none (a
    result not written yet is kept in the archive's pending table), so a kill loses only the
    job in flight."""
    got = {(w, g, i) for w, g, i in killed if w.startswith("result-")}
    return got & {(w, g, i) for w, g, i in resumed if w.startswith("result-")}


def kill_at(db, phase_file, holdout: bool, phase: str, timeout: float = 600) -> dict:
    """Start the run, kill -9 its process group at `phase` of a generation >= 1."""
    env = {**os.environ, "STEPEVOLVE_PHASE_FILE": str(phase_file)}
    p = subprocess.Popen(_cmd(db, holdout, "--seed", str(SEED)), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    lock = None
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            time.sleep(0.05)
            ev = _events(phase_file)
            assert p.poll() is None, f"the run ended before the {phase} phase: {ev[-5:]}"
            later = [e for e in ev if e[1] >= 1]
            if phase == "screen" and any(w == "screen" for w, _, _ in later):
                time.sleep(0.2)  # its worker is screening the generation's first candidate
                break
            if phase == "full" and any(w == "full" for w, _, _ in later):
                time.sleep(1.0)  # the full job went to the head of the queue: it runs now
                break
            if phase == "lock" and any(w == "write" for w, _, _ in later):
                lock = sqlite3.connect(db, timeout=30, isolation_level=None)
                lock.execute("BEGIN IMMEDIATE")  # the run's next write waits for it
                n = len(_events(phase_file))
                while time.time() < deadline and len(_events(phase_file)) == n:
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


@pytest.mark.parametrize("holdout", [True, False], ids=["holdout", "no-holdout"])
@pytest.mark.parametrize("phase", ["screen", "full", "lock"])
def test_killed_run_resumes_to_the_uninterrupted_archive(tmp_path, tmp_path_factory, holdout, phase):
    ref = _reference(tmp_path_factory, holdout)
    db = tmp_path / "k.db"
    killed = kill_at(db, tmp_path / "phases", holdout, phase)
    run, n_eval = run_counts(db)
    assert run[2] == "running"  # nobody marked it finished
    assert run[1] == n_eval  # the counter and the stored evaluations agree: no half-written candidate
    before = content(db)
    before.pop("pending")
    env = {**os.environ, "STEPEVOLVE_PHASE_FILE": str(tmp_path / "phases2")}
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--resume", run[0], "--budget", str(BUDGET),
                        "--workers", "1", "--archive", str(db)], capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    # lost: the job in flight, and under a held lock the result the run was writing; never a
    # result it had received before (kept in the archive's pending table)
    assert len(redone(killed["events"], _events(tmp_path / "phases2"))) <= (phase == "lock")
    after = content(db)
    assert after["runs"] == [(BUDGET, "finished")]
    assert set(before["programs"]) <= set(after["programs"])  # every stored row is still there
    assert after == ref  # exactly what the uninterrupted run stored


def test_resume_of_a_finished_run_changes_nothing(tmp_path):
    """--resume of a run that reached its budget: its last generation is proposed again, found
    stored, and nothing is evaluated or written twice."""
    db = tmp_path / "f.db"
    r = subprocess.run(_cmd(db, False, "--seed", str(SEED)), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    before = content(db)
    run, _ = run_counts(db)
    r = subprocess.run(_cmd(db, False, "--resume", run[0]), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert content(db) == before
