"""Kill -9 `evolve run` at chosen phases or random moments, `--resume` it, and compare the
result with an uninterrupted run of the same seed.

    .venv/bin/python benchmarks/kill_resume.py --budget 11 --out /tmp/kr            # the phase matrix
    .venv/bin/python benchmarks/kill_resume.py --random 10 --budget 24 --out /tmp/kr  # random moments

Cases: held-out objectives on and off (`--no-holdout`) x killed while its worker screens a
candidate, during a full evaluation, and while it waits for the archive's write lock (held by
another connection with BEGIN IMMEDIATE); with --random, kills at random moments instead. The
driver writes its phases to STEPEVOLVE_PHASE_FILE (evolve/search.py). Per case:

  resumed   `--resume` exited 0
  finished  the run is marked finished with n_evaluated == budget == stored evaluations
  equal     the archive equals the uninterrupted run's (programs, evaluations, frontier, cells)
  rows lost rows stored before the kill and missing after the resume
  redone    evaluations the killed run had received and the resumed run computed again
  in flight jobs handed out and not finished at the kill (one runs per worker; the rest queued)
  orphans   worker processes of the killed driver alive 3 s later (--random kills the driver only)
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_kill_resume import content, redone  # noqa: E402  (one definition of both)


def _cmd(db, args, holdout: bool, *extra) -> list[str]:
    return [sys.executable, "-m", "evolve.cli", "run", "--budget", str(args.budget), "--workers", "1",
            "--generation-size", "2", "--archive", str(db), *extra] + ([] if holdout else ["--no-holdout"])


def _events(path: Path) -> list[tuple[str, int, int]]:
    try:
        return [(w, int(g), int(i)) for w, g, i in (ln.split() for ln in path.read_text().splitlines())]
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (ProcessLookupError, OSError):
        return False


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(x) for x in out]


def one(name: str, args, holdout: bool, phase: str | None, at: float | None, seed: int) -> dict:
    out = Path(args.out)
    db, phases, phases2 = out / f"{name}.db", out / f"{name}.phases", out / f"{name}.phases2"
    for f in (db, phases, phases2, Path(f"{db}-wal"), Path(f"{db}-shm")):
        f.unlink(missing_ok=True)
    env = {**os.environ, "STEPEVOLVE_PHASE_FILE": str(phases)}
    p = subprocess.Popen(_cmd(db, args, holdout, "--seed", str(seed)), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    lock = None
    t0 = time.time()
    while p.poll() is None:
        time.sleep(0.05)
        later = [e for e in _events(phases) if e[1] >= 1]
        if at is not None and time.time() - t0 >= at:
            break
        if phase in ("screen", "full") and any(w == phase for w, _, _ in later):
            time.sleep(0.2 if phase == "screen" else 1.0)
            break
        if phase == "lock" and any(w == "write" for w, _, _ in later):
            lock = sqlite3.connect(db, timeout=30, isolation_level=None)
            lock.execute("BEGIN IMMEDIATE")
            n = len(_events(phases))
            while len(_events(phases)) == n and p.poll() is None:
                time.sleep(0.05)
            time.sleep(1.0)
            break
    kids = _children(p.pid)
    if at is not None:
        os.kill(p.pid, signal.SIGKILL)  # the driver only: its workers must follow by themselves
    else:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    time.sleep(3)
    orphans = sum(_alive(c) for c in kids)
    for c in kids:
        if _alive(c):
            os.kill(c, signal.SIGKILL)
    if lock is not None:
        lock.execute("ROLLBACK")
        lock.close()
    ev = _events(phases)
    handed = {(w, g, i) for w, g, i in ev if w in ("screen", "full")}
    done = {(w[len("result-"):], g, i) for w, g, i in ev if w.startswith("result-")}
    row = {"case": name, "kill_s": round(time.time() - t0 - 3, 1), "orphans": orphans,
           "in_flight": len(handed - done)}
    if not db.exists():
        return {**row, "resumed": "-", "finished": "-", "equal": "-", "rows_lost": 0, "redone": 0}
    con = sqlite3.connect(db, timeout=30)
    run = con.execute("select id from runs").fetchone()
    con.close()
    if run is None:
        return {**row, "resumed": "-", "finished": "-", "equal": "-", "rows_lost": 0, "redone": 0}
    before = content(db)
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--resume", run[0], "--budget", str(args.budget),
                        "--workers", "1", "--archive", str(db)], capture_output=True, text=True, timeout=3600,
                       env={**os.environ, "STEPEVOLVE_PHASE_FILE": str(phases2)})
    after = content(db)
    return {**row, "resumed": r.returncode == 0, "finished": after["runs"] == [(args.budget, "finished")],
            "equal": after == _reference(args, holdout, seed),
            "rows_lost": len(set(before["programs"]) - set(after["programs"])),
            "redone": len(redone(ev, _events(phases2)))}


_REF: dict = {}


def _reference(args, holdout: bool, seed: int) -> dict:
    if (holdout, seed) not in _REF:
        db = Path(args.out) / f"ref-{int(holdout)}-{seed}.db"
        db.unlink(missing_ok=True)
        subprocess.run(_cmd(db, args, holdout, "--seed", str(seed)), capture_output=True, check=True, timeout=3600)
        _REF[(holdout, seed)] = content(db)
    return _REF[(holdout, seed)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=11)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--random", type=int, default=0, help="kills at random moments instead of the phase matrix")
    ap.add_argument("--max-kill-s", type=float, default=60.0)
    ap.add_argument("--no-holdout-only", action="store_true")
    ap.add_argument("--out", default="/tmp/kill_resume")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    modes = [False] if args.no_holdout_only else [True, False]
    rows = []
    if args.random:
        rng = random.Random(args.seed)
        for k in range(args.random):
            h = modes[k % len(modes)]
            rows.append(one(f"random{k}-{'holdout' if h else 'no-holdout'}", args, h, None,
                            rng.uniform(1.0, args.max_kill_s), args.seed))
            print(json.dumps(rows[-1]), flush=True)
    else:
        for h in modes:
            for phase in ("screen", "full", "lock"):
                rows.append(one(f"{phase}-{'holdout' if h else 'no-holdout'}", args, h, phase, None, args.seed))
                print(json.dumps(rows[-1]), flush=True)
    ok = [r for r in rows if r["resumed"] is True]
    print(f"cases {len(rows)}: resumed {len(ok)}, finished {sum(r['finished'] is True for r in rows)}, "
          f"equal to the uninterrupted run {sum(r['equal'] is True for r in rows)}, rows lost "
          f"{sum(r['rows_lost'] for r in rows)}, finished evaluations redone {sum(r['redone'] for r in rows)}, "
          f"jobs in flight at the kill {sum(r['in_flight'] for r in rows)}, orphan workers "
          f"{sum(r['orphans'] for r in rows)}")


if __name__ == "__main__":
    main()
