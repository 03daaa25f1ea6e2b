"""LLM spend of a run and its cap (`evolve run --max-llm-cost USD --max-llm-tokens N`).

The cap is checked before every network call (cached replies cost nothing and are not
counted); calls already in flight when it is reached may pass it by at most their own cost.
The count starts from what the archive holds for the run, so a `--resume` keeps the spend of
the sessions before it. At the cap the search goes on with the offline operator.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Spend:
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    cost_usd: float = 0.0
    tokens: int = 0
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def of_run(cls, archive, run_id: str, max_cost_usd=None, max_tokens=None) -> "Spend":
        """The spend the archive recorded for the run so far, with the caps."""
        st = archive.llm_stats(run_id)
        return cls(max_cost_usd, max_tokens, float(st["cost_usd"] or 0.0),
                   int((st["prompt_tokens"] or 0) + (st["completion_tokens"] or 0)), int(st["calls"] or 0))

    def exhausted(self) -> str | None:
        """Why no further call may be made, or None."""
        with self._lock:
            if self.max_cost_usd is not None and self.cost_usd >= self.max_cost_usd:
                return f"cost ${self.cost_usd:.4f} reached the cap ${self.max_cost_usd:.4f}"
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return f"{self.tokens} tokens reached the cap {self.max_tokens}"
            return None

    def add(self, cost_usd: float | None, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """Count one network call."""
        with self._lock:
            self.calls += 1
            self.cost_usd += float(cost_usd or 0.0)
            self.tokens += int(prompt_tokens or 0) + int(completion_tokens or 0)

    def summary(self) -> dict:
        return {"calls": self.calls, "cost_usd": self.cost_usd, "tokens": self.tokens,
                "max_cost_usd": self.max_cost_usd, "max_tokens": self.max_tokens}

    def text(self) -> str:
        caps = [f"${self.max_cost_usd:g}" if self.max_cost_usd is not None else None,
                f"{self.max_tokens} tokens" if self.max_tokens is not None else None]
        cap = ", ".join(c for c in caps if c)
        return f"${self.cost_usd:.4f}, {self.tokens} tokens in {self.calls} calls" + (f" (cap {cap})" if cap else "")
