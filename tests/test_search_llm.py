"""The search with the LLM operator through litellm's real client, against a local stub server;
then the same run replayed from the archive's cache with the server gone."""
import re
import sqlite3

import pytest

from evolve.archive import Archive
from evolve.config import RunConfig
from evolve.search import Search
from evolve.spend import Spend
from seeds import seed_sources
from tests.openai_stub_server import StubServer, chat_completion

BUDGET = len(seed_sources()) + 4  # the seeds, then one generation of 4 LLM proposals

REPLY = """Here is a better model:
```python
BASE = 15000.0
PER_DECODE = {k}.0
PER_PREFILL = 1.0

def predict_step_time(P, D, B):
    return BASE + PER_DECODE * D + PER_PREFILL * P + {k} * B
```"""


def _handler():
    n = {"i": 0}

    def handle(req):
        n["i"] += 1
        i = n["i"]
        if i % 4 == 0:
            return 200, chat_completion("I cannot help with that.")  # no code: recorded, not fatal
        if i % 5 == 0:
            return 500, {"error": {"message": "overloaded"}}
        return 200, chat_completion(REPLY.format(k=10 + i), prompt_tokens=300, completion_tokens=80)
    return handle


def _programs(db):
    con = sqlite3.connect(db)
    rows = con.execute("select canonical_hash, operator, valid, reject_reason from programs order by id").fetchall()
    con.close()
    return rows


def test_llm_run_then_exact_replay(tmp_path, monkeypatch, small_data):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    db = tmp_path / "a.db"
    arch = Archive(db)
    with StubServer() as stub:
        stub.handler = _handler()
        cfg = RunConfig(budget=BUDGET, seed=5, workers=1, generation_size=4, holdout=False, llm="openai/stub-model",
                        llm_base=stub.api_base, data=str(small_data))  # the small ground truth (tests/conftest.py)
        s = Search(cfg, arch)
        s.llm.max_retries = 0
        run_id = s.start()
        s.loop()
        assert stub.request_count >= 4
        sent = stub.requests[0]["messages"]
        assert "predict_step_time" in sent[-1]["content"]  # the parent's source is in the prompt
    rows = _programs(db)
    ops = [r[1] for r in rows]
    assert any(op.startswith("llm:") for op in ops)
    reasons = [r[3] or "" for r in rows if not r[2]]
    assert any("no code" in x or "error" in x.lower() or "overloaded" in x for x in reasons)
    con = sqlite3.connect(db)
    calls = con.execute("select count(*), sum(prompt_tokens) from llm_calls").fetchone()
    con.close()
    assert calls[0] >= 3 and calls[1] >= 900  # tokens recorded per call
    assert arch.get_run(run_id)["n_evaluated"] >= BUDGET

    # replay: same seed, no server; every reply comes from the archive's cache
    db2 = tmp_path / "b.db"
    src, dst = sqlite3.connect(db), sqlite3.connect(db2)
    src.backup(dst)  # the cache lives in the archive (a plain file copy would miss the WAL)
    src.close()
    dst.close()
    arch2 = Archive(db2)
    cfg2 = RunConfig(budget=BUDGET, seed=5, workers=1, generation_size=4, holdout=False, llm="openai/stub-model",
                     llm_base="http://127.0.0.1:9/v1", replay=run_id, data=str(small_data))
    s2 = Search(cfg2, arch2)
    run2 = s2.start()
    s2.loop()
    con = sqlite3.connect(db2)
    a = con.execute("select canonical_hash, operator, valid from programs where run_id=? order by id", (run_id,)).fetchall()
    b = con.execute("select canonical_hash, operator, valid from programs where run_id=? order by id", (run2,)).fetchall()
    con.close()
    llm_a = [x for x in a if x[1].startswith("llm:") and x[2]]
    llm_b = [x for x in b if x[1].startswith("llm:") and x[2]]
    assert llm_a and [x[0] for x in llm_a] == [x[0] for x in llm_b]


def test_lying_and_stuck_server_under_a_cost_cap(tmp_path, monkeypatch, small_data):
    """Issue 33: a server that stalls past the call deadline, then reports a negative cost. The
    stuck call is a recorded failure, the lie stops the LLM (named by call index and model), the
    run finishes with the offline operator and the spend never passes the cap, resume included."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    arch = Archive(tmp_path / "c.db")
    with StubServer() as stub:
        n = {"i": 0}

        def handle(req):
            n["i"] += 1
            body = chat_completion(REPLY.format(k=10 + n["i"]), prompt_tokens=300, completion_tokens=80)
            if n["i"] == 3:
                body["usage"]["cost"] = -5.0
            return 200, body
        stub.handler = handle
        stub.push_hostile("stall")  # the first call never completes
        cfg = RunConfig(budget=BUDGET + 4, seed=5, workers=1, generation_size=2, holdout=False,
                        llm="openai/stub-model", llm_base=stub.api_base, max_llm_cost=0.5,
                        llm_price_in=1.0, llm_price_out=4.0, llm_timeout=2.0, data=str(small_data))
        s = Search(cfg, arch)
        s.llm.max_retries = 0
        run_id = s.start()
        out = s.loop()
        s.close()
        spend = out["llm_spend"]
        # the stalled request came first, so the lie is the third handled reply: the 4th call
        # (calls of one generation run together, so it holds index 3 or 4)
        assert re.match(r"llm call [34] \(openai/stub-model\): reported cost is negative", spend["halted"])
        assert 0 < spend["cost_usd"] <= 0.5 and stub.request_count == 4
        assert arch.get_run(run_id)["n_evaluated"] >= BUDGET + 4
        con = sqlite3.connect(tmp_path / "c.db")
        reasons = [r for (r,) in con.execute("select reject_reason from programs where operator like 'llm:%' "
                                             "and valid = 0")]
        con.close()
        assert any("no complete reply within the deadline of 2 s" in r for r in reasons)
        assert any("reported cost is negative" in r for r in reasons)
        # the failed calls (possibly billed) are counted again on resume: the spend is the same
        assert Spend.of_run(arch, run_id, 0.5).cost_usd == pytest.approx(spend["cost_usd"])
