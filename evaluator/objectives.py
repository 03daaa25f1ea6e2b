"""What a candidate is scored on, and the Go cap it must fit: one definition for every package.

The judge fills objectives, the search ranks them, the archive stores them as columns and the
views print them; all of them read the names, order, labels and the invalid value from here.
Every objective is minimised. `ORDER` is the vector order handed to DEAP (NSGA-II, fronts).
See docs/architecture.md ("Records") for where each record is produced and consumed.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

INVALID = 1e9  # what a missing, NaN or infinite objective counts as in any ranking
# What the objectives mean, revised when the judge scores the same predictions differently; a
# run stores the revision it was started under (`RunConfig.judge`), so a resumed run says when
# its stored scores and its new ones were made under different rules.
#   1: until 2026-11-28;
#   2: LOMO ranks its worst held-out model (`evaluator.holdout.worst_model`), and the overload
#      objective also scores a collapse only the simulation has (`evaluator.holdout.collapsed`).
JUDGE_REVISION = 2


@dataclass(frozen=True)
class Objective:
    name: str  # key in Evaluation.objectives and archive column name
    label: str  # short human label for tables and plots
    percent: bool  # a relative error shown as a percentage (else a plain count)
    points: bool = False  # a difference of two fractions, shown in percentage points


OBJECTIVES: tuple[Objective, ...] = (
    Objective("e2e_mean", "E2E", True),
    Objective("e2e_worst", "worst E2E", True),
    Objective("ttft_mean", "TTFT", True),
    Objective("itl_mean", "ITL", True),
    Objective("step_mape", "step MAPE", True),
    Objective("complexity", "complexity", False),
    # mean E2E error on data the constants never saw (evaluator.holdout)
    Objective("lowo_e2e", "LOWO E2E", True),
    Objective("lomo_e2e", "LOMO worst-model E2E", True),  # its worst held-out model (holdout.worst_model)
    Objective("load_e2e", "high-load E2E", True),
    # long decode: fitted on the shorter-context workloads, scored on the long one (E2E; per-token
    # time where the measurement overloaded: `evaluator.holdout.ranked_error`); and the failed
    # fraction of the held-out overloaded stages (evaluator.holdout; only on data that has them)
    Objective("long_e2e", "long-decode error", True),
    Objective("overload_fail", "overload failures", True, points=True),
)
ORDER: tuple[str, ...] = tuple(o.name for o in OBJECTIVES)  # every objective (archive columns)
BY_NAME: dict[str, Objective] = {o.name: o for o in OBJECTIVES}
HELDOUT: tuple[str, ...] = ("lowo_e2e", "lomo_e2e", "load_e2e")
# Held-out regimes that exist only on data that has them (a workload with much longer contexts;
# overloaded stages): ranked beside HELDOUT where every ranked program has them, never blended.
REGIMES_OPTIONAL: tuple[str, ...] = ("long_e2e", "overload_fail")
REGIMES: tuple[str, ...] = (*HELDOUT, *REGIMES_OPTIONAL)
# The vectors handed to NSGA-II: held-out errors and complexity where a run scores the held-out
# splits (in-sample errors are then a reported diagnostic only), else the in-sample errors.
HELDOUT_ORDER: tuple[str, ...] = (*HELDOUT, "complexity")
IN_SAMPLE_ORDER: tuple[str, ...] = ("e2e_mean", "e2e_worst", "ttft_mean", "itl_mean", "step_mape", "complexity")
# Mean error of the predicted failure fraction (|pred - measured|, 0.01 = one point), set by the
# judge only on data where some measured request failed (docs/failed_requests.md): there it is
# ranked too, elsewhere it is absent, so objective vectors on data without failures keep their
# length and values. Kept in the evaluation's objectives JSON, not an archive column.
FAILURE = "fail_mean"
FAILURE_LABEL = "failures (pts)"


def has_heldout(objectives: Mapping | None) -> bool:
    """Whether these objectives carry every held-out error (finite or not)."""
    return bool(objectives) and all(k in objectives for k in HELDOUT)


def vector_order(objective_dicts) -> tuple[str, ...]:
    """The vector order for ranking these together: held-out only if every one has them, with
    each optional regime (long decode, overload) that every one has after them; the in-sample
    failure error last if every one has it (data with failures) and no held-out overload
    objective stands for it."""
    dicts = [d or {} for d in objective_dicts]
    heldout = bool(dicts) and all(has_heldout(d) for d in dicts)
    order = HELDOUT_ORDER if heldout else IN_SAMPLE_ORDER
    if heldout:
        order = (*order, *(k for k in REGIMES_OPTIONAL if all(k in d for d in dicts)))
    if dicts and all(FAILURE in d for d in dicts) and "overload_fail" not in order:
        order = (*order, FAILURE)
    return order


def finite_or_none(value) -> float | None:
    """A float for display and strict JSON: None for missing, non-numeric, NaN or infinite."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def sortable_or_none(value) -> float | None:
    """A float for a SQL column: None for missing, non-numeric or NaN; infinities are kept
    (an invalid candidate's errors), so they sort after every finite value."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def ranked(value) -> float:
    """A float for ranking: missing, non-numeric, NaN or infinite count as INVALID."""
    x = finite_or_none(value)
    return INVALID if x is None else min(x, INVALID)


def objective_vector(objectives: Mapping | None, order: tuple[str, ...] | None = None) -> tuple[float, ...]:
    """Minimisation vector in `order` (default: `vector_order` of this one); anything not
    finite is INVALID."""
    objectives = objectives or {}
    order = order or vector_order([objectives])
    return tuple(ranked(objectives.get(k)) for k in order)


def invalid_objectives(complexity: float | None = None) -> dict[str, float]:
    """Objectives of a candidate that could not be scored: every error infinite."""
    out = {k: math.inf for k in ORDER}
    if complexity is not None:
        out["complexity"] = float(complexity)
    return out


def in_sample_loss(objectives: Mapping) -> float:
    """Mean E2E error, ties broken by ITL and TTFT error, on the in-sample (time) split; a
    missing or non-finite term counts as INVALID."""
    f = lambda k: ranked(objectives.get(k))  # noqa: E731
    return f("e2e_mean") + 0.25 * f("itl_mean") + 0.1 * f("ttft_mean") + _failure_term(objectives)


def _failure_term(objectives: Mapping) -> float:
    """The failure error where the data has failures (absent elsewhere: adds nothing)."""
    return ranked(objectives.get(FAILURE)) if FAILURE in objectives else 0.0


def regime_errors(objectives: Mapping) -> dict[str, float]:
    """The held-out error of each regime this evaluation was scored on (`REGIMES`), as ranked
    (INVALID for a regime whose split could not be scored)."""
    return {k: ranked(objectives.get(k)) for k in REGIMES if k in objectives}


def selection_loss(objectives: Mapping) -> float:
    """One number to rank candidates (cell elitism, keeping a refit, the program a run hands
    over): where the held-out regimes were scored, the WORST of them (leave one workload out,
    one model out, the high load out, long decode, overload failures): a program is only as
    good as the regime it extrapolates worst to, so one bad regime is not diluted by good ones;
    their mean, then the in-sample loss, break ties. Else `in_sample_loss`."""
    if has_heldout(objectives):
        errs = list(regime_errors(objectives).values())
        return max(errs) + 0.01 * sum(errs) / len(errs) + 1e-4 * in_sample_loss(objectives)
    return in_sample_loss(objectives)



COMPETITIVE = 2.0  # ideal_point: programs whose worst regime is at most this times the lowest worst


def ideal_point(objective_dicts) -> dict[str, float]:
    """Per held-out regime that every program given was scored on, the lowest error reached by a
    *competitive* program: one scored in every regime whose worst regime is at most COMPETITIVE
    times the lowest worst regime of any (`handover_regrets` measures from it).

    Why not the lowest of all: a corner of the front that gives up another regime entirely sets
    a floor no usable program reaches, and the distance to it then decides alone. The trace run
    of 2026-11-27 (16 experiments, 122 pinned programs): the overload ideal came from #1742,
    whose LOWO and high-load splits could not be scored, and next from #1496, 406% off on an
    unseen model; every program then gave up 11-19 points on overload, and 0.3-point differences
    there outweighed 4 points on long decode. Over the competitive programs (their worst regime
    at most 2x the best one's: 1.5x picks the same ideal there and in the README job's archive;
    3x admits the overload of #1143, 52% off on long decode) the ideal is what a program can reach without
    giving up another regime. No program scored in every regime: the lowest finite of each."""
    scored = [o for o in (o or {} for o in objective_dicts) if has_heldout(o)]
    keys = [k for k in REGIMES if scored and all(k in o for o in scored)]
    full = [o for o in scored if keys and all(ranked(o.get(k)) < INVALID for k in keys)]
    if full:
        worst = [max(ranked(o.get(k)) for k in keys) for o in full]
        bar = COMPETITIVE * min(worst)
        comp = [o for o, w in zip(full, worst) if w <= bar]
        return {k: min(ranked(o.get(k)) for o in comp) for k in keys}
    ideal = {}
    for k in keys:
        finite = [v for v in (ranked(o.get(k)) for o in scored) if v < INVALID]
        if finite:
            ideal[k] = min(finite)
    return ideal


def handover_regrets(objective_dicts, ideal: Mapping | None = None) -> list[float]:
    """The rule a run hands its program over by (`Archive.best_transfer`): each program's largest
    distance, over the held-out regimes, from the lowest error any of the programs given reached
    in that regime (the ideal point; Chebyshev distance, as in compromise programming).

    Why not the raw worst regime (`selection_loss`, still the search's own ranking): a regime
    can have a floor no program in reach gets under (mixtral's failed fraction under overload:
    68.6 points measured, 0 predicted by every program of a 2,000-proposal run), and the worst
    regime then ranks on that regime alone. A trace run on the 16 experiments so handed over a
    program 7.9 points worse on long decode than another that gave up 0.4-2.4 points elsewhere.
    Measured from each regime's best (among the competitive programs: `ideal_point`), every
    regime counts by what a program gives up there. Ties: `selection_loss`. Programs without held-out errors: `selection_loss` alone.
    `ideal`: measure from this point instead (`ideal_point` of a larger set: the hand-over's
    worst-start figures are measured from the run's ideal, `evolve.handover`)."""
    objs = [o or {} for o in objective_dicts]
    ideal = ideal_point(objs) if ideal is None else ideal
    out = []
    for o in objs:
        if not has_heldout(o) or not ideal:
            out.append(selection_loss(o))
            continue
        out.append(max(ranked(o.get(k)) - v for k, v in ideal.items()))
    return out

@dataclass(frozen=True)
class Caps:
    """The Go complexity cap (docs/architecture.md, "Go target"), carried from the CLI to the mutators, the LLM
    prompt, the judge's reports and `emit-go`."""
    ops: int = 30
    conditionals: int = 3
    constants: int = 10

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.ops, self.conditionals, self.constants)

    def __str__(self) -> str:
        return f"{self.ops} operations, {self.conditionals} conditionals, {self.constants} constants"
