"""Kill -9 `evolve run` at random moments, then `--resume` it: what is lost, what is left running.

    .venv/bin/python benchmarks/kill_resume.py --kills 10 --budget 24 --out /tmp/kr

Per kill: the moment (s after start), the evaluations stored before the kill, whether every
one of them is still there after the resume, how many worker processes of the killed driver
were alive 3 s later, and whether the resumed run reached its budget with a counter that
matches the stored evaluations. Candidates lost = evaluations stored before the kill and
missing after the resume, plus the whole budget of a run the resume claimed without doing.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(x) for x in out]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (reaped later) is not running
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _stored(db: Path) -> tuple[str | None, set[int], int]:
    if not db.exists():
        return None, set(), 0
    con = sqlite3.connect(db, timeout=30)
    try:
        run = con.execute("select id, n_evaluated from runs where id not like 'baselines-%'").fetchone()
        ids = {r[0] for r in con.execute("select p.id from programs p join evaluations e on e.program_id = p.id "
                                         "where p.valid")}
    except sqlite3.OperationalError:
        return None, set(), 0
    finally:
        con.close()
    return (run[0], ids, run[1]) if run else (None, ids, 0)


def one(k: int, args, rng: random.Random) -> dict:
    db = Path(args.out) / f"k{k}.db"
    db.unlink(missing_ok=True)
    base = [sys.executable, "-m", "evolve.cli", "run", "--no-holdout", "--workers", "1", "--generation-size", "2",
            "--seed", str(k), "--archive", str(db)]
    p = subprocess.Popen(base + ["--budget", str(args.budget)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    at = rng.uniform(1.0, args.max_kill_s)
    time.sleep(at)
    kids = _children(p.pid)
    os.kill(p.pid, signal.SIGKILL)  # the driver only: its workers must follow by themselves
    p.wait()
    time.sleep(3)
    orphans = sum(_alive(c) for c in kids)
    for c in kids:  # leave nothing behind whatever the result
        if _alive(c):
            os.kill(c, signal.SIGKILL)
    run_id, before, n_before = _stored(db)
    if args.no_resume:
        return {"k": k, "at": round(at, 1), "stored": len(before), "orphans": orphans, "lost": 0, "resumed": "-"}
    if run_id is None:  # killed before the run was stored: nothing to resume, nothing lost
        return {"k": k, "at": at, "stored": 0, "orphans": orphans, "lost": 0, "resumed": "not started"}
    r = subprocess.run(base[:4] + ["--resume", run_id, "--budget", str(args.budget), "--workers", "1",
                                   "--archive", str(db)], capture_output=True, text=True, timeout=1800)
    _, after, n_after = _stored(db)
    con = sqlite3.connect(db)
    status = con.execute("select status from runs where id = ?", (run_id,)).fetchone()[0]
    con.close()
    lost = len(before - after) + (args.budget if (status == "finished" and n_after < args.budget) else 0)
    return {"k": k, "at": round(at, 1), "stored": len(before), "orphans": orphans, "lost": lost,
            "resumed": f"rc {r.returncode}, {status}, {n_after} evaluated (counter {n_after == len(after)})"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--budget", type=int, default=24)
    ap.add_argument("--max-kill-s", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/kill_resume")
    ap.add_argument("--no-resume", action="store_true", help="kills only: the orphan-worker figure")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    rows = [one(k, args, rng) for k in range(args.kills)]
    for r in rows:
        print(r, flush=True)
    print(f"kills {len(rows)}: candidates lost {sum(r['lost'] for r in rows)} "
          f"({sum(r['lost'] for r in rows) / len(rows):.2f} per kill), "
          f"orphan workers 3 s after the kill {sum(r['orphans'] for r in rows)}")


if __name__ == "__main__":
    main()
