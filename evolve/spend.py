"""LLM spend of a run and its cap (`evolve run --max-llm-cost USD --max-llm-tokens N`).

The cost cap cannot leak. Before every network call the caller reserves the most that call
can cost at the model's price (`LLMMutator.call_bound`: prompt bytes x input price +
max_tokens x output price); the call is made only if the spend so far, the reservations of
the calls in flight and this one fit under the cap, so concurrent calls cannot pass it
together. After the call its reservation is replaced by its real cost; a call stopped at its
deadline is counted at its reservation (the server may have billed it). A cost that cannot be
true (negative, NaN, more than `MAX_CALL_COST_USD`, more than `ABSURD_FACTOR` x price x tokens,
or more than the call could cost at the price) is an error naming the call: the call counts
at its reservation and `halt` stops every further call of the session. Without a known price
(`evolve run` refuses a cost cap then, unless --llm-price-in/--llm-price-out are given) only
the spend so far is checked. Cached replies cost nothing and are not counted. The count starts
from what the archive holds for the run, so a `--resume` keeps the spend of the sessions
before it (failed calls that may have been billed are stored with their counted cost). At the
cap, or after a halt, the search goes on with the offline operator.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

MAX_CALL_COST_USD = 10.0  # one completion costing more than this is a lie, not a bill
ABSURD_FACTOR = 100.0  # reported cost vs price x tokens


@dataclass
class Spend:
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    cost_usd: float = 0.0
    tokens: int = 0
    calls: int = 0
    reserved_usd: float = 0.0  # the bounds of the calls in flight
    halted: str | None = None  # why no further call may be made (an impossible reported cost)
    last_bound_usd: float | None = None  # the bound of the latest call: a call that no longer fits ends the LLM
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def of_run(cls, archive, run_id: str, max_cost_usd=None, max_tokens=None) -> "Spend":
        """The spend the archive recorded for the run so far, with the caps."""
        st = archive.llm_stats(run_id)
        cost = float(st["cost_usd"] or 0.0)
        return cls(max_cost_usd, max_tokens, cost if math.isfinite(cost) and cost > 0 else 0.0,
                   int((st["prompt_tokens"] or 0) + (st["completion_tokens"] or 0)), int(st["calls"] or 0))

    def _why(self, bound_usd: float | None) -> str | None:
        if self.halted:
            return self.halted
        if self.max_cost_usd is not None:
            if self.cost_usd >= self.max_cost_usd:
                return f"cost ${self.cost_usd:.4f} reached the cap ${self.max_cost_usd:.4f}"
            if bound_usd is not None and self.cost_usd + self.reserved_usd + bound_usd > self.max_cost_usd:
                return (f"cost ${self.cost_usd:.4f} spent, ${self.reserved_usd:.4f} in flight: the next call "
                        f"(up to ${bound_usd:.4f}) would pass the cap ${self.max_cost_usd:.4f}")
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return f"{self.tokens} tokens reached the cap {self.max_tokens}"
        return None

    def exhausted(self) -> str | None:
        """Why no further call may be made, or None."""
        with self._lock:
            return self._why(self.last_bound_usd)

    def reserve(self, bound_usd: float | None) -> tuple[int | None, str | None]:
        """Claim the next call: (its 1-based index in the run, None), or (None, why not).
        `bound_usd` is the most the call can cost (None: price unknown)."""
        if bound_usd is not None and not (math.isfinite(bound_usd) and bound_usd >= 0):
            bound_usd = None
        with self._lock:
            if bound_usd is not None:
                self.last_bound_usd = bound_usd
            why = self._why(bound_usd)
            if why:
                return None, why
            self.calls += 1
            self.reserved_usd += bound_usd or 0.0
            return self.calls, None

    def settle(self, bound_usd: float | None, cost_usd: float | None, prompt_tokens: int | None,
               completion_tokens: int | None) -> None:
        """Replace a call's reservation by what it is counted at."""
        if bound_usd is not None and not (math.isfinite(bound_usd) and bound_usd >= 0):
            bound_usd = None
        cost = float(cost_usd) if cost_usd is not None and math.isfinite(cost_usd) and cost_usd > 0 else 0.0
        with self._lock:
            self.reserved_usd = max(0.0, self.reserved_usd - (bound_usd or 0.0))
            self.cost_usd += cost
            self.tokens += max(0, int(prompt_tokens or 0)) + max(0, int(completion_tokens or 0))

    def halt(self, reason: str) -> None:
        """No further call in this session (the first reason is kept)."""
        with self._lock:
            if self.halted is None:
                self.halted = reason

    def add(self, cost_usd: float | None, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """Count one network call made without a reservation."""
        with self._lock:
            self.calls += 1
        self.settle(None, cost_usd, prompt_tokens, completion_tokens)

    def summary(self) -> dict:
        return {"calls": self.calls, "cost_usd": self.cost_usd, "tokens": self.tokens,
                "max_cost_usd": self.max_cost_usd, "max_tokens": self.max_tokens, "halted": self.halted}

    def text(self) -> str:
        caps = [f"${self.max_cost_usd:g}" if self.max_cost_usd is not None else None,
                f"{self.max_tokens} tokens" if self.max_tokens is not None else None]
        cap = ", ".join(c for c in caps if c)
        return (f"${self.cost_usd:.4f}, {self.tokens} tokens in {self.calls} calls" + (f" (cap {cap})" if cap else "")
                + (f"; stopped: {self.halted}" if self.halted else ""))
