"""LLM mutation operator: litellm's real client path against a local OpenAI-compatible stub."""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402
from openai_stub_server import StubServer, chat_completion  # noqa: E402

from evaluator.components import COMPONENTS  # noqa: E402
from evaluator.objectives import Caps  # noqa: E402
from evolve.llm import (  # noqa: E402
    DictCache,
    LLMMutator,
    ParentInfo,
    ProposalRequest,
    build_prompt,
    cache_key,
)
from evolve.reply_parse import ReplyError, extract_program, propose_valid  # noqa: E402

PARENT = '''"""Parent under test."""
OVERHEAD = 15000.0
SCALE = 1.5


def predict_step_time(t_weights, B):
    return OVERHEAD + SCALE * t_weights
'''

GOOD = '''A better idea: add a per-sequence cost.

```python
OVERHEAD = 15000.0
SCALE = 1.5
PER_SEQ = 20.0


def predict_step_time(t_weights, B):
    return OVERHEAD + SCALE * t_weights + PER_SEQ * B
```
'''

DIFF = '''I will add the batch term.

<<<<<<< SEARCH
    return OVERHEAD + SCALE * t_weights
=======
    return OVERHEAD + SCALE * t_weights + PER_SEQ * B
>>>>>>> REPLACE

<<<<<<< SEARCH
SCALE = 1.5
=======
SCALE = 1.5
PER_SEQ = 20.0
>>>>>>> REPLACE
'''

FORBIDDEN = '''```python
import os
OVERHEAD = 15000.0


def predict_step_time(t_weights):
    return OVERHEAD + t_weights
```'''


def parent(src: str = PARENT) -> ParentInfo:
    return ParentInfo(source=src, errors_table="experiment        e2e_err\nllama-2-70b/gen   0.21",
                      worst_steps="P=2048 D=3 B=40: predicted 16000 measured 31000",
                      objectives={"step_mape": 0.123, "e2e_mean": 0.2})


@pytest.fixture
def stub():
    with StubServer() as s:
        yield s


def mutator(stub, **kw) -> LLMMutator:
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout_s", 10)
    return LLMMutator("openai/stub-model", api_base=stub.api_base, api_key="test", **kw)


# ---------------------------------------------------------------- through litellm

def test_full_program_reply_is_valid(stub):
    stub.push_reply(GOOD)
    r = mutator(stub).propose("improve", [parent()], Caps(), seed=1)
    assert r.error is None and r.ok
    assert "PER_SEQ * B" in r.source and r.program is not None
    assert r.program.const_names == ["OVERHEAD", "SCALE", "PER_SEQ"]
    assert not r.cached and r.latency_s > 0 and r.reply_text == GOOD
    req = stub.requests[0]
    assert req["model"] == "stub-model" and req["seed"] == 1 and req["max_tokens"] == 2048


def test_diff_reply_applied_to_parent(stub):
    stub.push_reply(DIFF)
    r = mutator(stub).propose("improve", [parent()], Caps(), seed=1)
    assert r.error is None, r.error
    assert "PER_SEQ = 20.0" in r.source and "+ PER_SEQ * B" in r.source
    assert '"""Parent under test."""' in r.source  # the rest of the parent is kept


def test_empty_reply(stub):
    stub.push_reply("")
    r = mutator(stub).propose("improve", [parent()], seed=1)
    assert r.source is None and r.error.startswith("empty reply")


def test_none_content_and_empty_choices(stub):
    stub.push_reply(None)
    body = chat_completion("x")
    body["choices"] = []
    stub.push(200, body)
    m = mutator(stub)
    assert "no content" in m.propose("improve", [parent()], seed=1).error
    assert "no choices" in m.propose("improve", [parent()], seed=2).error


def test_malformed_json_body(stub):
    stub.push(200, '{"id": "x", "choices": [')
    r = mutator(stub).propose("improve", [parent()], seed=1)
    assert r.source is None and r.error.startswith("llm call failed")


def test_reply_without_code(stub):
    stub.push_reply("I think the program is already good; no change needed.")
    r = mutator(stub).propose("improve", [parent()], seed=1)
    assert r.source is None and r.error.startswith("no code")


def test_forbidden_program_rejected_but_recorded(stub):
    stub.push_reply(FORBIDDEN)
    r = mutator(stub).propose("improve", [parent()], seed=1)
    assert r.error.startswith("invalid program:") and "import" in r.error
    assert r.source is not None and "import os" in r.source and r.program is None


def test_over_cap_program_rejected(stub):
    body = " + ".join(["t_weights"] * 8)
    stub.push_reply(f"```python\nA = 1.0\n\ndef predict_step_time(t_weights):\n    return A * {body}\n```")
    r = mutator(stub).propose("improve", [parent()], Caps(ops=5), seed=1)
    assert r.error.startswith("invalid program: complexity over the cap") and r.source


