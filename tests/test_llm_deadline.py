"""Issue 33: the LLM spend cap cannot leak and every call has a total deadline, against a real
loopback OpenAI-compatible server that trickles, stalls, closes mid-reply and lies about cost."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402
from openai_stub_server import StubServer, chat_completion  # noqa: E402

from evolve.config import RunConfig  # noqa: E402
from evolve.llm import DictCache, LLMMutator, ParentInfo, ProposalRequest, known_price, mutator_for, unpriced_cap  # noqa: E402
from evolve.spend import Spend  # noqa: E402

PARENT = "OVERHEAD = 15000.0\nSCALE = 1.5\n\n\ndef predict_step_time(t_weights, B):\n    return OVERHEAD + SCALE * t_weights\n"
GOOD = ("```python\nOVERHEAD = 15000.0\nSCALE = 1.5\nPER_SEQ = 20.0\n\n\ndef predict_step_time(t_weights, B):\n"
        "    return OVERHEAD + SCALE * t_weights + PER_SEQ * B\n```")
PRICE = (1e-6, 4e-6)  # USD per token


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """litellm's import and its first call's setup (seconds on a busy machine) happen here, not
    inside the short deadlines below."""
    with StubServer() as s:
        s.push_reply(GOOD)
        r = LLMMutator("openai/stub-model", api_base=s.api_base, api_key="t", max_retries=0,
                       timeout_s=60).propose("improve", [ParentInfo(PARENT)], seed=0)
        assert r.ok, r.error


@pytest.fixture
def stub():
    with StubServer() as s:
        yield s


def mutator(stub, **kw) -> LLMMutator:
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout_s", 1.5)
    return LLMMutator("openai/stub-model", api_base=stub.api_base, api_key="test", **kw)


def propose(m, seed=1):
    t0 = time.perf_counter()
    r = m.propose("improve", [ParentInfo(PARENT)], seed=seed)
    return r, time.perf_counter() - t0


# ---------------------------------------------------------------- deadline

@pytest.mark.parametrize("mode", ["trickle", "stall"])
def test_deadline_bounds_wall_time(stub, mode):
    """A reply trickled one byte every 0.2 s (an idle timeout never fires) or stalled after the
    headers: the call ends at its 1.5 s deadline, recorded as failed, and the run goes on."""
    stub.push_hostile(mode, interval_s=0.2)
    m = mutator(stub, cost_per_input_token=PRICE[0], cost_per_output_token=PRICE[1])
    m.spend = Spend(max_cost_usd=1.0)
    r, wall = propose(m)
    assert wall < 1.5 + 1.0, wall
    assert r.source is None and r.error.startswith("llm call failed: no complete reply within the deadline of 1.5 s")
    # counted at its reservation (it may have been billed), and never over the cap
    bound = m.call_bound(r.prompt)
    assert m.spend.cost_usd == pytest.approx(bound) and m.spend.reserved_usd == 0 and m.spend.calls == 1
    stub.push_reply(GOOD)
    r2, _ = propose(m, seed=2)
    assert r2.ok  # the next call works


def test_deadline_covers_retries(stub):
    """litellm's retries are inside the one deadline."""
    stub.mode = ("stall", 0.0)
    r, wall = propose(mutator(stub, max_retries=3, timeout_s=1.0))
    assert wall < 2.0 and "deadline" in r.error


def test_closed_mid_reply(stub):
    stub.push_hostile("close")
    r, wall = propose(mutator(stub))
    assert wall < 2.5 and r.source is None and r.error.startswith("llm call failed")


def test_stuck_call_does_not_hold_the_process(tmp_path):
    """A process whose call is stuck past its deadline exits at once (the call's thread is a daemon).
    A first call warms litellm up (as `_warm` does here), so the stuck call waits on the stalled
    socket: on a loaded machine a cold call's 1 s deadline could pass while its daemon thread was
    still importing litellm's modules at interpreter exit (a CI run once hung there)."""
    code = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from openai_stub_server import StubServer
