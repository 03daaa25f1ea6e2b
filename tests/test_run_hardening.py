"""Whole runs under hostile conditions (issue 15): hostile LLM replies from a real loopback
server and the spend cap; `--resume` of a run killed before it stored anything, with the
progress lines a log gets."""
import os
import sqlite3
import subprocess
import sys

from evaluator.objectives import JUDGE_REVISION
from evolve.archive import Archive
from evolve.config import RunConfig
from evolve.search import Search
from seeds import seed_sources
from tests.openai_stub_server import StubServer, chat_completion

N_SEEDS = len(seed_sources())
HOSTILE = [
    "```python\ndef predict_step_time(P, D):\n    return " + " + ".join(["P"] * 1500) + "\n```",
    "```python\ndef predict_step_time(P: float(1), D):\n    return P + D\n```",
    "```python\ndef predict_step_time(P, D):\n    return " + "(" * 300 + "P" + ")" * 300 + "\n```",
    "```python\nimport os\ndef predict_step_time(P, D):\n    return os.getpid()\n```",
]


def test_hostile_replies_and_spend_cap(tmp_path, monkeypatch, small_data):
    """Every reply is hostile; none ends the run. 380 tokens a call and a 1,500-token cap:
    two generations of two calls, then the offline operator; a resume keeps the cap."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    arch = Archive(tmp_path / "a.db")
    with StubServer() as stub:
        n = {"i": 0}

        def handle(req):
            n["i"] += 1
            return 200, chat_completion(HOSTILE[n["i"] % len(HOSTILE)], prompt_tokens=300, completion_tokens=80)
        stub.handler = handle
        cfg = RunConfig(budget=N_SEEDS + 4, seed=3, workers=1, generation_size=2, holdout=False,
                        llm="openai/stub-model", llm_base=stub.api_base, max_llm_tokens=1500, data=str(small_data))
        s = Search(cfg, arch)
        s.llm.max_retries = 0
        run_id = s.start()
        out = s.loop()
        assert stub.request_count == 4
        assert out["llm_spend"]["tokens"] == 1520 and out["llm_spend"]["calls"] == 4
        run = arch.get_run(run_id)
        assert run["status"] == "finished" and run["n_evaluated"] >= N_SEEDS + 4
        assert run["config"]["max_llm_tokens"] == 1500
        con = sqlite3.connect(tmp_path / "a.db")
        reasons = [r for (r,) in con.execute("select reject_reason from programs where operator like 'llm:%'")]
        con.close()
        assert len(reasons) == 4 and all(reasons)  # each hostile reply is a rejected row with its reason
        assert any("nested too deeply" in r or "over the cap" in r for r in reasons)

        # resume with a larger budget: the stored cap holds, no further call is made
        cfg2 = RunConfig.from_json(run["config"])
        s2 = Search(RunConfig(**{**cfg2.__dict__, "budget": N_SEEDS + 6}), arch)
        s2.resume(run_id)
        out2 = s2.loop()
        assert stub.request_count == 4 and out2["llm_spend"]["tokens"] == 1520
        assert arch.get_run(run_id)["n_evaluated"] >= N_SEEDS + 6


def test_resume_of_a_run_that_stored_nothing_starts_it(tmp_path, small_data):
    """Killed before a seed was stored: `--resume` evaluates the seeds and finishes; in a log
    it writes progress lines (every second here instead of 30). Stored by a version before the
    judge had a revision, it says in one line that its scores and the new ones may differ."""
    db = tmp_path / "k.db"
    arch = Archive(db)
    cfg = RunConfig(budget=N_SEEDS, seed=1, workers=1, holdout=False, data=str(small_data))
    old = {k: v for k, v in cfg.to_json().items() if k != "judge"}  # as a version before revisions stored it
    run_id = arch.start_run(old, cfg.seed, None, cfg.budget)  # what a kill before the seeds leaves
    arch.close()
    env = {**os.environ, "STEPEVOLVE_PROGRESS_S": "1"}
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--resume", run_id, "--budget", str(N_SEEDS),
                        "--workers", "1", "--archive", str(db)], capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    run = Archive(db, readonly=True).get_run(run_id)
    assert run["status"] == "finished" and run["n_evaluated"] == N_SEEDS
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"progress {run_id}:")]
    assert lines and f"{N_SEEDS}/{N_SEEDS} evaluations" in lines[-1] and "eval/s" in lines[-1]
    note = [ln for ln in r.stdout.splitlines() if "judge revision" in ln]
    assert len(note) == 1 and note[0].startswith(f"note: run {run_id} was scored under judge revision 1 ")
    assert RunConfig.from_json(cfg.to_json()).judge == JUDGE_REVISION > 1  # a new run stores today's


# ------------------------------------------------------------------ the disk filling up

FSIZE_LIMIT = 600_000  # bytes: the seeds' rows fit, the run's whole write-ahead log does not


def _file_size_limit():
    """In the child: no file may grow past FSIZE_LIMIT. A write past it fails with EFBIG (Python
    ignores SIGXFSZ), as a write to a full disk fails with ENOSPC: SQLite reports either as a
    failed write ("disk I/O error", "database or disk is full") and rolls the transaction back."""
    import resource
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))


def test_a_full_disk_stops_the_run_in_one_line_and_it_resumes(tmp_path, small_data):
    """Issue 33: the archive cannot grow mid-run. The run stops with one line that names the
    cause and the run to resume, keeps every candidate it wrote, and `--resume` (with room
    again) finishes the budget with the archive an uninterrupted run leaves."""
    import json
    import re

    from run_counts import run_counts
    from test_kill_resume import BUDGET, SEED, content
    db = tmp_path / "full.db"
    cmd = [sys.executable, "-m", "evolve.cli", "run", "--budget", str(BUDGET), "--workers", "1", "--no-holdout",
           "--seed", str(SEED), "--data", str(small_data)]  # the small ground truth (tests/conftest.py)
    r = subprocess.run([*cmd, "--archive", str(db)], capture_output=True, text=True, timeout=900,
                       preexec_fn=_file_size_limit)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("progress ")]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {db.resolve()}: cannot write the archive: the disk is full"), lines[0]
    run_id = re.search(r"continue with --resume (\S+)$", lines[0]).group(1)
    run, n = run_counts(db)
    assert run[0] == run_id and run[2] in ("running", "interrupted")  # never "finished"
    assert run[1] == n and 0 < n < BUDGET  # it stopped mid-run; the counter matches the stored rows
    con = sqlite3.connect(db)
    assert con.execute("pragma integrity_check").fetchone()[0] == "ok"
    con.close()
    before = content(db)
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--resume", run_id, "--budget", str(BUDGET),
                        "--workers", "1", "--archive", str(db)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    after = content(db)
    assert after["runs"] == [(BUDGET, "finished")]
    assert set(before["programs"]) <= set(after["programs"])  # nothing written before was lost
    ref = tmp_path / "ref.db"
    r = subprocess.run([*cmd, "--archive", str(ref)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert after == content(ref)  # and it is what an uninterrupted run stores
    assert json.loads(run[3])["budget"] == BUDGET


def test_workers_that_cannot_start_are_one_error_not_a_hang(tmp_path):
    """A pool whose workers exit before they are ready (here: their data directory is gone)
    gives up after START_FAILURES of them in a row with one ExecutorError, where it used to
    start one after another for ever; `evolve handover` and `evolve run` print it as one line."""
    import pytest

    from evolve.workers import START_FAILURES, ExecutorError, Job, WorkerPool
    pool = WorkerPool(str(tmp_path / "gone"), workers=1, timeout_s=60.0)
    try:
        with pytest.raises(ExecutorError, match=f"exit before they are ready \\({START_FAILURES} in a row"):
            pool.run([Job(0, "def predict_step_time(t_weights):\n    return t_weights\n", "screen")])
    finally:
        pool.close()
