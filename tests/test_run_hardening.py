"""Whole runs under hostile conditions (issue 15): hostile LLM replies from a real loopback
server and the spend cap; `--resume` of a run killed before it stored anything, with the
progress lines a log gets."""
import os
import sqlite3
import subprocess
import sys

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


def test_hostile_replies_and_spend_cap(tmp_path, monkeypatch):
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
                        llm="openai/stub-model", llm_base=stub.api_base, max_llm_tokens=1500)
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


def test_resume_of_a_run_that_stored_nothing_starts_it(tmp_path):
    """Killed before a seed was stored: `--resume` evaluates the seeds and finishes; in a log
    it writes progress lines (every second here instead of 30)."""
    db = tmp_path / "k.db"
    arch = Archive(db)
    cfg = RunConfig(budget=N_SEEDS, seed=1, workers=1, holdout=False)
    run_id = arch.start_run(cfg.to_json(), cfg.seed, None, cfg.budget)  # what a kill before the seeds leaves
    arch.close()
    env = {**os.environ, "STEPEVOLVE_PROGRESS_S": "1"}
    r = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--resume", run_id, "--budget", str(N_SEEDS),
                        "--workers", "1", "--archive", str(db)], capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    run = Archive(db, readonly=True).get_run(run_id)
    assert run["status"] == "finished" and run["n_evaluated"] == N_SEEDS
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"progress {run_id}:")]
    assert lines and f"{N_SEEDS}/{N_SEEDS} evaluations" in lines[-1] and "eval/s" in lines[-1]