from evolve.llm import LLMMutator, ParentInfo
s = StubServer().start()
s.push_reply({GOOD!r})
warm = LLMMutator("openai/stub-model", api_base=s.api_base, api_key="t", max_retries=0, timeout_s=60)
assert warm.propose("improve", [ParentInfo({PARENT!r})], seed=0).ok
s.mode = ("stall", 0.0)
m = LLMMutator("openai/stub-model", api_base=s.api_base, api_key="t", max_retries=0, timeout_s=1.0)
r = m.propose("improve", [ParentInfo({PARENT!r})], seed=1)
print(r.error)
"""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=Path(__file__).resolve().parent.parent)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "deadline" in p.stdout and time.perf_counter() - t0 < 30


def test_a_stuck_call_leaves_with_the_commands_exit_code():
    """With a call still stuck at exit the process leaves at once (`evolve.llm._leave_if_stuck`),
    and with the code the command left with (`evolve.cli.main` notes it), not 0."""
    code = f"""
import atexit, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
atexit.register(lambda: print("exit hooks ran", flush=True))  # litellm's run there too: skipped
from openai_stub_server import StubServer
from evolve.llm import LLMMutator, ParentInfo, note_exit_code
s = StubServer().start()
s.mode = ("stall", 0.0)
m = LLMMutator("openai/stub-model", api_base=s.api_base, api_key="t", max_retries=0, timeout_s=1.0)
print(m.propose("improve", [ParentInfo({PARENT!r})], seed=1).error, flush=True)
note_exit_code("error: a message")
sys.exit("error: a message")
"""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parent.parent)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "deadline" in p.stdout and p.stderr.strip().endswith("error: a message")
    assert "exit hooks ran" not in p.stdout  # it left before them
    assert time.perf_counter() - t0 < 60


# ---------------------------------------------------------------- impossible costs

@pytest.mark.parametrize("usage,why", [
    ({"cost": -3.0}, "negative"),
    ({"cost": 1e6}, "more than $10"),
    ({"cost": "NaN"}, "not a number"),
    ({"cost": 0.5}, "100x price x tokens"),  # 100 + 5 tokens at $1-4/Mtok cost $3e-5
    ({"prompt_tokens": -1000}, "negative token count"),
    ({"completion_tokens": 10_000_000}, "more than $10"),
])
def test_lying_cost_stops_spending(stub, usage, why):
    body = chat_completion(GOOD, prompt_tokens=100, completion_tokens=5)
    body["usage"].update(usage)
    stub.push(200, body)
    cache = DictCache()
    m = mutator(stub, cost_per_input_token=PRICE[0], cost_per_output_token=PRICE[1], cache=cache)
    m.spend = Spend(max_cost_usd=0.5)
    r, _ = propose(m)
    assert r.source is None and why in r.error, r.error
    assert r.error.startswith("llm call 1 (openai/stub-model): ") and "no further LLM calls" in r.error
    assert m.spend.halted == r.error and m.spend.exhausted() == r.error
    bound = m.call_bound(r.prompt)
    assert m.spend.cost_usd == pytest.approx(bound) and bound <= 0.5  # counted at its reservation, not the lie
    # the failure is kept (for --resume) but is never a cache hit
    assert len(cache) == 1 and cache.get(r.cache_key) is None
    stub.push_reply(GOOD)
    r2, _ = propose(m, seed=2)
    assert r2.error.startswith("llm spend cap reached: llm call 1") and stub.request_count == 1


def test_unknown_cost_under_a_cost_cap_stops(stub):
    stub.push_reply(GOOD)
    m = mutator(stub)
    m.spend = Spend(max_cost_usd=1.0)
    r, _ = propose(m)
    assert "cost unknown under a cost cap" in r.error and m.spend.halted


def test_honest_cost_is_counted(stub):
    stub.push_reply(GOOD, prompt_tokens=1000, completion_tokens=100)
    m = mutator(stub, cost_per_input_token=PRICE[0], cost_per_output_token=PRICE[1])
    m.spend = Spend(max_cost_usd=1.0)
    r, _ = propose(m)
    assert r.ok and r.cost_usd == pytest.approx(1000e-6 + 400e-6) == m.spend.cost_usd
    assert m.spend.reserved_usd == 0 and m.spend.halted is None


def test_spend_never_passes_the_cap_with_concurrent_calls(stub):
    """Four calls at a time, each honestly billing its whole bound: the spend stops under the cap."""
    from evolve.llm import MESSAGE_OVERHEAD_TOKENS, build_prompt
    m = mutator(stub, cost_per_input_token=PRICE[0], cost_per_output_token=PRICE[1], max_tokens=2048)
    prompt = build_prompt("improve", [ParentInfo(PARENT)])
    bound = m.call_bound(prompt)
    n_in = sum(len(x["content"].encode()) + MESSAGE_OVERHEAD_TOKENS for x in prompt)

    def handler(req):
        time.sleep(0.05)
        return 200, chat_completion(GOOD, prompt_tokens=n_in, completion_tokens=2048)  # the whole bound
    stub.handler = handler
    cap = bound * 5.5
    m.spend = Spend(max_cost_usd=cap)
    for g in range(4):
        m.propose_many([ProposalRequest("improve", [ParentInfo(PARENT)], None, 10 * g + i) for i in range(4)], 4)
        assert m.spend.cost_usd + m.spend.reserved_usd <= cap
    assert m.spend.cost_usd <= cap and m.spend.halted is None
    assert stub.request_count == 5  # five bounds fit under 5.5, the sixth would not
    assert "would pass the cap" in m.spend.exhausted()


# ---------------------------------------------------------------- prices and configuration

def test_unknown_price_refuses_a_cost_cap():
    cfg = RunConfig(llm="openai/stub-model", max_llm_cost=1.0)
    assert "does not know the price" in unpriced_cap(cfg)
    assert unpriced_cap(RunConfig(llm="openai/stub-model", max_llm_cost=1.0, llm_price_in=1, llm_price_out=4)) is None
    assert "both" in unpriced_cap(RunConfig(llm="openai/stub-model", max_llm_cost=1.0, llm_price_in=1))
    assert unpriced_cap(RunConfig(llm="openai/stub-model")) is None  # no cost cap, nothing to enforce
    assert known_price("openai/gpt-4o-mini") is not None
    assert unpriced_cap(RunConfig(llm="openai/gpt-4o-mini", max_llm_cost=1.0)) is None


def test_config_prices_and_deadline_reach_the_mutator():
    cfg = RunConfig(llm="openai/stub-model", llm_price_in=2.0, llm_price_out=8.0, llm_timeout=7.0)
    m = mutator_for(cfg)
    assert m.price() == (2e-6, 8e-6) and m.timeout_s == 7.0
    assert RunConfig.from_json(cfg.to_json()) == cfg
    assert RunConfig().llm_timeout == 120.0


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "evolve.cli", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=Path(__file__).resolve().parent.parent)


def test_cli_refuses_an_unpriced_cap(tmp_path):
    p = _cli("run", "--llm", "openai/stub-model", "--max-llm-cost", "1", "--budget", "1",
             "--archive", str(tmp_path / "a.db"))
    assert p.returncode != 0 and "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not know the price of 'openai/stub-model'" in lines[0]
    p = _cli("run", "--llm-price-in", "1", "--budget", "1", "--archive", str(tmp_path / "b.db"))
    assert p.returncode == 2 and "--llm-price-in needs --llm MODEL" in p.stderr
    p = _cli("run", "--llm", "x/y", "--llm-timeout", "nan", "--budget", "1", "--archive", str(tmp_path / "c.db"))
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_resume_keeps_prices_and_deadline():
    import argparse

    from evolve.config import config_from_args
    ns = argparse.Namespace(budget=9, seed=0, data=None, workers=1, llm=None, llm_base=None, generation_size=8,
                            timeout=60.0, train_fraction=0.7, replay=None, max_ops=30, max_cond=3, max_consts=10,
                            no_holdout=False, executor="local", ray_address=None, max_llm_cost=None,
                            max_llm_tokens=None, llm_price_in=None, llm_price_out=None, llm_timeout=None)
    stored = RunConfig(llm="openai/x", max_llm_cost=2.0, llm_price_in=1.0, llm_price_out=3.0, llm_timeout=9.0).to_json()
    cfg = config_from_args(ns, stored)
    assert (cfg.llm_price_in, cfg.llm_price_out, cfg.llm_timeout, cfg.budget) == (1.0, 3.0, 9.0, 9)
    ns.llm_timeout = 30.0
    assert config_from_args(ns, stored).llm_timeout == 30.0
    assert config_from_args(ns).llm_timeout == 30.0
    ns.llm_timeout = None
    assert config_from_args(ns).llm_timeout == 120.0
    assert math.isfinite(cfg.llm_timeout)
    assert threading.active_count() >= 1
