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
"""
from __future__ import annotations

import hashlib
import json
import os
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

KINDS = ("improve", "simplify", "crossover")
MAX_ERROR_CHARS = 600

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
    except (TypeError, ValueError):
        return None


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
            capped = self.spend.exhausted() if self.spend is not None else None
            if capped:  # checked before every network call
                res.error = f"llm spend cap reached: {capped}"
                return res
            called = self._call(messages, seed, res)
            if self.spend is not None:
                self.spend.add(res.cost_usd, res.prompt_tokens, res.completion_tokens)
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

    def _call(self, messages, seed, res: LLMResult) -> bool:
        """The HTTP call; fills res. False if there is no reply text to parse."""
        t0 = time.perf_counter()
        try:
            litellm = _litellm()
            kwargs = dict(model=self.model, messages=messages, api_base=self.api_base, api_key=self.api_key,
                          temperature=self.temperature, max_tokens=self.max_tokens, seed=seed,
                          timeout=self.timeout_s, max_retries=self.max_retries)
            kwargs.update(self.extra_params)
            resp = litellm.completion(**kwargs)
        except Exception as e:
            res.latency_s = time.perf_counter() - t0
            res.error = f"llm call failed: {_short(e)}"
            return False
        res.latency_s = time.perf_counter() - t0
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
        litellm = _litellm()
        try:
            known = litellm.completion_cost(completion_response=resp, model=self.model)
        except Exception:  # unknown model: fall through to the given prices
            known = None
        given = self.cost_per_input_token is not None or self.cost_per_output_token is not None
        if known is not None and (known > 0 or not given):
            return float(known)
        if not given:
            return None
        if res.prompt_tokens is None and res.completion_tokens is None:
            return None
        return ((res.prompt_tokens or 0) * (self.cost_per_input_token or 0.0)
                + (res.completion_tokens or 0) * (self.cost_per_output_token or 0.0))

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
