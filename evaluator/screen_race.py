"""A screen that stops replaying once it cannot earn its full evaluation (issue 31, the cascade).

A screen replays every experiment to score the candidate in-sample, yet the search only asks
whether those scores clear its gate (`evaluator.screen_gate`). Most screens do not: in the
README job's archive of 2026-11-29, ~580 of ~850 valid screens. Here the screen replays one
model's experiments at a time (its request overheads come from its own requests, so its stage
rows are final once they are replayed), bounds the in-sample objectives from below with the
rows it has, and stops where the gate refuses the bounds. The models go cheapest first (fewest
steps in the reference simulation): the most evidence for the least replay.

What changes: only the stored record of a stopped screen (the rows of the models it replayed,
its bounds, why it stopped: `Evaluation.race`; no in-sample objectives). Which candidates are
promoted, and so every full evaluation, the frontier and the hand-over, stay as they were
(the README job of 2026-11-29: the same 2,000 evaluations but the 595 stopped screens' records).
A stopped screen is valid as far as it went: a program that predicts NaN only on a model it did
not replay (3 of those 595) is recorded as stopped, not invalid; it was refused either way.
A replay that fails (an invalid prediction, a runaway) reports the experiment a replay in the
view's own order would have reported first.
"""
from __future__ import annotations

from evaluator.judge_data import JudgeData
from evaluator.records import Evaluation
from evaluator.replay import Replay, replay, replay_error, simulate_one
from evaluator.objectives import in_sample_loss
from evaluator.scoring import model_rows, scored_stages
from evaluator.screen_gate import Gate, lower_bounds


def model_order(data: JudgeData) -> list[str]:
    """The view's models, fewest reference steps first (ties: first seen)."""
    first: dict[str, int] = {}
    steps: dict[str, int] = {}
    ref = data._reference or {}
    for i, e in enumerate(data.exps):
        first.setdefault(e.model, i)
        steps[e.model] = steps.get(e.model, 0) + len(ref.get(e.id, ()))
    return sorted(first, key=lambda m: (steps[m], first[m]))


def gated_replay(data: JudgeData, f, consts: dict, gate: Gate | None, program, record=False, measured=True,
                 spread=False) -> tuple[Replay, dict | None]:
    """`replay.replay` (and no stop), or for a screen of the in-sample view given a `gate`,
    `raced_replay`."""
    if gate is None or record or data.split is not None:
        return replay(data, f, consts, record=record, measured=measured, spread=spread), None
    return raced_replay(data, f, consts, gate, float(program.complexity.total), measured, spread)


def raced_replay(data: JudgeData, f, consts: dict, gate: Gate, complexity: float, measured=True,
                 spread=False) -> tuple[Replay, dict | None]:
    """Replay the view model by model until `gate` refuses the screen's lower bounds.

    Returns (the replay, None) when it ran to the end (the same Replay as `replay.replay`'s,
    results in the view's order) or failed, and (the partial replay, the stop) when it stopped:
    {"models": the models scored, "of": how many there are, "bounds": the lower bounds,
    "rows": their stage rows, "overheads": theirs}."""
    order = model_order(data)
    counts = scored_stages(data)
    results: dict = {}
    rows: list = []
    overheads: dict = {}
    for k, model in enumerate(order):
        for e in data.exps:
            if e.model != model:
                continue
            c = data.consts_for(e, consts)
            r = None if c is None else simulate_one(data, f, c, e, measured=measured, spread=spread)
            if r is None or not r.ok:
                return _first_failure(data, f, consts, results, measured, spread), None
            results[e.id] = r
        if k == len(order) - 1:
            break
        got, o = model_rows(data, Replay(results), model)
        rows += got
        overheads[model] = o.as_dict()
        bounds = lower_bounds(rows, *counts, data.has_failures, complexity)
        if bounds is not None and not gate.admits(bounds):
            return Replay(results), {"models": order[:k + 1], "of": len(order), "bounds": bounds,
                                     "rows": rows, "overheads": overheads}
    return Replay({e.id: results[e.id] for e in data.exps}), None


def _first_failure(data: JudgeData, f, consts, results: dict, measured, spread) -> Replay:
    """The failure a replay in the view's order reports: the experiments before the one that
    failed here, replayed where they were not, and the first that fails."""
    done = {}
    for e in data.exps:
        r = results.get(e.id)
        if r is None:
            c = data.consts_for(e, consts)
            if c is None:
                return Replay(done, f"no constants for model {e.model}")
            r = simulate_one(data, f, c, e, measured=measured, spread=spread)
        if not r.ok:
            return Replay(done, replay_error(e, r))
        done[e.id] = r
    return Replay(done)  # not reached: the caller saw one fail


def stopped_evaluation(consts: dict, stop: dict) -> Evaluation:
    """The record of a screen `raced_replay` stopped: valid (nothing was wrong with it), the
    rows and request overheads of the models it scored, no in-sample objectives, and its
    bounds with one line saying why it stopped (`Evaluation.race`)."""
    b = stop["bounds"]
    why = (f"stopped after {len(stop['models'])} of {stop['of']} models ({', '.join(stop['models'])}): "
           f"in-sample E2E at least {100 * b['e2e_mean']:.1f}% (loss at least {in_sample_loss(b):.3f}), "
           f"which the cascade's gate refuses; the other models were not replayed")
    return Evaluation(valid=True, constants={k: [float(x) for x in v] for k, v in consts.items()},
                      overheads=dict(stop["overheads"]), rows=tuple(stop["rows"]),
                      race={"models": list(stop["models"]), "of": stop["of"], "bounds": dict(b), "why": why})
