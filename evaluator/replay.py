"""Replay every experiment of the judge's view in the simulator with a program and its constants.

The record it hands on is `Replay`: one `SimResult` per experiment, the steps simulated and,
if one experiment could not be replayed (no constants, an invalid prediction, a runaway), why;
the fit's refinement, the scoring and the identifiability report read it.
"""
from __future__ import annotations

from dataclasses import dataclass

from evaluator.judge_data import JudgeData
from evaluator.server_config import sim_limits
from evaluator.simulator import SimResult, simulate

MAX_STEPS = 5_000_000
RUNAWAY_FACTOR = 5
RUNAWAY_MIN_STEPS = 500_000


@dataclass(frozen=True)
class Replay:
    """The simulation of every experiment of a view, in its order; stopped at the first that
    failed (`error`), whose result is then absent."""
    results: dict[str, SimResult]
    error: str | None = None

    @property
    def n_steps(self) -> int:
        return sum(r.n_steps for r in self.results.values())


def simulate_one(data: JudgeData, f, consts, e, record=False, measured=True, timeouts=True,
                 spread=False) -> SimResult:
    """One experiment. A candidate needing many times the steps of the calibrated reference
    predicts step times far too short (requests decode alone): stop it early as a runaway
    instead of simulating tens of millions of steps."""
    limit = MAX_STEPS
    if data._reference is not None:
        limit = max(RUNAWAY_MIN_STEPS, RUNAWAY_FACTOR * len(data._reference[e.id]))
    mv = data.mv[e.id] if measured else data.mv_arch[e.id]
    return simulate(f, consts, mv, data.wl[e.id], e.kv_blocks, e.max_num_seqs,
                    e.max_batched_tokens, e.block_size, max_steps=limit, record=record,
                    timeout_us=data.timeout() if timeouts else 0.0, spread=spread, **sim_limits(e))


def replay(data: JudgeData, f, consts: dict, record=False, measured=True, spread=False) -> Replay:
    """Simulate every experiment of the view with its group's constants."""
    results = {}
    for e in data.exps:
        c = data.consts_for(e, consts)
        if c is None:
            return Replay(results, f"no constants for model {e.model}")
        r = simulate_one(data, f, c, e, record=record, measured=measured, spread=spread)
        if not r.ok:
            return Replay(results, replay_error(e, r))
        results[e.id] = r
    return Replay(results)


def replay_error(e, r: SimResult) -> str:
    """Why experiment `e`'s simulation `r` failed, in one line."""
    why = ("invalid prediction (NaN, inf or < 1 us)" if r.status == 1 else
           f"runaway simulation (over {r.n_steps} steps: predicted steps far too short)")
    return f"{e.id}: {why}"