def test_http_500_is_an_error_not_an_exception(stub):
    stub.push(500, {"error": {"message": "overloaded", "type": "server_error"}})
    r = mutator(stub).propose("improve", [parent()], seed=1)
    assert r.source is None and r.error.startswith("llm call failed") and "overloaded" in r.error
    assert stub.request_count == 1  # retries disabled


def test_server_down():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = LLMMutator("openai/stub-model", api_base=f"http://127.0.0.1:{port}/v1", api_key="test",
                   max_retries=0, timeout_s=5)
    t0 = time.perf_counter()
    r = m.propose("improve", [parent()], seed=1)
    assert r.source is None and r.error.startswith("llm call failed")
    assert time.perf_counter() - t0 < 5


def test_tokens_and_cost_from_per_token_prices(stub):
    stub.push_reply(GOOD, prompt_tokens=1234, completion_tokens=56)
    r = mutator(stub, cost_per_input_token=1e-6, cost_per_output_token=4e-6).propose("improve", [parent()], seed=1)
    assert (r.prompt_tokens, r.completion_tokens) == (1234, 56)
    assert r.cost_usd == pytest.approx(1234e-6 + 56 * 4e-6)


def test_cost_unknown_without_prices(stub):
    stub.push_reply(GOOD)
    assert mutator(stub).propose("improve", [parent()], seed=1).cost_usd is None


def test_cache_hit_makes_no_request(stub):
    cache = DictCache()
    stub.push_reply(GOOD, prompt_tokens=100, completion_tokens=20)
    m = mutator(stub, cache=cache, cost_per_input_token=1e-6, cost_per_output_token=1e-6)
    first = m.propose("improve", [parent()], seed=3)
    assert stub.request_count == 1 and not first.cached and len(cache) == 1
    second = m.propose("improve", [parent()], seed=3)
    assert stub.request_count == 1
    assert second.cached and second.source == first.source and second.error is None
    assert second.cache_key == first.cache_key
    assert (second.prompt_tokens, second.completion_tokens, second.cost_usd) == (100, 20, first.cost_usd)
    # another seed is another key: goes to the server
    stub.push_reply(GOOD)
    third = m.propose("improve", [parent()], seed=4)
    assert stub.request_count == 2 and not third.cached
    assert first.cache_key == cache_key("openai/stub-model", first.prompt, 0.7, 2048, 3)


def test_transport_errors_are_not_cached(stub):
    cache = DictCache()
    stub.push(500, {"error": {"message": "boom"}})
    m = mutator(stub, cache=cache)
    assert m.propose("improve", [parent()], seed=1).error
    assert len(cache) == 0


def test_replay_only(stub):
    cache = DictCache()
    stub.push_reply(GOOD)
    mutator(stub, cache=cache).propose("improve", [parent()], seed=1)
    replay = mutator(stub, cache=cache, replay_only=True)
    miss = replay.propose("improve", [parent()], seed=2)
    assert miss.error == "replay: no cached reply" and miss.source is None
    hit = replay.propose("improve", [parent()], seed=1)
    assert hit.cached and hit.ok
    assert stub.request_count == 1


def test_prompt_sent_contains_parent_and_components(stub):
    stub.push_reply(GOOD)
    p = parent()
    mutator(stub).propose("improve", [p], Caps(ops=17), seed=1)
    msgs = stub.requests[0]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user"]
    system, user = msgs[0]["content"], msgs[1]["content"]
    for name in COMPONENTS:
        assert f"- {name}:" in system
    assert "17 operations" in system and "<<<<<<< SEARCH" in system
    assert "return OVERHEAD + SCALE * t_weights" in user
    assert "llama-2-70b/gen" in user and "predicted 16000" in user and "step_mape: 0.123" in user
    assert "2 operations, 0 conditionals, 2 constants" in user


def test_propose_many_keeps_order_and_overlaps(stub):
    active, peak, lock = [0], [0], threading.Lock()

    def handler(req):
        seed = req["seed"]
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05 * (4 - seed))  # later requests finish first
        with lock:
            active[0] -= 1
        return 200, chat_completion(f"```python\nA = {seed}.0\n\ndef predict_step_time(P):\n    return A + P\n```")

    stub.handler = handler
    reqs = [ProposalRequest("improve", [parent()], Caps(), seed) for seed in range(4)]
    results = mutator(stub).propose_many(reqs, max_concurrency=4)
    assert [r.seed for r in results] == [0, 1, 2, 3]
    assert [r.source.splitlines()[0] for r in results] == [f"A = {s}.0" for s in range(4)]
    assert all(r.ok for r in results)
    assert peak[0] >= 2


# ---------------------------------------------------------------- prompts

