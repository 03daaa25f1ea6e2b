"""LLM mutation operator: prompts, one litellm call, extraction, validation, cache.

    m = LLMMutator("openai/qwen2.5-coder", api_base="http://127.0.0.1:8000/v1", api_key="x")
    res = m.propose("improve", [ParentInfo(source, errors_table, worst_steps, objectives)],
                    Caps(), seed=7)
    if res.error is None: ... res.source ...

Prompt templates live in `prompts/*.txt` and are rendered with `str.format` (placeholders
are `{name}`; a literal brace would be written `{{`/`}}`; values substituted are not
re-parsed, so program sources and tables may contain braces):
  system.txt    {components} {example} {max_ops} {max_cond} {max_consts}
  parent.txt    {label} {source} {complexity} {objectives} {errors_table} {worst_steps} {transfer} {floor}
  improve.txt   {parent} {max_ops} {max_cond} {max_consts}
  simplify.txt  {parent} {max_ops} {max_cond} {max_consts}
  crossover.txt {parents} {n_parents} {max_ops} {max_cond} {max_consts}
Messages are [system, user]. Diffs in a reply are applied to parents[0].

Any model string litellm accepts works ("openai/<name>" + api_base for a local
OpenAI-compatible server, "ollama/llama3", hosted providers with keys from the usual
environment variables). `propose` never raises for LLM/transport problems: the reason
is in `LLMResult.error`. litellm is imported lazily (about 2 s) with
LITELLM_LOCAL_MODEL_COST_MAP=True set first so it never downloads its cost map.

Cache: any object with get(key) -> dict | None and put(key, record). Key = sha256 of
json.dumps({model, messages, temperature, max_tokens, seed}, sort_keys=True). Only
replies the server actually returned (HTTP 200 with a message) are stored; transport
errors are not. A hit makes no call and returns cached=True with the recorded tokens,
cost and latency of the original call (so budgets should count only cached=False).

Deadline: every network call is bounded by `timeout_s` in total (connect, first byte and the
whole reply, litellm's retries included). litellm's own `timeout` is an idle timeout (a
server trickling one byte a second never trips it), so the call runs in a daemon thread and
`propose` stops waiting at the deadline; the call is recorded as failed ("no complete reply
within ...") and counted at its spend reservation. Costs and the spend cap: `evolve.spend`;
an impossible reported cost is an error naming the call (its index in the run, the model)
and stops every further LLM call of the session.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import math
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from typing import Mapping, Sequence

from evaluator.components import COMPONENT_DOCS, COMPONENTS
from evaluator.objectives import Caps
from evaluator.program import Program, ProgramError, parse_program
from evolve.reply_parse import ReplyError, check_caps, extract_program
from evolve.spend import ABSURD_FACTOR, MAX_CALL_COST_USD

MESSAGE_OVERHEAD_TOKENS = 16  # chat-template tokens per message, on top of at most one token per byte

KINDS = ("improve", "simplify", "crossover")
MAX_ERROR_CHARS = 600
_STUCK: list[threading.Thread] = []  # live threads of calls stopped at their deadline (`_leave_if_stuck`)
_HOOKED = [False]  # `_leave_if_stuck` registered (once per process)
_EXIT_CODE = [0]  # the code the process is leaving with, as `evolve.cli.main` notes it


def note_exit_code(code) -> None:
    """The code the process is about to exit with (SystemExit's: None is 0, a message is 1)."""
    _EXIT_CODE[0] = code if isinstance(code, int) else (0 if code is None else 1)


def _leave_if_stuck() -> None:
    """At interpreter exit, first of the exit hooks: while a call stopped at its deadline is still
    running, flush and leave at once (os._exit). Its thread is a daemon, but the hooks that run
    before daemon threads are dropped (litellm's flush of its logging queue and its client
    clean-up, executor joins) can wait on the stalled connection: a CI run's child printed its
    deadline error and then did not exit in 60 s. Nothing of ours is lost: the archive commits
    each candidate in its own transaction."""
    if any(t.is_alive() for t in _STUCK):
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:  # noqa: BLE001 - a closed stream must not keep the process
                pass
        os._exit(_EXIT_CODE[0])

EXAMPLE_PROGRAM = '''OVERHEAD = 15000.0
PER_SEQ = 20.0
SCALE = 1.2


def predict_step_time(t_weights, t_decode_kv, t_prefill_gemm, B):
    gpu = SCALE * max(t_weights + t_decode_kv, t_prefill_gemm)
    return OVERHEAD + PER_SEQ * B + gpu'''


# ---------------------------------------------------------------- data types

@dataclass
class ParentInfo:
    source: str
    errors_table: str = ""
    worst_steps: str = ""
    objectives: dict[str, float] = field(default_factory=dict)
    transfer: str = ""  # held-out split errors, worst first
    floor: str = ""  # prediction against the hardware floor, per model


@dataclass
class LLMResult:
    source: str | None
    error: str | None
    prompt: list[dict[str, str]]
    reply_text: str | None
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    latency_s: float = 0.0
    cached: bool = False
    cache_key: str = ""
    kind: str = ""
    seed: int | None = None
    finish_reason: str | None = None
    program: Program | None = field(default=None, repr=False)  # set when source is valid

    @property
    def ok(self) -> bool:
        return self.error is None and self.source is not None


@dataclass
class ProposalRequest:
    kind: str
    parents: Sequence[ParentInfo]
    caps: Caps | None = None
    seed: int | None = None


class DictCache:
    """In-memory cache with the archive's interface (thread-safe)."""

    def __init__(self):
        self.data: dict[str, dict] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> dict | None:
        with self._lock:
            rec = self.data.get(key)
            return dict(rec) if rec is not None else None

    def put(self, key: str, record: dict) -> None:
        with self._lock:
            self.data[key] = dict(record)

    def __len__(self) -> int:
        return len(self.data)


# ---------------------------------------------------------------- prompts

_TEMPLATES: dict[str, str] = {}


def load_template(name: str) -> str:
    if name not in _TEMPLATES:
        _TEMPLATES[name] = resources.files("prompts").joinpath(f"{name}.txt").read_text(encoding="utf-8")
    return _TEMPLATES[name]


def _caps_kw(caps: Caps | None) -> dict[str, int]:
    """Template placeholders of the Go cap (default: Caps())."""
    caps = Caps() if caps is None else caps
    return {"max_ops": caps.ops, "max_cond": caps.conditionals, "max_consts": caps.constants}


def _fmt_objectives(obj: Mapping[str, float]) -> str:
    if not obj:
        return "  (not evaluated)"
    out = []
    for k, v in obj.items():
        try:
            out.append(f"  {k}: {float(v):.4g}")
        except (TypeError, ValueError):
            out.append(f"  {k}: {v}")
    return "\n".join(out)


def _complexity_text(source: str) -> str:
    try:
        c = parse_program(source).complexity
    except ProgramError as e:
        return f"unknown (program does not validate: {e})"
    return f"{c.operations} operations, {c.conditionals} conditionals, {c.constants} constants"


def _render_parent(label: str, p: ParentInfo) -> str:
    return load_template("parent").format(
        label=label,
        source=p.source.strip("\n"),
        complexity=_complexity_text(p.source),
        objectives=_fmt_objectives(p.objectives),
        errors_table=(p.errors_table or "(none)").rstrip(),
        worst_steps=(p.worst_steps or "(none)").rstrip(),
        transfer=(p.transfer or "(not scored)").rstrip(),
        floor=(p.floor or "(not computed)").rstrip(),
    )


def system_prompt(caps: Caps | None = None) -> str:
    comps = "\n".join(f"- {name}: {COMPONENT_DOCS.get(name, '')}" for name in COMPONENTS)
    return load_template("system").format(components=comps, example=EXAMPLE_PROGRAM, **_caps_kw(caps))


def build_prompt(kind: str, parents: Sequence[ParentInfo], caps: Caps | None = None) -> list[dict[str, str]]:
    """The chat messages [system, user] for one requested change."""
    if kind not in KINDS:
        raise ValueError(f"unknown prompt kind {kind!r} (expected one of {', '.join(KINDS)})")
    parents = list(parents)
    if kind in ("improve", "simplify") and len(parents) != 1:
        raise ValueError(f"{kind} takes exactly one parent, got {len(parents)}")
    if kind == "crossover" and not 2 <= len(parents) <= 3:
        raise ValueError(f"crossover takes two or three parents, got {len(parents)}")
    caps_kw = _caps_kw(caps)
    if kind == "crossover":
        blocks = [_render_parent(f"Parent {'ABC'[i]}", p) for i, p in enumerate(parents)]
        user = load_template("crossover").format(parents="\n".join(blocks), n_parents=len(parents), **caps_kw)
    else:
        user = load_template(kind).format(parent=_render_parent("Current program", parents[0]), **caps_kw)
    return [{"role": "system", "content": system_prompt(caps)}, {"role": "user", "content": user}]


def cache_key(model: str, messages, temperature: float, max_tokens: int, seed: int | None) -> str:
    payload = json.dumps({"model": model, "messages": messages, "temperature": temperature,
                          "max_tokens": max_tokens, "seed": seed}, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- litellm

_LITELLM = None
_IMPORT_LOCK = threading.Lock()


def _litellm():
    """Import litellm once, offline-safe (local cost map, no debug banners)."""
    global _LITELLM
    if _LITELLM is None:
        with _IMPORT_LOCK:
            if _LITELLM is None:
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                os.environ.setdefault("LITELLM_TELEMETRY", "False")
                import litellm

                litellm.suppress_debug_info = True
                litellm.telemetry = False
                _LITELLM = litellm
    return _LITELLM


def _short(e: BaseException) -> str:
    text = str(e)
    msg = (text if type(e).__name__ in text else f"{type(e).__name__}: {text}").replace("\n", " ")
    return msg if len(msg) <= MAX_ERROR_CHARS else msg[:MAX_ERROR_CHARS] + "..."


def _field(obj, name):
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _int_or_none(v) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


class LLMDeadline(Exception):
    """The call had no complete reply within its total deadline."""


def known_price(model: str) -> tuple[float, float] | None:
    """litellm's (input, output) USD per token for `model`, or None when it does not know them."""
    try:
        info = _litellm().get_model_info(model)
    except Exception:  # noqa: BLE001 - unmapped model
        return None
    pin, pout = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    try:
        pin, pout = float(pin), float(pout)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(pin) and math.isfinite(pout) and pin >= 0 and pout >= 0):
        return None
    return pin, pout


class LLMMutator:
    """Asks an LLM (through litellm) for a changed program; see the module doc."""

    def __init__(self, model: str, *, api_base: str | None = None, api_key: str | None = None,
                 temperature: float = 0.7, max_tokens: int = 2048, timeout_s: float = 60,
                 cost_per_input_token: float | None = None, cost_per_output_token: float | None = None,
                 cache=None, replay_only: bool = False, max_retries: int = 2, enforce_caps: bool = True,
                 extra_params: dict | None = None):
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.cost_per_input_token = cost_per_input_token
        self.cost_per_output_token = cost_per_output_token
        self.cache = cache
        self.replay_only = replay_only
        self.max_retries = max_retries
        self.enforce_caps = enforce_caps
        self.extra_params = dict(extra_params or {})
        self.spend = None  # an evolve.spend.Spend: its cap is checked before every network call
        self._price: tuple[float, float] | None | bool = False  # resolved on first use

    def price(self) -> tuple[float, float] | None:
        """(input, output) USD per token: the prices given, else litellm's, else None."""
        if self._price is False:
            given = self.cost_per_input_token is not None or self.cost_per_output_token is not None
            self._price = ((float(self.cost_per_input_token or 0.0), float(self.cost_per_output_token or 0.0))
                           if given else known_price(self.model))
        return self._price

    def call_bound(self, messages) -> float | None:
        """The most one call with these messages can cost at the price (USD), or None: a prompt
        has at most one token per UTF-8 byte (+ the chat template), a reply at most max_tokens."""
        price = self.price()
        if price is None:
            return None
        n_in = sum(len(str(m.get("content") or "").encode("utf-8")) + MESSAGE_OVERHEAD_TOKENS for m in messages)
        return n_in * price[0] + max(0, int(self.max_tokens)) * price[1]

    # ------------------------------------------------------------ one call
    def propose(self, kind: str, parents: Sequence[ParentInfo], caps: Caps | None = None,
                seed: int | None = None) -> LLMResult:
        messages = build_prompt(kind, parents, caps)  # programming errors (bad kind) do raise
        key = cache_key(self.model, messages, self.temperature, self.max_tokens, seed)
        res = LLMResult(source=None, error=None, prompt=messages, reply_text=None, model=self.model,
                        cache_key=key, kind=kind, seed=seed)

        record = None
        if self.cache is not None:
            try:
                record = self.cache.get(key)
            except Exception as e:  # a broken cache must not stop the loop
                record = None
                res.error = f"cache get failed: {_short(e)}"
        if record is not None:
            res.cached = True
            res.error = None
            res.reply_text = record.get("reply_text")
            res.prompt_tokens = record.get("prompt_tokens")
            res.completion_tokens = record.get("completion_tokens")
            res.cost_usd = record.get("cost_usd")
            res.latency_s = float(record.get("latency_s") or 0.0)
            res.finish_reason = record.get("finish_reason")
        elif self.replay_only:
            res.error = "replay: no cached reply"
            return res
        else:
            res.error = None
            bound, index = None, None
            if self.spend is not None:  # checked before every network call, with this call's bound reserved
                bound = self.call_bound(messages)
                index, capped = self.spend.reserve(bound)
                if capped:
                    res.error = f"llm spend cap reached: {capped}"
                    return res
            counted = None
            try:
                called, timed_out = self._call(messages, seed, res)
                counted = bound if timed_out else res.cost_usd
                if called or res.prompt_tokens is not None or res.completion_tokens is not None:
                    bad = self._impossible_cost(res, bound)
                    if bad is not None:
                        called, counted = False, bound
                        res.error = (f"llm call {index if index is not None else '?'} ({self.model}): {bad}; "
                                     "no further LLM calls in this session")
                        if self.spend is not None:
                            self.spend.halt(res.error)
                        res.cost_usd = bound
                if not called and counted:  # possibly billed: kept for --resume, never a cache hit
                    self._record_failure(key, res, counted, seed)
            finally:
                if self.spend is not None:
                    self.spend.settle(bound, counted, res.prompt_tokens, res.completion_tokens)
            if not called:
                return res
            if self.cache is not None:
                try:
                    self.cache.put(key, {
                        "model": self.model, "reply_text": res.reply_text, "prompt_tokens": res.prompt_tokens,
                        "completion_tokens": res.completion_tokens, "cost_usd": res.cost_usd,
                        "latency_s": res.latency_s, "finish_reason": res.finish_reason,
                        "temperature": self.temperature, "max_tokens": self.max_tokens, "seed": seed,
                        "created": time.time(),
                    })
                except Exception:  # noqa: S110 - caching is best effort
                    pass
        try:
            self._extract(res, parents, caps)
        except Exception as e:  # noqa: BLE001 - one hostile reply must never end the run
            res.program = None
            res.error = f"invalid program: reply could not be validated ({_short(e)})"
        return res

    def _completion(self, litellm, kwargs):
        """litellm.completion(**kwargs), waited for at most timeout_s in total (see the module doc).
        The thread of a call past its deadline is a daemon: it cannot hold the process."""
        box: dict = {}
        done = threading.Event()

        def target():
            try:
                box["resp"] = litellm.completion(**kwargs)
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box["exc"] = e
            finally:
                done.set()

        thread = threading.Thread(target=target, daemon=True, name="llm-call")
        thread.start()
        if not done.wait(self.timeout_s):
            if not _HOOKED[0]:  # threading's exit hooks run before atexit's and executor joins, the last registered first
                getattr(threading, "_register_atexit", atexit.register)(_leave_if_stuck)
                _HOOKED[0] = True
            _STUCK[:] = [t for t in _STUCK if t.is_alive()] + [thread]  # a long run drops the calls that ended
            raise LLMDeadline(f"no complete reply within the deadline of {self.timeout_s:g} s")
        if "exc" in box:
            raise box["exc"]
        return box["resp"]

    def _call(self, messages, seed, res: LLMResult) -> tuple[bool, bool]:
        """The HTTP call; fills res. (whether there is reply text to parse, whether the call was
        stopped at its deadline)."""
        try:
            litellm = _litellm()
        except Exception as e:
            res.error = f"llm call failed: {_short(e)}"
            return False, False
        t0 = time.perf_counter()
        try:
            kwargs = dict(model=self.model, messages=messages, api_base=self.api_base, api_key=self.api_key,
                          temperature=self.temperature, max_tokens=self.max_tokens, seed=seed,
                          timeout=self.timeout_s, max_retries=self.max_retries)
            kwargs.update(self.extra_params)
            resp = self._completion(litellm, kwargs)
        except LLMDeadline as e:
            res.latency_s = time.perf_counter() - t0
            res.error = f"llm call failed: {e}"
            return False, True
        except Exception as e:
            res.latency_s = time.perf_counter() - t0
            res.error = f"llm call failed: {_short(e)}"
            return False, False
        res.latency_s = time.perf_counter() - t0
        return self._read_response(resp, res), False

    def _read_response(self, resp, res: LLMResult) -> bool:
        try:
            usage = _field(resp, "usage")
            res.prompt_tokens = _int_or_none(_field(usage, "prompt_tokens"))
            res.completion_tokens = _int_or_none(_field(usage, "completion_tokens"))
            res.cost_usd = self._cost(resp, res)
            choices = _field(resp, "choices")
            if not choices:
                res.error = "llm reply has no choices"
                return False
            choice = choices[0]
            res.finish_reason = _field(choice, "finish_reason")
            content = _field(_field(choice, "message"), "content")
        except Exception as e:
            res.error = f"malformed llm response: {_short(e)}"
            return False
        if content is None:
            res.error = "llm reply has no content" + (
                f" (finish_reason={res.finish_reason})" if res.finish_reason else "")
            return False
        if not isinstance(content, str):
            res.error = f"llm reply content is {type(content).__name__}, not text"
            return False
        res.reply_text = content
        return True

    def _cost(self, resp, res: LLMResult) -> float | None:
        """The call's cost: what the server reports (usage.cost), else tokens x price, else
        litellm's figure; None when unknown. Checked by `_impossible_cost`."""
        reported = _field(_field(resp, "usage"), "cost")
        if reported is not None:
            try:
                return float(reported)
            except (TypeError, ValueError, OverflowError):
                return math.nan
        computed = self._computed_cost(res)
        if computed is not None:
            return computed
        try:
            known = _litellm().completion_cost(completion_response=resp, model=self.model)
        except Exception:  # noqa: BLE001 - unknown model
            return None
        return None if known is None else float(known)

    def _computed_cost(self, res: LLMResult) -> float | None:
        price = self.price()
        if price is None or (res.prompt_tokens is None and res.completion_tokens is None):
            return None
        return (res.prompt_tokens or 0) * price[0] + (res.completion_tokens or 0) * price[1]

    def _impossible_cost(self, res: LLMResult, bound: float | None) -> str | None:
        """Why the reported usage or cost cannot be true, or None."""
        if (res.prompt_tokens or 0) < 0 or (res.completion_tokens or 0) < 0:
            return (f"negative token count reported (prompt_tokens={res.prompt_tokens}, "
                    f"completion_tokens={res.completion_tokens})")
        cost = res.cost_usd
        if cost is None:
            if self.spend is not None and self.spend.max_cost_usd is not None:
                return "cost unknown under a cost cap (give the model's price: --llm-price-in/--llm-price-out)"
            return None
        if not math.isfinite(cost):
            return f"reported cost is not a number ({cost!r})"
        if cost < 0:
            return f"reported cost is negative (${cost:g})"
        if cost > MAX_CALL_COST_USD:
            return f"reported cost ${cost:g} is more than ${MAX_CALL_COST_USD:g} for one call"
        computed = self._computed_cost(res)
        if computed is not None and cost > ABSURD_FACTOR * computed + 1e-6:
            return f"reported cost ${cost:g} is more than {ABSURD_FACTOR:g}x price x tokens (${computed:g})"
        if bound is not None and cost > bound * (1 + 1e-9) + 1e-12:
            return (f"reported cost ${cost:g} is more than this call can cost at the price (${bound:g} for its "
                    f"prompt and max_tokens={self.max_tokens}); is the price right?")
        return None

    def _record_failure(self, key: str, res: LLMResult, counted: float, seed) -> None:
        """A failed call that may have been billed, stored under its own key so that `Spend.of_run`
        counts it on --resume (never returned as a cached reply)."""
        if self.cache is None:
            return
        try:
            self.cache.put(f"{key}:failed:{time.time_ns()}", {
                "model": self.model, "reply_text": None, "prompt_tokens": res.prompt_tokens,
                "completion_tokens": res.completion_tokens, "cost_usd": counted, "latency_s": res.latency_s,
                "error": res.error, "seed": seed, "created": time.time()})
        except Exception:  # noqa: S110 - best effort, like the cache
            pass

    def _extract(self, res: LLMResult, parents: Sequence[ParentInfo], caps: Caps | None) -> None:
        parent_source = parents[0].source if parents else None
        try:
            source = extract_program(res.reply_text, parent_source)
        except ReplyError as e:
            reason = str(e)
            if res.finish_reason == "length" and not reason.startswith("truncated"):
                reason = f"truncated (finish_reason=length, max_tokens={self.max_tokens}): {reason}"
            res.error = reason
            return
        res.source = source
        if any(p.source.strip() == source.strip() for p in parents[1:]):
            res.error = "unchanged: the proposed program is identical to a parent"
            return
        try:
            prog = parse_program(source)
        except ProgramError as e:
            res.error = f"invalid program: {e}"
            return
        if self.enforce_caps:
            over = check_caps(prog, Caps() if caps is None else caps)
            if over is not None:
                res.error = f"invalid program: complexity over the cap ({over})"
                return
        res.program = prog

    # ------------------------------------------------------------ several calls
    def propose_many(self, requests: Sequence, max_concurrency: int = 4) -> list[LLMResult]:
        """Run several proposals concurrently; results in input order.

        Each request is a ProposalRequest, a dict with its fields, or a tuple
        (kind, parents[, caps[, seed]]).
        """
        reqs = [self._as_request(r) for r in requests]
        if not reqs:
            return []
        if not self.replay_only:
            try:
                _litellm()  # import once, before the threads start
            except Exception:  # noqa: S110 - reported per request by propose
                pass
        workers = max(1, min(int(max_concurrency), len(reqs)))
        if workers == 1:
            return [self.propose(r.kind, r.parents, r.caps, r.seed) for r in reqs]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm") as pool:
            return list(pool.map(lambda r: self.propose(r.kind, r.parents, r.caps, r.seed), reqs))

    def propose_until_valid(self, kind: str, parents: Sequence[ParentInfo], caps: Caps | None = None, seed: int = 0,
                            attempts: int = 3) -> list[LLMResult]:
        """Retry with seeds seed, seed+1, ... until one result is valid; all results returned."""
        out = []
        for i in range(max(1, attempts)):
            r = self.propose(kind, parents, caps, seed + i)
            out.append(r)
            if r.ok:
                break
        return out

    @staticmethod
    def _as_request(r) -> ProposalRequest:
        if isinstance(r, ProposalRequest):
            return r
        if isinstance(r, Mapping):
            return ProposalRequest(**r)
        return ProposalRequest(*r)


# ---------------------------------------------------------------- from a run's configuration

def mutator_for(cfg, cache=None) -> LLMMutator:
    """The LLM operator of a run (`evolve.config.RunConfig`): its model, server, prices and deadline."""
    pin, pout = cfg.llm_prices_per_token()
    return LLMMutator(cfg.llm, api_base=cfg.llm_base, cache=cache, replay_only=bool(cfg.replay),
                      timeout_s=cfg.llm_timeout, cost_per_input_token=pin, cost_per_output_token=pout)


def unpriced_cap(cfg) -> str | None:
    """Why a run may not start: a cost cap on a model whose price nobody knows (litellm does not,
    and --llm-price-in/--llm-price-out were not given) could not be enforced. None when fine."""
    if not cfg.llm or cfg.max_llm_cost is None or cfg.replay:
        return None
    if cfg.llm_price_in is not None or cfg.llm_price_out is not None:
        if cfg.llm_price_in is None or cfg.llm_price_out is None:
            return "give both --llm-price-in and --llm-price-out (USD per million tokens)"
        return None
    if known_price(cfg.llm) is None:
        return (f"--max-llm-cost: litellm does not know the price of {cfg.llm!r}; give it with "
                "--llm-price-in USD_PER_MTOK --llm-price-out USD_PER_MTOK")
    return None
