"""A run's configuration: built by one function for a new run and for `--resume`, stored whole.

The archive keeps `RunConfig.to_json()` in `runs.config`; `--resume RUN` rebuilds the same
value with `RunConfig.from_json` and takes only what may change between sessions (budget,
workers, and the LLM spend caps, prices and deadline when given again) from the command line, so a resumed run cannot silently change its seed, data,
operator or Go cap.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace

from evaluator.objectives import JUDGE_REVISION, Caps

HANDOVER_STARTS = 4  # the declared constants and 3 seeded multiples of them (evolve.handover)
HANDOVER_SHORTLIST = 4  # programs the hand-over fits again: the first in the declared-start order
RESUMABLE = ("budget", "workers", "executor", "ray_address", "reuse")  # what a --resume may change
SPEND_CAPS = ("max_llm_cost", "max_llm_tokens", "llm_price_in", "llm_price_out", "llm_timeout")  # kept on
# --resume unless given again


@dataclass(frozen=True)
class RunConfig:
    budget: int = 2000
    seed: int = 0
    data: str | None = None
    workers: int = 2
    llm: str | None = None
    llm_base: str | None = None
    generation_size: int = 8
    timeout_s: float = 60.0
    train_fraction: float = 0.7
    caps: Caps = field(default_factory=Caps)
    replay: str | None = None  # run id whose cached LLM replies are replayed
    cascade: bool = True
    holdout: bool = True  # score full evaluations under the held-out splits and rank on them
    executor: str = "local"  # "local" processes or "ray" (evolve.ray_pool); results do not depend on it
    ray_address: str | None = None  # a running Ray cluster; None starts a local one
    max_llm_cost: float | None = None  # USD for the whole run (evolve.spend); None: no cap
    max_llm_tokens: int | None = None
    llm_price_in: float | None = None  # USD per million prompt tokens; None: litellm's price, if it knows one
    llm_price_out: float | None = None  # USD per million completion tokens
    llm_timeout: float = 120.0  # total deadline of one LLM call in seconds (connect, first byte, whole reply)
    # fit starts the hand-over weighs its shortlist on (evolve.handover); 1: the declared start only
    handover_starts: int = HANDOVER_STARTS
    # the cascade promotes only screens whose every constant the data pins (evolve.search)
    pinned_only: bool = True
    # a screen stops replaying once it cannot clear the cascade's gate (evaluator.screen_race):
    # the same full evaluations, its record keeps the models it scored and its bounds
    screen_race: bool = True
    # the judge's revision the run was started under (evaluator.objectives.JUDGE_REVISION)
    judge: int = JUDGE_REVISION
    # a job the archive holds the answer to under the same judge is answered from it (evolve.judge_memo)
    reuse: bool = True

    def llm_prices_per_token(self) -> tuple[float | None, float | None]:
        """The given prices in USD per token (None where not given)."""
        return (None if self.llm_price_in is None else self.llm_price_in / 1e6,
                None if self.llm_price_out is None else self.llm_price_out / 1e6)

    def to_json(self) -> dict:
        """What the archive stores in runs.config (caps as {ops, conditionals, constants})."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping) -> "RunConfig":
        """Inverse of `to_json`. Unknown keys are ignored (records of other kinds, e.g. the
        baselines run); caps stored by older versions as a [ops, cond, consts] list are read."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw.setdefault("holdout", False)  # runs stored before held-out objectives ranked in-sample
        kw.setdefault("handover_starts", 1)  # runs stored before handed over on the declared start
        kw.setdefault("pinned_only", False)  # runs stored before promoted unpinned screens too
        kw.setdefault("screen_race", False)  # runs stored before screened every experiment
        kw.setdefault("judge", 1)  # runs stored before the judge had a revision
        caps = kw.get("caps")
        if isinstance(caps, Mapping):
            kw["caps"] = Caps(**caps)
        elif caps is not None:
            kw["caps"] = Caps(*caps)
        return cls(**kw)


def config_from_args(args, stored: Mapping | None = None, seed: int | None = None) -> RunConfig:
    """The RunConfig of `evolve run` / `evolve pilot`.

    New run (`stored` None): every field from the flags (`seed` overrides --seed, for pilot),
    the Go cap from --max-ops/--max-cond/--max-consts. Resume: the stored config of the run,
    with only RESUMABLE fields taken from the flags.
    """
    from_flags = {
        "budget": args.budget, "seed": args.seed if seed is None else seed, "data": args.data,
        "workers": args.workers, "llm": getattr(args, "llm", None), "llm_base": getattr(args, "llm_base", None),
        "generation_size": args.generation_size, "timeout_s": args.timeout,
        "train_fraction": args.train_fraction, "replay": getattr(args, "replay", None),
        "caps": Caps(args.max_ops, args.max_cond, args.max_consts),
        "holdout": not getattr(args, "no_holdout", False),
        "executor": getattr(args, "executor", "local"), "ray_address": getattr(args, "ray_address", None),
        "max_llm_cost": getattr(args, "max_llm_cost", None), "max_llm_tokens": getattr(args, "max_llm_tokens", None),
        "llm_price_in": getattr(args, "llm_price_in", None), "llm_price_out": getattr(args, "llm_price_out", None),
        "llm_timeout": getattr(args, "llm_timeout", None),
        "handover_starts": getattr(args, "handover_starts", HANDOVER_STARTS),
        "pinned_only": not getattr(args, "promote_unpinned", False),
        "screen_race": not getattr(args, "whole_screens", False),
        "reuse": not getattr(args, "no_reuse", False),
    }
    if stored is None:
        if from_flags["llm_timeout"] is None:
            del from_flags["llm_timeout"]
        return RunConfig(**from_flags)
    caps = {k: from_flags[k] for k in SPEND_CAPS if from_flags[k] is not None}
    return replace(RunConfig.from_json(stored), **{k: from_flags[k] for k in RESUMABLE}, **caps)