def test_build_prompt_kinds():
    a, b, c = parent(), parent(PARENT.replace("1.5", "2.5")), parent(PARENT.replace("15000", "9000"))
    x = build_prompt("crossover", [a, b, c], Caps(30, 3, 10))
    user = x[1]["content"]
    assert "Parent A" in user and "Parent B" in user and "Parent C" in user and "9000" in user
    assert "Simplify" in build_prompt("simplify", [a], None)[1]["content"]
    with pytest.raises(ValueError):
        build_prompt("crossover", [a], None)
    with pytest.raises(ValueError):
        build_prompt("mutate", [a], None)


def test_parent_that_does_not_validate_still_renders():
    user = build_prompt("improve", [parent("def predict_step_time(x):\n    return x\n")], None)[1]["content"]
    assert "does not validate" in user


# ---------------------------------------------------------------- reply parsing (no network)

def test_last_python_block_wins():
    draft = "```python\nA = 1.0\n\ndef predict_step_time(P):\n    return A\n```"
    final = "```python\nA = 2.0\n\ndef predict_step_time(P):\n    return A + P\n```"
    assert extract_program(f"Draft:\n{draft}\nFinal:\n{final}\n", PARENT).startswith("A = 2.0")


def test_diff_inside_fence_and_crlf():
    text = "```python\r\n" + DIFF.split("\n\n", 1)[1].replace("\n", "\r\n") + "```\r\n"
    src = extract_program(text, PARENT)
    assert "PER_SEQ * B" in src


def test_diff_that_does_not_apply():
    bad = "<<<<<<< SEARCH\n    return SOMETHING_ELSE\n=======\n    return 1.0\n>>>>>>> REPLACE\n"
    with pytest.raises(ReplyError, match="diff does not apply"):
        extract_program(bad, PARENT)
    with pytest.raises(ReplyError, match="no parent"):
        extract_program(bad, None)


def test_malformed_and_truncated():
    with pytest.raises(ReplyError, match="truncated"):
        extract_program("<<<<<<< SEARCH\n    return OVERHEAD + SCALE * t_weights\n=====", PARENT)
    with pytest.raises(ReplyError, match="truncated"):
        extract_program("```python\nA = 1.0\n\ndef predict_step_time(P):\n    return", PARENT)
    with pytest.raises(ReplyError, match="malformed diff"):
        extract_program("<<<<<<< SEARCH\nx\n=======\ny\n=======\nz\n>>>>>>> REPLACE\n", PARENT)


def test_bare_definition_and_think_tags():
    text = ("<think>maybe ```python\ndef predict_step_time(D):\n    return 0\n```</think>\n"
            "Here it is:\nOVERHEAD = 100.0\nSCALE = 2.0\n\ndef predict_step_time(t_weights, B):\n"
            "    return OVERHEAD + SCALE * t_weights + B\n\nThis adds B.")
    src = extract_program(text, PARENT)
    assert src.startswith("OVERHEAD = 100.0") and src.rstrip().endswith("+ B")
    assert "This adds" not in src and "return 0" not in src
    assert propose_valid(text, PARENT).params == ["t_weights", "B"]


def test_unchanged_and_empty():
    with pytest.raises(ReplyError, match="unchanged"):
        extract_program(f"```python\n{PARENT}```", PARENT)
    for empty in ("", "   \n", None, "<think>hmm</think>"):
        with pytest.raises(ReplyError, match="empty"):
            extract_program(empty, PARENT)


def test_propose_valid_keeps_source_on_rejection():
    with pytest.raises(ReplyError) as ei:
        propose_valid(FORBIDDEN, PARENT)
    assert str(ei.value).startswith("invalid program") and "import os" in ei.value.source


def test_parent_prompt_carries_transfer_and_the_floor():
    from evolve.llm import ParentInfo, _render_parent
    text = _render_parent("Current program", ParentInfo(
        "C = 1.0\n\ndef predict_step_time(D):\n    return C * D\n", "", "", {"e2e_mean": 0.1},
        transfer="model:llama-2-7b: 52.4%\nload: 4.3%", floor="llama-2-70b: closest to the floor 1.02x at P=0"))
    assert "model:llama-2-7b: 52.4%\nload: 4.3%" in text and "closest to the floor 1.02x" in text
    assert "hardware floor" in text and "fitted without that data" in text
    bare = _render_parent("Current program", ParentInfo("C = 1.0\n\ndef predict_step_time(D):\n    return C * D\n"))
    assert "(not scored)" in bare and "(not computed)" in bare


def test_search_folds_constants_of_new_candidates():
    from evaluator.program import parse_program
    from evolve.search import _folded
    p = parse_program("EFFICIENCY = 2.0\nSCALE = 3.0\n\ndef predict_step_time(t_weights):\n"
                      "    return EFFICIENCY * SCALE * t_weights\n")
    q = _folded(p)
    assert len(q.constants) == 1 and list(q.constants.values()) == [6.0]
