"""A run killed with SIGKILL mid-flight keeps a consistent archive and `--resume` finishes it."""
import os
import signal
import sqlite3
import subprocess
import sys
import time

from run_counts import run_counts


def test_sigkill_then_resume(tmp_path):
    db = tmp_path / "k.db"
    cmd = [sys.executable, "-m", "evolve.cli", "run", "--no-holdout", "--budget", "40", "--seed", "2", "--workers", "1",
           "--generation-size", "2", "--archive", str(db)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        time.sleep(2)
        if db.exists():
            try:
                run, _ = run_counts(db)
            except sqlite3.OperationalError:
                continue
            if run and run[1] >= 9:
                break
    os.killpg(p.pid, signal.SIGKILL)  # the run and its worker processes, mid-generation
    p.wait(30)
    run, n_eval = run_counts(db)
    assert run[2] == "running"  # nobody marked it finished
    assert run[1] == n_eval >= 9  # the counter and the stored evaluations agree: no half-written candidate
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--resume", run[0], "--budget", "16",
                        "--workers", "1", "--archive", str(db)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    run2, n_eval2 = run_counts(db)
    assert run2[2] == "finished" and run2[1] == n_eval2 >= 16
    con = sqlite3.connect(db)
    hashes = [h for (h,) in con.execute("select canonical_hash from programs where valid")]
    con.close()
    assert len(hashes) == len(set(hashes))
