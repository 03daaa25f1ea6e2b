"""Kill -9 `evolve run` at chosen phases or random moments, `--resume` it, and compare the
result with an uninterrupted run of the same seed.

    .venv/bin/python benchmarks/kill_resume.py --out /tmp/kr                      # local and Ray matrix
    .venv/bin/python benchmarks/kill_resume.py --executor ray --out /tmp/kr       # Ray only
    .venv/bin/python benchmarks/kill_resume.py --phases lock-wait --out /tmp/kr   # one phase
    .venv/bin/python benchmarks/kill_resume.py --random 10 --budget 24 --out /tmp/kr  # random moments

Cases: executor (local worker processes; Ray on a one-node cluster on 127.0.0.1 that this
script starts and stops) x held-out objectives on and off (`--no-holdout`) x killed while its
worker screens a candidate, during a full evaluation (one of its held-out splits), while the
run holds the archive's write lock in the middle of writing a candidate ("lock"), and, with
`--phases ... lock-wait`, while it waits for the lock another connection holds. The kills,
phases and the archive comparison are tests/test_kill_resume.py's (`kill_at`, `content`,
`lost`, `redone`); with --random, the driver alone is killed at random moments instead. The
uninterrupted reference is a local run (the archive does not depend on the executor). Per case:

  resumed          `--resume` exited 0 (and wrote no traceback)
  finished         the run is marked finished with n_evaluated == budget
  equal            the archive equals the uninterrupted run's (programs, evaluations, frontier, cells)
  candidates lost  candidates whose job a worker had taken before the kill and the resumed run
                   ran again (the work the kill lost; jobs only queued are not counted)
  rows lost        rows stored before the kill and missing after the resume
  redone           results the killed run had received and the resumed run computed again
  orphans          (--random) worker processes of the killed driver alive 3 s later
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
# one definition of the kills, the phases and the comparison
from test_kill_resume import ROOT, _cmd, _env, _events, content, kill_at, lost, ray_cluster, redone  # noqa: E402


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (ProcessLookupError, OSError):
        return False


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(x) for x in out]


def _paths(out: Path, name: str) -> tuple[Path, Path, Path]:
    db, phases, phases2 = out / f"{name}.db", out / f"{name}.phases", out / f"{name}.phases2"
    for f in (db, phases, phases2, Path(f"{db}-wal"), Path(f"{db}-shm")):
        f.unlink(missing_ok=True)
    return db, phases, phases2


def _resume(args, db: Path, phases2: Path, address: str | None) -> tuple[bool, dict | None]:
    con = sqlite3.connect(db, timeout=30)
    run = con.execute("select id from runs").fetchone()
    con.close()
    if run is None:
        return False, None
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--resume", run[0], "--budget", str(args.budget),
                        "--workers", "1", "--archive", str(db)], capture_output=True, text=True, timeout=3600,
                       env=_env(phases2, address), cwd=ROOT)
    if r.returncode != 0 or "Traceback" in r.stderr:
        print(f"  resume failed: {r.stderr.strip()[-300:]}", file=sys.stderr)
    return r.returncode == 0 and "Traceback" not in r.stderr, content(db)


def one_phase(name: str, args, holdout: bool, phase: str, address: str | None) -> dict:
    out = Path(args.out)
    db, phases, phases2 = _paths(out, name)
    t0 = time.time()
    killed = kill_at(db, phases, holdout, phase, address=address, budget=args.budget, seed=args.seed,
                     extra=("--generation-size", str(args.generation_size)))
    row = {"case": name, "kill_s": round(time.time() - t0, 1)}
    before = content(db)
    ok, after = _resume(args, db, phases2, address)
    resumed = _events(phases2)
    return {**row, "resumed": ok, "finished": after["runs"] == [(args.budget, "finished")],
            "equal": after == _reference(args, holdout, args.seed),
            "candidates_lost": len(lost(killed["events"], resumed)),
            "rows_lost": len(set(before["programs"]) - set(after["programs"])),
            "redone": len(redone(killed["events"], resumed))}


def one_random(name: str, args, holdout: bool, at: float) -> dict:
    """Kill the driver alone (its workers must follow by themselves) `at` seconds in."""
    out = Path(args.out)
    db, phases, phases2 = _paths(out, name)
    p = subprocess.Popen(_cmd(db, holdout, "--seed", str(args.seed), "--generation-size", str(args.generation_size),
                              budget=args.budget), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, env=_env(phases), cwd=ROOT)
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < at:
        time.sleep(0.05)
    kids = _children(p.pid)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    time.sleep(3)
    orphans = sum(_alive(c) for c in kids)
    for c in kids:
        if _alive(c):
            os.kill(c, signal.SIGKILL)
    row = {"case": name, "kill_s": round(at, 1), "orphans": orphans}
    if not db.exists():
        return {**row, "resumed": "-", "finished": "-", "equal": "-", "candidates_lost": 0, "rows_lost": 0,
                "redone": 0}
    before = content(db)
    ok, after = _resume(args, db, phases2, None)
    if after is None:
        return {**row, "resumed": "-", "finished": "-", "equal": "-", "candidates_lost": 0, "rows_lost": 0,
                "redone": 0}
    ev, ev2 = _events(phases), _events(phases2)
    return {**row, "resumed": ok, "finished": after["runs"] == [(args.budget, "finished")],
            "equal": after == _reference(args, holdout, args.seed), "candidates_lost": len(lost(ev, ev2)),
            "rows_lost": len(set(before["programs"]) - set(after["programs"])), "redone": len(redone(ev, ev2))}


_REF: dict = {}


def _reference(args, holdout: bool, seed: int) -> dict:
    if (holdout, seed) not in _REF:
        db = Path(args.out) / f"ref-{int(holdout)}-{seed}.db"
        db.unlink(missing_ok=True)
        subprocess.run(_cmd(db, holdout, "--seed", str(seed), "--generation-size", str(args.generation_size),
                            budget=args.budget), capture_output=True, check=True, timeout=3600, cwd=ROOT)
        _REF[(holdout, seed)] = content(db)
    return _REF[(holdout, seed)]


def _yes(v) -> str:
    return {True: "yes", False: "**no**"}.get(v, str(v))


def table(rows: list[dict]) -> str:
    lines = ["| case | resumed | finished | equal to uninterrupted | candidates lost | rows lost | redone |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {_yes(r['resumed'])} | {_yes(r['finished'])} | {_yes(r['equal'])} | "
                     f"{r['candidates_lost']} | {r['rows_lost']} | {r['redone']} |")
    n = len(rows)
    lines.append(f"| **{n} cases** | {sum(r['resumed'] is True for r in rows)}/{n} | "
                 f"{sum(r['finished'] is True for r in rows)}/{n} | {sum(r['equal'] is True for r in rows)}/{n} | "
                 f"max {max((r['candidates_lost'] for r in rows), default=0)} | "
                 f"{sum(r['rows_lost'] for r in rows)} | {sum(r['redone'] for r in rows)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=9, help="the 7 seeds and one generation of 2 by default")
    ap.add_argument("--generation-size", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--executor", choices=("local", "ray", "both"), default="both")
    ap.add_argument("--phases", nargs="+", default=["screen", "full", "lock"],
                    choices=("screen", "full", "lock", "lock-wait"))
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
            rows.append(one_random(f"random{k}-{'holdout' if h else 'no-holdout'}", args, h,
                                   rng.uniform(1.0, args.max_kill_s)))
            print(json.dumps(rows[-1]), flush=True)
        print(f"orphan workers {sum(r['orphans'] for r in rows)}")
    else:
        executors = ["local", "ray"] if args.executor == "both" else [args.executor]
        for ex in executors:
            if ex == "ray":
                cluster = ray_cluster()
                address = cluster.__enter__()
            else:
                cluster, address = None, None
            try:
                for h in modes:
                    for phase in args.phases:
                        name = f"{ex} {'holdout' if h else 'no-holdout'} {phase}".replace(" ", "-")
                        rows.append(one_phase(name, args, h, phase, address))
                        print(json.dumps(rows[-1]), flush=True)
            finally:
                if cluster is not None:
                    cluster.__exit__(None, None, None)
    print(table(rows))


if __name__ == "__main__":
    main()
